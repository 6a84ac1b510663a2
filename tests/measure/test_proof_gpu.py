"""On the GPU: the compiled kernels pass the systematic-error criterion and their timed proof
at the suite's shapes, and a planted memoizing row fails there too (`pytest -m gpu`)."""

from __future__ import annotations

import pytest
import torch

from kvbench.dispatch.registry import REGISTRY
from kvbench.fixtures.pool import paged_pool
from kvbench.harness import bench
from kvbench.harness.verify import VerificationError
from kvbench.ops.paged_decode import check_paged_decode, make_decode_query, proof_paged_decode

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("dtype", ["fp16", "bf16", "fp8"])
@pytest.mark.parametrize("batch,context", [(1, 4096), (8, 4096), (64, 8192)])
def test_every_decode_row_passes_the_criterion_and_its_timed_proof(dtype, batch, context):
    storage = "v_dim_major" if dtype == "fp8" else "combined"
    pool = paged_pool(batch, context, kv_heads=8, head_dim=128, page_size=16, dtype=dtype,
                      storage=storage, min_l2_multiple=0, device="cuda", seed=0)
    q = make_decode_query(pool, 32, seed=0)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    ran = []
    for name in REGISTRY.spec_names("paged_decode"):
        fn = REGISTRY.get("paged_decode", name).load()
        try:
            fn(*args, **kw)
        except (ValueError, RuntimeError):
            continue  # a row that does not serve this layout/dtype
        check_paged_decode(fn, pool, q)
        t = bench(lambda fn=fn: fn(*args, **kw), repeat=20,
                  proof=proof_paged_decode(fn, pool, q))
        print(dtype, batch, context, name, t.median_us, t.proof)
        ran.append(name)
    assert ran


def test_a_memoizing_decode_fails_its_timed_proof_on_the_gpu():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import planted

    pool = paged_pool(8, 4096, kv_heads=8, head_dim=128, page_size=16, dtype="fp16",
                      min_l2_multiple=0, device="cuda", seed=0)
    q = make_decode_query(pool, 32, seed=0)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    fn = planted.memoizing(REGISTRY.get("paged_decode", "triton/split_kv").load())
    check_paged_decode(fn, pool, q)
    with pytest.raises(VerificationError):
        bench(lambda: fn(*args, **kw), repeat=20, proof=proof_paged_decode(fn, pool, q))
    assert torch.cuda.is_available()


def test_bench_kernel_reads_kernel_time_below_the_event_time_of_a_small_kernel():
    import warnings

    from kvbench.harness import bench_kernel

    x = torch.zeros(1 << 20, device="cuda")
    ev = bench(x.zero_)
    with warnings.catch_warnings():  # neither torch's per-session warnings reaches a table
        warnings.filterwarnings("error", message=".*Profiler clears events")
        warnings.filterwarnings("error", message=".*cuda_time.* is deprecated")
        kt = bench_kernel(x.zero_)
    assert kt.timer == "bench_kernel" and 0 < kt.median_us < ev.median_us


def test_bench_kernel_counts_kernels_running_side_by_side_once():
    """Two spin kernels of one call on two streams run at the same time: the call's kernel
    time is one kernel's, inside the events' window, where the sum of their durations would
    read twice the events (a PDL-launched reduce overlaps its main kernel the same way)."""
    from kvbench.harness import bench_kernel

    side = torch.cuda.Stream()

    def two_streams():
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            torch.cuda._sleep(1_000_000)
        torch.cuda._sleep(1_000_000)
        main.wait_stream(side)

    ev = bench(two_streams, repeat=20)
    kt = bench_kernel(two_streams, repeat=20)
    assert 0.5 * ev.median_us < kt.median_us <= ev.median_us * 1.05, (kt, ev)
