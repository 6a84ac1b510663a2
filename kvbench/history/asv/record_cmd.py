"""`kvbench record [RANGE] [--machine M]`: bring a machine's recorded history up to date
(kvbench.history.asv.record).

Exit status: 0 every commit of the range has a result; 1 asv failed or a commit was left
unrecorded (run the same command again to resume); 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvbench.history import command

NAME = "record"
HELP = ("measure every first-parent commit of RANGE that has no result on this machine yet "
        "(newest first; run again to resume)")
DESCRIPTION = ("Run asv over exactly the first-parent commits of RANGE that have no result "
               "file for the machine, newest first, under a lock on the machine's results "
               "folder. RANGE: BASE..END (the commits after BASE up to END), one commit, or "
               "nothing: every commit after the newest one the machine has recorded (HEAD "
               "alone when it has none). An interrupted recording is resumed by the same "
               "command; a commit is never measured twice. Exit 0: the range is recorded; "
               "1: asv failed or commits were left; 2: bad input; 130: interrupted.")


def add_arguments(parser) -> None:
    parser.add_argument("range", nargs="?", default=None,
                        help="BASE..END, one commit, or nothing (since the newest recorded)")
    parser.add_argument("--machine", type=command.machine_name, default=None,
                        help="asv machine name (default: this hardware's, as `kvbench machine` "
                             "names it)")
    parser.add_argument("--config", default="asv.conf.json",
                        help="asv config (default: %(default)s); its folder is the repository")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what would be measured and stop")


def run(args) -> int:
    from kvbench.history.asv import record
    from kvbench.history.asv.machine import check_machine, default_machine

    conf_path = Path(args.config).resolve()
    if not conf_path.is_file():
        args.parser.error(f"--config {args.config}: no such file (run from the project root or "
                          "name its asv.conf.json)")
    machine = args.machine or default_machine()
    try:
        check_machine(machine)
        the_plan = record.plan(conf_path.parent, _results_dir(conf_path), machine, args.range)
    except ValueError as exc:
        args.parser.error(str(exc))
    print(f"{machine}: {len(the_plan.commits)} commit(s) in range, "
          f"{len(the_plan.recorded)} recorded, {len(the_plan.todo)} to measure")
    if args.dry_run or not the_plan.todo:
        for commit in the_plan.todo:
            print(f"  would measure {commit[:8]}")
        return 0
    try:
        code, measured = record.record(the_plan, conf_path)
    except ValueError as exc:  # the lock is held by another recording
        print(f"kvbench record: {exc}", file=sys.stderr)
        return 1
    if code == 130:
        return 130
    return 0 if code == 0 and len(measured) == len(the_plan.todo) else 1


def _results_dir(conf_path: Path) -> Path:
    """The results directory asv.conf.json names, relative to its folder."""
    from asv import util as asv_util

    conf = asv_util.load_json(str(conf_path), js_comments=True)
    return (conf_path.parent / conf.get("results_dir", "results")).resolve()


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
