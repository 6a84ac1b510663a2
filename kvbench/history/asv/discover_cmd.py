"""`kvbench discover [--check] [--config PATH]`: results/benchmarks.json from benchmarks/ (asv's
discovery, offline; kvbench.history.asv.suite), written, or with --check compared."""

from __future__ import annotations

import sys

from kvbench.history import command

NAME = "discover"
HELP = ("rewrite results/benchmarks.json from benchmarks/ "
        "(asv's discovery, offline; --check: exit 1 where it differs)")
DESCRIPTION = None


def add_arguments(parser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="only compare: exit 1 and name what differs")
    command.add_config_argument(parser)


def run(args) -> int:
    """Write the file (exit 0), or with --check: exit 1 and name each difference."""
    from kvbench.history.asv import suite

    command.check_config(args)
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


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
