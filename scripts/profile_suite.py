"""Where the asv suite's per-commit time goes: the suite's measuring body, run as asv runs it
(one process for every class), with each phase timed.

    python scripts/profile_suite.py [--top N] [--json PATH] [CLASS ...]

Runs one Worker of the suite (benchmarks/runner/worker.py) on group "suite" in this process
(the worker's measure_group, as the manager's forked child runs it; naming classes selects
them through the suite's own KVBENCH_ASV_SELECT, one class at a time, so the others cost
nothing), with these phases timed by wrapping the functions the suite calls:

- import: torch, the CUDA context and kvbench (prepare_process's first call);
- build: a group's input (the pool Worker.run_group builds);
- check: a row's correctness check against the op's reference (pipeline.check);
- proof: the perturbed input a timed row's last call is verified on (time_call minus bench);
- bench: the timer itself (pipeline.bench / bench_host), samples included;
- other: the rest of the class (selection, plausibility, the sidecar's reads, freeing).

Prints the top-N functions from kvbench/ and benchmarks/ by cumulative time under cProfile
(its overhead is in the wall seconds; `--top 0` runs without it, for walls to compare with a
commit's asv run; `--pstats PATH` keeps the raw stats for callers and callees), then per
class the seconds of each phase and the number of cases. Used to decide what to trim when a
commit's run exceeds its budget (docs/history.md, "Cost per commit").
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common  # the suite's own list (imports no torch)

CLASSES = [cls for entries in _common.GROUPS.values() for _, _, cls in entries]
PHASES = ("import", "build", "check", "proof", "bench", "other")


class PhaseClock:
    """Seconds per (class, phase), filled by wrapped functions; nested phases are subtracted
    from the phase that encloses them (bench inside time_call is not also proof)."""

    def __init__(self) -> None:
        self.seconds: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.cases: dict[str, int] = defaultdict(int)
        self.cls = "-"
        self._stack: list[list[float]] = []

    def wrap(self, phase: str, fn):
        def timed(*args, **kwargs):
            self._stack.append([time.perf_counter(), 0.0])
            try:
                return fn(*args, **kwargs)
            finally:
                start, inner = self._stack.pop()
                spent = time.perf_counter() - start
                self.seconds[self.cls][phase] += spent - inner
                if self._stack:
                    self._stack[-1][1] += spent
        return timed


def instrument(clock: PhaseClock, worker) -> None:
    """Wrap the worker's and the pipeline's phase functions (after prepare_process imported
    kvbench, so the commit's own modules are wrapped)."""
    from kvbench import harness
    from kvbench.measure import pipeline

    harness.bench_host = clock.wrap("bench", harness.bench_host)  # DispatchOverhead's timer
    pipeline.check = clock.wrap("check", pipeline.check)
    pipeline.bench = clock.wrap("bench", pipeline.bench)
    pipeline.bench_host = clock.wrap("bench", pipeline.bench_host)
    pipeline.time_call = clock.wrap("proof", pipeline.time_call)
    run_group = worker.run_group

    def run_group_timed(keys, build, measure, results, release=None):
        clock.cases[clock.cls] += len(keys)
        return run_group(keys, clock.wrap("build", build), measure, results, release)

    worker.run_group = run_group_timed  # this worker's only: the declarations call it


def profile(classes: list[str], *, cprofile: bool = True,
            ) -> tuple[PhaseClock, dict[str, float], cProfile.Profile | None]:
    clock = PhaseClock()
    t0 = time.perf_counter()
    clock.cls = "import"
    worker = _common.worker()
    worker.prepare_process()
    import kvbench.api  # noqa: F401 (the package's import is part of a commit's cost)

    instrument(clock, worker)
    clock.seconds["import"]["import"] = time.perf_counter() - t0
    walls: dict[str, float] = {"import": clock.seconds["import"]["import"]}
    prof = cProfile.Profile() if cprofile else None
    for cls in classes:
        os.environ[_common.SELECT_VAR] = cls
        clock.cls = cls
        start = time.perf_counter()
        if prof is not None:
            prof.enable()
        worker.measure_group("suite")
        if prof is not None:
            prof.disable()
        walls[cls] = time.perf_counter() - start
        clock.seconds[cls]["other"] = walls[cls] - sum(clock.seconds[cls].values())
    os.environ.pop(_common.SELECT_VAR, None)
    return clock, walls, prof


def _print_top(prof: cProfile.Profile, top: int) -> None:
    stats = pstats.Stats(prof)
    rows = []
    for (path, line, name), (_, ncalls, _, cumulative, _) in stats.stats.items():
        if "kvbench/" in path or "benchmarks/" in path:
            rows.append((cumulative, ncalls, "/".join(Path(path).parts[-2:]), line, name))
    rows.sort(reverse=True)
    print(f"top {top} functions by cumulative seconds (under cProfile):")
    for cumulative, ncalls, path, line, name in rows[:top]:
        print(f"  {cumulative:8.2f} s {ncalls:7d} calls  {path}:{line} {name}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("classes", nargs="*", default=CLASSES)
    parser.add_argument("--top", type=int, default=15,
                        help="functions to list under cProfile; 0: no cProfile (honest walls)")
    parser.add_argument("--json", type=Path, help="write the phase table here too")
    parser.add_argument("--pstats", type=Path,
                        help="write cProfile's raw stats here (pstats.Stats reads them: callers, "
                             "callees); needs --top > 0")
    args = parser.parse_args(argv)
    unknown = [c for c in args.classes if c not in CLASSES]
    if unknown:
        parser.error(f"unknown class(es) {unknown}; accepted: {', '.join(CLASSES)}")
    if args.pstats and args.top <= 0:
        parser.error("--pstats needs cProfile: give --top N with N > 0")
    clock, walls, prof = profile(args.classes, cprofile=args.top > 0)
    if prof is not None:
        _print_top(prof, args.top)
        if args.pstats:
            prof.dump_stats(args.pstats)

    print(f"\n{'class':22s} {'wall s':>7s} {'cases':>5s} " + " ".join(f"{p:>7s}" for p in PHASES))
    for cls, wall in walls.items():
        cells = " ".join(f"{clock.seconds[cls].get(p, 0.0):7.2f}" for p in PHASES)
        print(f"{cls:22s} {wall:7.2f} {clock.cases.get(cls, 0):5d} {cells}")
    print(f"{'total':22s} {sum(walls.values()):7.2f}")
    if args.json:
        args.json.write_text(json.dumps({"walls": walls, "cases": dict(clock.cases),
                                         "phases": {k: dict(v) for k, v in clock.seconds.items()}},
                                        indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
