"""The host's speed over time, per core: every ~10 ms, the canary (benchmarks/_host.py) on each
allowed core in turn. Shows whether slow spells are per core or machine-wide, and how long
they last.   python host_timeline.py SECONDS OUT.json"""
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(next(p for p in Path(__file__).resolve().parents if (p / 'pyproject.toml').is_file())))
from benchmarks import _host

seconds, out = float(sys.argv[1]), sys.argv[2]
cores = _host.allowed_cores()
rows, t0 = [], time.time()
while time.time() - t0 < seconds:
    t = round(time.time() - t0, 4)
    for core in cores:
        os.sched_setaffinity(0, {core})
        rows.append([t, core, round(_host.canary_us(3), 2)])
    time.sleep(0.01)
json.dump({"cores": cores, "rows": rows}, open(out, "w"))
by = {c: sorted(r[2] for r in rows if r[1] == c) for c in cores}
for c in cores:
    v = by[c]
    q = lambda p: v[int(p * (len(v) - 1))]
    slow = sum(x > 1.25 * v[0] for x in v) / len(v)
    print(f"core {c:2d}: n={len(v)} min {v[0]:.1f} p10 {q(.1):.1f} p50 {q(.5):.1f} p90 {q(.9):.1f} max {v[-1]:.1f} us; >1.25x min: {100*slow:.0f}%")
