"""dispatch_overhead: the host cost the public entry points add to every call, per op.

Three paths on the smallest problem of each op (auto selector, decision already cached):
  dispatch     dispatch(op, ...) alone: the cached-decision lookup
  ops_call     the public op (kvbench.<op>): tags/bucket from the tensors + lookup + kernel
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


def _inputs(dev: str, op: str):
    """(the op's smallest inputs, what to free after): one 16-token sequence (decode, write),
    a 64-row gather from a 1024-token pool."""
    if op == "kv_gather_fp8":
        fixture = c.need("kvbench.fixtures.gather_pool", "build_gather_pool",
                         "build_page_table_flat")
        gather = c.need("kvbench.ops.kv_gather_fp8", "gather_inputs")
        kv_cache = fixture.build_gather_pool(1024, device=dev, seed=0)
        table = fixture.build_page_table_flat([64], 1024, page_size=64, seed=1, device=dev)
        return gather.gather_inputs(kv_cache, table, 0), None
    decode = c.need("kvbench.ops.paged_decode", "decode_pool", "decode_inputs")
    pool = decode.decode_pool(1, 16, "fp16", dev, min_l2_multiple=0, seed=0)
    if op == "paged_decode":
        return decode.decode_inputs(pool, seed=0), pool
    write = c.need("kvbench.ops.kv_write", "write_inputs")
    return write.write_inputs(pool, 1, seed=0), pool


def _measure_op(w: c.Worker, dev: str, op: str, results: dict) -> None:
    public = getattr(c.need("kvbench", op), op)  # the engine-facing entry point
    # kvbench.api since the entry points moved above dispatch; kvbench.ops.common before.
    last_selection = c.need_first([("kvbench.api", ("last_selection",)),
                                   ("kvbench.ops.common", ("last_selection",))]).last_selection
    dispatch = c.need("kvbench.dispatch", "dispatch").dispatch
    harness = c.need("kvbench.harness", "bench_host")
    pipeline = c.need("kvbench.measure.pipeline", "least_median")
    c.set_selector(op, c.AUTO)
    inputs, pool = _inputs(dev, op)
    args, kwargs = inputs.args, inputs.kwargs
    try:
        public(*args, **kwargs)  # makes (and caches) the decision
        sel = last_selection(op)
        calls = {
            "dispatch": lambda: dispatch(op, dtype=sel.dtype, tags=sel.tags, shape=sel.shape,
                                         device=sel.device),
            "ops_call": lambda: public(*args, **kwargs),
            "direct_call": lambda: sel.target(*args, **kwargs),
        }

        def once(path: str) -> dict:
            timing = pipeline.least_median(
                lambda: harness.bench_host(calls[path], device=sel.device), c.HOST_REPEATS)
            return c.measured(timing, None, selected=sel.spec.name, max_abs_diff=None,
                              explain=sel.explain() if path == "dispatch" else "")

        def one(key: tuple) -> dict:
            return w.measure_host_case(lambda: once(key[1]))

        w.run_cases([(op, p) for p in PATHS], one, results)
    finally:
        if pool is not None:
            pool.free()


def measure(w: c.Worker) -> dict:
    """Every (op, path) of DispatchOverhead, measured in this one process."""
    results: dict = {}
    dev = w.prepare_process()
    w.pin_host_process()
    for op in OPS:
        keys = [(op, p) for p in PATHS]
        w.run_group(keys, lambda: None,
                    lambda _, op=op: _measure_op(w, dev, op, results), results)
    return results


class DispatchOverhead(c._Suite):
    """Host time of dispatch / the public op / the bare row, per op (auto selector)."""

    params: ClassVar[list] = [OPS, PATHS]
    param_names: ClassVar[list] = ["op", "path"]

    setup_cache = c.setup_cache_suite
