"""Per-sample pairs (canary before the sample, the sample) of the host series, the way
bench_host times them (reset, flush, sync outside; perf_counter around fn + trailing sync), in
N fresh processes pinned to the last core. Offline, any estimator's between-process noise can
be computed from these pairs.   python host_samples.py PROCESSES SAMPLES REPEATS OUT.json"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = next(p for p in Path(__file__).resolve().parents if (p / 'pyproject.toml').is_file())
sys.path.insert(0, str(ROOT))

CANARY_N = 200  # a short canary: a few us, measured right before each sample


def canary_ns():
    t0 = time.perf_counter_ns()
    sum(i * i for i in range(CANARY_N))
    return time.perf_counter_ns() - t0


def worker(samples, repeats):
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[-1]})
    import torch

    from kvbench.dispatch import dispatch
    from kvbench.harness.flush import flusher
    from kvbench.ops.kv_alloc import KVCacheManager, prepare_state
    torch.set_num_threads(1)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    free = KVCacheManager(1 << 16, device=dev, impl="host/freelist")
    legacy = KVCacheManager(1 << 16, device=dev, impl="torch/legacy")
    dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev)
    flush = flusher(torch.device("cuda")) if dev == "cuda" else (lambda: None)
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    big = sum(i * i for i in range(2000))  # noqa: F841 (warm the canary's code)
    calls = {
        "alloc freelist bump n=1": (lambda: free.alloc(1), lambda: prepare_state(free, "bump", n=1)),
        "alloc legacy run_search n=64": (lambda: legacy.alloc(64), lambda: prepare_state(legacy, "run_search", n=64)),
        "dispatch cached": (lambda: dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev), lambda: None),
    }
    out = {}
    for name, (fn, reset) in calls.items():
        reset(); fn(); sync()
        reps = []
        for _ in range(repeats):
            pairs = []
            for _ in range(samples):
                reset(); flush(); sync()
                c = canary_ns()
                t0 = time.perf_counter_ns(); fn(); sync()
                pairs.append((c / 1e3, (time.perf_counter_ns() - t0) / 1e3))
            reps.append(pairs)
        out[name] = reps
    return out


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        print(json.dumps(worker(int(sys.argv[2]), int(sys.argv[3]))))
        sys.exit()
    procs, samples, repeats, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    runs = []
    for i in range(procs):
        t = time.time()
        r = subprocess.run([sys.executable, __file__, "--worker", str(samples), str(repeats)],
                           check=True, capture_output=True, text=True).stdout
        runs.append({"started": t, "series": json.loads(r.strip().splitlines()[-1])})
    json.dump({"canary_loop": CANARY_N, "samples": samples, "repeats": repeats, "runs": runs}, open(path, "w"))
    print("wrote", path, len(runs), "processes")
