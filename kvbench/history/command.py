"""The one shape of every history command (asv's Command: `setup_arguments` + `run_from_args`).

A command is one module beside the logic it drives, holding:

- `NAME` (the word after `kvbench`), `HELP` (its line in `kvbench --help`) and `DESCRIPTION`
  (the text of its own `--help`; None for none),
- `add_arguments(parser)`: every option, with its default and help text,
- `run(args) -> int`: the exit status; bad input goes through `args.parser.error` (exit 2),
- optionally `FORWARDS_UNKNOWN = True`: options it does not know are handed on in `args.rest`
  (`kvbench publish` passes them to `asv publish`).

Command modules import only the standard library at module level, so `kvbench --help` and a
command's `--help` cost no torch, Triton or asv import; the logic is imported inside `run`.
`main(module, argv)` parses and runs a command: `kvbench NAME ...` and `python -m <module>`
both come here.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType


def build_parser(command: ModuleType) -> argparse.ArgumentParser:
    """The command's own parser: prog `kvbench NAME`, its description, its arguments."""
    parser = argparse.ArgumentParser(prog=f"kvbench {command.NAME}",
                                     description=command.DESCRIPTION)
    command.add_arguments(parser)
    return parser


def main(command: ModuleType, argv: Sequence[str] | None = None) -> int:
    """Parse `argv` with the command's parser and run it; its exit status."""
    parser = build_parser(command)
    if getattr(command, "FORWARDS_UNKNOWN", False):
        args, rest = parser.parse_known_args(argv)
        args.rest = rest
    else:
        args = parser.parse_args(argv)
    args.parser = parser
    from kvbench.core.paths import CacheRootError
    from kvbench.core.processes import interruptible

    try:
        with interruptible():  # SIGTERM stops a command as a Ctrl-C does (its children too)
            return int(command.run(args) or 0)
    except KeyboardInterrupt as exc:  # its cleanup has run; one line, the shell's status
        how = f" by {exc}" if str(exc) else ""
        print(f"{parser.prog}: interrupted{how}", file=sys.stderr)
        return 130
    except CacheRootError as exc:  # an unusable KVBENCH_CACHE_DIR (npm/): one line, exit 2
        parser.exit(2, f"{parser.prog}: {exc}\n")


def add_config_argument(parser: argparse.ArgumentParser, what: str = "") -> None:
    """The commands' --config: the asv config file they read, asv.conf.json by default
    (`what` says what the command takes from it)."""
    parser.add_argument("--config", default="asv.conf.json",
                        help=f"asv config{what} (default: %(default)s)")


def positive_int(text: str) -> int:
    """argparse type of a count that must be >= 1 (the error names the value it got)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def percent(text: str) -> float:
    """argparse type of a relative effect given in percent ('2' or '2%' -> 0.02)."""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a percentage > 0 (e.g. 2 or 2%), got {text!r}") from None
    if not 0 < value < 1000:
        raise argparse.ArgumentTypeError(f"expected a percentage in (0, 1000), got {text!r}")
    return value / 100


def check_machine_name(name: object) -> str:
    """`name` if it can be one folder of results/ (results/<machine>/); ValueError otherwise.
    Machine names come from the command line and from files: one with a path separator or a
    `..` would make a reader look outside the results folder, and an empty one is not a
    machine (it must not fall back to this host's silently)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a machine name must be a non-empty string, got {name!r}")
    if "/" in name or "\\" in name or "\0" in name or name in (".", ".."):
        raise ValueError(f"machine name {name!r} is not one folder name (no '/', '\\', NUL, "
                         "'.' or '..')")
    if name == "version":  # ~/.asv-machine.json's own key: asv would overwrite the entry
        raise ValueError("machine name 'version' is the key asv's machine file keeps its "
                         "format version under; choose another name")
    return name


def machine_name(text: str) -> str:
    """argparse type of --machine: check_machine_name's rules, as a usage error."""
    try:
        return check_machine_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def check_config(args: argparse.Namespace) -> None:
    """Exit 2 (a usage error naming it) unless args.config is an asv.conf.json asv accepts
    (config_problem): asv and kvbench would otherwise stop with a traceback on it."""
    problem = config_problem(args.config)
    if problem:
        args.parser.error(problem)


def config_problem(path: str) -> str | None:
    """None when `path` is a regular file this process can read holding a JSON object as
    asv reads it (comments allowed), its path keys strings, and asv's Config.load accepts it
    (a repo named); else what is wrong, naming --config and the file."""
    import os

    from asv import util as asv_util

    if not os.path.isfile(path):
        return f"--config {path}: no such file (name an asv.conf.json)"
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        return f"--config {path}: cannot read it ({exc.strerror})"
    try:
        conf = asv_util.load_json(path, js_comments=True)
    except (ValueError, asv_util.UserError) as exc:
        return f"--config {path}: not an asv.conf.json asv can read ({exc})"
    if not isinstance(conf, dict):
        return f"--config {path}: an asv.conf.json is a JSON object, got {type(conf).__name__}"
    for key in ("repo", "results_dir", "html_dir", "env_dir", "benchmark_dir"):
        if key in conf and not isinstance(conf[key], str):
            return f"--config {path}: {key} must be a path (a string), got {conf[key]!r}"
    from asv.config import Config

    try:
        Config.load(path)
    except (ValueError, asv_util.UserError) as exc:
        return f"--config {path}: asv refuses it ({exc})"
    return None

