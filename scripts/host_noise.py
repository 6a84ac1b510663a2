"""Between-process noise of the host-side series, per estimator.

Runs `--processes` fresh interpreters (what asv does for identical commits); each measures a
few host-side series (KVAlloc states, the cached dispatch lookup) `--repeats` times with
bench_host, optionally pinned to one core (os.sched_setaffinity). Per series and estimator it
prints the median and max |relative change| between successive processes:

  first      the first measurement's median (what a single measurement per process gives)
  min        the least of the per-repeat medians
  median     the median of the per-repeat medians

    python scripts/host_noise.py --processes 8 --repeats 5 [--pin] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys

from kvbench.core.jsonfile import output_path, write_json_atomic

SERIES = ("alloc freelist bump n=1", "alloc legacy run_search n=64", "dispatch cached")


def worker(repeats: int, pin: bool) -> dict:
    if pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[-1]})
    import torch

    from kvbench.dispatch import dispatch
    from kvbench.harness import bench_host
    from kvbench.ops.kv_alloc import KVCacheManager, prepare_state

    torch.set_num_threads(1)
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    free = KVCacheManager(1 << 16, device=dev, impl="host/freelist")
    legacy = KVCacheManager(1 << 16, device=dev, impl="torch/legacy")
    dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev)
    calls = {
        SERIES[0]: (lambda: free.alloc(1), lambda: prepare_state(free, "bump", n=1)),
        SERIES[1]: (lambda: legacy.alloc(64), lambda: prepare_state(legacy, "run_search", n=64)),
        SERIES[2]: (lambda: dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev),
                    None),
    }
    return {name: [bench_host(fn, reset).median_us for _ in range(repeats)]
            for name, (fn, reset) in calls.items()}


def changes(values: list[float]) -> tuple[float, float]:
    rel = [abs(b / a - 1) for a, b in itertools.pairwise(values)]
    return statistics.median(rel), max(rel)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--json", default=None, type=output_path,
                    help="also write the table here (atomically)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.processes < 2 or args.repeats < 1:
        ap.error("--processes must be >= 2 and --repeats >= 1")
    if args.worker:
        print(json.dumps(worker(args.repeats, args.pin)))
        return
    runs = []
    for _ in range(args.processes):
        cmd = [sys.executable, __file__, "--worker", "--repeats", str(args.repeats)]
        out = subprocess.run(cmd + (["--pin"] if args.pin else []), check=True,
                             capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    table = {}
    print(f"{args.processes} processes x {args.repeats} repeats, pinned={args.pin}")
    for name in SERIES:
        per = [r[name] for r in runs]
        est = {"first": [p[0] for p in per], "min": [min(p) for p in per],
               "median": [statistics.median(p) for p in per]}
        table[name] = {k: dict(zip(("median_change", "max_change"), changes(v)), values=v)
                       for k, v in est.items()}
        cells = "  ".join(f"{k} {100 * c['median_change']:.1f}% / {100 * c['max_change']:.1f}%"
                          for k, c in table[name].items())
        print(f"  {name:30s} {cells}")
    if args.json:
        write_json_atomic(args.json, {"pinned": args.pin, "processes": args.processes,
                                      "repeats": args.repeats, "series": table}, indent=1)


if __name__ == "__main__":
    main()
