"""The op oracle, one module per op: its problem description, its geometry and cases, its
theoretical Work, its torch reference, its check, proof, golden check and tolerances.

    kvbench.ops.paged_decode    paged attention decode (fp16 / bf16 / fp8 KV)
    kvbench.ops.decode_geometry the model geometries decode is measured at (heads, head_dim,
                                page size, window, soft-cap), by name
    kvbench.ops.kv_write        scatter of new K/V rows into the paged cache
    kvbench.ops.kv_gather_fp8   fp8 KV row gather through a flat page table
    kvbench.ops.kv_alloc        the KV block allocator (its states, its invariant gate)
    kvbench.ops.keys            the problem keys: ops, layout tags, shape buckets
    kvbench.ops.common          what they share (Problem, OpInputs, the references' helpers)
                                and the correctness vocabulary (its docstring)

The layer sits below dispatch, which imports it; it imports nothing above kernels, harness,
fixtures and core. The engine-facing entry points that call dispatch are kvbench.api
(kvbench.paged_decode, kvbench.kv_write, kvbench.kv_gather_fp8, kvbench.KVCacheManager).
Importing an op module imports no Triton kernel code: dispatch loads a kernel row the first
time it is selected.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def op_module(op: str) -> ModuleType:
    """The module of `op` (kvbench.ops.<op>); ValueError naming the ops otherwise."""
    from kvbench.ops.keys import OPS

    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return importlib.import_module(f"kvbench.ops.{op}")
