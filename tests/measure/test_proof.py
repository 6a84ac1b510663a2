"""Proof with every number: the timed calls' output is verified, and systematic errors fail.

CPU, small shapes. The planted kernels (tests/planted.py) wrap the torch rows; the Triton rows
run through the interpreter where the real kernels must pass.
"""

from __future__ import annotations

import planted
import pytest
import torch

from kvbench.fixtures.gather_pool import build_gather_pool, build_page_table_flat
from kvbench.fixtures.pool import paged_pool
from kvbench.harness import bench
from kvbench.harness.proof import TimedProof, poison_
from kvbench.harness.verify import (
    SYSTEMATIC_TOLERANCE,
    VerificationError,
    error_figures,
    verify_unbiased,
)
from kvbench.kernels.kv_gather_fp8 import gather_fp8_torch
from kvbench.kernels.kv_write import kv_write_torch
from kvbench.kernels.paged_decode import paged_decode_gather_sdpa
from kvbench.ops.kv_gather_fp8 import check_kv_gather_fp8, proof_kv_gather_fp8
from kvbench.ops.kv_write import check_kv_write, make_write_inputs, proof_kv_write
from kvbench.ops.paged_decode import check_paged_decode, make_decode_query, proof_paged_decode

DTYPES = ("fp16", "bf16", "fp8")


def _pool(dtype: str, lens=(300, 77, 40)):
    return paged_pool(len(lens), list(lens), kv_heads=2, head_dim=64, page_size=16, dtype=dtype,
                      min_l2_multiple=0, device="cpu", seed=0)


@pytest.fixture
def strict(monkeypatch):
    """Torch rows compute with torch's own rounding: the interpreter's bf16 allowance is off."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)


# ---- the systematic-error criterion ----------------------------------------------------------


def test_error_figures_of_a_scaled_and_an_offset_tensor():
    ref = torch.randn(4096, dtype=torch.float64)
    f = error_figures(ref * 1.01, ref)
    assert f.scale == pytest.approx(1.01, rel=1e-12)
    g = error_figures(ref + 0.02 * ref.abs().mean(), ref)
    assert g.bias == pytest.approx(0.02, rel=1e-9)
    assert f.max_rel == pytest.approx(0.01, rel=1e-9)
    assert error_figures(torch.zeros(3), torch.zeros(3)).scale is None


def test_verify_unbiased_names_the_figure_and_bad_arguments_are_refused():
    ref = torch.randn(2048)
    with pytest.raises(VerificationError, match="least-squares scale 1.005"):
        verify_unbiased("x", ref * 1.005, ref, tol=SYSTEMATIC_TOLERANCE["bf16"])
    with pytest.raises(ValueError, match="tol must be a finite number"):
        verify_unbiased("x", ref, ref, tol=-1.0)
    with pytest.raises(ValueError, match="float tensors"):
        error_figures(torch.zeros(3, dtype=torch.int32), torch.zeros(3, dtype=torch.int32))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("plant", ["scaled", "biased", "one_page_less"])
def test_planted_systematic_errors_fail_the_decode_check(strict, dtype, plant):
    pool = _pool(dtype)
    q = make_decode_query(pool, 8, seed=1)
    wrong = getattr(planted, plant)(paged_decode_gather_sdpa)
    with pytest.raises(VerificationError):
        check_paged_decode(wrong, pool, q)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_torch_decode_row_passes_the_criterion(strict, dtype):
    pool = _pool(dtype)
    q = make_decode_query(pool, 8, seed=1)
    assert check_paged_decode(paged_decode_gather_sdpa, pool, q) < 0.05


def test_before_the_criterion_a_scaled_bf16_output_passed_the_elementwise_tolerances(strict):
    """The failure the criterion exists for: x1.005 at bf16 is inside rtol/atol."""
    from kvbench.harness.verify import verify
    from kvbench.ops.paged_decode import ATOL, RTOL, paged_decode_ref

    pool = _pool("bf16")
    q = make_decode_query(pool, 8, seed=1)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    out = planted.scaled(paged_decode_gather_sdpa)(*args, **kw)
    verify("elementwise only", out, paged_decode_ref(*args, **kw), rtol=RTOL["bf16"],
           atol=ATOL["bf16"])  # passes: the gap the criterion closes


def test_the_triton_interpreter_truncates_fp32_to_bf16():
    """Why bf16 gets INTERPRETER_BF16_SYSTEMATIC_TOLERANCE under the interpreter: if this ever
    fails, the interpreter rounds to nearest and the allowance must go."""
    import os

    import triton
    import triton.language as tl

    if os.environ.get("TRITON_INTERPRET") != "1" or torch.cuda.is_available():
        pytest.skip("a fact about the CPU interpreter")

    @triton.jit
    def to_bf16(x, y, n: tl.constexpr):
        o = tl.arange(0, n)
        tl.store(y + o, tl.load(x + o).to(tl.bfloat16))

    x = torch.randn(1024, generator=torch.Generator().manual_seed(0))
    y = torch.empty(1024, dtype=torch.bfloat16)
    to_bf16[(1,)](x, y, n=1024)
    assert bool((y.float().abs() <= x.abs()).all())
    assert not torch.equal(y, x.to(torch.bfloat16))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("row", ["triton/single_pass", "triton/split_kv"])
def test_the_interpreted_triton_decode_rows_pass_the_criterion(dtype, row):
    from kvbench.dispatch.registry import REGISTRY

    if torch.cuda.is_available():
        pytest.skip("CPU interpreter test; the GPU test covers the compiled kernels")
    fn = REGISTRY.get("paged_decode", row).load()
    for lens in ((1, 17, 40), (300, 77)):
        pool = _pool(dtype, lens)
        check_paged_decode(fn, pool, make_decode_query(pool, 8, seed=1))


# ---- the timed calls -------------------------------------------------------------------------


def _gather_problem():
    kv = build_gather_pool(512, device="cpu", seed=0)
    pt = build_page_table_flat([200], 512, seed=1, device="cpu")
    return kv, pt


@pytest.mark.parametrize("clone", [False, True])
def test_a_memoizing_gather_gets_no_number(clone):
    kv, pt = _gather_problem()
    fn = planted.memoizing(gather_fp8_torch, clone=clone)
    check_kv_gather_fp8(fn, kv, pt, 8)  # the pre-timing check passes: first call is real
    call = lambda: fn(kv, pt, extra_rows=8)
    bench(call, repeat=5)  # without a proof it gets a number: the hole being closed
    before = pt.clone()
    with pytest.raises(VerificationError, match="timed call"):
        bench(call, repeat=5, proof=proof_kv_gather_fp8(fn, kv, pt, 8))
    assert torch.equal(pt, before), "the proof's perturbation must be undone on failure too"


def test_an_honest_gather_keeps_its_number_and_records_its_error():
    kv, pt = _gather_problem()
    before = pt.clone()
    t = bench(lambda: gather_fp8_torch(kv, pt, extra_rows=8), repeat=5,
              proof=proof_kv_gather_fp8(gather_fp8_torch, kv, pt, 8))
    assert t.median_us > 0 and t.proof["max_abs"] == 0.0 and t.proof["scale"] == 1.0
    assert torch.equal(pt, before)


@pytest.mark.parametrize("plant", ["memoizing", "skip_after_first"])
def test_a_decode_that_stops_working_after_its_first_call_gets_no_number(strict, plant):
    pool = _pool("fp16")
    q = make_decode_query(pool, 8, seed=1)
    fn = getattr(planted, plant)(paged_decode_gather_sdpa)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    check_paged_decode(fn, pool, q)
    q0 = q.clone()
    with pytest.raises(VerificationError):
        bench(lambda: fn(*args, **kw), repeat=4, proof=proof_paged_decode(fn, pool, q))
    assert torch.equal(q, q0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_torch_decode_row_keeps_its_number_with_the_proof(strict, dtype):
    pool = _pool(dtype)
    q = make_decode_query(pool, 8, seed=1)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    t = bench(lambda: paged_decode_gather_sdpa(*args, **kw), repeat=3,
              proof=proof_paged_decode(paged_decode_gather_sdpa, pool, q))
    assert abs(t.proof["scale"] - 1) < SYSTEMATIC_TOLERANCE[{"bf16": "bf16"}.get(dtype, "fp16")]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_writer_that_skips_after_its_first_call_gets_no_number(dtype):
    pool = _pool(dtype, (64, 64))
    k, v, slots = make_write_inputs(pool, 24, seed=0)
    args = (k, v, pool.k_cache, pool.v_cache, slots)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    fn = planted.write_skip_after_first(kv_write_torch)
    check_kv_write(fn, pool, k, v, slots)
    with pytest.raises(VerificationError, match="timed call"):
        bench(lambda: fn(*args, **kw), repeat=4, proof=proof_kv_write(fn, pool, k, v, slots))
    t = bench(lambda: kv_write_torch(*args, **kw), repeat=4,
              proof=proof_kv_write(kv_write_torch, pool, k, v, slots))
    assert t.proof["max_abs"] == 0.0


def test_proof_arguments_are_checked_and_poison_fills_what_no_kernel_writes():
    with pytest.raises(ValueError, match="proof must be None or a harness.proof.TimedProof"):
        bench(lambda: None, repeat=1, proof=object())
    with pytest.raises(ValueError, match="TimedProof.verify must be callable"):
        TimedProof(lambda _: None, None)
    f, b = torch.zeros(4, dtype=torch.bfloat16), torch.zeros(4, dtype=torch.float8_e4m3fn)
    poison_((f, b))
    assert bool(f.isnan().all()) and bool((b.view(torch.uint8) == 0xFF).all())


# ---- the same proof in `kvbench tune` and `kvbench table` -----------------------------------


def test_tune_times_with_the_proof(strict):
    from kvbench.measure import pipeline
    from kvbench.measure.tune import TuneCase, _inputs

    case = TuneCase("kv_gather_fp8", "t", "fp8", {"kv_len": 128, "pool_tokens": 512,
                                                 "extra_rows": 4})
    inputs, release = _inputs(case, torch.device("cpu"))
    assert pipeline.time_call(inputs, gather_fp8_torch).proof["max_abs"] == 0.0
    fn = planted.memoizing(gather_fp8_torch)
    pipeline.check(inputs, fn)
    with pytest.raises(VerificationError, match="timed call"):
        pipeline.time_call(inputs, fn)
    release()


def test_table_rows_record_the_error_of_the_timed_call(strict):
    from kvbench.measure import table as tbl
    from kvbench.ops.kv_gather_fp8 import gather_inputs

    kv, pt = _gather_problem()
    t = tbl.Table("kv_gather_fp8")
    rows = tbl._measured_rows(t, gather_inputs(kv, pt, 8), "torch/gather", "c", gather_fp8_torch)
    assert rows and t.errors["torch/gather @ c"]["scale"] == 1.0


# ---- plausibility ---------------------------------------------------------------------------


def test_a_row_far_above_the_measured_ceiling_is_implausible_on_a_cpu():
    from kvbench.harness import Row, Work, device_peaks, report, violations
    from kvbench.harness.calibrate import Ceilings

    peaks = device_peaks("cpu")  # no spec peaks on a CPU: the ceiling is the only bound
    ceil = Ceilings("cpu", copy_gbps=6.0, read_gbps=5.5, write_gbps=4.0, measured_at="t",
                    torch="x", triton="y")
    memo = Row("torch/gather", "kv8k", 47.0, Work(moved=11.2e6))  # 238 GB/s
    honest = Row("torch/gather", "kv8k", 40_000.0, Work(moved=11.2e6))
    close = Row("torch/gather", "kv8k", 11.2e6 / 6.2e3, Work(moved=11.2e6))  # 1.03x copy
    assert violations([honest, close], peaks, ceil) == []
    (line,) = violations([memo], peaks, ceil)
    assert line.startswith("IMPLAUSIBLE torch/gather | kv8k") and "39.72x the best ceiling" in line
    assert violations([memo], peaks) == []  # without ceilings the CPU had no bound at all
    text = report([memo], peaks=peaks, ceilings=ceil, file=None)
    assert "IMPLAUSIBLE" in text


def test_the_suite_refuses_an_implausible_number(monkeypatch):
    """A timing implying far more than the CPU's measured copy ceiling gets no number in the
    asv suite (it goes through the pipeline's plausibility judgement)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from benchmarks import _common as c
    from kvbench.harness import bench
    from kvbench.harness.calibrate import Ceilings
    from kvbench.measure import pipeline
    from kvbench.ops.kv_gather_fp8 import gather_inputs

    kv, pt = _gather_problem()
    inputs = gather_inputs(kv, pt, 8)
    fast = bench(lambda: None, repeat=3)  # ~1 us for the gather's bytes: far above 6 GB/s
    monkeypatch.setattr(pipeline, "time_call", lambda *a, **k: fast)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    worker = c.worker()
    worker._ceilings = Ceilings("cpu", 6.0, 5.5, 4.0, "t", "x", "y")
    with pytest.raises(pipeline.Implausible, match="IMPLAUSIBLE .* a measurement bug"):
        worker.measure_case(inputs, "torch/gather", "cpu", {})


def test_bench_kernel_refuses_a_cpu_device():
    from kvbench.harness import bench_kernel

    with pytest.raises(ValueError, match="bench_kernel needs a CUDA device"):
        bench_kernel(lambda: None, device="cpu")


def test_bench_kernel_reads_device_time_without_touching_the_deprecated_cuda_time():
    """torch >= 2.6 events carry device_time and warn when cuda_time is read; older ones
    carry cuda_time only. The kernel time reads the first where it exists, so a table run
    prints no deprecation warning per profiled call."""
    import warnings

    from kvbench.harness.timers import _kernel_us

    class Current:
        device_time = 12.5

        @property
        def cuda_time(self):
            warnings.warn("`cuda_time` is deprecated", FutureWarning, stacklevel=2)
            return self.device_time

    class Old:
        cuda_time = 7.0

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _kernel_us(Current()) == 12.5
    assert _kernel_us(Old()) == 7.0
    assert _kernel_us(object()) == 0


def test_kernel_time_is_the_union_of_a_calls_kernel_intervals():
    """Kernels one after another count their durations; a kernel launched early (a PDL
    reduce waiting on the main kernel, a second stream) counts only the time it adds; one
    inside another adds nothing; gaps between kernels are not kernel time."""
    from types import SimpleNamespace

    from kvbench.harness.timers import _busy_us

    def kernel(start, end):
        return SimpleNamespace(time_range=SimpleNamespace(start=start, end=end),
                               device_time=end - start)

    serial = [kernel(0.0, 10.0), kernel(12.0, 15.0)]
    assert _busy_us(serial) == 13.0  # the 2 us gap is not kernel time
    pdl = [kernel(0.0, 100.0), kernel(5.0, 108.0)]  # launched early, waits, then reduces
    assert _busy_us(pdl) == 108.0  # summed durations would read 203
    nested = [kernel(0.0, 50.0), kernel(10.0, 20.0), kernel(60.0, 61.0)]
    assert _busy_us(list(reversed(nested))) == 51.0
    no_range = SimpleNamespace(device_time=4.0)
    assert _busy_us([no_range, kernel(0.0, 1.0)]) == 5.0
