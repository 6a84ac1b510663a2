"""Which per-commit estimator of a host case keeps identical commits closest, on three H200
leases: the suite's runs files of sessions 18 (five processes of three repeats, 12 commits,
and its first 7), 19 (ten of two, 7 commits, replayed by ../h200-2026-12-02-s19/suite_runs.py)
and 20 (ten of two as shipped, 7 commits). Per estimator: series meeting both targets (median
successive change <= 5%, max <= 15%), median of the series' medians, worst median, worst max,
all steps pooled. The commit's canary is the median of every process's fast canary over every
case of the commit (the machine's speed that commit); the case's canary is the kept process's
(what kvbench/history/host_speed.py rescales by).

Then, on every recorded lease of sessions 15-20, the suite's number as stored, scaled by its
case's canary (the engine), and scaled by the commit's canary taken from what every lease
recorded (the median of the cases' kept canaries: sessions 15-17 kept no canary per process).
    python estimators.py S19_SUITE_RUNS.jsonl"""
import itertools
import json
import statistics
import sys
from pathlib import Path

here = Path(__file__).parent


def load(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


s18 = load(here.parent / "h200-2026-12-02-s18" / "host_suite_runs.jsonl")
leases = {"s18, 5 x 3, 12 commits": s18, "s18, 5 x 3, first 7": s18[:7],
          "s19, 10 x 2, 7 commits": load(sys.argv[1]),
          "s20, 10 x 2 (shipped), 7 commits": load(here / "runs.jsonl")}


def processes(case):
    return [p["median_us"] for p in case["host"]["processes"] if p is not None]


def changes(values):
    return [abs(b / a - 1) for a, b in itertools.pairwise(values)]


for name, runs in leases.items():
    series = sorted(set.intersection(*(set(r) for r in runs)))
    commit_canary = [statistics.median(p["reference_us"] for n in series
                                       for p in r[n]["host"]["processes"] if p is not None)
                     for r in runs]
    estimators = {
        "least (what the suite stores)": lambda r, n, i: min(processes(r[n])),
        "least / case's canary (the engine)": lambda r, n, i:
            min(processes(r[n])) / r[n]["host"]["reference_us"],
        "least / commit's canary": lambda r, n, i, c=commit_canary: min(processes(r[n])) / c[i],
        "lower quartile of processes": lambda r, n, i:
            statistics.quantiles(processes(r[n]), n=4)[0],
        "median of processes": lambda r, n, i: statistics.median(processes(r[n])),
        "median / commit's canary": lambda r, n, i, c=commit_canary:
            statistics.median(processes(r[n])) / c[i],
    }
    print(f"{name}: commit canary {min(commit_canary):.1f}-{max(commit_canary):.1f} us")
    print("| estimator | meet both | median of medians | worst median | worst max | pooled median |")
    print("| --- | --- | --- | --- | --- | --- |")
    for label, value in estimators.items():
        steps = {n: changes([value(r, n, i) for i, r in enumerate(runs)]) for n in series}
        meds = [statistics.median(s) for s in steps.values()]
        tops = [max(s) for s in steps.values()]
        both = sum(m <= .05 and t <= .15 for m, t in zip(meds, tops))
        pooled = [x for s in steps.values() for x in s]
        print(f"| {label} | {both} of {len(series)} | {100 * statistics.median(meds):.1f}% | "
              f"{100 * max(meds):.1f}% | {100 * max(tops):.1f}% | "
              f"{100 * statistics.median(pooled):.1f}% |")
    print()

print("Every lease: series meeting both / median of medians / worst max")
print("| lease | commits | as stored | / case's canary (the engine) | / commit's canary |")
print("| --- | --- | --- | --- | --- |")
s16 = load(here.parent / "h200-2026-12-01-s16" / "host_suite_runs.jsonl")
every = {"s15": load(here.parent / "h200-2026-12-01-s15" / "host_suite_runs.jsonl"),
         "s16, two leases": s16, "s16, first lease": s16[:10],
         "s17": load(here.parent / "h200-2026-12-02-s17" / "host_suite_runs.jsonl"),
         "s18": s18, "s19": leases["s19, 10 x 2, 7 commits"],
         "s20": leases["s20, 10 x 2 (shipped), 7 commits"]}
for name, runs in every.items():
    series = sorted(set.intersection(*(set(r) for r in runs)))
    commit_canary = [statistics.median(r[n]["host"]["reference_us"] for n in series)
                     for r in runs]
    cells = []
    for value in (lambda r, n, i: r[n]["median_us"],
                  lambda r, n, i: r[n]["median_us"] / r[n]["host"]["reference_us"],
                  lambda r, n, i, c=commit_canary: r[n]["median_us"] / c[i]):
        steps = [changes([value(r, n, i) for i, r in enumerate(runs)]) for n in series]
        both = sum(statistics.median(s) <= .05 and max(s) <= .15 for s in steps)
        cells.append(f"{both} / {100 * statistics.median(statistics.median(s) for s in steps):.1f}%"
                     f" / {100 * max(max(s) for s in steps):.1f}%")
    print(f"| {name} | {len(runs)} | " + " | ".join(cells) + " |")
