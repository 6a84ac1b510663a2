"""Old (4028be9 = tree of d60e21f, the last pre-refactor commit, measured with its own suite)
vs new (8324861 = tree of ffbfdfb, measured with its own suite): asv medians per series, same
H200, one asv run each (docs/data/h200-2026-12-01-s14/README.md). Run from the repo root:
    python docs/data/h200-2026-12-01-s14/compare_asv.py"""
import glob
import itertools
import json
import math
import statistics

from asv.results import Results

HERE = "docs/data/h200-2026-12-01-s14"
bench = json.load(open(f"{HERE}/asv_benchmarks.json"))
res = {}
for f in sorted(glob.glob(f"{HERE}/asv_*-kvbench-offline-py3.12.json")):
    r = Results.load(f)
    d = {}
    for name in r.get_result_keys(bench):
        params = r.get_result_params(name)
        for combo, v in zip(itertools.product(*params), r.get_result_value(name, params)):
            if v is not None and not math.isnan(v):
                d[(name, combo)] = v
    res[r.commit_hash[:7]] = d
old, new = res["4028be9"], res["8324861"]
print(f"series with a number: old {len(old)}, new {len(new)}, both {len(set(old) & set(new))}")
print("only old:", sorted(set(old) - set(new)), "only new:", sorted(set(new) - set(old)))
rows = [(k, old[k], new[k], new[k] / old[k] - 1) for k in sorted(set(old) & set(new))
        if k[0].endswith("track_us")]
for cls in ("PagedDecode", "PagedDecodeAblation", "KVWrite", "KVGatherFp8", "KVAlloc",
            "DispatchOverhead"):
    for label, keep in (("all rows", lambda k: True),
                        ("non-torch rows", lambda k: "torch" not in k[1][0])):
        d = sorted(r[3] for r in rows if r[0][0].split(".")[1] == cls and keep(r[0]))
        if d:
            print(f"{cls:20s} {label:15s} n={len(d):3d} median {statistics.median(d)*100:+6.2f}%"
                  f"  min {d[0]*100:+7.2f}%  max {d[-1]*100:+7.2f}%")
print("\nlargest changes (us):")
for k, a, b, rel in sorted(rows, key=lambda r: -abs(r[3]))[:20]:
    print(f"  {rel*100:+7.2f}%  {a*1e6:9.2f} -> {b*1e6:9.2f}  {k[0].split('.')[1]} {k[1]}")
