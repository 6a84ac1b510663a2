"""The one measuring pipeline: inputs -> row selected and asserted -> checked -> timed with the
last timed call verified -> plausibility -> a measured row.

Every number kvbench records goes through here: `kvbench table`, `kvbench tune`, the
allocator report and the asv suite (benchmarks/) call these functions with the OpInputs an op
module builds (kvbench.ops.<op>.<op>_inputs), so a rule about measuring (which timer, the
correctness gate before any timing, the proof of the timed calls, the plausibility bound) is
written once.

    inputs = decode_inputs(decode_pool(8, 4096, "fp16", "cuda"))
    found = measure_row(inputs, "triton/split_kv")      # or "auto"
    found.timing.median_us, found.max_abs_diff, found.selection.spec.name
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from kvbench.core.env import AUTO, selector_var
from kvbench.dispatch.core import Selection, active_registry, record_golden
from kvbench.dispatch.core import select as select_problem
from kvbench.harness import (
    Row,
    bench,
    bench_host,
    bench_kernel,
    device_peaks,
    event_floor,
    violations,
)
from kvbench.harness.timers import KERNEL_TIMER_FLOOR_FACTOR, TimingResult
from kvbench.ops.common import OpInputs

#: Why a Triton row gets no number on a CPU, even with TRITON_INTERPRET=1: the interpreter's
#: timings describe the interpreter, and take minutes per table.
CPU_TRITON_SKIP = "Triton rows are not timed on a CPU: the interpreter's timings mean nothing"
#: Why a CUDA row gets no number on a CPU.
CPU_CUDA_SKIP = "CUDA rows need a GPU"


class RowMismatch(AssertionError):
    """Dispatch ran another row than the one asked for: a number would name the wrong kernel."""


class Implausible(RuntimeError):
    """A timing implying more than a spec peak or the measured ceiling: a measurement bug."""


@dataclass
class Measured:
    """One measured row: what ran, its gate's error, its timing (and whether it was shared)."""

    selection: Selection
    max_abs_diff: float
    timing: TimingResult
    #: True when the timing was taken for the same row asked for under another name (auto).
    shared: bool = False

    @property
    def row(self) -> str:
        return self.selection.spec.name


def cpu_skip(row: str, device_type: str) -> str | None:
    """Why `row` is not timed on this device type, or None."""
    if device_type != "cuda" and row.startswith("triton/"):
        return CPU_TRITON_SKIP
    if device_type != "cuda" and row.startswith("cuda/"):
        return CPU_CUDA_SKIP
    return None


#: Why a row is not measured on an input its registry row does not read (e.g. a per-dtype
#: page layout): no kernel to time, on any machine.
UNSERVED = "the registry row does not read this input"


def unserved(inputs: OpInputs, row: str) -> str | None:
    """Why registry row `row` does not read these inputs at their dtype (its layout
    requirement), or None; None for auto and for a row the registry lacks (measuring it then
    says so)."""
    if row == AUTO:
        return None
    problem = inputs.problem
    try:
        spec = active_registry().get(problem.op, row)
    except ValueError:
        return None
    layout = spec.layout_for(problem.dtype)
    wrong = [f"needs {t}" for t in layout.missing(problem.tags)]
    wrong += [f"refuses {t}" for t in layout.conflicting(problem.tags)]
    if not wrong:
        return None
    return f"{UNSERVED}: {row} at {problem.dtype} {', '.join(wrong)}"


@contextlib.contextmanager
def forced(op: str, row: str) -> Iterator[None]:
    """Pin `op`'s selector to `row` ("auto" unpins) for the block; restore the caller's value."""
    var = selector_var(op)
    before = os.environ.get(var)
    if row == AUTO:
        os.environ.pop(var, None)
    else:
        os.environ[var] = row
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = before


def select(inputs: OpInputs, row: str) -> Selection:
    """The selection dispatch makes for these inputs with the selector pinned to `row`;
    RowMismatch when it is another row (never time one kernel under another's name)."""
    op = inputs.problem.op
    with forced(op, row):
        sel = select_problem(inputs.problem)
    if row != AUTO and sel.spec.name != row:
        raise RowMismatch(f"{op}: asked for row {row!r}, dispatch ran {sel.spec.name!r}")
    return sel


def explain(inputs: OpInputs) -> str:
    """What `auto` picks for these inputs, and why (the decision chain)."""
    try:
        return select(inputs, AUTO).explain()
    except Exception as exc:  # noqa: BLE001 - explain is informative; its failure is reported
        return f"(auto failed: {type(exc).__name__}: {exc})"


def check(inputs: OpInputs, fn: Callable[..., Any]) -> float:
    """The correctness gate of `fn` on these inputs (max |out - ref|; raises when wrong)."""
    return float(inputs.check(fn))


def least_median(measure: Callable[[], TimingResult], repeats: int = 1) -> TimingResult:
    """The timing with the least median of `repeats` calls of `measure()` (a harness timer):
    the estimator of a host-side cost, whose noise is one-sided (preemption, a core change, a
    cold cache only ever add time)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an int >= 1, got {repeats!r}")
    return min((measure() for _ in range(repeats)), key=lambda t: t.median_us)


def time_call(inputs: OpInputs, fn: Callable[..., Any], *, row: str = "", l2: str = "cold",
              proof: bool = True, host_repeats: int = 1) -> TimingResult:
    """`fn` (registry row `row`) timed on these inputs: the event timer (cold L2 unless
    `l2="warm"`) with the last timed call verified on a perturbed input; host-side ops by the
    host timer, the worst of their calls (each with its reset before every sample), each
    call's timing the least median of `host_repeats` measurements (host noise only ever adds
    time: preemption, a core change, a cold cache)."""
    calls = inputs.timed_calls(fn, row)
    if inputs.host:
        timings = [
            least_median(lambda call=call, reset=reset: bench_host(
                call, reset=reset, device=inputs.problem.device), host_repeats)
            for call, reset in calls
        ]
        return max(timings, key=lambda t: t.median_us)
    (call, _), = calls
    verified = inputs.proof(fn) if proof and inputs.proof is not None else None
    return bench(call, l2=l2, device=inputs.problem.device, proof=verified)


@functools.cache
def _event_floor_us(device: str) -> float:
    return event_floor(device).median_us


def companion_timings(inputs: OpInputs, fn: Callable[..., Any], timing: TimingResult, *,
                      l2: str = "cold",
                      kernel_time: bool = False) -> list[tuple[TimingResult, str]]:
    """The second timers a row's event timing needs, each with its note:

    - within KERNEL_TIMER_FLOOR_FACTOR of the event timer's floor the events may time the
      timer, so the kernel time (CUPTI) is measured beside them; ``kernel_time`` asks for it
      beside every GPU row (the time the call's kernels ran, without the gaps between them);
    - a call that makes the host wait for the GPU (host_syncs) holds host gaps in its event
      samples, so what the caller waits (the host timer) is measured beside them (cold L2
      only: the host timer flushes).
    """
    if inputs.host:
        return []
    ((call, _),) = inputs.timed_calls(fn)
    out = []
    if timing.timer == "bench" and timing.device.startswith("cuda") and (
            kernel_time
            or timing.median_us <= KERNEL_TIMER_FLOOR_FACTOR * _event_floor_us(timing.device)):
        out.append((bench_kernel(call, l2=l2, device=inputs.problem.device), "CUPTI kernel time"))
    if timing.host_syncs and l2 == "cold":
        out.append((bench_host(call, device=inputs.problem.device),
                    "syncs the host: what the caller waits"))
    return out


def graph_replay_timing(inputs: OpInputs, fn: Callable[..., Any]) -> TimingResult:
    """`fn` captured in a CUDA graph and its replay timed (with the same proof): the device
    time without the launch overhead. Raises for a call that cannot be captured."""
    import torch

    ((call, _),) = inputs.timed_calls(fn)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # warm up on the side stream, as CUDA graph capture requires
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    proof = inputs.proof(fn) if inputs.proof is not None else None
    return bench(graph.replay, device=inputs.problem.device, proof=proof)


def implausible(name: str, timing: TimingResult, inputs: OpInputs,
                ceilings: Any = None) -> list[str]:
    """Why this timing cannot be a real measurement (above a spec peak of the device, or far
    above the ceiling measured on it: harness.violations); [] when plausible or unscored."""
    if inputs.work is None or not inputs.work.moved:
        return []
    row = Row(name, "case", float(timing.median_us), inputs.work)
    return violations([row], device_peaks(inputs.problem.device), ceilings)


def measure_row(inputs: OpInputs, row: str, *, l2: str = "cold", ceilings: Any = None,
                timings: dict[str, TimingResult] | None = None,
                golden: bool = False, host_repeats: int = 1,
                check_hook: Callable[[Callable[[], float]], float] | None = None) -> Measured:
    """The whole pipeline for one row of one problem: select (asserting the row), check, time
    with proof, judge plausibility.

    `timings`: a dict shared by the rows measured on the same inputs; `auto` then reuses the
    timing of the row it selected instead of timing the same callable twice. `golden`: record
    the full-size check as the row's golden record (dispatch.core.record_golden), as tune
    does. `check_hook(run)`: runs the check thunk and returns its result (the asv suite reads
    the compiled kernels' resources around it). Raises RowMismatch, VerificationError, Implausible;
    nothing wrong is returned.
    """
    sel = select(inputs, row)
    run = lambda: check(inputs, sel.target)
    diff = run() if check_hook is None else check_hook(run)
    if golden:
        record_golden(inputs.problem.op, sel.spec.name, inputs.problem.dtype,
                      inputs.problem.device, max_abs_diff=diff)
    name = sel.spec.name
    shared = timings is not None and name in timings
    if shared:
        timing = timings[name]
    else:
        timing = time_call(inputs, sel.target, row=name, l2=l2, host_repeats=host_repeats)
        bad = implausible(name, timing, inputs, ceilings)
        if bad:
            raise Implausible(f"{bad[0]}: a measurement bug, not recorded (docs/harness.md)")
        if timings is not None:
            timings[name] = timing
    return Measured(sel, diff, timing, shared)
