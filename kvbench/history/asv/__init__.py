"""asv glue: the environment plugin asv loads (asv_env), the machine record (machine,
`kvbench machine`) and results/benchmarks.json from the suite (suite, `kvbench discover`)."""
