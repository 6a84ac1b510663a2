"""Host-side input validation shared by the kernel launchers.

Why a module of its own: a Triton kernel given a wrong dtype, a wrong stride or a tensor on the
wrong device does not fail, it reads garbage (or faults much later, asynchronously). Every
launcher therefore validates its inputs on the host first and raises ``ValueError`` naming the
argument and what is accepted, with one spelling of the message across ops. These helpers are
deliberately small and generic (no op knowledge) so that kv_write, kv_gather_fp8 and
paged_decode can all use them; they cost microseconds, paid once per call on the host.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import torch

#: The safe-mode variable (docs/safety.md). ``KVBENCH_CHECK=1``: every op validates the
#: values of its index and scale tensors. CPU inputs are always validated on the host (free
#: there, and an out-of-range index through the Triton interpreter is a segfault). CUDA
#: inputs are validated on the device only in safe mode, without a host sync: the launcher
#: computes which rules failed on the device, replaces out-of-range indices by in-range ones
#: (so no kernel reads or writes out of bounds), poisons the outputs they would have fed, and
#: queues the verdict; the ValueError is raised by the next safe-mode call that finds it
#: ready, or by ``raise_pending()`` (which waits for it). The fast path (safe mode off) reads
#: no index value on CUDA: a bad block table, slot or page id is an out-of-bounds access.
SAFE_MODE_VAR = "KVBENCH_CHECK"
_SAFE_MODE_VALUES = {"": False, "0": False, "1": True}

# One spelling of dtype names everywhere (docs/architecture.md, "Dtype names"); the messages
# below print torch names because that is what a caller passes.


def _dtype_list(accepted: Iterable[torch.dtype]) -> str:
    return ", ".join(str(d) for d in accepted)


def validate_tensor(name: str, value: object) -> torch.Tensor:
    """Raise unless ``value`` is a torch.Tensor; return it (so launchers can chain)."""
    if not isinstance(value, torch.Tensor):
        # ValueError, not TypeError: the project contract is one exception type for bad input.
        raise ValueError(f"{name} must be a torch.Tensor, got {type(value).__name__}")  # noqa: TRY004
    return value


def validate_dtype(name: str, tensor: torch.Tensor, accepted: Iterable[torch.dtype]) -> None:
    """Raise unless ``tensor.dtype`` is one of ``accepted``."""
    accepted = tuple(accepted)
    validate_tensor(name, tensor)
    if tensor.dtype not in accepted:
        raise ValueError(f"{name} has dtype {tensor.dtype}; accepted: {_dtype_list(accepted)}")


def validate_ndim(name: str, tensor: torch.Tensor, ndim: int, what: str = "") -> None:
    """Raise unless ``tensor`` has exactly ``ndim`` dimensions; ``what`` names the axes."""
    validate_tensor(name, tensor)
    if tensor.dim() != ndim:
        axes = f" {what}" if what else ""
        raise ValueError(
            f"{name} must be {ndim}-D{axes}, got {tensor.dim()}-D shape {tuple(tensor.shape)}"
        )


def validate_shape(name: str, tensor: torch.Tensor, expected: Sequence[int | None]) -> None:
    """Raise unless ``tensor.shape`` matches ``expected``; ``None`` entries match any size."""
    validate_ndim(name, tensor, len(expected))
    for got, want in zip(tensor.shape, expected, strict=True):
        if want is not None and got != want:
            shown = tuple("*" if w is None else w for w in expected)
            raise ValueError(f"{name} must have shape {shown}, got {tuple(tensor.shape)}")


def validate_device(name: str, tensor: torch.Tensor, device: torch.device | str) -> None:
    """Raise unless ``tensor`` lives on ``device`` (type and, when given, index)."""
    validate_tensor(name, tensor)
    want = torch.device(device)
    got = tensor.device
    if got.type != want.type or (want.index is not None and got.index != want.index):
        raise ValueError(f"{name} is on {got}; it must be on {want}")


def validate_same_device(**tensors: torch.Tensor | None) -> torch.device:
    """Raise unless every non-None tensor is on one device; return that device.

    Called with keywords so the message names the arguments: ``validate_same_device(q=q, k=k)``.
    """
    first_name: str | None = None
    first: torch.device | None = None
    for name, t in tensors.items():
        if t is None:
            continue
        validate_tensor(name, t)
        if first is None:
            first_name, first = name, t.device
        elif t.device != first:
            raise ValueError(
                f"{name} is on {t.device} but {first_name} is on {first}; all inputs must be "
                "on one device"
            )
    if first is None:
        raise ValueError("validate_same_device needs at least one tensor")
    return first


def validate_contiguous(name: str, tensor: torch.Tensor) -> None:
    """Raise unless ``tensor`` is contiguous (for kernels that compute flat offsets)."""
    validate_tensor(name, tensor)
    if not tensor.is_contiguous():
        raise ValueError(
            f"{name} must be contiguous (strides {tuple(tensor.stride())} for shape "
            f"{tuple(tensor.shape)}); this kernel computes flat offsets"
        )


def validate_last_dim_contiguous(name: str, tensor: torch.Tensor) -> None:
    """Raise unless the innermost stride is 1 (strided views are fine, vector loads need this)."""
    validate_tensor(name, tensor)
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
    (docs/decisions.md). The decode kernel tells the compiler that a page's
    slots are adjacent and start at a multiple of page_size elements, so the page stride must
    be a multiple of page_size.
    """
    validate_tensor("v_cache", v_cache)
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


def validate_power_of_two(
    name: str, value: int, *, minimum: int = 1, maximum: int | None = None
) -> None:
    """Raise unless ``value`` is an int power of two within ``[minimum, maximum]``.

    Triton block shapes (``tl.arange``) must be powers of two, so head_dim / page_size style
    parameters are validated here rather than failing inside compilation.
    """
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    ok = ok and (value & (value - 1)) == 0 and value >= minimum
    ok = ok and (maximum is None or value <= maximum)
    if not ok:
        upper = f" and <= {maximum}" if maximum is not None else ""
        raise ValueError(f"{name} must be a power of two >= {minimum}{upper}, got {value!r}")


def validate_optional_int_range(name: str, value: object, low: int, high: int) -> None:
    """``value`` is None (the callee picks) or an int (not a bool) in [low, high]."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be None or an int in [{low}, {high}], got {value!r}")


def validate_one_of(name: str, value: object, accepted: Iterable[object]) -> None:
    """Raise unless ``value`` is one of ``accepted`` (for string / enum options)."""
    accepted = tuple(accepted)
    if value not in accepted:
        raise ValueError(
            f"{name}={value!r} is not accepted; accepted: {', '.join(map(repr, accepted))}"
        )


def validate_scale(name: str, scale: object, device: torch.device | None = None, *,
                   per_head: int | None = None) -> None:
    """Raise unless ``scale`` is a python float/int or a 1-element fp32 tensor (on ``device``),
    or, with ``per_head`` (the kv head count), a contiguous ``[per_head]`` fp32 tensor.

    fp8 e4m3 KV uses caller-side per-tensor scales; a missing or wrong-typed scale would silently
    produce wrong attention, so it is validated like any tensor argument.
    """
    if isinstance(scale, bool) or scale is None:
        raise ValueError(
            f"{name} must be a python float or a 1-element float32 tensor, got {scale!r}"
        )
    if isinstance(scale, (int, float)):
        return
    if not isinstance(scale, torch.Tensor):
        raise ValueError(  # noqa: TRY004 (one exception type for bad input, see validate_tensor)
            f"{name} must be a python float or a 1-element float32 tensor, "
            f"got {type(scale).__name__}"
        )
    heads_ok = (per_head is not None and scale.dim() == 1 and scale.numel() == per_head
                and scale.is_contiguous())
    if scale.dtype != torch.float32 or not (scale.numel() == 1 or heads_ok):
        what = "a 1-element float32 tensor"
        if per_head is not None:
            what += f" or a contiguous [kv_heads={per_head}] float32 tensor"
        raise ValueError(
            f"{name} must be {what}, got dtype {scale.dtype} with shape {tuple(scale.shape)}"
        )
    if device is not None:
        validate_device(name, scale, device)


def safe_mode() -> bool:
    """Whether ``KVBENCH_CHECK`` asks for value validation on the device (read at call time)."""
    raw = os.environ.get(SAFE_MODE_VAR, "")
    try:
        return _SAFE_MODE_VALUES[raw.strip()]
    except KeyError:
        raise ValueError(f"{SAFE_MODE_VAR}={raw!r} is not accepted; accepted: 0 or 1 "
                         "(unset means 0)") from None


def values_validated(device: torch.device) -> bool:
    """Whether launchers read index values on the host for ``device``: CPU inputs only."""
    return device.type == "cpu"


def device_validated(device: torch.device) -> bool:
    """Whether launchers validate index values on the device (a CUDA input in safe mode)."""
    return device.type != "cpu" and safe_mode()


@dataclass
class _Pending:
    """One safe-mode call's verdict on its way to the host (a pinned copy behind an event)."""

    event: torch.cuda.Event
    stats: torch.Tensor  # pinned host int64 [rules, 3]: failed, lowest, highest value
    messages: tuple[str, ...]


_PENDING: list[_Pending] = []


class DeviceValidation:
    """The value validation of one safe-mode call on a CUDA input, evaluated on the device.

    ``bounds(name, values, low, high, what)`` records whether every value lies in
    [low, high) and returns a copy with the offending values replaced by ``replacement``
    (in range, or a skip marker the kernel honours), so the launch that follows stays in
    bounds. ``submit()`` queues the verdict without waiting for it.
    """

    def __init__(self) -> None:
        self._rows: list[torch.Tensor] = []
        self._messages: list[str] = []

    def bounds(self, name: str, values: torch.Tensor, low: int, high: int, *, what: str,
               replacement: int, skip_negative: bool = False) -> torch.Tensor:
        ok = (values >= low) & (values < high)
        if skip_negative:
            ok |= values < 0
        self._record(name, ~ok, values, f"must lie in [{low}, {high}) ({what})"
                     + (" or be negative (skip the entry)" if skip_negative else ""))
        return torch.where(ok, values, torch.full_like(values, replacement))

    def flag(self, name: str, bad: torch.Tensor, values: torch.Tensor, rule: str) -> None:
        """Record a rule whose failures ``bad`` (bool, any shape) the caller computed."""
        self._record(name, bad, values, rule)

    def _record(self, name: str, bad: torch.Tensor, values: torch.Tensor, rule: str) -> None:
        v = values.reshape(-1).to(torch.float64)
        if v.numel() == 0:
            return
        self._rows.append(torch.stack([bad.any().to(torch.float64), v.min(), v.max()]))
        self._messages.append(f"{name} {rule}")

    def submit(self) -> None:
        """Queue this call's verdict (a non-blocking copy to pinned memory and an event)."""
        if not self._rows:
            return
        stats = torch.stack(self._rows)
        host = torch.empty(stats.shape, dtype=stats.dtype, pin_memory=True)
        host.copy_(stats, non_blocking=True)
        event = torch.cuda.Event()
        event.record()
        _PENDING.append(_Pending(event, host, tuple(self._messages)))


def raise_pending(*, wait: bool = True) -> None:
    """Raise the ValueError of any failed safe-mode validation queued so far (docs/safety.md).

    ``wait=False`` looks only at verdicts already on the host (what each safe-mode call does
    first, so a failure surfaces at the next call without a sync); ``wait=True`` waits for
    all of them (call it where the caller syncs anyway, or at the end of an op's check).
    """
    while _PENDING:
        head = _PENDING[0]
        if not wait and not head.event.query():
            return
        head.event.synchronize()
        _PENDING.pop(0)
        failed = [f"{msg}; got [{lo:g}, {hi:g}]"
                  for msg, (bad, lo, hi) in zip(head.messages, head.stats.tolist(), strict=True)
                  if bad]
        if failed:
            _PENDING.clear()  # later verdicts may stem from this one's poisoned outputs
            raise ValueError("safe mode (KVBENCH_CHECK=1): " + "; ".join(failed))


def device_validation(device: torch.device) -> DeviceValidation | None:
    """A DeviceValidation for this call when ``device`` is validated on the device, else None.

    Raises first the failure of an earlier safe-mode call whose verdict has arrived.
    """
    if not device_validated(device):
        return None
    raise_pending(wait=False)
    return DeviceValidation()


def validate_index_range(
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



#: The largest finite e4m3 value, and the largest scale that widens it to a finite float32:
#: a larger scale turns the biggest codes into inf and the attention rows into NaN.
E4M3_MAX = 448.0
MAX_FP8_SCALE = float(torch.finfo(torch.float32).max) / E4M3_MAX


def validate_scale_value(name: str, scale: object, validation: DeviceValidation | None) -> None:
    """An fp8 scale must be finite, > 0 and at most MAX_FP8_SCALE (0 turns every value into
    inf/NaN, a negative one flips signs, NaN poisons the output, a huge one overflows the
    widened values to inf). Python floats and CPU tensors are read here; a
    CUDA tensor is validated on the device in safe mode (``validation``) and not at all otherwise
    (reading it would be a device sync)."""
    if isinstance(scale, torch.Tensor):
        if scale.device.type == "cpu":  # every entry (per kv head scales): the worst one
            flat = scale.reshape(-1).double()
            bad = ~((flat > 0) & (flat <= MAX_FP8_SCALE))
            value = float(flat[bad][0]) if bool(bad.any()) else float(flat[0])
        elif validation is not None:
            validation.flag(name, ~(torch.isfinite(scale * E4M3_MAX) & (scale > 0)), scale,
                            "must be a finite scale > 0 with scale * 448 finite")
            return
        else:
            return
    else:
        value = float(scale)  # type: ignore[arg-type]
    if not (0.0 < value <= MAX_FP8_SCALE):
        raise ValueError(f"{name} must be a finite scale > 0 whose product with the largest "
                         f"e4m3 value (448) is a finite float32 (<= {MAX_FP8_SCALE:.4g}), "
                         f"got {value!r}")


def _footprint(t: torch.Tensor) -> tuple[int, int, int]:
    """(first byte, byte stride of dim 0, bytes one dim-0 slice spans) of a strided tensor."""
    size = t.element_size()
    inner = 1 + sum((n - 1) * s for n, s in zip(t.shape[1:], t.stride()[1:], strict=True))
    return t.data_ptr(), t.stride(0) * size, inner * size


def validate_no_self_overlap(name: str, t: torch.Tensor) -> None:
    """Raise when two elements of ``t`` share memory (a zero stride, or a stride smaller than
    what the dimensions inside it span): writing through such a view races with itself.

    The test is the sufficient one (each stride, in increasing order, covers the extent of
    the dimensions below it), so an exotic interleaving that happens not to collide is
    refused too; every layout kvbench's pool builds passes it.
    """
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1)
    extent = 1
    for stride, n in dims:
        if stride < extent:
            raise ValueError(f"{name} overlaps itself (shape {tuple(t.shape)}, strides "
                             f"{tuple(t.stride())}): elements would share memory")
        extent = stride * (n - 1) + extent


def validate_no_overlap(name_a: str, a: torch.Tensor, name_b: str, b: torch.Tensor,
                        remedy: str = "pass disjoint K and V views") -> None:
    """Raise when two paged views ``[pages, ...]`` share a byte (e.g. K and V caches shifted
    by a page). Views interleaved page by page in one buffer (the engine's combined K/V
    layout) do not overlap and pass.

    Each view is its pages' byte ranges [start + i * stride, + span) in the address space
    (views of distinct allocations never intersect there); with equal page strides the
    question is whether some page distance m in [-(pages - 1), pages - 1] puts a page of
    ``b`` within a page of ``a``, answered in O(1). Unequal strides fall back to comparing
    the views' whole ranges (conservative).
    """
    if a.numel() == 0 or b.numel() == 0:
        return
    a0, sa, ea = _footprint(a)
    b0, sb, eb = _footprint(b)
    pages = min(a.shape[0], b.shape[0])
    overlap: bool
    if sa == sb and sa >= max(ea, eb) and a.shape[0] == b.shape[0]:
        d = b0 - a0
        # pages i of a and j of b collide iff -eb < d + (j - i) * sa < ea
        lo = -((eb - 1 + d) // sa)  # smallest m with d + m * sa > -eb
        hi = (ea - 1 - d) // sa  # largest m with d + m * sa < ea
        overlap = max(lo, -(pages - 1)) <= min(hi, pages - 1)
    else:
        a_end = a0 + (a.shape[0] - 1) * sa + ea
        b_end = b0 + (b.shape[0] - 1) * sb + eb
        overlap = a0 < b_end and b0 < a_end
    if overlap:
        raise ValueError(f"{name_a} and {name_b} share memory (a write to one would change the "
                         f"other); {remedy}")


@contextlib.contextmanager
def validated_calls() -> Iterator[None]:
    """Run the calls inside in safe mode, then wait for their verdicts and raise a failure.

    For an op's check (kvbench.ops.<op>.check_<op>), never around timed calls: the device-side
    validation is extra work, and waiting for its verdict is a host sync.
    """
    before = os.environ.get(SAFE_MODE_VAR)
    os.environ[SAFE_MODE_VAR] = "1"
    try:
        yield
        raise_pending(wait=True)
    finally:
        if before is None:
            os.environ.pop(SAFE_MODE_VAR, None)
        else:
            os.environ[SAFE_MODE_VAR] = before


#: Cache-view pairs already found disjoint, by (pointers, shapes, strides, element size):
#: the verdict is arithmetic on those alone, and an engine passes the same per-layer caches
#: every step, so the validation costs one dict lookup after the first call. Bounded.
_DISJOINT_VIEWS: set[tuple] = set()
_DISJOINT_VIEWS_MAX = 1024


def validate_cache_views(k_cache: torch.Tensor, v_cache: torch.Tensor) -> None:
    """Raise when a K or V cache view overlaps itself or the other (validate_no_self_overlap,
    validate_no_overlap); remembered per view geometry once it passed."""
    key = (k_cache.data_ptr(), v_cache.data_ptr(), k_cache.element_size(), tuple(k_cache.shape),
           k_cache.stride(), tuple(v_cache.shape), v_cache.stride())
    if key in _DISJOINT_VIEWS:
        return
    validate_no_self_overlap("k_cache", k_cache)
    validate_no_self_overlap("v_cache", v_cache)
    validate_no_overlap("k_cache", k_cache, "v_cache", v_cache)
    if len(_DISJOINT_VIEWS) >= _DISJOINT_VIEWS_MAX:
        _DISJOINT_VIEWS.clear()
    _DISJOINT_VIEWS.add(key)
