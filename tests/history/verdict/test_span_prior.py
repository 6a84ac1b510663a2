"""A span without a noise model: its series of one benchmark are a floor for each other's
noise (kvbench/history/verdict/span_prior.py)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy.special import polygamma

from kvbench.history.verdict import noise, span_prior
from kvbench.history.verdict.detection import noise_values
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import History, Point, Series


def _member(d, wp=None):
    d = np.asarray(d, dtype=float)
    return span_prior.Member(d, d, wp)


@pytest.mark.parametrize("y", [0.05, 0.3, 1.0, 4.0])
def test_inverse_trigamma_inverts_trigamma(y):
    assert float(polygamma(1, span_prior._inverse_trigamma(y))) == pytest.approx(y, rel=1e-6)


def test_a_family_of_identical_series_pools_near_its_sigma_at_full_weight():
    rng = np.random.default_rng(3)
    members = [_member(np.diff(0.03 * rng.standard_normal(9))) for _ in range(40)]
    prior = span_prior.learn(members)
    assert prior is not None and not prior.normalised and prior.series == 40
    assert 0.024 < prior.sigma < 0.036  # the per-commit sigma, from differences
    assert prior.df == noise.PRIOR_DF


def test_a_mixed_family_gets_less_weight_or_none():
    """Half the series at 0.3%, half at 10%: far more spread between series than eight
    differences each explain."""
    rng = np.random.default_rng(4)
    members = [_member(np.diff(s * rng.standard_normal(9)))
               for s in [0.003] * 20 + [0.10] * 20]
    prior = span_prior.learn(members)
    assert prior is None or prior.df < noise.PRIOR_DF // 2


def test_too_few_series_or_differences_pool_nothing():
    rng = np.random.default_rng(5)
    few = [_member(rng.standard_normal(6)) for _ in range(span_prior.MIN_SERIES - 1)]
    assert span_prior.learn(few) is None
    short = [_member(rng.standard_normal(span_prior.MIN_OWN - 1)) for _ in range(20)]
    assert span_prior.learn(short) is None


def test_within_process_spreads_normalise_the_pool():
    """Series whose samples are tight get a tight floor: with every series' within-process
    spread known, the pool is a ratio and each series' floor scales by its own spread."""
    rng = np.random.default_rng(6)
    members = [_member(np.diff(3 * wp * rng.standard_normal(9)), wp)
               for wp in np.geomspace(0.001, 0.01, 30)]
    prior = span_prior.learn(members)
    assert prior is not None and prior.normalised
    assert prior.within(0.002) == pytest.approx(2 * prior.within(0.001))
    assert prior.within(None) is None
    assert 2.4 < prior.sigma < 3.6


def test_the_floor_only_raises_and_adds_no_degrees_of_freedom():
    x = np.cumsum([0.0, 0.001, -0.001, 0.0015, -0.001, 0.001, -0.0005])  # quiet: ~0.1%
    runs = [0] * len(x)
    own = noise.estimate(x, runs)
    floored = noise.estimate(x, runs, prior=noise.Prior(None, None, span=0.03, span_df=10))
    assert floored.within > 5 * own.within and floored.raised_to_family
    assert floored.df == own.df and floored.prior_df == 0
    loud = noise.estimate(50 * x, runs, prior=noise.Prior(None, None, span=0.001, span_df=10))
    assert loud.within == pytest.approx(noise.estimate(50 * x, runs).within)
    assert not loud.raised_to_family


def _host_span(seed: int, n: int = 8, k: int = 30) -> History:
    rng = np.random.default_rng(seed)
    commits = [f"{i:040x}" for i in range(1, n + 1)]
    series = [Series("sim.Host.track_us", (repr(f"s{j}"),), ("series",), "seconds", "sim",
                     [Point(c, 1e-5 * math.exp(v))
                      for c, v in zip(commits, noise_values(rng, "host", n))])
              for j in range(k)]
    return History("sim", Path("/nonexistent-kvbench-test"), commits[-1], commits, commits,
                   series, [], runs=dict.fromkeys(commits, 0))


@pytest.mark.parametrize("seed", [27, 28, 29, 30, 44])
def test_a_flat_host_span_without_a_model_reports_no_step(seed):
    """Eight flat commits of host-like noise (Student t3, 3%), thirty series, no model: at these
    seeds one series' few screened differences read 0.1-0.3% and an ordinary difference was
    reported as a 3-13% step. Its family's pooled noise raises it: nothing is reported, and
    the series that read quiet say they were raised."""
    report = analyze(_host_span(seed))
    assert [f for f in report.findings if f.kind != "suspect"] == []
    raised = [v for v in report.verdicts if v.noise is not None and v.noise.raised_to_family]
    assert raised and all(v.noise.within > 0.005 for v in raised)
    assert sum(s["noise_raised_to_family"] is True for s in report.to_json()["series"]) \
        == len(raised)
