"""Timers on CPU functions of known cost: ordering, magnitude, what is inside the window."""

import time

import pytest

from kvbench.harness import TimingResult, bench, bench_host, bench_stateful, host_floor
from kvbench.harness import timers as timers_mod

# 20x apart: sleep() overshoots by up to milliseconds on a loaded 2-core CI machine.
SLOW_S, FAST_S = 0.02, 0.001


def _sleeper(seconds):
    return lambda: time.sleep(seconds)


@pytest.mark.parametrize("timer", ["bench", "bench_stateful", "bench_host"])
def test_known_costs_order_and_magnitude(timer):
    def run(seconds):
        fn = _sleeper(seconds)
        if timer == "bench":
            return bench(fn, repeat=7, device="cpu")
        if timer == "bench_stateful":
            return bench_stateful(fn, lambda: None, repeat=7, device="cpu")
        return bench_host(fn, repeat=7, device="cpu")

    slow, fast = run(SLOW_S), run(FAST_S)
    assert slow.timer == fast.timer == timer
    # sleep() never returns early; it may overshoot on a loaded machine, so only bounds below
    # and a generous bound above.
    assert slow.median_us >= 0.95 * SLOW_S * 1e6
    assert fast.median_us >= 0.95 * FAST_S * 1e6
    assert slow.median_us > 2 * fast.median_us
    assert slow.median_us < 50 * SLOW_S * 1e6


def test_result_shape_and_asv_form():
    r = bench(lambda: None, repeat=7, device="cpu")
    assert isinstance(r, TimingResult)
    assert len(r.samples_us) == 7 and r.l2 == "cold" and r.device == "cpu"
    asv = r.as_asv()
    assert asv["number"] == 1
    assert asv["samples"] == pytest.approx([s * 1e-6 for s in r.samples_us])


def test_event_floor_is_the_bench_timer_around_a_trivial_call():
    from kvbench.harness import event_floor

    floor = event_floor("cpu", repeat=20)
    assert (floor.timer, floor.l2, len(floor.samples_us)) == ("bench", "cold", 20)
    assert 0 < floor.median_us < 500


def test_host_floor_is_small_on_cpu():
    floor = host_floor("cpu", repeat=20)
    assert floor.timer == "bench_host"
    assert 0 < floor.median_us < 500  # a no-op plus two perf_counter_ns calls


class _SlowFirstCall:
    """Slow on its first call only, like a Triton JIT compile."""

    def __init__(self, first_s=0.2):
        self.calls = 0
        self.first_s = first_s

    def __call__(self):
        self.calls += 1
        if self.calls == 1:
            time.sleep(self.first_s)


@pytest.mark.parametrize("timer", ["bench", "bench_stateful", "bench_host"])
def test_first_call_is_untimed(timer):
    fn = _SlowFirstCall()
    if timer == "bench":
        r = bench(fn, repeat=3, device="cpu")
    elif timer == "bench_stateful":
        r = bench_stateful(fn, lambda: None, repeat=3, device="cpu")
    else:
        r = bench_host(fn, repeat=3, device="cpu")
    assert fn.calls == 4  # one untimed + three timed
    assert max(r.samples_us) < 0.5 * fn.first_s * 1e6


def test_reset_is_outside_the_window():
    reset = _sleeper(0.02)
    fn = lambda: None
    assert bench_stateful(fn, reset, repeat=5, device="cpu").median_us < 10_000
    assert bench_host(fn, reset, repeat=5, device="cpu").median_us < 10_000


def test_reset_runs_before_every_call():
    order = []
    bench_stateful(
        lambda: order.append("fn"), lambda: order.append("reset"), repeat=3, device="cpu"
    )
    assert order == ["reset", "fn"] * 4  # untimed first call included


def _count_flushes(monkeypatch):
    count = {"n": 0}

    def fake_flusher(device=None, *, mode="read"):
        def flush():
            count["n"] += 1

        return flush

    monkeypatch.setattr(timers_mod, "flusher", fake_flusher)
    return count


def test_cold_flushes_before_every_timed_call_and_warm_never(monkeypatch):
    count = _count_flushes(monkeypatch)
    bench(lambda: None, repeat=6, device="cpu")
    assert count["n"] == 6
    count["n"] = 0
    r = bench(lambda: None, repeat=6, l2="warm", device="cpu")
    assert count["n"] == 0 and r.l2 == "warm"


def test_bench_host_keeps_cpu_caches_warm(monkeypatch):
    count = _count_flushes(monkeypatch)
    r = bench_host(lambda: None, repeat=5, device="cpu")
    assert count["n"] == 0 and r.l2 == "warm"  # labelled as measured, not "cold"


def test_default_repeat_follows_the_time_budget(monkeypatch):
    _count_flushes(monkeypatch)  # no real flush: the budget is then spent on fn alone
    lo, hi = timers_mod.BENCH_REPEAT_RANGE
    # A cheap fn gets more than the minimum (the exact count depends on the machine's load).
    assert lo < len(bench(lambda: None, device="cpu").samples_us) <= hi
    slow = bench(_sleeper(0.02), device="cpu")  # >= 20 ms per call: 150 ms budget -> 10 (min)
    assert len(slow.samples_us) == lo
    s_lo, _ = timers_mod.STATEFUL_REPEAT_RANGE
    assert len(bench_host(_sleeper(0.005), device="cpu").samples_us) == s_lo


@pytest.mark.parametrize("per_call_s,expected", [(1e-6, 1000), (1e-3, 150), (1.0, 10), (0.0, 1000)])
def test_repeat_is_budget_over_cost_clamped(per_call_s, expected):
    assert timers_mod._choose_repeat(per_call_s, 0.15, (10, 1000)) == expected


@pytest.mark.parametrize(
    "call",
    [
        lambda: bench(42),
        lambda: bench_stateful(lambda: None, "reset"),
        lambda: bench_host(None),
        lambda: bench_host(lambda: None, reset=3),
    ],
)
def test_non_callable_is_a_value_error(call):
    with pytest.raises(ValueError, match="must be callable"):
        call()


@pytest.mark.parametrize("repeat", [0, -1, 2.5, True])
def test_bad_repeat_is_a_value_error(repeat):
    with pytest.raises(ValueError, match="repeat"):
        bench(lambda: None, repeat=repeat, device="cpu")
    with pytest.raises(ValueError, match="repeat"):
        bench_stateful(lambda: None, lambda: None, repeat=repeat, device="cpu")
    with pytest.raises(ValueError, match="repeat"):
        bench_host(lambda: None, repeat=repeat, device="cpu")


def test_unknown_l2_state_is_a_value_error():
    with pytest.raises(ValueError, match="l2 must be 'cold'"):
        bench(lambda: None, l2="lukewarm", device="cpu")


def test_bad_device_is_a_value_error():
    with pytest.raises(ValueError, match="device"):
        bench(lambda: None, repeat=1, device="tpu")


def test_host_timer_has_its_own_budget(monkeypatch):
    s_lo, _ = timers_mod.STATEFUL_REPEAT_RANGE
    monkeypatch.setattr(timers_mod, "HOST_BUDGET_S", 1e-9)
    assert len(bench_host(lambda: None, device="cpu").samples_us) == s_lo
    monkeypatch.setattr(timers_mod, "HOST_BUDGET_S", 0.05)
    assert len(bench_host(lambda: None, device="cpu").samples_us) > s_lo
    # bench_stateful keeps the stateful budget
    budgets = []
    real = timers_mod._choose_repeat
    monkeypatch.setattr(timers_mod, "_choose_repeat",
                        lambda per, budget, bounds: (budgets.append(budget)
                                                     or real(per, budget, bounds)))
    bench_stateful(lambda: None, lambda: None, device="cpu")
    bench_host(lambda: None, device="cpu")
    assert budgets == [timers_mod.STATEFUL_BUDGET_S, 0.05]
