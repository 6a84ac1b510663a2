"""Host-side series judged at one machine speed: each point scaled by its process's canary.

A host-side series (the suite's KVAlloc and DispatchOverhead) moves with the speed of the
machine that measured it, and that speed drifts over minutes: every host series of a commit
moves together, more between machine allocations than within one (docs/harness.md gives the
measured spread). Commits of an asv run are measured minutes apart, so a slow spell covering a few
consecutive commits looks to the verdict engine like a step of one series, which the engine's noise
model (independent per commit, plus a shift per run) cannot tell from a code change.

The suite records, with each host case, the fastest canary its measuring process read
(benchmarks/runner/host.py: `reference_us` in the case's sidecar record): a fixed pure-Python loop
from the working-tree suite, so it measures the machine and never the commit under test. This
module rescales each point of such a series to the series' median canary,

    value_i * median(reference) / reference_i,

and the engine judges the rescaled series: its levels read "at the machine's typical speed",
in the series' own unit. A series is rescaled only when every point has a reference (a
history measured partly before the suite recorded one is judged as stored), and only series
whose records carry one (the GPU groups' do not).
"""

from __future__ import annotations

import dataclasses
import statistics

from kvbench.history.verdict.context import Fact, SidecarCache, case_key, host_reference_us
from kvbench.history.verdict.results import Series


def references(series: Series, sidecars: SidecarCache) -> list[float | None]:
    """The fast canary (us) the suite recorded with each point of `series`; None where its
    commit has no sidecar, the case was not measured, or the record has no reference."""
    key = case_key(series.benchmark, series.params)
    return [host_reference_us(sidecars.get(p.commit), key) for p in series.points]


@dataclasses.dataclass(frozen=True)
class Scaled:
    """A host series rescaled to its median canary (`series`), and each commit's canary."""

    series: Series
    typical_us: float
    reference_us: dict[str, float]

    def fact(self, parent: str, settled: str) -> Fact:
        """What a finding on the rescaled series says about it: the canary on both sides."""
        a, b = self.reference_us[parent], self.reference_us[settled]
        return Fact("host_state",
                    f"judged at the host's typical speed (each commit scaled by its fast "
                    f"canary to {self.typical_us:.0f} us; here {a:.0f} -> {b:.0f} us)",
                    {"reference_us": a}, {"reference_us": b})


def at_typical_speed(series: Series, sidecars: SidecarCache) -> Scaled | None:
    """`series` with each point (value and asv's intervals) scaled to the series' median
    canary; None when a point lacks a reference (the series is then judged as stored)."""
    key = case_key(series.benchmark, series.params)
    # the newest point first: a series whose records carry no canary (every GPU series) costs
    # one sidecar read, not one per commit
    if not series.points or host_reference_us(sidecars.get(series.points[-1].commit), key) is None:
        return None
    refs = references(series, sidecars)
    if any(r is None for r in refs):
        return None
    typical = statistics.median(refs)
    points = []
    for point, ref in zip(series.points, refs):
        k = typical / ref
        points.append(dataclasses.replace(
            point, value=point.value * k, **{
                name: None if getattr(point, name) is None else getattr(point, name) * k
                for name in ("q25", "q75", "ci99_low", "ci99_high")}))
    return Scaled(dataclasses.replace(series, points=points), typical,
                  {p.commit: r for p, r in zip(series.points, refs)})
