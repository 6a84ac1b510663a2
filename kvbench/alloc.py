"""The KV block allocator (op `kv_alloc`): KVCacheManager and its two implementations.

The manager hands out cache rows (one row holds one token's K and V of a layer). Seed 000
found the largest number on the decode path here, not in a kernel: a bitmap allocator whose
bump-pointer fast path costs ~24 µs and whose search costs 265-275 µs once one finished request
invalidates the cursor, all of it host time spent waiting on `nonzero().item()`, which a
CUDA-event timer reports as nearly free. Both implementations are kept so the asv history shows
that step and its fix:

* torch/legacy  (LegacyBitmapAllocator): the behaviour that was measured, reproduced on
  purpose: a device bool bitmap, a host bump cursor, device syncs on the slow path.
* host/freelist (HostFreeListAllocator): the production implementation. All state lives on the
  host (numpy), so no path synchronizes the device; the rows reach the device through a pinned
  host tensor and a non-blocking copy.

States (`.state`, the names seed 000 uses, stated in every benchmark case label):
    "bump"        the bump cursor is live: every free row is at or past it, alloc is arange
    "run_search"  the cursor is gone and the free set holds a run of >= 2 consecutive rows
    "fragmented"  the cursor is gone and no two free rows are adjacent (also: nothing is free)
Whether alloc(n) finds a run also depends on n; prepare_state(manager, state, n=n) builds a
pool where alloc(n) takes the path the state names, through the public API only.
"""

from __future__ import annotations

import operator
import weakref
from typing import Any, Protocol

import numpy as np
import torch

STATES: tuple[str, ...] = ("bump", "run_search", "fragmented")


class AllocError(ValueError):
    """Bad alloc/free request; the allocator's state is unchanged when it is raised."""


class _Backend(Protocol):
    num_rows: int
    device: torch.device

    def alloc(self, n: int) -> torch.Tensor: ...
    def free(self, rows: Any) -> None: ...
    def free_all(self) -> None: ...
    @property
    def num_free(self) -> int: ...
    @property
    def state(self) -> str: ...
    def free_rows(self) -> np.ndarray: ...


# ---- shared validation ---------------------------------------------------------------------


def _check_num_rows(num_rows: Any) -> int:
    if isinstance(num_rows, bool):
        raise ValueError(f"num_rows must be a positive int, got {num_rows!r}")  # noqa: TRY004
    try:
        value = operator.index(num_rows)
    except TypeError:
        raise ValueError(f"num_rows must be a positive int, got {num_rows!r}") from None
    if value < 1:
        raise ValueError(f"num_rows must be a positive int, got {value}")
    return value


def _count(n: Any, num_free: int) -> int:
    """alloc's n as an int in [1, num_free]; AllocError otherwise (nothing changed yet)."""
    if type(n) is not int:
        if isinstance(n, bool):
            raise AllocError(f"alloc(n): n must be an int >= 1, got {n!r}")
        try:
            n = operator.index(n)
        except TypeError:
            raise AllocError(f"alloc(n): n must be an int >= 1, got {n!r}") from None
    if n < 1:
        raise AllocError(f"alloc(n): n must be >= 1, got {n}")
    if n > num_free:
        raise AllocError(f"alloc(n): n={n} exceeds the {num_free} free rows")
    return n


def _rows_preview(rows: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f", ... ({rows.size} rows)" if rows.size > limit else ""
    return f"[{shown}{more}]"


def _host_rows(rows: Any, what: str = "free(rows)") -> np.ndarray:
    """Host rows (CPU tensor, numpy array, list/tuple of ints) as a 1-D int64 numpy array."""
    if isinstance(rows, torch.Tensor):
        if rows.device.type != "cpu":
            raise AllocError(f"{what}: internal: device tensor reached host conversion")
        if rows.dtype.is_floating_point or rows.dtype == torch.bool or rows.dtype.is_complex:
            raise AllocError(f"{what}: rows must be integers, got dtype {rows.dtype}")
        arr = rows.numpy()
    elif isinstance(rows, np.ndarray):
        if rows.dtype.kind not in "iu":
            raise AllocError(f"{what}: rows must be integers, got numpy dtype {rows.dtype}")
        arr = rows
    elif isinstance(rows, (list, tuple, range)):
        if not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) for r in rows):
            raise AllocError(f"{what}: rows must be integers, got {list(rows)[:8]!r}")
        arr = np.asarray(rows, dtype=np.int64)
    else:
        raise AllocError(
            f"{what}: rows must be a tensor, numpy array or list of ints, got {type(rows).__name__}"
        )
    if arr.ndim != 1:
        raise AllocError(f"{what}: rows must be 1-D, got shape {tuple(arr.shape)}")
    return arr.astype(np.int64, copy=False)


def _check_rows(arr: np.ndarray, num_rows: int, allocated: np.ndarray | None) -> None:
    """Range, duplicates and (when the caller has a host bitmap) allocated-ness of rows."""
    if arr.size == 0:
        return
    bad = arr[(arr < 0) | (arr >= num_rows)]
    if bad.size:
        raise AllocError(f"free(rows): rows {_rows_preview(bad)} out of range [0, {num_rows})")
    if arr.size > 1:
        s = np.sort(arr)
        dup = s[1:][s[1:] == s[:-1]]
        if dup.size:
            raise AllocError(f"free(rows): rows {_rows_preview(np.unique(dup))} given twice")
    if allocated is not None:
        flags = allocated[arr]
        if not flags.all():
            raise AllocError(
                f"free(rows): rows {_rows_preview(arr[~flags])} are not allocated "
                "(never allocated, or freed already)"
            )


def _classify(free_sorted: np.ndarray) -> str:
    """run_search when two free rows are adjacent, else fragmented (cursor already gone)."""
    if free_sorted.size > 1 and bool((np.diff(free_sorted) == 1).any()):
        return "run_search"
    return "fragmented"


# ---- torch/legacy ----------------------------------------------------------------------------


class LegacyBitmapAllocator:
    """The allocator seed 000 measured: device bitmap, bump cursor, host-blocking search.

    Kept as the historical baseline (registry row torch/legacy). Every device sync below is
    the point of the row, not an accident: `nonzero()` must learn its output size on the host,
    and the `.item()` reads wait for the device queue to drain.
    """

    def __init__(self, num_rows: int, device: torch.device | str) -> None:
        self.num_rows = _check_num_rows(num_rows)
        self.device = torch.device(device)
        self._free = torch.ones(self.num_rows, dtype=torch.bool, device=self.device)
        self._num_free = self.num_rows
        self._cursor = 0
        self._cursor_valid = True

    @property
    def num_free(self) -> int:
        return self._num_free

    @property
    def state(self) -> str:
        if self._cursor_valid:
            return "bump"
        return _classify(self.free_rows())

    def free_rows(self) -> np.ndarray:
        """Sorted free rows on the host (diagnostic; synchronizes)."""
        return self._free.nonzero().squeeze(1).cpu().numpy().astype(np.int64)

    def alloc(self, n: int) -> torch.Tensor:
        n = _count(n, self._num_free)
        if self._cursor_valid:
            # Fast path: rows past the cursor are free and n <= num_free = num_rows - cursor.
            start = self._cursor
            rows = torch.arange(start, start + n, dtype=torch.int64, device=self.device)
            self._free[start : start + n] = False
            self._cursor = start + n
        else:
            rows = self._search(n)
            self._free[rows] = False
        self._num_free -= n
        return rows

    def _search(self, n: int) -> torch.Tensor:
        """First run of n consecutive free rows, else the first n free rows (host-blocking)."""
        free_idx = self._free.nonzero().squeeze(1)  # sync: output size goes to the host
        span = free_idx[n - 1 :] - free_idx[: free_idx.numel() - n + 1]
        hits = (span == n - 1).nonzero()  # sync again
        if hits.numel() > 0:
            start = int(free_idx[int(hits[0, 0].item())].item())  # two .item() host reads
            return torch.arange(start, start + n, dtype=torch.int64, device=self.device)
        return free_idx[:n].clone()

    def free(self, rows: Any) -> None:
        idx = self._device_rows(rows)
        k = idx.numel()
        if k == 0:
            return
        lo, hi = int(idx.min().item()), int(idx.max().item())
        if lo < 0 or hi >= self.num_rows:
            bad = idx[(idx < 0) | (idx >= self.num_rows)].cpu().numpy()
            raise AllocError(
                f"free(rows): rows {_rows_preview(bad)} out of range [0, {self.num_rows})"
            )
        if k > 1 and torch.unique(idx).numel() != k:
            s = torch.sort(idx).values
            dup = s[1:][s[1:] == s[:-1]].cpu().numpy()
            raise AllocError(f"free(rows): rows {_rows_preview(np.unique(dup))} given twice")
        already = self._free[idx]
        if bool(already.any().item()):
            bad = idx[already].cpu().numpy()
            raise AllocError(
                f"free(rows): rows {_rows_preview(bad)} are not allocated "
                "(never allocated, or freed already)"
            )
        self._free[idx] = True
        self._num_free += k
        # Every allocated row lies below the cursor, so any free invalidates it (seed 000:
        # one finished request puts every later decode step on the slow path).
        self._cursor_valid = False

    def _device_rows(self, rows: Any) -> torch.Tensor:
        if isinstance(rows, torch.Tensor) and rows.device.type != "cpu":
            if rows.dim() != 1 or rows.dtype.is_floating_point or rows.dtype == torch.bool:
                raise AllocError(
                    f"free(rows): rows must be a 1-D integer tensor, got {rows.dtype} "
                    f"shape {tuple(rows.shape)}"
                )
            return rows.to(self.device, torch.int64)
        return torch.from_numpy(np.array(_host_rows(rows), dtype=np.int64)).to(self.device)

    def free_all(self) -> None:
        self._free.fill_(True)
        self._num_free = self.num_rows
        self._cursor = 0
        self._cursor_valid = True


# ---- host/freelist ---------------------------------------------------------------------------


class HostFreeListAllocator:
    """Production allocator: host bump cursor + LIFO free list, no device sync on any path.

    alloc(n) pops freed rows first (most recently freed first, so a freed run comes back as a
    run), then takes fresh rows from the bump cursor; everything is numpy on the host, and the
    result reaches the device through a pinned host tensor and `.to(device, non_blocking=True)`
    (torch's caching host allocator keeps the pinned block alive until the copy has run).

    free(rows) must read row values on the host without a sync. Accepted:
      * host rows: a CPU tensor, a numpy array, or a list of ints (what an engine keeps in its
        host-side request table), or
      * on a CUDA manager, the exact tensor alloc() returned (or a view with the same
        data_ptr and numel): a host mirror of each outstanding allocation, keyed by
        (data_ptr, numel) and dropped when the tensor dies, supplies the values.
    Any other device tensor (a slice, a concatenation of several allocs) raises AllocError
    rather than syncing: pass host rows instead.
    """

    def __init__(self, num_rows: int, device: torch.device | str) -> None:
        self.num_rows = _check_num_rows(num_rows)
        self.device = torch.device(device)
        self._on_host = self.device.type == "cpu"
        self._pin = self.device.type == "cuda"
        self._allocated = np.zeros(self.num_rows, dtype=bool)
        self._stack = np.empty(self.num_rows, dtype=np.int64)
        self._iota = np.arange(self.num_rows, dtype=np.int64)  # bump rows: a slice copy, no arange
        self._top = 0
        self._cursor = 0
        self._mirror: dict[tuple[int, int], tuple[weakref.ref, np.ndarray]] = {}

    @property
    def num_free(self) -> int:
        return self.num_rows - self._cursor + self._top

    @property
    def state(self) -> str:
        if self._top == 0:
            return "bump"
        return _classify(self.free_rows())

    def free_rows(self) -> np.ndarray:
        """Sorted free rows (host data; no sync)."""
        return np.flatnonzero(~self._allocated).astype(np.int64)

    def alloc(self, n: int) -> torch.Tensor:
        top = self._top
        cursor = self._cursor
        if type(n) is not int or n < 1 or n > self.num_rows - cursor + top:
            n = _count(n, self.num_rows - cursor + top)  # raises AllocError, nothing changed
        if top >= n:
            # Free list first (LIFO): a run freed together comes back as that run.
            rows = self._stack[top - n : top].copy()
            self._top = top - n
            self._allocated[rows] = True
        else:
            # Drain the free list, then bump: rows past the cursor are free by construction.
            end = cursor + n - top
            fresh = self._iota[cursor:end]
            self._allocated[cursor:end] = True
            if top:
                rows = np.concatenate((self._stack[:top], fresh))
                self._allocated[rows[:top]] = True
                self._top = 0
            else:
                rows = fresh.copy()
            self._cursor = end
        out = torch.from_numpy(rows)
        if self._on_host:
            return out
        if self._pin:
            out = out.pin_memory()
        dev = out.to(self.device, non_blocking=True)
        self._remember(dev, rows)
        return dev

    def _remember(self, dev: torch.Tensor, rows: np.ndarray) -> None:
        """Mirror a returned device tensor's rows on the host, until the tensor dies.

        The entry holds only a weak reference: when the caller drops the tensor, its callback
        removes the entry before the caching allocator can reuse the address for another
        tensor, so a (data_ptr, numel) key can never name the wrong allocation.
        """
        key = (dev.data_ptr(), dev.numel())
        owner = weakref.ref(self)

        def forget(ref: weakref.ref) -> None:
            alloc = owner()
            if alloc is not None:
                entry = alloc._mirror.get(key)
                if entry is not None and entry[0] is ref:
                    del alloc._mirror[key]

        self._mirror[key] = (weakref.ref(dev, forget), rows)

    def free(self, rows: Any) -> None:
        key = None
        if isinstance(rows, torch.Tensor) and rows.device.type != "cpu":
            key = (rows.data_ptr(), rows.numel())
            entry = self._mirror.get(key)
            if entry is None or entry[0]() is None or rows.device != self.device:
                raise AllocError(
                    "free(rows): a device tensor is accepted only as returned by alloc() "
                    "(reading other device rows would synchronize); pass host rows (CPU "
                    "tensor, numpy array or list) instead"
                )
            arr = entry[1]
        else:
            arr = _host_rows(rows)
        _check_rows(arr, self.num_rows, self._allocated)
        k = arr.size
        if k == 0:
            return
        self._stack[self._top : self._top + k] = arr
        self._top += k
        self._allocated[arr] = False
        if key is not None:
            del self._mirror[key]

    def free_all(self) -> None:
        self._allocated[:] = False
        self._top = 0
        self._cursor = 0
        self._mirror.clear()


# ---- the manager -----------------------------------------------------------------------------


class KVCacheManager:
    """Hands out KV cache rows on `device`; the implementation comes from the registry.

    impl=None follows KVBENCH_KV_ALLOC through dispatch("kv_alloc"): auto, or a forced row,
    which runs its check first (kvbench.dispatch). An explicit impl (a spec name) picks that
    row directly, as constructing the class would, without a golden check.
    alloc(n) -> int64 tensor of n distinct rows that were free; free(rows); free_all();
    num_free; state. Errors raise AllocError (a ValueError) and leave the state unchanged.
    """

    def __init__(self, num_rows: int, *, device: torch.device | str, impl: str | None = None):
        from kvbench.dispatch import core

        dev = core.resolve_device(device)
        self.selection = None
        if impl is None:
            self.selection = core.dispatch("kv_alloc", dtype="int64", device=dev)
            self.impl = self.selection.spec.name
            cls = self.selection.target
        else:
            spec = core.active_registry().get("kv_alloc", impl)  # ValueError lists the names
            self.impl = spec.name
            cls = spec.load()
        self._backend: _Backend = cls(num_rows, dev)
        self.num_rows = self._backend.num_rows
        self.device = dev
        # Bound methods of the backend: the manager adds no call layer to the timed path.
        self.alloc = self._backend.alloc
        self.free = self._backend.free
        self.free_all = self._backend.free_all

    @property
    def num_free(self) -> int:
        return self._backend.num_free

    @property
    def state(self) -> str:
        return self._backend.state

    def free_rows(self) -> np.ndarray:
        """Sorted free rows on the host (diagnostic: the legacy backend synchronizes)."""
        return self._backend.free_rows()

    def __repr__(self) -> str:
        return (
            f"KVCacheManager(num_rows={self.num_rows}, device={self.device}, impl={self.impl!r}, "
            f"num_free={self.num_free})"
        )


# ---- states, invariant, selfcheck --------------------------------------------------------------


def prepare_state(manager: KVCacheManager | _Backend, state: str, *, n: int) -> None:
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
    n = _count(n, manager.num_rows)
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


def checked_alloc(manager: KVCacheManager | _Backend, n: int) -> torch.Tensor:
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
        raise AssertionError(f"alloc({n}) returned duplicate rows {_rows_preview(np.sort(got))}")
    not_free = np.setdiff1d(got, before)
    if not_free.size:
        raise AssertionError(
            f"alloc({n}) returned rows {_rows_preview(not_free)} that were not free"
        )
    if manager.num_free != before.size - n:
        raise AssertionError(f"num_free {manager.num_free} != {before.size} - {n}")
    return rows


def selfcheck_kv_alloc(cls: type, dtype: str, device: torch.device | str) -> float:
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
