"""The problem keys dispatch decides on: the ops, the layout tags and the shape buckets.

An op call is described (kvbench.ops.<op>.describe_<op>) as (op, dtype name, layout tags,
shape, device); dispatch caches and ranks its decisions per shape bucket. Both halves are
facts about the problem, not about a kernel, so they live with the ops and dispatch imports
them (kvbench.dispatch.registry re-exports them).

Layout tags (derived from the actual inputs, never declared by a caller):
    "kv:paged"       caches are paged: [pages, page_size, kv_heads, head_dim] addressed
                     through a block table / slot mapping (gather: token rows of a paged pool
                     addressed through a flat page table)
    "kv:strided"     a cache tensor is a non-contiguous view (the combined per-layer buffer)
    "kv:fp8-scaled"  caller-side fp32 scales were passed with fp8 (uint8 e4m3) caches
    "kv:v-dim-major" the V cache's pages are dim-major (a page's slots of one (head, dim)
                     adjacent: the pool's storage="v_dim_major"), not token-major

Shape buckets (bucket(op, shape) -> str): decisions and perf-table entries are per bucket,
because the right row changes with occupancy and context length, not with every token.
    paged_decode   batch {1, 2-8, 9-32, 33+} x max context {<=1k, <=4k, <=16k, >16k}
                   (max context = block_table columns x page_size: a tensor shape, no sync)
    kv_write       decode (N <= 64 tokens: launch-bound) vs prefill (bandwidth-bound)
    kv_gather_fp8  kv_len {<=8k, <=32k, >32k}: one bucket around each context the fp8
                   gather is specified at (8k, 32k and 64k tokens)
    kv_alloc       n {1, 2-64, >64}

The bucket functions run on every entry-point call: names are precomputed, no allocation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench.core.env import SELECTOR_VARS

#: Every op, in the order of its selector variable (an op is its selector).
OPS: tuple[str, ...] = tuple(SELECTOR_VARS)

PAGED = "kv:paged"
STRIDED = "kv:strided"
FP8_SCALED = "kv:fp8-scaled"
V_DIM_MAJOR = "kv:v-dim-major"

#: (paged, strided, scaled, V dim-major) -> the frozen tag set, built once so a call
#: allocates none.
TAGS: dict[tuple[bool, bool, bool, bool], frozenset[str]] = {
    (p, s, f, d): frozenset(
        t for t, on in ((PAGED, p), (STRIDED, s), (FP8_SCALED, f), (V_DIM_MAJOR, d)) if on
    )
    for p in (False, True)
    for s in (False, True)
    for f in (False, True)
    for d in (False, True)
}

# ---- shape buckets -----------------------------------------------------------------------

#: The shape keys each op's bucket reads, in the order its bucket function takes them.
BUCKET_KEYS: dict[str, tuple[str, ...]] = {
    "paged_decode": ("batch", "max_context"),
    "kv_write": ("n",),
    "kv_gather_fp8": ("kv_len",),
    "kv_alloc": ("n",),
}

#: Bucket used when a problem comes without a shape (dispatch(shape=None)).
ANY_BUCKET = "any"


_BATCH_NAMES = ("1", "2-8", "9-32", "33+")
_CTX_NAMES = ("<=1k", "<=4k", "<=16k", ">16k")
_DECODE_NAMES = tuple(tuple(f"batch={b},ctx{c}" for c in _CTX_NAMES) for b in _BATCH_NAMES)


def decode_bucket(batch: int, max_context: int) -> str:
    """paged_decode bucket from the batch size and the longest context the block table holds."""
    b = 0 if batch <= 1 else 1 if batch <= 8 else 2 if batch <= 32 else 3
    c = 0 if max_context <= 1024 else 1 if max_context <= 4096 else 2 if max_context <= 16384 else 3
    return _DECODE_NAMES[b][c]


def write_bucket(n: int) -> str:
    """kv_write: a decode step's few tokens are launch-bound and a prefill's many are
    bandwidth-bound, so they are different operations for ranking."""
    return "decode" if n <= 64 else "prefill"


def gather_bucket(kv_len: int) -> str:
    if kv_len <= 8192:
        return "kv_len<=8k"
    if kv_len <= 32768:
        return "kv_len<=32k"
    return "kv_len>32k"


def alloc_bucket(n: int) -> str:
    if n <= 1:
        return "n=1"
    if n <= 64:
        return "n=2-64"
    return "n>64"


#: Every bucket of each op, in order (tune measures one case per bucket).
BUCKETS: dict[str, tuple[str, ...]] = {
    "paged_decode": tuple(
        decode_bucket(b, c) for b in (1, 8, 32, 64) for c in (1024, 4096, 16384, 32768)
    ),
    "kv_write": ("decode", "prefill"),
    "kv_gather_fp8": ("kv_len<=8k", "kv_len<=32k", "kv_len>32k"),
    "kv_alloc": ("n=1", "n=2-64", "n>64"),
}


def validate_op(op: str) -> str:
    """`op` itself; ValueError naming the known ops otherwise."""
    if op not in BUCKET_KEYS:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return op


def bucket(op: str, shape: Mapping[str, Any] | None) -> str:
    """The shape bucket of a problem; "any" without a shape. ValueError on unknown op/keys."""
    validate_op(op)
    if shape is None:
        return ANY_BUCKET
    keys = BUCKET_KEYS[op]
    missing = [k for k in keys if k not in shape]
    if missing:
        raise ValueError(
            f"shape for {op} lacks {missing}; bucketing needs {list(keys)}, got {sorted(shape)}"
        )
    values = [shape[k] for k in keys]
    for k, v in zip(keys, values, strict=True):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ValueError(f"shape[{k!r}] for {op} must be a non-negative int, got {v!r}")
    if op == "paged_decode":
        return decode_bucket(*values)
    if op == "kv_write":
        return write_bucket(*values)
    if op == "kv_gather_fp8":
        return gather_bucket(*values)
    return alloc_bucket(*values)
