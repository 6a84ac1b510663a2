"""Every KernelSpec row, and the problem keys dispatch caches and ranks by.

The problem keys (the ops, the layout tags, the shape buckets) are facts about an op's
problem, so they live in the op oracle (kvbench.ops.keys, which documents each tag and
bucket); this module re-exports them for dispatch and its callers.

Each row names its kernel by a "module:function" string, imported the first time the row is
selected or checked: the strings point down to kvbench.kernels, and keeping them strings is
what keeps kernel code (Triton, the CUDA build) out of `import kvbench.dispatch`. Its golden
check is a plain function of the op oracle (kvbench.ops.<op>.golden_check_<op>), imported
here as any other module import, so the import contract sees it.

Priorities encode the production default when nothing was measured: the row an engine would
ship ranks first, the fallback and the historical baseline after it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvbench.dispatch.spec import (
    KernelSpec,
    LayoutRequirement,
    Preference,
    any_device,
    cuda_sm90_with_nvcc,
    triton_device,
)
from kvbench.ops.keys import (
    ANY_BUCKET,
    BUCKET_KEYS,
    BUCKETS,
    FP8_SCALED,
    OPS,
    PAGED,
    STRIDED,
    TAGS,
    V_DIM_MAJOR,
    alloc_bucket,
    bucket,
    decode_bucket,
    gather_bucket,
    validate_op,
    write_bucket,
)
from kvbench.ops.kv_alloc import golden_check_kv_alloc
from kvbench.ops.kv_gather_fp8 import golden_check_kv_gather_fp8
from kvbench.ops.kv_write import golden_check_kv_write
from kvbench.ops.paged_decode import golden_check_paged_decode, golden_check_paged_decode_cluster

__all__ = [
    "ANY_BUCKET",
    "BUCKETS",
    "BUCKET_KEYS",
    "FP8_SCALED",
    "OPS",
    "PAGED",
    "REGISTRY",
    "ROWS",
    "STRIDED",
    "TAGS",
    "TUNED_DTYPE",
    "V_DIM_MAJOR",
    "Registry",
    "alloc_bucket",
    "bucket",
    "decode_bucket",
    "gather_bucket",
    "spec_names",
    "validate_op",
    "write_bucket",
]


#: The dtype each op is tuned and tracked at by default (`kvbench tune`; a stored perf-table
#: entry without its own "dtype" was measured at it): fp16 decode and write, the fp8 gather,
#: the allocator's int64 rows.
TUNED_DTYPE: dict[str, str] = {
    "paged_decode": "fp16", "kv_write": "fp16", "kv_gather_fp8": "fp8", "kv_alloc": "int64",
}


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
        validate_op(spec.op)
        rows = self._rows[spec.op]
        if spec.name in rows and not replace:
            raise ValueError(f"{spec.op} already has a row named {spec.name!r}")
        rows[spec.name] = spec
        return spec

    def specs(self, op: str) -> tuple[KernelSpec, ...]:
        """Rows of `op` in registration order."""
        return tuple(self._rows[validate_op(op)].values())

    def spec_names(self, op: str) -> tuple[str, ...]:
        return tuple(self._rows[validate_op(op)])

    def get(self, op: str, name: str) -> KernelSpec:
        """The row `name` of `op`; ValueError listing the valid names otherwise."""
        try:
            return self._rows[validate_op(op)][name]
        except KeyError:
            raise ValueError(
                f"{op} has no row {name!r}; valid names: {', '.join(self.spec_names(op))}"
            ) from None

    def copy(self) -> Registry:
        return Registry([s for op in OPS for s in self._rows[op].values()])


# ---- preference rules (documented in the row docs; scores are small integers) ---------------

# Occupancy is what decides between one program per (sequence, kv head) and splitting the
# context across programs: with fewer programs than SMs, single-pass leaves most of
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

# cuda/cluster_decode against the Triton rows (tune tables and per-case runs on an sm_90 GPU:
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
    """cuda/cluster_decode's templates: head_dim 128, q heads per kv head 1, 2, 4 or 8, fp8
    pages of >= 16 tokens, and no decode option (every key read here is in
    core.DECISION_KEYS or the dtype)."""
    from kvbench.kernels.paged_decode_cluster import shape_unsupported

    if "head_dim" not in shape or "q_heads" not in shape:
        return "needs a paged problem with its head_dim and q_heads"
    if shape.get("options"):
        return f"implements no decode option, asked for {', '.join(shape['options'])}"
    return shape_unsupported(shape["head_dim"], shape["q_heads"], shape.get("kv_heads", 1),
                             fp8=shape.get("dtype") == "fp8", page_size=shape.get("page_size"))


def _head_dims(kind: str):
    """The shape gate of the decode rows of ``kind`` (a kernels.common.HEAD_DIMS key): the
    head dims the row's validation accepts, so auto routes around a row that would refuse."""

    def gate(shape: Mapping[str, Any]) -> str | None:
        # Imported at call time, as the cluster gate does: kernel modules stay out of
        # `import kvbench.dispatch` (kernels.common itself imports no Triton).
        from kvbench.kernels.common import head_dim_unsupported

        return head_dim_unsupported(shape["head_dim"], kind) if "head_dim" in shape else None

    gate.__name__ = gate.__qualname__ = f"head_dims_{kind}"
    return gate


_triton_decode_geometry = _head_dims("triton")
_torch_decode_geometry = _head_dims("torch")


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
        golden_check=golden_check_paged_decode,
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=20,
        preferences=(PREFER_SINGLE,),
        shape_gate=_triton_decode_geometry,
        doc="one program per (sequence, kv head), GQA heads share each K/V tile",
    ),
    KernelSpec(
        name="triton/split_kv",
        op="paged_decode",
        dtypes=("fp16", "bf16", "fp8"),
        target=f"{_PD}:paged_decode_split_kv",
        golden_check=golden_check_paged_decode,
        layout=LayoutRequirement(required=(PAGED,)),
        available=triton_device,
        priority=20,
        preferences=(PREFER_SPLIT,),
        shape_gate=_triton_decode_geometry,
        doc="flash-decode: the context split across programs, then a reduce",
    ),
    KernelSpec(
        name="cuda/cluster_decode",
        op="paged_decode",
        dtypes=("fp16", "bf16", "fp8"),
        target="kvbench.kernels.paged_decode_cluster:paged_decode_cluster",
        golden_check=golden_check_paged_decode_cluster,
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
        golden_check=golden_check_paged_decode,
        layout=LayoutRequirement(required=(PAGED,)),
        available=any_device,
        priority=10,
        shape_gate=_torch_decode_geometry,
        doc="production fallback on any device: gather pages, then SDPA",
    ),
    KernelSpec(
        name="triton/scatter",
        op="kv_write",
        dtypes=("fp16", "bf16", "fp8"),
        target=f"{_KW}:kv_write_triton",
        golden_check=golden_check_kv_write,
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
        golden_check=golden_check_kv_write,
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
        golden_check=golden_check_kv_gather_fp8,
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
        golden_check=golden_check_kv_gather_fp8,
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
        golden_check=golden_check_kv_gather_fp8,
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
        golden_check=golden_check_kv_gather_fp8,
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
        golden_check=golden_check_kv_alloc,
        available=any_device,
        priority=10,
        doc="device bitmap + bump cursor; nonzero().item() host stall once the cursor is gone",
    ),
    KernelSpec(
        name="host/freelist",
        op="kv_alloc",
        dtypes=_ALLOC_DTYPES,
        target="kvbench.kernels.kv_alloc:HostFreeListAllocator",
        golden_check=golden_check_kv_alloc,
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
