"""asv glue and the verdict engine (DESIGN.md's target layout): what sits on top of asv."""
