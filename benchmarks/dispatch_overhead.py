"""dispatch_overhead: the host cost kvbench.ops adds to every call, per op.

Three paths on the smallest problem of each op (auto selector, decision already cached):
  dispatch     dispatch(op, ...) alone: the cached-decision lookup
  ops_call     the public op (kvbench.ops.<op>): tags/bucket from the tensors + lookup + kernel
  direct_call  the selected row's function (Selection.target) with the same arguments
ops_call - direct_call is what dispatch costs a caller; at decode sizes kernels run for a few
microseconds, so this is the number that says whether dispatch belongs on the hot path.
Timer: bench_host (perf_counter + trailing sync): the cost is the host's. Host costs are
real on a CPU too, so this runs everywhere (the torch rows serve there).
"""

from __future__ import annotations

from typing import ClassVar

from . import _common as c

OPS = ["paged_decode", "kv_write", "kv_gather_fp8"]
PATHS = ["dispatch", "ops_call", "direct_call"]


def _decode_call(dev: str, pool_mod, checks):
    pool = pool_mod.paged_pool(1, 16, min_l2_multiple=0, device=dev, seed=0)
    q = checks.make_decode_query(pool, 32, seed=0)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    return pool, args, {"k_scale": pool.k_scale, "v_scale": pool.v_scale}


def _write_call(dev: str, pool_mod, checks):
    pool = pool_mod.paged_pool(1, 16, min_l2_multiple=0, device=dev, seed=0)
    k, v, slots = checks.make_write_inputs(pool, 1, seed=0)
    args = (k, v, pool.k_cache, pool.v_cache, slots)
    return pool, args, {"k_scale": pool.k_scale, "v_scale": pool.v_scale}


def _gather_call(dev: str, pool_mod, checks):
    from .kv_gather_fp8 import _builders

    build_pool, build_table = _builders()
    kv_cache = build_pool(1024, device=dev, seed=0)
    table = build_table([64], 1024, page_size=64, seed=1, device=dev)
    return None, (kv_cache, table), {"extra_rows": 0}


_CALLS = {"paged_decode": _decode_call, "kv_write": _write_call, "kv_gather_fp8": _gather_call}


def _measure_op(dev: str, op: str, results: dict) -> None:
    ops = c.need("kvbench.ops", op, "last_selection")
    dispatch = c.need("kvbench.dispatch", "dispatch").dispatch
    harness = c.need("kvbench.harness", "bench_host")
    pool_mod = c.need("kvbench.fixtures.pool", "paged_pool")
    checks = c.need("kvbench.checks", "make_decode_query", "make_write_inputs")
    c.set_selector(op, c.AUTO)
    pool, args, kwargs = _CALLS[op](dev, pool_mod, checks)
    public = getattr(ops, op)
    try:
        public(*args, **kwargs)  # makes (and caches) the decision
        sel = ops.last_selection(op)
        calls = {
            "dispatch": lambda: dispatch(op, dtype=sel.dtype, tags=sel.tags, shape=sel.shape,
                                         device=sel.device),
            "ops_call": lambda: public(*args, **kwargs),
            "direct_call": lambda: sel.target(*args, **kwargs),
        }

        def one(key: tuple) -> dict:
            timing = c.least_of(lambda: harness.bench_host(calls[key[1]], device=sel.device))
            return c.measured(timing, None, selected=sel.spec.name, max_abs_diff=None,
                              explain=sel.explain() if key[1] == "dispatch" else "")

        c.run_cases([(op, p) for p in PATHS], one, results)
    finally:
        if pool is not None:
            pool.free()


def measure() -> dict:
    """Every (op, path) of DispatchOverhead, measured in this one process."""
    results: dict = {}
    dev = c.prepare_process()
    c.pin_host_process()
    for op in OPS:
        keys = [(op, p) for p in PATHS]
        c.run_group(keys, lambda: None,
                    lambda _, op=op: _measure_op(dev, op, results), results)
    return results


class DispatchOverhead(c._Suite):
    """Host time of dispatch / the public op / the bare row, per op (auto selector)."""

    params: ClassVar[list] = [OPS, PATHS]
    param_names: ClassVar[list] = ["op", "path"]

    setup_cache = c.setup_cache_host
