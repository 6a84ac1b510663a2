"""A process's within-process noise is that of all the samples it took, not of the few it
stored: asv computes its interval from the suite's 31 representative samples, 2-7x wider than
the one all of a process's 100-1,000 samples give, and that width was the floor of every
series' noise and MDE (noise.interval_of_all_samples)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from asv_runner.statistics import compute_stats

from kvbench.history.verdict import noise

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.runner.compact import STORED_SAMPLES, representative_samples


def _sigma(value: float, low: float, high: float) -> float:
    return noise.within_process_sigma([value], [low], [high])


@pytest.mark.parametrize("taken", [100, 300, 1000])
def test_the_stored_interval_rescaled_is_that_of_every_sample(taken):
    rng = np.random.default_rng(taken)
    ratios_stored, ratios_fixed = [], []
    for _ in range(40):
        samples = list(rng.normal(1e-5, 1e-7, taken))
        value, every = compute_stats(samples, 1)
        truth = _sigma(value, every["ci_99_a"], every["ci_99_b"])
        stored = representative_samples(samples)
        _, kept = compute_stats(stored, 1)
        assert kept["repeat"] == STORED_SAMPLES
        ratios_stored.append(_sigma(value, kept["ci_99_a"], kept["ci_99_b"]) / truth)
        low, high = noise.interval_of_all_samples(value, kept["ci_99_a"], kept["ci_99_b"],
                                                  kept["repeat"], taken)
        ratios_fixed.append(_sigma(value, low, high) / truth)
    assert np.median(ratios_stored) > 1.8  # what the verdicts were judged against
    assert 0.8 < np.median(ratios_fixed) < 1.3, np.median(ratios_fixed)


def test_an_interval_of_every_sample_or_of_unknown_counts_is_kept():
    for repeat, taken in ((457, 457), (31, None), (None, 100), (31, 31), (100, 31)):
        assert noise.interval_of_all_samples(1.0, 0.9, 1.2, repeat, taken) == (0.9, 1.2)
    low, high = noise.interval_of_all_samples(1.0, 0.9, 1.2, 31, 124)
    assert (low, high) == pytest.approx((1.0 - 0.05, 1.0 + 0.1))
    assert math.isclose(0.5, math.sqrt(31 / 124))
