"""`kvbench compare BASE HEAD`: every series of two commits, measured fresh, A/B.

    kvbench compare BASE HEAD [--bench REGEX] [--select CLASS] [--rounds N] [--machine M]
                    [--json PATH] [--fail-on regression|never] [--no-recheck] [--config PATH]

Runs `--rounds` interleaved asv runs of both commits in a private results directory (the
user's results/ is never touched), then judges every series (kvbench.history.gate.compare):
regression / improvement / no change / inconclusive, each with its effect, interval and p.
The series called changed are then measured again, `--rounds` more runs a side of only them,
and judged on those runs (compare.recheck; `--no-recheck` skips it). Prints one line per
changed series (worst first) and each series HEAD broke (asv recorded it failed at HEAD,
measured at BASE), then the counts. Exit status: 0; 1 with `--fail-on regression` when a
regression is found or a series is broken at HEAD, or when asv failed (its log kept); 2 on bad
input (a --bench or --select naming nothing in the suite included).
"""

from __future__ import annotations

import argparse
import sys

from kvbench.history import command

NAME = "compare"
HELP = "fresh A/B of every series between two commits (what asv continuous should be)"
DESCRIPTION = ("Measure BASE and HEAD in interleaved process runs and say, per series, "
               "regression / improvement / no change / inconclusive (docs/verdicts.md).")
#: Rounds by default: five runs a side is the fewest at which kvbench's A/B test can call a
#: series unchanged (abtest.MIN_ROUNDS).
DEFAULT_ROUNDS = 5


def add_arguments(parser) -> None:
    parser.add_argument("base", help="the commit compared against (e.g. main)")
    parser.add_argument("head", help="the commit under test (e.g. HEAD)")
    parser.add_argument("--bench", default=None, metavar="REGEX",
                        help="asv --bench regex of the benchmarks to compare (default: all)")
    parser.add_argument("--select", default=None, metavar="CLASS",
                        help="measure only this class in the suite's measuring process "
                             "(KVBENCH_ASV_SELECT; e.g. KVAlloc), saving the others' cost")
    parser.add_argument("--rounds", type=command.positive_int, default=DEFAULT_ROUNDS,
                        help="process runs per commit (default: %(default)s, 2 to 100)")
    parser.add_argument("--machine", type=command.machine_name, default=None,
                        help="asv machine name (default: this host's `kvbench machine` name)")
    parser.add_argument("--config", default=None, metavar="PATH",
                        help="asv.conf.json (default: the repository's)")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the result")
    parser.add_argument("--fail-on", default="never", choices=("regression", "never"),
                        help="exit 1 when a regression is found (default: %(default)s)")
    parser.add_argument("--recheck", action=argparse.BooleanOptionalAction, default=True,
                        help="measure the series the first A/B calls changed once more and "
                             "keep a claim only where the new runs make it again (default: "
                             "on; two commits that change nothing then fail a gate only on "
                             "two independent false positives)")


def format_comparison(result) -> str:
    from kvbench.history.bisect import abtest
    from kvbench.history.gate.compare import CHANGED

    lines = []
    changed = [s for s in result.series if s.outcome in CHANGED]
    changed.sort(key=lambda s: (s.outcome != abtest.REGRESSION, -abs(s.ab.effect)))
    for s in changed:
        first = (f"  (first A/B {100 * s.first.ab.effect:+.2f}%, p {s.first.p_t:.2g})"
                 if s.first else "")
        lines.append(f"{s.outcome:12s} {100 * s.ab.effect:+7.2f}% [{100 * s.ab.ci_low:+.2f}, "
                     f"{100 * s.ab.ci_high:+.2f}]  p {s.p_t:.2g} (BH {s.p_adjusted:.2g})  "
                     f"{s.series}{first}")
    for name, why in sorted(result.broken.items()):
        lines.append(f"{'broken':12s} {name}: {why}")
    counts = ", ".join(f"{len(result.of(o))} {o}" for o in abtest.OUTCOMES)
    kept = sum(s.outcome == s.first.outcome for s in result.series if s.first)
    lines.append(f"{result.base[:8]} -> {result.head[:8]}: {len(result.series)} series over "
                 f"{result.rounds} runs a side: {counts}"
                 + (f"; {len(result.broken)} broken at {result.head[:8]}" if result.broken
                    else "")
                 + (f"; {len(result.unmatched)} not comparable" if result.unmatched else "")
                 + (f"; {len(result.rechecked)} called changed measured again, {kept} "
                    "reproduced" if result.rechecked else ""))
    return "\n".join(lines)


def run(args) -> int:
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from kvbench.core.jsonfile import check_writable, write_json_atomic
    from kvbench.history.asv.machine import check_machine, default_machine
    from kvbench.history.asv.repo import repository_of, resolve
    from kvbench.history.bisect import abtest
    from kvbench.history.gate.compare import SuiteMeasurer, check_rounds, recheck, run_compare
    from kvbench.history.gate.selection import bench_pattern, check_bench, check_selection

    try:
        check_rounds(args.rounds)
        if args.bench:
            bench_pattern(args.bench)
        root = repository_of(Path("."))
        base, head = resolve(root, args.base), resolve(root, args.head)
        if base == head:
            raise ValueError(f"{args.base} and {args.head} are one commit ({base[:8]})")
        json_path = check_writable(Path(args.json)) if args.json else None
        machine = args.machine or default_machine()
        check_machine(machine)
        if args.config:
            command.check_config(args)
        config = Path(args.config) if args.config else None
    except ValueError as exc:
        args.parser.error(str(exc))
    workdir = Path(tempfile.mkdtemp(prefix="kvbench-compare-"))
    try:
        measurer = SuiteMeasurer(root, machine, workdir, bench=args.bench, select=args.select,
                                 conf_path=config)
        print(f"asv discovery at {head[:8]} (private results in {workdir})", flush=True)
        measurer.discover(head)
        benchmarks = json.loads((measurer.results_dir / "benchmarks.json").read_text())
        try:
            if args.bench:
                check_bench(args.bench, benchmarks)
            if args.select:
                check_selection(args.select, benchmarks)
        except ValueError as exc:
            args.parser.error(f"{exc} (the suite as asv discovers it at {head[:8]})")
        units = {k: v.get("unit") for k, v in benchmarks.items() if isinstance(v, dict)}
        result = run_compare(measurer, base, head, rounds=args.rounds, units=units)
        if args.recheck:
            result = recheck(result, lambda names: _measure_again(measurer, args, base, head,
                                                                  units, names))
    except RuntimeError as exc:  # asv failed: its log is the evidence, so it is kept
        print(f"kvbench compare: {exc}\n(asv's log and the private results kept in {workdir})",
              file=sys.stderr)
        return 1
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    shutil.rmtree(workdir, ignore_errors=True)
    print(format_comparison(result))
    if json_path is not None:
        write_json_atomic(json_path, result.to_json(), indent=1)
        print(f"wrote {json_path}", file=sys.stderr)
    if args.fail_on == "regression" and (result.of(abtest.REGRESSION) or result.broken):
        return 1
    return 0


def _measure_again(measurer, args, base: str, head: str, units: dict[str, str],
                   names: list[str]):
    """A second fresh A/B of exactly `names`: their benchmarks, their narrowest selection."""
    from kvbench.history.gate.compare import run_compare
    from kvbench.history.gate.selection import bench_regex, narrowest_selection

    measurer.bench = bench_regex(names)
    measurer.select = narrowest_selection(names) or args.select
    print(f"recheck: {len(names)} series called changed, {args.rounds} more runs a side "
          f"(selection {measurer.select or 'the whole suite'})", flush=True)
    return run_compare(measurer, base, head, rounds=args.rounds, units=units, only=names)


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
