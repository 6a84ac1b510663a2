"""Which commits a machine's history lacks, and `asv run` over exactly those, resumably.

A machine's history is the set of result files asv wrote under results/<machine>/ (one per
commit and environment). Recording brings it up to date: every first-parent commit of a range
that has no result file yet is measured by the real `asv run` (so plain asv commands keep
working on the same files), newest first: an interrupted recording has measured the commits
a CI gate and a kernel engineer ask about first, and the older ones fill in later.

Resuming is the same call again. asv saves a commit's result file only when the commit is
done; a commit cut off by SIGINT or a killed machine has no file and is measured again, one
that has a file is never measured twice. One recording at a time writes a machine folder
(asv's Results are read-modified-written per commit): a lock file beside the results says so.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from kvbench.core.processes import run_tree
from kvbench.history.asv.repo import first_parent_line, resolve, resolve_range

#: The lock a recording holds on its machine folder while asv writes there.
LOCK_NAME = ".kvbench-record.lock"


@dataclass
class Plan:
    """What one recording measures: `todo` newest first, and what it found already there."""

    machine: str
    results_dir: Path
    commits: list[str]  # the range's commits, oldest first
    recorded: list[str]  # those with a result file already
    todo: list[str] = field(default_factory=list)  # the rest, newest first


def recorded_commits(results_dir: Path, machine: str) -> set[str]:
    """Short (8-character) hashes with a whole result file for `machine` under results_dir (a
    file that does not read as asv's JSON, e.g. cut off by a killed machine, does not count:
    that commit is measured again)."""
    folder = Path(results_dir) / machine
    return {p.name.split("-", 1)[0] for p in folder.glob("*-*.json") if _whole(p)}


def _whole(path: Path) -> bool:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("results"), dict)


def default_range(repo: Path, results_dir: Path, machine: str) -> list[str]:
    """The commits after the newest recorded commit on HEAD's first-parent line, oldest
    first; [HEAD] when the machine has recorded none of that line."""
    line = first_parent_line(repo)
    done = recorded_commits(results_dir, machine)
    newest = max((i for i, c in enumerate(line) if c[:8] in done), default=None)
    return line[-1:] if newest is None else line[newest + 1:]


def plan(repo: Path, results_dir: Path, machine: str, range_text: str | None) -> Plan:
    """The recording of `range_text` ('BASE..END': the commits after BASE up to END; None:
    default_range) for `machine`: what is already there and what is left, newest first."""
    if range_text is None:
        commits = default_range(repo, results_dir, machine)
    elif ".." in range_text:
        commits = resolve_range(repo, range_text)[1:]
    else:
        commits = [resolve(repo, range_text)]
    done = recorded_commits(results_dir, machine)
    recorded = [c for c in commits if c[:8] in done]
    todo = [c for c in reversed(commits) if c[:8] not in done]
    return Plan(machine, Path(results_dir), commits, recorded, todo)


@contextmanager
def machine_lock(results_dir: Path, machine: str) -> Iterator[Path]:
    """Hold the machine folder's recording lock; ValueError naming it when another holds it."""
    folder = Path(results_dir) / machine
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"{folder} is being recorded by another process (it holds "
                             f"{path}); wait for it or stop it") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield path
    finally:
        os.close(fd)


def asv_command(conf_path: Path, machine: str, hashfile: Path,
                extra: Sequence[str] = ()) -> list[str]:
    """`asv run` over exactly the commits listed in `hashfile`, in that order."""
    return [sys.executable, "-m", "asv", "--config", str(conf_path), "run", "--machine", machine,
            "--record-samples", "--launch-method", "forkserver", "--skip-existing-commits",
            *extra, f"HASHFILE:{hashfile}"]


#: Commits named in record's log lines; a longer list ends with how many more there are
#: (a range of a hundred commits would otherwise print a hundred hashes twice).
LISTED = 10


def listed(commits: Sequence[str]) -> str:
    """`commits` as short hashes, the first LISTED of them and a count of the rest."""
    shown = " ".join(c[:8] for c in commits[:LISTED])
    more = len(commits) - LISTED
    return shown + (f" and {more} more" if more > 0 else "")


def record(the_plan: Plan, conf_path: Path, *, extra: Sequence[str] = (),
           log: Callable[[str], None] = print,
           run: Callable[..., subprocess.CompletedProcess] = run_tree
           ) -> tuple[int, list[str]]:
    """asv run (`run`: processes.run_tree, or a stand-in in tests) over the plan's commits (newest
    first) under the machine lock; returns asv's exit status and the commits that have a
    result file afterwards."""
    if not the_plan.todo:
        return 0, []
    with machine_lock(the_plan.results_dir, the_plan.machine), \
            tempfile.TemporaryDirectory(prefix="kvbench-record-") as tmp:
        hashfile = Path(tmp) / "commits.txt"
        hashfile.write_text("".join(f"{c}\n" for c in the_plan.todo))
        command = asv_command(conf_path, the_plan.machine, hashfile, extra)
        log(f"recording {len(the_plan.todo)} commit(s) on {the_plan.machine}, newest first: "
            f"{listed(the_plan.todo)}")
        start = time.monotonic()
        try:
            code = run(command, cwd=conf_path.parent, check=False).returncode
        except KeyboardInterrupt:
            code = 130
        elapsed = time.monotonic() - start
    done = recorded_commits(the_plan.results_dir, the_plan.machine)
    measured = [c for c in the_plan.todo if c[:8] in done]
    per = f", {elapsed / len(measured):.1f} s per commit" if measured else ""
    left = [c for c in the_plan.todo if c[:8] not in done]
    log(f"recorded {len(measured)} of {len(the_plan.todo)} commit(s) in {elapsed:.0f} s{per}"
        + (f"; not recorded: {listed(left)} (run the same command again to resume)"
           if left else ""))
    return code, measured
