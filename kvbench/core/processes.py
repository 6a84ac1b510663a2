"""Child processes that stop with the command that started them.

`kvbench record`, `bisect` and `compare` run `asv run`, which starts a forkserver and
benchmark processes of its own. When kvbench was stopped by a signal its children did not
get (SIGTERM from `timeout`, `kill`, a scheduler's preemption of the parent), asv and its
forkserver went on measuring after kvbench had gone, and kvbench's temporary folders stayed.
Here a child runs in a process group of its own (run_group), and when the wait for it ends in
an exception (an interruption, a timeout) the whole group is stopped: SIGINT first, which
asv handles as a Ctrl-C (a commit cut off keeps no result file, so a recording resumes), then
SIGKILL after STOP_GRACE_S. `interruptible` makes SIGTERM an interruption of the command
(KeyboardInterrupt), so its cleanup and that stop run as they do on a Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from typing import Any

#: Seconds a stopped group gets to end after SIGINT before it is killed.
STOP_GRACE_S = 10.0


def run_group(cmd: Sequence[str], *, capture_output: bool = False, text: bool = False,
              timeout: float | None = None, check: bool = False,
              **popen_kwargs: Any) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, ...) with the child in a new session (its own process group), and
    the group stopped (stop_group) when the wait ends in an exception: TimeoutExpired,
    KeyboardInterrupt, anything; the exception then propagates."""
    if capture_output:
        popen_kwargs.setdefault("stdout", subprocess.PIPE)
        popen_kwargs.setdefault("stderr", subprocess.PIPE)
    with subprocess.Popen(cmd, start_new_session=True, text=text, **popen_kwargs) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except BaseException:
            stop_group(proc)
            raise
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done


def stop_group(proc: subprocess.Popen) -> None:
    """SIGINT to `proc`'s process group, SIGKILL to it after STOP_GRACE_S; reaps `proc`."""
    for sig, wait in ((signal.SIGINT, STOP_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        if sig is signal.SIGINT:  # proc ended; what else is left of its group goes too
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        return


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
