"""Recording on a fleet: shards of a commit range, one worker per GPU, each its own results.

asv runs one benchmark process at a time and its `Results.load_data` is read-modify-write, so
two asv processes must never write one results directory. A fleet therefore splits the work
by commit and gives every worker its own results directory, which `kvbench merge`
(kvbench/history/asv/merge.py) joins afterwards.

**Shards.** `kvbench record RANGE --shard I/N` measures shard I (0-based) of N: the range's
first-parent commits, oldest first, dealt round-robin by position (commit k goes to shard
k mod N). Every shard then spans the whole range, so a fleet cut off half-way has measured
every part of it at a coarser grain, and two devices of one model interleave along the
history (the verdict engine estimates a device's offset from the differences where devices
alternate: kvbench/history/verdict/devices.py). The partition is taken before the commits
already recorded are left out: every shard computes the same partition whatever the others
have finished. The index comes from the scheduler when one runs the job (`scheduler_shard`);
an explicit I/N overrides it.

**Derived configs.** A worker writing elsewhere than asv.conf.json's results_dir runs asv
with a copy of the config (beside it, so the config's relative paths and its `.`-plugin
resolve alike) whose results_dir is the worker's and whose env_dir is its own: two asv
processes building into one environment directory would overwrite each other's builds.

**GPUs.** `--gpus` runs one worker per GPU on one host, each with its own
CUDA_VISIBLE_DEVICES, results directory and environment, pulling commits one at a time from
one queue (newest first), then merges the workers' results into the target.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvbench.core.processes import ChildTrees
from kvbench.history.asv.record import Plan, asv_command, recorded_commits

#: Where a --gpus recording keeps each worker's results and environment, under the config's
#: folder (.asv/ is asv's own working folder, ignored by git).
GPU_WORK = Path(".asv") / "gpus"
#: The name of a config derived for one worker, beside asv.conf.json (.gitignore lists it).
DERIVED_PREFIX = ".kvbench-asv-"


@dataclass(frozen=True)
class Shard:
    """Shard `index` (0-based) of `count`, and where the numbers came from."""

    index: int
    count: int
    source: str  # "--shard", or the scheduler variable(s) read

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _integer(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {text!r}") from None


def parse_shard(text: str) -> tuple[int | None, int]:
    """--shard's value: 'I/N' -> (I, N), or 'N' alone -> (None, N) (the index then comes from
    the scheduler). ValueError with a one-line reason for anything else."""
    index_text, sep, count_text = text.partition("/")
    if not sep:
        index_text, count_text = "", index_text
    count = _integer(count_text, f"--shard {text}: the shard count N")
    if count < 1:
        raise ValueError(f"--shard {text}: the shard count N must be at least 1, got {count}")
    if not sep:
        return None, count
    index = _integer(index_text, f"--shard {text}: the shard index I")
    if not 0 <= index < count:
        raise ValueError(f"--shard {text}: the shard index I must be in 0..{count - 1} "
                         f"(0-based), got {index}")
    return index, count


def scheduler_shard(env: Mapping[str, str]) -> tuple[int, int | None, str] | None:
    """(index, count or None, source) from the scheduler running this process, or None.

    - Slurm job array: SLURM_ARRAY_TASK_ID, made 0-based by SLURM_ARRAY_TASK_MIN and
      SLURM_ARRAY_TASK_STEP (an array 1-8 or 0-14:2 is 8 shards), SLURM_ARRAY_TASK_COUNT.
    - Kubernetes Indexed Job: JOB_COMPLETION_INDEX; the count is not in the pod's
      environment, so --shard N gives it.
    - Buildkite parallelism: BUILDKITE_PARALLEL_JOB and BUILDKITE_PARALLEL_JOB_COUNT.
    GitHub Actions has no such variable: a matrix passes --shard ${{ matrix.shard }}/N."""
    if env.get("SLURM_ARRAY_TASK_ID"):
        task = _integer(env["SLURM_ARRAY_TASK_ID"], "SLURM_ARRAY_TASK_ID")
        low = _integer(env.get("SLURM_ARRAY_TASK_MIN") or "0", "SLURM_ARRAY_TASK_MIN")
        step = _integer(env.get("SLURM_ARRAY_TASK_STEP") or "1", "SLURM_ARRAY_TASK_STEP")
        count = env.get("SLURM_ARRAY_TASK_COUNT")
        return ((task - low) // max(step, 1),
                None if not count else _integer(count, "SLURM_ARRAY_TASK_COUNT"),
                "SLURM_ARRAY_TASK_ID")
    if env.get("JOB_COMPLETION_INDEX"):
        return (_integer(env["JOB_COMPLETION_INDEX"], "JOB_COMPLETION_INDEX"), None,
                "JOB_COMPLETION_INDEX")
    if env.get("BUILDKITE_PARALLEL_JOB"):
        count = env.get("BUILDKITE_PARALLEL_JOB_COUNT")
        return (_integer(env["BUILDKITE_PARALLEL_JOB"], "BUILDKITE_PARALLEL_JOB"),
                None if not count else _integer(count, "BUILDKITE_PARALLEL_JOB_COUNT"),
                "BUILDKITE_PARALLEL_JOB")
    return None


def resolve_shard(option: str | None, env: Mapping[str, str]) -> Shard | None:
    """The shard this recording measures, or None for the whole range.

    --shard I/N is used as given (it overrides any scheduler variable). --shard N takes the
    index from the scheduler (an error when none is set, or when the scheduler's own count
    differs). Without --shard, a scheduler that sets both index and count (a Slurm array,
    Buildkite parallelism) shards the recording; a Kubernetes index without a count is an
    error, since every pod would otherwise record the whole range."""
    found = scheduler_shard(env)
    resubmitted = _resubmitted_slurm_task(env)
    if option is not None:
        index, count = parse_shard(option)
        if index is not None:
            return Shard(index, count, "--shard")
        if resubmitted is not None:
            return _checked(Shard(resubmitted, count, "SLURM_ARRAY_TASK_ID of an array of one "
                                                      "(a resubmitted task) with --shard's count"))
        if found is None:
            raise ValueError(f"--shard {option}: no shard index in the environment (none of "
                             "SLURM_ARRAY_TASK_ID, JOB_COMPLETION_INDEX, BUILDKITE_PARALLEL_JOB "
                             f"is set); pass --shard I/{count}")
        index, own_count, source = found
        if own_count is not None and own_count != count:
            raise ValueError(f"--shard {option}: the scheduler runs {own_count} shards "
                             f"({source}'s count), not {count}")
        return _checked(Shard(index, count, f"{source} with --shard's count"))
    if found is None:
        return None
    if resubmitted is not None:
        raise ValueError(f"a Slurm array of one task, index {resubmitted}: a task of a larger "
                         "array resubmitted (--array=I)? Name the shard count: --shard N (the "
                         f"index is then {resubmitted}), or --shard I/N")
    index, count, source = found
    if count is None:
        raise ValueError(f"{source} is set but gives no shard count: pass --shard N (the "
                         "number of indexes), or --shard I/N")
    return _checked(Shard(index, count, source))


def _resubmitted_slurm_task(env: Mapping[str, str]) -> int | None:
    """SLURM_ARRAY_TASK_ID of an array of one task with a nonzero index (`sbatch --array=3`,
    the docs' way to resume one task of an array 0-N), else None. Its MIN is its own index,
    so the index relative to the array (scheduler_shard) would read 0."""
    if env.get("SLURM_ARRAY_TASK_ID") and (env.get("SLURM_ARRAY_TASK_COUNT") or "").strip() == "1":
        task = _integer(env["SLURM_ARRAY_TASK_ID"], "SLURM_ARRAY_TASK_ID")
        return task if task != 0 else None
    return None


def _checked(shard: Shard) -> Shard:
    if shard.count < 1:
        raise ValueError(f"{shard.source}: a shard count of {shard.count}; it must be at "
                         "least 1")
    if not 0 <= shard.index < shard.count:
        raise ValueError(f"{shard.source}: shard index {shard.index} is outside 0..."
                         f"{shard.count - 1}")
    return shard


def partition(commits: Sequence[str], shard: Shard | None) -> list[str]:
    """The shard's commits of `commits` (oldest first): position k goes to shard k mod N."""
    return list(commits) if shard is None else list(commits[shard.index::shard.count])


def shard_results_dir(results_dir: Path, shard: Shard) -> Path:
    """Where a shard writes by default: `<results>-shard-I-of-N` beside the results folder."""
    results_dir = Path(results_dir)
    return results_dir.with_name(f"{results_dir.name}-shard-{shard.index}-of-{shard.count}")


def narrow(the_plan: Plan, shard: Shard | None, results_dir: Path) -> Plan:
    """`the_plan` for one shard written into `results_dir`: its partition of the range, less
    the commits recorded in the plan's results folder or in `results_dir`, newest first."""
    results_dir = Path(results_dir)
    commits = partition(the_plan.commits, shard)
    done = recorded_commits(the_plan.results_dir, the_plan.machine)
    if results_dir.resolve() != Path(the_plan.results_dir).resolve():
        done |= recorded_commits(results_dir, the_plan.machine)
    recorded = [c for c in commits if c[:8] in done]
    todo = [c for c in reversed(commits) if c[:8] not in done]
    return Plan(the_plan.machine, results_dir, commits, recorded, todo)


@contextlib.contextmanager
def derived_config(conf_path: Path, results_dir: Path, env_dir: Path) -> Iterator[Path]:
    """A copy of asv.conf.json, beside it, writing results to `results_dir` and building in
    `env_dir` (module docstring); removed when the block ends."""
    from asv import util as asv_util

    conf_path = Path(conf_path)
    conf = asv_util.load_json(str(conf_path), js_comments=True)
    conf["results_dir"] = str(Path(results_dir).resolve())
    conf["env_dir"] = str(Path(env_dir).resolve())
    fd, name = tempfile.mkstemp(dir=conf_path.parent, prefix=DERIVED_PREFIX,
                                suffix=".conf.json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(conf, f, indent=2)
        yield Path(name)
    finally:
        Path(name).unlink(missing_ok=True)


def env_dir_for(conf_path: Path, results_dir: Path) -> Path:
    """The environment folder of a worker writing to `results_dir`: one per results folder
    name under .asv/, so workers of one checkout never build into one environment."""
    return Path(conf_path).parent / ".asv" / f"env-{Path(results_dir).name}"


def list_gpus(text: str, env: Mapping[str, str] | None = None,
              run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> list[str]:
    """--gpus' value as CUDA_VISIBLE_DEVICES entries: 'all' is the devices this process may
    see (CUDA_VISIBLE_DEVICES when set, else every GPU nvidia-smi lists), a list is taken as
    given ('0,1', or UUIDs). ValueError when the list is empty or repeats a device."""
    env = os.environ if env is None else env
    if text.strip() == "all":
        if env.get("CUDA_VISIBLE_DEVICES", "").strip():
            gpus = [g.strip() for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
        else:
            try:
                out = run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"],
                          capture_output=True, text=True, check=False, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                out = None
            gpus = [] if out is None or out.returncode else out.stdout.split()
        if not gpus:
            raise ValueError("--gpus all: no GPU found (CUDA_VISIBLE_DEVICES is unset and "
                             "nvidia-smi lists none); name them, e.g. --gpus 0,1")
        return gpus
    gpus = [g.strip() for g in text.split(",")]
    if not gpus or any(not g for g in gpus):
        raise ValueError(f"--gpus {text}: expected 'all' or a comma-separated list of GPU "
                         "indexes or UUIDs, e.g. 0,1")
    if len(set(gpus)) != len(gpus):
        raise ValueError(f"--gpus {text}: a GPU is listed twice (two workers on one GPU would "
                         "measure each other)")
    return gpus


def gpu_worker_dir(conf_path: Path, gpu: str, target: Path) -> Path:
    """The folder of the worker of `gpu` recording into `target`: results/ and env/ inside
    it, one per target folder (a shard's worker leftovers are merged into that shard's
    folder only, under its lock)."""
    def safe(text: str) -> str:
        return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)

    return Path(conf_path).parent / GPU_WORK / safe(Path(target).name) / f"gpu{safe(gpu)}"


def record_gpus(the_plan: Plan, conf_path: Path, gpus: Sequence[str], *,
                extra: Sequence[str] = (), log: Callable[[str], None] = print,
                run: Callable[..., subprocess.CompletedProcess] | None = None
                ) -> tuple[int, list[str]]:
    """One worker per GPU over `the_plan.todo` (newest first, one queue), then a merge of the
    workers' results into `the_plan.results_dir`; (exit status, commits recorded there).

    Each worker runs `asv run` over one commit at a time with CUDA_VISIBLE_DEVICES set to its
    GPU, writing to its own results folder with its own environment. A worker folder left by
    an interrupted recording is merged in first (merge.py's duplicate rule applies), so the
    same command resumes. The target's machine folder is locked for the whole recording.
    An interruption (Ctrl-C, or SIGTERM under `interruptible`) stops every worker's asv
    (ChildTrees): a commit cut off keeps no result file and is measured by the next
    recording; what the workers finished is merged."""
    from kvbench.history.asv.merge import merge
    from kvbench.history.asv.record import machine_lock

    children = ChildTrees()
    run = run or children.run

    machine, target = the_plan.machine, Path(the_plan.results_dir)
    workers = {gpu: gpu_worker_dir(conf_path, gpu, target) for gpu in gpus}
    todo: queue.Queue[str] = queue.Queue()
    failures: list[str] = []
    lock = threading.Lock()

    def work(gpu: str) -> None:
        folder = workers[gpu]
        results = folder / "results"
        with derived_config(conf_path, results, folder / "env") as conf, \
                tempfile.TemporaryDirectory(prefix="kvbench-gpu-") as tmp:
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu)
            while True:
                try:
                    commit = todo.get_nowait()
                except queue.Empty:
                    return
                hashfile = Path(tmp) / "commit.txt"
                hashfile.write_text(f"{commit}\n")
                with lock:
                    log(f"GPU {gpu}: measuring {commit[:8]}")
                code = run(asv_command(conf, machine, hashfile, extra), cwd=conf.parent,
                           env=env, check=False).returncode
                if children.stopping:
                    return
                if code or commit[:8] not in recorded_commits(results, machine):
                    with lock:
                        failures.append(commit)
                        log(f"GPU {gpu}: {commit[:8]} not recorded (asv exit {code})")

    with machine_lock(target, machine):
        _merge_workers(workers, target, machine, merge, log, "left by an earlier recording")
        recorded = recorded_commits(target, machine)  # leftovers merged: not measured again
        for commit in the_plan.todo:
            if commit[:8] not in recorded:
                todo.put(commit)
        threads = [threading.Thread(target=work, args=(gpu,), name=f"kvbench-gpu{gpu}")
                   for gpu in gpus]
        log(f"recording {todo.qsize()} commit(s) on {machine} with {len(gpus)} GPU "
            f"worker(s) ({', '.join(gpus)}), newest first")
        interrupted = False
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                thread.join()
        except KeyboardInterrupt:
            interrupted = True
            while not todo.empty():  # start no other commit
                with contextlib.suppress(queue.Empty):
                    todo.get_nowait()
            log("interrupted: stopping every GPU worker's asv")
            children.stop()
            for thread in threads:
                thread.join()
        _merge_workers(workers, target, machine, merge, log, "measured now")
    done = recorded_commits(target, machine)
    measured = [c for c in the_plan.todo if c[:8] in done]
    if interrupted:
        return 130, measured
    return (0 if len(measured) == len(the_plan.todo) else 1), measured


def _merge_workers(workers: Mapping[str, Path], target: Path, machine: str, merge,
                   log: Callable[[str], None], what: str) -> None:
    """Merge every worker folder holding results of `machine` into `target` (the caller
    holds the target's lock), then empty the worker's results folder."""
    import shutil

    sources = [folder / "results" for folder in workers.values()
               if recorded_commits(folder / "results", machine)]
    if not sources:
        return
    report = merge(sources, target, hold_target_locks=False)
    log(f"merged {len(report.added)} result(s) {what} from {len(sources)} GPU worker(s) into "
        f"{target}" + "".join(f"\n  {line}" for line in report.notes))
    for source in sources:
        shutil.rmtree(source)
