"""Old vs new decode table (part B of sbs.sh: old, new, old, new): per row the mean of each
tree's two runs, the change, and the larger of the two trees' own run-to-run spreads. Run
from the repository root."""
import glob
import json
import statistics

runs: dict[str, list[dict]] = {}
for f in sorted(glob.glob("docs/data/h200-2026-12-01-s14/table_*.json")):
    commit = f.rsplit("_", 1)[1].split(".")[0]
    d = json.load(open(f))
    rows = {(r["impl"], r["case"], r.get("note", "")): r["us"] for r in d["rows"]}
    runs.setdefault(commit, []).append(rows)
    print(f.rsplit("/", 1)[1], len(rows), "rows,", len(d["skipped"]), "skipped")
old, new = runs["4028be9"], runs["8324861"]
keys = sorted(set(old[0]) & set(old[1]) & set(new[0]) & set(new[1]))
print("rows in all four runs:", len(keys), "; in some runs only:",
      sorted(set().union(*old, *new) - set(keys)))
out = []
for k in keys:
    o, n = statistics.mean(r[k] for r in old), statistics.mean(r[k] for r in new)
    spread = max(abs(old[0][k] / old[1][k] - 1), abs(new[0][k] / new[1][k] - 1))
    out.append((n / o - 1, spread, k, o, n))
change = [c for c, *_ in out]
print(f"old -> new: median {statistics.median(change) * 100:+.2f}%, min {min(change) * 100:+.2f}%,"
      f" max {max(change) * 100:+.2f}%")
print(f"within a tree (2 runs): median {statistics.median(s for _, s, *_ in out) * 100:.2f}%,"
      f" max {max(s for _, s, *_ in out) * 100:.2f}%")
print("rows changed by more than 1% and more than their own spread:",
      sum(1 for c, s, *_ in out if abs(c) > max(s, 0.01)))
for c, s, k, o, n in sorted(out, key=lambda r: -abs(r[0]))[:15]:
    print(f"{c * 100:+6.2f}% (spread {s * 100:.2f}%) {o:9.2f} -> {n:9.2f} us  {k[0]} @ {k[1]} {k[2]}")
