"""prepare_process sets the suite's harness knobs; a class may override one for its own rows
(KVWrite samples to the cap), and the next class gets the suite's value back."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import kv_write
from benchmarks.runner.worker import SUITE_KNOBS, Worker


@pytest.fixture
def worker(monkeypatch):
    import torch

    from kvbench.harness import timers

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    for name in SUITE_KNOBS:  # restored for the tests after this one in the process
        monkeypatch.setattr(timers, name, getattr(timers, name))
    return Worker({}, "benchmarks")


def test_a_class_override_applies_to_its_rows_and_the_next_class_gets_the_suite_value(worker):
    from kvbench.harness import timers

    worker.prepare_process()
    assert timers.BENCH_STOP_CI == SUITE_KNOBS["BENCH_STOP_CI"] is not None
    worker.prepare_process(BENCH_STOP_CI=kv_write.STOP_CI)
    assert timers.BENCH_STOP_CI is None  # KVWrite: every row to the cap
    assert timers.BENCH_REPEAT_RANGE == SUITE_KNOBS["BENCH_REPEAT_RANGE"]
    worker.prepare_process()
    assert timers.BENCH_STOP_CI == SUITE_KNOBS["BENCH_STOP_CI"]


def test_an_unknown_knob_is_refused_by_name(worker):
    with pytest.raises(ValueError, match=r"unknown knob\(s\) \['BENCH_STOP'\]; accepted: "):
        worker.prepare_process(BENCH_STOP=0.01)
