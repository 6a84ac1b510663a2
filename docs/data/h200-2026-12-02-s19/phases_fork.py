"""Where a host-group measuring process's wall time goes, in the suite's own structure
(benchmarks/_common.measure_group: forked children, one after another). Wrappers only, no
profiler. --preimport imports torch in the parent before the children fork.
    python phases_fork.py [--preimport] [--processes N]"""
import argparse
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
ap = argparse.ArgumentParser(); ap.add_argument("--preimport", action="store_true")
ap.add_argument("--processes", type=int, default=3); a = ap.parse_args()
os.environ["KVBENCH_HOST_PROCESSES"] = str(a.processes)
t0 = time.perf_counter()
if a.preimport:
    import torch  # noqa: F401
t_pre = time.perf_counter() - t0
from benchmarks import _common as c
from benchmarks import _isolate

acc = collections.defaultdict(float); cnt = collections.Counter()
def wrap(mod, name, label=None):
    f = getattr(mod, name); label = label or f"{mod.__name__.split('.')[-1]}.{name}"
    def w(*x, **k):
        t = time.perf_counter()
        try: return f(*x, **k)
        finally: acc[label] += time.perf_counter() - t; cnt[label] += 1
    setattr(mod, name, w)
orig_here = c.measure_group_here
def here(group):
    ts = time.perf_counter()
    import torch  # noqa
    acc["child import torch"] += time.perf_counter() - ts
    ts = time.perf_counter()
    import kvbench.ops.kv_alloc as ka
    from benchmarks import _host, _sidecar
    from benchmarks import dispatch_overhead as do
    from kvbench.harness import timers
    from kvbench.measure import pipeline
    acc["child import kvbench"] += time.perf_counter() - ts
    for mod, name in [(_host, "pin_fastest_core"), (_host, "canary_us"), (timers, "bench_host"),
                      (timers, "_wall_per_iteration"), (pipeline, "check"), (pipeline, "select"),
                      (pipeline, "time_call"), (pipeline, "implausible"), (c, "measure_host_case"),
                      (c, "prepare_process"), (ka, "alloc_inputs"), (_sidecar, "kernel_resources"),
                      (do, "_inputs"), (c, "pin_host_process")]:
        wrap(mod, name)
    out = orig_here(group)
    acc["child measure_group_here"] += time.perf_counter() - ts
    print("CHILD " + json.dumps({k: round(v, 3) for k, v in acc.items()} | {"n": dict(cnt)}), flush=True)
    return out
c.measure_group_here = here
orig_iso = _isolate.run_isolated
def iso(*x, **k):
    ts = time.perf_counter(); out = orig_iso(*x, **k)
    print(f"CHILDWALL {time.perf_counter() - ts:.2f}", flush=True); return out
_isolate.run_isolated = iso
c._isolate.run_isolated = iso
ts = time.perf_counter()
out = c.measure_group("host")
print(f"PARENT preimport={a.preimport} import {t_pre:.2f} s, group {time.perf_counter() - ts:.2f} s")
