"""Theoretical work of an operation, and a measured row scored against it.

`Work` is the cost of the operation, not of an implementation: every input read once from
global memory, every output written once, no redundant FLOPs. A kernel's own scratch (split-KV
partials, a pre-zeroed buffer) does not enter it, so two implementations of one operation are
scored against the same denominator and the one that moves extra bytes shows a lower GB/s.

Units (docs/architecture.md): Work.moved in bytes, Work.flops in FLOPs, Row.us in
microseconds, Row.gbps in 1e9 B/s, Row.tflops in 1e12 FLOP/s.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

#: L2 state a row was measured in. "cold": flushed before each call (the default, the decode
#: regime: a few MB of L2 hold a negligible slice of a multi-GB KV pool); "warm": not flushed,
#: the optimistic bound.
L2_STATES: tuple[str, ...] = ("cold", "warm")

#: Timer labels: the name of the harness timer that produced the number.
TIMERS: tuple[str, ...] = ("bench", "bench_stateful", "bench_host", "bench_kernel")


def _finite_nonnegative(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")  # noqa: TRY004
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    return value


@dataclass(frozen=True)
class Work:
    """Theoretical cost of one call: `flops` FLOPs and `moved` bytes of global memory traffic."""

    flops: float = 0.0
    moved: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "flops", _finite_nonnegative("Work.flops", self.flops))
        object.__setattr__(self, "moved", _finite_nonnegative("Work.moved", self.moved))

    def __add__(self, other: Work) -> Work:
        """Work of two operations done in one call (e.g. the K and the V half of a scatter)."""
        if not isinstance(other, Work):
            return NotImplemented
        return Work(flops=self.flops + other.flops, moved=self.moved + other.moved)


@dataclass(frozen=True)
class Row:
    """One measured case: `us` microseconds for `work`, by implementation `impl` on `case`.

    `impl` is the registry spec name the row measures (e.g. "triton/split_kv"), so a table row
    can always be traced to the kernel dispatch would run. `l2` and `timer` say how the number
    was taken; report() prints them next to it.
    """

    impl: str
    case: str
    us: float
    work: Work
    l2: str = "cold"
    timer: str = "bench"
    note: str = ""
    #: The timed call made the host wait for the device (TimingResult.host_syncs): an event
    #: timer's µs then holds host time too, and report() flags the row.
    host_syncs: bool = False
    #: The spread of the samples behind `us`: interquartile range over the median (0.05 = the
    #: middle half of the samples spans 5% of the median). None when not known (a row built
    #: by hand, or fewer than 4 samples). report() prints it and flags a row above its limit.
    iqr_rel: float | None = None

    def __post_init__(self) -> None:
        for field in ("impl", "case"):
            value = getattr(self, field)
            if not isinstance(value, str) or not value:
                raise ValueError(f"Row.{field} must be a non-empty string, got {value!r}")
        if not isinstance(self.note, str):
            raise ValueError(f"Row.note must be a string, got {self.note!r}")  # noqa: TRY004
        if not isinstance(self.host_syncs, bool):
            raise ValueError(f"Row.host_syncs must be a bool, got {self.host_syncs!r}")  # noqa: TRY004
        if not isinstance(self.work, Work):
            got = type(self.work).__name__
            raise ValueError(f"Row.work must be a Work, got {got}")  # noqa: TRY004
        us = self.us
        if (
            isinstance(us, bool)
            or not isinstance(us, (int, float))
            or not math.isfinite(us)
            or us <= 0
        ):
            raise ValueError(f"Row.us must be a finite number of microseconds > 0, got {us!r}")
        object.__setattr__(self, "us", float(us))
        if self.l2 not in L2_STATES:
            raise ValueError(f"Row.l2 must be one of {L2_STATES}, got {self.l2!r}")
        if self.timer not in TIMERS:
            raise ValueError(f"Row.timer must be one of {TIMERS}, got {self.timer!r}")
        spread = self.iqr_rel
        if spread is not None and (isinstance(spread, bool) or not isinstance(spread, (int, float))
                                   or not math.isfinite(spread) or spread < 0):
            raise ValueError(f"Row.iqr_rel must be None or a finite number >= 0, got {spread!r}")

    @classmethod
    def from_timing(
        cls, impl: str, case: str, timing: object, work: Work, *, note: str = ""
    ) -> Row:
        """A row from a harness TimingResult, copying its median, L2 state, timer label and
        whether the call synchronised the host, with the spread of its samples (iqr_rel)."""
        try:
            us, l2, timer = timing.median_us, timing.l2, timing.timer  # type: ignore[attr-defined]
            syncs = timing.host_syncs  # type: ignore[attr-defined]
        except AttributeError:
            raise ValueError(
                f"timing must be a harness TimingResult, got {type(timing).__name__}"
            ) from None
        samples = getattr(timing, "samples_us", ())
        return cls(impl, case, us, work, l2=l2, timer=timer, note=note, host_syncs=syncs,
                   iqr_rel=relative_iqr(samples, us))

    @property
    def gbps(self) -> float:
        """Achieved bandwidth in 1e9 B/s: bytes / (us * 1e-6) / 1e9."""
        return self.work.moved / self.us / 1e3

    @property
    def tflops(self) -> float:
        """Achieved compute in 1e12 FLOP/s: flops / (us * 1e-6) / 1e12."""
        return self.work.flops / self.us / 1e6


def relative_iqr(samples_us: object, median_us: float) -> float | None:
    """(q3 - q1) / median of the samples, or None with fewer than 4 (no quartiles to speak
    of). The IQR, not the standard deviation: one preempted sample must not make a row look
    noisy, and a bimodal run (half the samples slow) must."""
    values = [float(s) for s in samples_us] if samples_us else []  # type: ignore[attr-defined]
    if len(values) < 4 or not median_us > 0:
        return None
    q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return (q3 - q1) / median_us
