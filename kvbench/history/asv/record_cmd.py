"""`kvbench record [RANGE] [--machine M] [--shard I/N] [--gpus all|LIST]`: bring a machine's
recorded history up to date (kvbench.history.asv.record), as one shard of a fleet or with one
worker per GPU (kvbench.history.asv.fleet).

Exit status: 0 every commit of the range has a result; 1 asv failed or a commit was left
unrecorded (run the same command again to resume); 2 bad input; 130 interrupted.
"""

from __future__ import annotations

import os
import re
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
               "command; a commit is never measured twice. --shard I/N measures shard I "
               "(0-based) of N: the range's commits dealt round-robin by position, into its "
               "own results folder (read from SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX or "
               "BUILDKITE_PARALLEL_JOB when set); --gpus runs one worker per GPU from one "
               "queue and merges their results (docs/fleet.md). Exit 0: the range is "
               "recorded; 1: asv failed or commits were left; 2: bad input; 130: "
               "interrupted.")


def add_arguments(parser) -> None:
    parser.add_argument("range", nargs="?", default=None,
                        help="BASE..END, one commit, or nothing (since the newest recorded)")
    parser.add_argument("--machine", type=command.machine_name, default=None,
                        help="asv machine name (default: this hardware's, as `kvbench machine` "
                             "names it)")
    command.add_config_argument(parser, "; its folder is the repository")
    parser.add_argument("--dry-run", action="store_true",
                        help="list what would be measured and stop")
    parser.add_argument("--shard", default=None, metavar="I/N",
                        help="measure shard I (0-based) of N: commit k of the range (oldest "
                             "first) belongs to shard k mod N. 'N' alone takes I from the "
                             "scheduler (SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, "
                             "BUILDKITE_PARALLEL_JOB); a Slurm array or Buildkite "
                             "parallelism shards the recording without the option")
    parser.add_argument("--results-dir", default=None, metavar="DIR",
                        help="write results here instead of the config's results folder "
                             "(default for a shard: <results>-shard-I-of-N beside it)")
    parser.add_argument("--gpus", default=None, metavar="all|0,1,...",
                        help="one worker per GPU (CUDA_VISIBLE_DEVICES), pulling commits from "
                             "one queue, each into its own results folder; merged at the end")
    parser.add_argument("--bench", default=None, metavar="REGEX",
                        help="asv's --bench: record only the matching benchmarks (a commit "
                             "then counts as recorded with those alone)")


def run(args) -> int:
    from kvbench.history.asv import fleet, record
    from kvbench.history.asv.machine import check_machine, default_machine

    conf_path = Path(args.config).resolve()
    if not conf_path.is_file():
        args.parser.error(f"--config {args.config}: no such file (run from the project root or "
                          "name its asv.conf.json)")
    machine = args.machine or default_machine()
    try:
        results = _results_dir(conf_path)
    except (ValueError, AttributeError, TypeError) as exc:  # asv's reader on a file it can't use
        args.parser.error(f"--config {args.config}: not an asv config ({exc})")
    try:
        check_machine(machine)
        shard = fleet.resolve_shard(args.shard, os.environ)
        gpus = None if args.gpus is None else fleet.list_gpus(args.gpus)
        the_plan = record.plan(conf_path.parent, results, machine, args.range)
    except ValueError as exc:
        args.parser.error(str(exc))
    target = Path(args.results_dir).resolve() if args.results_dir else \
        fleet.shard_results_dir(results, shard) if shard else results
    try:
        check_results_dir(target, create=not args.dry_run)
        if args.bench:
            re.compile(args.bench)
    except re.error as exc:
        args.parser.error(f"--bench {args.bench!r}: not a regular expression ({exc})")
    except ValueError as exc:
        args.parser.error(str(exc))
    in_range = len(the_plan.commits)
    if shard is not None or target != results:
        the_plan = fleet.narrow(the_plan, shard, target)
    if shard is not None:
        print(f"shard {shard} ({shard.source}): {len(the_plan.commits)} of {in_range} "
              f"commit(s) in range (round-robin by position); results in {target}")
    print(f"{machine}: {len(the_plan.commits)} commit(s) in range, "
          f"{len(the_plan.recorded)} recorded, {len(the_plan.todo)} to measure")
    if args.dry_run or not the_plan.todo:
        for commit in the_plan.todo:
            print(f"  would measure {commit[:8]}")
        return 0
    extra = ["--bench", args.bench] if args.bench else []
    try:
        if gpus is not None:
            code, measured = fleet.record_gpus(the_plan, conf_path, gpus, extra=extra)
        elif target != results:
            with fleet.derived_config(conf_path, target,
                                      fleet.env_dir_for(conf_path, target)) as derived:
                code, measured = record.record(the_plan, derived, extra=extra)
        else:
            code, measured = record.record(the_plan, conf_path, extra=extra)
    except ValueError as exc:  # a lock is held by another recording, or a merge refused
        print(f"kvbench record: {exc}", file=sys.stderr)
        return 1
    if code == 130:
        return 130
    return 0 if code == 0 and len(measured) == len(the_plan.todo) else 1


def check_results_dir(path: Path, *, create: bool) -> None:
    """ValueError unless `path` is a folder results can be written to: made now when `create`
    (a recording would make it anyway) and probed with a file, as the results will be
    written (os.access says yes to root anywhere, /proc included); a dry run only refuses a
    path that is not a folder."""
    from kvbench.core.jsonfile import check_writable

    if path.exists() and not path.is_dir():
        raise ValueError(f"results folder {path}: exists and is not a directory")
    if not create:
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"results folder {path}: cannot be created ({exc.strerror})") from None
    try:
        check_writable(path / "results.probe")
    except ValueError:
        raise ValueError(f"results folder {path}: not writable") from None


def _results_dir(conf_path: Path) -> Path:
    """The results directory asv.conf.json names, relative to its folder."""
    from asv import util as asv_util

    conf = asv_util.load_json(str(conf_path), js_comments=True)
    return (conf_path.parent / conf.get("results_dir", "results")).resolve()


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
