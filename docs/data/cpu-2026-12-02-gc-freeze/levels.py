"""One measurement of the suite's host group, as a commit measures it (benchmarks/_common.
measure_group("host"): ten forked processes), from the checkout at ROOT; appends its wall time
and every case's number to levels.jsonl under TAG. Run alternately from two checkouts (the
supervisor freezing its heap before forking, and the commit before), then `python levels.py
--compare` prints each configuration's wall times, their ratio run by run, and the ratio of the
two configurations' median numbers per series against the run-to-run spread within one.
    python levels.py ROOT TAG      python levels.py --compare"""
import itertools
import json
import math
import statistics
import sys
import time
from pathlib import Path

RECORD = Path(__file__).with_name("levels.jsonl")

if sys.argv[1] != "--compare":
    root, tag = sys.argv[1], sys.argv[2]
    sys.path.insert(0, root)
    start = time.perf_counter()
    from benchmarks import _common

    out = _common.measure_group("host")
    values = {f"{cls}{key}": entry["median_us"] for cls, results in out.items()
              for key, entry in results.items() if isinstance(key, tuple) and "median_us" in entry}
    with RECORD.open("a") as f:
        f.write(json.dumps({"tag": tag, "wall_s": time.perf_counter() - start,
                            "values": values}) + "\n")
    sys.exit()
rows = [json.loads(line) for line in RECORD.read_text().splitlines() if line.strip()]
tags = sorted({r["tag"] for r in rows})
by_tag = {t: [r for r in rows if r["tag"] == t] for t in tags}
for t in tags:
    walls = ", ".join(f"{r['wall_s']:.1f}" for r in by_tag[t])
    print(f"{t}: wall {walls} s")
a, b = (by_tag[t] for t in ("freeze", "before"))
pairs = sorted(x["wall_s"] / y["wall_s"] for x, y in zip(a, b))
print(f"wall, freeze / before run by run (each pair run one after the other): "
      f"{', '.join(f'{r:.3f}' for r in pairs)}; median {statistics.median(pairs):.3f}; medians "
      f"{statistics.median(x['wall_s'] for x in a):.1f} / {statistics.median(y['wall_s'] for y in b):.1f} s")
names = sorted(a[0]["values"])
ratios = [math.log(statistics.median(r["values"][n] for r in a)
                   / statistics.median(r["values"][n] for r in b)) for n in names]
within = [abs(math.log(x["values"][n] / y["values"][n])) for runs in (a, b) for n in names
          for x, y in itertools.combinations(runs, 2)]
print(f"{len(names)} series: freeze / before, ratio of medians: median "
      f"{math.exp(statistics.median(ratios)):.3f}, range {math.exp(min(ratios)):.3f}-"
      f"{math.exp(max(ratios)):.3f}; |log ratio| across: median "
      f"{statistics.median(map(abs, ratios)):.3f}"
      f"; within a configuration, run to run: median {statistics.median(within):.3f}, 90th "
      f"percentile {statistics.quantiles(within, n=10)[8]:.3f}")
