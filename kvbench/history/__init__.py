"""The history layer, in rooms by subsystem: asv/ (glue: environment plugin, machine record,
benchmarks.json), verdict/ (the verdict engine over asv's results and what kvbench keeps beside
them), bisect/ (fresh A/B measurements and the search), dashboard/ (publish and preview).
command.py is the one shape of every history command."""
