"""KV block allocator: both implementations against a set model, states, errors, timing.

The model is a plain Python set of free rows, written here and sharing nothing with
kvbench.kernels.kv_alloc, so a bug in the allocator cannot also be in the oracle.
"""

from __future__ import annotations

import gc
import itertools
import weakref

import numpy as np
import pytest
import torch

from kvbench.api import KVCacheManager
from kvbench.dispatch import clear_golden, reset_perf_provider, set_perf_provider, spec_names
from kvbench.kernels.kv_alloc import (
    COMPACT_FACTOR,
    AllocError,
    HostFreeListAllocator,
    LegacyBitmapAllocator,
    _PinnedStaging,
)
from kvbench.ops import kv_alloc as kv_alloc_op
from kvbench.ops.kv_alloc import (
    STATES,
    checked_alloc,
    golden_check_kv_alloc,
    prepare_state,
)

IMPLS = ("torch/legacy", "host/freelist")
#: host/freelist with the paths a CUDA device takes (table and chunk views), on CPU
DEVICE_PATHS = "host/freelist+device_paths"
CPU_IMPLS = (*IMPLS, DEVICE_PATHS)


def manager(num_rows: int, impl: str) -> KVCacheManager:
    """A CPU manager; DEVICE_PATHS turns on the CUDA paths' logic (all but the staging)."""
    if impl == DEVICE_PATHS:
        m = KVCacheManager(num_rows, device="cpu", impl="host/freelist")
        m._backend._device_paths = True
        return m
    return KVCacheManager(num_rows, device="cpu", impl=impl)


def device_paths_backend(num_rows: int) -> HostFreeListAllocator:
    a = HostFreeListAllocator(num_rows, "cpu")
    a._device_paths = True
    return a


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("KVBENCH_KV_ALLOC", raising=False)
    set_perf_provider(None)
    yield
    reset_perf_provider()
    clear_golden()


def snapshot(m: KVCacheManager) -> tuple:
    return (m.num_free, m.state, tuple(m.free_rows().tolist()))


def assert_unchanged(m: KVCacheManager, action, match: str) -> None:
    before = snapshot(m)
    with pytest.raises(AllocError, match=match):
        action()
    assert snapshot(m) == before


def assert_twin_consistent(a: HostFreeListAllocator) -> None:
    """The device twin of the free list tells the truth: the segments cover the stack
    exactly, every entry's (array, position) holds its row, no two adjacent segments could be
    one, and every chunk key is the address of the tensor it holds, with the same rows on
    the host."""
    entries = []
    for key, off, length in a._segments:
        assert length > 0
        held = a._iota if key == 0 else a._chunks[key][1]
        entries.extend(held[off : off + length].tolist())
    assert entries == a._stack[: a._top].tolist()
    for (k1, o1, n1), (k2, o2, _) in itertools.pairwise(a._segments):
        assert not (k1 == k2 and o1 + n1 == o2)
    assert a._chunk_rows == sum(host.size for _, host in a._chunks.values())
    assert a._chunk_rows <= COMPACT_FACTOR * a.num_rows
    for key, (tensor, host) in a._chunks.items():
        assert tensor.data_ptr() == key
        assert tensor.tolist() == host.tolist()


# ---- randomized sequence against the model ---------------------------------------------------


@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_random_sequence_matches_set_model(impl):
    rng = np.random.default_rng(20251129)
    num_rows = 300
    m = manager(num_rows, impl)
    free = set(range(num_rows))
    held: list[list[int]] = []
    returned: dict[int, torch.Tensor] = {}  # id(rows list) -> the tensor alloc returned
    for step in range(2000):
        r = rng.random()
        if r < 0.03:
            m.free_all()
            free, held, returned = set(range(num_rows)), [], {}
            assert m.state == "bump"
        elif r < 0.08:
            # Injected errors: each must raise and change nothing.
            choice = int(rng.integers(5))
            if choice == 0:
                too_many = len(free) + 1
                assert_unchanged(m, lambda k=too_many: m.alloc(k), "exceeds")
            elif choice == 1:
                assert_unchanged(m, lambda: m.alloc(0), ">= 1")
            elif choice == 2:
                assert_unchanged(m, lambda: m.free([num_rows + 3]), "out of range")
            elif choice == 3 and free:
                row = int(rng.choice(sorted(free)))
                assert_unchanged(m, lambda row=row: m.free([row]), "not allocated")
            elif choice == 4 and held:
                dup = held[0] + held[0][:1]
                assert_unchanged(m, lambda dup=dup: m.free(dup), "given twice")
        elif held and (r < 0.5 or not free):
            rows = held.pop(int(rng.integers(len(held))))
            got = returned.pop(id(rows))
            # host rows as list, numpy, a new CPU tensor; or what alloc returned: the tensor
            # itself, or two slices of it (host/freelist maps views and copies to rows)
            form = step % 5
            if form == 3:
                m.free(got)
            elif form == 4:
                cut = len(rows) // 2
                m.free(got[:cut])
                m.free(got[cut:])
            else:
                m.free(rows if form == 0 else np.array(rows) if form == 1 else torch.tensor(rows))
            free.update(rows)
        elif free:
            n = int(rng.integers(1, min(len(free), 40) + 1))
            got = m.alloc(n)
            assert got.dtype == torch.int64 and got.device.type == "cpu" and got.shape == (n,)
            rows = got.tolist()
            assert len(set(rows)) == n, f"step {step}: duplicate rows"
            assert set(rows) <= free, f"step {step}: rows {set(rows) - free} were not free"
            free.difference_update(rows)
            held.append(rows)
            returned[id(rows)] = got
        assert m.num_free == len(free)
        if step % 50 == 0:
            assert set(m.free_rows().tolist()) == free
            if impl == DEVICE_PATHS:
                assert_twin_consistent(m._backend)
            elif impl == "host/freelist":
                assert not m._backend._chunks  # CPU tensors are read directly


# ---- states ----------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", CPU_IMPLS)
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("n", [1, 64])
def test_each_state_reachable_and_invariant_holds(impl, state, n):
    m = manager(1024, impl)
    prepare_state(m, state, n=n)
    assert m.state == state
    before = set(m.free_rows().tolist())
    rows = checked_alloc(m, n).tolist()
    assert len(set(rows)) == n and set(rows) <= before
    # prepare_state is a complete reset: run it again from the state alloc left behind.
    prepare_state(m, state, n=n)
    assert m.state == state and set(m.free_rows().tolist()) == before


@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_paths_taken_per_state(impl):
    m = manager(1024, impl)
    prepare_state(m, "bump", n=64)
    assert m.alloc(64).tolist() == list(range(512, 576))  # bump: the rows at the cursor
    prepare_state(m, "run_search", n=64)
    run = m.alloc(64).tolist()
    assert run == list(range(run[0], run[0] + 64))  # a run: consecutive rows
    prepare_state(m, "fragmented", n=64)
    rows = sorted(m.alloc(64).tolist())
    assert all(b - a >= 2 for a, b in itertools.pairwise(rows))  # scattered singles


@pytest.mark.parametrize("impl", CPU_IMPLS)
def test_free_all_restores_bump(impl):
    m = manager(256, impl)
    prepare_state(m, "fragmented", n=8)
    assert m.state == "fragmented"
    m.free_all()
    assert m.state == "bump" and m.num_free == 256
    assert m.alloc(3).tolist() == [0, 1, 2]


def test_legacy_cursor_stays_invalid_until_free_all():
    m = KVCacheManager(64, device="cpu", impl="torch/legacy")
    a = m.alloc(10)
    m.free(a[:1].clone())
    assert m.state == "run_search"  # one freed row invalidates the cursor
    m.alloc(1)  # takes it back; the legacy search path stays in use
    assert m.state != "bump"


def test_host_returns_to_bump_when_free_list_drains():
    m = KVCacheManager(64, device="cpu", impl="host/freelist")
    a = m.alloc(10)
    m.free(a[2:5].clone())
    assert m.state == "run_search"
    assert sorted(m.alloc(3).tolist()) == [2, 3, 4]  # free list first
    assert m.state == "bump"
    assert m.alloc(2).tolist() == [10, 11]


def test_host_mixed_free_list_and_bump():
    m = KVCacheManager(16, device="cpu", impl="host/freelist")
    m.alloc(8)
    m.free([1, 5])
    rows = m.alloc(4).tolist()
    assert sorted(rows) == [1, 5, 8, 9] and m.num_free == 6


def _is_table_view(a: HostFreeListAllocator, t: torch.Tensor) -> bool:
    return t.untyped_storage().data_ptr() == a._table.untyped_storage().data_ptr()


def _is_chunk_view(a: HostFreeListAllocator, t: torch.Tensor) -> bool:
    return t.untyped_storage().data_ptr() in a._chunks


def test_host_device_paths_return_views_in_every_state():
    """alloc(n) is a view in all three states: of the row table (bump), of the device copy
    that prepare_state's free of scattered host rows made (run_search, fragmented). Nothing
    is copied per alloc; the copy happened once, at free."""
    m = manager(1024, DEVICE_PATHS)
    a = m._backend
    prepare_state(m, "bump", n=64)
    rows = m.alloc(64)
    assert _is_table_view(a, rows) and rows.tolist() == list(range(512, 576))
    prepare_state(m, "run_search", n=64)
    assert len(a._chunks) == 1  # one free of singles + a run: one chunk
    rows = m.alloc(64)
    assert _is_chunk_view(a, rows) and rows.tolist() == list(range(768, 832))  # the run
    prepare_state(m, "fragmented", n=64)
    before = set(m.free_rows().tolist())
    (key,) = a._chunks
    one = m.alloc(1)
    rows = m.alloc(64)
    for t in (one, rows):
        assert t.untyped_storage().data_ptr() == key  # views of the one chunk: no copies
    got = rows.tolist()
    assert len(set(got)) == 64 and set(got) <= before - {one.item()}
    assert all(y - x >= 2 for x, y in itertools.pairwise(sorted(got)))
    m.free(rows)  # back onto the stack as positions of the same chunk: still no copy
    assert m.alloc(64).tolist() == got and list(a._chunks) == [key]
    assert_twin_consistent(a)


def test_host_alloc_spanning_two_frees_copies_once():
    """The top entries span two frees: one copy (a new chunk); the rest stays named."""
    a = device_paths_backend(64)
    a.alloc(32)
    a.free([1, 3, 5])  # chunk A
    a.free([9, 7])  # chunk B (descending: not a table run)
    assert len(a._chunks) == 2 and len(a._segments) == 2
    rows = a.alloc(4)  # 9, 7 from B and 3, 5 from A: not one view
    assert sorted(rows.tolist()) == [3, 5, 7, 9] and _is_chunk_view(a, rows)
    assert len(a._chunks) == 3 and a._segments == [[a._segments[0][0], 0, 1]]
    assert_twin_consistent(a)
    assert a.alloc(1).tolist() == [1]
    assert_twin_consistent(a)


def test_host_cpu_results_are_plain_tensors():
    """On a CPU device nothing is a view (a numpy copy is cheaper than torch's slicing there)
    and there are no chunks (free reads CPU tensors): writing into a result is harmless."""
    m = KVCacheManager(1024, device="cpu", impl="host/freelist")
    a = m._backend
    for state in STATES:
        prepare_state(m, state, n=64)
        rows = m.alloc(64)
        assert not _is_table_view(a, rows) and not a._chunks
        rows[0] = -1
    assert a._table.tolist() == list(range(1024))


@pytest.mark.parametrize("impl", ["host/freelist", DEVICE_PATHS])
def test_host_free_list_run_that_reaches_the_cursor_is_a_run(impl):
    m = manager(64, impl)
    a = m._backend
    m.alloc(10)
    m.free([7, 8, 9])  # host rows, one run freed just below the cursor: no chunk
    assert not a._chunks
    rows = m.alloc(5)  # drains the list and bumps: 7..11, one run
    assert rows.tolist() == [7, 8, 9, 10, 11] and not a._chunks
    assert _is_table_view(a, rows) == (impl == DEVICE_PATHS)
    m.free([3, 5])
    rows = m.alloc(3)  # 3, 5 and the cursor row 12: spans the list and the bump: a copy
    assert not _is_table_view(a, rows) and sorted(rows.tolist()) == [3, 5, 12]
    assert bool(a._chunks) == (impl == DEVICE_PATHS)


def test_host_run_after_split_pushes_is_detected():
    """A run pushed in two frees (stack [.., 4, 5] then [6, 7]) pops as one run of 4."""
    a = device_paths_backend(32)
    a.alloc(16)
    a.free([4, 5])
    a.free(np.array([6, 7]))
    rows = a.alloc(4)
    assert _is_table_view(a, rows) and rows.tolist() == [4, 5, 6, 7]
    a.free([9, 8])  # descending: not a run in stack order
    rows = a.alloc(2)
    assert not _is_table_view(a, rows) and sorted(rows.tolist()) == [8, 9]


def test_host_twin_survives_random_frees_in_every_form():
    """Random alloc/free with frees as host rows, whole results, unit and strided slices:
    after every step the twin is consistent and holds exactly the model's free rows."""
    rng = np.random.default_rng(11)
    a = device_paths_backend(128)
    free = set(range(128))
    held: list[torch.Tensor] = []
    for step in range(1500):
        if held and (rng.random() < 0.5 or not free):
            t = held.pop(int(rng.integers(len(held))))
            form = int(rng.integers(4))
            if form == 0:
                a.free(t.tolist())
            elif form == 1:
                a.free(t)
            elif form == 2 and t.numel() > 1:
                a.free(t[::2])
                a.free(t[1::2])
            else:
                cut = int(rng.integers(t.numel() + 1))
                a.free(t[:cut])
                a.free(t[cut:])
            free.update(t.tolist())
        elif free:
            t = a.alloc(int(rng.integers(1, min(len(free), 12) + 1)))
            assert set(t.tolist()) <= free and len(set(t.tolist())) == t.numel(), step
            free.difference_update(t.tolist())
            held.append(t)
        if step % 25 == 0:
            assert_twin_consistent(a)
            assert set(a.free_rows().tolist()) == free
            assert sorted(a._stack[: a._top].tolist()) == sorted(r for r in free if r < a._cursor)


def test_host_compaction_bounds_the_chunks():
    """Each step frees 16 scattered host rows (a 16-row chunk) and takes 15 back, leaving one
    stack entry in each chunk: 48 steps make 768 rows of chunks for a 64-row pool. Once they
    exceed COMPACT_FACTOR x num_rows, the free list is copied into one chunk and the others
    are dropped (assert_twin_consistent checks the bound after every step)."""
    rng = np.random.default_rng(3)
    a = device_paths_backend(64)
    held = set(a.alloc(64).tolist())
    compactions = []
    compact = a._compact
    a._compact = lambda: (compactions.append(len(a._chunks)), compact())
    for step in range(48):
        rows = sorted(rng.choice(sorted(held), 16, replace=False).tolist(), reverse=True)
        a.free(rows)  # descending: not a table run, so a chunk
        held.difference_update(rows)
        held.update(a.alloc(15).tolist())
        assert_twin_consistent(a)
        assert set(a.free_rows().tolist()) == set(range(64)) - held, step
    assert len(compactions) >= 2 and len(a._chunks) < 48, compactions


def test_host_free_accepts_views_and_slices_of_what_alloc_returned():
    m = manager(64, DEVICE_PATHS)
    rows = m.alloc(10)  # a view of the table: rows 0..9
    assert _is_table_view(m._backend, rows)
    m.free(rows[2:5])
    assert set(m.free_rows().tolist()) == {2, 3, 4} | set(range(10, 64))
    m.free(rows[5::2])  # a strided view names 5, 7, 9
    assert set(m.free_rows().tolist()) == {2, 3, 4, 5, 7, 9} | set(range(10, 64))
    assert_unchanged(m, lambda: m.free(rows[0:1].expand(3)), "given twice")
    assert_unchanged(m, lambda: m.free(rows[2:3]), "not allocated")
    assert_unchanged(m, lambda: m.free(rows), "not allocated")  # 2, 3, 4, ... are free
    m.free(rows[[0, 1, 6, 8]])  # advanced indexing copies: a CPU tensor is read directly
    assert m.num_free == 64


def test_host_dropped_chunk_is_forgotten_when_its_last_view_dies():
    """After compaction a dropped chunk is listed only while a caller's view keeps it alive;
    free() of that view still works (its rows come back as host rows: a copy)."""
    a = device_paths_backend(256)
    prepare_state(a, "fragmented", n=8)
    (key,) = a._chunks
    rows = a.alloc(8)  # a view of the chunk
    a._compact()  # as if chunks had outgrown the bound
    assert key not in a._chunks and key in a._dropped
    chunk = weakref.ref(rows._base)
    a.free(rows[:4])  # named through _dropped, pushed as host rows
    assert_twin_consistent(a)
    rest = rows[4:]
    del rows
    gc.collect()
    assert key in a._dropped and chunk() is not None  # `rest` still views it
    a.free(rest)
    del rest
    gc.collect()
    assert chunk() is None and key not in a._dropped
    assert_twin_consistent(a)


def test_host_free_all_drops_the_chunks():
    a = device_paths_backend(256)
    prepare_state(a, "fragmented", n=8)
    a.alloc(8)
    a.free([7, 5])
    assert len(a._chunks) == 2 and a._segments
    a.free_all()
    assert not a._chunks and not a._segments and a.state == "bump" and a._chunk_rows == 0


def snapshot_backend(a: HostFreeListAllocator) -> tuple:
    return (
        a.num_free,
        a.state,
        tuple(a.free_rows().tolist()),
        tuple(a._chunks),
        tuple(map(tuple, a._segments)),
    )


def test_prepare_state_ends_every_state_with_the_same_torch_calls(monkeypatch):
    """The timed alloc after a reset must not inherit a warm or cold torch path from the
    reset's own composition (bump's reset ends with an alloc, the others with a free):
    every state's reset ends with the one epilogue."""

    calls = []
    monkeypatch.setattr(kv_alloc_op, "_warm_result_paths", lambda dev: calls.append(dev))
    m = KVCacheManager(256, device="cpu", impl="host/freelist")
    for state in STATES:
        prepare_state(m, state, n=4)
    assert calls == [m.device] * len(STATES)


def test_the_epilogue_warms_both_ways_an_allocator_builds_its_result(monkeypatch):
    """A view of a device tensor (host/freelist's device paths) and a tensor over a numpy
    array (its CPU path): each run of the epilogue wraps its private array once, beside the
    private tensor it slices."""
    seen = []
    real_from_numpy = torch.from_numpy
    monkeypatch.setattr(torch, "from_numpy", lambda a: seen.append(a.shape) or real_from_numpy(a))
    kv_alloc_op._warm_result_paths(torch.device("cpu"))
    kv_alloc_op._warm_result_paths(torch.device("cpu"))
    assert seen == [(1,), (1,)]
    view, host = kv_alloc_op._RESULT_PROBES[torch.device("cpu")]
    assert view.device.type == "cpu" and host.dtype == np.int64


def test_prepare_state_errors():
    m = KVCacheManager(100, device="cpu", impl="host/freelist")
    with pytest.raises(ValueError, match="accepted states are bump, run_search, fragmented"):
        prepare_state(m, "warm", n=1)
    with pytest.raises(ValueError, match="needs num_rows >= 256"):
        prepare_state(m, "bump", n=64)


# ---- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", CPU_IMPLS)
@pytest.mark.parametrize("state", STATES)
def test_errors_leave_state_unchanged(impl, state):
    m = manager(256, impl)
    prepare_state(m, state, n=4)
    held = m.alloc(4)
    free_row = int(m.free_rows()[0])
    cases = [
        (lambda: m.alloc(m.num_free + 1), "exceeds"),
        (lambda: m.alloc(0), ">= 1"),
        (lambda: m.alloc(-3), ">= 1"),
        (lambda: m.alloc(2.0), "must be an int"),
        (lambda: m.alloc(True), "must be an int"),
        (lambda: m.free([free_row]), "not allocated"),
        (lambda: m.free([int(held[0]), 256]), "out of range"),
        (lambda: m.free([-1]), "out of range"),
        # Beyond int64: named as given, not an OverflowError or a wrapped row.
        (lambda: m.free([2**70]), rf"rows \[{2**70}\] out of range \[0, 256\)"),
        (lambda: m.free([int(held[0]), -(2**63) - 1]), rf"\[{-(2**63) - 1}\] out of range"),
        (lambda: m.free(np.array([2**64 - 1], dtype=np.uint64)),
         rf"rows \[{2**64 - 1}\] out of range \[0, 256\)"),
        (lambda: m.free([int(held[0]), int(held[0])]), "given twice"),
        (lambda: m.free([int(held[0])] * 300), "given twice"),  # more rows than the pool
        (lambda: m.free(np.array([1.5])), "integers"),
        (lambda: m.free(np.zeros((2, 2), dtype=np.int64)), "1-D"),
        (lambda: m.free("rows"), "tensor, numpy array or list"),
    ]
    for action, match in cases:
        assert_unchanged(m, action, match)
    m.free(held)  # the valid free still works afterwards
    m.free([])  # and an empty free is a no-op


def test_double_free_after_free_is_rejected():
    for impl in CPU_IMPLS:
        m = manager(32, impl)
        rows = m.alloc(4)
        m.free(rows)
        assert_unchanged(m, lambda m=m, rows=rows: m.free(rows), "not allocated")


def test_manager_follows_selector(monkeypatch):
    monkeypatch.setenv("KVBENCH_KV_ALLOC", "torch/legacy")
    m = KVCacheManager(32, device="cpu")
    assert m.impl == "torch/legacy" and isinstance(m._backend, LegacyBitmapAllocator)
    assert m.selection.forced
    monkeypatch.setenv("KVBENCH_KV_ALLOC", "auto")
    m = KVCacheManager(32, device="cpu")
    assert m.impl == "host/freelist" and isinstance(m._backend, HostFreeListAllocator)
    monkeypatch.setenv("KVBENCH_KV_ALLOC", "bitmap")
    with pytest.raises(ValueError, match="valid values: auto, torch/legacy, host/freelist"):
        KVCacheManager(32, device="cpu")


def test_manager_argument_errors():
    with pytest.raises(ValueError, match="valid names: torch/legacy, host/freelist"):
        KVCacheManager(32, device="cpu", impl="host/bitmap")
    for bad in (0, -4, 2.5, True):
        with pytest.raises(ValueError, match="num_rows"):
            KVCacheManager(bad, device="cpu", impl="host/freelist")
    assert set(spec_names("kv_alloc")) == set(IMPLS)


# ---- golden check --------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [LegacyBitmapAllocator, HostFreeListAllocator])
def test_golden_check_passes_for_both(cls):
    assert golden_check_kv_alloc(cls, "int64", "cpu") == 0.0
    with pytest.raises(ValueError, match="int64"):
        golden_check_kv_alloc(cls, "fp16", "cpu")


def test_golden_check_catches_a_fast_but_wrong_allocator():
    class ReusesRowZero(HostFreeListAllocator):
        """Correct bookkeeping, but the first returned row is always row 0 (in use or not)."""

        def alloc(self, n):
            rows = super().alloc(n).clone()
            rows[0] = 0
            return rows

    with pytest.raises(AssertionError, match="not free"):
        golden_check_kv_alloc(ReusesRowZero, "int64", "cpu")


# ---- timing (host cost is real on CPU) -----------------------------------------------------------

BATCH = 64  # allocs per timed sample: see test docstring


ROUNDS = 6  # interleaved rounds per state: see test docstring


@pytest.mark.parametrize("n", [1, 64])
def test_host_freelist_cost_and_spread(n):
    """host/freelist alloc(n) <= 10 µs in every state, spread between states <= 2x.

    bench_host over BATCH back-to-back allocs per sample (divided by BATCH): the reset of
    run_search and fragmented frees half the pool and leaves the CPU caches cold for the
    first call (docs/allocator.md, "single"), which the batch amortizes as a decode step
    allocating for a batch of sequences does. The fastest sample per state is compared: the
    cost of the code is its uncontended time. The states are measured in interleaved short
    rounds, so a slow phase of this shared 2-core machine (its speed swings ~2x over
    seconds) lands on every state rather than on the one measured at that moment.
    """
    from kvbench.harness import bench_host

    m = KVCacheManager(BATCH * 64 * 8, device="cpu", impl="host/freelist")

    def batch():
        for _ in range(BATCH):
            m.alloc(n)

    per_call = {state: float("inf") for state in STATES}
    for _ in range(ROUNDS):
        for state in STATES:
            res = bench_host(
                batch, reset=lambda s=state: prepare_state(m, s, n=n * BATCH), repeat=10
            )
            per_call[state] = min(per_call[state], min(res.samples_us) / BATCH)
    worst, best = max(per_call.values()), min(per_call.values())
    assert worst <= 10.0, (n, per_call)
    assert worst <= 2.0 * best, (n, per_call)


# ---- GPU: the production path never synchronizes; the legacy slow path does --------------------


@pytest.mark.gpu
@pytest.mark.parametrize("state", STATES)
def test_host_freelist_never_syncs_on_cuda(state):
    m = KVCacheManager(4096, device="cuda", impl="host/freelist")
    prepare_state(m, state, n=64)
    free_before = m.num_free
    staging = m._backend._staging
    fallbacks = staging.fallbacks  # prepare_state's big free may take the fallback
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        rows = m.alloc(64)
        m.free(rows)  # the exact tensor alloc returned: its rows are known on the host
        rows = m.alloc(1)
        held = m.alloc(64)
        m.free(held[:32])  # slices of what alloc returned (views of the table or a chunk)
        m.free(held[32:])
        # Strided halves are scattered rows: each free is a copy through the pinned ring,
        # enough of them (2 x 1100 x 32 rows) to lap the ring (8 x 4096 rows) twice.
        for _ in range(1100):
            held = m.alloc(64)
            m.free(held[::2])
            m.free(held[1::2])
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert rows.device.type == "cuda" and rows.dtype == torch.int64
    assert m.num_free == free_before - 1  # every free was applied (only alloc(1) is held)
    assert staging.fallbacks == fallbacks  # the ring laps without falling back


@pytest.mark.gpu
def test_host_cuda_allocs_are_views_in_every_state():
    m = KVCacheManager(4096, device="cuda", impl="host/freelist")
    a = m._backend
    assert a._table.device == m.device and a._device_paths
    prepare_state(m, "bump", n=64)
    rows = m.alloc(64)
    assert _is_table_view(a, rows) and rows.cpu().tolist() == list(range(2048, 2112))
    prepare_state(m, "run_search", n=64)
    assert _is_chunk_view(a, m.alloc(64))
    prepare_state(m, "fragmented", n=64)
    (key,) = a._chunks
    for n in (1, 64):
        assert m.alloc(n).untyped_storage().data_ptr() == key  # no copy per alloc


@pytest.mark.gpu
def test_host_free_list_rows_reach_the_device_correctly():
    """The device twin holds the rows the model predicts: prepare_state("fragmented") frees
    0, 2, ..., 4094 in order and the free list is LIFO, so alloc i returns the i-th block of
    64 from the top. Then blocks freed back as host rows (a copy each) and as strided views
    (a copy each) and as plain views (no copy) come back in LIFO order. Checked after a
    synchronize, against values computed here."""
    m = KVCacheManager(4096, device="cuda", impl="host/freelist")
    prepare_state(m, "fragmented", n=64)
    evens = np.arange(0, 4096, 2)
    got = [m.alloc(64) for _ in range(20)]
    want = [evens[evens.size - 64 * (i + 1) : evens.size - 64 * i] for i in range(20)]
    m.free(want[0][::-1].copy())  # host rows, reversed: a copy
    m.free(got[1][::2])  # strided view: a copy
    m.free(got[1][1::2])
    m.free(got[2])  # a view: named in place
    again = [m.alloc(64), m.alloc(32), m.alloc(32), m.alloc(64)]
    torch.cuda.synchronize()
    for i, rows in enumerate(got):
        assert rows.device == m.device and rows.dtype == torch.int64
        assert sorted(rows.cpu().tolist()) == want[i].tolist(), i
    assert again[0].cpu().tolist() == want[2].tolist()
    assert again[1].cpu().tolist() == want[1][1::2].tolist()
    assert again[2].cpu().tolist() == want[1][::2].tolist()
    assert again[3].cpu().tolist() == want[0][::-1].tolist()


def _free_blocks(a: HostFreeListAllocator, blocks: list[np.ndarray]) -> None:
    for block in blocks:
        a.free(block)  # 64 scattered host rows: a copy through the pinned ring


@pytest.mark.gpu
def test_host_staging_ring_never_overwrites_a_pending_copy():
    """A tiny ring (2 segments x 256 rows) behind a busy stream: the copies cannot have run
    when the ring laps, so reuse must wait for no one: the busy segment is skipped (fresh
    pinned memory), never overwritten and never waited for. Every result is checked."""
    a = HostFreeListAllocator(4096, "cuda")
    a._staging = _PinnedStaging(a.device, segment_rows=256, segments=2)
    a.alloc(4096)
    blocks = [np.arange(128 * i, 128 * i + 128, 2) for i in range(12)]  # 64 scattered rows
    torch.cuda.synchronize()
    torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU spin: every copy below queues behind it
    torch.cuda.set_sync_debug_mode("error")
    try:
        _free_blocks(a, blocks)  # 12 x 64 rows: three laps of 512
        got = [a.alloc(64) for _ in range(12)]  # views of those copies, LIFO
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert a._staging.fallbacks >= 1  # the lap found segment 0 still pending
    torch.cuda.synchronize()
    for i, rows in enumerate(got):
        assert rows.cpu().tolist() == blocks[11 - i].tolist(), i


@pytest.mark.gpu
def test_host_staging_follows_the_current_stream():
    a = HostFreeListAllocator(4096, "cuda")
    a.alloc(4096)
    blocks = [np.arange(0, 128, 2), np.arange(128, 256, 2)]
    side = torch.cuda.Stream()
    _free_blocks(a, blocks[:1])
    with torch.cuda.stream(side):
        _free_blocks(a, blocks[1:])  # a new stream closes the segment the first copy used
    assert a._staging._seg == 1 and a._staging._stream == side
    side.synchronize()
    torch.cuda.synchronize()
    assert a.alloc(64).cpu().tolist() == blocks[1].tolist()
    assert a.alloc(64).cpu().tolist() == blocks[0].tolist()


@pytest.mark.gpu
def test_host_freelist_device_rows_contract():
    m = KVCacheManager(256, device="cuda", impl="host/freelist")
    assert m.device.index is not None  # "cuda" is resolved to the device tensors report
    rows = m.alloc(8)
    before = set(m.free_rows().tolist())
    assert not (set(rows.cpu().tolist()) & before)
    with pytest.raises(AllocError, match="pass host rows"):
        m.free(rows.clone())  # memory alloc never returned: only a sync could read it
    with pytest.raises(AllocError, match="1-D int64"):
        m.free(rows.view(2, 4))
    m.free(rows[2:5])  # a slice of what alloc returned: its rows follow from its offset
    m.free(rows.cpu()[[0, 1, 5, 6, 7]])  # host rows are fine
    assert m.num_free == 256
    with pytest.raises(AllocError, match="not allocated"):
        m.free(rows)  # freed already
    kept = m.alloc(4)
    m.free(kept.view(-1))  # same data_ptr and numel as returned: accepted
    assert m.num_free == 256


@pytest.mark.gpu
def test_legacy_slow_path_synchronizes_on_cuda():
    m = KVCacheManager(4096, device="cuda", impl="torch/legacy")
    prepare_state(m, "fragmented", n=64)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError):
            m.alloc(64)  # nonzero() + .item(): the host stall the row exists to show
    finally:
        torch.cuda.set_sync_debug_mode("default")


@pytest.mark.gpu
@pytest.mark.parametrize("impl", IMPLS)
def test_states_and_invariant_on_cuda(impl):
    for state in STATES:
        for n in (1, 64):
            m = KVCacheManager(8192, device="cuda", impl=impl)
            prepare_state(m, state, n=n)
            assert m.state == state
            rows = checked_alloc(m, n)
            assert rows.device.type == "cuda"
