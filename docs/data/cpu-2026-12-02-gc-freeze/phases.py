"""Self-time attribution of one host-group measuring child (wall clock, no profiler).
python3 phases.py N [inproc]  ; N -> KVBENCH_HOST_PROCESSES"""
import collections, gc, json, os, sys, time
sys.path.insert(0, os.getcwd())
N = sys.argv[1]; INPROC = len(sys.argv) > 2
os.environ["KVBENCH_HOST_PROCESSES"] = N
T0 = time.perf_counter()
from benchmarks import _common as c, _isolate, _host, _sidecar

incl = collections.defaultdict(float); self_ = collections.defaultdict(float); cnt = collections.Counter()
stack = []  # [label, start, child_time]
extra = collections.defaultdict(float)
CTX = {'canary', 'pin_fastest_core', 'dispatch first decisions (_decide, excl golden)', 'golden selfchecks (run_check)', 'pipeline.check (correctness)'}
def wrap(mod, name, label):
    f = getattr(mod, name)
    def w(*a, **k):
        lab0 = label if not stack or label not in CTX else f"{label} <- {stack[-1][0]}"
        stack.append([lab0, time.perf_counter(), 0.0])
        try:
            r = f(*a, **k)
            if label == "bench_host" and r is not None:
                extra["bench_host timed windows (sum of samples)"] += sum(r.samples_us) * 1e-6
                extra["bench_host samples n"] += len(r.samples_us)
            return r
        finally:
            lab, t, ch = stack.pop(); d = time.perf_counter() - t
            incl[lab] += d; self_[lab] += d - ch; cnt[lab] += 1
            if stack: stack[-1][2] += d
    w.__wrapped__ = f
    setattr(mod, name, w); return w

gcst = {}
def gccb(phase, info):
    if phase == "start": gcst["t"] = time.perf_counter()
    else:
        d = time.perf_counter() - gcst["t"]
        extra[f"gc gen{info['generation']} time"] += d; extra[f"gc gen{info['generation']} n"] += 1

orig_here = c.measure_group_here
def here(group):
    t0 = time.perf_counter()
    gc.callbacks.append(gccb)
    stack.append(["child: measure_group_here (self)", t0, 0.0])
    ts = time.perf_counter()
    import torch  # noqa
    incl["import torch (in child)"] += time.perf_counter() - ts; self_["import torch (in child)"] += time.perf_counter() - ts
    stack[-1][2] += time.perf_counter() - ts
    ts = time.perf_counter()
    import kvbench, kvbench.ops.kv_alloc as ka, kvbench.ops.paged_decode, kvbench.ops.kv_write, kvbench.ops.kv_gather_fp8
    import kvbench.fixtures.gather_pool, kvbench.ops.common
    from kvbench.harness import timers; import kvbench.harness as harness
    from kvbench.measure import pipeline
    from kvbench.dispatch import core, golden
    from benchmarks import dispatch_overhead as do, kv_alloc as kab
    d = time.perf_counter() - ts
    incl["import kvbench+benchmarks"] += d; self_["import kvbench+benchmarks"] += d; stack[-1][2] += d
    for mod, name, lab in [
        (c, "prepare_process", "prepare_process"), (c, "pin_host_process", "pin_host_process (3 probe rounds)"),
        (c, "free_device_memory", "free_device_memory (gc.collect)"), (_host, "host_state", "run_group host_state canaries"),
        (_sidecar, "gpu_state", "gpu_state"), (ka, "alloc_inputs", "kv_alloc alloc_inputs (+invariant gate)"),
        (do, "_inputs", "dispatch _inputs (pools)"), (core, "_decide", "dispatch first decisions (_decide, excl golden)"),
        (golden, "run_check", "golden selfchecks (run_check)"),
        (c, "measure_host_case", "CASE"), (_host, "canary_us", "canary"),
        (_host, "pin_fastest_core", "pin_fastest_core"),
        (c, "measure_case", "measure_case self"), (pipeline, "select", "pipeline.select"), (pipeline, "check", "pipeline.check (correctness)"),
        (pipeline, "time_call", "time_call self"), (pipeline, "implausible", "implausible"),
        (c, "suite_ceilings", "suite_ceilings"),
    ]:
        wrap(mod, name, lab)
    bh = wrap(timers, "bench_host", "bench_host")
    pipeline.bench_host = bh; harness.bench_host = bh
    # calls to host_state inside gate: pin_fastest_core/canary_us are already wrapped in _host (globals)
    try:
        return orig_here(group)
    finally:
        lab, t, ch = stack.pop(); dd = time.perf_counter() - t
        incl[lab] += dd; self_[lab] += dd - ch
        gc.callbacks.remove(gccb)
        print("CHILD " + json.dumps({"total": round(dd, 3),
              "self": {k: round(v, 3) for k, v in sorted(self_.items(), key=lambda x: -x[1])},
              "incl": {k: round(v, 3) for k, v in incl.items()}, "n": dict(cnt),
              "extra": {k: round(v, 3) for k, v in extra.items()}}), flush=True)
c.measure_group_here = here
if os.environ.get("FREEZE"):
    _orig_pre = c.preload_torch
    def pre():
        _orig_pre()
        if os.environ.get("FREEZE") == "2":
            import triton, kvbench.dispatch, kvbench.measure.pipeline  # noqa
        gc.freeze()
    c.preload_torch = pre
orig_iso = _isolate.run_isolated
def iso(*a, **k):
    ts = time.perf_counter(); out = orig_iso(*a, **k)
    print(f"CHILDWALL (fork..join, parent view) {time.perf_counter() - ts:.2f}", flush=True); return out
c._isolate.run_isolated = iso
ts = time.perf_counter()
if INPROC:
    c.measure_group_here("host")
else:
    c.measure_group("host")
print(f"PARENT: startup+import {ts-T0:.2f}s, group {time.perf_counter() - ts:.2f}s (preload_torch in parent if N>1)")
