"""The measuring process: a Worker measures a group's classes and holds what that takes.

One Worker per measuring process (the manager's forked child, or the calling process for a
test or scripts/profile_suite.py). It holds what used to be module globals of the suite: the
class being measured (its measure functions do not know their class), the selection
(KVBENCH_ASV_SELECT), the host cores and the canary gate of the host-side classes, the
machine state around each measurement group, the ceilings plausibility is judged against, and
the Reporter to the supervising manager (which cases started, finished, were carried over a
crash). A declaration module's measure function receives the worker and calls back into it:
`prepare_process`, `run_group` (one input built, its cases measured, freed), `run_cases`,
`measure_case` (one call into the commit's kvbench.measure.pipeline), `measure_host_case`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import glob
import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from . import host as _host
from . import sidecar as _sidecar
from .compat import Skip, need
from .isolate import CLASS_ERROR, Reporter

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
#: ~20 samples and only a noisy one the cap above. Set per measuring process by
#: prepare_process, for every commit whose harness has the knob (older commits take the
#: fixed count).
SUITE_BENCH_STOP_CI = 0.005
#: Host-side series: wall seconds per bench_host measurement (the harness's HOST_BUDGET_S,
#: 0.075 s by default). A host series' noise is the spread between processes (the host's speed
#: at the time, docs/harness.md), which more samples of one process do not shrink; this keeps
#: the host group (27 cases x HOST_REPEATS measurements) to a few seconds of a commit. Set per
#: measuring process by prepare_process, for every commit whose harness has the knob.
SUITE_HOST_BUDGET_S = 0.03
#: Host-side series (bench_host: KVAlloc, DispatchOverhead): measurements per case, of which
#: the one with the least median is stored (the noise of a host call only adds time), each
#: on the core that is fastest then and gated by the canary of benchmarks/runner/host.py
#: (docs/harness.md, "Host-side series").
HOST_REPEATS = 2
#: The harness knobs prepare_process sets: name in kvbench.harness.timers -> the suite's value.
#: A commit whose harness lacks a knob keeps its own default for it.
SUITE_KNOBS = {
    "BENCH_BUDGET_S": SUITE_BENCH_BUDGET_S,
    "BENCH_REPEAT_RANGE": SUITE_BENCH_REPEAT_RANGE,
    "BENCH_STOP_CI": SUITE_BENCH_STOP_CI,
    "HOST_BUDGET_S": SUITE_HOST_BUDGET_S,
}
#: CPU: bytes per buffer of the in-process calibration when no `kvbench calibrate` result is
#: cached for this device (about a second of copying; larger than a last-level cache).
CPU_PLAUSIBILITY_CALIBRATION_BYTES = 64 << 20
#: The file in an asv environment's folder that keeps a CPU's quick calibration for the
#: environment's later commits (quick_cpu_ceilings).
QUICK_CEILINGS_FILE = "kvbench-quick-ceilings.json"
#: The `auto` selector: dispatch picks the row (its explanation is recorded).
AUTO = "auto"
#: The variable naming the classes or cases a measuring process measures (benchmarks/_common.py).
SELECT_VAR = "KVBENCH_ASV_SELECT"
#: Between the names of a selection of several ("KVAlloc; PagedDecode('auto', 'fp16', 'b1_c4k')"):
#: a case's own params hold commas, never this.
SELECT_SEPARATOR = ";"
#: The skip recorded for the cases a selective run leaves out.
NOT_SELECTED = "not selected: this run measures only"
#: The key under which a class a selective run leaves out is recorded.
CLASS_SKIP = "__class_skip__"
#: suite_ceilings() not computed yet in this worker.
_UNSET = object()
#: A group: ((declaration module, its measure function, the class it feeds), ...).
Group = tuple[tuple[str, str, str], ...]


def no_nvidia_driver() -> bool:
    """True when this machine certainly has no NVIDIA GPU (no driver files), decided without
    importing torch: a class that has nothing to run on a CPU then skips in milliseconds
    instead of paying torch's import in its setup_cache process."""
    return not (os.path.exists("/proc/driver/nvidia/version") or glob.glob("/dev/nvidia*"))


def freeze_imports() -> None:
    """Move every object alive now (torch's, Triton's and kvbench's modules, the results so
    far) out of the collector's reach until Worker.measure_group ends (gc.unfreeze): the
    gc.collect between groups (free_device_memory) then scans only what the cases created.
    Why: with torch and Triton imported a full collection scans ~180k objects (tens of ms),
    and the suite collects once per group, dozens of times a commit. What a case allocates is
    created after the freeze and collected as before."""
    gc.collect()
    gc.freeze()


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


def case_label(cls: str, key: tuple) -> str:
    """A case as SELECT_VAR names it: "Class('row', 'dtype', 'case')" (asv's param reprs)."""
    return f"{cls}({', '.join(map(repr, key))})"


def selected_names(wanted: str) -> tuple[str, ...]:
    """The classes and cases a SELECT_VAR value names, in its order (SELECT_SEPARATOR between
    them; blanks around a name are not part of it)."""
    return tuple(name.strip() for name in wanted.split(SELECT_SEPARATOR) if name.strip())


def selects_class(wanted: str, cls: str) -> bool:
    """SELECT_VAR's value names `cls`: the class alone ("KVAlloc") or one of its cases
    ("KVAlloc('host/freelist', 'fragmented', 64)"), among the names it holds."""
    return any(name == cls or name.startswith(f"{cls}(") for name in selected_names(wanted))


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


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def skip_all(keys: Iterable[tuple[str, ...]], reason: str, results: dict) -> None:
    """Record `reason` as the skip of every key not recorded yet."""
    for key in keys:
        results.setdefault(key, {"skip": reason})


def fail_all(keys: Iterable[tuple[str, ...]], exc: BaseException, results: dict) -> None:
    """Record `exc` as the failure of every key not recorded yet."""
    text = _traceback(exc)
    print(f"cases {list(keys)} failed:\n{text}", file=sys.stderr)
    for key in keys:
        results.setdefault(key, {"error": text})


def quick_cpu_ceilings(calibrate: Any, device_name: str) -> Any:
    """A CPU's ceilings from a quick calibration (CPU_PLAUSIBILITY_CALIBRATION_BYTES), measured
    once per asv environment: asv names the environment's folder to the measuring process
    (ASV_ENV_DIR), where the first commit's measurement is kept (QUICK_CEILINGS_FILE, by
    device name) and every later commit of the environment reads it, instead of paying the
    calibration's seconds of cold-cache copies per commit. Outside asv (a test, a script) it
    is measured here. Never written to `kvbench calibrate`'s own cache: a quick measurement
    must not pass for a full one. An entry this commit's Ceilings cannot take (an older
    harness) is measured again."""
    folder = os.environ.get("ASV_ENV_DIR")
    path = os.path.join(folder, QUICK_CEILINGS_FILE) if folder and os.path.isdir(folder) else None
    kept: dict = {}
    if path and os.path.isfile(path):
        try:
            with open(path) as f:
                kept = json.load(f)
            return calibrate.Ceilings(**kept[device_name])
        except (OSError, ValueError, KeyError, TypeError):
            kept = kept if isinstance(kept, dict) else {}
    value = calibrate.calibrate(size_bytes=CPU_PLAUSIBILITY_CALIBRATION_BYTES, store=False)
    if path:
        kept[device_name] = dataclasses.asdict(value)
        # temp file + rename written here, not kvbench.core.jsonfile: the runner measures
        # commits whose kvbench predates that module. A cache that cannot be kept costs the
        # next commit a calibration, never this one its measurement.
        tmp = f"{path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(kept, f)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.remove(tmp)
    return value


class Worker:
    """Measures the classes of a group in this process; see the module docstring.

    `groups` maps a group name to its (module, measure function, class) triples and `package`
    names the package those modules live in (the suite's `benchmarks`). A measure function is
    called as measure(worker) and returns {param tuple: entry}.
    """

    def __init__(self, groups: dict[str, Group], package: str,
                 reporter: Reporter | None = None) -> None:
        self.groups = groups
        self.package = package
        self.reporter = reporter or Reporter()
        self.cls: str | None = None  # the class being measured
        self.select: str | None = os.environ.get(SELECT_VAR) or None
        self.host = _host.HostGate()
        self.host_cores: list[int] = []
        #: Machine state around each measurement group, in order (the in-process sidecar's).
        self.states: list[dict] = []
        self._ceilings: Any = _UNSET
        self._device: dict | None = None
        self._in_group = False  # inside measure_group: prepare_process may freeze (gc)
        #: torch's intra-op threads before a host-side class pinned the process (restored after)
        self._threads_before_pin: int | None = None

    # ---- the process ----------------------------------------------------------------------

    def prepare_process(self, **knobs: Any) -> str:
        """Device type for this measuring process ('cuda' or 'cpu'); call before importing
        kvbench. `knobs` override SUITE_KNOBS for the calling class (same names).

        On a CPU machine TRITON_INTERPRET is removed (it may be inherited from a pytest run):
        without it dispatch excludes the Triton rows, so `auto` picks a torch row instead of
        timing the Triton interpreter. CPU rows also run torch single-threaded: on a runner
        with few cores the intra-op pool makes a 65536-element nonzero() take tens of times
        longer (thread contention, not the op), which would drown every host-side number.
        The suite's harness knobs (SUITE_KNOBS) are set where the commit's harness has them.
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
        unknown = set(knobs) - set(SUITE_KNOBS)
        if unknown:
            raise ValueError(f"prepare_process: unknown knob(s) {sorted(unknown)}; accepted: "
                             f"{', '.join(SUITE_KNOBS)}")
        for name, value in {**SUITE_KNOBS, **knobs}.items():
            if timers is not None and hasattr(timers, name):
                setattr(timers, name, value)
        if self._in_group:  # only the measuring process's own loop (measure_group) thaws it
            freeze_imports()
        return dev

    def device(self) -> dict:
        """Which device measures this process's cases (sidecar.device_identity), read once."""
        if self._device is None:
            self._device = _sidecar.device_identity()
        return self._device

    def pin_host_process(self) -> None:
        """Pin this measuring process to the core whose canary is fastest (runner/host.py),
        remembering every core it may use: each host case later moves to the core fastest
        then. torch runs its CPU ops on one thread while the process is pinned (the class's
        end restores both, unpin_host_process): its intra-op pool, one thread per core of the
        machine, would otherwise share the one core, and each parallel CPU op of the class's
        setup (a pool's quantization, a golden check's inputs) waits on threads spinning for
        a core they cannot get (docs/decisions.md, "Host-side classes run torch on one
        thread")."""
        import torch

        self.host_cores[:] = _host.allowed_cores()
        if self._threads_before_pin is None:
            self._threads_before_pin = torch.get_num_threads()
        torch.set_num_threads(1)
        self.host.pin_fastest_core(cores=self.host_cores)

    def unpin_host_process(self, cores: list[int]) -> None:
        """Undo pin_host_process: every thread may run on `cores` again, and torch gets back
        the intra-op threads it had (nothing when no class pinned the process)."""
        _host.restore_affinity(cores)
        if self._threads_before_pin is not None:
            import torch

            torch.set_num_threads(self._threads_before_pin)
            self._threads_before_pin = None

    def suite_ceilings(self) -> Any:
        """The measured ceilings plausibility is judged against in this process: the cached
        `kvbench calibrate` result of this device, else (CPU, which has no spec peaks) a quick
        calibration (quick_cpu_ceilings); None on a commit that cannot calibrate or a
        GPU that was never calibrated (the spec peak still applies there)."""
        if self._ceilings is not _UNSET:
            return self._ceilings
        value = None
        try:
            calibrate = importlib.import_module("kvbench.harness.calibrate")
            harness = importlib.import_module("kvbench.harness")
            peaks = harness.device_peaks()
            value = calibrate.load_ceilings(peaks.name)
            if value is None and not peaks.is_cuda:
                value = quick_cpu_ceilings(calibrate, peaks.name)
        except (ImportError, AttributeError, TypeError):
            value = None  # an old commit: its harness has no calibrate(store=...)
        self._ceilings = value
        return value

    # ---- one case -------------------------------------------------------------------------

    def measure_host_case(self, measure: Callable[[], dict]) -> dict:
        """One host-side case's entry, measured while the host runs at its fast speed where it
        can be (HostGate.on_fast_host; what the gate saw is in entry["host"])."""
        return self.host.on_fast_host(measure, self.host_cores)

    def measure_case(self, inputs: Any, selector: str, dev: str, timings: dict, *,
                     host_repeats: int = 1) -> dict:
        """One selector case through kvbench's measuring pipeline (kvbench.measure.pipeline):
        the row the param names is selected and asserted, checked, timed with its last timed
        call verified and judged plausible; `timings` lets `auto` share the timing of the row
        it ran. A commit without the pipeline skips (the suite's boundary: docs/history.md)."""
        pipeline = need("kvbench.measure.pipeline", "measure_row", "cpu_skip")
        why = pipeline.cpu_skip(selector, dev) or pipeline.unserved(inputs, selector)
        if why:
            raise Skip(why)
        seen: dict = {}

        def read_resources(run: Callable[[], float]) -> float:
            # On a GPU the check's call also tells which compiled kernels the row launches.
            seen["resources"] = _sidecar.kernel_resources(lambda: seen.setdefault("diff", run()))
            return seen["diff"] if "diff" in seen else run()

        # Only a case that moves bytes is judged against a ceiling (a host op moves none): the
        # CPU calibration behind suite_ceilings() is not paid for the host group. The first
        # commits with the pipeline give a host op no Work at all (None).
        moved = getattr(inputs.work, "moved", None) or None
        ceilings = self.suite_ceilings() if moved else None
        found = pipeline.measure_row(inputs, selector, ceilings=ceilings, timings=timings,
                                     host_repeats=host_repeats, check_hook=read_resources)
        entry = measured(found.timing, moved, selected=found.row, max_abs_diff=found.max_abs_diff,
                         explain=found.selection.explain() if selector == AUTO else "",
                         shared=found.shared)
        entry["resources"] = seen.get("resources")
        return entry

    # ---- cases and groups -----------------------------------------------------------------

    def not_selected(self, key: tuple) -> str | None:
        """The skip reason of `key` when SELECT_VAR names neither its class nor it, else None."""
        wanted = self.select
        if not wanted or self.cls is None:
            return None
        names = selected_names(wanted)
        if self.cls in names or case_label(self.cls, tuple(key)) in names:
            return None
        return f"{NOT_SELECTED} {wanted}"

    def run_cases(self, keys: Iterable[tuple[str, ...]], body: Callable[[tuple[str, ...]], dict],
                  results: dict) -> None:
        """Fill results[key] for each key: body's entry, a skip, or the error that stopped it."""
        cls = self.cls or ""
        for key in keys:
            why = self.not_selected(key)
            if why:
                results.setdefault(key, {"skip": why})
                continue
            prior = self.reporter.carried(cls, key)
            if prior is not None:  # recorded by a measuring process that crashed after it
                results[key] = prior
                continue
            self.reporter.case_started(cls, key)
            try:
                results[key] = body(key)
            except NotImplementedError as exc:
                results[key] = {"skip": str(exc) or type(exc).__name__}
            except Exception as exc:  # noqa: BLE001 (recorded per case; setup re-raises it)
                text = _traceback(exc)
                results[key] = {"error": text}
                print(f"case {key} failed:\n{text}", file=sys.stderr)
            self.reporter.case_finished(cls, key, results[key])

    def run_group(self, keys: list[tuple[str, ...]], build: Callable[[], Any],
                  measure: Callable[[Any], None], results: dict,
                  release: Callable[[Any], None] | None = None) -> None:
        """Build one input (a pool) for a group of cases, measure them on it, then free it.

        A build or measure failure lands on every case of the group not recorded yet; the
        input is passed to `release` (if given) and device memory returned before the next
        group. Nothing is built when SELECT_VAR names a case outside `keys`.
        """
        if all(self.not_selected(key) for key in keys):
            for key in keys:
                results.setdefault(key, {"skip": self.not_selected(key)})
            return
        cls = self.cls or ""
        prior = {key: self.reporter.carried(cls, key) for key in keys}
        if all(entry is not None for entry in prior.values()):
            results.update(prior)  # every case recorded before a crash: no need to rebuild
            return
        self.reporter.group_started(cls, keys)
        resource = None
        state = {"keys": [repr(tuple(k)) for k in keys], "before": _sidecar.gpu_state(),
                 "host_before": self.host.host_state(),
                 # the first group of a process names the device (the sidecar's "device")
                 **({} if self.states else {"device": self.device()})}
        self.states.append(state)
        index = len(self.states) - 1
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
            state["host_after"] = self.host.host_state()
            # the sidecar links each case to its group's machine state
            if not self.reporter.group_state(cls, keys, state):
                for key in keys:
                    if isinstance(results.get(key), dict) and "samples_s" in results[key]:
                        results[key]["state"] = index

    # ---- a group of classes ---------------------------------------------------------------

    def measure_group(self, group: str) -> dict[str, dict]:
        """{class name: that class's results} for every class of `group`, in this process.

        A measure function that raises (they record per-case failures, so this is a bug in the
        suite itself) fails its own class's cases only: the group's other classes keep their
        numbers.
        """
        self._in_group = True
        try:
            return self._measure_classes(group)
        finally:
            self._in_group = False
            gc.unfreeze()  # prepare_process froze what each class imported

    def _measure_classes(self, group: str) -> dict[str, dict]:
        out: dict[str, dict] = {}
        self.select = os.environ.get(SELECT_VAR) or None
        cores = _host.allowed_cores()  # a host-side class pins the process to one core
        for module, func, cls in self.groups[group]:
            if self.select and not selects_class(self.select, cls):
                out[cls] = {CLASS_SKIP: f"{NOT_SELECTED} {self.select}"}
                continue
            self.cls = cls
            try:
                measure = getattr(importlib.import_module(f"{self.package}.{module}"), func)
                out[cls] = measure(self)
            except Exception as exc:  # noqa: BLE001 (recorded; entry() raises it per case)
                text = _traceback(exc)
                print(f"{cls}: {func} failed:\n{text}", file=sys.stderr)
                out[cls] = {CLASS_ERROR: text}
            finally:
                self.cls = None
                self.unpin_host_process(cores)
            free_device_memory()
        return out
