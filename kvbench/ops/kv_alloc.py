"""kv_alloc: the KV block allocator op.

The op's oracle (its engine-facing allocator is kvbench.api.KVCacheManager, a registry row
chosen by dispatch or named): the fragmentation states the op is measured in (`STATES`,
`prepare_state`), the invariant gate (`checked_alloc`: n distinct rows that were free),
`golden_check_kv_alloc` (a seeded
alloc/free sequence against a set model), `alloc_inputs` (alloc(n) per state, host-timed),
the report's ceiling and the tune cases. Allocators: kvbench/kernels/kv_alloc.py.
"""

from __future__ import annotations

import numpy as np
import torch

from kvbench.core.device import resolve_device
from kvbench.harness.work import Work
from kvbench.kernels.kv_alloc import AllocError, Backend, rows_preview, validate_count
from kvbench.ops.common import OpInputs, Problem

STATES: tuple[str, ...] = ("bump", "run_search", "fragmented")


def prepare_state(manager: Backend, state: str, *, n: int) -> None:
    """Drive `manager` into `state` through alloc/free/free_all only, such that alloc(n)
    then takes the path the state names. A complete reset: it starts from free_all(), which
    alone would restore the bump cursor and measure the fast path in every state.

      bump        free_all, then half the pool in use (live cursor mid-pool)
      run_search  whole pool in use, then free every other row of the first half (singles a
                  search must skip) and one run of max(n, 2) rows at three quarters
      fragmented  whole pool in use, then free every other row: no two free rows adjacent
    """
    if state not in STATES:
        raise ValueError(f"state {state!r}: accepted states are {', '.join(STATES)}")
    n = validate_count(n, manager.num_rows)
    run = max(n, 2)
    if manager.num_rows < 4 * run:
        raise ValueError(
            f"prepare_state(n={n}) needs num_rows >= {4 * run}, manager has {manager.num_rows}"
        )
    rows_total = manager.num_rows
    manager.free_all()
    if state == "bump":
        manager.alloc(rows_total // 2)
    else:
        manager.alloc(rows_total)
        if state == "fragmented":
            to_free = np.arange(0, rows_total, 2, dtype=np.int64)
        else:
            start = (3 * rows_total) // 4
            singles = np.arange(0, rows_total // 2, 2, dtype=np.int64)
            to_free = np.concatenate((singles, np.arange(start, start + run, dtype=np.int64)))
        manager.free(to_free)
    got = manager.state
    if got != state:
        raise AssertionError(f"prepare_state({state!r}, n={n}) left the manager in {got!r}")
    _warm_result_paths(manager.device)


#: Per device, a small tensor the reset's epilogue slices, and one host array it wraps
#: (_warm_result_paths).
_RESULT_PROBES: dict[torch.device, tuple[torch.Tensor, np.ndarray]] = {}


def _warm_result_paths(device: torch.device) -> None:
    """End every reset with the same torch calls: a view of a private device tensor and a
    tensor over a private numpy array, the two ways an allocator builds what alloc returns.

    Why: the timed alloc after a reset pays for whatever host code the reset left cold, and
    the resets differ. bump's ends with an alloc, which on a device slices the row table and
    on a CPU wraps a numpy copy (`torch.from_numpy`), so that path is warm for the alloc that
    follows; run_search's and fragmented's end with a free of host rows, so their first alloc
    paid for cold torch code before it did anything of its own (docs/allocator.md). The
    benchmark would measure the reset, and how much of torch's code it happened to evict in
    that process, not the state. One identical, allocator-independent epilogue gives every
    state the same starting point, as in an engine, whose host runs torch calls between
    allocations; the allocator's own data stays as cold as the reset left it.
    """
    probes = _RESULT_PROBES.get(device)
    if probes is None:
        probes = _RESULT_PROBES[device] = (torch.zeros(2, dtype=torch.int64, device=device),
                                           np.zeros(2, dtype=np.int64))
    view, host = probes
    view[0:1]
    torch.from_numpy(host[0:1].copy())


def checked_alloc(manager: Backend, n: int) -> torch.Tensor:
    """alloc(n), asserting the invariant: n distinct rows, every one free before the call.

    The correctness gate a benchmark runs per state before timing (a fast but wrong allocator
    is a bug, not a result). Synchronizes; never use it inside a timed region.
    """
    before = manager.free_rows()
    rows = manager.alloc(n)
    got = rows.cpu().numpy()
    if got.shape != (n,):
        raise AssertionError(f"alloc({n}) returned shape {tuple(got.shape)}")
    if np.unique(got).size != n:
        raise AssertionError(f"alloc({n}) returned duplicate rows {rows_preview(np.sort(got))}")
    not_free = np.setdiff1d(got, before)
    if not_free.size:
        raise AssertionError(
            f"alloc({n}) returned rows {rows_preview(not_free)} that were not free"
        )
    if manager.num_free != before.size - n:
        raise AssertionError(f"num_free {manager.num_free} != {before.size} - {n}")
    return rows


def golden_check_kv_alloc(cls: type, dtype: str, device: torch.device | str) -> float:
    """Golden check of an allocator class: a seeded alloc/free sequence against a set model.

    Returns 0.0 (the op is exact) or raises AssertionError. dtype must be "int64" (the row
    index type; the allocator has no KV dtype).
    """
    if dtype != "int64":
        raise ValueError(f"kv_alloc rows are int64 indices; dtype must be 'int64', got {dtype!r}")
    num_rows = 256
    alloc = cls(num_rows, torch.device(device))
    rng = np.random.default_rng(1234)
    free = set(range(num_rows))
    held: list[np.ndarray] = []
    for step in range(300):
        if held and (rng.random() < 0.45 or not free):
            rows = held.pop(int(rng.integers(len(held))))
            alloc.free(rows)
            free.update(int(r) for r in rows)
        elif free:
            n = int(rng.integers(1, min(len(free), 24) + 1))
            got = alloc.alloc(n).cpu().numpy()
            if len(set(got.tolist())) != n or not set(got.tolist()) <= free:
                raise AssertionError(f"step {step}: alloc({n}) returned rows that were not free")
            free.difference_update(int(r) for r in got)
            held.append(got)
        if alloc.num_free != len(free):
            raise AssertionError(f"step {step}: num_free {alloc.num_free} != model {len(free)}")
    try:
        alloc.free([num_rows])
    except AllocError:
        pass
    else:
        raise AssertionError("free of an out-of-range row did not raise")
    if alloc.num_free != len(free) or set(alloc.free_rows().tolist()) != free:
        raise AssertionError("a rejected free changed the allocator")
    alloc.free_all()
    if alloc.num_free != num_rows or alloc.state != "bump":
        raise AssertionError("free_all did not restore the bump state")
    return 0.0


# ---- inputs --------------------------------------------------------------------------------


def alloc_inputs(num_rows: int, n: int, device: torch.device | str, *,
                 states: tuple[str, ...] = STATES) -> OpInputs:
    """alloc(n) on an allocator of `num_rows` rows of the row being measured, in
    each of `states` (default all: a serving engine reaches all three, and `kvbench tune`
    ranks a row on the state that hurts). The invariant gate (n distinct rows that were free)
    runs in every state before any timing."""
    dev = resolve_device(device)
    for state in states:
        if state not in STATES:
            raise ValueError(f"state {state!r}: accepted states are {', '.join(STATES)}")

    def check(cls) -> float:
        m = cls(num_rows, dev)
        for state in states:
            prepare_state(m, state, n=n)
            checked_alloc(m, n)
        return 0.0

    def calls(cls, row: str):
        # The row's class itself: KVCacheManager binds its backend's methods, so what an
        # engine calls through the manager is exactly this.
        del row
        m = cls(num_rows, dev)
        return [(lambda: m.alloc(n), lambda s=s: prepare_state(m, s, n=n)) for s in states]

    problem = Problem("kv_alloc", "int64", frozenset(), {"n": n}, dev)
    return OpInputs(problem, (), {}, Work(), check=check, host=True, calls=calls)


# ---- what the reports and `kvbench tune` measure ---------------------------------------------

#: The measured ceiling this op's %ceil divides by (its table copies, when it moves bytes).
CEILING = "copy"
#: `kvbench tune` cases, one per shape bucket: (label, tune_inputs params). Host costs are real
#: on a CPU too; the CPU cases only use a smaller allocator.
TUNE_CASES = tuple((f"n={n}", {"n": n, "num_rows": 32768}) for n in (1, 64, 256))
TUNE_CASES_CPU = tuple((f"n={n}", {"n": n, "num_rows": 4096}) for n in (1, 64))


def tune_inputs(params: dict[str, int], dtype: str, storage: str, device):
    """alloc(n) in every state, ranked by the worst (alloc_inputs); nothing to free."""
    return alloc_inputs(params["num_rows"], params["n"], device), lambda: None
