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

OPS = ("paged_decode", "kv_write", "kv_gather_fp8", "kv_alloc")


def _positive_int(text: str) -> int:
    """argparse type of a count that must be >= 1 (the error names the value it got)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {value}")
    return value


def _cmd_env(args: argparse.Namespace) -> int:
    """What this machine is: device, peaks, L2, versions, and the selector variables.

    Exit 2 when a selector variable names no row: every dispatch of that op would raise, so
    say it here, before a run, with the values accepted. A KVBENCH_* variable kvbench does not
    read (a misspelt selector) is listed as a warning ("unknown_variables" in --json)."""
    from kvbench.core.env import SELECTOR_VARS, unknown_setting_messages
    from kvbench.dispatch.core import selector_problem
    from kvbench.harness import device_peaks, metadata
    from kvbench.harness.calibrate import load_ceilings
    from kvbench.harness.meta import format_metadata

    meta = metadata(command="kvbench env")
    peaks = device_peaks()
    ceilings = load_ceilings(peaks.name)
    problems = [p for p in map(selector_problem, SELECTOR_VARS) if p is not None]
    unknown = unknown_setting_messages()  # misspelt variables: reported, not an error
    if args.json:
        meta["ceilings"] = None if ceilings is None else dataclasses.asdict(ceilings)
        meta["selector_problems"] = problems
        meta["unknown_variables"] = unknown
        print(json.dumps(meta, indent=2, default=str))
        return 2 if problems else 0
    print(format_metadata(meta))
    for problem in problems:
        print(f"invalid selector: {problem}")
    for warning in unknown.values():
        print(f"warning: {warning}")
    if ceilings is None:
        print("measured ceilings: none stored for this device (run `kvbench calibrate`)")
    else:
        print(
            f"measured ceilings ({ceilings.measured_at}): copy {ceilings.copy_gbps:.0f} GB/s, "
            f"read {ceilings.read_gbps:.0f} GB/s, write {ceilings.write_gbps:.0f} GB/s"
        )
    return 2 if problems else 0


def _cmd_calibrate(args: argparse.Namespace) -> int:
    """Measure copy / read / write bandwidth with the harness and store them per device name."""
    from kvbench.core import progress
    from kvbench.harness.calibrate import cache_dir, calibrate

    kwargs = {} if args.size_mib is None else {"size_bytes": args.size_mib * 2**20}
    with progress.status("kvbench calibrate: measuring copy, read and write bandwidth"):
        ceilings = calibrate(**kwargs)
    print(
        f"{ceilings.device_name}: copy {ceilings.copy_gbps:.0f} GB/s (read+write), "
        f"read {ceilings.read_gbps:.0f} GB/s, write {ceilings.write_gbps:.0f} GB/s"
    )
    print(f"stored under {cache_dir()}")
    return 0


def _run_machine(rest: list[str]) -> int:
    from kvbench.history.machine import main as machine_main

    return machine_main(rest)


def _run_publish(rest: list[str]) -> int:
    from kvbench.history.publish import main as publish_main

    return publish_main(rest)


def _run_regressions(rest: list[str]) -> int:
    from kvbench.history.regressions_cmd import main as regressions_main

    return regressions_main(rest)


#: Subcommands whose own parser takes every argument after the name. They are handed over
#: before `kvbench`'s parser runs: argparse.REMAINDER as a subparser's only positional does
#: not capture options that come first (`kvbench machine --name x` was an error).
def _run_preview(rest: list[str]) -> int:
    from kvbench.history.publish import preview_main

    return preview_main(rest)


PASSTHROUGH = {"machine": _run_machine, "publish": _run_publish, "preview": _run_preview,
               "regressions": _run_regressions}


def _cmd_discover(args: argparse.Namespace) -> int:
    """results/benchmarks.json from benchmarks/ (asv's discovery, offline): write or check."""
    from kvbench.history import suite

    if args.check:
        diffs = suite.differences(args.config)
        for line in diffs:
            print(line)
        if diffs:
            print(f"{suite.benchmarks_json_path(args.config)} differs from the suite: run "
                  "`kvbench discover` and commit it")
            return 1
        print("benchmarks.json matches the suite")
        return 0
    print(f"wrote {suite.write(args.config)}")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    """The roofline picture of a stored table (`kvbench table OP --json FILE`)."""
    from kvbench.measure.plots import plot_roofline

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


def _add_table_arguments(p: argparse.ArgumentParser) -> None:
    """`kvbench table`'s options, declared here so `--help` answers without importing torch
    or a kernel; kvbench.measure.table.main parses the same arguments (tests/test_cli.py keeps the
    two in step)."""
    p.add_argument("op", choices=OPS)
    p.add_argument("--json", dest="json_path", metavar="PATH", default=None,
                   help="also write the rows (and skipped rows, checks, floors) as JSON")
    p.add_argument("--grid", action="store_true",
                   help="paged_decode: the full batch x context grid")
    p.add_argument("--no-ablations", action="store_true",
                   help="paged_decode: skip the layout/storage/L2 ablation rows")
    p.add_argument("--plot", metavar="PATH", default=None,
                   help="also draw the rows' GB/s against the spec peak and the measured "
                        "ceiling, per case (PNG/SVG/PDF by suffix; not kv_alloc)")


def _add_tune_arguments(p: argparse.ArgumentParser) -> None:
    """`kvbench tune`'s options (kvbench.measure.tune.main parses the same; see above)."""
    p.add_argument("op", choices=OPS)
    p.add_argument("--device", default=None, help="torch device (default: cuda if present)")
    p.add_argument("--dtype", default=None,
                   help="KV dtype to measure at (default: the op's; any its rows serve)")
    p.add_argument("--storage", default=None,
                   help="paged pool storage for paged_decode / kv_write (default: combined)")


def _cmd_main(args: argparse.Namespace) -> int:
    """The main job: the environment report first (a few seconds), then a
    correctness-checked table for every op (minutes, with a live status on a terminal)."""
    print("== environment (kvbench env)", flush=True)
    env_status = _cmd_env(argparse.Namespace(json=False))
    print(flush=True)
    from kvbench.measure.table import run_all

    return run_all(json_dir=args.json_dir) | (1 if env_status else 0)


def _percent(text: str) -> float:
    """argparse type of a relative effect given in percent ('2' or '2%' -> 0.02)."""
    try:
        value = float(text.rstrip("%"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage > 0 (e.g. 2 or 2%), got {text!r}") from None
    if not 0 < value < 1000:
        raise argparse.ArgumentTypeError(f"expected a percentage in (0, 1000), got {text!r}")
    return value / 100


def _cmd_bisect(args: argparse.Namespace) -> int:
    """Which commit of RANGE made the series worse, confirmed by A/B runs (docs/history.md)."""
    from kvbench.history.bisect import run_command

    try:
        return run_command(args.range, args.series, machine=args.machine, rounds=args.rounds,
                           max_rounds=args.max_rounds, search_runs=args.search_runs,
                           mde=args.mde, json_path=args.json, log_dir=args.log_dir,
                           config=args.config)
    except ValueError as exc:
        args.parser.error(str(exc))
    except RuntimeError as exc:
        print(f"kvbench bisect: {exc}", file=sys.stderr)
        return 1


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
    p.add_argument("--size-mib", type=_positive_int, default=None,
                   help="buffer size in MiB (default per device: 2048 on CUDA, 256 on a CPU)")
    p.set_defaults(func=_cmd_calibrate)

    for name, text in (
        ("machine", "write the asv machine record from code ([--name NAME] [--file PATH])"),
        ("publish", "asv publish + local dashboard assets (renders offline)"),
        ("preview", "serve the published dashboard on 127.0.0.1 and print its URL"),
        ("regressions", "real steps in a machine's asv history, direction-aware (CI gate)"),
    ):
        sub.add_parser(name, help=text, add_help=False)  # listed in --help; see PASSTHROUGH

    for name, func, add_arguments, text in (
        ("tune", _cmd_tune, _add_tune_arguments,
         "measure every verified row and store the perf table dispatch ranks on"),
        ("table", _cmd_table, _add_table_arguments,
         "correctness-checked report table of every row and peer"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        add_arguments(p)
        p.set_defaults(func=func)

    p = sub.add_parser(
        "bisect", help="which commit of RANGE made one series worse, measured fresh and confirmed",
        description="Bisect one asv series over RANGE with fresh process-level runs: end points "
                    "first (no regression -> says so), then a binary search, then an interleaved "
                    "A/B confirmation of the commit it names. Exit 0: a verdict (regression "
                    "named, or no regression); 3: inconclusive; 2: bad input; 1: asv failed.")
    p.add_argument("range", help="BASE..END, e.g. HEAD~32..HEAD (first-parent history)")
    p.add_argument("series", help="asv's name of one param combination, e.g. "
                   "\"paged_decode.PagedDecode.track_us('triton/split_kv', 'fp16', 'b64_c8k')\"")
    p.add_argument("--machine", default=None,
                   help="asv machine name (default: this hardware's, as `kvbench machine` names it)")
    p.add_argument("--rounds", type=_positive_int, default=5,
                   help="A/B rounds (one run per side each) for the end points and the "
                        "confirmation (default 5, the fewest that can reach p <= 0.01)")
    p.add_argument("--max-rounds", type=_positive_int, default=10,
                   help="cap on A/B rounds while inconclusive (default 10)")
    p.add_argument("--search-runs", type=_positive_int, default=3,
                   help="runs per commit visited by the search (default 3; more while unclear)")
    p.add_argument("--mde", type=_percent, default=None,
                   help="minimum detectable effect in %% for 'no change' (default: 3x the "
                        "between-process noise of the runs, at least 0.5%%)")
    p.add_argument("--json", default=None, metavar="PATH", help="write the evidence as JSON")
    p.add_argument("--log-dir", default=None, help="keep asv's output (asv.log) here")
    p.add_argument("--config", default=None, help="asv.conf.json (default: the project root's)")
    p.set_defaults(func=_cmd_bisect, parser=p)

    p = sub.add_parser("discover", help="rewrite results/benchmarks.json from benchmarks/ "
                       "(asv's discovery, offline; --check: exit 1 where it differs)")
    p.add_argument("--check", action="store_true",
                   help="only compare: exit 1 and name what differs")
    p.add_argument("--config", default="asv.conf.json", help="asv config (default: %(default)s)")
    p.set_defaults(func=_cmd_discover)

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
    if argv and argv[0] in PASSTHROUGH:
        return int(PASSTHROUGH[argv[0]](argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    args.argv = argv[1:]  # what followed the command name: table/tune re-parse it themselves
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
