"""Where the asv suite's time goes: each class's setup_cache body, profiled in its own process.

    python scripts/profile_suite.py [--top N] [CLASS ...]

asv runs one setup_cache process per class (benchmarks/_common.py), so each class here runs
in a fresh interpreter too (torch import and CUDA context included, as under asv), under
cProfile. Prints per class: wall seconds and the top-N functions by cumulative time from
kvbench/ and benchmarks/; last, a table of wall seconds per class. Used to decide what to
trim when a whole-suite run exceeds its per-commit budget (docs/history.md).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._common import GROUPS  # the suite's own list (imports no torch)

#: class -> (benchmarks module, the function its setup_cache returns): the suite's groups, so
#: a class added to the suite is profiled without an edit here
CLASSES = {cls: (module, func) for entries in GROUPS.values() for module, func, cls in entries}

_CHILD = """
import cProfile, pstats, sys, time
t0 = time.perf_counter()
import importlib
mod = importlib.import_module("benchmarks." + sys.argv[1])
prof = cProfile.Profile()
prof.enable()
results = getattr(mod, sys.argv[2])()
prof.disable()
wall = time.perf_counter() - t0
stats = pstats.Stats(prof)
stats.sort_stats("cumulative")
rows = []
for (path, line, name), (cc, nc, tt, ct, callers) in stats.stats.items():
    if "kvbench/" in path or "benchmarks/" in path or name in ("synchronize", "empty_cache"):
        rows.append((ct, nc, path.split("/")[-2] + "/" + path.split("/")[-1], line, name))
rows.sort(reverse=True)
for ct, nc, path, line, name in rows[: int(sys.argv[3])]:
    print(f"  {ct:7.2f} s  {nc:6d} calls  {path}:{line} {name}")
errors = sum(1 for v in results.values() if "error" in v)
print(f"WALL {wall:.1f} {len(results)} {errors}")
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("classes", nargs="*", default=list(CLASSES))
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args(argv)
    unknown = [c for c in args.classes if c not in CLASSES]
    if unknown:
        parser.error(f"unknown class(es) {unknown}; accepted: {', '.join(CLASSES)}")
    table = []
    for name in args.classes:
        module, func = CLASSES[name]
        t0 = time.perf_counter()
        res = subprocess.run([sys.executable, "-c", _CHILD, module, func, str(args.top)],
                             capture_output=True, text=True, check=False)
        total = time.perf_counter() - t0
        print(f"== {name} (exit {res.returncode}, {total:.1f} s with interpreter start)")
        lines = res.stdout.splitlines()
        print("\n".join(line for line in lines if not line.startswith("WALL")))
        if res.returncode != 0:
            print(res.stderr[-2000:])
        wall = next((line.split()[1:] for line in lines if line.startswith("WALL")), None)
        table.append((name, total, wall))
    print(f"\n{'class':22s} {'process s':>9s} {'measure s':>9s} {'cases':>5s} {'errors':>6s}")
    for name, total, wall in table:
        w, n, e = wall if wall else ("-", "-", "-")
        print(f"{name:22s} {total:9.1f} {w:>9s} {n:>5s} {e:>6s}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
