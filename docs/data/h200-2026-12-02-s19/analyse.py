"""The host group over 7 identical commits of one H200 lease (runs.jsonl from s19a.sh: ten
processes x two repeats per commit, torch imported before the children fork, each repeat's
median recorded): what fewer processes and one repeat would give, from the same run.

A process's number for r repeats is replayed from its record: the gate's kept attempt (the one
whose least of both repeats is the number the process reported) and in it, per timed call, the
least of the first r repeat medians, the worst call's (pipeline.time_call). Then per series
the median / max successive change between commits for the least of the first k processes;
whether the processes stay independent draws with torch imported before forking (intra-class
correlation of the log numbers, as in session 18); how far the two repeats of one process
agree against two processes of one commit; the children's wall time; and the gate's retries
ablated: each process's first attempt only (what HOST_ATTEMPTS = 1 would have kept).
    python analyse.py [runs.jsonl]"""
import itertools
import json
import math
import statistics
import sys
from pathlib import Path

import numpy as np

path = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("runs.jsonl")
runs = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
series = sorted(set.intersection(*(set(r["suite"]) for r in runs)))
P = runs[0]["processes"]


def kept_attempt(attempts, reported):
    value = [max(min(call) for call in attempt) for attempt in attempts]
    return attempts[min(range(len(value)), key=lambda i: abs(value[i] - reported))]


def process_value(run, name, j, r, first_attempt=False):
    reported = run["suite"][name]["host"]["processes"][j]
    if reported is None:
        return None
    attempts = run["repeats"][j][name]
    attempt = attempts[0] if first_attempt else kept_attempt(attempts, reported["median_us"])
    return max(min(call[:r]) for call in attempt)


values = {(k, r): {n: [min(v for j in range(k) if (v := process_value(run, n, j, r)))
                       for run in runs] for n in series}
          for k in (1, 3, 5, 8, 10) for r in (1, 2)}
for run in runs:  # the replay of (10, 2) must give what the suite reported
    for n in series:
        replayed = min(v for j in range(P) if (v := process_value(run, n, j, 2)))
        assert math.isclose(replayed, run["suite"][n]["median_us"], rel_tol=1e-9), n


def changes(xs):
    return [abs(b / a - 1) for a, b in itertools.pairwise(xs)]


print(f"{len(runs)} commits x {P} processes, {len(series)} series; per (least of k processes, "
      f"r repeats): series meeting median <= 5% / max <= 15% / both; median of medians; worst "
      f"max; pooled median, max")
for (k, r), rows in values.items():
    steps = {n: changes(xs) for n, xs in rows.items()}
    meds = [statistics.median(s) for s in steps.values()]
    tops = [max(s) for s in steps.values()]
    pooled = [x for s in steps.values() for x in s]
    both = sum(m <= .05 and t <= .15 for m, t in zip(meds, tops, strict=True))
    print(f"  k={k:2d} r={r}: {sum(m <= .05 for m in meds):2d} / {sum(t <= .15 for t in tops):2d}"
          f" / {both:2d} of {len(series)}; {100 * statistics.median(meds):4.1f}%; "
          f"{100 * max(tops):5.1f}%; pooled {100 * statistics.median(pooled):4.1f}%, "
          f"{100 * max(pooled):5.1f}%")
print("per series, least of 10 x 2 repeats vs 5 x 2 vs 10 x 1: median / max change")
for n in series:
    cells = [changes(values[key][n]) for key in ((10, 2), (5, 2), (10, 1))]
    print(f"  {n:50s} " + "  ".join(f"{100 * statistics.median(s):4.1f}% / {100 * max(s):5.1f}%"
                                     for s in cells))
iccs, within_rep, between_proc = [], [], []
for n in series:
    groups = [[math.log(p["median_us"]) for p in r["suite"][n]["host"]["processes"] if p]
              for r in runs]
    xs = [x for g in groups for x in g]
    grand, size = statistics.mean(xs), statistics.mean(len(g) for g in groups)
    between = sum(len(g) * (statistics.mean(g) - grand) ** 2 for g in groups) / (len(groups) - 1)
    within = sum((x - statistics.mean(g)) ** 2 for g in groups for x in g) / (len(xs) - len(groups))
    iccs.append((between - within) / (between + (size - 1) * within))
    for run in runs:
        ones = [process_value(run, n, j, 1) for j in range(P)]
        for j in range(P):
            rec = run["suite"][n]["host"]["processes"][j]
            if rec is None:
                continue
            attempt = kept_attempt(run["repeats"][j][n], rec["median_us"])
            reps = [max(call[i] for call in attempt) for i in range(len(attempt[0]))]
            if len(reps) == 2:
                within_rep.append(abs(math.log(reps[1] / reps[0])))
        good = [x for x in ones if x]
        between_proc += [abs(math.log(b / a)) for a, b in itertools.pairwise(good)]
print(f"intra-class correlation of a commit's processes (torch imported before forking), over "
      f"{len(series)} series: median {statistics.median(iccs):.2f}, range {min(iccs):.2f} to "
      f"{max(iccs):.2f}")
print(f"|log ratio| of a process's two repeats: median {statistics.median(within_rep):.3f}, "
      f"90th pct {np.quantile(within_rep, .9):.3f}; of two successive processes' first repeat: "
      f"median {statistics.median(between_proc):.3f}, 90th pct {np.quantile(between_proc, .9):.3f}")
child = [s for r in runs for s in r["child_s"]]
print(f"child wall time: median {statistics.median(child):.1f} s (first of a commit "
      f"{statistics.median(r['child_s'][0] for r in runs):.1f} s, others "
      f"{statistics.median(s for r in runs for s in r['child_s'][1:]):.1f} s), range "
      f"{min(child):.1f}-{max(child):.1f} s; supervisor's torch import "
      f"{statistics.median(r['import_torch_s'] for r in runs):.1f} s")
attempts = [len(run["repeats"][j][n]) for run in runs for n in series for j in range(P)
            if run["suite"][n]["host"]["processes"][j] is not None]
print(f"the gate's attempts per process and case: mean {statistics.mean(attempts):.2f} "
      f"(1: {attempts.count(1)}, 2: {attempts.count(2)}, 3: {attempts.count(3)}, "
      f"4: {attempts.count(4)})")
for k in (5, 8, 10):
    for first in (False, True):
        rows = {n: changes([min(v for j in range(k) if (v := process_value(run, n, j, 2, first)))
                            for run in runs]) for n in series}
        meds = [statistics.median(s) for s in rows.values()]
        tops = [max(s) for s in rows.values()]
        both = sum(m <= .05 and t <= .15 for m, t in zip(meds, tops, strict=True))
        label = "first attempt only" if first else "gated, up to 4 attempts"
        print(f"  k={k:2d} r=2 {label:24s}: both {both:2d} of {len(series)}; median of medians "
              f"{100 * statistics.median(meds):.1f}%; worst max {100 * max(tops):.1f}%")
