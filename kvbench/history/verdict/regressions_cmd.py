"""`kvbench regressions`: which steps in a machine's recorded asv history are real.

    kvbench regressions [--machine M] [--results DIR] [--since REV] [--json PATH]
                        [--fail-on regression|never] [--plot DIR]

Reads results/<machine>/ (default machine: the name `kvbench machine` gives this host),
orders its commits by the repository's first-parent history, judges every series
(kvbench.history.verdict.regressions) and prints the findings worst first. Exit status: 0, or 1
with `--fail-on regression` when a regression is reported (after --since), 2 on bad input.
"""

from __future__ import annotations

import sys

from kvbench.history import command

NAME = "regressions"
HELP = "real steps in a machine's asv history, direction-aware (CI gate)"
DESCRIPTION = ("Real steps in a machine's asv history: direction-aware, with the noise "
               "estimated from the history itself (docs/history.md).")
FAIL_ON = ("regression", "never")


def add_arguments(parser) -> None:
    parser.add_argument("--machine", type=command.machine_name, default=None,
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


def run(args) -> int:
    """Judge the history; files first (JSON, plots), then the table on stdout."""
    from pathlib import Path

    from kvbench.core import progress
    from kvbench.core.jsonfile import check_writable, write_json_atomic
    from kvbench.history.asv.machine import default_machine
    from kvbench.history.asv.repo import repository_of, resolve
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import load_history
    from kvbench.history.verdict.text import plot_findings, print_table, readable_by_all

    try:
        results = Path(args.results)
        if not results.is_dir():
            raise ValueError(f"--results {results}: not a directory (give the asv results_dir)")
        json_path = check_writable(args.json) if args.json else None
        if args.plot:
            _check_plot_dir(Path(args.plot))
        machine = args.machine or default_machine()
        # a live line on a terminal only (kvbench.core.progress); gone before the table is printed
        with progress.status(f"kvbench regressions {machine}"):
            progress.report(f"loading {results / machine}")
            history = load_history(results, machine)
            since = resolve(repository_of(results), args.since) if args.since else None
            verdicts = analyze(history, since=since)
    except ValueError as exc:
        args.parser.error(str(exc))
    # files first: a reader of the table that stops early (| head) must not cost the JSON
    if json_path is not None:
        write_json_atomic(json_path, verdicts.to_json(), indent=1)
        readable_by_all(json_path)
        print(f"wrote {json_path}", file=sys.stderr)
    if args.plot:
        written = plot_findings(verdicts, args.plot)
        print(f"wrote {len(written)} plots to {args.plot}", file=sys.stderr)
    print_table(verdicts)
    if args.fail_on == "regression" and verdicts.regressions:
        return 1
    return 0


def _check_plot_dir(path) -> None:
    """ValueError unless --plot names a folder that exists or can be made, and takes files."""
    from kvbench.core.jsonfile import check_writable

    if path.exists() and not path.is_dir():
        raise ValueError(f"--plot {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--plot {path}: cannot create it ({exc.strerror})") from None
    check_writable(path / "plot.png")


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
