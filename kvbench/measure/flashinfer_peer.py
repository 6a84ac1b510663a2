"""FlashInfer's batch paged decode as a peer row of `kvbench table paged_decode`.

Why a peer: kvbench's decode rows mean little without the kernel a user would otherwise run on
the same pool. FlashInfer's ``BatchDecodeWithPagedKVCacheWrapper`` reads kvbench's combined
pool buffer as it is: ``[num_pages, 2, page_size, kv_heads, head_dim]`` is FlashInfer's NHD
paged layout (K at index 0, V at 1), so the peer runs on the very bytes the Triton rows read.

Where FlashInfer comes from, in order:
  1. ``$KVBENCH_FLASHINFER_SITE`` or ``<repo>/.flashinfer/site``: a carried copy (the device
     machine has no network). ``scripts/build_flashinfer_carry.sh`` builds it on a machine
     with network and nvcc 13.0, no GPU needed: FlashInfer 0.6.6 minus the CUTLASS headers,
     apache-tvm-ffi, and the decode modules pre-compiled for sm_90a (FlashInfer's own AOT
     folder, ``flashinfer/data/aot/``, which ``JitSpec.build_and_load`` loads without nvcc).
     A module missing from the carry is an error unless ``KVBENCH_FLASHINFER_ALLOW_JIT=1``
     (then FlashInfer compiles it: tens of seconds of device time).
  2. an installed ``flashinfer`` (``pip install flashinfer-python``), used as it is.
Otherwise ``PeerUnavailable`` says what is missing; the table lists the row as skipped.

Why 0.6.6 for the carry: its compiled modules link only ``libcudart.so.13`` and tvm-ffi's
symbols (no libtorch), so they build on a CPU-only machine; the package is 4 MiB (0.7.x is
hundreds); and its decode kernel and planner for this geometry (GQA group 4, head_dim 128,
fp16/bf16) differ from 0.7.4's only by an -inf clamp and shared-memory guards that leave this
case's shared-memory size unchanged (diffed when the carry was built).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

from kvbench.core import paths
from kvbench.fixtures.pool import attended_pages

#: The carried FlashInfer's import root, unless $KVBENCH_FLASHINFER_SITE names another.
DEFAULT_SITE: Path = Path(__file__).resolve().parents[1] / ".flashinfer" / "site"
#: The version the carry and its pre-compiled modules were built for.
CARRIED_VERSION = "0.6.6"
#: Float workspace for split-KV partial outputs: FlashInfer's recommended size, which covers
#: batch 64 x 32 heads x its chunk counts many times over.
WORKSPACE_BYTES = 128 << 20

_DTYPE_TAG = {torch.float16: "f16", torch.bfloat16: "bf16"}


class PeerUnavailable(RuntimeError):
    """FlashInfer cannot run here; the message names what is missing."""


def carried_site() -> Path | None:
    """The carried copy's import root if there is one."""
    env = os.environ.get("KVBENCH_FLASHINFER_SITE")
    if env:
        return Path(env)
    return DEFAULT_SITE if DEFAULT_SITE.is_dir() else None


def _module_uri(dtype: torch.dtype, head_dim: int, use_tensor_cores: bool) -> str:
    """FlashInfer 0.6.6's module name for the default variant (no RoPE/SWA/soft-cap).

    Mirrors ``get_batch_decode_uri`` (CUDA-core decode) and ``get_batch_prefill_uri`` with
    backend ``fa2`` (the tensor-core decode runs the FA2 prefill kernel with one query row);
    used only to name a missing pre-compiled file before FlashInfer would start nvcc.
    """
    t = _DTYPE_TAG[dtype]
    kind = "prefill" if use_tensor_cores else "decode"
    uri = (
        f"batch_{kind}_with_kv_cache_dtype_q_{t}_dtype_kv_{t}_dtype_o_{t}_dtype_idx_i32_"
        f"head_dim_qk_{head_dim}_head_dim_vo_{head_dim}_posenc_0_use_swa_False_"
        "use_logits_cap_False"
    )
    return uri + "_f16qk_False" if use_tensor_cores else uri


def aot_module_path(
    site: Path, dtype: torch.dtype, head_dim: int, use_tensor_cores: bool = False
) -> Path:
    """Where FlashInfer looks for the pre-compiled module of this dtype / head_dim / kernel."""
    uri = _module_uri(dtype, head_dim, use_tensor_cores)
    return site / "flashinfer" / "data" / "aot" / uri / f"{uri}.so"


def set_workspace_env() -> None:
    """Point FlashInfer's JIT workspace and tvm-ffi's cache at the cache root's flashinfer/
    folder, unless the caller set them.

    FlashInfer writes generated sources, a lock and a log at import, under $HOME by default
    (read-only or shared on the device machine); a fixed name under /tmp, as before, could be
    pre-created by another user, who would then supply the sources FlashInfer compiles and the
    modules it loads. The cache root is private (kvbench.core.paths)."""
    if "FLASHINFER_WORKSPACE_BASE" in os.environ and "TVM_FFI_CACHE_DIR" in os.environ:
        return
    base = paths.flashinfer_workspace_dir()
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(base))
    os.environ.setdefault("TVM_FFI_CACHE_DIR", str(base / "tvm-ffi"))


def load_flashinfer() -> ModuleType:
    """Import FlashInfer (the carried copy first), or raise PeerUnavailable saying why."""
    site = carried_site()
    if site is None:
        try:
            import flashinfer
        except ImportError as exc:
            raise PeerUnavailable(
                f"FlashInfer is not installed and there is no carried copy at {DEFAULT_SITE} "
                "($KVBENCH_FLASHINFER_SITE): build one with scripts/build_flashinfer_carry.sh "
                f"or pip install flashinfer-python ({exc})"
            ) from None
        return flashinfer
    missing = [
        str(p)
        for p in (site / "flashinfer" / "__init__.py", site / "tvm_ffi" / "__init__.py")
        if not p.exists()
    ]
    if missing:
        raise PeerUnavailable(
            f"the carried FlashInfer at {site} is incomplete; missing: {', '.join(missing)}. "
            "Rebuild it with scripts/build_flashinfer_carry.sh"
        )
    for name in ("flashinfer", "tvm_ffi"):
        mod = sys.modules.get(name)
        origin = Path(getattr(mod, "__file__", "") or "").resolve() if mod else None
        if origin is not None and site.resolve() not in origin.parents:
            raise PeerUnavailable(f"{name} is already imported from {origin}, not from {site}")
    set_workspace_env()
    if str(site) not in sys.path:
        sys.path.insert(0, str(site))
    try:
        import flashinfer
    except ImportError as exc:
        raise PeerUnavailable(
            f"importing the carried FlashInfer from {site} failed: {exc}"
        ) from exc
    if flashinfer.__version__ != CARRIED_VERSION:
        raise PeerUnavailable(
            f"carried FlashInfer is {flashinfer.__version__}, expected {CARRIED_VERSION}"
        )
    return flashinfer


def plan_inputs(
    block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """kvbench's (block_table, seq_lens) -> FlashInfer's (kv_indptr, kv_indices, last_page_len).

    Sequence b owns pages ``block_table[b, :ceil(seq_lens[b] / page_size)]`` in order
    (``kvbench.fixtures.pool.attended_pages``); its last page holds ``seq_lens[b] - (pages - 1) *
    page_size`` tokens.
    """
    indices = attended_pages(block_table, seq_lens, page_size)
    lens = seq_lens.to(torch.int64)
    pages = (lens + page_size - 1) // page_size
    indptr = torch.zeros(len(lens) + 1, dtype=torch.int32, device=block_table.device)
    indptr[1:] = torch.cumsum(pages, 0).to(torch.int32)
    last_page_len = (lens - (pages - 1) * page_size).to(torch.int32)
    return indptr, indices, last_page_len


def make_flashinfer_decode(
    buffer: torch.Tensor | None,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    *,
    q_heads: int,
    use_tensor_cores: bool = False,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """Plan FlashInfer's batch paged decode over kvbench's pool buffer; return ``run(q)``.

    ``buffer``: the pool's combined ``[num_pages, 2, page_size, kv_heads, head_dim]`` fp16 or
    bf16 CUDA tensor; ``block_table`` ``[batch, max_pages]`` and ``seq_lens`` ``[batch]``
    int32 (every length >= 1). Everything that is not the kernel happens here, outside any
    timed region: the import, the module load, the page-table conversion, the workspace and
    ``plan()`` (which syncs). ``run(q)``, q ``[batch, q_heads, head_dim]`` of the buffer's
    dtype, returns a new tensor per call (as kvbench's kernels do), softmax scale
    1/sqrt(head_dim), no RoPE, window or soft-cap.

    ``use_tensor_cores``: False is the wrapper's default CUDA-core decode kernel; True its
    tensor-core decode (the FA2 prefill kernel with one query row), which FlashInfer
    recommends for GQA groups >= 4, as here (32 / 8).
    """
    if buffer is None:
        raise PeerUnavailable(
            "FlashInfer peer: needs the pool's combined token-major K/V buffer "
            "(storage='combined'); split and head_major storage have none"
        )
    if buffer.dtype not in _DTYPE_TAG:
        raise PeerUnavailable(f"FlashInfer peer: KV dtype {buffer.dtype}; fp16 or bf16 only")
    if buffer.dim() != 5 or buffer.shape[1] != 2 or not buffer.is_contiguous():
        raise PeerUnavailable(
            "FlashInfer peer: needs the combined contiguous [num_pages, 2, page_size, kv_heads, "
            f"head_dim] buffer, got {tuple(buffer.shape)}"
        )
    if not buffer.is_cuda:
        raise PeerUnavailable("FlashInfer peer: CUDA only")
    page_size, kv_heads, head_dim = buffer.shape[2:]
    site = carried_site()
    if site is not None:
        so_path = aot_module_path(site, buffer.dtype, head_dim, use_tensor_cores)
        if not so_path.exists() and os.environ.get("KVBENCH_FLASHINFER_ALLOW_JIT") != "1":
            raise PeerUnavailable(
                f"no pre-compiled FlashInfer module {so_path.name} in the carry; set "
                "KVBENCH_FLASHINFER_ALLOW_JIT=1 to let FlashInfer compile it here (needs nvcc)"
            )
    flashinfer = load_flashinfer()
    indptr, indices, last_page_len = plan_inputs(block_table, seq_lens, page_size)
    workspace = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=buffer.device)
    wrapper = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
        workspace, kv_layout="NHD", use_tensor_cores=use_tensor_cores
    )
    wrapper.plan(
        indptr, indices, last_page_len, q_heads, kv_heads, head_dim, page_size,
        pos_encoding_mode="NONE", q_data_type=buffer.dtype, kv_data_type=buffer.dtype,
        sm_scale=1.0 / math.sqrt(head_dim),
    )
    torch.cuda.synchronize(buffer.device)

    def run(q: torch.Tensor) -> torch.Tensor:
        return wrapper.run(q, buffer)

    return run
