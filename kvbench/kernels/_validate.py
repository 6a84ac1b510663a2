"""Host-side input validation shared by the kernel launchers.

Why a module of its own: a Triton kernel given a wrong dtype, a wrong stride or a tensor on the
wrong device does not fail, it reads garbage (or faults much later, asynchronously). Every
launcher therefore checks its inputs on the host first and raises ``ValueError`` naming the
argument and what is accepted, with one spelling of the message across ops. These helpers are
deliberately small and generic (no op knowledge) so that kv_write, kv_gather_fp8 and
paged_decode can all use them; they cost microseconds, paid once per call on the host.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch

#: Range-check index tensors (block tables, slot mappings, page tables) of CUDA inputs too.
#: Off by default: reading their values on the host costs a device sync per call, which would
#: stall the launch queue inside every timed region. On a CPU the checks always run: they
#: are free there, and an index out of range through the Triton interpreter is a segfault
#: (on a GPU, an illegal address that kills the context). Never set it while timing.
CHECK_VALUES_ON_DEVICE = False

# One spelling of dtype names everywhere (docs/architecture.md, "Dtype names"); the messages
# below print torch names because that is what a caller passes.


def _dtype_list(accepted: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d) for d in accepted)


def check_tensor(name: str, value: object) -> torch.Tensor:
    """Raise unless ``value`` is a torch.Tensor; return it (so launchers can chain)."""
    if not isinstance(value, torch.Tensor):
        # ValueError, not TypeError: the project contract is one exception type for bad input.
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")  # noqa: TRY004
    return value


def check_dtype(name: str, tensor: torch.Tensor, accepted: Iterable[torch.dtype]) -> None:
    """Raise unless ``tensor.dtype`` is one of ``accepted``."""
    accepted = tuple(accepted)
    check_tensor(name, tensor)
    if tensor.dtype not in accepted:
        raise ValueError(f"{name} has dtype {tensor.dtype}; accepted: {_dtype_list(accepted)}")


def check_ndim(name: str, tensor: torch.Tensor, ndim: int, what: str = "") -> None:
    """Raise unless ``tensor`` has exactly ``ndim`` dimensions; ``what`` names the axes."""
    check_tensor(name, tensor)
    if tensor.dim() != ndim:
        axes = f" {what}" if what else ""
        raise ValueError(
            f"{name} must be {ndim}-D{axes}, got {tensor.dim()}-D shape {tuple(tensor.shape)}"
        )


def check_shape(name: str, tensor: torch.Tensor, expected: Sequence[int | None]) -> None:
    """Raise unless ``tensor.shape`` matches ``expected``; ``None`` entries match any size."""
    check_ndim(name, tensor, len(expected))
    for got, want in zip(tensor.shape, expected, strict=True):
        if want is not None and got != want:
            shown = tuple("*" if w is None else w for w in expected)
            raise ValueError(f"{name} must have shape {shown}, got {tuple(tensor.shape)}")


def check_device(name: str, tensor: torch.Tensor, device: torch.device | str) -> None:
    """Raise unless ``tensor`` lives on ``device`` (type and, when given, index)."""
    check_tensor(name, tensor)
    want = torch.device(device)
    got = tensor.device
    if got.type != want.type or (want.index is not None and got.index != want.index):
        raise ValueError(f"{name} is on {got}; it must be on {want}")


def check_same_device(**tensors: torch.Tensor | None) -> torch.device:
    """Raise unless every non-None tensor is on one device; return that device.

    Called with keywords so the message names the arguments: ``check_same_device(q=q, k=k)``.
    """
    first_name: str | None = None
    first: torch.device | None = None
    for name, t in tensors.items():
        if t is None:
            continue
        check_tensor(name, t)
        if first is None:
            first_name, first = name, t.device
        elif t.device != first:
            raise ValueError(
                f"{name} is on {t.device} but {first_name} is on {first}; all inputs must be "
                "on one device"
            )
    if first is None:
        raise ValueError("check_same_device needs at least one tensor")
    return first


def check_contiguous(name: str, tensor: torch.Tensor) -> None:
    """Raise unless ``tensor`` is contiguous (for kernels that compute flat offsets)."""
    check_tensor(name, tensor)
    if not tensor.is_contiguous():
        raise ValueError(
            f"{name} must be contiguous (strides {tuple(tensor.stride())} for shape "
            f"{tuple(tensor.shape)}); this kernel computes flat offsets"
        )


def check_last_dim_contiguous(name: str, tensor: torch.Tensor) -> None:
    """Raise unless the innermost stride is 1 (strided views are fine, vector loads need this)."""
    check_tensor(name, tensor)
    if tensor.dim() > 0 and tensor.shape[-1] > 1 and tensor.stride(-1) != 1:
        raise ValueError(
            f"{name} must have stride 1 in its last dimension, got strides {tuple(tensor.stride())}"
        )


def v_cache_dim_major(v_cache: torch.Tensor) -> bool:
    """Which V page layout a kernel reads: False for token-major rows (head_dim contiguous,
    the default), True for dim-major pages (the page_size slots of one (head, dim) adjacent:
    vLLM's original value-cache layout, the pool's ``storage="v_dim_major"``); anything else
    raises ValueError naming both accepted layouts.

    ``v_cache`` is ``[num_pages, page_size, kv_heads, head_dim]``. Dim-major pages let the fp8
    decode feed V to the MMA with vector shared-memory reads instead of byte reads
    (docs/perf-notes.md, experiment 16). The decode kernel tells the compiler that a page's
    slots are adjacent and start at a multiple of page_size elements, so the page stride must
    be a multiple of page_size.
    """
    check_tensor("v_cache", v_cache)
    page_size = v_cache.shape[1]
    if v_cache.stride(3) == 1:
        return False
    if (page_size == 1 or v_cache.stride(1) == 1) and v_cache.stride(0) % page_size == 0:
        return True
    raise ValueError(
        "v_cache must be token-major (stride 1 in its last dimension) or dim-major (stride 1 "
        "in its page_size dimension, page stride a multiple of page_size), got shape "
        f"{tuple(v_cache.shape)} strides {tuple(v_cache.stride())}"
    )


def check_power_of_two(
    name: str, value: int, *, minimum: int = 1, maximum: int | None = None
) -> None:
    """Raise unless ``value`` is an int power of two within ``[minimum, maximum]``.

    Triton block shapes (``tl.arange``) must be powers of two, so head_dim / page_size style
    parameters are checked here rather than failing inside compilation.
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    ok = ok and (value & (value - 1)) == 0 and value >= minimum
    ok = ok and (maximum is None or value <= maximum)
    if not ok:
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise ValueError(f"{name} must be a power of two >= {minimum}{upper}, got {value!r}")


def check_optional_int_range(name: str, value: object, low: int, high: int) -> None:
    """``value`` is None (the callee picks) or an int (not a bool) in [low, high]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be None or an int in [{low}, {high}], got {value!r}")


def check_one_of(name: str, value: object, accepted: Iterable[object]) -> None:
    """Raise unless ``value`` is one of ``accepted`` (for string / enum options)."""
    accepted = tuple(accepted)
    if value not in accepted:
        raise ValueError(
            f"{name}={value!r} is not accepted; accepted: {', '.join(map(repr, accepted))}"
        )


def check_scale(name: str, scale: object, device: torch.device | None = None) -> None:
    """Raise unless ``scale`` is a python float/int or a 1-element fp32 tensor (on ``device``).

    fp8 e4m3 KV uses caller-side per-tensor scales; a missing or wrong-typed scale would silently
    produce wrong attention, so it is checked like any tensor argument.
    """
    if isinstance(scale, bool) or scale is None:
        raise ValueError(
            f"{name} must be a python float or a 1-element float32 tensor, got {scale!r}"
        )
    if isinstance(scale, (int, float)):
        return
    if not isinstance(scale, torch.Tensor):
        raise ValueError(  # noqa: TRY004 (one exception type for bad input, see check_tensor)
            f"{name} must be a python float or a 1-element float32 tensor, got {type(scale).__name__}"
        )
    if scale.dtype != torch.float32 or scale.numel() != 1:
        raise ValueError(
            f"{name} must be a 1-element float32 tensor, got dtype {scale.dtype} with "
            f"{scale.numel()} elements"
        )
    if device is not None:
        check_device(name, scale, device)


def values_checked(device: torch.device) -> bool:
    """Whether launchers read index values on the host for `device` (CHECK_VALUES_ON_DEVICE)."""
    return device.type == "cpu" or CHECK_VALUES_ON_DEVICE


def check_index_range(
    name: str, index: torch.Tensor, upper: int, *, what: str, skip_negative: bool = False
) -> None:
    """Every value of integer ``index`` in [0, upper) (negatives allowed, as "skip this
    entry", when ``skip_negative``); ValueError naming the argument, the accepted range and
    what it indexes (``what``), and the range it got."""
    if index.numel() == 0:
        return
    lo, hi = (int(x) for x in torch.aminmax(index))  # one pass: it runs on every CPU call
    if hi >= upper or (lo < 0 and not skip_negative):
        skip = " or be negative (skip the entry)" if skip_negative else ""
        raise ValueError(f"{name} must lie in [0, {upper}) ({what}){skip}; got [{lo}, {hi}]")

