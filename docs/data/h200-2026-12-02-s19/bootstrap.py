"""What the least of k processes of r repeats would give over 12 commits of this lease (as
session 18's bootstrap.py, on runs.jsonl): each series' per-process numbers replayed for r
repeats (analyse.py's process_value) are pooled over all commits and drawn again as
independent processes (the intra-class correlation in analyse.txt is ~0), 12 commits the
least of k draws each; then, at two repeats, with each process's first gate attempt only
(HOST_ATTEMPTS = 1). Per (k, r): the chance a series meets both targets (median successive
change <= 5%, max <= 15%), the expected count of the 27, and the chance all 27 do.
    python bootstrap.py [runs.jsonl]"""
import contextlib
import io

import numpy as np

with contextlib.redirect_stdout(io.StringIO()):  # analyse.py prints its report on import
    from analyse import P, process_value, runs, series

DRAWS, COMMITS = 2000, 12
for r, first in ((1, False), (2, False), (2, True)):
    for k in (5, 8, 10, 12, 15):
        rng = np.random.default_rng(0)
        meet = []
        for name in series:
            pool = np.array([v for run in runs for j in range(P)
                             if (v := process_value(run, name, j, r, first))])
            least = rng.choice(pool, size=(DRAWS, COMMITS, k)).min(axis=-1)
            steps = np.abs(least[:, 1:] / least[:, :-1] - 1)
            meet.append(np.mean((np.median(steps, axis=1) <= .05) & (steps.max(axis=1) <= .15)))
        label = f"r={r}{', first attempt only' if first else ''}"
        print(f"{label} least of {k:2d}: P(a series meets both) median {np.median(meet):.2f}, "
              f"lowest {min(meet):.2f}; expected {sum(meet):.1f} of {len(series)}; "
              f"P(all) {np.prod(meet):.3f}")
