"""What a registry row declares: KernelSpec, LayoutRequirement, GoldenRecord.

A KernelSpec says what one backend can serve (op, dtypes, layout tags, devices, shapes) and
how to find its code and its correctness check, without importing either: the registry must
be importable on a machine where a Triton kernel would not even compile, and an asv run of an
old commit must not pay Triton's import cost for rows it never calls.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from kvbench.core.dtypes import ROW_DTYPES

#: A shape-preference rule: shape dict -> score (higher = more preferred). Rules must be
#: cheap and pure; they run once per cached decision, never per call.
PreferenceFn = Callable[[Mapping[str, Any]], float]
#: A shape gate: shape dict -> None when the row serves the shape, else the reason it cannot.
ShapeGate = Callable[[Mapping[str, Any]], "str | None"]
#: Availability: device -> None when the row can run there, else the reason it cannot.
AvailabilityFn = Callable[[torch.device], "str | None"]


def resolve(target: str | Callable[..., Any]) -> Callable[..., Any]:
    """Import a "module:attr" string (or return a callable unchanged, for test rows)."""
    if callable(target):
        return target
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"target {target!r}: expected 'module:attr'")
    obj: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


# ---- availability checks (a problem's device decides, never the machine alone) ------------


def any_device(device: torch.device) -> str | None:
    """Torch and host rows run wherever torch runs."""
    return None


def triton_interpret_on() -> bool:
    """Whether TRITON_INTERPRET is on, parsed by Triton itself (its knob accepts 1, true, yes,
    on in any case), so kvbench and the kernels it decorates never disagree about it."""
    from triton import knobs  # imported here: dispatch must import without loading Triton

    return bool(knobs.runtime.interpret)


def triton_device(device: torch.device) -> str | None:
    """Triton rows: compiled on CUDA, or interpreted on CPU tensors with TRITON_INTERPRET=1.

    TRITON_INTERPRET is read when a decision is made; Triton itself reads it when a kernel is
    decorated, so setting it after kvbench.kernels was imported does not help (tests/conftest.py
    sets it first).
    """
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return "CUDA device requested but torch.cuda.is_available() is False"
        return None
    if device.type == "cpu":
        if triton_interpret_on():
            return None
        return "CPU tensors need TRITON_INTERPRET=1 for Triton rows"
    return f"Triton rows run on cuda, or cpu with TRITON_INTERPRET=1, not {device.type}"


def cuda_only(device: torch.device) -> str | None:
    """Rows that need a real CUDA device (no interpreter path)."""
    if device.type == "cuda" and torch.cuda.is_available():
        return None
    return f"needs a CUDA device, problem is on {device}"


def cuda_sm90_with_nvcc(device: torch.device) -> str | None:
    """CUDA-source rows (kvbench/kernels/cuda/): an sm_90+ device, and nvcc to build the
    library on first use (the kernels layer's rule, kvbench.kernels.cuda_build; light to
    import, no kernel module)."""
    from kvbench.kernels.cuda_build import unavailable_reason

    return unavailable_reason(device)


# ---- the declarations ----------------------------------------------------------------------


@dataclass(frozen=True)
class LayoutRequirement:
    """Layout tags a row needs and tags it cannot serve, compared by set algebra.

    A row serves a problem when `required <= tags` and `forbidden & tags` is empty. Problems
    pass the tags their inputs actually satisfy (kvbench.ops derives them from the tensors), so
    a row that needs a missing tag is filtered out visibly, in explain(), instead of a different
    row being chosen silently.
    """

    required: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("required", "forbidden"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(t, str) for t in value):
                raise ValueError(f"LayoutRequirement.{name}: expected a tuple of tag strings")
            object.__setattr__(self, name, tuple(value))
        both = set(self.required) & set(self.forbidden)
        if both:
            raise ValueError(f"LayoutRequirement: tags both required and forbidden: {sorted(both)}")

    def missing(self, tags: frozenset[str]) -> tuple[str, ...]:
        """Required tags the problem lacks (sorted)."""
        return tuple(sorted(set(self.required) - tags))

    def conflicting(self, tags: frozenset[str]) -> tuple[str, ...]:
        """Forbidden tags the problem has (sorted)."""
        return tuple(sorted(set(self.forbidden) & tags))

    def serves(self, tags: Iterable[str]) -> bool:
        tags = frozenset(tags)
        return set(self.required) <= tags and not (set(self.forbidden) & tags)


@dataclass(frozen=True)
class Preference:
    """A named shape-preference rule; `doc` is printed by explain() so a score is readable."""

    name: str
    score: PreferenceFn
    doc: str = ""


@dataclass(frozen=True)
class KernelSpec:
    """One registry row: a backend's implementation of one op.

    name: "<backend>/<impl>", unique within its op; the asv params, the env-var selectors and
        the benchmark's _IMPL constant use exactly this string.
    target: a "module:attr" string imported on first use (a callable is accepted for rows
        registered by tests). Strings point down to kvbench.kernels and keep kernel code out
        of `import kvbench.dispatch`.
    golden_check: golden_check(target, dtype, device) -> max_abs_diff, raising on a wrong
        output: the op oracle's check on tiny fixed inputs (kvbench.ops.<op>.
        golden_check_<op>, imported as a plain function: it sits below dispatch).
        dispatch.golden runs it before auto may select the row.
    priority: the last-but-one tie-break (higher wins), after measured perf and preference.
    preferences: shape rules; their scores are summed (higher wins).
    shape_gate: excludes shapes the row cannot serve. Decisions are cached per shape bucket
        and the exact values of core.DECISION_KEYS, so a gate (and a preference rule) must
        depend only on those, the dtype and the device (sm_count), which the key holds too.
    layout_by_dtype: a dtype's own LayoutRequirement where it differs from `layout` (a kernel
        that reads fp8 from one page layout and 16-bit caches from another).
    """

    name: str
    op: str
    dtypes: tuple[str, ...]
    target: str | Callable[..., Any]
    golden_check: Callable[..., Any]
    layout: LayoutRequirement = field(default_factory=LayoutRequirement)
    available: AvailabilityFn = any_device
    priority: int = 0
    preferences: tuple[Preference, ...] = ()
    shape_gate: ShapeGate | None = None
    doc: str = ""
    layout_by_dtype: Mapping[str, LayoutRequirement] = field(default_factory=dict)

    def __post_init__(self) -> None:
        backend, sep, impl = self.name.partition("/")
        if not sep or not backend or not impl or "/" in impl:
            raise ValueError(f"KernelSpec.name {self.name!r}: expected '<backend>/<impl>'")
        if isinstance(self.dtypes, str) or not self.dtypes:
            raise ValueError(f"KernelSpec {self.name}: dtypes must be a non-empty tuple of names")
        bad = [d for d in self.dtypes if d not in ROW_DTYPES]
        if bad:
            raise ValueError(
                f"KernelSpec {self.name}: unknown dtype names {bad}; accepted: {ROW_DTYPES}"
            )
        object.__setattr__(self, "dtypes", tuple(self.dtypes))
        object.__setattr__(self, "preferences", tuple(self.preferences))
        stray = [d for d in self.layout_by_dtype if d not in self.dtypes]
        if stray:
            raise ValueError(f"KernelSpec {self.name}: layout_by_dtype names dtypes it does not "
                             f"serve: {stray} (serves {self.dtypes})")
        if not callable(self.golden_check):
            raise ValueError(  # noqa: TRY004 - one exception type for bad input
                f"KernelSpec {self.name}: golden_check must be a callable "
                f"(kvbench.ops.<op>.golden_check_<op>), got {self.golden_check!r}")
        if not isinstance(self.priority, int):
            raise ValueError(f"KernelSpec {self.name}: priority must be an int")  # noqa: TRY004

    def layout_for(self, dtype: str) -> LayoutRequirement:
        """The layout requirement that applies to `dtype`."""
        return self.layout_by_dtype.get(dtype, self.layout)

    def load(self) -> Callable[..., Any]:
        """The implementation (imports its module on first use)."""
        return resolve(self.target)

    def preference_score(self, shape: Mapping[str, Any] | None) -> tuple[float, list[str]]:
        """Summed preference score and the names of the rules that scored (for explain)."""
        if not shape:
            return 0.0, []
        total, fired = 0.0, []
        for rule in self.preferences:
            s = float(rule.score(shape))
            if s:
                total += s
                fired.append(f"{rule.name}{s:+g}")
        return total, fired


@dataclass(frozen=True)
class GoldenRecord:
    """The outcome of running a row's correctness check for one (dtype, device kind).

    Records come only from running a check (dispatch.golden, or a benchmark / tune installing
    the result of its own full-size check through record_golden); there is no flag to set.
    `detail` holds the failure text of an unverified row for explain().
    """

    spec_name: str
    dtype: str
    device_kind: str
    verified: bool
    max_abs_diff: float | None
    checked_at: str
    detail: str = ""
