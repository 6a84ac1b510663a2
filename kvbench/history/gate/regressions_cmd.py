"""`kvbench regressions`: the verdict engine's command (kvbench.history.verdict.regressions_cmd)
plus `--confirm`, which re-measures every suspect fresh (kvbench.history.gate.confirm).

    kvbench regressions [the verdict options] [--confirm [--rounds N] [--config PATH]]
"""

from __future__ import annotations

import sys

from kvbench.history import command
from kvbench.history.verdict import regressions_cmd as base

NAME = base.NAME
HELP = base.HELP
DESCRIPTION = base.DESCRIPTION
DEFAULT_ROUNDS = 5


def add_arguments(parser) -> None:
    base.add_arguments(parser)
    parser.add_argument("--confirm", action="store_true",
                        help="measure each suspect (one point at an end of the history) again, "
                             "parent against commit, in fresh interleaved runs: confirmed, "
                             "dismissed or still suspect")
    parser.add_argument("--rounds", type=command.positive_int, default=DEFAULT_ROUNDS,
                        help="process runs a side for --confirm (default: %(default)s, 2 to 100)")
    parser.add_argument("--config", default=None, metavar="PATH",
                        help="asv.conf.json for --confirm (default: the repository's)")


def run(args) -> int:
    try:
        base.check_outputs(args)
        if args.confirm:
            from kvbench.history.gate.compare import check_rounds

            check_rounds(args.rounds)
        if args.config:
            command.check_config(args)
        verdicts = base.judge(args)
        if args.confirm and verdicts.suspects:
            from kvbench.history.asv.machine import check_machine

            # the fresh runs are measured here under the history's machine name: asv must
            # know it on this host (a history recorded elsewhere is confirmed where it was)
            check_machine(verdicts.history.machine)
    except ValueError as exc:
        args.parser.error(str(exc))
    if args.confirm and verdicts.suspects:
        try:
            verdicts = _confirm(args, verdicts)
        except RuntimeError as exc:  # asv failed: its log is the evidence, so it is kept
            print(f"kvbench regressions --confirm: {exc}", file=sys.stderr)
            return 1
    return base.report(args, verdicts)


def _confirm(args, verdicts):
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from kvbench.history.asv.repo import repository_of
    from kvbench.history.gate.compare import SuiteMeasurer, run_compare
    from kvbench.history.gate.confirm import confirm
    from kvbench.history.gate.selection import bench_regex, narrowest_selection

    root = repository_of(Path(args.results))

    def measure(parent: str, commit: str, findings: list):
        names = [f.series.name for f in findings]
        workdir = Path(tempfile.mkdtemp(prefix="kvbench-confirm-"))
        kept = False
        try:
            measurer = SuiteMeasurer(root, verdicts.history.machine, workdir,
                                     bench=bench_regex(names), select=narrowest_selection(names),
                                     conf_path=Path(args.config) if args.config else None)
            measurer.discover(commit)
            benchmarks = json.loads((measurer.results_dir / "benchmarks.json").read_text())
            units = {k: v.get("unit") for k, v in benchmarks.items() if isinstance(v, dict)}
            print(f"confirming {len(findings)} suspect series at {commit[:8]} against "
                  f"{parent[:8]} ({args.rounds} runs a side)", file=sys.stderr, flush=True)
            return run_compare(measurer, parent, commit, rounds=args.rounds, units=units,
                               only=names,
                               log=lambda text: print(text, file=sys.stderr, flush=True))
        except RuntimeError as exc:
            kept = True
            raise RuntimeError(f"{exc}\n(asv's log and the private results kept in "
                               f"{workdir})") from None
        finally:
            if not kept:
                shutil.rmtree(workdir, ignore_errors=True)

    return confirm(verdicts, measure)


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
