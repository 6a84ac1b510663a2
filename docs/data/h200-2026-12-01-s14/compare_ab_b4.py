"""The interleaved A/B of triton/split_kv at b4_c1k: 10 fresh processes per tree, five with the
old tree first in each pair, five with the new tree first. Per dtype: medians, the median
difference, and the Mann-Whitney U test (two-sided). Run from the repo root."""
import json
import statistics

from scipy.stats import mannwhitneyu

HERE = "docs/data/h200-2026-12-01-s14"
rows = [json.loads(line) for f in ("ab_b4_old_first.jsonl", "ab_b4_new_first.jsonl")
        for line in open(f"{HERE}/{f}")]
for dtype in ("fp16", "bf16", "fp8"):
    old = [r[dtype] for r in rows if r["commit"] == "4028be9"]
    new = [r[dtype] for r in rows if r["commit"] == "8324861"]
    first = [r[dtype] for i, r in enumerate(rows) if i % 2 == 0]
    second = [r[dtype] for i, r in enumerate(rows) if i % 2 == 1]
    p = mannwhitneyu(new, old, alternative="two-sided").pvalue
    p_pos = mannwhitneyu(second, first, alternative="two-sided").pvalue
    print(f"{dtype}: old median {statistics.median(old):.3f} us, new {statistics.median(new):.3f}"
          f" ({statistics.median(new) / statistics.median(old) * 100 - 100:+.2f}%), MWU p {p:.2f};"
          f" by position: first {statistics.median(first):.3f}, second"
          f" {statistics.median(second):.3f} ({statistics.median(second) / statistics.median(first) * 100 - 100:+.2f}%),"
          f" p {p_pos:.3f}  (n = {len(old)} + {len(new)})")
