"""kv_write: scatter new K/V rows into the fragmented paged pool, prefill vs decode.

Prefill and decode are different operations on one kernel, not two points on a curve:
prefill_16k (one sequence's 16384 tokens) is a bandwidth kernel; decode_64 (one new token
for each of 64 sequences) is launch-bound, where GB/s means little and the latency series
is the one to read. fp8 writes quantize on the fly (e4m3 bytes + caller-side scales) and
move half the bytes: a different row, not a dtype axis.

Timer: bench() - writing the same rows to the same slots again is idempotent. Each case goes
through the measuring pipeline: the row asserted, the rows read back through the destination
slots (check_kv_write) on the fragmented layout, then timed with the last call verified.
"""

from __future__ import annotations

from typing import ClassVar

from . import _common as c

OP = "kv_write"
SELECTORS = ["auto", "triton/scatter", "torch/index_copy"]
DTYPES = ["fp16", "bf16", "fp8"]
#: case -> (num_seqs, tokens per sequence in the pool, tokens written, pool storage, slot
#: order). "scattered": slots drawn at random from the sequences' (fragmented) pages; "pages":
#: a prefill's order, page after page (kvbench.ops.kv_write.make_write_inputs). On a GPU the pool
#: itself is >= 8x L2. prefill_16k_v_dim_major tracks the write side of the dim-major V pages that
#: the fp8 decode reads fastest (docs/decisions.md, "Dim-major V writes"): its 16-byte stores
#: need a prefill's page order.
CASES = {
    "prefill_16k": (1, 16384, 16384, "combined", "scattered"),
    "decode_64": (64, 64, 64, "combined", "scattered"),
    "prefill_16k_v_dim_major": (1, 16384, 16384, "v_dim_major", "pages"),
}
CPU_CASES = ("decode_64",)
#: KVWrite's rows sample to the suite's cap (no adaptive stop): a row stopped at +-0.5% moves
#: more between commits than the 1% the suite keeps for GPU series, one sampled to the cap
#: does not (docs/history.md, "Cost per commit").
STOP_CI = None


def _measure(w: c.Worker, dev: str, pool, n: int, order: str, keys: list, results: dict) -> None:
    op = c.need("kvbench.ops.kv_write", "write_inputs")
    inputs = op.write_inputs(pool, n, seed=0, order=order)
    timings: dict = {}
    w.run_cases(keys, lambda key: w.measure_case(inputs, key[0], dev, timings), results)


def measure(w: c.Worker) -> dict:
    """Every (selector, dtype, case) of KVWrite, measured in this one process."""
    results: dict = {}
    dev = w.prepare_process(BENCH_STOP_CI=STOP_CI)
    for case, (num_seqs, seq_len, n, storage, order) in CASES.items():
        for dtype in DTYPES:
            keys = [(s, dtype, case) for s in SELECTORS]
            if dev == "cpu" and case not in CPU_CASES:
                c.skip_all(keys, f"{case} is a GPU-size case; a CPU runs {', '.join(CPU_CASES)}",
                           results)
                continue

            def build(num_seqs=num_seqs, seq_len=seq_len, dtype=dtype, storage=storage):
                op = c.need("kvbench.ops.paged_decode", "decode_pool")
                return op.decode_pool(num_seqs, seq_len, dtype, dev, storage=storage, seed=0)

            w.run_group(keys, build,
                        lambda pool, n=n, order=order, keys=keys: _measure(
                            w, dev, pool, n, order, keys, results),
                        results, release=c.release_pool)
    return results


class KVWrite(c._WithGbps):
    """Scatter latency (regression series) and GB/s (display) per selector x dtype x case."""

    params: ClassVar[list] = [SELECTORS, DTYPES, list(CASES)]
    param_names: ClassVar[list] = ["selector", "dtype", "case"]

    setup_cache = c.setup_cache_suite
