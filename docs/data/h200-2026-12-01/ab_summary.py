"""Summarise ab_fastpath.py's JSON lines: per case, old vs new medians over rounds."""
import json, statistics, sys
from collections import defaultdict
d = defaultdict(lambda: defaultdict(list))
rowname = {}
for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    d[(r["op"], r["case"])][r["tree"]].append((r["us"], r["host_us"]))
    rowname[(r["op"], r["case"], r["tree"])] = r["row"]
print(f"{'op':13} {'case':16} {'row(new)':22} {'old us (min-max)':>22} {'new us (min-max)':>22} {'delta':>7} {'host old->new us':>18}")
for (op, case), trees in d.items():
    o, n = trees["old"], trees["new"]
    om, nm = statistics.median(x for x, _ in o), statistics.median(x for x, _ in n)
    oh, nh = statistics.median(h for _, h in o), statistics.median(h for _, h in n)
    print(f"{op:13} {case:16} {rowname[(op, case, 'new')]:22} "
          f"{om:9.2f} ({min(x for x,_ in o):.2f}-{max(x for x,_ in o):.2f}) "
          f"{nm:9.2f} ({min(x for x,_ in n):.2f}-{max(x for x,_ in n):.2f}) "
          f"{100*(nm/om-1):+6.2f}% {oh:7.1f} -> {nh:6.1f}")
