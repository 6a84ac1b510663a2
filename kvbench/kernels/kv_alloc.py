"""The KV block allocator (op `kv_alloc`): KVCacheManager and its two implementations.

The manager hands out cache rows (one row holds one token's K and V of a layer). The largest
cost of a decode step can sit here, not in a kernel: a bitmap allocator whose search, once one
finished request invalidates the bump cursor, costs about ten times its fast path, all of it
host time spent waiting on `nonzero().item()`, which a CUDA-event timer reports as nearly
free. Both implementations are kept so the asv history shows
that step and its fix:

* torch/legacy  (LegacyBitmapAllocator): that slow allocator, reproduced on
  purpose: a device bool bitmap, a host bump cursor, device syncs on the slow path.
* host/freelist (HostFreeListAllocator): the production implementation. All bookkeeping lives
  on the host (numpy), so no path synchronizes the device. alloc returns a view of device
  memory that already holds the rows (a row-index table for bump rows; for free-list rows,
  the copy made when they were freed): no copy and no kernel per alloc. Rows are copied
  (pinned staging ring, non-blocking) when scattered host rows are freed, and when an alloc
  spans several frees. Returned tensors are read-only by contract.

States (`.state`, stated in every benchmark case label: an allocator row without one cannot
be reproduced):
    "bump"        the bump cursor is live: every free row is at or past it, alloc is arange
    "run_search"  the cursor is gone and the free set holds a run of >= 2 consecutive rows
    "fragmented"  the cursor is gone and no two free rows are adjacent (also: nothing is free)
Whether alloc(n) finds a run also depends on n; prepare_state(manager, state, n=n) builds a
pool where alloc(n) takes the path the state names, through the public API only.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
import torch

from kvbench.core.device import resolve_device


class AllocError(ValueError):
    """Bad alloc/free request; the allocator's state is unchanged when it is raised."""


class Backend(Protocol):
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


def _validate_num_rows(num_rows: Any) -> int:
    if isinstance(num_rows, bool):
        raise ValueError(f"num_rows must be a positive int, got {num_rows!r}")  # noqa: TRY004
    try:
        value = operator.index(num_rows)
    except TypeError:
        raise ValueError(f"num_rows must be a positive int, got {num_rows!r}") from None
    if value < 1:
        raise ValueError(f"num_rows must be a positive int, got {value}")
    return value


def validate_count(n: Any, num_free: int) -> int:
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


#: The values a row index can take on the way to the int64 tables.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def rows_preview(rows: np.ndarray, limit: int = 8) -> str:
    shown = ", ".join(str(int(r)) for r in rows[:limit])
    more = f", ... ({rows.size} rows)" if rows.size > limit else ""
    return f"[{shown}{more}]"


def _host_rows(rows: Any, num_rows: int, what: str = "free(rows)") -> np.ndarray:
    """Host rows (CPU tensor, numpy array, list/tuple of ints) as a 1-D int64 numpy array.

    A value int64 cannot hold (a Python int of any size, a uint64 above 2**63 - 1) is refused
    here, named as it was given, with the accepted range [0, num_rows): converting it would
    raise OverflowError or wrap to another row."""
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
        huge = [int(r) for r in rows if not _INT64_MIN <= int(r) <= _INT64_MAX]
        if huge:
            raise AllocError(f"{what}: rows {huge[:8]} out of range [0, {num_rows})")
        arr = np.asarray(rows, dtype=np.int64)
    else:
        raise AllocError(
            f"{what}: rows must be a tensor, numpy array or list of ints, got {type(rows).__name__}"
        )
    if arr.ndim != 1:
        raise AllocError(f"{what}: rows must be 1-D, got shape {tuple(arr.shape)}")
    if arr.dtype.kind == "u" and arr.size and int(arr.max()) > _INT64_MAX:
        huge = [int(r) for r in arr[arr > _INT64_MAX][:8]]
        raise AllocError(f"{what}: rows {huge} out of range [0, {num_rows})")
    return arr.astype(np.int64, copy=False)


def _validate_rows(
    arr: np.ndarray,
    num_rows: int,
    allocated: np.ndarray,
    scratch: np.ndarray,
    scratch_pos: np.ndarray,
) -> None:
    """Range, duplicates and allocated-ness of rows; O(len(arr)), no sort on the good path.

    Duplicates: scratch[arr] = position, read back. Two positions i != j holding the same
    row leave one value in scratch[row], so at least one of them reads back wrong, whatever
    order numpy's fancy assignment writes in. (A sort would cost O(k log k) and a k-sized
    copy on every free; it only runs below to name the rows in the error.)
    """
    k = arr.size
    if k == 0:
        return
    if int(arr.min()) < 0 or int(arr.max()) >= num_rows:
        bad = arr[(arr < 0) | (arr >= num_rows)]
        raise AllocError(f"free(rows): rows {rows_preview(bad)} out of range [0, {num_rows})")
    if k > 1:
        pos = scratch_pos[:k]  # 0, 1, ..., k-1 (a view: no k-sized allocation)
        if k > pos.size:  # more rows than the pool holds: some row is given twice
            unique = False
        else:
            scratch[arr] = pos
            unique = bool((scratch[arr] == pos).all())
        if not unique:
            s = np.sort(arr)
            dup = s[1:][s[1:] == s[:-1]]
            raise AllocError(f"free(rows): rows {rows_preview(np.unique(dup))} given twice")
    flags = allocated[arr]
    if not flags.all():
        raise AllocError(
            f"free(rows): rows {rows_preview(arr[~flags])} are not allocated "
            "(never allocated, or freed already)"
        )


def _classify(free_sorted: np.ndarray) -> str:
    """run_search when two free rows are adjacent, else fragmented (cursor already gone)."""
    if free_sorted.size > 1 and bool((np.diff(free_sorted) == 1).any()):
        return "run_search"
    return "fragmented"


class LegacyBitmapAllocator:
    """The slow allocator this op exposes: device bitmap, bump cursor, host-blocking search.

    Kept as the historical baseline (registry row torch/legacy). Every device sync below is
    the point of the row, not an accident: `nonzero()` must learn its output size on the host,
    and the `.item()` reads wait for the device queue to drain.
    """

    def __init__(self, num_rows: int, device: torch.device | str) -> None:
        self.num_rows = _validate_num_rows(num_rows)
        self.device = resolve_device(device)
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
        n = validate_count(n, self._num_free)
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
                f"free(rows): rows {rows_preview(bad)} out of range [0, {self.num_rows})"
            )
        if k > 1 and torch.unique(idx).numel() != k:
            s = torch.sort(idx).values
            dup = s[1:][s[1:] == s[:-1]].cpu().numpy()
            raise AllocError(f"free(rows): rows {rows_preview(np.unique(dup))} given twice")
        already = self._free[idx]
        if bool(already.any().item()):
            bad = idx[already].cpu().numpy()
            raise AllocError(
                f"free(rows): rows {rows_preview(bad)} are not allocated "
                "(never allocated, or freed already)"
            )
        self._free[idx] = True
        self._num_free += k
        # Every allocated row lies below the cursor, so any free invalidates it (so
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
        return torch.from_numpy(np.array(_host_rows(rows, self.num_rows), dtype=np.int64)).to(
            self.device)

    def free_all(self) -> None:
        self._free.fill_(True)
        self._num_free = self.num_rows
        self._cursor = 0
        self._cursor_valid = True


#: Pinned staging ring of host/freelist's copies (CUDA only): STAGING_SEGMENTS segments of
#: STAGING_SEGMENT_ROWS int64 rows each (256 KiB pinned in all). A copy of more rows than one
#: segment holds (a free of a long request's scattered rows, prepare_state's half-pool frees,
#: a compaction) takes the fallback, a fresh pinned tensor from torch's caching host
#: allocator; frees of up to 4096 scattered rows and allocs that span frees use the ring.
STAGING_SEGMENT_ROWS = 4096


STAGING_SEGMENTS = 8


#: host/freelist compacts its device twin when its chunks hold more than this many times
#: num_rows rows (bounded memory; see HostFreeListAllocator._compact).
COMPACT_FACTOR = 4


def _current_stream_probe(device: torch.device) -> Callable[[], int]:
    """A cheap "which stream is current on `device`" probe returning an int handle.

    torch.cuda.current_stream() builds a Stream object per call (~1-2 µs of host time on a
    path whose whole budget is a few µs); torch._C._cuda_getCurrentRawStream (the call
    Triton's launcher uses) returns the handle as an int. The public call is the fallback for
    a build without it.
    """
    index = device.index
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return lambda: raw(index)
    return lambda: torch.cuda.current_stream(device).cuda_stream


class _PinnedStaging:
    """Scattered host rows -> a fresh device tensor, through a pinned ring, never a sync.

    Why a ring: the per-call path (`pin_memory()` of each result, then
    `.to(non_blocking=True)`) pays a pinned allocation per alloc, many times the few µs an
    alloc may cost.
    Here the rows are written into a pinned buffer allocated once and copied with one
    `.to(device, non_blocking=True)` of a slice of it (a fresh device tensor from the
    caching allocator, which becomes one of host/freelist's chunks).

    Reuse safety without waiting: the ring is split into segments. Copies are staged at
    increasing offsets inside the open segment, all on one stream (a change of the current
    stream closes the segment). Closing a segment records a CUDA event after its last copy
    on that stream; a segment is reopened only once that event has completed
    (`Event.query()`, which never blocks), so no pinned slot is overwritten while a copy
    from it may still be pending. When the next segment is still busy (the GPU is a whole
    ring of copies behind) or n does not fit a segment, the copy goes through a fresh pinned
    tensor from torch's caching host allocator, which tracks that block's pending copy
    itself. Neither path synchronizes.
    """

    def __init__(
        self,
        device: torch.device,
        segment_rows: int = STAGING_SEGMENT_ROWS,
        segments: int = STAGING_SEGMENTS,
    ) -> None:
        self.device = device
        self.segment_rows = segment_rows
        self._buf = torch.empty(segment_rows * segments, dtype=torch.int64, pin_memory=True)
        self._np = self._buf.numpy()  # the same pinned memory, written with numpy
        # An Event that was never recorded reports query() == True: every segment starts free.
        self._events = [torch.cuda.Event() for _ in range(segments)]
        self._probe = _current_stream_probe(device)
        self._seg = 0
        self._off = 0
        self._end = segment_rows
        self._stream = torch.cuda.current_stream(device)
        self._raw = self._probe()
        self.fallbacks = 0  # copies that took the fresh-pinned-tensor path (tests read it)

    def to_device(self, rows: np.ndarray) -> torch.Tensor:
        """A new int64 device tensor holding `rows`; the copy is queued, not waited for."""
        n = rows.size
        off = self._off
        if (off + n > self._end or self._probe() != self._raw) and not self._next_segment(n):
            self.fallbacks += 1
            return torch.from_numpy(rows).pin_memory().to(self.device, non_blocking=True)
        off = self._off
        end = off + n
        self._np[off:end] = rows
        out = self._buf[off:end].to(self.device, non_blocking=True)
        self._off = end
        return out

    def _next_segment(self, n: int) -> bool:
        """Close the open segment and open the next one if its last lap's copies are done."""
        if n > self.segment_rows:
            return False
        self._events[self._seg].record(self._stream)  # after every copy staged in it
        nxt = (self._seg + 1) % len(self._events)
        if not self._events[nxt].query():
            return False  # still pending: never wait, fall back
        self._seg = nxt
        self._off = nxt * self.segment_rows
        self._end = self._off + self.segment_rows
        self._stream = torch.cuda.current_stream(self.device)
        self._raw = self._probe()
        return True


class HostFreeListAllocator:
    """Production allocator: host bump cursor + LIFO free list, no device sync on any path.

    All bookkeeping is numpy and Python ints on the host. alloc(n) pops freed rows first
    (most recently freed first, so rows freed together come back together), then takes fresh
    rows at the bump cursor: O(n) per call, never O(num_rows).

    On a CUDA device alloc returns (int64, READ-ONLY: never write into it in place) a VIEW of
    device memory that already holds the rows whenever it can, so the per-step alloc costs a
    slice (~1-2 µs of host time), no copy and no kernel:
      * bump rows (and a free-list run that reaches the cursor): a view of the row table,
        arange(num_rows) built once on the device;
      * rows popped from the free list: a view of the free list's DEVICE TWIN. The stack is
        also kept as segments [key, offset, length]: consecutive stack entries that sit at
        consecutive positions of one device array, the table (key 0) or a chunk, an
        immutable device copy of rows made when they were freed (free of host rows that
        are not one run: one non-blocking copy through a pinned ring, _PinnedStaging).
        Rows freed as a view of the table or of a chunk are named in place (no copy). When
        the top segment holds n entries, alloc(n) is a view of it;
      * otherwise (the top n entries span several segments): one copy, which becomes a chunk.
    Why copy at free rather than at alloc: an engine frees a finished request's rows once but
    allocates rows every decode step, and a copy of scattered rows costs several times the
    slice that a view costs.

    Chunk lifetime: chunks are never written after creation, so a view stays valid as long as
    its rows are allocated. The allocator holds its chunks until they hold more than
    COMPACT_FACTOR x num_rows rows; then it copies the free list into one new chunk and drops
    the others (compaction, O(free rows), at most once per 3 x num_rows copied rows). A
    dropped chunk stays readable for free() through a weak reference for as long as a caller
    still holds a view of it; its rows are then freed as host rows. No per-row ownership is
    kept, so alloc's view path writes one numpy array (the allocated flags).

    On a CPU device every result is a fresh tensor over a numpy copy (see _device_paths in
    __init__) and there are no segments or chunks: no device work to avoid.

    free(rows) accepts host rows (a CPU tensor, numpy array or list of ints: what an engine
    keeps in its request table) and, without reading the device, any tensor alloc returned or
    any 1-D view or slice of one: a view of the table or of a chunk names its rows by its
    storage address and offset (a chunk's rows are kept on the host beside it). Any other
    device tensor (a clone, a concatenation) raises AllocError rather than syncing.
    """

    def __init__(self, num_rows: int, device: torch.device | str) -> None:
        self.num_rows = _validate_num_rows(num_rows)
        self.device = resolve_device(device)
        self._allocated = np.zeros(self.num_rows, dtype=bool)
        self._stack = np.empty(self.num_rows, dtype=np.int64)  # free rows, LIFO
        self._iota = np.arange(self.num_rows, dtype=np.int64)  # host twin of the table
        self._scratch = np.empty(self.num_rows, dtype=np.int64)  # free's duplicate check
        self._top = 0
        self._cursor = 0
        # The device twin of the stack (device paths only): [key, offset, length] per run of
        # consecutive positions of one array, bottom to top; key 0 is the table.
        self._segments: list[list[int]] = []
        self._chunks: dict[int, tuple[torch.Tensor, np.ndarray]] = {}  # key: storage address
        self._dropped: dict[int, tuple[weakref.ref, np.ndarray]] = {}  # compacted away
        self._chunk_rows = 0  # rows held by self._chunks
        # Not a view of _iota: a caller writing into a returned view must not be able to
        # corrupt _iota, which the bookkeeping reads.
        self._table = torch.arange(self.num_rows, dtype=torch.int64, device=self.device)
        # Views and chunks exist to keep device work and device reads off the paths. On a
        # CPU device there is neither: a numpy copy wrapped by from_numpy costs less than
        # torch's slicing (above all after prepare_state's cache-evicting reset), free()
        # reads CPU tensors directly. Tests set this to
        # True on a CPU allocator right after construction to run the device paths (chunks
        # are then CPU tensors; only the pinned staging needs a GPU).
        self._device_paths = self.device.type != "cpu"
        self._staging: _PinnedStaging | None = None
        if self.device.type == "cuda":
            # Once, at construction (never on the alloc/free paths): the table is then
            # complete for readers on any stream, not only the one that built it.
            torch.cuda.synchronize(self.device)
            self._staging = _PinnedStaging(self.device)
        self._table_ptr = self._table.data_ptr()

    @property
    def num_free(self) -> int:
        return self.num_rows - self._cursor + self._top

    @property
    def state(self) -> str:
        if self._top == 0:
            return "bump"
        # _classify(free_rows()) without int64 arrays of every free row: the benchmarks'
        # reset (prepare_state) ends here, and a smaller footprint evicts less of what the
        # timed alloc that follows needs from the CPU caches.
        free = ~self._allocated
        return "run_search" if bool((free[1:] & free[:-1]).any()) else "fragmented"

    def free_rows(self) -> np.ndarray:
        """Sorted free rows (host data; no sync)."""
        return np.flatnonzero(~self._allocated).astype(np.int64)

    def alloc(self, n: int) -> torch.Tensor:
        top = self._top
        cursor = self._cursor
        if type(n) is not int or n < 1 or n > self.num_rows - cursor + top:
            # raises AllocError, nothing changed
            n = validate_count(n, self.num_rows - cursor + top)
        if top == 0:
            # Bump: every row at or past the cursor is free, and they form a run.
            end = cursor + n
            if self._device_paths:
                out = self._table[cursor:end]
            else:
                out = torch.from_numpy(self._iota[cursor:end].copy())
            self._allocated[cursor:end] = True
            self._cursor = end
            return out
        lo, end = (top - n, cursor) if top >= n else (0, cursor + n - top)
        if not self._device_paths:
            rows = self._taken(lo, top, cursor, end)
            out = torch.from_numpy(rows.copy())
            self._allocated[rows] = True
            self._top, self._cursor = lo, end
            return out
        seg = self._segments[-1]
        key, off, length = seg
        if length >= n:
            # The top n entries are n consecutive positions of one array: a view of it.
            start = off + length - n
            if length == n:
                self._segments.pop()
            else:
                seg[2] = length - n
            if key == 0:
                self._allocated[start : start + n] = True
                out = self._table[start : start + n]
            else:
                tensor, host = self._chunks[key]
                self._allocated[host[start : start + n]] = True
                out = tensor[start : start + n]
        elif end > cursor and len(self._segments) == 1 and key == 0 and off + length == cursor:
            # The whole free list is one table run that ends at the cursor: with the bump
            # rows after it, still one run.
            self._segments.clear()
            self._allocated[off : off + n] = True
            out = self._table[off : off + n]
        else:
            rows = self._taken(lo, top, cursor, end)
            key = self._new_chunk(rows)  # may raise (device OOM): nothing changed yet
            self._pop_segments(top - lo)
            self._allocated[rows] = True
            out = self._chunks[key][0]
        self._top, self._cursor = lo, end
        if self._chunk_rows > COMPACT_FACTOR * self.num_rows:
            self._compact()
        return out

    def _taken(self, lo: int, top: int, cursor: int, end: int) -> np.ndarray:
        """The rows an alloc takes: stack entries lo:top, then the bump rows cursor:end."""
        rows = self._stack[lo:top]
        return np.concatenate((rows, self._iota[cursor:end])) if end > cursor else rows

    def _pop_segments(self, count: int) -> None:
        """Drop the top `count` stack entries from the segments."""
        segments = self._segments
        while count:
            seg = segments[-1]
            if seg[2] <= count:
                count -= seg[2]
                segments.pop()
            else:
                seg[2] -= count
                count = 0

    def _push_segment(self, key: int, off: int, k: int) -> None:
        segments = self._segments
        if segments:
            seg = segments[-1]
            if seg[0] == key and seg[1] + seg[2] == off:  # continues the top segment
                seg[2] += k
                return
        segments.append([key, off, k])

    def _new_chunk(self, rows: np.ndarray) -> int:
        """A new immutable device copy of `rows`; returns its key (its storage address)."""
        host = rows.copy()  # rows may be a view of the stack, which later frees overwrite
        if self._staging is not None:
            tensor = self._staging.to_device(host)
        else:  # a CPU allocator under test, or a device without pinned staging (not CUDA)
            tensor = torch.from_numpy(host.copy())  # never aliases the host twin
            if self.device.type != "cpu":
                tensor = tensor.to(self.device)
        key = tensor.data_ptr()  # a fresh tensor: its data is its storage's start
        self._chunks[key] = (tensor, host)
        self._chunk_rows += host.size
        return key

    def _compact(self) -> None:
        """Copy the free list into one new chunk and drop every other chunk.

        A dropped chunk a caller still holds a view of stays in _dropped (weakly: the entry
        goes when the tensor dies, so its address cannot be reused while it is listed), so
        free() can still name that view's rows.
        """
        dropped = self._dropped
        for key, (tensor, host) in self._chunks.items():

            def forget(ref: weakref.ref, key: int = key) -> None:
                if dropped.get(key, (None,))[0] is ref:
                    del dropped[key]

            dropped[key] = (weakref.ref(tensor, forget), host)
        self._chunks = {}
        self._chunk_rows = 0
        self._segments = []
        if self._top:
            self._segments.append([self._new_chunk(self._stack[: self._top]), 0, self._top])

    def free(self, rows: Any) -> None:
        view = None
        if isinstance(rows, torch.Tensor):
            arr, view = self._tensor_rows(rows)
        else:
            arr = _host_rows(rows, self.num_rows)
        _validate_rows(arr, self.num_rows, self._allocated, self._scratch, self._iota)
        k = arr.size
        if k == 0:
            return
        top = self._top
        if self._device_paths:
            if view is None:  # host rows: one run of the table, else a new chunk
                if k == 1 or (arr[-1] - arr[0] == k - 1 and bool((np.diff(arr) == 1).all())):
                    view = (0, int(arr[0]))
                else:
                    view = (self._new_chunk(arr), 0)  # may raise: nothing changed yet
            self._push_segment(view[0], view[1], k)
        self._stack[top : top + k] = arr
        self._top = top + k
        self._allocated[arr] = False
        if self._chunk_rows > COMPACT_FACTOR * self.num_rows:
            self._compact()

    def _tensor_rows(self, t: torch.Tensor) -> tuple[np.ndarray, tuple[int, int] | None]:
        """(host rows, (key, offset) when t is a unit-stride view of the table (key 0) or of
        a chunk, else None) of a tensor, never reading device memory.

        A view of a dropped chunk gives its rows (no offset: they are pushed as host rows);
        any other CPU tensor is read directly; any other device tensor raises.
        """
        on_host = t.device.type == "cpu"
        if t.dtype == torch.int64 and t.dim() == 1 and (on_host or t.device == self.device):
            k = t.numel()
            if k == 0:
                return np.empty(0, dtype=np.int64), None
            off = t.storage_offset()
            base = t.data_ptr() - 8 * off  # the storage's start address (int64: 8 bytes)
            step = t.stride(0)
            if base == self._table_ptr:
                return _strided(self._iota, off, step, k), (0, off) if step == 1 else None
            chunk = self._chunks.get(base)
            if chunk is not None:
                return _strided(chunk[1], off, step, k), (base, off) if step == 1 else None
            dropped = self._dropped.get(base)
            if dropped is not None:
                return _strided(dropped[1], off, step, k), None
        if on_host:
            return _host_rows(t, self.num_rows), None
        if t.device != self.device:
            raise AllocError(
                f"free(rows): rows are on {t.device}, this allocator's rows are on {self.device}"
            )
        if t.dtype != torch.int64 or t.dim() != 1:
            raise AllocError(
                f"free(rows): a device tensor must be 1-D int64 as alloc() returns it, got "
                f"{t.dtype} shape {tuple(t.shape)}"
            )
        raise AllocError(
            "free(rows): this device tensor is not a view of what alloc() returned (a clone? "
            "a concatenation?); reading its rows would synchronize the device: pass host rows "
            "(CPU tensor, numpy array or list) instead"
        )

    def free_all(self) -> None:
        self._allocated[:] = False
        self._top = 0
        self._cursor = 0
        self._segments = []
        # Chunks go; views of them that callers still hold name no allocated row any more
        # (free of one raises "pass host rows" on a device, "not allocated" on the host).
        self._chunks = {}
        self._dropped.clear()
        self._chunk_rows = 0


def _strided(values: np.ndarray, off: int, step: int, k: int) -> np.ndarray:
    """values[off], values[off + step], ... (k of them): the rows a strided view names.

    A step of 0 (an expanded view) repeats one row, which free's duplicate check rejects.
    """
    if step == 0:
        return np.full(k, values[off], dtype=np.int64)
    out = values[off : off + step * (k - 1) + 1 : step]
    if out.size != k:
        raise AllocError(f"free(rows): a view of {k} rows reaches past its allocation")
    return out
