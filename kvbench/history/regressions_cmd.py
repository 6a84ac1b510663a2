"""`kvbench regressions`: which steps in a machine's recorded asv history are real.

    kvbench regressions [--machine M] [--results DIR] [--since REV] [--json PATH]
                        [--fail-on regression|never] [--plot DIR]

Reads results/<machine>/ (default machine: the name `kvbench machine` gives this host),
orders its commits by the repository's first-parent history, judges every series
(kvbench.history.regressions) and prints the findings worst first. Exit status: 0, or 1
with `--fail-on regression` when a regression is reported (after --since), 2 on bad input.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FAIL_ON = ("regression", "never")


def default_machine() -> str:
    """The machine name `kvbench machine` would write for this host (h200, cpu-...)."""
    from kvbench.history.machine import machine_record

    return machine_record()["machine"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kvbench regressions",
        description="Real steps in a machine's asv history: direction-aware, with the noise "
                    "estimated from the history itself (docs/history.md).")
    parser.add_argument("--machine", default=None,
                        help="results/<machine> to read (default: this host's `kvbench machine` name)")
    parser.add_argument("--results", default="results",
                        help="asv results directory (default: %(default)s)")
    parser.add_argument("--since", default=None, metavar="REV",
                        help="report only steps after REV (a commit on the first-parent line)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the report as JSON (schema kvbench.regressions/1)")
    parser.add_argument("--fail-on", default="never", choices=FAIL_ON,
                        help="exit 1 when a regression is reported (default: %(default)s)")
    parser.add_argument("--plot", default=None, metavar="DIR",
                        help="draw each series with a regression into DIR as PNG")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from kvbench.core import progress
    from kvbench.core.jsonfile import check_writable, write_json_atomic
    from kvbench.history.regressions import analyze
    from kvbench.history.report import plot_findings, print_table, readable_by_all
    from kvbench.history.results import load_history, repository_of, resolve

    try:
        results = Path(args.results)
        if not results.is_dir():
            raise ValueError(f"--results {results}: not a directory (give the asv results_dir)")
        json_path = check_writable(args.json) if args.json else None
        if args.plot and Path(args.plot).exists() and not Path(args.plot).is_dir():
            raise ValueError(f"--plot {args.plot}: exists and is not a directory")
        machine = args.machine or default_machine()
        # a live line on a terminal only (kvbench.core.progress); gone before the table is printed
        with progress.status(f"kvbench regressions {machine}"):
            progress.report(f"loading {results / machine}")
            history = load_history(results, machine)
            since = resolve(repository_of(results), args.since) if args.since else None
            report = analyze(history, since=since)
    except ValueError as exc:
        parser.error(str(exc))
    # files first: a reader of the table that stops early (| head) must not cost the JSON
    if json_path is not None:
        write_json_atomic(json_path, report.to_json(), indent=1)
        readable_by_all(json_path)
        print(f"wrote {json_path}", file=sys.stderr)
    if args.plot:
        written = plot_findings(report, args.plot)
        print(f"wrote {len(written)} plots to {args.plot}", file=sys.stderr)
    print_table(report)
    if args.fail_on == "regression" and report.regressions:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
