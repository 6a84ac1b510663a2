"""Every KernelSpec row, and the shape buckets dispatch caches and ranks by.

Layout tags (what kvbench.ops derives from the actual inputs):
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
    kv_gather_fp8  kv_len {<=8k, <=32k, >32k} (the seed-001 scenarios 8k / 32k / 64k)
    kv_alloc       n {1, 2-64, >64}

Priorities encode the production default when nothing was measured: the row an engine would
ship ranks first, the fallback and the historical baseline after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench.core.env import SELECTOR_VARS
from kvbench.dispatch.spec import (
    KernelSpec,
    LayoutRequirement,
    Preference,
    any_device,
    cuda_sm90_with_nvcc,
    triton_device,
)

OPS: tuple[str, ...] = tuple(SELECTOR_VARS)

PAGED = "kv:paged"
STRIDED = "kv:strided"
FP8_SCALED = "kv:fp8-scaled"
V_DIM_MAJOR = "kv:v-dim-major"

# ---- shape buckets -----------------------------------------------------------------------

_BUCKET_KEYS: dict[str, tuple[str, ...]] = {
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
    """paged_decode bucket from the batch size and the longest context the block table holds.

    Names are precomputed: this runs on every kvbench.ops.paged_decode call.
    """
    b = 0 if batch <= 1 else 1 if batch <= 8 else 2 if batch <= 32 else 3
    c = 0 if max_context <= 1024 else 1 if max_context <= 4096 else 2 if max_context <= 16384 else 3
    return _DECODE_NAMES[b][c]


def write_bucket(n: int) -> str:
    """kv_write: decode (launch-bound, N <= 64) and prefill are different operations (seed 000)."""
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


#: The dtype each op is tuned and tracked at by default (`kvbench tune`; a stored perf-table
#: entry without its own "dtype" was measured at it): fp16 decode and write, the fp8 gather,
#: the allocator's int64 rows.
TUNED_DTYPE: dict[str, str] = {
    "paged_decode": "fp16", "kv_write": "fp16", "kv_gather_fp8": "fp8", "kv_alloc": "int64",
}


def bucket(op: str, shape: Mapping[str, Any] | None) -> str:
    """The shape bucket of a problem; "any" without a shape. ValueError on unknown op/keys."""
    check_op(op)
    if shape is None:
        return ANY_BUCKET
    keys = _BUCKET_KEYS[op]
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


def check_op(op: str) -> str:
    if op not in _BUCKET_KEYS:
        raise ValueError(f"unknown op {op!r}; known ops: {', '.join(OPS)}")
    return op


# ---- the registry object ------------------------------------------------------------------


class Registry:
    """An ordered set of KernelSpec rows, unique by (op, name).

    The module-level REGISTRY holds the real rows. Tests build their own (Registry() or
    REGISTRY.copy()) and make dispatch use it with kvbench.dispatch.core.using_registry().
    """

    def __init__(self, specs: tuple[KernelSpec, ...] | list[KernelSpec] = ()) -> None:
        self._rows: dict[str, dict[str, KernelSpec]] = {op: {} for op in OPS}
        for spec in specs:
            self.register(spec)

    def register(self, spec: KernelSpec, *, replace: bool = False) -> KernelSpec:
        if not isinstance(spec, KernelSpec):
            raise ValueError(  # noqa: TRY004 - one exception type for bad input
                f"register() takes a KernelSpec, got {type(spec).__name__}"
            )
        check_op(spec.op)
        rows = self._rows[spec.op]
        if spec.name in rows and not replace:
            raise ValueError(f"{spec.op} already has a row named {spec.name!r}")
        rows[spec.name] = spec
        return spec

    def specs(self, op: str) -> tuple[KernelSpec, ...]:
        """Rows of `op` in registration order."""
        return tuple(self._rows[check_op(op)].values())

    def spec_names(self, op: str) -> tuple[str, ...]:
        return tuple(self._rows[check_op(op)])

    def get(self, op: str, name: str) -> KernelSpec:
        """The row `name` of `op`; ValueError listing the valid names otherwise."""
        try:
            return self._rows[check_op(op)][name]
        except KeyError:
            raise ValueError(
                f"{op} has no row {name!r}; valid names: {', '.join(self.spec_names(op))}"
            ) from None

    def copy(self) -> Registry:
        return Registry([s for op in OPS for s in self._rows[op].values()])


# ---- preference rules (documented in the row docs; scores are small integers) ---------------

# Occupancy is what decides between one program per (sequence, kv head) and splitting the
# context across programs (seed 003): with fewer programs than SMs, single-pass leaves most of
# the machine idle; once the programs fill the SMs, splitting only adds a reduce pass and
# partial-buffer traffic. No context threshold: split_kv with one split launches the
# single-pass kernel, so a short context costs it nothing, and with few programs it measured
# faster even at 1k tokens, where a context threshold used to pick single_pass
# (docs/decisions.md).
# `sm_count` comes from the device (absent on CPU: no opinion).


def _programs(shape: Mapping[str, Any]) -> int:
    return shape["batch"] * shape.get("kv_heads", 1)


def _programs_short_of_sms(shape: Mapping[str, Any]) -> float:
    sm = shape.get("sm_count")
    return 1.0 if sm and _programs(shape) < sm else 0.0


def _programs_fill_sms(shape: Mapping[str, Any]) -> float:
    sm = shape.get("sm_count")
    return 1.0 if sm and _programs(shape) >= sm else 0.0


PREFER_SPLIT = Preference(
    "few_programs",
    _programs_short_of_sms,
    "batch*kv_heads < SM count: split the context over the idle SMs",
)
PREFER_SINGLE = Preference(
    "programs_fill_sms",
    _programs_fill_sms,
    "batch*kv_heads >= SM count: no split cost",
)

# cuda/cluster_decode against the Triton rows (the H200's tune tables and per-case runs:
# docs/decisions.md): at 16 bits it leads in most decode buckets. It trails where the
# (sequence, kv head) pairs fill the SMs at 1k tokens, where Triton's four CTAs per SM hide
# more latency than its one, and where few pairs meet a very long context: at most 7 clusters
# of 10-16 CTAs fit at once, so a batch-1 problem's pairs occupy about half the SMs. Its fp8
# path (dim-major V) trails Triton's at every measured case, so the rule is 16-bit only.
_CLUSTER_LONG_CONTEXT = 32768  # above: few pairs cannot fill the SMs for long enough
_CLUSTER_SHORT_CONTEXT = 1024  # at or below, with the SMs full: Triton's occupancy wins
_CLUSTER_FEW_PAIRS_PER_SM = 1 / 16  # pairs <= SMs/16 (8 on 132 SMs) trail; 16 pairs lead


def _cluster_leads(shape: Mapping[str, Any]) -> float:
    sm = shape.get("sm_count")
    if not sm or shape.get("dtype") not in ("fp16", "bf16"):
        return 0.0
    pairs, context = _programs(shape), shape["max_context"]
    few_pairs_long = pairs <= _CLUSTER_FEW_PAIRS_PER_SM * sm and context > _CLUSTER_LONG_CONTEXT
    full_and_short = pairs >= sm and context <= _CLUSTER_SHORT_CONTEXT
    # 2: above the Triton rows' single occupancy rule, so it decides where it fires.
    return 0.0 if few_pairs_long or full_and_short else 2.0


PREFER_CLUSTER = Preference(
    "cluster_leads_16bit",
    _cluster_leads,
    f"fp16/bf16, except batch*kv_heads <= SM count/16 with context > {_CLUSTER_LONG_CONTEXT} "
    f"and batch*kv_heads >= SM count with context <= {_CLUSTER_SHORT_CONTEXT}: measured ahead "
    "of Triton",
)


def _cluster_geometry(shape: Mapping[str, Any]) -> str | None:
    """cuda/cluster_decode's templates: head_dim 128, q heads per kv head 1, 2, 4 or 8, and
    fp8 pages of >= 16 tokens (every key read here is in core.DECISION_KEYS or the dtype)."""
    from kvbench.kernels.paged_decode_cluster import shape_unsupported

    if "head_dim" not in shape or "q_heads" not in shape:
        return "needs a paged problem with its head_dim and q_heads"
    return shape_unsupported(shape["head_dim"], shape["q_heads"], shape.get("kv_heads", 1),
                             fp8=shape.get("dtype") == "fp8", page_size=shape.get("page_size"))


_PD = "kvbench.kernels.paged_decode"
_KW = "kvbench.kernels.kv_write"
_KG = "kvbench.kernels.kv_gather_fp8"
_ALLOC_DTYPES = ("int64",)  # the allocator returns int64 row indices; it has no KV dtype

ROWS: tuple[KernelSpec, ...] = (
    KernelSpec(
        name="triton/single_pass",
        op="paged_decode",
        dtypes=("fp16", "bf16", "fp8"),
        target=f"{_PD}:paged_decode_single_pass",
        selfcheck="kvbench.ops.paged_decode:selfcheck_paged_decode",
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=20,
        preferences=(PREFER_SINGLE,),
        doc="one program per (sequence, kv head), GQA heads share each K/V tile",
    ),
    KernelSpec(
        name="triton/split_kv",
        op="paged_decode",
        dtypes=("fp16", "bf16", "fp8"),
        target=f"{_PD}:paged_decode_split_kv",
        selfcheck="kvbench.ops.paged_decode:selfcheck_paged_decode",
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=20,
        preferences=(PREFER_SPLIT,),
        doc="flash-decode: the context split across programs, then a reduce",
    ),
    KernelSpec(
        name="cuda/cluster_decode",
        op="paged_decode",
        dtypes=("fp16", "bf16", "fp8"),
        target="kvbench.kernels.paged_decode_cluster:paged_decode_cluster",
        selfcheck="kvbench.ops.paged_decode:selfcheck_paged_decode_cluster",
        # 16-bit caches from token-major V pages, fp8 from dim-major ones (the kernel's
        # templates): a problem in the other layout excludes the row instead of failing in it.
        layout=LayoutRequirement(required=(PAGED,), forbidden=(V_DIM_MAJOR,)),
        layout_by_dtype={"fp8": LayoutRequirement(required=(PAGED, V_DIM_MAJOR))},
        available=cuda_sm90_with_nvcc,
        # Below the Triton rows; PREFER_CLUSTER puts it first where it measured faster.
        priority=15,
        preferences=(PREFER_CLUSTER,),
        shape_gate=_cluster_geometry,
        doc="CUDA flash-decode (sm_90): a (sequence, kv head)'s splits are one thread-block "
        "cluster and combine through its shared memory, one launch; fp8 from dim-major V pages",
    ),
    KernelSpec(
        name="torch/gather_sdpa",
        op="paged_decode",
        dtypes=("fp16", "bf16", "fp8"),
        target=f"{_PD}:paged_decode_gather_sdpa",
        selfcheck="kvbench.ops.paged_decode:selfcheck_paged_decode",
        layout=LayoutRequirement(required=(PAGED,)),
        available=any_device,
        priority=10,
        doc="production fallback on any device: gather pages, then SDPA",
    ),
    KernelSpec(
        name="triton/scatter",
        op="kv_write",
        dtypes=("fp16", "bf16", "fp8"),
        target=f"{_KW}:kv_write_triton",
        selfcheck="kvbench.ops.kv_write:selfcheck_kv_write",
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=20,
        doc="one Triton scatter for prefill and decode shapes",
    ),
    KernelSpec(
        name="torch/index_copy",
        op="kv_write",
        dtypes=("fp16", "bf16", "fp8"),
        target=f"{_KW}:kv_write_torch",
        selfcheck="kvbench.ops.kv_write:selfcheck_kv_write",
        layout=LayoutRequirement(required=(PAGED,)),
        available=any_device,
        priority=10,
        doc="torch index_copy_ / index_put_ on any device",
    ),
    KernelSpec(
        name="triton/legacy",
        op="kv_gather_fp8",
        dtypes=("fp8",),
        target=f"{_KG}:gather_fp8_legacy",
        selfcheck="kvbench.ops.kv_gather_fp8:selfcheck_kv_gather_fp8",
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=5,
        doc="historical baseline: torch.zeros destination + a program per (token, 128 slice)",
    ),
    KernelSpec(
        name="triton/vectorized",
        op="kv_gather_fp8",
        dtypes=("fp8",),
        target=f"{_KG}:gather_fp8_vectorized",
        selfcheck="kvbench.ops.kv_gather_fp8:selfcheck_kv_gather_fp8",
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=20,
        doc="no pre-zero, fused pad rows, several tokens per program, 16-byte accesses",
    ),
    KernelSpec(
        name="triton/cached",
        op="kv_gather_fp8",
        dtypes=("fp8",),
        target=f"{_KG}:gather_fp8_cached",
        selfcheck="kvbench.ops.kv_gather_fp8:selfcheck_kv_gather_fp8",
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=30,
        doc="production path: vectorized kernel into a grow-only persistent buffer "
        "(the result is a view the next call overwrites)",
    ),
    KernelSpec(
        name="torch/gather",
        op="kv_gather_fp8",
        dtypes=("fp8",),
        target=f"{_KG}:gather_fp8_torch",
        selfcheck="kvbench.ops.kv_gather_fp8:selfcheck_kv_gather_fp8",
        layout=LayoutRequirement(required=(PAGED,)),
        available=any_device,
        priority=10,
        doc="torch row on any device",
    ),
    KernelSpec(
        name="torch/legacy",
        op="kv_alloc",
        dtypes=_ALLOC_DTYPES,
        target="kvbench.kernels.kv_alloc:LegacyBitmapAllocator",
        selfcheck="kvbench.ops.kv_alloc:selfcheck_kv_alloc",
        available=any_device,
        priority=10,
        doc="device bitmap + bump cursor; nonzero().item() host stall once the cursor is gone",
    ),
    KernelSpec(
        name="host/freelist",
        op="kv_alloc",
        dtypes=_ALLOC_DTYPES,
        target="kvbench.kernels.kv_alloc:HostFreeListAllocator",
        selfcheck="kvbench.ops.kv_alloc:selfcheck_kv_alloc",
        available=any_device,
        priority=20,
        doc="host bump cursor + free list, rows copied to the device without a sync",
    ),
)

#: The registry dispatch uses unless a test swaps it (core.using_registry).
REGISTRY = Registry(ROWS)


def spec_names(op: str) -> tuple[str, ...]:
    """Row names of `op` in the real registry (asv params, selector error messages)."""
    return REGISTRY.spec_names(op)
