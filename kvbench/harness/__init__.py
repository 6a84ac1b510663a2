"""kvbench.harness: measurement only (imports no kernel code).

Timers (bench, bench_stateful, bench_host; event_floor and host_floor, their floors) report
microseconds; Work/Row turn them into GB/s and TFLOP/s; report() prints throughput first and
flags impossible rows (violations()); verify() gates correctness before any timing;
metadata() records what a number needs to be reproduced; calibrate() measures the bandwidth a
streaming kernel can actually reach. Units and signatures: docs/architecture.md.
"""

from kvbench.harness.calibrate import Ceilings, calibrate, load_ceilings
from kvbench.harness.flush import flush_bytes, l2_flush
from kvbench.harness.meta import format_metadata, metadata
from kvbench.harness.peaks import DevicePeaks, device_peaks
from kvbench.harness.report import report, violations
from kvbench.harness.timers import (
    TimingResult,
    bench,
    bench_host,
    bench_kernel,
    bench_stateful,
    event_floor,
    host_floor,
)
from kvbench.harness.verify import VerificationError, verify
from kvbench.harness.work import Row, Work

__all__ = [
    "Ceilings",
    "DevicePeaks",
    "Row",
    "TimingResult",
    "VerificationError",
    "Work",
    "bench",
    "bench_host",
    "bench_kernel",
    "bench_stateful",
    "calibrate",
    "device_peaks",
    "event_floor",
    "flush_bytes",
    "format_metadata",
    "host_floor",
    "l2_flush",
    "load_ceilings",
    "metadata",
    "report",
    "verify",
    "violations",
]
