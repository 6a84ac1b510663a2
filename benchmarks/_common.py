"""What the declaration modules of the kvbench asv suite share: one measuring process per commit.

Why setup_cache does the measuring. asv runs every (benchmark, param combination) in a fresh
process; importing torch costs seconds and creating a CUDA context about half a second, so
the ~330 combinations of this suite measured one per process would take many minutes per
commit. Every class instead names the one setup_cache function, setup_cache_suite: asv runs
it once per commit, in one process, which measures every class's cases (a pool built once per
shape x dtype and shared by the selector rows, freed before the next shape) and returns a
plain dict {class: {param tuple: entry}}. torch's import, the CUDA context, Triton's kernel
loads and dispatch's golden checks are paid once per commit. A run that needs one class only
(an end-to-end test, a bisection) names it in SELECT_VAR below; the other classes are then
recorded as not selected at no cost.

The measuring itself is the runner's (benchmarks/runner/: a Manager forks a Worker, which
calls each class's measure function with itself); this module keeps what the declarations
name: the base classes, the one setup_cache function, the group table and a few constants.

The per-combination processes only look their entry up: `setup` raises NotImplementedError
for a skipped case and RuntimeError for a failed one (a wrong kernel never gets a number),
`track_us` returns the timer's samples
(TimingResult.as_asv(), seconds, with asv's statistics), `track_gbps` the theoretical bytes
over the median (a display series: asv treats bigger as worse, so GB/s never drives
regression detection). One timing feeds both series. The price: a CUDA fault in one case
poisons the context for the later cases of that group in that process; each case's
exception is recorded and shown, so the first failure names the culprit.

Each case is one call into the commit's measuring pipeline (Worker.measure_case ->
kvbench.measure.pipeline.measure_row, with the OpInputs the op module builds): this suite
selects cases, groups them by fixture and records results; it does not time, check or assert
a row itself. Old commits lack parts of kvbench: the suite imports kvbench only inside
setup_cache and turns a missing module or name into a recorded skip (benchmarks/runner/
says how), so `asv run` over old history skips those rows instead of failing (commits before
kvbench.measure.pipeline are measured with the suite of their own tree: docs/history.md). The params
stay literal here: nothing imports torch at module level, so discovery and the lookup processes stay
fast, and no CUDA state exists before asv forks.

Measuring a few classes or cases (`kvbench bisect`, a compare's recheck, `regressions
--confirm`). When KVBENCH_ASV_SELECT names a class ("KVAlloc") the measuring process measures
that class only; when it names one case as "Class(param, ...)" (the params repr'd as asv names
a combination, e.g. "KVAlloc('host/freelist', 'fragmented', 64)"), that case only: the other
classes are not run, the selected class builds only the inputs the case needs, and every other
case is recorded as a skip "not selected". Several names, separated by ";", select what each
names. The suite, not the commit,
reads the variable, so it works on old commits too; names, params and `version` are the same
as in a full run, so such a run's number belongs to the same series.

On a machine without CUDA: Triton rows and GPU-size cases are skipped (CPU timings of
interpreted Triton mean nothing and take minutes); torch rows run at the small cases, and
host-side costs (allocator, dispatch) are real numbers.
"""

from __future__ import annotations

import os
from typing import Any

from .runner.compact import representative_samples
from .runner.compat import Skip, need, need_first
from .runner.isolate import CLASS_ERROR as _CLASS_ERROR
from .runner.isolate import CLASS_UNFINISHED as _CLASS_UNFINISHED
from .runner.isolate import GROUP_CRASHED as _GROUP_CRASHED
from .runner.manager import Manager
from .runner.worker import (
    AUTO,
    CLASS_SKIP,
    HOST_REPEATS,
    NOT_SELECTED,
    SELECT_VAR,
    Worker,
    case_label,
    free_device_memory,
    measured,
    no_nvidia_driver,
    skip_all,
)

__all__ = ["AUTO", "HOST_REPEATS", "NOT_SELECTED", "SELECT_VAR", "Skip", "Worker", "case_label",
           "free_device_memory", "measured", "need", "need_first", "no_nvidia_driver",
           "skip_all"]

#: Explicit benchmark version: editing a benchmark's code must not hide its history.
VERSION = "1"
#: Why a row of a class's cross product is not measured on purpose (a CPU reason aside).
TRIMMED = "trimmed from the per-commit suite"
#: The selector variables (docs/architecture.md). Hardcoded because asv needs static params
#: and old commits may lack kvbench.core.env.
SELECTOR_VARS = {
    "paged_decode": "KVBENCH_PAGED_DECODE",
    "kv_write": "KVBENCH_KV_WRITE",
    "kv_gather_fp8": "KVBENCH_KV_GATHER",
    "kv_alloc": "KVBENCH_KV_ALLOC",
}
#: The key under which the worker records a class a selective run leaves out.
_CLASS_SKIP = CLASS_SKIP


def set_selector(op: str, value: str) -> None:
    """Pin (or unpin, for 'auto') the kernel row of `op` through its env-var selector."""
    var = SELECTOR_VARS[op]
    if value == AUTO:
        os.environ.pop(var, None)
    else:
        os.environ[var] = value


def release_pool(pool: Any) -> None:
    """run_group's `release` for a KVPool (or any input with a no-argument free())."""
    pool.free()


def class_results(cache: dict, cls: str) -> dict:
    """One class's results out of its group's shared cache (or the failure that lost them)."""
    found = cache.get(cls)
    if found is None and _GROUP_CRASHED in cache:  # the process died before reaching it
        raise RuntimeError(f"{cls} was not measured (no number recorded):\n"
                           f"{cache[_GROUP_CRASHED][_CLASS_ERROR]}")
    if found is None:
        raise NotImplementedError(f"{cls} was not measured by its setup_cache group")
    if _CLASS_SKIP in found:
        raise NotImplementedError(found[_CLASS_SKIP])
    if _CLASS_ERROR in found:
        raise RuntimeError(f"{cls}'s measure function failed (no number recorded):\n"
                           f"{found[_CLASS_ERROR]}")
    return found


def entry(cache: dict, key: tuple[str, ...]) -> dict:
    """A case's entry, raising NotImplementedError (asv: skipped) or RuntimeError (failed)."""
    found = cache.get(key)
    if found is None and _CLASS_UNFINISHED in cache:  # the process died before reaching it
        raise RuntimeError(f"case {key} was not measured (no number recorded):\n"
                           f"{cache[_CLASS_UNFINISHED]}")
    if found is None:
        raise NotImplementedError(f"case {key} was not measured by this suite version")
    if "skip" in found:
        raise NotImplementedError(found["skip"])
    if "error" in found:
        raise RuntimeError(f"case {key} failed in setup_cache (no number recorded):\n"
                           f"{found['error']}")
    return found


def report_selection(key: tuple[str, ...], found: dict) -> None:
    """asv shows a benchmark's output with --show-stderr: say which row ran and why."""
    print(f"{key}: ran {found['selected']} ({found['timer']}), median {found['median_us']:.2f} us,"
          f" max_abs_diff {found['max_abs_diff']}")
    if found.get("explain"):
        print(found["explain"])


#: group -> ((benchmarks module, its measure function, the class it feeds), ...), in the
#: order the measuring process runs them: the host-side classes first (as before, in a
#: process that has measured nothing else yet), then the KV ops, then decode. One group:
#: every class of the suite is measured by ONE process per commit, which pays torch's
#: import, the CUDA context, Triton's kernel loads and dispatch's golden checks once instead
#: of once per group (docs/history.md, "Cost per commit"). A measure function is called as
#: measure(worker) (benchmarks/runner/worker.py).
GROUPS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "suite": (("kv_alloc", "measure", "KVAlloc"),
              ("dispatch_overhead", "measure", "DispatchOverhead"),
              ("kv_write", "measure", "KVWrite"),
              ("kv_gather_fp8", "measure", "KVGatherFp8"),
              ("paged_decode", "measure_decode", "PagedDecode"),
              ("paged_decode", "measure_ablation", "PagedDecodeAblation"),
              ("paged_decode", "measure_geometry", "PagedDecodeGeometry")),
}


def worker() -> Worker:
    """A Worker of this suite measuring in the calling process (tests, scripts/profile_suite.py)."""
    return Worker(GROUPS, __package__)


def measure_group(group: str) -> dict[str, dict]:
    """{class name: that class's results} for every class of `group`, measured in a forked
    child of this process (benchmarks/runner/manager.py), then the sidecar written."""
    return Manager(GROUPS, __package__).measure_group(group)


def measure_group_here(group: str) -> dict[str, dict]:
    """{class name: that class's results} for every class of `group`, in this process."""
    return worker().measure_group(group)


# asv keys a setup_cache by module and line: every class names this one function, so one
# process measures the whole suite per commit and hands each class its part.
def setup_cache_suite(self) -> dict[str, dict]:
    return measure_group("suite")


setup_cache_suite.timeout = 1800


class _Suite:
    """Base of every benchmark class: lookups only. Subclasses define params, the measuring
    function of their class, and `setup_cache = setup_cache_suite`.
    """

    version = VERSION
    unit = "seconds"
    timeout = 60  # a lookup process; the measuring happens under setup_cache.timeout

    def setup(self, cache: dict, *params: str) -> None:
        self._found = entry(class_results(cache, type(self).__name__), tuple(params))
        report_selection(tuple(params), self._found)

    def track_us(self, cache: dict, *params: str) -> dict:
        """Latency samples in seconds (asv formats them as µs): the regression series, as
        STORED_SAMPLES representative quantiles of the run's samples."""
        return {"samples": representative_samples(self._found["samples_s"]), "number": 1}


class _WithGbps(_Suite):
    def track_gbps(self, cache: dict, *params: str) -> float:
        """Theoretical bytes / median time in 1e9 B/s: display only (bigger is better here)."""
        gbps = self._found["gbps"]
        if gbps is None:
            raise NotImplementedError("no theoretical byte count for this case")
        return gbps

    track_gbps.unit = "GB/s"
