"""The suite's host series over 15 identical commits (host_suite_runs.jsonl, one line per commit
from scripts/host_noise.py --suite): median / max successive change per series, for the
suite's number (the least of the HOST_PROCESSES processes' medians, recomputed from each
case's host["processes"]: the run itself kept the least the gate accepted, the rule the suite
had then; the two differ in 8 of 405 cases) and for the first process alone (what one process
per commit gives), on each machine lease: commits 1-10 were
measured on one lease (calls A and B), commits 11-15 on another (call C), and the step
between them is the machine's, not noise: it is reported apart.
    python compare.py [host_suite_runs.jsonl]"""
import itertools
import json
import statistics
import sys
from pathlib import Path

path = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("host_suite_runs.jsonl")
runs = [json.loads(line) for line in open(path) if line.strip()]
LEASES = [(0, 10), (10, len(runs))]
series = sorted(set.intersection(*(set(r) for r in runs)))


def least(case):
    return min(p["median_us"] for p in case["host"]["processes"] if p is not None)


def first(case):
    p = case["host"]["processes"][0]
    return None if p is None else p["median_us"]


def steps(values):
    out = []
    for lo, hi in LEASES:
        v = [x for x in values[lo:hi] if x is not None]
        out += [abs(b / a - 1) for a, b in itertools.pairwise(v)]
    return statistics.median(out), max(out)


rows = {"suite": [], "first process": []}
print(f"{len(runs)} commits; steps within a lease ({', '.join(f'{lo + 1}-{hi}' for lo, hi in LEASES)})")
print(f"{'series':52s} {'suite':>16s} {'first process':>18s}")
for name in series:
    suite = steps([least(r[name]) for r in runs])
    one = steps([first(r[name]) for r in runs])
    rows["suite"].append(suite)
    rows["first process"].append(one)
    print(f"| {name} | {100 * suite[0]:.1f}% / {100 * suite[1]:.1f}% | "
          f"{100 * one[0]:.1f}% / {100 * one[1]:.1f}% |")
for label, r in rows.items():
    meds, tops = [m for m, _ in r], [x for _, x in r]
    print(f"{label}: median of medians {100 * statistics.median(meds):.1f}%, worst median "
          f"{100 * max(meds):.1f}%, median of maxes {100 * statistics.median(tops):.1f}%, worst "
          f"max {100 * max(tops):.1f}%; median <= 5%: {sum(m <= .05 for m in meds)}/{len(r)}, "
          f"max <= 15%: {sum(x <= .15 for x in tops)}/{len(r)}, both: "
          f"{sum(m <= .05 and x <= .15 for m, x in r)}/{len(r)}")
flag_one = sum(not r[n]["host"]["processes"][0]["fast"] for r in runs for n in series
               if r[n]["host"]["processes"][0] is not None)
flag_suite = sum(not next(p["fast"] for p in r[n]["host"]["processes"]
                          if p is not None and p["median_us"] == least(r[n]))
                 for r in runs for n in series)
print(f"flagged: suite {flag_suite}, first process {flag_one} of {len(runs) * len(series)}")
ref = [statistics.median(r[n]["host"]["reference_us"] for n in series) for r in runs]
lease = [statistics.mean(least(r[n]) / statistics.median(least(x[n]) for x in runs[:10])
                         for n in series) for r in runs]
print("per commit: the process reference canary (us) and every series' mean ratio to its median "
      "over commits 1-10")
for i, (c, m) in enumerate(zip(ref, lease), 1):
    print(f"  commit {i:2d}  canary {c:6.2f}  ratio {m:.3f}")
