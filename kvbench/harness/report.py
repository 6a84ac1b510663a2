"""The roofline table: throughput first, latency second, and impossible numbers called out.

Throughput leads because it survives a change of shape; a µs column alone cannot say whether
a kernel is near its limit. Each row is scored against the device's spec peaks (%tc, %bw) and,
when calibrate() has run, against the measured copy/read/write ceiling (%ceil), which is what a
streaming kernel can actually reach on this device.

A row above 100% of a spec peak is not a win, it is a measurement bug, and is printed as a
VIOLATION with the order in which to look for it. Warm-L2 rows carry a mark: they are the
optimistic bound, not the regime a multi-GB KV pool runs in.

Output is plain fixed-width text on purpose (no `rich`, no colours, no box drawing): it must
read the same in a terminal, a CI log and asv's captured output, and stay greppable.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TextIO

from kvbench.harness.peaks import DevicePeaks, device_peaks
from kvbench.harness.work import Row

#: Where to look when a row beats a spec peak, in the order to look.
VIOLATION_CHECKS: tuple[str, ...] = (
    "unit factors (us vs ms, GB vs GiB, bytes vs elements, 1e9 vs 2**30)",
    "the FLOP/byte formula (every input read once, every output written once, nothing more)",
    "work the kernel skipped (early exit, masked-off tail, a smaller shape than the label)",
    "a working set that stayed in L2 (warm timer, or inputs smaller than 2x L2)",
    "a baseline doing a different operation (other dtype, layout or amount of work)",
)

#: A row whose µs is within this factor of its timer's floor measures the floor, not the op.
FLOOR_FACTOR = 3.0
#: The timers whose rows are compared with the event floor (timers.event_floor: the same
#: event loop around a trivial kernel); bench_host rows are compared with host_floor(), and
#: bench_kernel rows (CUPTI kernel time, no launch or timer overhead) with neither.
EVENT_TIMERS = ("bench", "bench_stateful")

#: A row whose samples' interquartile range exceeds this fraction of its median is flagged
#: `noisy`: its middle half spans more than 10%, so it cannot rank rows or place a row against
#: a peak at the ~10% resolution the table is read at. Device rows rarely spread that much, so
#: the flag marks their contended tail; host-side rows often do, and the flag says what is true
#: of them, that they hold only to tens of percent (figures: docs/harness.md).
NOISY_IQR = 0.10

#: Which measured ceiling %ceil divides by. "copy" (read + write streams) is the default: it is
#: the ceiling of a scatter/gather and a conservative one for reads. Use "read" for
#: read-dominated ops (decode attention), "write" for fills.
CEILING_KINDS = ("copy", "read", "write")

_COLUMNS = (
    "impl",
    "case",
    "TFLOP/s",
    "%tc",
    "GB/s",
    "%bw",
    "%ceil",
    "us",
    "iqr",
    "l2",
    "timer",
    "flag",
    "note",
)
_NUMERIC = {"TFLOP/s", "%tc", "GB/s", "%bw", "%ceil", "us", "iqr"}
_DASH = "-"
_STDOUT = object()  # resolved at call time, so a redirected/captured sys.stdout is honoured


def _num(x: float) -> str:
    """Three significant-ish digits without scientific notation for the usual ranges."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 0.01:
        return f"{x:.2f}"
    return f"{x:.2g}"


def _pct(value: float, peak: float | None) -> str:
    if peak is None or peak <= 0:
        return _DASH
    pct = 100.0 * value / peak
    return f"{pct:.1f}%" if pct < 10 else f"{pct:.0f}%"


def _pct_exact(value: float, peak: float) -> str:
    """A percentage for a violation message: one decimal, so 100.01% never reads as 100%."""
    return f"{100.0 * value / peak:.1f}%"


#: A row above this multiple of the best ceiling calibrate() measured on its device (the
#: largest of copy, read and write) is implausible: the ceilings vary by a percent or two
#: between runs and machines and real kernels have been seen just above their run's ceiling,
#: so 5% is beyond what a real kernel has shown, and far below what a memoizing or
#: work-skipping row reads (docs/harness.md, "Plausibility").
CEILING_TOLERANCE = 1.05


def violations(rows: Iterable[Row], peaks: DevicePeaks, ceilings: object = None) -> list[str]:
    """One line per row and bound it exceeds: the spec memory bandwidth and tensor-core
    FLOP/s (VIOLATION), and, given calibrate's Ceilings, CEILING_TOLERANCE x the best measured
    ceiling (IMPLAUSIBLE; on a CPU, which has no spec peaks, the only bound).

    Either is a measurement bug, not a win: report() prints these with VIOLATION_CHECKS,
    `kvbench table` also writes them to its JSON and exits non-zero, and the asv suite refuses
    to record such a number (the line is the recorded reason).
    """
    best_kind, best = _best_ceiling(ceilings)
    found = []
    for row in rows:
        if peaks.mem_gbps and row.gbps > peaks.mem_gbps:
            found.append(
                f"VIOLATION {row.impl} | {row.case}: {_num(row.gbps)} GB/s is "
                f"{_pct_exact(row.gbps, peaks.mem_gbps)} of the {_num(peaks.mem_gbps)} GB/s "
                "spec peak"
            )
        if peaks.tc_tflops and row.tflops > peaks.tc_tflops:
            found.append(
                f"VIOLATION {row.impl} | {row.case}: {_num(row.tflops)} TFLOP/s is "
                f"{_pct_exact(row.tflops, peaks.tc_tflops)} of the {_num(peaks.tc_tflops)} "
                "TFLOP/s tensor-core spec peak"
            )
        if best and row.gbps > CEILING_TOLERANCE * best:
            when = getattr(ceilings, "measured_at", "")
            found.append(
                f"IMPLAUSIBLE {row.impl} | {row.case}: {_num(row.gbps)} GB/s is "
                f"{row.gbps / best:.2f}x the best ceiling measured on this device ({best_kind} "
                f"{_num(best)} GB/s, calibrated {when}); above {CEILING_TOLERANCE:g}x"
            )
    return found


def _best_ceiling(ceilings: object) -> tuple[str, float | None]:
    """The largest of a Ceilings' copy/read/write figures, with its kind (None: no ceilings)."""
    known = [(k, _ceiling_gbps(ceilings, k)) for k in CEILING_KINDS]
    known = [(k, v) for k, v in known if v]
    return max(known, key=lambda kv: kv[1]) if known else ("", None)


def _positive_or_none(name: str, value: object) -> None:
    if value is not None and not (isinstance(value, (int, float)) and value > 0):
        raise ValueError(f"{name} must be None or a positive number of microseconds, got {value!r}")


def _ceiling_gbps(ceilings: object, kind: str) -> float | None:
    if ceilings is None:
        return None
    value = getattr(ceilings, f"{kind}_gbps", None)
    return float(value) if value else None


def report(
    rows: Iterable[Row],
    *,
    peaks: DevicePeaks | None = None,
    ceilings: object = None,
    floor_us: float | None = None,
    event_floor_us: float | None = None,
    title: str | None = None,
    file: TextIO | None | object = _STDOUT,
    ceiling: str = "copy",
) -> str:
    """Format `rows` as a table, print it to `file` (sys.stdout; None: no print), return it.

    peaks: spec peaks to score against; None means device_peaks() of the current device (on a
    CPU every peak is None and no percentage is printed). ceilings: a calibrate.Ceilings (or
    None for no %ceil); `ceiling` picks its copy/read/write figure. Floors, each compared only
    with rows of the timer it measures (rows within FLOOR_FACTOR are marked ~floor and the
    floor is printed): floor_us, the host floor (host_floor().median_us) for bench_host rows;
    event_floor_us, the event timer's floor (event_floor().median_us) for bench and
    bench_stateful rows.
    """
    rows = list(rows)
    for i, row in enumerate(rows):
        if not isinstance(row, Row):
            got = type(row).__name__
            raise ValueError(f"rows[{i}] must be a harness Row, got {got}")  # noqa: TRY004
    if ceiling not in CEILING_KINDS:
        raise ValueError(f"ceiling must be one of {CEILING_KINDS}, got {ceiling!r}")
    _positive_or_none("floor_us", floor_us)
    _positive_or_none("event_floor_us", event_floor_us)
    if peaks is None:
        peaks = device_peaks()
    ceil_gbps = _ceiling_gbps(ceilings, ceiling)

    table: list[dict[str, str]] = []
    per_row = [violations([row], peaks, ceilings) for row in rows]
    violated = [line for lines in per_row for line in lines]
    near_floor: set[str] = set()
    above_ceiling: list[str] = []
    warm_kinds: set[str] = set()
    any_host_sync = False
    noisy = 0
    for row, row_violations in zip(rows, per_row, strict=True):
        flags = []
        if row_violations:
            flags.append("IMPLAUSIBLE" if all(v.startswith("IMPLAUSIBLE") for v in row_violations)
                         else "VIOLATION")
        floor = (event_floor_us if row.timer in EVENT_TIMERS
                 else floor_us if row.timer == "bench_host" else None)
        if floor is not None and row.us <= FLOOR_FACTOR * floor:
            flags.append("~floor")
            near_floor.add("event" if row.timer in EVENT_TIMERS else "host")
        if ceil_gbps and row.gbps > ceil_gbps:
            flags.append(">ceil")
            above_ceiling.append(f"{row.impl} | {row.case} ({_pct_exact(row.gbps, ceil_gbps)})")
        if row.host_syncs and row.timer in EVENT_TIMERS:
            flags.append("host-sync")
            any_host_sync = True
        if row.iqr_rel is not None and row.iqr_rel > NOISY_IQR:
            flags.append("noisy")
            noisy += 1
        if row.l2 == "warm":
            warm_kinds.add("host" if row.timer == "bench_host" else "device")
        has_flops = row.work.flops > 0
        has_bytes = row.work.moved > 0
        table.append(
            {
                "impl": row.impl,
                "case": row.case,
                "TFLOP/s": _num(row.tflops) if has_flops else _DASH,
                "%tc": _pct(row.tflops, peaks.tc_tflops) if has_flops else _DASH,
                "GB/s": _num(row.gbps) if has_bytes else _DASH,
                "%bw": _pct(row.gbps, peaks.mem_gbps) if has_bytes else _DASH,
                "%ceil": _pct(row.gbps, ceil_gbps) if has_bytes else _DASH,
                "us": _num(row.us),
                "iqr": _DASH if row.iqr_rel is None else _pct(row.iqr_rel, 1.0),
                "l2": "warm*" if row.l2 == "warm" else row.l2,
                "timer": row.timer,
                "flag": ",".join(flags),
                "note": row.note,
            }
        )

    lines: list[str] = []
    if title:
        lines.append(f"== {title} ==")
    lines.append(_peaks_line(peaks, ceilings, ceiling, ceil_gbps))
    widths = {c: max([len(c)] + [len(r[c]) for r in table]) for c in _COLUMNS}
    header = "  ".join(
        c.rjust(widths[c]) if c in _NUMERIC else c.ljust(widths[c]) for c in _COLUMNS
    )
    lines.append(header.rstrip())
    lines.append("-" * len(header.rstrip()))
    for r in table:
        cells = (
            r[c].rjust(widths[c]) if c in _NUMERIC else r[c].ljust(widths[c]) for c in _COLUMNS
        )
        lines.append("  ".join(cells).rstrip())
    if "device" in warm_kinds:
        lines.append(
            "* l2=warm: L2 not flushed between calls; the optimistic bound, not the cold "
            "(DRAM) regime a KV pool runs in"
        )
    if "host" in warm_kinds:
        lines.append(
            "* l2=warm on bench_host rows on a CPU: caches not flushed on purpose, the hot "
            "state a host-side call runs in inside an engine's decode loop"
        )
    if "event" in near_floor:
        lines.append(
            f"event-timer floor {_num(float(event_floor_us))} us (a trivial kernel under the same "
            "timer): bench rows near it measure the timer "
            f"(marked ~floor: within {FLOOR_FACTOR:g}x)"
        )
    if "host" in near_floor:
        lines.append(
            f"host floor {_num(float(floor_us))} us: bench_host rows near it measure the floor "
            f"(marked ~floor: within {FLOOR_FACTOR:g}x)"
        )
    if above_ceiling:
        # Not a VIOLATION (the spec peak is the physical bound): the measured ceiling is a
        # best-of kernel measurement that varies by a percent or two between machines and runs,
        # so a row just above it says the ceiling under-read.
        lines.append(
            f">ceil: above the measured {ceiling} ceiling, which under-read this run (re-run "
            f"calibrate on this machine): {'; '.join(above_ceiling)}"
        )
    if noisy:
        lines.append(
            f"noisy: {noisy} row(s) whose samples' interquartile range (iqr, over the median) "
            f"exceeds {NOISY_IQR:.0%}: too unstable to rank or compare; re-run on a quiet machine"
        )
    if any(r.timer == "bench_kernel" for r in rows):
        lines.append(
            "timer bench_kernel: CUPTI kernel time (torch.profiler: the time the call's kernels "
            "ran, the union of their intervals; no launch gap, no event); timer bench: CUDA "
            "events around the call. Rows near the event floor carry both"
        )
    if any_host_sync:
        lines.append(
            "host-sync: the call makes the host wait for the GPU (.item(), nonzero, a blocking "
            "copy), so its event-timed us include host time; bench_host is its honest timer"
        )
    if violated:
        lines.append("")
        lines.extend(violated)
        lines.append(
            "A row above 100% of a spec peak (or far above the measured ceiling) is a "
            "measurement error, not a win. Check, in order:"
        )
        lines.extend(f"  {i}. {check}" for i, check in enumerate(VIOLATION_CHECKS, 1))
    text = "\n".join(lines) + "\n"

    out = sys.stdout if file is _STDOUT else file
    if out is not None:
        out.write(text)  # type: ignore[union-attr]
        flush = getattr(out, "flush", None)
        if flush is not None:
            flush()
    return text


def _peaks_line(peaks: DevicePeaks, ceilings: object, kind: str, ceil_gbps: float | None) -> str:
    def known(value: float | None, unit: str) -> str:
        return f"{_num(value)} {unit}" if value else f"unknown {unit} (no %)"

    parts = [
        f"device {peaks.name}",
        f"spec peak {known(peaks.mem_gbps, 'GB/s')}",
        f"tc {known(peaks.tc_tflops, 'TFLOP/s')}",
    ]
    if ceil_gbps:
        when = getattr(ceilings, "measured_at", "")
        parts.append(f"%ceil of measured {kind} ceiling {_num(ceil_gbps)} GB/s ({when})")
    else:
        parts.append("%ceil: no measured ceiling (run calibrate())")
    return " | ".join(parts)
