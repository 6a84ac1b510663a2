"""The suite's host series over 12 identical commits of one H200 lease (host_suite_runs.jsonl,
one line per commit from scripts/host_noise.py --worker --suite with KVBENCH_HOST_PROCESSES=5
and HOST_REPEATS=3): median / max successive change per series for the least of the first k
measuring processes (k = 1..5, from each case's host["processes"]), and for the least of five
scaled to the host's typical speed (value x median canary / the kept process's fast canary,
what kvbench/history/host_speed.py does before judging); then each commit's canary and the
mean level of its series.
    python analyse.py [host_suite_runs.jsonl]"""
import itertools
import json
import statistics
import sys
from pathlib import Path

path = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("host_suite_runs.jsonl")
runs = [json.loads(line) for line in open(path) if line.strip()]
series = sorted(set.intersection(*(set(r) for r in runs)))


def least(case, k):
    return min(p["median_us"] for p in case["host"]["processes"][:k] if p is not None)


def steps(values):
    out = [abs(b / a - 1) for a, b in itertools.pairwise(values)]
    return statistics.median(out), max(out)


typical = {n: statistics.median(r[n]["host"]["reference_us"] for r in runs) for n in series}
columns = {f"least of {k}": (lambda r, n, k=k: least(r[n], k)) for k in range(1, 6)}
columns["least of 5, typical speed"] = (
    lambda r, n: least(r[n], 5) * typical[n] / r[n]["host"]["reference_us"])
table = {label: {n: steps([f(r, n) for r in runs]) for n in series}
         for label, f in columns.items()}
print(f"{len(runs)} commits, {len(series)} series: median / max successive change")
print("| series | " + " | ".join(columns) + " |")
for n in series:
    print(f"| {n} | " + " | ".join(f"{100 * table[c][n][0]:.1f}% / {100 * table[c][n][1]:.1f}%"
                                   for c in columns) + " |")
for label, rows in table.items():
    meds, tops = [m for m, _ in rows.values()], [x for _, x in rows.values()]
    print(f"{label}: median of medians {100 * statistics.median(meds):.1f}%, worst median "
          f"{100 * max(meds):.1f}%, median of maxes {100 * statistics.median(tops):.1f}%, worst "
          f"max {100 * max(tops):.1f}%; median <= 5%: {sum(m <= .05 for m in meds)}/{len(meds)}"
          f", max <= 15%: {sum(x <= .15 for x in tops)}/{len(tops)}, both: "
          f"{sum(m <= .05 and x <= .15 for m, x in rows.values())}/{len(rows)}")
flagged = sum(not r[n]["host"]["fast"] for r in runs for n in series)
print(f"kept numbers measured on a slow host (fast: false): {flagged} of {len(runs) * len(series)}")
level = {n: statistics.median(least(r[n], 5) for r in runs) for n in series}
print("per commit: median fast canary of the kept processes (us), mean series level")
for i, r in enumerate(runs, 1):
    ref = statistics.median(r[n]["host"]["reference_us"] for n in series)
    mean = statistics.mean(least(r[n], 5) / level[n] for n in series)
    print(f"  commit {i:2d}  canary {ref:5.1f}  level {mean:.3f}")
