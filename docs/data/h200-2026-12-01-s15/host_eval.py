"""Between-process noise of host estimators from host_samples.py pairs: median|max successive
|relative change| over processes.   python host_eval.py FILE.json"""
import itertools
import json
import statistics
import sys

d = json.load(open(sys.argv[1]))
GATE = 1.15


def q(v, p):
    v = sorted(v)
    return v[int(p * (len(v) - 1))]


def est_median_least(reps):  # the suite today: least of per-repeat medians
    return min(statistics.median(t for _, t in r) for r in reps)


def est_min(reps):
    return min(t for r in reps for _, t in r)


def est_p10(reps):
    return q([t for r in reps for _, t in r], 0.10)


def est_gated_process(reps):  # keep samples whose canary <= GATE x the least canary seen
    allp = [p for r in reps for p in r]
    ref = min(c for c, _ in allp)
    kept = [t for c, t in allp if c <= GATE * ref]
    return statistics.median(kept) if len(kept) >= 10 else statistics.median(t for _, t in allp)


def est_gated_repeat_least(reps):
    vals = []
    for r in reps:
        ref = min(c for c, _ in r)
        kept = [t for c, t in r if c <= GATE * ref]
        vals.append(statistics.median(kept))
    return min(vals)


def est_normalised(reps):  # time x (least canary / this canary), median
    allp = [p for r in reps for p in r]
    ref = min(c for c, _ in allp)
    return statistics.median(t * ref / c for c, t in allp)


ESTS = {"least median (suite)": est_median_least, "min": est_min, "p10": est_p10,
        "gated (process ref)": est_gated_process, "gated least (repeat ref)": est_gated_repeat_least,
        "canary-normalised median": est_normalised}
names = list(d["runs"][0]["series"])
for name in names:
    print(name)
    for label, f in ESTS.items():
        vals = [f(run["series"][name]) for run in d["runs"]]
        rel = [abs(b / a - 1) for a, b in itertools.pairwise(vals)]
        print(f"  {label:26s} median {100*statistics.median(rel):5.1f}%  max {100*max(rel):6.1f}%   values {[round(v, 2) for v in vals]}")
allc = [c for run in d["runs"] for r in run["series"][names[0]] for c, _ in r]
print("canary us: min %.2f p10 %.2f p50 %.2f p90 %.2f" % (min(allc), q(allc, .1), q(allc, .5), q(allc, .9)))
kept = []
for run in d["runs"]:
    for name in names:
        allp = [p for r in run["series"][name] for p in r]
        ref = min(c for c, _ in allp)
        kept.append(sum(c <= GATE * ref for c, _ in allp) / len(allp))
print("gated kept fraction per process x series: min %.2f median %.2f" % (min(kept), statistics.median(kept)))
print("per process: canary p50 / series medians")
for i, run in enumerate(d["runs"]):
    cs = [c for name in names for r in run["series"][name] for c, _ in r]
    print(f"  {i:2d} canary p10 {q(cs, .1):6.2f} p50 {q(cs, .5):6.2f}  " + "  ".join(
        f"{statistics.median(t for r in run['series'][n] for _, t in r):8.2f}" for n in names))

ref = min(allc)
print('gating on the machine\'s least canary over all processes (keep a process only when enough samples pass):')
for gate in (1.10, 1.15, 1.25):
  for minkept in (10, 30):
    print(f"absolute gate {gate} x {ref:.2f} us, need {minkept} kept")
    for n in names:
        vals, flagged = [], 0
        for run in d["runs"]:
            allp = [p for r in run["series"][n] for p in r]
            kept = [t for c, t in allp if c <= gate * ref]
            if len(kept) >= minkept: vals.append(statistics.median(kept))
            else: flagged += 1; vals.append(None)
        v = [x for x in vals if x is not None]
        rel = [abs(b/a-1) for a,b in itertools.pairwise(v)]
        print(f"  {n:30s} flagged {flagged:2d}/12  median {100*statistics.median(rel) if rel else float('nan'):5.1f}% max {100*max(rel) if rel else float('nan'):5.1f}%  {[round(x,1) if x else None for x in vals]}")
