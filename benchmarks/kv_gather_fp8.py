"""kv_gather_fp8: gather fp8 KV rows through a flat page table, dequant/requant, pad rows.

Seed 001 geometry (DeepSeek-V3.2 / GLM sparse-prefill): 656-byte cache rows (512 fp8 nope +
4 fp32 group scales + 64 bf16 rope) become 576-byte fp8 rows, 64-token pages in random order,
plus 2048 zero landing-pad rows. Cases name the gathered rows: kv8k = 8192, kv64k = 65536.
The op is fp8 only, so there is no dtype axis.

Timer: bench() (idempotent; L2 flushed). The legacy row's torch.zeros of the destination is
part of that implementation and is timed; the theoretical bytes count the payload only, so
its extra traffic shows as lower GB/s. Each case is checked bit-exact against the reference
(check_kv_gather_fp8) before timing.
"""

from __future__ import annotations

import math
from typing import ClassVar

from . import _common as c

OP = "kv_gather_fp8"
SELECTORS = ["auto", "triton/legacy", "triton/vectorized", "triton/cached", "torch/gather"]
CASES = {"kv8k": 8192, "kv64k": 65536}
CPU_CASES = ("kv8k",)
EXTRA_ROWS = 2048
PAGE_SIZE = 64
ROW_BYTES = 656
#: seed 001's pool: 131072 tokens (2x the largest case); on a GPU also >= 8x L2.
MIN_POOL_TOKENS = 131072


def _builders():
    """build_gather_pool / build_page_table_flat, wherever this commit keeps them."""
    for module in ("kvbench.kernels.kv_gather_fp8", "kvbench.fixtures.gather_pool"):
        try:
            mod = c.need(module, "build_gather_pool", "build_page_table_flat")
        except c.Skip:
            continue
        return mod.build_gather_pool, mod.build_page_table_flat
    raise c.Skip("this commit has no build_gather_pool / build_page_table_flat")


def _pool_tokens(dev: str, kv_len: int) -> int:
    if dev == "cpu":
        return 2 * kv_len
    import torch

    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    tokens = max(MIN_POOL_TOKENS, math.ceil(8 * l2 / ROW_BYTES))
    return -(-tokens // PAGE_SIZE) * PAGE_SIZE


class _Problem:
    """The gather input of one case: the shared pool + this case's page table."""

    def __init__(self, kv_cache, kv_len: int, dev: str) -> None:
        _, build_table = _builders()
        self.kv_len = kv_len
        self.kv_cache = kv_cache
        tokens = kv_cache.shape[0]
        self.page_table = build_table([kv_len], tokens, page_size=PAGE_SIZE, seed=1, device=dev)

    def free(self) -> None:
        self.kv_cache = self.page_table = None


def _measure(dev: str, prob: _Problem, keys: list, results: dict) -> None:
    ops = c.need("kvbench.ops", "kv_gather_fp8", "last_selection")
    checks = c.need("kvbench.checks", "check_kv_gather_fp8")
    harness = c.need("kvbench.harness", "bench")
    theory = c.need("kvbench.theory", "kv_gather_fp8_work")
    work = theory.kv_gather_fp8_work(prob.kv_len, EXTRA_ROWS)
    kv_cache, table = prob.kv_cache, prob.page_table

    timings: dict = {}

    def one(key: tuple) -> dict:
        return c.check_then_time(
            OP, key[0], dev,
            check=lambda: checks.check_kv_gather_fp8(ops.kv_gather_fp8, kv_cache, table,
                                                     EXTRA_ROWS),
            last_selection=ops.last_selection, timings=timings, moved_bytes=work.moved,
            time_row=lambda kernel: harness.bench(
                lambda: kernel(kv_cache, table, extra_rows=EXTRA_ROWS), device=kv_cache.device,
                **c.proof_kwargs(checks, "proof_kv_gather_fp8", kernel, kv_cache, table,
                                 EXTRA_ROWS)))

    try:
        c.run_cases(keys, one, results)
    finally:
        c.set_selector(OP, c.AUTO)


def measure() -> dict:
    """Every (selector, case) of KVGatherFp8, measured in this one process.

    Building a pool >= 8x L2 quantizes ~0.8M rows on the host (seconds), so cases that need
    the same pool size share one pool; each case gets its own page table.
    """
    results: dict = {}
    dev = c.prepare_process()
    pools: dict[int, object] = {}

    def problem(kv_len: int) -> _Problem:
        build_pool, _ = _builders()
        tokens = _pool_tokens(dev, kv_len)
        if tokens not in pools:
            pools.clear()  # at most one pool alive
            c.free_device_memory()
            pools[tokens] = build_pool(tokens, device=dev, seed=0)
        return _Problem(pools[tokens], kv_len, dev)

    for case, kv_len in CASES.items():
        keys = [(s, case) for s in SELECTORS]
        if dev == "cpu" and case not in CPU_CASES:
            c.skip_all(keys, f"{case} is a GPU-size case; a CPU runs {', '.join(CPU_CASES)}",
                       results)
            continue
        c.run_group(keys, lambda kv_len=kv_len: problem(kv_len),
                    lambda prob, keys=keys: _measure(dev, prob, keys, results), results,
                    release=c.release_pool)
    pools.clear()
    c.free_device_memory()
    return results


class KVGatherFp8(c._WithGbps):
    """Gather latency (regression series) and GB/s (display) per selector x case."""

    params: ClassVar[list] = [SELECTORS, list(CASES)]
    param_names: ClassVar[list] = ["selector", "case"]

    setup_cache = c.setup_cache_kv_ops
