"""What both paged-decode kernels share: the input contract, its validation, and constants.

The Triton kernels (paged_decode.py) and the CUDA cluster kernel (paged_decode_cluster.py)
accept the same arguments and reject bad ones with the same messages; this module holds that
contract (its signature once, in `decode_row`) so neither kernel module imports the other's
private names. It imports no Triton:
the cluster module and the registry's shape gates stay light to import.
"""

from __future__ import annotations

import functools
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvbench.core.dtypes import FP8_CONTAINERS
from kvbench.kernels import _validate as V

#: q (and 16-bit cache) dtypes.
Q_DTYPES = (torch.float16, torch.bfloat16)
#: fp8 e4m3 caches: bytes in a uint8 container, or the same bytes as float8_e4m3fn.
FP8_CACHES = FP8_CONTAINERS
#: The head dims each decode row serves, inclusive bounds (``head_dim_unsupported``):
#: the Triton rows pad a tile to the next power of two (tl.arange and tl.dot need one, tl.dot
#: at least 16) and mask the padded lanes, up to 256 (a [16, 256] fp32 accumulator per program
#: is already the register budget); the torch row takes any head dim SDPA takes, bounded at
#: 1024 (MLA's 576 fits); the CUDA cluster row's templates are compiled for 128 only.
HEAD_DIMS: dict[str, tuple[int, int]] = {
    "triton": (16, 256),
    "torch": (1, 1024),
    "cuda/cluster_decode": (128, 128),
}
#: log2(e): the kernels' softmax runs in the exp2 domain.
LOG2E = 1.4426950408889634


@dataclass(frozen=True)
class DecodeProblem:
    """Validated inputs plus the sizes the launchers need."""

    batch: int
    q_heads: int
    kv_heads: int
    head_dim: int
    page_size: int
    num_pages: int
    max_pages: int
    fp8: bool
    v_dim_major: bool
    sm_scale: float
    k_scale: torch.Tensor | float
    v_scale: torch.Tensor | float
    #: The index tensors to launch with: the caller's, or in safe mode on CUDA copies whose
    #: out-of-range values were replaced by in-range ones (kernels/_validate.py).
    block_table: torch.Tensor
    seq_lens: torch.Tensor
    #: Safe mode: [B] bool, the sequences whose output must be poisoned (NaN), else None.
    poison: torch.Tensor | None
    #: Sliding window: attend to the last ``window`` tokens of each sequence (None: all).
    window: int | None = None
    #: Logit soft-cap: scores become softcap * tanh(score / softcap) (None: no cap).
    softcap: float | None = None

    def finish(self, out: torch.Tensor) -> torch.Tensor:
        """The output as returned: NaN rows for the sequences safe-mode validation caught."""
        if self.poison is not None:
            out.masked_fill_(self.poison[:, None, None], float("nan"))
        return out


def head_dim_unsupported(head_dim: int, kind: str) -> str | None:
    """None when rows of ``kind`` (a HEAD_DIMS key) serve ``head_dim``, else what they accept
    (the validation message and the registry's shape gates: one rule for both)."""
    lo, hi = HEAD_DIMS[kind]
    if lo <= head_dim <= hi:
        return None
    if lo == hi:
        return f"the {kind} decode row serves head_dim {lo} only, got {head_dim}"
    return f"head_dim must be in [{lo}, {hi}] for the {kind} decode rows, got {head_dim}"


#: The decode options (keyword arguments beyond the contract's) and what each row implements:
#: "window" (sliding window), "softcap" (logit soft-cap), "per_head_scale" (fp8 scales as
#: [kv_heads] tensors). A row refuses an option it does not implement (ValueError), and its
#: registry shape gate refuses the problem, so auto routes around it.
DECODE_OPTIONS = ("window", "softcap", "per_head_scale")

#: The largest window: the kernels take it as a 32-bit integer (a window past every sequence
#: attends to all its tokens, so nothing larger is needed).
MAX_WINDOW = 2**31 - 1


def validate_decode_options(window: object, softcap: object) -> None:
    """window: None or an int in [1, MAX_WINDOW]; softcap: None or a finite float > 0."""
    if window is not None and (isinstance(window, bool) or not isinstance(window, int)
                               or not 1 <= window <= MAX_WINDOW):
        raise ValueError(f"window must be None or an int >= 1 and <= {MAX_WINDOW} (tokens "
                         f"attended), got {window!r}")
    if softcap is not None and (isinstance(softcap, bool) or not isinstance(softcap, (int, float))
                                or not math.isfinite(softcap) or softcap <= 0):
        raise ValueError(f"softcap must be None or a finite float > 0, got {softcap!r}")


def options_used(window: object, softcap: object, k_scale: object) -> tuple[str, ...]:
    """The DECODE_OPTIONS a call asks for (its dispatch problem's "options" key)."""
    per_head = isinstance(k_scale, torch.Tensor) and k_scale.dim() == 1 and k_scale.numel() > 1
    return tuple(name for name, on in (("window", window is not None),
                                       ("softcap", softcap is not None),
                                       ("per_head_scale", per_head)) if on)


def validate_decode_inputs(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    block_table: torch.Tensor,
    seq_lens: torch.Tensor,
    sm_scale: float | None,
    k_scale: torch.Tensor | float | None,
    v_scale: torch.Tensor | float | None,
    *,
    triton_kernel: bool,
    interpreted: bool = False,
    head_dims: str = "triton",
    window: int | None = None,
    softcap: float | None = None,
) -> DecodeProblem:
    """The validated problem, or ValueError naming the argument and what is accepted (the
    contract in kvbench/kernels/paged_decode.py's docstring).

    ``triton_kernel``: the caller launches Triton kernels, which need CUDA tensors unless
    ``interpreted`` (its kernels were decorated under TRITON_INTERPRET). Value validation runs on
    the host for CPU tensors and, in safe mode on CUDA, on the device (returned in the
    problem's block_table / seq_lens / poison). ``head_dims``: the HEAD_DIMS entry of the
    calling row.
    """
    V.validate_dtype("q", q, Q_DTYPES)
    V.validate_ndim("q", q, 3, "[batch, q_heads, head_dim]")
    V.validate_last_dim_contiguous("q", q)
    accepted_cache = (q.dtype, *FP8_CACHES)
    for name, cache in (("k_cache", k_cache), ("v_cache", v_cache)):
        V.validate_dtype(name, cache, accepted_cache)
        V.validate_ndim(name, cache, 4, "[num_pages, page_size, kv_heads, head_dim]")
    V.validate_last_dim_contiguous("k_cache", k_cache)
    v_dim_major = V.v_cache_dim_major(v_cache)
    if v_cache.dtype != k_cache.dtype:
        raise ValueError(f"v_cache dtype {v_cache.dtype} must equal k_cache dtype {k_cache.dtype}")
    V.validate_shape("v_cache", v_cache, tuple(k_cache.shape))
    batch, q_heads, head_dim = q.shape
    num_pages, page_size, kv_heads, cache_dim = k_cache.shape
    if cache_dim != head_dim:
        raise ValueError(f"k_cache head_dim {cache_dim} must equal q head_dim {head_dim}")
    reason = head_dim_unsupported(head_dim, head_dims)
    if reason:
        raise ValueError(reason)
    V.validate_power_of_two("page_size (k_cache.shape[1])", page_size)
    if num_pages < 1 or kv_heads < 1:
        raise ValueError(
            f"k_cache must have >= 1 page and >= 1 kv head, got {tuple(k_cache.shape)}"
        )
    if q_heads % kv_heads != 0:
        raise ValueError(f"q heads ({q_heads}) must be a multiple of kv heads ({kv_heads})")
    V.validate_dtype("block_table", block_table, (torch.int32,))
    V.validate_shape("block_table", block_table, (batch, None))
    V.validate_last_dim_contiguous("block_table", block_table)
    V.validate_dtype("seq_lens", seq_lens, (torch.int32,))
    V.validate_shape("seq_lens", seq_lens, (batch,))
    V.validate_contiguous("seq_lens", seq_lens)
    device = V.validate_same_device(
        q=q, k_cache=k_cache, v_cache=v_cache, block_table=block_table, seq_lens=seq_lens
    )
    if triton_kernel and device.type != "cuda" and not interpreted:
        raise ValueError(
            f"inputs are on {device}; the Triton kernels need a CUDA device "
            "(or TRITON_INTERPRET=1 set before kvbench.kernels is imported)"
        )
    validate_decode_options(window, softcap)
    if sm_scale is None:
        sm_scale = 1.0 / math.sqrt(head_dim)
    elif (
        isinstance(sm_scale, bool)
        or not isinstance(sm_scale, (int, float))
        or not math.isfinite(sm_scale)
        or sm_scale <= 0
    ):
        raise ValueError(f"sm_scale must be None or a finite float > 0, got {sm_scale!r}")
    fp8 = k_cache.dtype in FP8_CACHES
    validation = V.device_validation(device)
    if fp8:
        for name, sc in (("k_scale", k_scale), ("v_scale", v_scale)):
            V.validate_scale(name, sc, device, per_head=kv_heads)
            V.validate_scale_value(name, sc, validation)
        if isinstance(k_scale, torch.Tensor) != isinstance(v_scale, torch.Tensor):
            # One rule for every row: the Triton kernels take both as pointers or both as values.
            raise ValueError("k_scale and v_scale must both be tensors or both be python floats")
        if isinstance(k_scale, torch.Tensor) and k_scale.numel() != v_scale.numel():
            # The kernels index both with one per-head stride, and the dispatch problem's
            # per_head_scale option is read from k_scale.
            raise ValueError(
                "k_scale and v_scale must have the same shape: both one element (per tensor) "
                f"or both [kv_heads={kv_heads}] (per kv head), got k_scale "
                f"{tuple(k_scale.shape)} and v_scale {tuple(v_scale.shape)}")
    else:
        for name, sc in (("k_scale", k_scale), ("v_scale", v_scale)):
            if sc is not None:
                raise ValueError(f"{name} is only accepted with fp8 (e4m3) caches; pass None")
    max_pages = block_table.shape[1]
    poison = None
    if V.values_validated(device):
        validate_decode_values(block_table, seq_lens, page_size, num_pages)
    elif validation is not None:
        block_table, seq_lens, poison = validated_on_device(validation, block_table, seq_lens,
                                                            page_size, num_pages)
        validation.submit()
    return DecodeProblem(
        batch=batch,
        q_heads=q_heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        page_size=page_size,
        num_pages=num_pages,
        max_pages=max_pages,
        fp8=fp8,
        v_dim_major=v_dim_major,
        sm_scale=float(sm_scale),
        k_scale=1.0 if k_scale is None else k_scale,
        v_scale=1.0 if v_scale is None else v_scale,
        block_table=block_table,
        seq_lens=seq_lens,
        poison=poison,
        window=window,
        softcap=None if softcap is None else float(softcap),
    )


def decode_row(*, triton_kernel: bool, interpreted: Callable[[], bool] = lambda: False,
               head_dims: str = "triton", options: tuple[str, ...] = DECODE_OPTIONS) -> Callable:
    """Decorator: a row body ``body(p, q, k_cache, v_cache, **options)`` becomes a public
    decode row with the contract's signature ``(q, k_cache, v_cache, block_table, seq_lens, *,
    sm_scale=None, k_scale=None, v_scale=None)`` plus the body's own keyword-only options
    (e.g. ``num_splits``); ``p`` is the DecodeProblem validate_decode_inputs returned.

    Why a decorator: every row takes the same arguments and validates them the same way, so
    the signature and the validation call live here once and a new row cannot drift from them.
    ``triton_kernel`` is validate_decode_inputs's; ``interpreted`` returns its other flag at
    call time (the module's interpret mode as it is when the row runs); ``head_dims`` names
    the row's HEAD_DIMS entry; ``options`` the DECODE_OPTIONS it implements (the others are
    refused by name).
    """

    def wrap(body: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def row(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                block_table: torch.Tensor, seq_lens: torch.Tensor, *,
                sm_scale: float | None = None, k_scale: torch.Tensor | float | None = None,
                v_scale: torch.Tensor | float | None = None, window: int | None = None,
                softcap: float | None = None, **kwargs) -> torch.Tensor:
            for name in options_used(window, softcap, k_scale):
                if name not in options:
                    raise ValueError(f"{body.__name__} does not implement {name}; it implements "
                                     f"{', '.join(options) or 'no decode option'}")
            p = validate_decode_inputs(q, k_cache, v_cache, block_table, seq_lens, sm_scale,
                                       k_scale, v_scale, triton_kernel=triton_kernel,
                                       interpreted=interpreted(), head_dims=head_dims,
                                       window=window, softcap=softcap)
            return body(p, q, k_cache, v_cache, **kwargs)

        # name, module and docstring from the body; the signature stays the contract's
        functools.update_wrapper(row, body, assigned=("__module__", "__name__", "__qualname__",
                                                      "__doc__"))
        del row.__wrapped__
        contract = inspect.signature(row)
        own = [prm for prm in inspect.signature(body).parameters.values()
               if prm.kind is inspect.Parameter.KEYWORD_ONLY]
        fixed = [prm for prm in contract.parameters.values()
                 if prm.kind is not inspect.Parameter.VAR_KEYWORD]
        row.__signature__ = contract.replace(parameters=[*fixed, *own])
        return row

    return wrap


def validate_decode_values(
    block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int, num_pages: int
) -> None:
    """seq_lens within the table's capacity; the pages they use within the pool."""
    if seq_lens.numel() == 0:
        return
    cap = block_table.shape[1] * page_size
    lo, hi = int(seq_lens.min()), int(seq_lens.max())
    if lo < 0 or hi > cap:
        raise ValueError(
            f"seq_lens must lie in [0, block_table.shape[1] * page_size = {cap}], got [{lo}, {hi}]"
        )
    used = used_entries(block_table, seq_lens, page_size)  # int64: no wrap near 2**31
    V.validate_index_range("block_table entries used by seq_lens", block_table[used], num_pages,
                           what="pages of the cache")


def used_entries(block_table: torch.Tensor, seq_lens: torch.Tensor, page_size: int) -> torch.Tensor:
    """[B, max_pages] bool: the block-table entries the sequences' lengths reach (no sync)."""
    pages = (seq_lens.to(torch.int64)[:, None] + page_size - 1) // page_size
    return torch.arange(block_table.shape[1], device=block_table.device)[None, :] < pages


def validated_on_device(
    validation: V.DeviceValidation, block_table: torch.Tensor, seq_lens: torch.Tensor,
    page_size: int, num_pages: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Safe mode on CUDA: validate_decode_values's rules evaluated on the device.

    Returns (block table, seq_lens, poison): a length outside [0, capacity] becomes 0 and an
    out-of-range page id becomes page 0, so the kernels stay in bounds; ``poison`` marks the
    sequences either touched, whose outputs are then NaN.
    """
    cap = block_table.shape[1] * page_size
    lens = validation.bounds("seq_lens", seq_lens, 0, cap + 1, replacement=0,
                             what="block_table.shape[1] * page_size is the capacity")
    used = used_entries(block_table, lens, page_size)
    in_range = (block_table >= 0) & (block_table < num_pages)
    bad = used & ~in_range
    validation.flag("block_table entries used by seq_lens", bad, torch.where(used, block_table, 0),
                    f"must lie in [0, {num_pages}) (pages of the cache)")
    table = torch.where(in_range, block_table, torch.zeros_like(block_table))
    poison = bad.any(dim=1) | (lens != seq_lens)
    return table, lens, poison
