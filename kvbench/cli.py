"""The `kvbench` command.

Each subcommand imports its module lazily: `kvbench env` must answer on a machine where a
Triton kernel would not even compile, and a CLI that imports every kernel at start pays
Triton's import cost for nothing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence

from kvbench.history.command import positive_int
from kvbench.measure.options import add_table_arguments, add_tune_arguments


def _cmd_env(args: argparse.Namespace) -> int:
    """What this machine is: device, peaks, L2, versions, and the selector variables.

    Exit 2 when a selector variable names no row, or KVBENCH_CHECK is neither 0 nor 1: every
    dispatch of that op (every CUDA op call) would raise, so say it here, before a run, with
    the values accepted. A KVBENCH_* variable kvbench does not read (a misspelt selector) is
    listed as a warning ("unknown_variables" in --json)."""
    from kvbench.core.env import SELECTOR_VARS, unknown_setting_messages
    from kvbench.dispatch.core import selector_problem
    from kvbench.harness import device_peaks, metadata
    from kvbench.harness.calibrate import load_ceilings
    from kvbench.harness.meta import format_metadata
    from kvbench.kernels._validate import safe_mode

    meta = metadata(command="kvbench env")
    peaks = device_peaks()
    ceilings = load_ceilings(peaks.name)
    problems = [p for p in map(selector_problem, SELECTOR_VARS) if p is not None]
    settings = []
    try:
        safe_mode()
    except ValueError as exc:
        settings.append(str(exc))
    unknown = unknown_setting_messages()  # misspelt variables: reported, not an error
    if args.json:
        meta["ceilings"] = None if ceilings is None else dataclasses.asdict(ceilings)
        meta["selector_problems"] = problems
        meta["setting_problems"] = settings
        meta["unknown_variables"] = unknown
        print(json.dumps(meta, indent=2, default=str))
        return 2 if problems or settings else 0
    print(format_metadata(meta))
    for problem in problems:
        print(f"invalid selector: {problem}")
    for problem in settings:
        print(f"invalid setting: {problem}")
    for warning in unknown.values():
        print(f"warning: {warning}")
    if ceilings is None:
        print("measured ceilings: none stored for this device (run `kvbench calibrate`)")
    else:
        print(
            f"measured ceilings ({ceilings.measured_at}): copy {ceilings.copy_gbps:.0f} GB/s, "
            f"read {ceilings.read_gbps:.0f} GB/s, write {ceilings.write_gbps:.0f} GB/s"
        )
    return 2 if problems or settings else 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure copy / read / write bandwidth with the harness and store them per device name."""
    from kvbench.core import progress
    from kvbench.harness.calibrate import cache_dir, calibrate

    kwargs = {} if args.size_mib is None else {"size_bytes": args.size_mib * 2**20}
    try:
        with progress.status("kvbench calibrate: measuring copy, read and write bandwidth"):
            ceilings = calibrate(**kwargs)
    except ValueError as exc:  # a size that cannot fit, an unusable cache: one line, exit 2
        print(f"kvbench calibrate: {exc}", file=sys.stderr)
        return 2
    print(
        f"{ceilings.device_name}: copy {ceilings.copy_gbps:.0f} GB/s (read+write), "
        f"read {ceilings.read_gbps:.0f} GB/s, write {ceilings.write_gbps:.0f} GB/s"
    )
    print(f"stored under {cache_dir()}")
    return 0


#: The history commands (kvbench.history.command gives them one shape: NAME, HELP, DESCRIPTION,
#: add_arguments, run), by name: the module that holds each. Each gets its own parser, handed
#: every argument after the name before `kvbench`'s parser runs (argparse.REMAINDER as a
#: subparser's only positional does not capture options that come first; `kvbench publish`
#: forwards the options it does not know to asv).
HISTORY_COMMANDS = {
    "machine": "kvbench.history.asv.machine_cmd",
    "publish": "kvbench.history.dashboard.publish_cmd",
    "preview": "kvbench.history.dashboard.preview_cmd",
    "regressions": "kvbench.history.gate.regressions_cmd",
    "compare": "kvbench.history.gate.compare_cmd",
    "bisect": "kvbench.history.bisect.bisect_cmd",
    "discover": "kvbench.history.asv.discover_cmd",
    "record": "kvbench.history.asv.record_cmd",
    "merge": "kvbench.history.asv.merge_cmd",
}


def _history_command(name: str):
    import importlib

    return importlib.import_module(HISTORY_COMMANDS[name])


def _add_history_command(sub, name: str) -> None:
    """List a history command in `kvbench --help` (its options are its own parser's)."""
    sub.add_parser(name, help=_history_command(name).HELP, add_help=False)


def _cmd_plot(args: argparse.Namespace) -> int:
    """The roofline picture of a stored table (`kvbench table OP --json FILE`)."""
    from kvbench.measure.plots import plot_roofline, plotting_missing

    if plotting_missing():
        print(f"kvbench plot: {plotting_missing()}", file=sys.stderr)
        return 2
    try:
        with open(args.table_json, encoding="utf-8") as fh:
            table = json.load(fh)
        out = plot_roofline(table, args.path)
    except (OSError, ValueError) as exc:
        print(f"kvbench plot: {args.table_json}: {exc}", file=sys.stderr)
        return 2
    print(f"roofline plot: {out}")
    return 0


def _cmd_tune(args: argparse.Namespace) -> int:
    from kvbench.core import progress
    from kvbench.measure.tune import main as tune_main

    with progress.status(f"kvbench tune {args.op}: measuring every verified row"):
        return tune_main(args.argv)


def _cmd_table(args: argparse.Namespace) -> int:
    from kvbench.measure.table import main as table_main

    return table_main(args.argv)


def _cmd_main(args: argparse.Namespace) -> int:
    """The main job: the environment report first (a few seconds), then a
    correctness-checked table for every op (minutes, with a live status on a terminal)."""
    print("== environment (kvbench env)", flush=True)
    env_status = _cmd_env(argparse.Namespace(json=False))
    print(flush=True)
    from kvbench.measure.table import run_all

    return run_all(json_dir=args.json_dir) | (1 if env_status else 0)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvbench",
        description="Per-commit performance history for KV-cache kernels.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("env", help="device, peaks, L2, versions, selector variables")
    p.add_argument("--json", action="store_true", help="print the metadata as JSON")
    p.set_defaults(func=_cmd_env)

    p = sub.add_parser("calibrate", help="measure and store copy/read/write ceilings")
    p.add_argument("--size-mib", type=positive_int, default=None,
                   help="buffer size in MiB (default per device: 2048 on CUDA, 256 on a CPU)")
    p.set_defaults(func=_cmd_calibrate)

    for name in ("machine", "publish", "preview", "regressions"):
        _add_history_command(sub, name)

    for name, func, add_arguments, text in (
        ("tune", _cmd_tune, add_tune_arguments,
         "measure every verified row and store the perf table dispatch ranks on"),
        ("table", _cmd_table, add_table_arguments,
         "correctness-checked report table of every row and peer"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        add_arguments(p)
        p.set_defaults(func=func)

    for name in ("bisect", "discover", "record"):
        _add_history_command(sub, name)

    p = sub.add_parser("plot", help="draw the roofline of a stored table JSON "
                       "(kvbench table OP --json FILE) to PATH")
    p.add_argument("table_json", metavar="TABLE_JSON")
    p.add_argument("path", metavar="PATH", help="picture to write (.png, .svg, .pdf)")
    p.set_defaults(func=_cmd_plot)

    p = sub.add_parser("main", help="the main job: env + a table for every op this device runs")
    p.add_argument("--json-dir", default=None, help="also write each table as JSON here")
    p.set_defaults(func=_cmd_main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in HISTORY_COMMANDS:
        from kvbench.history import command

        return command.main(_history_command(argv[0]), argv[1:])
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]  # what followed the command name: table/tune re-parse it themselves
    from kvbench.core.paths import CacheRootError

    try:
        return int(args.func(args) or 0)
    except CacheRootError as exc:  # an unusable KVBENCH_CACHE_DIR: say why in one line
        print(f"kvbench {argv[0]}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
