"""Shared machinery of the kvbench asv suite: one measuring process per commit.

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

Measuring one class or one case (`kvbench bisect`). When KVBENCH_ASV_SELECT names a class
("KVAlloc") the measuring process measures that class only; when it names one case as
"Class(param, ...)" (the params repr'd as asv names a combination, e.g.
"KVAlloc('host/freelist', 'fragmented', 64)"), that case only: the other classes are not run,
the selected class builds only the inputs the case needs, and every other case is recorded as
a skip "not selected". The suite, not the commit,
reads the variable, so it works on old commits too; names, params and `version` are the same
as in a full run, so such a run's number belongs to the same series.

On a machine without CUDA: Triton rows and GPU-size cases are skipped (CPU timings of
interpreted Triton mean nothing and take minutes); torch rows run at the small cases, and
host-side costs (allocator, dispatch) are real numbers.
"""

from __future__ import annotations

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
#: Samples per bench() row in the suite, the most an adaptive row takes (the harness clamps
#: to (10, 1000)): a commit's run is
#: one point of a series whose noise is the spread BETWEEN processes, which more samples of
#: one process do not shrink; the median of 100 samples has a 95% interval of about a quarter
#: of one sample's spread (1.96 x 1.25 / sqrt(100)), at a tenth of the launches of the
#: harness's cap (docs/history.md, "Cost per commit"). Set per measuring process by
#: prepare_process, for every commit whose harness has the knob.
SUITE_BENCH_REPEAT_RANGE = (10, 100)
#: Adaptive stopping (harness BENCH_STOP_CI): a row stops sampling once its median's 95%
#: interval is within +-0.5%, the scale of the between-process noise of the decode series
#: (a few tenths of a percent, which no within-process count shrinks), so a quiet row takes
#: ~20 samples and only a noisy one the cap above. Set per measuring process by prepare_process, for every commit whose harness
#: has the knob (older commits take the fixed count).
SUITE_BENCH_STOP_CI = 0.005
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
    if timers is not None and hasattr(timers, "BENCH_REPEAT_RANGE"):
        timers.BENCH_REPEAT_RANGE = SUITE_BENCH_REPEAT_RANGE
    if timers is not None and hasattr(timers, "BENCH_STOP_CI"):
        timers.BENCH_STOP_CI = SUITE_BENCH_STOP_CI
    if timers is not None and hasattr(timers, "HOST_BUDGET_S"):
        timers.HOST_BUDGET_S = SUITE_HOST_BUDGET_S
    freeze_imports()
    return dev


def freeze_imports() -> None:
    """Move every object alive now (torch's, Triton's and kvbench's modules, the results so
    far) out of the collector's reach until measure_group_here ends (gc.unfreeze): the
    gc.collect between groups (free_device_memory) then scans only what the cases created.
    Why: with torch and Triton imported a full collection scans ~180k objects (tens of ms),
    and the suite collects once per group, dozens of times a commit. What a case allocates is
    created after the freeze and collected as before."""
    gc.collect()
    gc.freeze()


#: Host-side series: wall seconds per bench_host measurement (the harness's HOST_BUDGET_S,
#: 0.075 s by default). A host series' noise is the spread between processes (the host's speed
#: at the time, docs/harness.md), which more samples of one process do not shrink; this keeps
#: the host group (27 cases x HOST_REPEATS measurements) to a few seconds of a commit. Set per
#: measuring process by prepare_process, for every commit whose harness has the knob.
SUITE_HOST_BUDGET_S = 0.03
#: Host-side series (bench_host: KVAlloc, DispatchOverhead): measurements per case, of which
#: the one with the least median is stored (the noise of a host call only adds time), each
#: on the core that is fastest then and gated by the canary of benchmarks/_host.py
#: (docs/harness.md, "Host-side series").
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
    if not wanted or not _measuring or wanted in (_measuring[-1],
                                                  case_label(_measuring[-1], tuple(key))):
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
#: group -> ((benchmarks module, its measure function, the class it feeds), ...), in the
#: order the measuring process runs them: the host-side classes first (as before, in a
#: process that has measured nothing else yet), then the KV ops, then decode. One group:
#: every class of the suite is measured by ONE process per commit, which pays torch's
#: import, the CUDA context, Triton's kernel loads and dispatch's golden checks once instead
#: of once per group (docs/history.md, "Cost per commit").
GROUPS: dict[str, tuple[tuple[str, str, str], ...]] = {
    "suite": (("kv_alloc", "measure", "KVAlloc"),
              ("dispatch_overhead", "measure", "DispatchOverhead"),
              ("kv_write", "measure", "KVWrite"),
              ("kv_gather_fp8", "measure", "KVGatherFp8"),
              ("paged_decode", "measure_decode", "PagedDecode"),
              ("paged_decode", "measure_ablation", "PagedDecodeAblation")),
}


def measure_group(group: str) -> dict[str, dict]:
    """{class name: that class's results} for every class of `group`, measured in a forked
    child of this process (benchmarks/_isolate.py: a case that crashes its process loses only
    itself), then the sidecar written (benchmarks/_sidecar.py)."""
    out = _isolate.run_isolated(lambda: measure_group_here(group), _sidecar.STATES)
    _sidecar.write_sidecar(group, out)
    return out


def selects_class(wanted: str, cls: str) -> bool:
    """SELECT_VAR's value names `cls`: the class alone ("KVAlloc") or one of its cases
    ("KVAlloc('host/freelist', 'fragmented', 64)")."""
    return wanted == cls or wanted.startswith(f"{cls}(")


def measure_group_here(group: str) -> dict[str, dict]:
    """{class name: that class's results} for every class of `group`, in this process.

    A measure function that raises (they record per-case failures, so this is a bug in the
    suite itself) fails its own class's cases only: the group's other classes keep their
    numbers.
    """
    out: dict[str, dict] = {}
    wanted = os.environ.get(SELECT_VAR)
    cores = _host.allowed_cores()  # a host-side class pins the process to one core
    for module, func, cls in GROUPS[group]:
        if wanted and not selects_class(wanted, cls):
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
            _host.restore_affinity(cores)
        free_device_memory()
    gc.unfreeze()  # prepare_process froze what each class imported
    return out


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
