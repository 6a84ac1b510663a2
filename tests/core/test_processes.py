"""kvbench.core.processes: a child (and what it started) stops with the command that waited
for it; SIGTERM interrupts a command as a Ctrl-C does."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvbench.core import processes

#: A child that starts a grandchild (as asv starts its forkserver), writes its pid, and waits.
FAMILY = """
import subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
open(sys.argv[1], "w").write(str(grandchild.pid))
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent, init) counts as gone
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"


def _grandchild(pidfile: Path) -> int:
    for _ in range(200):
        if pidfile.exists() and pidfile.read_text():
            return int(pidfile.read_text())
        time.sleep(0.05)
    raise AssertionError("the child did not start its grandchild")


def _gone(pid: int, within_s: float = 5.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_a_timeout_stops_the_child_and_what_it_started(tmp_path):
    """subprocess.run kills only the child; an asv forkserver it started lived on."""
    pidfile = tmp_path / "pid"
    with pytest.raises(subprocess.TimeoutExpired):
        processes.run_tree([sys.executable, "-c", FAMILY, str(pidfile)], timeout=1.5)
    assert _gone(_grandchild(pidfile))


def test_an_interruption_of_the_wait_stops_the_group_and_propagates(tmp_path):
    """SIGTERM while waiting: the command's KeyboardInterrupt (interruptible), the family
    stopped, the exception raised on to the command's own cleanup."""
    pidfile = tmp_path / "pid"
    script = f"""
import os, signal, sys, threading
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from kvbench.core import processes
threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
try:
    with processes.interruptible():
        processes.run_tree([sys.executable, "-c", {FAMILY!r}, {str(pidfile)!r}])
except KeyboardInterrupt as exc:
    print("interrupted:", exc)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, check=True)
    assert "interrupted: signal SIGTERM" in out.stdout
    assert _gone(_grandchild(pidfile))


def test_run_tree_returns_what_subprocess_run_does():
    done = processes.run_tree([sys.executable, "-c", ("print('out'); import sys; "
                                "sys.stderr.write('err'); sys.exit(3)")],
                               capture_output=True, text=True)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err")
    with pytest.raises(subprocess.CalledProcessError):
        processes.run_tree([sys.executable, "-c", "raise SystemExit(1)"], check=True)


def test_interruptible_restores_the_previous_handler():
    before = signal.getsignal(signal.SIGTERM)
    with processes.interruptible():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


def test_the_child_stays_in_the_commands_process_group():
    """A signal to the whole group (a terminal's Ctrl-C, a scheduler or a test killing the
    job) must reach asv too: a child in a session of its own outlived a SIGKILL of the
    group, and a resumed recording then built beside it."""
    done = processes.run_tree([sys.executable, "-c", "import os; print(os.getpgid(0))"],
                              capture_output=True, text=True)
    assert int(done.stdout) == os.getpgid(0)
