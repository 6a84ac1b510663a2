"""dispatch(): pick the registry row for a problem, say why, and cache the decision.

A problem is (op, dtype name, layout tags, shape, device). Every row of the op is filtered in
order: dtype, layout tags (missing / forbidden), availability on the problem's device, shape
gate, and golden verification (the row's correctness check, run lazily once per process and
(dtype, device kind)). Survivors are ranked by the key

    (measured µs from the perf provider, or +inf; -preference score; -priority; name)

so a measurement beats every heuristic, a heuristic beats the static priority, and the name
makes the order total. explain() prints the whole chain.

Selectors (KVBENCH_PAGED_DECODE ...) are read when dispatch() is called. "auto" ranks; a spec
name forces that row. A forced row that the problem filters out raises DispatchError (its
message carries explain()), and so does a forced row whose check fails: a forced row still
runs its check once and never runs unverified, so a benchmark that forces a broken row fails
loudly instead of timing wrong output. No forced decision silently runs another row.

Decisions are cached per (op, dtype, tags, bucket, device, raw selector value, features), the
features being the shape values the key holds exactly because a gate or a preference rule
reads them (decision_features: paged_decode's batch, context capacity, head counts, head_dim
and page size; the tune table still answers per bucket). The selector variable
is read on every call from the bytes mapping os.environ keeps in sync (one dict lookup;
os.environ.get() would cost more than the rest of the cached path, see _ENV below and
docs/allocator.md); with its raw value in the key a changed selector never hits a stale
decision. set_perf_provider(), record_golden() and using_registry() clear the cache.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from kvbench.core.device import device_name, resolve_device, sm_count
from kvbench.core.dtypes import ROW_DTYPES
from kvbench.core.env import AUTO, SELECTOR_VARS, read_selector, warn_unknown_settings
from kvbench.dispatch import golden, perf_tables
from kvbench.dispatch.perf_tables import PerfProvider
from kvbench.dispatch.registry import REGISTRY, Registry, bucket, validate_op
from kvbench.dispatch.spec import GoldenRecord, KernelSpec
from kvbench.ops.common import Problem

#: fn(op, bucket, spec_name, device_name, dtype, tags) -> milliseconds, or None when not
#: measured. The dtype and the layout tags are the problem's: a row's rank can differ between
#: dtypes (cuda/cluster_decode leads Triton at fp16 and trails it at fp8) and between layouts
#: (the Triton fp8 decode is faster from dim-major V pages: docs/decisions.md, "fp8 dim-major
#: V pages"), so a number measured at one must not rank rows for another.


class DispatchError(ValueError):
    """No row can serve the problem, or the forced row cannot. `.explain` holds the chain."""

    def __init__(self, message: str, explain: str) -> None:
        super().__init__(f"{message}\n{explain}")
        self.explain = explain


# ---- module state ----------------------------------------------------------------------------

#: (op, dtype, tags, bucket, device, raw selector value, features) -> Selection. kvbench.api
#: reads it on its hot path through cached_selection (DECISIONS is the same dict); only this
#: module writes it.
_DECISIONS: dict[tuple[Any, ...], Selection] = {}
DECISIONS = _DECISIONS
_registry: Registry = REGISTRY


def _default_provider(
    op: str, bucket_name: str, spec_name: str, device_name: str, dtype: str,
    tags: frozenset[str],
) -> float | None:
    """Perf tables stored by `kvbench tune` for this device name (loaded lazily, per name)."""
    return perf_tables.stored_tables_provider(op, bucket_name, spec_name, device_name, dtype, tags)


_provider: PerfProvider | None = _default_provider


# Selector values in the decision key are read raw: os.environ.get() encodes the name and
# decodes the value on every call, which costs more than the rest of the cached path
# together, while the bytes mapping that os.environ keeps in sync is one dict lookup.
# read_selector() still parses the value when a decision is made.
_ENV_DATA = getattr(os.environ, "_data", None)
if os.name == "posix" and isinstance(_ENV_DATA, dict):
    _ENV: Mapping[Any, Any] = _ENV_DATA
    _ENV_KEYS: dict[str, Any] = {op: os.fsencode(var) for op, var in SELECTOR_VARS.items()}
else:  # pragma: no cover - other platforms keep the documented mapping
    _ENV = os.environ
    _ENV_KEYS = dict(SELECTOR_VARS)



def clear_decisions() -> None:
    """Drop every cached decision (the next dispatch() of each problem decides again)."""
    _DECISIONS.clear()


def set_perf_provider(fn: PerfProvider | None) -> None:
    """Install the source of measured latencies; None ranks on preference/priority/name only.

    fn(op, bucket, spec_name, device_name, dtype, tags) returns MILLISECONDS (the engine's
    convention) or None. reset_perf_provider() restores the default: the tables `kvbench
    tune` stored for the device. Cached decisions are dropped.
    """
    global _provider
    if fn is not None and not callable(fn):
        raise ValueError(f"set_perf_provider: expected a callable or None, got {fn!r}")
    _provider = fn
    clear_decisions()


def reload_perf_tables() -> None:
    """Forget loaded perf tables and the decisions made with them (after a tune wrote one)."""
    perf_tables.clear_table_cache()
    clear_decisions()


def reset_perf_provider() -> None:
    """Back to the default provider (perf tables stored by `kvbench tune`)."""
    set_perf_provider(_default_provider)


def get_perf_provider() -> PerfProvider | None:
    return _provider


def _provider_us(
    op: str, bucket_name: str, spec_name: str, device_name: str, dtype: str,
    tags: frozenset[str],
) -> float:
    """Measured latency of a row in MICROSECONDS, +inf when the provider has no number.

    Unit boundary: the perf provider speaks milliseconds (engine convention), the harness and
    the ranking speak microseconds. This is the only place that converts (x 1000).
    """
    if _provider is None:
        return math.inf
    ms = _provider(op, bucket_name, spec_name, device_name, dtype, tags)
    if ms is None:
        return math.inf
    ms = float(ms)
    if not math.isfinite(ms) or ms <= 0:
        raise ValueError(
            f"perf provider returned {ms!r} ms for {op}/{bucket_name}/{spec_name}; "
            "expected a positive finite number of milliseconds or None"
        )
    return ms * 1000.0


def active_registry() -> Registry:
    return _registry


@contextlib.contextmanager
def using_registry(registry: Registry) -> Iterator[Registry]:
    """Make dispatch use `registry` inside the block (tests register fake rows this way)."""
    global _registry
    if not isinstance(registry, Registry):
        raise ValueError(  # noqa: TRY004 - one exception type for bad input
            f"using_registry: expected a Registry, got {type(registry).__name__}"
        )
    previous = _registry
    _registry = registry
    clear_decisions()
    try:
        yield registry
    finally:
        _registry = previous
        clear_decisions()


def spec_names(op: str) -> tuple[str, ...]:
    """Row names of `op` in the active registry (asv params, the selector error message)."""
    return _registry.spec_names(op)


def selector_problem(op: str) -> str | None:
    """What is wrong with `op`'s selector variable now (a value that names no row, with the
    values accepted), or None. dispatch raises it; `kvbench env` reports it before any run."""
    selector = read_selector(op)
    names = _registry.spec_names(op)
    if selector == AUTO or selector in names:
        return None
    return (f"{SELECTOR_VARS[op]}={selector!r} is not a row of {op}; "
            f"valid values: {AUTO}, {', '.join(names)}")


# ---- devices ---------------------------------------------------------------------------------

def _device_info(device: torch.device) -> tuple[str, int | None]:
    """(device name, SM count): the names perf tables are keyed on, and the SMs the
    preference rules compare a problem's parallelism with."""
    return device_name(device), sm_count(device)


# ---- decisions -------------------------------------------------------------------------------


@dataclass
class RowVerdict:
    """One row's fate in a decision: excluded (with the reason) or ranked (with its key)."""

    spec: KernelSpec
    excluded: str | None = None
    golden: GoldenRecord | None = None
    perf_us: float = math.inf
    preference: float = 0.0
    fired: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[float, float, int, str]:
        return (self.perf_us, -self.preference, -self.spec.priority, self.spec.name)


@dataclass
class Selection:
    """The chosen row for a problem. `.target` is the imported callable; explain() says why."""

    spec: KernelSpec
    target: Callable[..., Any]
    bucket: str
    op: str
    dtype: str
    tags: frozenset[str]
    shape: Mapping[str, Any] | None
    device: torch.device
    device_name: str
    selector: str
    verdicts: list[RowVerdict]
    ranked: list[RowVerdict]

    @property
    def forced(self) -> bool:
        return self.selector != AUTO

    def explain(self) -> str:
        return _explain(self, chosen=self.spec.name)


def _fmt_us(us: float) -> str:
    return "unmeasured" if math.isinf(us) else f"{us:.2f} µs"


def _explain(sel: Selection, chosen: str | None) -> str:
    """The decision chain as plain text (greppable in CI logs and asv output)."""
    var = SELECTOR_VARS[sel.op]
    tags = ", ".join(sorted(sel.tags)) or "-"
    shape = "-" if sel.shape is None else ", ".join(f"{k}={v}" for k, v in sel.shape.items())
    lines = [
        (
            f"dispatch {sel.op}: dtype={sel.dtype} tags={{{tags}}} bucket={sel.bucket} "
            f"device={sel.device} ({sel.device_name}) {var}={sel.selector}"
        ),
        f"  shape: {shape}",
        "  rows:",
    ]
    width = max(len(v.spec.name) for v in sel.verdicts) if sel.verdicts else 10
    for v in sel.verdicts:
        if v.excluded is not None:
            lines.append(f"    {v.spec.name:<{width}}  excluded: {v.excluded}")
        else:
            g = v.golden
            diff = "-" if g is None or g.max_abs_diff is None else f"{g.max_abs_diff:.3g}"
            lines.append(
                f"    {v.spec.name:<{width}}  ok: verified (max_abs_diff {diff}, "
                f"{g.detail if g else '-'})"
            )
    lines.append("  ranked by (measured µs, -preference, -priority, name):")
    if not sel.ranked:
        lines.append("    (no row survives)")
    for i, v in enumerate(sel.ranked, 1):
        fired = f" [{', '.join(v.fired)}]" if v.fired else ""
        mark = "  <- selected" if v.spec.name == chosen else ""
        lines.append(
            f"    {i}. {v.spec.name:<{width}}  {_fmt_us(v.perf_us)}  preference={v.preference:g}"
            f"{fired}  priority={v.spec.priority}{mark}"
        )
    if chosen is not None:
        how = f"forced by {var}" if sel.forced else "auto"
        lines.append(f"  selected: {chosen} ({how})")
    return "\n".join(lines)


def _exclusion(spec: KernelSpec, dtype: str, tags: frozenset[str], shape, device) -> str | None:
    """Why `spec` cannot serve the problem (cheap filters only), or None."""
    if dtype not in spec.dtypes:
        return f"dtype {dtype} not served (serves {', '.join(spec.dtypes)})"
    layout = spec.layout_for(dtype)
    missing = layout.missing(tags)
    if missing:
        return f"layout tag missing: {', '.join(missing)}"
    conflicting = layout.conflicting(tags)
    if conflicting:
        return f"layout tag forbidden: {', '.join(conflicting)}"
    why = spec.available(device)
    if why:
        return f"unavailable: {why}"
    if spec.shape_gate is not None and shape is not None:
        why = spec.shape_gate(shape)
        if why:
            return f"shape gate: {why}"
    return None


def _evaluate(
    op: str,
    dtype: str,
    tags: frozenset[str],
    shape: Mapping[str, Any] | None,
    bucket_name: str,
    device: torch.device,
    dev_name: str,
    forced: str | None,
) -> tuple[list[RowVerdict], list[RowVerdict]]:
    """Filter, verify and rank every row. With `forced`, only that row is checked and ranked."""
    verdicts: list[RowVerdict] = []
    for spec in _registry.specs(op):
        v = RowVerdict(spec)
        verdicts.append(v)
        if forced is not None and spec.name != forced:
            v.excluded = f"not considered: selector forces {forced}"
            continue
        v.excluded = _exclusion(spec, dtype, tags, shape, device)
        if v.excluded is not None:
            continue
        v.golden = golden.ensure_verified(spec, dtype, device)
        if not v.golden.verified:
            v.excluded = f"unverified: golden check failed ({v.golden.detail})"
            continue
        v.preference, v.fired = spec.preference_score(shape)
        v.perf_us = _provider_us(op, bucket_name, spec.name, dev_name, dtype, tags)
    ranked = sorted((v for v in verdicts if v.excluded is None), key=lambda v: v.key)
    return verdicts, ranked


def _full_shape(
    shape: Mapping[str, Any] | None, dtype: str, device: torch.device
) -> dict[str, Any] | None:
    """The caller's shape plus the device's SM count (None on CPU) and the problem's dtype:
    preference rules read both (a row can lead at 16-bit KV and trail at fp8)."""
    if shape is None:
        return None
    full = dict(shape)
    if "sm_count" not in full:
        full["sm_count"] = _device_info(device)[1]
    full["dtype"] = dtype  # the problem's, even where the caller's shape says otherwise
    return full


def _decide(
    op: str,
    dtype: str,
    tags: frozenset[str],
    shape: Mapping[str, Any] | None,
    bucket_name: str,
    device: torch.device,
) -> Selection:
    selector = read_selector(op)
    problem = selector_problem(op)
    if problem is not None:
        raise ValueError(problem)
    warn_unknown_settings()  # a misspelt selector would otherwise measure `auto` silently
    dev_name = _device_info(device)[0]
    full = _full_shape(shape, dtype, device)
    forced = None if selector == AUTO else selector
    verdicts, ranked = _evaluate(op, dtype, tags, full, bucket_name, device, dev_name, forced)
    sel = Selection(
        # spec/target are filled below once a row won; an error path never returns `sel`
        spec=ranked[0].spec if ranked else None,  # type: ignore[arg-type]
        target=_unloaded,
        bucket=bucket_name,
        op=op,
        dtype=dtype,
        tags=tags,
        shape=full,
        device=device,
        device_name=dev_name,
        selector=selector,
        verdicts=verdicts,
        ranked=ranked,
    )
    if not ranked:
        text = _explain(sel, chosen=None)
        if forced is not None:
            reason = next(v.excluded for v in verdicts if v.spec.name == forced)
            raise DispatchError(
                f"{op}: forced row {forced} cannot serve this problem: {reason}", text
            )
        raise DispatchError(f"{op}: no registry row can serve this problem", text)
    sel.target = ranked[0].spec.load()
    return sel


def _unloaded(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("internal: Selection.target used before the row was loaded")


def _validate_dtype(dtype: str) -> None:
    if dtype not in ROW_DTYPES:
        raise ValueError(f"dtype {dtype!r}: accepted dtype names are {', '.join(ROW_DTYPES)}")


def _as_tags(tags: Iterable[str]) -> frozenset[str]:
    if type(tags) is frozenset:
        return tags  # type: ignore[return-value]
    if isinstance(tags, str):
        raise ValueError(  # noqa: TRY004 - one exception type for bad input
            f"tags: expected an iterable of tag strings, got the string {tags!r}"
        )
    items = list(tags)
    if not all(isinstance(t, str) for t in items):
        raise ValueError(f"tags: every tag must be a string, got {sorted(map(repr, items))}")
    return frozenset(items)


def dispatch(
    op: str,
    *,
    dtype: str,
    tags: Iterable[str] = (),
    shape: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
) -> Selection:
    """The row that serves (op, dtype, tags, shape, device) now, honouring the op's selector.

    Raises ValueError for an unknown op, dtype name or selector value (listing what is
    accepted), and DispatchError (a ValueError) when no row, or not the forced row, can serve.
    """
    tagset = _as_tags(tags)
    dev = resolve_device(device)
    bucket_name = bucket(op, shape)  # also validates op
    _check_decision_values(op, shape)
    key = (op, dtype, tagset, bucket_name, dev, _ENV.get(_ENV_KEYS[op]),
           decision_features(op, shape))
    sel = _DECISIONS.get(key)
    if sel is None:
        _validate_dtype(dtype)
        sel = _decide(op, dtype, tagset, shape, bucket_name, dev)
        _DECISIONS[key] = sel
    return sel


def select(problem: Problem) -> Selection:
    """dispatch() of a described problem (kvbench.ops.<op>.describe_<op>, OpInputs.problem):
    what kvbench.api calls on a cache miss and kvbench.measure calls for every case."""
    return dispatch(problem.op, dtype=problem.dtype, tags=problem.tags, shape=problem.shape,
                    device=problem.device)


#: The shape keys whose exact values the decision key holds, per op, beyond the bucket.
#: paged_decode's geometry (q heads, kv heads, head_dim, page size): a kernel built for some
#: geometries only (cuda/cluster_decode: head_dim 128, 1/2/4/8 q heads per kv head, fp8 pages of
#: >= 16 tokens) gates on it, so a process decoding a head_dim-128 model and then a head_dim-64
#: one in the same bucket would otherwise launch the first one's row on the second. Its batch
#: and context capacity: the preference rules compare batch x kv heads with the SM count, a
#: threshold inside the batch buckets (batch 16 and 17 fall on either side at 8 kv heads and
#: 132 SMs, both in "9-32"), so one decision per bucket let whichever shape came first decide
#: for the rest and made the pick depend on call order. A serving loop sees a bounded set of
#: batch sizes and one table width, so the cache stays small; measured tables stay per bucket.
#: Its decode options (window, soft-cap, per-head scales): a row that does not implement one
#: refuses it by its shape gate, so a call with options must not reuse a decision made without.
DECISION_KEYS: dict[str, tuple[str, ...]] = {
    "paged_decode": ("batch", "max_context", "q_heads", "kv_heads", "head_dim", "page_size",
                     "options"),
}


def _check_decision_values(op: str, shape: Mapping[str, Any] | None) -> None:
    """ValueError naming the key unless each DECISION_KEYS value of the shape is absent, None,
    an int >= 0, or for "options" a tuple of option names: the values enter the decision key
    (a list is unhashable) and the rows' shape gates compare them with ints."""
    for key in DECISION_KEYS.get(op, ()) if shape is not None else ():
        value = shape.get(key)
        if value is None:
            continue
        if key == "options":
            if not (isinstance(value, tuple) and all(isinstance(o, str) for o in value)):
                raise ValueError(f"shape['options'] for {op} must be a tuple of decode option "
                                 f"names (e.g. ('window', 'softcap')), got {value!r}")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"shape[{key!r}] for {op} must be a non-negative int, got "
                             f"{value!r}")


def decision_features(op: str, shape: Mapping[str, Any] | None) -> tuple:
    """The decision key's last part: DECISION_KEYS' values of the shape (None where absent),
    () for an op without any or a problem without a shape. The op oracle's <op>_fields
    build the same tuple from tensor shapes for kvbench.api's hot path."""
    keys = DECISION_KEYS.get(op)
    if not keys or shape is None:
        return ()
    return tuple(shape.get(k) for k in keys)


def cached_selection(
    op: str, dtype: str, tags: frozenset[str], bucket_name: str, device: torch.device,
    features: tuple = (),
) -> Selection | None:
    """The cached decision for an already-bucketed problem, or None (the entry points' hot
    path).

    kvbench.api calls this first with values read straight from tensor shapes, so a cached
    call costs a tuple build and a dict lookup; on a miss it calls select() with the full
    problem, which stores the decision under the same key.
    """
    return _DECISIONS.get(
        (op, dtype, tags, bucket_name, device, _ENV.get(_ENV_KEYS[op]), features))


def verified_rows(
    op: str,
    *,
    dtype: str,
    tags: Iterable[str] = (),
    shape: Mapping[str, Any] | None = None,
    device: torch.device | str | None = None,
) -> list[KernelSpec]:
    """Every row that passes all filters and its check for this problem, ignoring the selector
    and the perf provider (what `kvbench tune` measures)."""
    validate_op(op)
    _validate_dtype(dtype)
    dev = resolve_device(device)
    tagset = _as_tags(tags)
    full = _full_shape(shape, dtype, dev)
    verdicts = []
    for spec in _registry.specs(op):
        if (
            _exclusion(spec, dtype, tagset, full, dev) is None
            and golden.ensure_verified(spec, dtype, dev).verified
        ):
            verdicts.append(spec)
    return verdicts


# ---- golden records installed by callers -----------------------------------------------


def record_golden(
    op: str,
    spec_name: str,
    dtype: str,
    device: torch.device | str,
    *,
    max_abs_diff: float | None,
    verified: bool = True,
    detail: str = "full-size check",
) -> GoldenRecord:
    """Install the outcome of a caller's own check (a benchmark's or tune's full-size gate).

    Call it with the max_abs_diff that check_<op> returned (verified=True), or with
    verified=False after the check raised. Cached decisions are dropped, since a row's
    verification changes what auto may select.
    """
    spec = active_registry().get(op, spec_name)  # ValueError names the valid rows
    if dtype not in spec.dtypes:
        raise ValueError(f"{op} row {spec_name} serves dtypes {spec.dtypes}, not {dtype!r}")
    if verified and (max_abs_diff is None or not math.isfinite(float(max_abs_diff))):
        raise ValueError(f"verified record needs a finite max_abs_diff, got {max_abs_diff!r}")
    kind = torch.device(device).type
    diff = None if max_abs_diff is None else float(max_abs_diff)
    record = GoldenRecord(spec_name, dtype, kind, bool(verified), diff, golden.now(), detail)
    golden.install(op, record)
    clear_decisions()
    return record


def clear_golden() -> None:
    """Forget every record (tests; a process that swapped kernels at runtime)."""
    golden.forget_all()
    clear_decisions()
