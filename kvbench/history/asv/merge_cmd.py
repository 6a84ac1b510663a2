"""`kvbench merge DIR... --into RESULTS`: join results folders of shards or GPU workers into
one (kvbench.history.asv.merge).

Exit status: 0 merged; 1 refused (the folders are not one history, a file is not whole, a
folder is being recorded); 2 bad input.
"""

from __future__ import annotations

import sys

from kvbench.history import command

NAME = "merge"
HELP = "join asv results folders (shards, GPU workers) into one, validated and atomic"
DESCRIPTION = ("Merge asv results folders into --into (created when absent). Every JSON file "
               "is read whole first; the folders must hold one suite (equal benchmark "
               "versions), one machine per machine name (equal machine.json) and one "
               "environment name per machine, else nothing is written and the refusal says "
               "what differs. A commit measured twice keeps the target's result, else the "
               "input's with more measured values (the first named on a tie); each duplicate "
               "is reported. Sidecars travel with their result. The target is replaced in "
               "one atomic exchange: an interrupted merge leaves it as it was. Exit 0: "
               "merged; 1: refused; 2: bad input.")


def add_arguments(parser) -> None:
    parser.add_argument("sources", nargs="+", metavar="DIR",
                        help="results folders to merge (e.g. results-shard-0-of-4 ...)")
    parser.add_argument("--into", required=True, metavar="RESULTS",
                        help="the results folder to merge into (e.g. results)")


def run(args) -> int:
    from kvbench.history.asv.merge import MergeRefused, merge

    try:
        report = merge(args.sources, args.into)
    except MergeRefused as exc:
        print(f"kvbench merge: refused: {exc}", file=sys.stderr)
        return 1
    except ValueError as exc:  # a folder's recording lock is held
        print(f"kvbench merge: {exc}", file=sys.stderr)
        return 1
    for line in report.notes:
        print(f"  {line}")
    print(f"merged {len(report.added)} result file(s) and {report.sidecars} sidecar(s) into "
          f"{report.target}; {sum('kept' in n for n in report.notes)} duplicate(s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
