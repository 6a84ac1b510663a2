"""The bottom layer of kvbench: facts every other layer shares and that depend on nothing else
in kvbench: where things are stored (paths), which environment variables are kvbench's and
which kernel each selects (env), what a device argument means (device), the KV dtype table
(dtypes), atomic JSON files (jsonfile) and the live status line (progress). Modules here import
only the standard library, torch and small pure-Python libraries, never a kernel."""
