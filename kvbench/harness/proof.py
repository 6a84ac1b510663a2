"""Proof that the timed calls did the work: the output of the LAST timed call is verified.

A check before timing proves that a kernel can compute the right answer once. It does not
prove that the calls being timed did: a kernel that memoizes its output (returns the previous
result for the same input tensors) or skips work after its first call passes that check and
then gets a number for doing nothing (a memoizing row reports a bandwidth far above what the
machine can copy, which a table would show as a win).

So a timer given a TimedProof does, around its last timed iteration and outside the timed
window:

1. ``prepare(previous)``: poison the output of the timed call before it (``previous``, the
   object fn returned; a kernel that hands back the same buffer without rewriting it then
   returns poison) and perturb an input in place (a kernel keyed on its inputs' identity then
   returns a result that belongs to the old input);
2. the last call runs, timed like every other;
3. after the loop's one synchronize, ``verify(out)`` compares that call's output with the
   reference OF THE PERTURBED INPUT and returns its error figures (verify.SystematicError),
   or raises verify.VerificationError: the timing is then not returned at all;
4. ``restore()`` undoes the perturbation (always, on failure too), so the next row sees the
   input the pre-timing check saw.

Every call before the last ran on the same input as the last one's predecessor; the last one
cannot reuse any of their results, so a row whose timed calls reuse work fails. Re-verifying
every call would cost a reference per sample; the last call is the one a kernel cannot tell
from the others. prepare() must only enqueue device work (no synchronize, no ``.item()``): the
event loop must stay ahead of the GPU.

The per-op proofs (what to poison, what to perturb, which reference) live in the op modules
(kvbench.ops.<op>: proof_<op>).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


def _noop() -> None:
    return None


@dataclass(frozen=True)
class TimedProof:
    """What a timer runs around its last timed call (see the module docstring).

    prepare(previous): previous is what the timed call before the last returned (None when
    there was none); verify(out) -> figures (an object with as_dict(), or None) or raises;
    restore(): undo prepare's perturbation.
    """

    prepare: Callable[[object], None]
    verify: Callable[[object], object]
    restore: Callable[[], None] = field(default=_noop)

    def __post_init__(self) -> None:
        for name in ("prepare", "verify", "restore"):
            value = getattr(self, name)
            if not callable(value):
                got = type(value).__name__
                raise ValueError(f"TimedProof.{name} must be callable, got {got}")  # noqa: TRY004


def poison_(value: object) -> None:
    """Fill a returned tensor (or each tensor of a returned tuple/list) in place with values no
    kernel computes: NaN for float dtypes of 2+ bytes, all-ones bytes otherwise (NaN in e4m3,
    -1 in integers). Anything else is left alone. Enqueues device work only."""
    if isinstance(value, (tuple, list)):
        for item in value:
            poison_(item)
        return
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return
    if value.is_floating_point() and value.element_size() > 1:
        value.fill_(float("nan"))
    elif value.element_size() == 1:
        value.view(torch.uint8).fill_(0xFF)
    else:
        value.fill_(-1)


def run_proof(proof: TimedProof | None, out: object) -> dict | None:
    """verify(out) as a JSON-ready dict (None without a proof); restore() always runs."""
    if proof is None:
        return None
    try:
        figures = proof.verify(out)
    finally:
        proof.restore()
    if figures is None:
        return {}
    as_dict = getattr(figures, "as_dict", None)
    return dict(as_dict()) if as_dict is not None else dict(figures)
