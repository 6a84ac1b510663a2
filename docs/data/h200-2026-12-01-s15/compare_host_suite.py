"""The suite's host series over 10 fresh processes (host_suite.json, scripts/host_noise.py
--suite): median / max successive change per series, over every process and over the cases
the canary gate accepted (fast: true).   python compare_host_suite.py [host_suite.json]"""
import itertools
import json
import statistics
import sys
from pathlib import Path

path = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).with_name("host_suite.json")
data = json.load(open(path))


def changes(values):
    rel = [abs(b / a - 1) for a, b in itertools.pairwise(values)]
    return statistics.median(rel), max(rel)


rows = {"all": [], "accepted": []}
print(f"{'series':55s} {'all processes':>16s} {'gate accepted':>22s}")
for name, t in data["series"].items():
    every = changes(t["values"])
    kept = [v for v, h in zip(t["values"], t["host"]) if h["fast"]]
    accepted = changes(kept)
    rows["all"].append(every)
    rows["accepted"].append(accepted)
    print(f"{name:55s} {100 * every[0]:5.1f}% / {100 * every[1]:5.1f}%   "
          f"{100 * accepted[0]:5.1f}% / {100 * accepted[1]:5.1f}% (n={len(kept)})")
for label, r in rows.items():
    meds, tops = [m for m, _ in r], [x for _, x in r]
    print(f"{label}: median of medians {100 * statistics.median(meds):.1f}%, worst median "
          f"{100 * max(meds):.1f}%, median of maxes {100 * statistics.median(tops):.1f}%, worst max "
          f"{100 * max(tops):.1f}%; series with median <= 5%: {sum(m <= .05 for m in meds)}/"
          f"{len(meds)}, max <= 15%: {sum(x <= .15 for x in tops)}/{len(tops)}")
flagged = sum(not h["fast"] for t in data["series"].values() for h in t["host"])
print(f"flagged (gate never saw a fast host): {flagged} of "
      f"{sum(len(t['host']) for t in data['series'].values())} cases")
