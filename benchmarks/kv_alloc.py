"""kv_alloc: KVCacheManager.alloc(n) in each allocator state, timed as host wait.

The largest cost of a decode step can sit here: the bitmap allocator's search
(`nonzero().item()`) once one finished request invalidates the bump cursor, ~11x its fast
path and invisible to a CUDA-event timer. So: bench_host (perf_counter + trailing sync), a
reset that re-establishes the state through the public API before every call
(prepare_state: free_all alone would restore the bump cursor and time the fast path in all
three rows), the state in the case label, and the invariant (n distinct rows that were free)
asserted per state before timing. Host-side costs are real on a CPU too, so every case runs
everywhere; CPU and GPU rows differ in device syncs, not in meaning.
"""

from __future__ import annotations

from typing import ClassVar

from . import _common as c

OP = "kv_alloc"
SELECTORS = ["auto", "torch/legacy", "host/freelist"]
STATES = ["bump", "run_search", "fragmented"]
NS = [1, 64]
#: 65536 rows: one layer's rows for 64k cached tokens. The legacy search's host stall is
#: sync-bound on a GPU; on a CPU its bitmap scan grows with the count (keep CPU runs short).
NUM_ROWS = 1 << 16


def measure(w: c.Worker) -> dict:
    """Every (selector, state, n) of KVAlloc, measured in this one process (each case on the
    host's fastest core, gated by its canary, the least of HOST_REPEATS measurements)."""
    results: dict = {}
    dev = w.prepare_process()
    w.pin_host_process()
    for selector in SELECTORS:
        keys = [(selector, s, n) for s in STATES for n in NS]
        w.run_group(keys, lambda: None,
                    lambda _, keys=keys: w.run_cases(keys, lambda key: _one(w, dev, key), results),
                    results)
    return results


def _one(w: c.Worker, dev: str, key: tuple) -> dict:
    selector, state, n = key
    op = c.need("kvbench.ops.kv_alloc", "alloc_inputs")
    inputs = op.alloc_inputs(NUM_ROWS, n, dev, states=(state,))
    return w.measure_host_case(
        lambda: w.measure_case(inputs, selector, dev, {}, host_repeats=c.HOST_REPEATS))


class KVAlloc(c._Suite):
    """Host wait of alloc(n) per selector x state x n (latency only: no bytes to score)."""

    params: ClassVar[list] = [SELECTORS, STATES, NS]
    param_names: ClassVar[list] = ["selector", "state", "n"]

    setup_cache = c.setup_cache_suite
