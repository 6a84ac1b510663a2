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
    say it here, before a run, with the values accepted."""
    from kvbench.dispatch.core import selector_problem
    from kvbench.dispatch.selectors import SELECTOR_VARS
    from kvbench.harness import device_peaks, metadata
    from kvbench.harness.calibrate import load_ceilings
    from kvbench.harness.meta import format_metadata

    meta = metadata(command="kvbench env")
    peaks = device_peaks()
    ceilings = load_ceilings(peaks.name)
    problems = [p for p in map(selector_problem, SELECTOR_VARS) if p is not None]
    if args.json:
        meta["ceilings"] = None if ceilings is None else dataclasses.asdict(ceilings)
        meta["selector_problems"] = problems
        print(json.dumps(meta, indent=2, default=str))
        return 2 if problems else 0
    print(format_metadata(meta))
    for problem in problems:
        print(f"invalid selector: {problem}")
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
    from kvbench.harness.calibrate import cache_dir, calibrate

    kwargs = {} if args.size_mib is None else {"size_bytes": args.size_mib * 2**20}
    ceilings = calibrate(**kwargs)
    print(
        f"{ceilings.device_name}: copy {ceilings.copy_gbps:.0f} GB/s (read+write), "
        f"read {ceilings.read_gbps:.0f} GB/s, write {ceilings.write_gbps:.0f} GB/s"
    )
    print(f"stored under {cache_dir()}")
    return 0


def _run_machine(rest: list[str]) -> int:
    from kvbench.machine import main as machine_main

    return machine_main(rest)


def _run_publish(rest: list[str]) -> int:
    from kvbench.publish import main as publish_main

    return publish_main(rest)


def _run_regressions(rest: list[str]) -> int:
    from kvbench.history.regressions_cmd import main as regressions_main

    return regressions_main(rest)


#: Subcommands whose own parser takes every argument after the name. They are handed over
#: before `kvbench`'s parser runs: argparse.REMAINDER as a subparser's only positional does
#: not capture options that come first (`kvbench machine --name x` was an error).
PASSTHROUGH = {"machine": _run_machine, "publish": _run_publish,
               "regressions": _run_regressions}


def _cmd_tune(args: argparse.Namespace) -> int:
    from kvbench.dispatch.tune import main as tune_main

    return tune_main([args.op, *args.rest])


def _cmd_table(args: argparse.Namespace) -> int:
    from kvbench.table import main as table_main

    return table_main([args.op, *args.rest])


def _cmd_main(args: argparse.Namespace) -> int:
    """The main job: environment, then a correctness-checked table for every op."""
    from kvbench.table import run_all

    return run_all(json_dir=args.json_dir)


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
        ("regressions", "real steps in a machine's asv history, direction-aware (CI gate)"),
    ):
        sub.add_parser(name, help=text, add_help=False)  # listed in --help; see PASSTHROUGH

    for name, func, text in (
        ("tune", _cmd_tune, "measure every verified row and store the perf table dispatch ranks on"),
        ("table", _cmd_table, "correctness-checked report table of every row and peer"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("op", choices=OPS)
        p.add_argument("rest", nargs=argparse.REMAINDER)
        p.set_defaults(func=func)

    p = sub.add_parser("main", help="the main job: env + a table for every op this device runs")
    p.add_argument("--json-dir", default=None, help="also write each table as JSON here")
    p.set_defaults(func=_cmd_main)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in PASSTHROUGH:
        return int(PASSTHROUGH[argv[0]](argv[1:]) or 0)
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
