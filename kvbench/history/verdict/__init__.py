"""The verdict engine over asv's stored results: results, sidecar, noise, changepoints, context,
host_speed, regressions (the engine: `Verdicts`), text and page (its table and HTML), the
`kvbench regressions` command, and simulate (the engine on synthetic histories)."""
