"""kv_gather_fp8: gather fp8 KV rows through a flat page table, dequant/requant, pad rows.

Geometry of the DeepSeek-V3.2 / GLM sparse-prefill (DSA) path on one rank: 656-byte cache
rows (512 fp8 nope + 4 fp32 group scales + 64 bf16 rope) become 576-byte fp8 rows, 64-token
pages in random order, plus 2048 zero landing-pad rows. Cases name the gathered rows:
kv8k = 8192, kv64k = 65536. The op is fp8 only, so there is no dtype axis.

Timer: bench() (idempotent; L2 flushed). The legacy row's torch.zeros of the destination is
part of that implementation and is timed; the theoretical bytes count the payload only, so
its extra traffic shows as lower GB/s. Each case is checked bit-exact against the reference
(check_kv_gather_fp8) before timing.
"""

from __future__ import annotations

from typing import ClassVar

from . import _common as c

OP = "kv_gather_fp8"
SELECTORS = ["auto", "triton/legacy", "triton/vectorized", "triton/cached", "torch/gather"]
CASES = {"kv8k": 8192, "kv64k": 65536}
CPU_CASES = ("kv8k",)
EXTRA_ROWS = 2048
PAGE_SIZE = 64


class _Problem:
    """One case's gather: the shared pool and the case's page table."""

    def __init__(self, kv_cache, kv_len: int, dev: str) -> None:
        fixture = c.need("kvbench.fixtures.gather_pool", "build_page_table_flat")
        self.kv_cache = kv_cache
        self.page_table = fixture.build_page_table_flat(
            [kv_len], kv_cache.shape[0], page_size=PAGE_SIZE, seed=1, device=dev)

    def free(self) -> None:
        self.kv_cache = self.page_table = None


def _measure(w: c.Worker, dev: str, prob: _Problem, keys: list, results: dict) -> None:
    op = c.need("kvbench.ops.kv_gather_fp8", "gather_inputs")
    inputs = op.gather_inputs(prob.kv_cache, prob.page_table, EXTRA_ROWS)
    timings: dict = {}
    w.run_cases(keys, lambda key: w.measure_case(inputs, key[0], dev, timings), results)


def measure(w: c.Worker) -> dict:
    """Every (selector, case) of KVGatherFp8, measured in this one process.

    A pool >= 8x L2 is hundreds of MB, so cases that need the same pool size share one pool;
    each case gets its own page table.
    """
    results: dict = {}
    dev = w.prepare_process()
    pools: dict[int, object] = {}

    def problem(kv_len: int) -> _Problem:
        fixture = c.need("kvbench.fixtures.gather_pool", "build_gather_pool", "gather_pool_tokens")
        tokens = fixture.gather_pool_tokens(kv_len, dev)  # 2x the case; on a GPU >= 8x L2
        if tokens not in pools:
            pools.clear()  # at most one pool alive
            c.free_device_memory()
            pools[tokens] = fixture.build_gather_pool(tokens, device=dev, seed=0)
        return _Problem(pools[tokens], kv_len, dev)

    for case, kv_len in CASES.items():
        keys = [(s, case) for s in SELECTORS]
        if dev == "cpu" and case not in CPU_CASES:
            c.skip_all(keys, f"{case} is a GPU-size case; a CPU runs {', '.join(CPU_CASES)}",
                       results)
            continue
        w.run_group(keys, lambda kv_len=kv_len: problem(kv_len),
                    lambda prob, keys=keys: _measure(w, dev, prob, keys, results), results,
                    release=c.release_pool)
    pools.clear()
    c.free_device_memory()
    return results


class KVGatherFp8(c._WithGbps):
    """Gather latency (regression series) and GB/s (display) per selector x case."""

    params: ClassVar[list] = [SELECTORS, list(CASES)]
    param_names: ClassVar[list] = ["selector", "case"]

    setup_cache = c.setup_cache_suite
