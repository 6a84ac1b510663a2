"""asv glue and the verdict engine: what kvbench builds on top of asv's results."""
