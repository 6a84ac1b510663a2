"""One module per op: its problem key and public entry point, its geometry and cases, its
theoretical Work, its torch reference, its correctness check, proof and tolerances.

    kvbench.ops.paged_decode    paged attention decode (fp16 / bf16 / fp8 KV)
    kvbench.ops.kv_write        scatter of new K/V rows into the paged cache
    kvbench.ops.kv_gather_fp8   fp8 KV row gather through a flat page table
    kvbench.ops.kv_alloc        the KV block allocator (KVCacheManager)
    kvbench.ops.common          what they share (Problem, layout tags, last_selection)

The entry points are also kvbench.paged_decode, kvbench.kv_write, kvbench.kv_gather_fp8 and
kvbench.KVCacheManager. Importing an op module imports no kernel code: dispatch loads a
kernel row the first time it is selected.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def op_module(op: str) -> ModuleType:
    """The module of `op` (kvbench.ops.<op>); ValueError naming the ops otherwise."""
    from kvbench.dispatch.registry import OPS

    if op not in OPS:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return importlib.import_module(f"kvbench.ops.{op}")
