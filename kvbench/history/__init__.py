"""The history layer: asv glue and the verdict engine (regressions, bisect) over asv's results."""
