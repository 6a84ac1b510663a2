"""kvbench.history.bisect.abtest on synthetic run medians: outcomes, direction, error rates.

The rates are of the whole sequential procedure `kvbench bisect` runs (5 rounds, then 5 more
while inconclusive, capped at 10), simulated with a fixed seed: Gaussian noise for a GPU
kernel series, log-normal 30% noise for a host series (docs/harness.md: host series moved ~30%
between identical commits). Measured rates are in docs/bisect.md.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.history.bisect import abtest as ab

GPU_SIGMA = 0.005  # relative, Gaussian
HOST_SIGMA = 0.3  # log-normal


def _simulate(shift_sigmas: float, kind: str, n: int, seed: int, higher_is_better=False):
    """Outcome rates of run_sequential over n synthetic A/B comparisons; B is `shift_sigmas`
    noise units higher than A."""
    rng = np.random.default_rng(seed)
    sigma = GPU_SIGMA if kind == "gpu" else HOST_SIGMA

    def draw(shift: float) -> float:
        if kind == "gpu":
            return 100.0 * (1 + sigma * rng.standard_normal()) * (1 + shift * sigma)
        return 100.0 * float(np.exp(sigma * rng.standard_normal() + shift * sigma))

    counts = dict.fromkeys(ab.OUTCOMES, 0)
    for _ in range(n):
        result = ab.run_sequential(lambda i: (draw(0.0), draw(shift_sigmas)), rounds=5,
                                   max_rounds=10, higher_is_better=higher_is_better)
        counts[result.outcome] += 1
    return {k: v / n for k, v in counts.items()}


@pytest.mark.parametrize(("kind", "seed"), [("gpu", 1), ("host", 2)])
def test_identical_distributions_are_rarely_called_different(kind, seed):
    rates = _simulate(0.0, kind, 300, seed)
    assert rates[ab.REGRESSION] + rates[ab.IMPROVEMENT] <= 0.04, rates
    assert rates[ab.NO_CHANGE] >= 0.85, rates


@pytest.mark.parametrize(("shift", "power"), [(2.0, 0.7), (3.0, 0.95), (5.0, 0.99)])
def test_power_at_two_to_five_times_the_noise(shift, power):
    rates = _simulate(shift, "gpu", 150, seed=int(shift * 10))
    assert rates[ab.REGRESSION] >= power, rates
    assert rates[ab.IMPROVEMENT] == 0.0, rates


def test_host_noise_step_of_three_sigma_is_found():
    rates = _simulate(3.0, "host", 150, seed=7)
    assert rates[ab.REGRESSION] >= 0.95, rates


def test_direction_gbps_drop_is_a_regression_and_latency_drop_an_improvement():
    before = [100.0, 100.4, 99.7, 100.2, 99.9]
    lower = [v * 0.95 for v in before]
    gbps = ab.decide(before, lower, higher_is_better=True)
    assert gbps.outcome == ab.REGRESSION and gbps.effect == pytest.approx(-0.05)
    assert ab.decide(before, lower, higher_is_better=False).outcome == ab.IMPROVEMENT
    higher = [v * 1.05 for v in before]
    assert ab.decide(before, higher, higher_is_better=False).outcome == ab.REGRESSION
    assert ab.decide(before, higher, higher_is_better=True).outcome == ab.IMPROVEMENT


def test_no_change_needs_evidence_not_just_a_high_p():
    # Two runs a side: p can never be small, but the interval is too wide to claim anything.
    result = ab.decide([100.0, 130.0], [95.0, 140.0], higher_is_better=False)
    assert result.outcome == ab.INCONCLUSIVE and "too few" in result.reason
    wide = ab.decide([100.0, 130.0, 90.0, 120.0, 100.0], [95.0, 140.0, 100.0, 80.0, 120.0],
                     higher_is_better=False, mde=0.05)
    assert wide.outcome == ab.INCONCLUSIVE and "MDE" in wide.reason
    # Same runs with a tight series: no change.
    flat = ab.decide([100.0, 100.3, 99.8, 100.1, 99.9], [100.1, 99.8, 100.2, 99.9, 100.0],
                     higher_is_better=False)
    assert flat.outcome == ab.NO_CHANGE, flat.reason
    # An MDE the caller sets tighter than the runs can support: inconclusive.
    tight = ab.decide([100.0, 100.3, 99.8, 100.1, 99.9], [100.1, 99.8, 100.2, 99.9, 100.0],
                      higher_is_better=False, mde=0.0005)
    assert tight.outcome == ab.INCONCLUSIVE


def test_five_runs_a_side_is_the_fewest_that_can_be_different():
    low, high = [1.0, 1.01, 1.02, 1.03], [2.0, 2.01, 2.02, 2.03]
    assert ab.decide(low, high, higher_is_better=False).p > ab.ALPHA  # 4 a side: p >= 0.029
    assert ab.decide(low + [1.04], high + [2.04], higher_is_better=False).p <= ab.ALPHA


def test_sequential_adds_rounds_only_while_inconclusive_and_stops_at_the_cap():
    calls = []

    def noisy(i):
        calls.append(i)
        return (100.0, 160.0) if i % 2 else (160.0, 100.0)  # the sides swap: never decidable

    result = ab.run_sequential(noisy, rounds=3, max_rounds=8, higher_is_better=False,
                               mde=0.05)
    assert result.outcome == ab.INCONCLUSIVE and result.rounds == 8 and calls == list(range(8))

    calls.clear()
    clear = ab.run_sequential(lambda i: calls.append(i) or (100.0 + i * 0.01, 150.0 + i * 0.01),
                              rounds=5, max_rounds=20, higher_is_better=False)
    assert clear.outcome == ab.REGRESSION and clear.rounds == 5 and len(calls) == 5


def test_sequential_counts_failed_runs_and_refuses_bad_rounds():
    result = ab.run_sequential(lambda i: (None if i == 0 else 100.0 + i * 0.01, 150.0 + i * 0.01),
                               rounds=6, max_rounds=6, higher_is_better=False)
    assert result.failed_runs == 1 and len(result.before) == 5 and len(result.after) == 6
    with pytest.raises(RuntimeError, match="too few to test"):
        ab.run_sequential(lambda i: (None, 1.0), rounds=2, max_rounds=3, higher_is_better=False)
    with pytest.raises(ValueError, match="max_rounds"):
        ab.run_sequential(lambda i: (1.0, 1.0), rounds=5, max_rounds=4, higher_is_better=False)
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        ab.check_rounds(0, 3)


def test_bad_input_is_a_value_error_naming_it():
    with pytest.raises(ValueError, match="at least 2 runs"):
        ab.decide([1.0], [1.0, 2.0], higher_is_better=False)
    with pytest.raises(ValueError, match="finite and > 0"):
        ab.decide([1.0, float("nan")], [1.0, 2.0], higher_is_better=False)
    with pytest.raises(ValueError, match="mde"):
        ab.decide([1.0, 1.1], [1.0, 1.1], higher_is_better=False, mde=-0.1)


def test_side_of_locates_a_commit_between_the_two_sides():
    good, bad = [100.0, 101.0, 99.0], [110.0, 111.0, 109.0]
    assert ab.side_of([100.5, 101.0, 99.5], good, bad)[0] == ab.GOOD
    assert ab.side_of([109.0, 110.5], good, bad)[0] == ab.BAD
    side, position = ab.side_of([105.0], good, bad)
    assert side == ab.UNCLEAR and position == pytest.approx(0.5)
    # a throughput series: the bad side is lower; position is still 0 good .. 1 bad
    assert ab.side_of([90.5], [100.0], [90.0])[0] == ab.BAD
    with pytest.raises(ValueError, match="same median"):
        ab.side_of([1.0], [2.0], [2.0])


def test_result_json_carries_the_evidence():
    result = ab.decide([100.0, 100.3, 99.8, 100.1, 99.9], [105.0, 105.3, 104.8, 105.1, 104.9],
                       higher_is_better=False)
    out = result.to_json()
    assert out["outcome"] == ab.REGRESSION
    assert out["before"] == [100.0, 100.3, 99.8, 100.1, 99.9]
    assert out["median_after"] == pytest.approx(105.0)
    assert out["ci_low"] > 0.04 and out["ci_high"] < 0.06
    assert {"p_mannwhitney", "p_ks", "p", "mde", "noise", "rounds"} <= set(out)
