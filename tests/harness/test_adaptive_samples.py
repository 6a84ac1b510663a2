"""Adaptive bench(): a pilot loop plans the count for a wanted precision of the median, capped
by the budget's repeat; the proof stays on the last timed call; an explicit repeat is fixed."""

import random
import statistics

import pytest

from kvbench.harness import bench
from kvbench.harness import timers as timers_mod
from kvbench.harness.proof import TimedProof


def test_median_interval_is_order_statistics_of_the_samples():
    xs = list(range(1, 101))  # median 50.5; ranks 50 -+ 9.8 -> xs[40], xs[60]
    assert timers_mod.median_ci_halfwidth(xs) == pytest.approx((61 - 41) / 2)
    assert timers_mod.median_ci_halfwidth([3.0]) == float("inf")
    # An outlier does not widen it (no normal model of the samples).
    assert timers_mod.median_ci_halfwidth([*[10.0] * 30, 1e6]) == 0.0


@pytest.mark.parametrize("spread,expect", [(0.0, "least"), (0.002, "least"), (0.5, "cap")])
def test_plan_follows_the_pilot_spread(spread, expect):
    rng = random.Random(0)
    pilot = [100.0 * (1 + spread * rng.uniform(-1, 1)) for _ in range(15)]
    n = timers_mod.planned_repeat(pilot, 100, 0.005)
    least = 15 + timers_mod.BENCH_FINAL_MIN
    assert n == (least if expect == "least" else 100)


def test_plan_scales_with_the_square_of_the_precision():
    rng = random.Random(1)
    pilot = [100.0 * (1 + 0.03 * rng.gauss(0, 1)) for _ in range(15)]
    loose = timers_mod.planned_repeat(pilot, 10_000, 0.01)
    tight = timers_mod.planned_repeat(pilot, 10_000, 0.005)
    assert loose < tight and tight == pytest.approx(4 * loose, rel=0.1)


class _Counting:
    """A CPU fn whose samples we control by call count; remembers which call was proven."""

    def __init__(self, costs):
        self.costs, self.calls = costs, 0

    def __call__(self):
        self.calls += 1
        return self.calls


def _run(monkeypatch, stop, fn_cost_spread, repeat=None, cap=100):
    monkeypatch.setattr(timers_mod, "BENCH_STOP_CI", stop)
    monkeypatch.setattr(timers_mod, "BENCH_REPEAT_RANGE", (10, cap))
    monkeypatch.setattr(timers_mod, "_choose_repeat", lambda *a: cap)
    rng = random.Random(2)
    fake = iter(100.0 * (1 + fn_cost_spread * rng.uniform(-1, 1)) for _ in range(10_000))
    real_wall = timers_mod._wall_samples
    loops = []

    def wall(fn, before, n, proof=None):
        samples, figures = real_wall(fn, before, n, proof)
        loops.append((n, proof is not None))
        return [next(fake) for _ in samples], figures

    monkeypatch.setattr(timers_mod, "_wall_samples", wall)
    return bench(lambda: None, repeat=repeat, l2="warm", device="cpu"), loops


def test_quiet_row_stops_early_and_the_proof_is_in_the_last_loop(monkeypatch):
    result, loops = _run(monkeypatch, 0.005, 0.001)
    assert loops == [(15, False), (timers_mod.BENCH_FINAL_MIN, False)]
    assert len(result.samples_us) == 15 + timers_mod.BENCH_FINAL_MIN


def test_noisy_row_takes_the_cap(monkeypatch):
    result, loops = _run(monkeypatch, 0.005, 0.5)
    assert [n for n, _ in loops] == [15, 85] and len(result.samples_us) == 100


def test_unset_or_explicit_repeat_is_one_fixed_loop(monkeypatch):
    _, loops = _run(monkeypatch, None, 0.001)
    assert loops == [(100, False)]
    _, loops = _run(monkeypatch, 0.005, 0.001, repeat=40)
    assert loops == [(40, False)]


def test_proof_runs_on_the_last_call_of_the_second_loop(monkeypatch):
    # any pilot passes (its interval is always within an infinite target): 15 + 5 calls; a
    # finite target failed on a loaded runner, where a 0.1 us call has 1 us outliers
    monkeypatch.setattr(timers_mod, "BENCH_STOP_CI", float("inf"))
    seen = {}

    class Proof(TimedProof):
        def __init__(self):
            pass

        def prepare(self, previous):
            seen["prepared_after"] = calls["n"]

        def restore(self):
            pass

    calls = {"n": 0}

    def fn():
        calls["n"] += 1
        return calls["n"]

    monkeypatch.setattr(timers_mod, "run_proof", lambda proof, out: {"out": out})
    result = bench(fn, l2="warm", device="cpu", proof=Proof())
    # the untimed first call, the cost estimate's calls, then both loops
    total = 1 + timers_mod._ESTIMATE_CALLS + 15 + timers_mod.BENCH_FINAL_MIN
    assert len(result.samples_us) == 15 + timers_mod.BENCH_FINAL_MIN
    assert seen["prepared_after"] == total - 1 and result.proof == {"out": total}
    assert statistics.median(result.samples_us) >= 0
