"""How many measuring processes per commit the host target would need, from recorded numbers:
for each series, each process's number over all commits of a runs file is pooled, and
12 commits are drawn again and again, each the least of n draws from the pool (processes as
independent draws: a process's slowness follows its own canary, and whole-commit slow events
were not more frequent than independence predicts, analyse.py). Per n: the chance that a
series meets both targets (median successive change <= 5%, max <= 15%), the expected number
of the 27 that do, and the chance that all 27 do at once (the product). The pool includes
the lease's drift between commits, so this is what more processes alone would give.
    python bootstrap.py RUNS.jsonl [RUNS.jsonl ...]"""
import json
import sys
from pathlib import Path

import numpy as np

DRAWS, COMMITS = 2000, 12
for path in sys.argv[1:]:
    runs = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    series = sorted(set.intersection(*(set(r) for r in runs)))
    rng = np.random.default_rng(0)
    print(f"{path}: {len(runs)} commits, {len(series)} series")
    for n in (3, 5, 8, 10, 15):
        meet = []
        for name in series:
            pool = np.array([p["median_us"] for r in runs for p in r[name]["host"]["processes"]
                             if p is not None])
            least = rng.choice(pool, size=(DRAWS, COMMITS, n)).min(axis=-1)
            steps = np.abs(least[:, 1:] / least[:, :-1] - 1)
            meet.append(np.mean((np.median(steps, axis=1) <= .05) & (steps.max(axis=1) <= .15)))
        print(f"  least of {n:2d}: P(a series meets both) median {np.median(meet):.2f}, lowest "
              f"{min(meet):.2f}; expected {sum(meet):.1f} of {len(series)}; P(all) "
              f"{np.prod(meet):.3f}")
