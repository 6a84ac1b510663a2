"""Child processes that stop with the command that started them.

`kvbench record`, `bisect` and `compare` run `asv run`, which starts a forkserver and
benchmark processes of its own. When kvbench was stopped by a signal its children did not
get (SIGTERM from `timeout`, `kill`, a scheduler's preemption of the parent), asv and its
forkserver went on measuring after kvbench had gone, and kvbench's temporary folders stayed.
Here, when the wait for a child ends in an exception (an interruption, a timeout), the child
and every process it started are stopped (run_tree, stop_tree): SIGINT first, which asv
handles as a Ctrl-C (a commit cut off keeps no result file, so a recording resumes), then
SIGKILL after STOP_GRACE_S. The child stays in kvbench's process group, so a signal to the
whole group (a terminal's Ctrl-C, a scheduler killing the job) still reaches it as before.
`interruptible` makes SIGTERM an interruption of the command (KeyboardInterrupt), so its
cleanup and that stop run as they do on a Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

#: Seconds a stopped tree gets to end after SIGINT before it is killed.
STOP_GRACE_S = 10.0


def run_tree(cmd: Sequence[str], *, capture_output: bool = False, text: bool = False,
             timeout: float | None = None, check: bool = False,
             **popen_kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, ...), except that when the wait ends in an exception
    (TimeoutExpired, KeyboardInterrupt, anything) the child and its descendants are stopped
    (stop_tree), not the child alone; the exception then propagates."""
    if capture_output:
        popen_kwargs.setdefault("stdout", subprocess.PIPE)
        popen_kwargs.setdefault("stderr", subprocess.PIPE)
    with subprocess.Popen(cmd, text=text, **popen_kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            stop_tree(proc)
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def descendants(pid: int) -> list[int]:
    """The processes `pid` started, and theirs, from /proc (Linux; [] where there is none)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while being read
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def stop_tree(proc: subprocess.Popen) -> None:
    """SIGINT to `proc` and its descendants, SIGKILL to what is left of them after
    STOP_GRACE_S; reaps `proc`. The descendants are listed before `proc` can end (an orphan
    is re-parented and could not be found from it afterwards)."""
    stop_trees([proc])


def stop_trees(procs: Sequence[subprocess.Popen]) -> None:
    """stop_tree for several children at once: one SIGINT to every tree, one grace period,
    then SIGKILL to what is left; reaps each child."""
    trees = [(proc, [proc.pid, *descendants(proc.pid)]) for proc in procs]
    for _, tree in trees:
        _signal(tree, signal.SIGINT)
    deadline = time.monotonic() + STOP_GRACE_S
    while time.monotonic() < deadline and any(
            _alive(pid) for _, tree in trees for pid in tree):
        for proc, _ in trees:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.1 / len(trees))
    for proc, tree in trees:
        if proc.returncode is not None:  # reaped: its pid may belong to another process now
            tree = tree[1:]
        _signal([pid for pid in tree if _alive(pid)], signal.SIGKILL)
        proc.wait()


class ChildTrees:
    """Children started by worker threads (`run`, subprocess.run's shape) and stopped
    together by the main thread (`stop`), which is the thread an interruption reaches: a
    SIGTERM to kvbench alone (a scheduler's preemption) reaches none of the workers' asv
    processes, which would go on measuring after kvbench had gone. After `stop`, `run`
    starts nothing and answers exit status 130."""

    def __init__(self) -> None:
        self._live: set[subprocess.Popen] = set()
        self._lock = threading.Lock()
        self.stopping = False

    def run(self, cmd: Sequence[str], *, check: bool = False,
            **popen_kwargs: Any) -> subprocess.CompletedProcess:
        with self._lock:
            if self.stopping:
                return subprocess.CompletedProcess(list(cmd), 130)
            proc = subprocess.Popen(cmd, **popen_kwargs)
            self._live.add(proc)
        try:
            proc.wait()
        finally:
            with self._lock:
                self._live.discard(proc)
        done = subprocess.CompletedProcess(proc.args, proc.returncode)
        if check:
            done.check_returncode()
        return done

    def stop(self) -> None:
        """Start no more children; stop every running one with its descendants (stop_trees)."""
        with self._lock:
            self.stopping = True
            live = list(self._live)
        if live:
            stop_trees(live)


def _signal(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, ended and waiting to be reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread while the block runs (the previous
    handler is restored after it): a command stopped by `timeout` or `kill` cleans up and
    stops its children as on a Ctrl-C. Outside the main thread, a no-op."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
