"""KV block allocator: both implementations against a set model, states, errors, timing.

The model is a plain Python set of free rows, written here and sharing nothing with
kvbench.alloc, so a bug in the allocator cannot also be in the oracle.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from kvbench.alloc import (
    STATES,
    AllocError,
    HostFreeListAllocator,
    KVCacheManager,
    LegacyBitmapAllocator,
    checked_alloc,
    prepare_state,
    selfcheck_kv_alloc,
)
from kvbench.dispatch import clear_golden, reset_perf_provider, set_perf_provider, spec_names

IMPLS = ("torch/legacy", "host/freelist")


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


# ---- randomized sequence against the model ---------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
def test_random_sequence_matches_set_model(impl):
    rng = np.random.default_rng(20251129)
    num_rows = 300
    m = KVCacheManager(num_rows, device="cpu", impl=impl)
    free = set(range(num_rows))
    held: list[list[int]] = []
    for step in range(2000):
        r = rng.random()
        if r < 0.03:
            m.free_all()
            free, held = set(range(num_rows)), []
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
            form = step % 3  # host rows as list, numpy, or the CPU tensor form
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
        assert m.num_free == len(free)
        if step % 50 == 0:
            assert set(m.free_rows().tolist()) == free


# ---- states ----------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("n", [1, 64])
def test_each_state_reachable_and_invariant_holds(impl, state, n):
    m = KVCacheManager(1024, device="cpu", impl=impl)
    prepare_state(m, state, n=n)
    assert m.state == state
    before = set(m.free_rows().tolist())
    rows = checked_alloc(m, n).tolist()
    assert len(set(rows)) == n and set(rows) <= before
    # prepare_state is a complete reset: run it again from the state alloc left behind.
    prepare_state(m, state, n=n)
    assert m.state == state and set(m.free_rows().tolist()) == before


@pytest.mark.parametrize("impl", IMPLS)
def test_paths_taken_per_state(impl):
    m = KVCacheManager(1024, device="cpu", impl=impl)
    prepare_state(m, "bump", n=64)
    assert m.alloc(64).tolist() == list(range(512, 576))  # bump: the rows at the cursor
    prepare_state(m, "run_search", n=64)
    run = m.alloc(64).tolist()
    assert run == list(range(run[0], run[0] + 64))  # a run: consecutive rows
    prepare_state(m, "fragmented", n=64)
    rows = sorted(m.alloc(64).tolist())
    assert all(b - a >= 2 for a, b in itertools.pairwise(rows))  # scattered singles


@pytest.mark.parametrize("impl", IMPLS)
def test_free_all_restores_bump(impl):
    m = KVCacheManager(256, device="cpu", impl=impl)
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


def test_host_mirror_entry_dies_with_its_tensor():
    """The (data_ptr, numel) -> host rows mirror (used for CUDA tensors) never outlives the
    tensor: otherwise a reused address could map a new tensor to old rows."""
    a = HostFreeListAllocator(64, "cpu")
    t = torch.arange(4)
    a._remember(t, np.arange(4))
    key = (t.data_ptr(), 4)
    assert a._mirror[key][1].tolist() == [0, 1, 2, 3]
    del t
    assert key not in a._mirror


def test_prepare_state_errors():
    m = KVCacheManager(100, device="cpu", impl="host/freelist")
    with pytest.raises(ValueError, match="accepted states are bump, run_search, fragmented"):
        prepare_state(m, "warm", n=1)
    with pytest.raises(ValueError, match="needs num_rows >= 256"):
        prepare_state(m, "bump", n=64)


# ---- errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("state", STATES)
def test_errors_leave_state_unchanged(impl, state):
    m = KVCacheManager(256, device="cpu", impl=impl)
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
        (lambda: m.free([int(held[0]), int(held[0])]), "given twice"),
        (lambda: m.free(np.array([1.5])), "integers"),
        (lambda: m.free(np.zeros((2, 2), dtype=np.int64)), "1-D"),
        (lambda: m.free("rows"), "tensor, numpy array or list"),
    ]
    for action, match in cases:
        assert_unchanged(m, action, match)
    m.free(held)  # the valid free still works afterwards
    m.free([])  # and an empty free is a no-op


def test_double_free_after_free_is_rejected():
    for impl in IMPLS:
        m = KVCacheManager(32, device="cpu", impl=impl)
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
def test_selfcheck_passes_for_both(cls):
    assert selfcheck_kv_alloc(cls, "int64", "cpu") == 0.0
    with pytest.raises(ValueError, match="int64"):
        selfcheck_kv_alloc(cls, "fp16", "cpu")


def test_selfcheck_catches_a_fast_but_wrong_allocator():
    class ReusesRowZero(HostFreeListAllocator):
        """Correct bookkeeping, but the first returned row is always row 0 (in use or not)."""

        def alloc(self, n):
            rows = super().alloc(n).clone()
            rows[0] = 0
            return rows

    with pytest.raises(AssertionError, match="not free"):
        selfcheck_kv_alloc(ReusesRowZero, "int64", "cpu")


# ---- timing (host cost is real on CPU) -------------------------------------------------------------

BATCH = 64  # allocs per timed sample: see test docstring


@pytest.mark.parametrize("n", [1, 64])
def test_host_freelist_cost_and_spread(n):
    """host/freelist alloc(n) <= 10 µs in every state, spread between states <= 2x.

    bench_host over BATCH back-to-back allocs per sample (divided by BATCH): on CPU,
    bench_host evicts the CPU caches before each sample, so a single ~2-5 µs call would
    measure cold Python/numpy caches (~100+ µs), which is not the serving condition (the
    allocator runs every decode step, warm); on CUDA the flush hits the GPU L2 only. The
    fastest sample per state is compared: the cost of the code is its uncontended time, and
    other processes may share this machine's two cores (docs/allocator.md gives medians).
    """
    from kvbench.harness import bench_host

    m = KVCacheManager(BATCH * 64 * 8, device="cpu", impl="host/freelist")
    per_call = {}
    for state in STATES:

        def batch():
            for _ in range(BATCH):
                m.alloc(n)

        res = bench_host(batch, reset=lambda s=state: prepare_state(m, s, n=n * BATCH))
        per_call[state] = min(res.samples_us) / BATCH
    worst, best = max(per_call.values()), min(per_call.values())
    assert worst <= 10.0, per_call
    assert worst <= 2.0 * best, per_call


# ---- GPU: the production path never synchronizes; the legacy slow path does --------------------


@pytest.mark.gpu
@pytest.mark.parametrize("state", STATES)
def test_host_freelist_never_syncs_on_cuda(state):
    m = KVCacheManager(4096, device="cuda", impl="host/freelist")
    prepare_state(m, state, n=64)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        rows = m.alloc(64)
        m.free(rows)  # the exact tensor alloc returned: mapped through the host mirror
        rows = m.alloc(1)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert rows.device.type == "cuda" and rows.dtype == torch.int64


@pytest.mark.gpu
def test_host_freelist_device_rows_contract():
    m = KVCacheManager(256, device="cuda", impl="host/freelist")
    rows = m.alloc(8)
    before = set(m.free_rows().tolist())
    assert not (set(rows.cpu().tolist()) & before)
    with pytest.raises(AllocError, match="pass host rows"):
        m.free(rows[2:5])  # a slice cannot be mapped without a sync
    m.free(rows[2:5].cpu())  # host rows are fine
    m.free(rows.cpu()[[0, 1, 5, 6, 7]])
    assert m.num_free == 256
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
            m.alloc(64)  # nonzero() + .item(): the stall seed 000 measured
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
