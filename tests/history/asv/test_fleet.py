"""kvbench record's fleet options: which shard a process is (--shard, scheduler variables),
the round-robin partition, a shard's plan, the GPU list."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_record import _repo, _store

from kvbench.history.asv import fleet, record


@pytest.mark.parametrize(("text", "reason"), [
    ("2/2", "must be in 0..1"), ("0/0", "at least 1"), ("x/2", "shard index I must be"),
    ("1/y", "shard count N must be an integer"), ("-1/3", "must be in 0..2"),
    ("1.5/3", "must be an integer"), ("", "must be an integer")])
def test_bad_shards_are_one_line_errors(text, reason):
    with pytest.raises(ValueError, match=reason) as exc:
        fleet.resolve_shard(text, {})
    assert "\n" not in str(exc.value)


def test_explicit_shard_overrides_the_scheduler():
    env = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert fleet.resolve_shard("1/2", env) == fleet.Shard(1, 2, "--shard")
    assert fleet.resolve_shard(None, {}) is None


def test_scheduler_variables():
    slurm = {"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1",
             "SLURM_ARRAY_TASK_COUNT": "8"}
    assert (fleet.resolve_shard(None, slurm).index, fleet.resolve_shard(None, slurm).count) \
        == (4, 8)
    stepped = {"SLURM_ARRAY_TASK_ID": "6", "SLURM_ARRAY_TASK_MIN": "0",
               "SLURM_ARRAY_TASK_STEP": "2", "SLURM_ARRAY_TASK_COUNT": "4"}
    assert fleet.resolve_shard(None, stepped).index == 3
    buildkite = {"BUILDKITE_PARALLEL_JOB": "2", "BUILDKITE_PARALLEL_JOB_COUNT": "3"}
    assert fleet.resolve_shard(None, buildkite) == fleet.Shard(2, 3, "BUILDKITE_PARALLEL_JOB")
    k8s = {"JOB_COMPLETION_INDEX": "1"}
    with pytest.raises(ValueError, match="gives no shard count: pass --shard N"):
        fleet.resolve_shard(None, k8s)
    assert fleet.resolve_shard("4", k8s) == fleet.Shard(
        1, 4, "JOB_COMPLETION_INDEX with --shard's count")
    with pytest.raises(ValueError, match="outside 0...3"):
        fleet.resolve_shard("4", {"JOB_COMPLETION_INDEX": "4"})
    with pytest.raises(ValueError, match="runs 8 shards"):
        fleet.resolve_shard("4", slurm)
    with pytest.raises(ValueError, match="pass --shard I/4"):
        fleet.resolve_shard("4", {})
    # the docs' resume of one task of an array 0-7: `sbatch --array=3 ... --shard 8`
    again = {"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_MIN": "3",
             "SLURM_ARRAY_TASK_MAX": "3", "SLURM_ARRAY_TASK_COUNT": "1"}
    assert (fleet.resolve_shard("8", again).index, fleet.resolve_shard("8", again).count) == (3, 8)
    with pytest.raises(ValueError, match="array of one task, index 3.*--shard N"):
        fleet.resolve_shard(None, again)  # was shard 0/1: the whole range, another folder
    assert fleet.resolve_shard("3/8", again) == fleet.Shard(3, 8, "--shard")
    with pytest.raises(ValueError, match="SLURM_ARRAY_TASK_ID must be an integer"):
        fleet.resolve_shard(None, {"SLURM_ARRAY_TASK_ID": "a", "SLURM_ARRAY_TASK_COUNT": "2"})


def test_the_partition_is_round_robin_and_covers_the_range_once():
    commits = [f"{i:08x}" for i in range(10)]
    shards = [fleet.partition(commits, fleet.Shard(i, 3, "t")) for i in range(3)]
    assert shards[0] == [commits[0], commits[3], commits[6], commits[9]]
    assert sorted(c for shard in shards for c in shard) == commits


def test_a_shard_plans_its_partition_whatever_the_others_recorded(tmp_path):
    repo, c = _repo(tmp_path, 7)
    results = tmp_path / "results"
    _store(results, c[3])  # in the project's results: not measured again by its shard
    shard_dir = tmp_path / "results-shard-1-of-2"
    _store(shard_dir, c[6])  # its own earlier, interrupted run
    _store(tmp_path / "results-shard-0-of-2", c[1])  # another shard's: not this one's business
    whole = record.plan(repo, results, "box", f"{c[0]}..{c[6]}")
    p = fleet.narrow(whole, fleet.Shard(1, 2, "t"), shard_dir)
    assert p.commits == [c[2], c[4], c[6]] and p.recorded == [c[6]]
    assert p.todo == [c[4], c[2]] and p.results_dir == shard_dir
    other = fleet.narrow(whole, fleet.Shard(0, 2, "t"), tmp_path / "results-shard-0-of-2")
    assert other.commits == [c[1], c[3], c[5]] and other.todo == [c[5]]


def test_gpu_lists():
    assert fleet.list_gpus("0,1") == ["0", "1"]
    assert fleet.list_gpus("all", {"CUDA_VISIBLE_DEVICES": "2,3"}) == ["2", "3"]
    with pytest.raises(ValueError, match="listed twice"):
        fleet.list_gpus("0,0")
    with pytest.raises(ValueError, match="comma-separated"):
        fleet.list_gpus("0,")

    class NoGpu:
        returncode, stdout = 9, ""

    with pytest.raises(ValueError, match="no GPU found"):
        fleet.list_gpus("all", {}, run=lambda *a, **k: NoGpu())


def test_gpu_workers_resume_without_measuring_a_commit_twice(tmp_path, monkeypatch):
    """The queue was filled before a leftover worker folder was merged, so a commit measured
    by an interrupted recording was measured again; and one worker folder per GPU served
    every shard, so a shard's leftovers were merged into another shard's folder."""
    conf = tmp_path / "asv.conf.json"
    conf.write_text("{}")
    target = tmp_path / "results-shard-1-of-2"
    assert fleet.gpu_worker_dir(conf, "0", target) != fleet.gpu_worker_dir(
        conf, "0", tmp_path / "results-shard-0-of-2")
    commits = ["a" * 40, "b" * 40, "c" * 40]

    def merge_leftover(workers, into, machine, merge, log, what):
        if what.startswith("left by"):  # an earlier recording measured b
            (into / machine).mkdir(parents=True, exist_ok=True)
            (into / machine / f"{'b' * 8}-env.json").write_text('{"results": {}}')

    asked = []

    def fake_asv(command, cwd, env, check):
        hashfile = Path(command[-1].removeprefix("HASHFILE:"))
        asked.append(hashfile.read_text().strip())
        return subprocess.CompletedProcess(command, 1)

    monkeypatch.setattr(fleet, "_merge_workers", merge_leftover)
    the_plan = record.Plan("box", target, commits, [], list(reversed(commits)))
    code, measured = fleet.record_gpus(the_plan, conf, ["0"], run=fake_asv,
                                       log=lambda text: None)
    assert sorted(asked) == ["a" * 40, "c" * 40]
    assert measured == ["b" * 40] and code == 1


#: A stand-in for one worker's `asv run`: it starts a grandchild (asv's forkserver), writes the
#: grandchild's pid under the folder it is given, named by its GPU, and waits.
_WORKER_ASV = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
gpu = os.environ["CUDA_VISIBLE_DEVICES"]
open(os.path.join(sys.argv[1], "pid" + gpu), "w").write(str(grandchild.pid))
time.sleep(120)
"""


def test_a_sigterm_stops_every_gpu_workers_asv(tmp_path):
    """SIGTERM to kvbench alone (a scheduler's preemption) reached none of the workers' asv
    processes: the command waited for each to finish its commit, and a kill after the
    scheduler's grace period left them measuring. Now each worker's asv tree is stopped and
    the recording answers 130 within the stop's grace."""
    conf = tmp_path / "asv.conf.json"
    conf.write_text("{}")
    pids = tmp_path / "pids"
    pids.mkdir()
    script = f"""
import os, signal, sys, threading, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[3])!r})
from pathlib import Path
from kvbench.core import processes
from kvbench.history.asv import fleet, record
fleet.asv_command = lambda conf, machine, hashfile, extra: [
    sys.executable, "-c", {_WORKER_ASV!r}, {str(pids)!r}]
fleet._merge_workers = lambda *a, **k: None
commits = [c * 40 for c in "abcd"]
plan = record.Plan("box", Path({str(tmp_path / "results")!r}), commits, [], commits)
def preempt():
    while len(os.listdir({str(pids)!r})) < 2:
        time.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)
threading.Thread(target=preempt, daemon=True).start()
start = time.monotonic()
with processes.interruptible():
    code, measured = fleet.record_gpus(plan, Path({str(conf)!r}), ["0", "1"], log=print)
print("code", code, "after", round(time.monotonic() - start, 1))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=90, check=True)
    assert "code 130" in out.stdout, out.stdout + out.stderr
    assert "not recorded" not in out.stdout
    assert float(out.stdout.split("after")[-1]) < 30
    for name in ("pid0", "pid1"):
        assert _gone(int((pids / name).read_text()))


def _gone(pid: int, within_s: float = 5.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False
