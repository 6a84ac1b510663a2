"""The bottom layer of kvbench: facts every other layer shares and that depend on nothing else
in kvbench (where things are stored, which environment variables are kvbench's). Modules here
import only the standard library and small pure-Python libraries, never torch or a kernel."""
