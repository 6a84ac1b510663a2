"""Shared machinery of the kvbench asv suite: one measuring process per group of classes.

Why setup_cache does the measuring. asv runs every (benchmark, param combination) in a fresh
process; importing torch costs 2-4 s and creating a CUDA context ~0.5 s, so the ~250
combinations of this suite measured one per process would take many minutes per commit. Each
class instead measures all its cases in a `setup_cache` process (pool built once per
shape x dtype and shared by the selector rows, freed before the next shape) and returns a
plain dict {param tuple: entry}. Classes are measured in GROUPS that share one process
(asv runs a setup_cache function once and hands its result to every class that uses that
same function): three processes per commit instead of six save three torch imports and
CUDA contexts, seconds each (scripts/profile_suite.py measures them). The grouping follows
what a bisection needs: `asv find` on a decode series re-measures the decode group, not the
whole suite. The host group is the exception: ten processes measure it per commit and each
case keeps the least (GROUP_PROCESSES; docs/harness.md, "Host-side series noise"); their
supervisor imports torch once before forking them (`preload_torch`), so each does not pay
the import.

The per-combination processes only look their entry up: `setup` raises NotImplementedError
for a skipped case and RuntimeError for a failed one (a wrong kernel never gets a number),
`track_us` returns the timer's samples
(TimingResult.as_asv(), seconds, with asv's statistics), `track_gbps` the theoretical bytes
over the median (a display series: asv treats bigger as worse, so GB/s never drives
regression detection). One timing feeds both series. The price: a CUDA fault in one case
poisons the context for the later cases of that group in that process; each case's
exception is recorded and shown, so the first failure names the culprit.

Each case is one call into the commit's measuring pipeline (measure_case ->
kvbench.measure.pipeline.measure_row, with the OpInputs the op module builds): this suite
selects cases, groups them by fixture and records results; it does not time, check or assert
a row itself. Old commits lack parts of kvbench: the suite imports kvbench only inside
setup_cache and turns a missing module or name into a recorded skip, so `asv run` over old
history skips those rows instead of failing (commits before kvbench.measure.pipeline are
measured with the suite of their own tree: docs/history.md). The params stay literal here:
nothing imports torch at module level, so discovery and the lookup processes stay fast, and
no CUDA state exists before asv forks.

Measuring one case (`kvbench bisect`). When KVBENCH_ASV_SELECT names one case as
"Class(param, ...)" (the params repr'd as asv names a combination, e.g.
"KVAlloc('host/freelist', 'fragmented', 64)"), a measuring process measures that case only:
the group's other classes are not run, the selected class builds only the inputs the case
needs, and every other case is recorded as a skip "not selected". The suite, not the commit,
reads the variable, so it works on old commits too; names, params and `version` are the same
as in a full run, so such a run's number belongs to the same series.

On a machine without CUDA: Triton rows and GPU-size cases are skipped (CPU timings of
interpreted Triton mean nothing and take minutes); torch rows run at the small cases, and
host-side costs (allocator, dispatch) are real numbers.
"""

from __future__ import annotations

import contextlib
import gc
import glob
import importlib
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from . import _host, _isolate, _sidecar

#: Explicit benchmark version: editing a benchmark's code must not hide its history.
VERSION = "1"
#: Seconds of timed kernel work per bench() row in the suite (the harness default is 0.15 s).
#: Only rows slower than ~100 µs per call get fewer samples (faster ones hit the harness's
#: 1000-sample cap either way); with the decode series' run-to-run spread of a few tenths
#: of a percent, they keep >= 200 samples at batch 64 x 8k, enough for that spread. Set per
#: measuring process by prepare_process, for every commit whose harness has the knob.
SUITE_BENCH_BUDGET_S = 0.1
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
AUTO = "auto"
#: The variable naming the one case a measuring process measures (module docstring).
SELECT_VAR = "KVBENCH_ASV_SELECT"
#: The skip recorded for the cases a selective run leaves out.
NOT_SELECTED = "not selected: this run measures only"


class Skip(NotImplementedError):
    """A case that cannot run on this machine or commit (becomes an asv skip)."""


def need(module: str, *names: str) -> Any:
    """Import kvbench's `module` (and check `names` on it) or raise Skip naming what is missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise Skip(f"this commit has no {module} ({exc})") from None
    for name in names:
        if not hasattr(mod, name):
            raise Skip(f"this commit's {module} has no {name}")
    return mod


def need_first(places: Iterable[tuple[str, tuple[str, ...]]]) -> Any:
    """The first of `places` ((module, names) pairs, newest location first) whose module
    imports and has every name: a name that moved between kvbench versions is looked up where
    the measured commit keeps it. Skip naming every place tried when none has it."""
    tried = []
    for module, names in places:
        try:
            return need(module, *names)
        except Skip as exc:
            tried.append(str(exc))
    raise Skip("; ".join(tried) or "need_first: no place given")


def no_nvidia_driver() -> bool:
    """True when this machine certainly has no NVIDIA GPU (no driver files), decided without
    importing torch: a class that has nothing to run on a CPU then skips in milliseconds
    instead of paying torch's import in its setup_cache process."""
    return not (os.path.exists("/proc/driver/nvidia/version") or glob.glob("/dev/nvidia*"))


def prepare_process() -> str:
    """Device type for this measuring process ('cuda' or 'cpu'); call before importing kvbench.

    On a CPU machine TRITON_INTERPRET is removed (it may be inherited from a pytest run):
    without it dispatch excludes the Triton rows, so `auto` picks a torch row instead of
    timing the Triton interpreter. CPU rows also run torch single-threaded: on a runner with
    few cores the intra-op pool makes a 65536-element nonzero() take tens of times longer
    (thread contention, not the op), which would drown every host-side number.
    """
    import torch

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    if dev == "cpu":
        os.environ.pop("TRITON_INTERPRET", None)
        torch.set_num_threads(1)
    try:
        timers = importlib.import_module("kvbench.harness.timers")
    except ImportError:
        timers = None  # an old commit: its own default budget applies
    if timers is not None and hasattr(timers, "BENCH_BUDGET_S"):
        timers.BENCH_BUDGET_S = SUITE_BENCH_BUDGET_S
    return dev


#: Host-side series (bench_host: KVAlloc, DispatchOverhead): measurements per case, of which
#: the one with the least median is stored (the noise of a host call only adds time). With
#: the core choice and the canary gate of benchmarks/_host.py (docs/harness.md, "Host-side
#: series noise", measured with scripts/host_noise.py). Two: the second trims a process's
#: tail, while a process's repeats agree far better than two processes do, so the rest of a
#: commit's time goes to processes (benchmarks/_host.HOST_PROCESSES; docs/decisions.md).
HOST_REPEATS = 2
#: The cores a host-side measuring process may choose among (pin_host_process fills it).
HOST_CORES: list[int] = []


def pin_host_process() -> None:
    """Pin this measuring process to the core whose canary is fastest (benchmarks/_host.py),
    remembering every core it may use: each host case later moves to the core fastest then."""
    HOST_CORES[:] = _host.allowed_cores()
    _host.pin_fastest_core(cores=HOST_CORES)


def measure_host_case(measure: Callable[[], dict]) -> dict:
    """One host-side case's entry, measured while the host runs at its fast speed where it
    can be (benchmarks/_host.on_fast_host; what the gate saw is in entry["host"])."""
    return _host.on_fast_host(measure, HOST_CORES)


def set_selector(op: str, value: str) -> None:
    """Pin (or unpin, for 'auto') the kernel row of `op` through its env-var selector."""
    var = SELECTOR_VARS[op]
    if value == AUTO:
        os.environ.pop(var, None)
    else:
        os.environ[var] = value


def free_device_memory() -> None:
    """Between cases: drop garbage and return cached blocks (else the next case measures a
    fragmented caching allocator too)."""
    gc.collect()
    import torch

    if torch.cuda.is_available():
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except RuntimeError as exc:  # a faulted context: later cases will record the error
            print(f"freeing device memory failed: {exc}", file=sys.stderr)


#: CPU: bytes per buffer of the in-process calibration when no `kvbench calibrate` result is
#: cached for this device (about a second of copying; larger than a last-level cache).
CPU_PLAUSIBILITY_CALIBRATION_BYTES = 64 << 20
_CEILINGS: dict[str, Any] = {}


def suite_ceilings() -> Any:
    """The measured ceilings plausibility is judged against in this process: the cached
    `kvbench calibrate` result of this device, else (CPU, which has no spec peaks) a quick
    calibration measured here and not stored; None on a commit that cannot calibrate or a GPU
    that was never calibrated (the spec peak still applies there)."""
    if "value" in _CEILINGS:
        return _CEILINGS["value"]
    value = None
    try:
        calibrate = importlib.import_module("kvbench.harness.calibrate")
        harness = importlib.import_module("kvbench.harness")
        peaks = harness.device_peaks()
        value = calibrate.load_ceilings(peaks.name)
        if value is None and not peaks.is_cuda:
            value = calibrate.calibrate(size_bytes=CPU_PLAUSIBILITY_CALIBRATION_BYTES, store=False)
    except (ImportError, AttributeError, TypeError):
        value = None  # an old commit: its harness has no calibrate(store=...)
    _CEILINGS["value"] = value
    return value


def measured(timing: Any, moved_bytes: float | None, *, selected: str, max_abs_diff: float | None,
             explain: str = "", shared: bool = False) -> dict:
    """The cache entry of a measured case: plain builtins (asv pickles it across processes).
    `measured_error` holds the figures of the last timed call's verification
    (harness/proof.py), None where there was none."""
    samples_s = list(timing.as_asv()["samples"])  # the harness's one µs -> s conversion
    timer = f"{timing.timer}/{timing.l2}" + (", timing shared with the same row" if shared else "")
    return {
        "samples_s": samples_s,
        "median_us": float(timing.median_us),
        "gbps": (moved_bytes / (timing.median_us * 1e-6) / 1e9) if moved_bytes else None,
        "selected": selected,
        "max_abs_diff": max_abs_diff,
        "measured_error": getattr(timing, "proof", None),
        "timer": timer,
        "explain": explain,
    }


def measure_case(inputs: Any, selector: str, dev: str, timings: dict, *,
                 host_repeats: int = 1) -> dict:
    """One selector case through kvbench's measuring pipeline (kvbench.measure.pipeline): the
    row the param names is selected and asserted, checked, timed with its last timed call
    verified and judged plausible; `timings` lets `auto` share the timing of the row it ran.
    A commit without the pipeline skips (the suite's boundary: docs/history.md)."""
    pipeline = need("kvbench.measure.pipeline", "measure_row", "cpu_skip")
    why = pipeline.cpu_skip(selector, dev) or pipeline.unserved(inputs, selector)
    if why:
        raise Skip(why)
    seen: dict = {}

    def read_resources(run: Callable[[], float]) -> float:
        # On a GPU the check's call also tells which compiled kernels the row launches.
        seen["resources"] = _sidecar.kernel_resources(lambda: seen.setdefault("diff", run()))
        return seen["diff"] if "diff" in seen else run()

    # Only a case that moves bytes is judged against a ceiling (a host op moves none): the CPU
    # calibration behind suite_ceilings() is not paid for the host group.
    ceilings = suite_ceilings() if inputs.work.moved else None
    found = pipeline.measure_row(inputs, selector, ceilings=ceilings, timings=timings,
                                 host_repeats=host_repeats, check_hook=read_resources)
    moved = inputs.work.moved or None
    entry = measured(found.timing, moved, selected=found.row, max_abs_diff=found.max_abs_diff,
                     explain=found.selection.explain() if selector == AUTO else "",
                     shared=found.shared)
    entry["resources"] = seen.get("resources")
    return entry


def case_label(cls: str, key: tuple) -> str:
    """A case as SELECT_VAR names it: "Class('row', 'dtype', 'case')" (asv's param reprs)."""
    return f"{cls}({', '.join(map(repr, key))})"


#: The class measure_group is measuring now (its measure functions do not know their class).
_measuring: list[str] = []


def not_selected(key: tuple) -> str | None:
    """The skip reason of `key` when SELECT_VAR names another case, else None."""
    wanted = os.environ.get(SELECT_VAR)
    if not wanted or not _measuring or case_label(_measuring[-1], tuple(key)) == wanted:
        return None
    return f"{NOT_SELECTED} {wanted}"


def run_cases(keys: Iterable[tuple[str, ...]], body: Callable[[tuple[str, ...]], dict],
              results: dict) -> None:
    """Fill results[key] for each key: body's entry, a skip, or the error that stopped it."""
    for key in keys:
        why = not_selected(key)
        if why:
            results.setdefault(key, {"skip": why})
            continue
        prior = _isolate.carried(key)
        if prior is not None:  # recorded by a measuring process that crashed after it
            results[key] = prior
            continue
        _isolate.case_started(key)
        try:
            results[key] = body(key)
        except NotImplementedError as exc:
            results[key] = {"skip": str(exc) or type(exc).__name__}
        except Exception as exc:  # noqa: BLE001 (recorded per case; setup re-raises it)
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            results[key] = {"error": text}
            print(f"case {key} failed:\n{text}", file=sys.stderr)
        _isolate.case_finished(key, results[key])


def skip_all(keys: Iterable[tuple[str, ...]], reason: str, results: dict) -> None:
    """Record `reason` as the skip of every key not recorded yet."""
    for key in keys:
        results.setdefault(key, {"skip": reason})


def fail_all(keys: Iterable[tuple[str, ...]], exc: BaseException, results: dict) -> None:
    """Record `exc` as the failure of every key not recorded yet."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    print(f"cases {list(keys)} failed:\n{text}", file=sys.stderr)
    for key in keys:
        results.setdefault(key, {"error": text})


def release_pool(pool: Any) -> None:
    """run_group's `release` for a KVPool (or any input with a no-argument free())."""
    pool.free()


def run_group(keys: list[tuple[str, ...]], build: Callable[[], Any],
              measure: Callable[[Any], None], results: dict,
              release: Callable[[Any], None] | None = None) -> None:
    """Build one input (a pool) for a group of cases, measure them on it, then free it.

    A build or measure failure lands on every case of the group not recorded yet; the input
    is passed to `release` (if given) and device memory returned before the next group.
    Nothing is built when SELECT_VAR names a case outside `keys`.
    """
    if all(not_selected(key) for key in keys):
        for key in keys:
            results.setdefault(key, {"skip": not_selected(key)})
        return
    prior = {key: _isolate.carried(key) for key in keys}
    if all(entry is not None for entry in prior.values()):
        results.update(prior)  # every case recorded before a crash: no need to rebuild
        return
    _isolate.group_started(keys)
    resource = None
    state = {"keys": [repr(tuple(k)) for k in keys], "before": _sidecar.gpu_state(),
             "host_before": _host.host_state()}
    _sidecar.STATES.append(state)
    try:
        resource = build()
        measure(resource)
    except NotImplementedError as exc:
        skip_all(keys, str(exc) or type(exc).__name__, results)
    except Exception as exc:  # noqa: BLE001 (recorded; setup re-raises it per case)
        fail_all(keys, exc, results)
    finally:
        if resource is not None and release is not None:
            release(resource)
        del resource
        free_device_memory()
        state["after"] = _sidecar.gpu_state()
        state["host_after"] = _host.host_state()
        # the sidecar links each case to its group's machine state
        _isolate.group_state(keys, state, results, len(_sidecar.STATES) - 1)


def class_results(cache: dict, cls: str) -> dict:
    """One class's results out of its group's shared cache (or the failure that lost them)."""
    found = cache.get(cls)
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
    if found is None:
        raise NotImplementedError(f"case {key} was not measured by this suite version")
    if "skip" in found:
        raise NotImplementedError(found["skip"])
    if "error" in found:
        raise RuntimeError(f"case {key} failed in setup_cache (no number recorded):\n"
                           f"{found['error']}")
    return found


#: Samples stored per case in asv's result files: that many quantiles of the run's samples,
#: at probabilities (i + 0.5) / STORED_SAMPLES (odd, so the middle one IS the median asv
#: reports), rounded to STORED_DIGITS significant digits. Raw samples (up to 1000 per case)
#: made result files megabytes per commit and machine; asv needs from `samples` only a
#: median, quartiles, a 99% CI of the median and, in `compare`, a rank test, and a run's
#: samples are correlated (the between-process noise is what decides: docs/history.md), so
#: the distribution's shape at 31 points keeps what the statistics use. The run's true sample
#: count is in the sidecar (n_samples); docs/harness.md has the before/after sizes.
STORED_SAMPLES = 31
STORED_DIGITS = 6


def representative_samples(samples: list[float], k: int = STORED_SAMPLES) -> list[float]:
    """`k` quantiles of `samples` (linear interpolation), sorted, rounded to STORED_DIGITS
    significant digits; all samples, sorted and rounded, when there are no more than `k`."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % 2 == 0:
        raise ValueError(f"k must be an odd int >= 1 (so the median is one of them), got {k!r}")
    xs = sorted(float(x) for x in samples)
    if not xs:
        raise ValueError("samples must not be empty")
    if len(xs) > k:
        picked = []
        for i in range(k):
            pos = (i + 0.5) / k * len(xs) - 0.5
            lo = max(0, min(len(xs) - 1, int(pos // 1)))
            hi = min(len(xs) - 1, lo + 1)
            frac = min(1.0, max(0.0, pos - lo))
            picked.append(xs[lo] + (xs[hi] - xs[lo]) * frac)
        xs = picked
    return [float(f"{x:.{STORED_DIGITS}g}") for x in xs]


def report_selection(key: tuple[str, ...], found: dict) -> None:
    """asv shows a benchmark's output with --show-stderr: say which row ran and why."""
    print(f"{key}: ran {found['selected']} ({found['timer']}), median {found['median_us']:.2f} us,"
          f" max_abs_diff {found['max_abs_diff']}")
    if found.get("explain"):
        print(found["explain"])


#: The key under which measure_group records a class whose measure function raised.
_CLASS_ERROR = "__class_error__"
#: The key under which measure_group records a class a selective run leaves out.
_CLASS_SKIP = "__class_skip__"
#: group -> ((benchmarks module, its measure function, the class it feeds), ...)
GROUPS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "decode": (("paged_decode", "measure_decode", "PagedDecode"),
               ("paged_decode", "measure_ablation", "PagedDecodeAblation")),
    "kv_ops": (("kv_write", "measure", "KVWrite"),
               ("kv_gather_fp8", "measure", "KVGatherFp8")),
    "host": (("kv_alloc", "measure", "KVAlloc"),
             ("dispatch_overhead", "measure", "DispatchOverhead")),
}


#: Measuring processes per commit, per group (1 where not named): the host group's series move
#: between processes even on a fast host, so each of its cases keeps the least of several
#: (benchmarks/_host.least_of_processes). The GPU groups' series repeat within ~1% between
#: processes (docs/history.md, "Run-to-run spread"): one process each.
GROUP_PROCESSES = {"host": _host.HOST_PROCESSES}
#: Overrides the host group's count: fewer processes measure a commit faster, and noisier
#: (docs/harness.md, "Host-side series noise"); the suite reads it, so old commits obey it too.
HOST_PROCESSES_VAR = "KVBENCH_HOST_PROCESSES"


def group_processes(group: str) -> int:
    """How many processes measure `group` per commit (GROUP_PROCESSES, or for the host group
    HOST_PROCESSES_VAR when set); ValueError naming the variable for a value that is not a
    whole number >= 1."""
    raw = os.environ.get(HOST_PROCESSES_VAR, "").strip() if group == "host" else ""
    if not raw:
        return GROUP_PROCESSES.get(group, 1)
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{HOST_PROCESSES_VAR}={raw!r}: expected a whole number of measuring "
                         f"processes >= 1 (default {GROUP_PROCESSES['host']})")
    return int(raw)


def measure_group(group: str) -> dict[str, dict]:
    """{class name: that class's results} for every class of `group`, measured in a forked
    child of this process (benchmarks/_isolate.py: a case that crashes its process loses only
    itself), in group_processes(group) such children one after another where that is more
    than one (torch imported here first: `preload_torch`; this process's objects frozen out of
    the collector meanwhile, so that each child's full collections between cases, in
    free_device_memory, walk only what the child made, not the inherited torch heap), then
    the sidecar written (benchmarks/_sidecar.py)."""
    count = group_processes(group)
    freeze = count > 1 and gc.get_freeze_count() == 0  # a caller's own freeze is left as it is
    if count > 1:
        preload_torch()
    if freeze:
        gc.freeze()
    try:
        runs = [_isolate.run_isolated(lambda: measure_group_here(group), _sidecar.STATES)
                for _ in range(count)]
    finally:
        if freeze:
            gc.unfreeze()
    out = runs[0] if len(runs) == 1 else _host.least_of_processes(runs)
    _sidecar.write_sidecar(group, out)
    return out


def preload_torch() -> None:
    """Import torch in this supervising process, before it forks several measuring processes:
    each child then inherits the imported module instead of importing it again (seconds per
    child). Importing creates no CUDA state (nothing here touches torch.cuda), so
    every child still creates its own CUDA context after the fork. Without torch the children
    record why they cannot measure, as they would without this."""
    with contextlib.suppress(ImportError):
        importlib.import_module("torch")


def measure_group_here(group: str) -> dict[str, dict]:
    """{class name: that class's results} for every class of `group`, in this process.

    A measure function that raises (they record per-case failures, so this is a bug in the
    suite itself) fails its own class's cases only: the group's other class keeps its numbers.
    """
    out: dict[str, dict] = {}
    wanted = os.environ.get(SELECT_VAR)
    for module, func, cls in GROUPS[group]:
        if wanted and not wanted.startswith(f"{cls}("):
            out[cls] = {_CLASS_SKIP: f"{NOT_SELECTED} {wanted}"}
            continue
        _isolate.set_class(cls)
        _measuring.append(cls)
        try:
            measure = getattr(importlib.import_module(f"{__package__}.{module}"), func)
            out[cls] = measure()
        except Exception as exc:  # noqa: BLE001 (recorded; entry() raises it per case)
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            print(f"{cls}: {func} failed:\n{text}", file=sys.stderr)
            out[cls] = {_CLASS_ERROR: text}
        finally:
            _measuring.pop()
        free_device_memory()
    return out


# One function per group, each at its own line: asv keys a setup_cache by module and line, so
# every class using the same function shares one process and one cache.
def setup_cache_decode(self) -> dict[str, dict]:
    return measure_group("decode")


def setup_cache_kv_ops(self) -> dict[str, dict]:
    return measure_group("kv_ops")


def setup_cache_host(self) -> dict[str, dict]:
    return measure_group("host")


setup_cache_decode.timeout = 600
setup_cache_kv_ops.timeout = 420
setup_cache_host.timeout = 300 * _host.HOST_PROCESSES


class _Suite:
    """Base of every benchmark class: lookups only. Subclasses define params, the measuring
    function of their class, and `setup_cache = setup_cache_<group>` (their GROUPS entry).
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
