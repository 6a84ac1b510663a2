"""The suite's host series over 12 identical commits of one H200 lease (host_suite_runs.jsonl,
one line per commit from scripts/host_noise.py --worker --suite: five processes, three repeats,
each process's canaries recorded): median / max successive change per series

- for the least of the first k measuring processes (k = 1..5; k = 5 is the suite's number;
  with more processes per commit k = 1, 2, 5 and all, as for session 20's ten),
- for the least of all at the host's typical speed (what kvbench/history/host_speed.py
  judges: value x median canary / the kept process's fast canary),
- for three per-process corrections that use each process's own canaries (ablations): each
  process's number scaled by its fast canary (reference) before the least, scaled by the canary
  around the case, and the number of the process whose reference was fastest;

then the steps of all series pooled, each commit's canary and mean level, and how a whole
process's slowness (its numbers over the series' own levels) follows its fast canary.
    python analyse.py [host_suite_runs.jsonl]
    python ../h200-2026-12-02-s18/analyse.py runs.jsonl   (session 20, from its folder)"""
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

path = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("host_suite_runs.jsonl")
runs = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
series = sorted(set.intersection(*(set(r) for r in runs)))
PROCESSES = len(runs[0][series[0]]["host"]["processes"])


def measured(case, k=PROCESSES):
    return [p for p in case["host"]["processes"][:k] if p is not None]


def least(case, k=PROCESSES):
    return min(p["median_us"] for p in measured(case, k))


def reference_scaled(case):
    fastest = min(p["reference_us"] for p in measured(case))
    return min(p["median_us"] * fastest / p["reference_us"] for p in measured(case))


def around_scaled(case):
    fastest = min(p["reference_us"] for p in measured(case))
    return min(p["median_us"] * fastest / statistics.mean(p["canary_us"])
               for p in measured(case))


def fastest_reference(case):
    return min(measured(case), key=lambda p: p["reference_us"])["median_us"]


def changes(values):
    return [abs(b / a - 1) for a, b in itertools.pairwise(values)]


typical = {n: statistics.median(r[n]["host"]["reference_us"] for r in runs) for n in series}
firsts = range(1, PROCESSES + 1) if PROCESSES <= 5 else (1, 2, 5, PROCESSES)
columns = {f"least of {k}": (lambda r, n, k=k: least(r[n], k)) for k in firsts}
columns[f"least of {PROCESSES}, typical speed"] = (
    lambda r, n: least(r[n]) * typical[n] / r[n]["host"]["reference_us"])
columns["each process scaled by its reference"] = lambda r, n: reference_scaled(r[n])
columns["each process scaled by the canary around the case"] = lambda r, n: around_scaled(r[n])
columns["the process with the fastest reference"] = lambda r, n: fastest_reference(r[n])
steps = {label: {n: changes([f(r, n) for r in runs]) for n in series}
         for label, f in columns.items()}
shown = list(columns)[:len(firsts) + 1]
print(f"{len(runs)} commits, {len(series)} series: median / max successive change")
print("| series | " + " | ".join(shown) + " |")
print("| --- |" + " --- |" * len(shown))
for n in series:
    print(f"| {n} | " + " | ".join(
        f"{100 * statistics.median(steps[c][n]):.1f}% / {100 * max(steps[c][n]):.1f}%"
        for c in shown) + " |")
for label, rows in steps.items():
    meds = {n: statistics.median(s) for n, s in rows.items()}
    tops = {n: max(s) for n, s in rows.items()}
    pooled = [x for s in rows.values() for x in s]
    missed = [f"{n} {100 * meds[n]:.1f}% / {100 * tops[n]:.1f}%" for n in series
              if meds[n] > .05 or tops[n] > .15]
    print(f"{label}: median of medians {100 * statistics.median(meds.values()):.1f}%, worst "
          f"median {100 * max(meds.values()):.1f}%, median of maxes "
          f"{100 * statistics.median(tops.values()):.1f}%, worst max "
          f"{100 * max(tops.values()):.1f}%; median <= 5%: {sum(m <= .05 for m in meds.values())}"
          f"/{len(meds)}, max <= 15%: {sum(x <= .15 for x in tops.values())}/{len(tops)}, both: "
          f"{len(series) - len(missed)}/{len(series)}; all {len(pooled)} steps pooled: median "
          f"{100 * statistics.median(pooled):.1f}%, max {100 * max(pooled):.1f}%")
    if len(missed) <= 6:
        print("    missed: " + ("; ".join(missed) or "none"))
flagged = sum(not r[n]["host"]["fast"] for r in runs for n in series)
print(f"kept numbers measured on a slow host (fast: false): {flagged} of {len(runs) * len(series)}")
level = {n: statistics.median(least(r[n]) for r in runs) for n in series}
print("per commit: median fast canary of the kept processes (us), mean series level")
canaries, levels = [], []
for i, r in enumerate(runs, 1):
    canaries.append(statistics.median(r[n]["host"]["reference_us"] for n in series))
    levels.append(statistics.mean(least(r[n]) / level[n] for n in series))
    print(f"  commit {i:2d}  canary {canaries[-1]:5.1f}  level {levels[-1]:.3f}")
print(f"commit level vs canary: Pearson r {statistics.correlation(canaries, levels):.2f}")
# A process's slowness: the mean over series of log(its number / the commit's mean of
# processes), against log(its least reference over the commit's mean of processes).
slowness, speed = [], []
for r in runs:
    count = len(r[series[0]]["host"]["processes"])
    logs = [[math.log(r[n]["host"]["processes"][j]["median_us"]) for j in range(count)]
            for n in series]
    refs = [math.log(min(r[n]["host"]["processes"][j]["reference_us"] for n in series))
            for j in range(count)]
    effect = [statistics.mean(row[j] - statistics.mean(row) for row in logs)
              for j in range(count)]
    slowness += effect
    speed += [x - statistics.mean(refs) for x in refs]
print(f"a process's slowness vs its fast canary, {len(speed)} processes: Pearson r "
      f"{statistics.correlation(speed, slowness):.2f}; slowness spans "
      f"{math.exp(min(slowness)):.3f}-{math.exp(max(slowness)):.3f}x its commit's mean")
# Are a commit's processes independent draws? The intra-class correlation of the log numbers
# (one-way ANOVA, commits as groups): the share of a series' variance that lies between
# commits beyond what the spread of its processes predicts.
iccs = []
for n in series:
    groups = [[math.log(p["median_us"]) for p in measured(r[n])] for r in runs]
    values = [x for g in groups for x in g]
    grand, size = statistics.mean(values), statistics.mean(len(g) for g in groups)
    between = sum(len(g) * (statistics.mean(g) - grand) ** 2 for g in groups) / (len(groups) - 1)
    within = sum((x - statistics.mean(g)) ** 2 for g in groups for x in g) / (
        len(values) - len(groups))
    iccs.append((between - within) / (between + (size - 1) * within))
print(f"intra-class correlation of a commit's processes, over the {len(series)} series: median "
      f"{statistics.median(iccs):.2f}, range {min(iccs):.2f} to {max(iccs):.2f}")
# Whole commits slow in every process: a series' least above 1.12x its level (the median of
# its leasts), against how often five independent draws from its processes would all be.
events, expected = 0, 0.0
for n in series:
    pool = [p["median_us"] for r in runs for p in measured(r[n])]
    slow = sum(x > 1.12 * level[n] for x in pool) / len(pool)
    expected += len(runs) * slow ** len(measured(runs[0][n]))
    events += sum(least(r[n]) > 1.12 * level[n] for r in runs)
print(f"series-commits whose every process read above 1.12x the series' level: {events} of "
      f"{len(runs) * len(series)} ({expected:.2f} expected of independent processes)")
