"""Several devices under one machine name: a per-device offset, so a device change is no step.

A fleet records one machine name on several GPUs of one model (kvbench record --gpus, shards
on several hosts: docs/fleet.md). Two such GPUs differ by a few percent as a whole with the
same kernel (clocks, memory, cooling), so a series whose commits alternate between them, or
change from one to the other at a shard boundary, would show the devices' difference as steps.
Each result's sidecar names the device that measured it (benchmarks/runner/sidecar.py,
`device.id`); this module takes it into account before the engine looks for steps, on log
values:

    log x_i = level_i + offset[device(i)] + run_effect[(run(i), device(i))] + e_i

1. **Each device is its own run.** A measurement run is split by device, so the engine's
   random run effect (changepoints.py: a run with points on both sides of a boundary cancels
   its own shift) covers a device's shift too: a step at a change of device is judged against
   the run-to-run noise, one inside a device's stretch against the within-run noise.
2. **An offset where the series shows it.** Where a series moves between two devices at
   least MIN_CROSSINGS times (shards dealt round-robin make devices alternate), the median of
   its successive differences across that pair estimates the pair's offset (a median: a real
   step landing on one crossing moves it little). The offsets of every device relative to the
   device with most points are the least-squares solution of those pairwise medians, each
   weighted by its count; the series is judged with them subtracted. A pair seen fewer times
   (devices in blocks: one change of device) gets no estimate: one difference measures the
   offset no better than the noise, and subtracting it would plant its error as a step; the
   run effect of (1) judges that boundary instead.

A step of the code that lands exactly at the one change of device of a block layout cannot be
told from the devices' offset by this series alone; the engine then reports it only when it
stands out from the run-to-run noise. Points whose sidecar names no device (histories recorded
before the sidecar carried one) form one device, "unknown".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: A pair of devices needs this many crossings (successive points, one on each) before its
#: offset is estimated and subtracted.
MIN_CROSSINGS = 4
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Adjusted:
    """A series' log values with device offsets subtracted, its runs split by device, and the
    offsets (log, relative to `reference`) that were subtracted."""

    x: np.ndarray
    runs: list[int]
    offsets: dict[str, float]
    reference: str

    @property
    def devices(self) -> int:
        return len(self.offsets)


def split_runs(runs: Sequence[int], devices: Sequence[str]) -> list[int]:
    """Run ids made distinct per (run, device), in order of first appearance."""
    ids: dict[tuple[int, str], int] = {}
    return [ids.setdefault((r, d), len(ids)) for r, d in zip(runs, devices)]


def offsets(x: np.ndarray, devices: Sequence[str]) -> tuple[dict[str, float], str]:
    """(log offset per device, reference device): the least-squares solution of the pairwise
    median crossing differences of pairs crossed at least MIN_CROSSINGS times; 0 for the
    reference and for a device no such pair links to it."""
    counts: dict[str, int] = {}
    for d in devices:
        counts[d] = counts.get(d, 0) + 1
    reference = max(sorted(counts), key=counts.__getitem__)
    crossings: dict[tuple[str, str], list[float]] = {}
    for i in range(1, len(x)):
        a, b = devices[i - 1], devices[i]
        if a == b:
            continue
        pair, sign = ((a, b), 1.0) if a < b else ((b, a), -1.0)
        crossings.setdefault(pair, []).append(sign * float(x[i] - x[i - 1]))
    used = {pair: d for pair, d in crossings.items() if len(d) >= MIN_CROSSINGS}
    linked = {reference}
    grew = True
    while grew:
        grew = False
        for a, b in used:
            if (a in linked) != (b in linked):
                linked |= {a, b}
                grew = True
    unknowns = sorted(linked - {reference})
    result = dict.fromkeys(counts, 0.0)
    if not unknowns:
        return result, reference
    column = {d: k for k, d in enumerate(unknowns)}
    rows, rhs = [], []
    for (a, b), diffs in used.items():
        if a not in linked:
            continue
        w = np.sqrt(len(diffs))
        row = np.zeros(len(unknowns))
        if b in column:
            row[column[b]] += w
        if a in column:
            row[column[a]] -= w
        rows.append(row)
        rhs.append(w * float(np.median(diffs)))
    solution = np.linalg.lstsq(np.array(rows), np.array(rhs), rcond=None)[0]
    for d, k in column.items():
        result[d] = float(solution[k])
    return result, reference


def adjust(x: np.ndarray, runs: Sequence[int], devices: Sequence[str | None]) -> Adjusted | None:
    """The series adjusted for its devices (module docstring), or None when one device (or
    none recorded) measured every point: nothing to adjust."""
    labels = [UNKNOWN if d is None else d for d in devices]
    if len(set(labels)) < 2:
        return None
    found, reference = offsets(x, labels)
    shifted = np.asarray(x, dtype=float) - np.array([found[d] for d in labels])
    return Adjusted(shifted, split_runs(runs, labels), found, reference)
