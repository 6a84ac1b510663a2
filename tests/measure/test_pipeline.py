"""The measuring pipeline (kvbench.measure.pipeline): the row asked for is the row timed, a
wrong row gets no number, an impossible number is an error, auto shares its row's timing."""

from __future__ import annotations

import os

import pytest

from kvbench.dispatch import clear_decisions
from kvbench.harness import TimingResult
from kvbench.harness.peaks import DevicePeaks
from kvbench.harness.verify import VerificationError
from kvbench.measure import pipeline
from kvbench.ops.kv_alloc import alloc_inputs
from kvbench.ops.kv_write import write_inputs
from kvbench.ops.paged_decode import decode_inputs, decode_pool

ROW = "torch/index_copy"


@pytest.fixture
def inputs(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # auto must pick a torch row
    clear_decisions()  # decisions cached by earlier tests may have been made with it set
    pool = decode_pool(1, 64, "fp16", "cpu", kv_heads=2, head_dim=32)
    yield write_inputs(pool, 8)
    pool.free()


def test_the_row_asked_for_is_the_row_timed(inputs):
    found = pipeline.measure_row(inputs, ROW)
    assert found.row == ROW and found.max_abs_diff == 0.0 and found.timing.median_us > 0
    with pytest.raises(ValueError, match="triton/nope"):
        pipeline.measure_row(inputs, "triton/nope")


def test_auto_shares_the_timing_of_the_row_it_ran(inputs):
    timings: dict = {}
    first = pipeline.measure_row(inputs, ROW, timings=timings)
    auto = pipeline.measure_row(inputs, "auto", timings=timings)
    assert auto.row == ROW and auto.shared and auto.timing is first.timing and not first.shared


def test_a_wrong_row_gets_no_number(inputs, monkeypatch):
    def scaled(fn):
        return lambda *a, **k: (fn(*a, **k), a[2].mul_(1.005))[0]

    monkeypatch.setattr(inputs, "check", lambda fn, check=inputs.check: check(scaled(fn)))
    timed = []
    monkeypatch.setattr(pipeline, "time_call", lambda *a, **k: timed.append(1))
    with pytest.raises(VerificationError):
        pipeline.measure_row(inputs, ROW)
    assert timed == []


def test_a_number_above_the_spec_peak_is_an_error(inputs, monkeypatch):
    peaks = DevicePeaks("NVIDIA H200", 4800.0, 989.5, 60 << 20, 132, True)
    monkeypatch.setattr(pipeline, "device_peaks", lambda *a, **k: peaks)
    moved = inputs.work.moved
    fast = TimingResult(moved / 5000e9 * 1e6, (1.0,), "bench", "cold", "cuda:0")  # 5000 GB/s
    assert "VIOLATION" in pipeline.implausible(ROW, fast, inputs)[0]
    monkeypatch.setattr(pipeline, "time_call", lambda *a, **k: fast)
    with pytest.raises(pipeline.Implausible, match="measurement bug, not recorded"):
        pipeline.measure_row(inputs, ROW)
    slow = TimingResult(moved / 4000e9 * 1e6, (1.0,), "bench", "cold", "cuda:0")
    assert pipeline.implausible(ROW, slow, inputs) == []


def test_cpu_skips_and_unserved_rows():
    assert pipeline.cpu_skip("triton/split_kv", "cpu") == pipeline.CPU_TRITON_SKIP
    assert pipeline.cpu_skip("cuda/cluster_decode", "cpu") == pipeline.CPU_CUDA_SKIP
    assert pipeline.cpu_skip("torch/gather_sdpa", "cpu") is None
    assert pipeline.cpu_skip("triton/split_kv", "cuda") is None
    pool = decode_pool(1, 64, "fp16", "cpu", kv_heads=2, head_dim=128)
    why = pipeline.unserved(decode_inputs(pool, 4), "cuda/cluster_decode")
    assert why is None or why.startswith(pipeline.UNSERVED)
    pool.free()


def test_host_op_is_timed_per_state_and_the_worst_kept():
    inputs = alloc_inputs(4096, 1, "cpu")
    found = pipeline.measure_row(inputs, "host/freelist", host_repeats=2)
    assert found.timing.timer == "bench_host" and found.max_abs_diff == 0.0
    one = alloc_inputs(4096, 1, "cpu", states=("bump",))
    assert len(one.timed_calls(found.selection.target, "host/freelist")) == 1
    with pytest.raises(ValueError, match="accepted states"):
        alloc_inputs(4096, 1, "cpu", states=("nope",))


def test_forced_restores_the_callers_selector(monkeypatch):
    monkeypatch.setenv("KVBENCH_KV_WRITE", ROW)
    with pipeline.forced("kv_write", "auto"):
        assert "KVBENCH_KV_WRITE" not in os.environ
    assert os.environ["KVBENCH_KV_WRITE"] == ROW
