"""Rewrite stored asv result files to the suite's compact form: values kept, samples summarised.

    python -m benchmarks.runner.compact results/h200 [results/cpu-amd-epyc ...]

Result files written before the suite summarised its samples hold every raw sample of every
case (up to 1000 a case, megabytes per commit). The suite now stores STORED_SAMPLES
representative quantiles a case (representative_samples below, which the suite's track_us
calls too); this rewrites an older file the same way. Only the `samples` column changes, and
only where a case holds more than STORED_SAMPLES samples: `result` (the median asv computed from all
the samples when the file was written), the quartiles, the 99% interval and every other column keep
their stored values. The file is written in asv's own format (asv.util.write_json, compact) to a
temporary file beside it and renamed over it, so an interrupted run leaves each file whole.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

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


#: Files in a machine folder that are not per-commit results.
NOT_RESULTS = ("machine.json",)


def compact_data(data: dict) -> int:
    """Summarise, in place, every case of one result file holding more than STORED_SAMPLES
    samples; return how many cases changed."""
    columns = data.get("result_columns") or []
    if "samples" not in columns:
        return 0
    at = columns.index("samples")
    changed = 0
    for row in data.get("results", {}).values():
        if len(row) <= at or not row[at]:
            continue
        cases = row[at]
        for i, samples in enumerate(cases):
            if samples and len(samples) > STORED_SAMPLES:
                cases[i] = representative_samples(samples)
                changed += 1
    return changed


def compact_file(path: Path) -> int:
    """Rewrite one result file compactly (atomically); return the cases summarised."""
    from asv.util import write_json

    data = json.loads(path.read_text())
    changed = compact_data(data)
    if changed:
        version = data.pop("version", None)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        try:
            write_json(tmp, data, api_version=version, compact=True)
            os.chmod(tmp, path.stat().st_mode & 0o777)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return changed


def result_files(folder: Path) -> list[Path]:
    """The per-commit result files of one machine folder."""
    return sorted(p for p in folder.glob("*.json") if p.name not in NOT_RESULTS and p.is_file())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.runner.compact",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, metavar="RESULTS/MACHINE",
                        help="machine folders of an asv results directory")
    args = parser.parse_args(argv)
    for folder in args.folders:
        if not folder.is_dir():
            parser.error(f"{folder} is not a directory (expected results/<machine>)")
    for folder in args.folders:
        files = result_files(folder)
        before = sum(p.stat().st_size for p in files)
        cases = sum(compact_file(p) for p in files)
        sizes = [p.stat().st_size for p in files]
        print(f"{folder}: {len(files)} files, {cases} cases summarised, "
              f"{before / 1e6:.1f} -> {sum(sizes) / 1e6:.1f} MB, "
              f"largest {max(sizes, default=0) // 1000} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
