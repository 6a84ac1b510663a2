"""End to end: `kvbench record` killed mid-range resumes without losing or repeating a result.

The real asv on a real history of four commits (tests/e2e/test_asv_e2e.py builds it; the suite
measures the allocator class only there). `kvbench record c0..c3` measures c3, c2, c1 newest
first; it is killed with SIGKILL (its whole process group: asv and its measuring processes)
once c3's result file exists. The same command then measures exactly c2 and c1: c3's file is
left byte for byte, every commit has one result file, and the lock of the killed recording
does not block the next.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from test_asv_e2e import MACHINE, ROOT, harmless, make_history


def _results(machine_dir) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in machine_dir.glob("*-*.json")}


@pytest.mark.e2e
def test_a_killed_recording_resumes_and_measures_nothing_twice(tmp_path):
    hist = make_history(tmp_path, [("c1", harmless(1)), ("c2", harmless(2)),
                                   ("c3", harmless(3))])
    c = hist.commits
    env = dict(hist.env, PYTHONPATH=str(ROOT))  # the kvbench under test drives asv
    command = [sys.executable, "-m", "kvbench.cli", "record", f"{c['c0']}..{c['c3']}",
               "--machine", MACHINE]
    machine_dir = hist.repo / "results" / MACHINE
    log = (tmp_path / "first.log").open("w")
    proc = subprocess.Popen(command, cwd=hist.repo, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 900
    while not _results(machine_dir):
        assert proc.poll() is None, (tmp_path / "first.log").read_text()[-4000:]
        assert time.monotonic() < deadline, "no result file within 900 s"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    log.close()
    first = _results(machine_dir)
    assert list(first) == [f"{c['c3'][:8]}-{next(iter(first)).split('-', 1)[1]}"], first.keys()

    again = subprocess.run(command, cwd=hist.repo, env=env, capture_output=True, text=True,
                           timeout=900, check=False)
    out = again.stdout + again.stderr
    assert again.returncode == 0, out[-4000:]
    assert "3 commit(s) in range, 1 recorded, 2 to measure" in out, out[-4000:]
    assert f"newest first: {c['c2'][:8]} {c['c1'][:8]}" in out, out[-4000:]
    after = _results(machine_dir)
    assert sorted(name[:8] for name in after) == sorted(c[k][:8] for k in ("c1", "c2", "c3"))
    for name, body in first.items():
        assert after[name] == body, f"{name} was measured again"
    done = subprocess.run(command, cwd=hist.repo, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0 and "3 recorded, 0 to measure" in done.stdout, done.stdout
