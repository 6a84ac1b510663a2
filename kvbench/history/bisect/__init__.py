"""Which commit made one series worse, measured fresh: abtest (the interleaved A/B test),
measurer (one series through the real asv), search (the bisection: `BisectOutcome`) and the
`kvbench bisect` command."""
