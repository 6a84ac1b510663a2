"""A measurement run noisier than the rest of its history (a lease whose busy host moves a
host-bound row by several times its usual spread) is judged against its own noise: its bumps
are not steps, while a step several times that noise inside it is still found."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from kvbench.history.verdict import noise
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import History, Point, Series

BENCH = "sim.Gpu.track_us"
QUIET, NOISY = 0.005, 0.05  # per-commit sigma (log) of the quiet runs and of the busy lease


def _two_runs(rng, quiet_points=60, noisy_points=26):
    """Log offsets and run ids: a long quiet run, then a short run ten times noisier."""
    x = np.concatenate([QUIET * rng.standard_normal(quiet_points),
                        NOISY * rng.standard_normal(noisy_points)])
    return x, [0] * quiet_points + [1] * noisy_points


def _history(rows: dict[str, np.ndarray], runs: list[int]) -> History:
    commits = [f"{i:040x}" for i in range(1, len(runs) + 1)]
    series = [Series(BENCH, (repr(name),), ("series",), "seconds", "sim",
                     [Point(c, 1e-5 * math.exp(v)) for c, v in zip(commits, values)])
              for name, values in rows.items()]
    return History("sim", Path("/nonexistent-kvbench-test"), commits[-1], commits, commits,
                   series, [], runs=dict(zip(commits, runs)))


def test_a_run_noisier_than_the_rest_keeps_its_own_noise_and_degrees_of_freedom():
    x, runs = _two_runs(np.random.default_rng(11))
    est = noise.estimate(x, runs)
    assert est.within < NOISY / 2  # the series' noise: mostly the quiet run's
    ((run, sigma, n),) = est.noisy_runs
    assert run == 1 and n == 25 and 0.5 * NOISY < sigma < 2 * NOISY
    local = est.for_runs([0, 1])
    assert local.within == sigma and local.df == n - 1 and local.noisy_runs == ()
    assert est.for_runs([0]) is est


def test_runs_of_one_noise_keep_the_series_noise():
    """The F test calls a run noisier at 1%: over 50 series of four equally noisy runs of
    20 commits (200 runs), a handful at most."""
    rng = np.random.default_rng(12)
    runs = [r for r in range(4) for _ in range(20)]
    flagged = sum(len(noise.estimate(0.01 * rng.standard_normal(80), runs).noisy_runs)
                  for _ in range(50))
    assert flagged <= 6


def test_the_bumps_of_a_noisy_run_are_not_reported_as_steps():
    """Judged against the quiet runs' noise, a run ten times noisier reads as a string of
    steps; against its own, as noise."""
    rng = np.random.default_rng(13)
    rows, runs = {}, None
    for i in range(30):
        rows[f"s{i}"], runs = _two_runs(rng)
    report = analyze(_history(rows, runs))
    interior = [f for f in report.findings if not f.edge]
    assert interior == []
    assert len(report.suspects) <= 1


def test_a_step_inside_a_noisy_run_is_still_found_against_its_noise():
    rng = np.random.default_rng(14)
    x, runs = _two_runs(rng)
    x[73:] += math.log1p(0.60)  # inside the noisy run, about ten of its sigmas
    report = analyze(_history({"s0": x}, runs))
    (f,) = report.findings
    assert f.verdict == "regression" and f.commit == report.history.commits[73]
    assert 0.5 * NOISY < math.log1p(f.noise.pct / 100) < 2 * NOISY  # the run's own noise
