"""The three timers. Which one a benchmark uses changes the number more than most kernel work.

- bench(fn): fn is idempotent. CUDA events around each call, L2 flushed before each call and
  outside the events, every interval read after ONE synchronize at the end. Synchronising per
  iteration would pull Python and launch overhead into every sample and impose a floor of
  tens of microseconds that small decode kernels sit below.
- bench_stateful(fn, reset): each call mutates state. reset() runs before every call, outside
  the events but on the device queue (it must not synchronise), so the intervals stay
  enqueued back to back just like bench().
- bench_host(fn, reset): the cost is the host waiting (a `.item()`, a host-side search).
  A CUDA-event timer measures the device timeline and reports such a call as nearly free
  whenever the GPU is still busy with earlier work while the host stalls; perf_counter around
  fn plus a trailing synchronize measures what the caller actually waits for.

Every timer leaves its first call untimed (Triton JIT, autotune searches, lazy allocations
finish there) and reports the median in microseconds; `as_asv()` gives asv the raw samples in
seconds so `asv compare` can run its statistics on them.
"""

from __future__ import annotations

import contextlib
import functools
import math
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvbench.core.device import resolve_device
from kvbench.harness.flush import flusher
from kvbench.harness.proof import TimedProof, run_proof

#: bench(): timed work per measurement (seconds) and the repeat clamp.
BENCH_BUDGET_S = 0.15
BENCH_REPEAT_RANGE = (10, 1000)
#: bench_stateful() / bench_host(): wall time per measurement (seconds) and the repeat clamp.
#: The budget is wall time here because reset() and the synchronizes cost as much as fn.
STATEFUL_BUDGET_S = 0.075
STATEFUL_REPEAT_RANGE = (20, 2000)
#: bench_host(): its own wall budget per measurement (seconds), the stateful one by default; a
#: suite that measures every host case several times in one process sets it lower.
HOST_BUDGET_S = STATEFUL_BUDGET_S
#: Warm calls used to estimate the cost of one call when repeat is not given.
_ESTIMATE_CALLS = 3
#: bench() with repeat=None: stop sampling once the 95% confidence interval of the median is
#: within this fraction of the median (0.005: +-0.5%), never past the repeat the budget
#: allows. None (the default): take that repeat, as a fixed count. Why adaptive: rows differ
#: in spread by two orders of magnitude, so a fixed count is either too few for the noisy ones
#: or many times more than a quiet row needs; a suite measuring hundreds of rows per commit
#: sets it (NVBench, too, stops a measurement once its noise is below a threshold).
BENCH_STOP_CI: float | None = None
#: Adaptive bench(): samples of the first batch, from whose spread the count is planned.
BENCH_PILOT = 15
#: Adaptive bench(): least samples of the second batch (the one whose last call is proven).
BENCH_FINAL_MIN = 5


@dataclass(frozen=True)
class TimingResult:
    """Samples of one measurement. Units: microseconds (`as_asv()` converts to seconds)."""

    median_us: float
    samples_us: tuple[float, ...]
    timer: str
    l2: str
    device: str
    #: CUDA event timers: host time to enqueue one call (launch overhead of fn), which the
    #: head start keeps out of the device-time samples. None for other timers.
    host_us: float | None = None
    #: CUDA event timers: a warm call made the host wait for the device (a `.item()`,
    #: `nonzero`, a device-to-host copy; torch's sync debug mode). The head start cannot keep
    #: such a call's launch gaps out of the events, so its samples are device time plus host
    #: time: time it with bench_host. False for the other timers.
    host_syncs: bool = False
    #: Given a TimedProof: the error figures of the LAST timed call's output against the
    #: reference of its (perturbed) input (harness/proof.py). None: no proof was asked for.
    proof: dict | None = None

    def as_asv(self) -> dict:
        """The form an asv `track_*` may return to get statistics: samples in seconds."""
        return {"samples": [s * 1e-6 for s in self.samples_us], "number": 1}


def _check_callable(name: str, value: object) -> None:
    if not callable(value):
        raise ValueError(f"{name} must be callable, got {type(value).__name__}")  # noqa: TRY004


def _check_proof(proof: object) -> None:
    if proof is not None and not isinstance(proof, TimedProof):
        raise ValueError(
            f"proof must be None or a harness.proof.TimedProof, got {type(proof).__name__}"
        )


def _check_repeat(repeat: object) -> int | None:
    if repeat is None:
        return None
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(
            f"repeat must be None (chosen by time budget) or an int >= 1, got {repeat!r}"
        )
    return repeat


def _choose_repeat(per_call_s: float, budget_s: float, bounds: tuple[int, int]) -> int:
    lo, hi = bounds
    if per_call_s <= 0:
        return hi
    return int(min(hi, max(lo, budget_s / per_call_s)))


def median_ci_halfwidth(samples: list[float]) -> float:
    """Half the width of a distribution-free 95% confidence interval of the median: the order
    statistics at ranks n/2 -+ 0.98 sqrt(n) (the binomial's normal approximation; the spread of
    a timer's samples is skewed and often bimodal, so no normal model of the samples)."""
    xs = sorted(samples)
    n = len(xs)
    if n < 2:
        return float("inf")
    reach = 0.98 * n**0.5
    lo = max(0, int(n / 2 - reach))
    hi = min(n - 1, int(-(-(n / 2 + reach) // 1)))
    return (xs[hi] - xs[lo]) / 2


def planned_repeat(pilot_us: list[float], cap: int, target: float) -> int:
    """Samples to take in all so that the median's 95% interval is within `target` x the
    median, planned from a pilot batch (the interval narrows as 1/sqrt(n)); at least the pilot
    plus BENCH_FINAL_MIN, at most `cap` (which wins when the two collide)."""
    n0 = len(pilot_us)
    median = statistics.median(pilot_us)
    relative = median_ci_halfwidth(pilot_us) / median if median > 0 else float("inf")
    wanted = n0 * (relative / target) ** 2 if relative != float("inf") else float(cap)
    return int(min(cap, max(n0 + BENCH_FINAL_MIN, -(-wanted // 1))))


def _sampled(take: Callable[[int, TimedProof | None], tuple[list[float], dict | None]],
             repeat: int, adaptive: bool, proof: TimedProof | None,
             ) -> tuple[list[float], dict | None]:
    """Samples from `take(n, proof)` (one timed loop of n calls, proof on its last call):
    one loop of `repeat`; or, with `adaptive` and BENCH_STOP_CI set, a pilot loop of
    BENCH_PILOT then one more loop up to planned_repeat(), capped at `repeat`, the proof on
    the last call of the second loop. Each loop synchronizes once, at its end."""
    if not adaptive or BENCH_STOP_CI is None or repeat < BENCH_PILOT + BENCH_FINAL_MIN:
        return take(repeat, proof)
    pilot, _ = take(BENCH_PILOT, None)
    total = planned_repeat(pilot, repeat, BENCH_STOP_CI)
    rest, figures = take(total - len(pilot), proof)
    return pilot + rest, figures


def _result(
    samples_us: list[float], timer: str, l2: str, dev: torch.device, host_us: float | None = None,
    host_syncs: bool = False, proof: dict | None = None,
) -> TimingResult:
    return TimingResult(
        proof=proof,
        median_us=float(statistics.median(samples_us)),
        samples_us=tuple(float(s) for s in samples_us),
        timer=timer,
        l2=l2,
        device=str(dev),
        host_us=host_us,
        host_syncs=host_syncs,
    )


#: Head start: each timed call is preceded on the GPU by a spin kernel that lasts
#: HEAD_START_FACTOR x the host's measured enqueue time of one whole timed iteration (before(),
#: the spin's own launch, the two event records and fn) + HEAD_START_PAD_US.
#: Why: the events time the device timeline, and when the host needs longer to enqueue a call
#: (Python validation, Triton's launcher) than the GPU needs to run the previous one, the GPU
#: idles between the start event and the kernel and that launch gap lands in the sample (a
#: small decode then times its host, not its kernel: docs/decisions.md, "Timer head start
#: and read flush"). The
#: spin keeps the queue ahead of the GPU, so samples are device time; the host cost is kept
#: separately as TimingResult.host_us. Sized on the whole iteration, not on fn alone: the
#: records and the spin's own launch cost the host time too, and a warm loop has no flush
#: kernel in front to pay it back on the GPU.
HEAD_START_FACTOR = 1.5
HEAD_START_PAD_US = 5.0

#: Backlog: before the first timed iteration the GPU gets one spin that lasts BACKLOG_FACTOR x
#: the host's estimated time to enqueue the whole loop (repeat x one iteration), at most
#: BACKLOG_MAX_US. Why: the head start keeps pace with the host's *measured* enqueue time,
#: but a host slower than measured during the loop (a fresh machine's enqueue time per call
#: varies several-fold) eats the margin call after call, and on warm rows, with no flush
#: kernel to absorb it, the gap lands in the samples (docs/decisions.md, "Backlog spin before
#: the timed loop"). While the backlog spins, the host enqueues iterations ahead of the GPU,
#: so a slow enqueue is absorbed by the queue and not timed. The cap bounds the wall time;
#: should the driver's launch queue fill first, the host blocks on it, which is the GPU being
#: ahead, the state wanted.
BACKLOG_FACTOR = 2.0
BACKLOG_MAX_US = 50_000.0


@functools.cache
def _spin_cycles_per_us(index: int) -> float:
    """GPU clock cycles per microsecond for torch.cuda._sleep, measured once per device."""
    torch.cuda._sleep(1000)  # load the kernel
    start, end = _events(2)
    start.record()
    torch.cuda._sleep(2_000_000)
    end.record()
    torch.cuda.synchronize()
    return 2_000_000 / (start.elapsed_time(end) * 1e3)


def _host_enqueue_us(iteration: Callable[[], object]) -> float:
    """Host microseconds to enqueue one iteration (no synchronize inside: pure launch cost)."""
    t0 = time.perf_counter()
    for _ in range(_ESTIMATE_CALLS):
        iteration()
    return (time.perf_counter() - t0) * 1e6 / _ESTIMATE_CALLS


def _syncs_host(iteration: Callable[[], object]) -> bool:
    """Whether one warm call of `iteration` makes the host wait for the device, by torch's
    sync debug mode (it warns on `.item()`, `nonzero`, blocking copies and stream syncs that
    go through torch; a Triton launch never does). torch calls the mode a prototype that does
    not see every synchronizing operation, so True is a finding and False is not a proof.
    Checked on a call of its own, after the enqueue time is measured, so the warning machinery
    does not inflate host_us."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            iteration()
        finally:
            torch.cuda.set_sync_debug_mode(previous)
    return any("synchronizing CUDA operation" in str(w.message) for w in caught)


def _spin(dev: torch.device, us: float) -> Callable[[], None]:
    """A launcher of one GPU spin of about `us` microseconds (a no-op for us <= 0: the
    ablations' "off")."""
    if us <= 0:
        return _noop
    cycles = int(us * _spin_cycles_per_us(dev.index))

    def spin() -> None:
        torch.cuda._sleep(cycles)

    return spin


def _events(n: int) -> list[torch.cuda.Event]:
    return [torch.cuda.Event(enable_timing=True) for _ in range(n)]


def _wall_per_iteration(iteration: Callable[[], None], sync: Callable[[], None]) -> float:
    """Seconds per iteration of `iteration` (wall clock, synchronised), over a few warm calls."""
    sync()
    t0 = time.perf_counter()
    for _ in range(_ESTIMATE_CALLS):
        iteration()
    sync()
    return (time.perf_counter() - t0) / _ESTIMATE_CALLS


def _noop() -> None:
    return None


def _event_samples(
    fn: Callable[[], object], before: Callable[[], object], repeat: int, dev: torch.device,
    proof: TimedProof | None = None,
) -> tuple[list[float], dict | None]:
    """The one CUDA event loop (bench, bench_stateful): the backlog spin, then per call
    `before()` (flush, and a reset for stateful calls; enqueued, never waited for), the
    head-start spin and an event pair around fn. Every interval is read after ONE
    synchronize at the end. Microseconds, and the proof's figures of the last call."""
    starts, ends = _events(repeat), _events(repeat)

    def iteration(spin: Callable[[], None], i: int) -> object:
        before()
        spin()
        starts[i].record()
        out = fn()
        ends[i].record()
        return out

    # The host's cost of one whole iteration, with a real (minimal) spin launch in it; the
    # events are re-recorded by the loop below, so nothing of this reaches the samples.
    iteration_us = _host_enqueue_us(lambda: iteration(_minimal_spin, 0))
    spin = _spin(dev, HEAD_START_FACTOR * iteration_us + HEAD_START_PAD_US)
    backlog = _spin(dev, min(BACKLOG_MAX_US, BACKLOG_FACTOR * repeat * iteration_us))
    torch.cuda.synchronize()
    backlog()
    out = _proved_loop(lambda i: iteration(spin, i), repeat, proof, torch.cuda.synchronize)
    # the one synchronize (inside _proved_loop); every interval is read after it
    samples = [s.elapsed_time(e) * 1e3 for s, e in zip(starts, ends)]
    return samples, run_proof(proof, out)


def _proved_loop(iteration: Callable[[int], object], repeat: int, proof: TimedProof | None,
                 sync: Callable[[], None]) -> object:
    """Run iteration(0..repeat-1), then sync(); with a proof, prepare() runs before the last
    iteration on what the one before it returned (only those two outputs are kept alive).
    Returns the last output. On an exception the proof's perturbation is undone."""
    previous = out = None
    prepared = False
    try:
        for i in range(repeat):
            last = i == repeat - 1
            if proof is not None and last:
                prepared = True
                proof.prepare(previous)
                previous = None
            result = iteration(i)
            if proof is not None and i == repeat - 2:
                previous = result
            if last:
                out = result
            del result  # no output outlives its call (the allocator reuses its block)
        sync()
    except BaseException:
        if prepared:
            proof.restore()
        raise
    return out


def _minimal_spin() -> None:
    torch.cuda._sleep(1)


def _wall_samples(
    fn: Callable[[], object], before: Callable[[], object], repeat: int,
    proof: TimedProof | None = None,
) -> tuple[list[float], dict | None]:
    """The CPU-device loop of bench / bench_stateful: before() outside, perf_counter_ns
    around fn. Microseconds, and the proof's figures of the last call."""
    samples = []

    def iteration(_: int) -> object:
        before()
        t0 = time.perf_counter_ns()
        out = fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
        return out

    out = _proved_loop(iteration, repeat, proof, _noop)
    return samples, run_proof(proof, out)


def bench(
    fn: Callable[[], object],
    *,
    repeat: int | None = None,
    l2: str = "cold",
    device: object = None,
    proof: TimedProof | None = None,
) -> TimingResult:
    """Median time of an idempotent `fn` in microseconds (L2 flushed before each call by default).

    proof: a TimedProof (harness/proof.py): the last timed call runs on a perturbed input and
    its output is verified after the loop; a failure raises verify.VerificationError and no
    timing is returned. Its figures land in TimingResult.proof.

    CUDA: one event pair per call, all read after a single synchronize. repeat=None picks a
    count whose timed work is ~BENCH_BUDGET_S (clamped to BENCH_REPEAT_RANGE); with
    BENCH_STOP_CI set, that count is the cap of an adaptive measurement (a pilot loop, then
    one loop sized to the wanted precision: two synchronizes in all). l2="warm" skips
    the flush: the optimistic bound, and labelled so. CPU: perf_counter_ns around each call.
    """
    _check_callable("fn", fn)
    _check_proof(proof)
    repeat = _check_repeat(repeat)
    adaptive = repeat is None  # an explicit repeat is a fixed count
    if l2 not in ("cold", "warm"):
        raise ValueError(f"l2 must be 'cold' (flush before each call) or 'warm', got {l2!r}")
    dev = resolve_device(device)
    flush = flusher(dev) if l2 == "cold" else _noop
    if dev.type == "cuda":
        with torch.cuda.device(dev):
            fn()  # untimed: JIT compile, autotune, lazy allocation
            torch.cuda.synchronize()
            host_us = _host_enqueue_us(fn)
            syncs = _syncs_host(fn)
            if repeat is None:
                start, end = _events(2)
                torch.cuda.synchronize()
                start.record()
                for _ in range(_ESTIMATE_CALLS):
                    fn()
                end.record()
                torch.cuda.synchronize()
                per_call_s = start.elapsed_time(end) * 1e-3 / _ESTIMATE_CALLS
                repeat = _choose_repeat(per_call_s, BENCH_BUDGET_S, BENCH_REPEAT_RANGE)
            samples, figures = _sampled(
                lambda n, pr: _event_samples(fn, flush, n, dev, pr), repeat, adaptive, proof)
        return _result(samples, "bench", l2, dev, host_us, syncs, figures)

    fn()  # untimed, as on CUDA
    if repeat is None:
        per_iter_s = _wall_per_iteration(lambda: (flush(), fn()), _noop)
        # Budget the wall time (flush included): a CPU flush of 2x LLC costs milliseconds.
        repeat = _choose_repeat(per_iter_s, BENCH_BUDGET_S, BENCH_REPEAT_RANGE)
    samples, figures = _sampled(lambda n, pr: _wall_samples(fn, flush, n, pr), repeat, adaptive,
                                proof)
    return _result(samples, "bench", l2, dev, proof=figures)


def bench_stateful(
    fn: Callable[[], object],
    reset: Callable[[], object],
    *,
    repeat: int | None = None,
    device: object = None,
    proof: TimedProof | None = None,
) -> TimingResult:
    """Median time of a state-mutating `fn`, with `reset()` before every call, untimed.

    proof: as in bench(); its prepare() runs before the last call's reset(), so a reset must
    not undo the perturbation.

    CUDA: reset() must only enqueue device work (no synchronize, no `.item()`): the loop
    enqueues reset, flush, start event, fn, end event for every iteration and reads all
    intervals after one synchronize. A reset that blocks the host would still be excluded
    from the events, but the loop would then no longer run ahead of the GPU.
    CPU: perf_counter_ns around fn; reset() and the flush outside the window.
    repeat=None picks a count by wall time (~STATEFUL_BUDGET_S, clamp STATEFUL_REPEAT_RANGE).
    """
    _check_callable("fn", fn)
    _check_callable("reset", reset)
    _check_proof(proof)
    repeat = _check_repeat(repeat)
    dev = resolve_device(device)
    flush = flusher(dev)
    if dev.type == "cuda":
        with torch.cuda.device(dev):
            reset()
            fn()  # untimed first call
            torch.cuda.synchronize()
            host_us = _host_enqueue_us(lambda: (reset(), fn()))
            syncs = _syncs_host(lambda: (reset(), fn()))
            if repeat is None:
                per_iter_s = _wall_per_iteration(
                    lambda: (reset(), flush(), fn()), torch.cuda.synchronize
                )
                repeat = _choose_repeat(per_iter_s, STATEFUL_BUDGET_S, STATEFUL_REPEAT_RANGE)
            samples, figures = _event_samples(fn, lambda: (reset(), flush()), repeat, dev, proof)
        return _result(samples, "bench_stateful", "cold", dev, host_us, syncs, figures)

    reset()
    fn()
    if repeat is None:
        per_iter_s = _wall_per_iteration(lambda: (reset(), flush(), fn()), _noop)
        repeat = _choose_repeat(per_iter_s, STATEFUL_BUDGET_S, STATEFUL_REPEAT_RANGE)
    samples, figures = _wall_samples(fn, lambda: (reset(), flush()), repeat, proof)
    return _result(samples, "bench_stateful", "cold", dev, proof=figures)


def bench_host(
    fn: Callable[[], object],
    reset: Callable[[], object] | None = None,
    *,
    repeat: int | None = None,
    device: object = None,
) -> TimingResult:
    """Median wall time the host spends in `fn` including the GPU work it leaves behind.

    Per iteration: reset() (if given) and the GPU L2 flush, a synchronize so neither is counted,
    then perf_counter_ns, fn(), a trailing synchronize, perf_counter_ns. The trailing
    synchronize is part of every sample, so compare rows with host_floor() (this timer around
    a no-op). CPU: the same without synchronizes and without a cache flush.
    repeat=None picks a count by wall time (~HOST_BUDGET_S, clamp STATEFUL_REPEAT_RANGE).
    """
    _check_callable("fn", fn)
    if reset is not None:
        _check_callable("reset", reset)
    repeat = _check_repeat(repeat)
    dev = resolve_device(device)
    is_cuda = dev.type == "cuda"
    # The GPU's L2 is flushed (outside the window) so fn's device work runs cold as in every
    # other timer; the CPU caches are NOT: the state a host-side call walks (allocator free
    # lists, dispatch tables) is hot in an engine's decode loop, and flushing it made an
    # allocator call read tens of times slower than it runs there (docs/allocator.md).
    flush = flusher(dev) if is_cuda else _noop
    do_reset = reset if reset is not None else _noop

    def sync() -> None:
        if is_cuda:
            torch.cuda.synchronize(dev)

    def iteration() -> float:
        do_reset()
        flush()
        sync()  # outside the window: reset's and the flush's device work is not counted
        t0 = time.perf_counter_ns()
        fn()
        sync()  # inside the window: the caller waits for fn's device work too
        return (time.perf_counter_ns() - t0) / 1e3

    with torch.cuda.device(dev) if is_cuda else contextlib.nullcontext():
        do_reset()
        fn()  # untimed first call
        sync()
        if repeat is None:
            per_iter_s = _wall_per_iteration(iteration, sync)
            repeat = _choose_repeat(per_iter_s, HOST_BUDGET_S, STATEFUL_REPEAT_RANGE)
        samples = [iteration() for _ in range(repeat)]
    # Labelled as measured: the GPU's L2 flushed, the CPU's caches deliberately not.
    return _result(samples, "bench_host", "cold" if is_cuda else "warm", dev)


def event_floor(device: object = None, *, repeat: int | None = None) -> TimingResult:
    """bench() of a trivial kernel (one int32 zeroed), cold like every bench() row: the event
    timer's own floor (launch, event resolution, the head start's after-effects). Print it
    beside bench / bench_stateful rows: a row within a few times of it measures the timer,
    not the op. On a CPU, the wall timer's floor around the same call."""
    dev = resolve_device(device)
    one = torch.zeros(1, dtype=torch.int32, device=dev)
    return bench(one.zero_, repeat=repeat, device=dev)


def host_floor(
    device: object = None,
    *,
    repeat: int | None = None,
    reset: Callable[[], object] | None = None,
) -> TimingResult:
    """bench_host() of a no-op: the cost of the timer itself (perf_counter + synchronize).

    Print it beside bench_host rows: a row within a few times of it measures the floor.
    reset: the reset of the row it is compared with; the timer then reads what is left of
    that reset's after-effects with nothing of the row in the window (a "reset floor").
    """
    return bench_host(_noop, reset, repeat=repeat, device=device)


#: Rows whose event-timed median is within this factor of the event timer's floor also get a
#: kernel-time row (bench_kernel): near the floor the events time the timer as much as the
#: kernel (small decode and write cases, whose kernels take a few µs).
KERNEL_TIMER_FLOOR_FACTOR = 4.0
#: bench_kernel(): calls profiled when repeat is not given.
KERNEL_TIMER_REPEAT = 30


def bench_kernel(
    fn: Callable[[], object],
    *,
    repeat: int | None = None,
    l2: str = "cold",
    device: object = None,
) -> TimingResult:
    """Median kernel time of an idempotent `fn` in microseconds: the time at least one of the
    GPU kernels one call launches was running, as CUPTI records them (torch.profiler), with no
    launch gap, event or host time in it. CUDA only. The union of the kernels' intervals, not
    the sum of their durations: a kernel launched early (programmatic dependent launch, a
    second stream) runs beside the one before it, and its wait is inside its own duration.

    Per call: the L2 flush (l2="cold") and a synchronize outside the profiler, then fn under
    its own profiler session, so only fn's kernels are in it. A call that launches no kernel
    raises ValueError. Slower per sample than bench() (a profiler session per call): it is the
    second timer of rows near the event floor (KERNEL_TIMER_FLOOR_FACTOR), not a replacement.
    """
    from torch.profiler import ProfilerActivity, profile

    _check_callable("fn", fn)
    repeat = _check_repeat(repeat) or KERNEL_TIMER_REPEAT
    if l2 not in ("cold", "warm"):
        raise ValueError(f"l2 must be 'cold' (flush before each call) or 'warm', got {l2!r}")
    dev = resolve_device(device)
    if dev.type != "cuda":
        raise ValueError(f"bench_kernel needs a CUDA device (CUPTI kernel times), got {dev}")
    flush = flusher(dev) if l2 == "cold" else _noop
    samples = []
    with torch.cuda.device(dev):
        fn()  # untimed: JIT compile, autotune, lazy allocation
        torch.cuda.synchronize()
        for _ in range(repeat):
            flush()
            torch.cuda.synchronize()
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=_PROFILER_CYCLE_WARNING,
                                        category=UserWarning)
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    fn()
                    torch.cuda.synchronize()
            kernels = [e for e in prof.events()
                       if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA
                       and _kernel_us(e) > 0]
            if not kernels:
                raise ValueError("bench_kernel: fn launched no GPU kernel the profiler saw")
            samples.append(_busy_us(kernels))
    return _result(samples, "bench_kernel", l2, dev)


def _busy_us(kernels) -> float:
    """The µs during which at least one of `kernels` (profiler events of one call) ran: the
    length of the union of their [start, end] intervals; an event without a time_range
    counts its own duration."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in kernels
                   if getattr(e, "time_range", None) is not None)
    total = float(sum(_kernel_us(e) for e in kernels
                      if getattr(e, "time_range", None) is None))
    end = -math.inf
    for start, stop in spans:
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


#: torch.profiler warns on every session without a schedule that it "clears events at the end
#: of each cycle"; a session here is one cycle by construction (torch fixed the spurious
#: warning upstream, pytorch/pytorch#180387), so bench_kernel silences exactly that message.
_PROFILER_CYCLE_WARNING = r"Warning: Profiler clears events at the end of each cycle"


def _kernel_us(event) -> float:
    """A profiler event's GPU time in µs: `device_time`, or `cuda_time` on a torch that
    predates it (read only then: newer torch warns that it is deprecated)."""
    if hasattr(event, "device_time"):
        return event.device_time
    return getattr(event, "cuda_time", 0)
