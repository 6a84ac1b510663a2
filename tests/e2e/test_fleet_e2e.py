"""End to end: a fleet records one history. The real asv on a real git history (built by
tests/e2e/test_asv_e2e.py), one allocator case measured per commit (KVBENCH_ASV_SELECT) and
one benchmark run by asv (--bench), to keep the minutes down.

1. `kvbench record --gpus 0,1` on a CPU: two workers from one queue, each with its own
   CUDA_VISIBLE_DEVICES (read back from the sidecars the suite wrote), merged into results/.
2. A real Slurm cluster on localhost (munged, slurmctld, slurmd started here, 2 CPUs, a
   minimal slurm.conf in a temp folder): docs/fleet/record-array.sbatch submitted as an array
   of 2 shards over 4 commits, then `kvbench merge` of the shards' folders; the merged results
   hold exactly the commits a serial `kvbench record` plans, and `kvbench regressions` reads
   them. Skips when the Slurm or munge binaries are absent or this is not root (slurmd runs
   jobs as their users); scripts/setup.sh installs them where CI runs (as root, with apt).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_asv_e2e import MACHINE, ROOT, harmless, make_history

CASE = "KVAlloc('host/freelist', 'bump', 1)"
BENCH = r"kv_alloc\.KVAlloc\.track_us"
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch")


def _kvbench(hist, *args, timeout=900, env=None):
    res = subprocess.run([sys.executable, "-m", "kvbench.cli", *args], cwd=hist.repo,
                         env=env or dict(hist.env, PYTHONPATH=str(ROOT),
                                         KVBENCH_ASV_SELECT=CASE),
                         capture_output=True, text=True, timeout=timeout, check=False)
    return res.returncode, res.stdout + res.stderr


def _recorded(results: Path) -> set[str]:
    return {p.name[:8] for p in (results / MACHINE).glob("*-*.json")}


@pytest.mark.e2e
def test_one_worker_per_gpu_from_one_queue(tmp_path):
    hist = make_history(tmp_path, [("c1", harmless(1)), ("c2", harmless(2))])
    c = hist.commits
    code, out = _kvbench(hist, "record", f"{c['c0']}..{c['c2']}", "--machine", MACHINE,
                         "--gpus", "0,1", "--bench", BENCH)
    assert code == 0, out[-4000:]
    results = hist.repo / "results"
    assert _recorded(results) == {c["c1"][:8], c["c2"][:8]}, out[-3000:]
    seen = set()
    for path in (results / MACHINE / "kvbench").glob("*.kvjson"):
        seen.add(json.loads(path.read_text())["device"]["cuda_visible_devices"])
    assert seen == {"0", "1"}, (seen, out[-3000:])
    assert "merged 2 result(s) measured now from 2 GPU worker(s)" in out, out[-3000:]
    assert not list((hist.repo / ".asv" / "gpus").glob("*/*/results"))  # merged, then emptied


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _slurm(tmp: Path) -> dict[str, str]:
    """munged, slurmctld and slurmd on this host, configured under `tmp`; the environment
    the Slurm commands need (SLURM_CONF). The daemons' pid files are under `tmp`."""
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True,
                          check=True).stdout.strip()
    for sub in ("state", "spool"):
        (tmp / sub).mkdir()
    sock = tmp / "munge.sock"
    conf = tmp / "slurm.conf"
    conf.write_text(f"""ClusterName=kvbench-e2e
SlurmctldHost={host}
SlurmctldPort={_free_port()}
SlurmdPort={_free_port()}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={sock}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MpiDefault=none
StateSaveLocation={tmp / 'state'}
SlurmdSpoolDir={tmp / 'spool'}
SlurmctldPidFile={tmp / 'slurmctld.pid'}
SlurmdPidFile={tmp / 'slurmd.pid'}
NodeName={host} CPUs=2 State=UNKNOWN
PartitionName=e2e Nodes=ALL Default=YES MaxTime=INFINITE State=UP
""")
    env = dict(os.environ, SLURM_CONF=str(conf))
    subprocess.run(["munged", "--force", f"--socket={sock}", f"--pid-file={tmp / 'munged.pid'}",
                    f"--log-file={tmp / 'munged.log'}", f"--seed-file={tmp / 'munged.seed'}"],
                   check=True, env=env)
    subprocess.run(["slurmctld", "-f", str(conf), "-L", str(tmp / "slurmctld.log")], check=True,
                   env=env)
    subprocess.run(["slurmd", "-f", str(conf), "-L", str(tmp / "slurmd.log")], check=True,
                   env=env)
    deadline = time.monotonic() + 60
    while True:
        state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True,
                               env=env, check=False).stdout.strip()
        if state in ("idle", "mixed"):
            return env
        assert time.monotonic() < deadline, (state, (tmp / "slurmctld.log").read_text()[-3000:])
        time.sleep(0.5)


def _stop(tmp: Path) -> None:
    for name in ("slurmd", "slurmctld", "munged"):
        pid_file = tmp / f"{name}.pid"
        if pid_file.exists():
            try:
                os.kill(int(pid_file.read_text().split()[0]), signal.SIGTERM)
            except (ProcessLookupError, ValueError):
                pass


@pytest.mark.e2e
def test_a_slurm_array_records_what_a_serial_run_would(tmp_path):
    missing = [name for name in DAEMONS if shutil.which(name) is None]
    if missing:
        pytest.skip(f"Slurm/munge not installed ({', '.join(missing)} missing): "
                    "scripts/setup.sh installs slurm-wlm and munge as root with apt")
    if os.geteuid() != 0:
        pytest.skip("slurmd must run as root to start jobs; CI runs as root")
    hist = make_history(tmp_path, [(f"c{k}", harmless(k)) for k in range(1, 5)])
    c = hist.commits
    span = f"{c['c0']}..{c['c4']}"
    code, serial = _kvbench(hist, "record", span, "--machine", MACHINE, "--dry-run")
    assert code == 0, serial
    planned = {line.split()[-1] for line in serial.splitlines() if "would measure" in line}
    assert planned == {c[f"c{k}"][:8] for k in range(1, 5)}, serial

    slurm = tmp_path / "slurm"
    slurm.mkdir()
    try:
        env = _slurm(slurm)
        job_env = dict(hist.env, PYTHONPATH=str(ROOT), KVBENCH_ASV_SELECT=CASE,
                       SLURM_CONF=env["SLURM_CONF"], PYTHON=sys.executable)
        submit = subprocess.run(
            ["sbatch", "--wait", "--array=0-1", f"--output={slurm}/task-%a.log",
             str(ROOT / "docs" / "fleet" / "record-array.sbatch"), span, "--machine", MACHINE,
             "--bench", BENCH],
            cwd=hist.repo, env=job_env, capture_output=True, text=True, timeout=1500,
            check=False)
        logs = "".join(p.read_text()[-3000:] for p in sorted(slurm.glob("task-*.log")))
        assert submit.returncode == 0, submit.stdout + submit.stderr + logs
    finally:
        _stop(slurm)
    shards = [hist.repo / f"results-shard-{i}-of-2" for i in range(2)]
    # round-robin by position: c1, c3 to shard 0; c2, c4 to shard 1
    assert _recorded(shards[0]) == {c["c1"][:8], c["c3"][:8]}, logs
    assert _recorded(shards[1]) == {c["c2"][:8], c["c4"][:8]}, logs
    code, out = _kvbench(hist, "merge", *map(str, shards), "--into", "results")
    assert code == 0, out
    assert _recorded(hist.repo / "results") == planned
    code, out = _kvbench(hist, "regressions", "--machine", MACHINE, "--fail-on", "never")
    assert code == 0, out[-3000:]
    assert f"{MACHINE}: 4 measured commits" in out, out[-3000:]
