"""The published dashboard: `asv publish` with offline assets and kvbench's regressions page
(publish), the `kvbench publish` and `kvbench preview` commands."""
