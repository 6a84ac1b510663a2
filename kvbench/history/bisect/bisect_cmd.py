"""`kvbench bisect RANGE SERIES`: which commit of RANGE made SERIES worse, measured fresh and
confirmed, or "no regression in RANGE" (the search: kvbench.history.bisect.search).

Exit status: 0 a verdict (regression named, or no regression); 3 inconclusive; 2 bad input;
1 asv failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from kvbench.history import command

NAME = "bisect"
HELP = "which commit of RANGE made one series worse, measured fresh and confirmed"
DESCRIPTION = ("Bisect one asv series over RANGE with fresh process-level runs: end points "
               "first (no regression -> says so), then a binary search, then an interleaved "
               "A/B confirmation of the commit it names. Exit 0: a verdict (regression "
               "named, or no regression); 3: inconclusive; 2: bad input; 1: asv failed.")


def add_arguments(parser) -> None:
    parser.add_argument("range", help="BASE..END, e.g. HEAD~32..HEAD (first-parent history)")
    parser.add_argument("series", help="asv's name of one param combination, e.g. "
                        "\"paged_decode.PagedDecode.track_us("
                        "'triton/split_kv', 'fp16', 'b64_c8k')\"")
    parser.add_argument("--machine", type=command.machine_name, default=None,
                        help="asv machine name (default: this hardware's, as `kvbench machine` "
                             "names it)")
    parser.add_argument("--rounds", type=command.positive_int, default=5,
                        help="A/B rounds (one run per side each) for the end points and the "
                             "confirmation (default 5, the fewest that can reach p <= 0.01)")
    parser.add_argument("--max-rounds", type=command.positive_int, default=10,
                        help="cap on A/B rounds while inconclusive (default 10)")
    parser.add_argument("--search-runs", type=command.positive_int, default=3,
                        help="runs per commit visited by the search "
                             "(default 3; more while unclear)")
    parser.add_argument("--mde", type=command.percent, default=None,
                        help="minimum detectable effect in %% for 'no change' (default: 3x the "
                             "between-process noise of the runs, at least 0.5%%)")
    parser.add_argument("--json", default=None, metavar="PATH", help="write the evidence as JSON")
    parser.add_argument("--log-dir", default=None, help="keep asv's output (asv.log) here")
    parser.add_argument("--config", default=None,
                        help="asv.conf.json (default: the project root's)")


def run(args) -> int:
    """run_command with the parsed options: bad input exits 2 (usage), an asv failure 1."""
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


def _subjects(repo: Path, commits: Sequence[str]) -> dict[str, str]:
    from kvbench.history.asv.repo import git

    out = git(repo, "log", "--no-walk=unsorted", "--format=%H %s", *commits).strip()
    return dict(line.split(" ", 1) if " " in line else (line, "") for line in out.splitlines())


def _log_with_status(measurer) -> object:
    """bisect's log: the printed line as before, and on a terminal a live status line
    (kvbench.core.progress) with the step and the asv runs done so far."""
    from kvbench.core import progress

    def log(text: str) -> None:
        print(text, flush=True)
        step = text.strip().split(":")[0]
        progress.report(f"{step}; {measurer.invocations} asv runs so far")

    return log


def _log_path(log_dir: str) -> Path:
    """log_dir/asv.log, its folder created; ValueError when it cannot be made or written."""
    from kvbench.core.jsonfile import check_writable

    try:
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--log-dir {log_dir}: cannot create it ({exc.strerror})") from None
    return check_writable(Path(log_dir) / "asv.log")


def run_command(range_text: str, series_text: str, *, machine: str | None = None,
                rounds: int | None = None, max_rounds: int | None = None,
                search_runs: int | None = None, mde: float | None = None,
                json_path: str | None = None, log_dir: str | None = None,
                repo: str | os.PathLike = ".", config: str | None = None) -> int:
    """`kvbench bisect`: validate, measure, print the evidence; the exit status says the
    verdict (0 regression named or no regression, 3 inconclusive). ValueError on bad input.
    rounds, max_rounds, search_runs: None for the search's defaults."""
    import shutil
    import tempfile

    from kvbench.core import progress
    from kvbench.core.jsonfile import check_writable
    from kvbench.history.asv.machine import check_machine, default_machine
    from kvbench.history.asv.repo import repository_of, resolve_range
    from kvbench.history.bisect import abtest
    from kvbench.history.bisect.measurer import AsvMeasurer, check_series, parse_series
    from kvbench.history.bisect.search import (
        EXIT,
        SEARCH_RUNS,
        attach_context,
        check_search_runs,
        format_outcome,
        run_bisect,
    )

    rounds = abtest.MIN_ROUNDS if rounds is None else rounds
    max_rounds = 2 * abtest.MIN_ROUNDS if max_rounds is None else max_rounds
    search_runs = SEARCH_RUNS if search_runs is None else search_runs
    series = parse_series(series_text)
    abtest.check_rounds(rounds, max_rounds)
    if max_rounds < abtest.MIN_ROUNDS:
        raise ValueError(f"--max-rounds {max_rounds}: at least {abtest.MIN_ROUNDS} (fewer runs "
                         "a side can claim neither a change nor no change)")
    check_search_runs(search_runs)
    if mde is not None and not (0 < mde < 10):
        raise ValueError(f"--mde is a relative effect in (0, 10) (0.02 = 2%), got {mde}")
    root = repository_of(Path(repo))
    commits = resolve_range(root, range_text)
    if json_path:
        check_writable(Path(json_path))
    problem = command.config_problem(config) if config is not None else None
    if problem:
        raise ValueError(problem)
    log_path = _log_path(log_dir) if log_dir else None
    machine = machine or default_machine()
    check_machine(machine)
    # Every check above runs before the folder exists; from here on, finally removes it,
    # unless asv failed: its log there is the evidence, so it is kept.
    workdir = Path(tempfile.mkdtemp(prefix="kvbench-bisect-"))
    kept = False
    try:
        measurer = AsvMeasurer(root, series, machine, workdir, log_path=log_path,
                               conf_path=Path(config) if config else None)
        print(f"asv discovery at {commits[-1][:8]} (private results in {workdir})", flush=True)
        with progress.status(f"kvbench bisect {range_text}"):
            progress.report("asv discovery")
            higher_is_better = check_series(series, measurer.discover(commits[-1]))
            unit = "GB/s" if higher_is_better else "seconds"
            outcome = run_bisect(measurer, commits, series=series.name, range_text=range_text,
                                 machine=machine, unit=unit, higher_is_better=higher_is_better,
                                 rounds=rounds, max_rounds=max_rounds, search_runs=search_runs,
                                 mde=mde, subjects=_subjects(root, commits),
                                 log=_log_with_status(measurer))
        attach_context(outcome, measurer.results_dir, series)
    except RuntimeError as exc:
        kept = True
        raise RuntimeError(f"{exc}\n(asv's log and the private results kept in {workdir})"
                           ) from None
    finally:
        if not kept:
            shutil.rmtree(workdir, ignore_errors=True)
    print(format_outcome(outcome))
    if json_path:
        from kvbench.core.jsonfile import write_json_atomic

        data = outcome.to_json()
        data["asv_invocations"] = measurer.invocations
        write_json_atomic(Path(json_path), data)
        print(f"wrote {json_path}")
    return EXIT[outcome.verdict]


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
