"""The suite's host gate (benchmarks/runner/host.py: HostGate): core choice, reference
and canary gate.

The canary is replaced by a scripted sequence of readings (the host's speed is what the gate
reacts to, and a real CPU's cannot be scripted); affinity calls are recorded, not made.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.runner import host as _host

FAST, SLOW = 70.0, 126.0


@pytest.fixture
def host(monkeypatch):
    """A host whose core speeds and canary readings the test scripts."""
    state = {"core": 0, "pinned": [], "readings": [], "speed": {}}

    def setaffinity(_pid, cores):
        (state["core"],) = cores
        state["pinned"].append(state["core"])

    def loop():
        return 0

    gate = _host.HostGate()

    def canary(repeats=_host.CANARY_REPEATS):
        if state["readings"]:
            us = state["readings"].pop(0)
        else:
            us = state["speed"].get(state["core"], FAST)
        gate.reference_us = us if gate.reference_us is None else min(gate.reference_us, us)
        return us

    monkeypatch.setattr(_host.os, "sched_setaffinity", setaffinity)
    monkeypatch.setattr(_host, "_loop", loop)
    monkeypatch.setattr(gate, "canary_us", canary)
    state["gate"] = gate
    monkeypatch.setattr(_host, "HOST_RETRY_PAUSE_S", 0.0)
    return state


def _entry(us=10.0):
    return {"samples_s": [us * 1e-6] * 3, "median_us": us}


def test_the_canary_is_a_least_of_timings_and_lowers_the_reference(monkeypatch):
    gate = _host.HostGate()
    assert gate.reference_us is None
    first = gate.canary_us(3)
    assert first > 0 and gate.reference_us == first
    gate.canary_us(3)
    assert gate.reference_us <= first


def test_the_fastest_core_is_the_one_never_slow_in_a_pass(host):
    host["speed"] = {0: FAST, 1: SLOW, 2: 90.0}
    host["readings"] = [FAST, SLOW, 90.0,   # pass 1: core 0 fastest
                        SLOW, SLOW, 91.0,   # pass 2: core 0 slow once
                        FAST, SLOW, 90.0]
    chosen = host["gate"].pin_fastest_core(rounds=3, cores=[0, 1, 2])
    assert chosen["core"] == 2 and host["core"] == 2
    assert chosen["probe_us"] == {"0": SLOW, "1": SLOW, "2": 91.0}


def test_a_case_on_a_fast_host_is_measured_once(host):
    calls = []
    entry = host["gate"].on_fast_host(lambda: calls.append(1) or _entry(), [0, 1])
    assert len(calls) == 1
    assert entry["host"] == {"canary_us": [FAST, FAST], "core": 0, "attempts": 1,
                             "reference_us": FAST, "fast": True}


def test_a_case_on_a_slow_host_is_measured_again_until_the_host_is_fast(host):
    host["readings"] = [FAST, FAST,        # probe of attempt 1 (cores 0, 1): reference FAST
                        SLOW, SLOW,        # around attempt 1: slow
                        SLOW, SLOW, 80.0, 80.0]  # probe, then around attempt 2: within the gate
    values = iter([20.0, 10.0])
    entry = host["gate"].on_fast_host(lambda: _entry(next(values)), [0, 1])
    assert entry["median_us"] == 10.0
    assert entry["host"]["attempts"] == 2 and entry["host"]["fast"] is True
    assert entry["host"]["canary_us"] == [80.0, 80.0]


def test_a_host_that_stays_slow_is_flagged_and_the_least_slow_attempt_kept(host, monkeypatch):
    host["gate"].reference_us = FAST  # the process saw a fast core before
    host["speed"] = {0: SLOW, 1: SLOW + 10}
    values = iter([30.0, 20.0, 25.0, 21.0])
    entry = host["gate"].on_fast_host(lambda: _entry(next(values)), [0, 1])
    assert entry["host"]["attempts"] == _host.HOST_ATTEMPTS
    assert entry["host"]["fast"] is False and entry["host"]["reference_us"] == FAST
    assert entry["median_us"] == 30.0  # every attempt equally slow: the first is kept


def test_a_case_that_fails_is_returned_as_it_is(host):
    failed = {"error": "Traceback ..."}
    assert host["gate"].on_fast_host(lambda: failed, [0]) is failed


def test_without_cores_the_case_is_measured_where_the_process_runs(host):
    entry = host["gate"].on_fast_host(_entry, [])
    assert entry["host"]["core"] is None and host["pinned"] == []
