"""The FlashInfer peer: page-table conversion, the reasons it cannot run, and on a GPU with a
FlashInfer available, its output against kvbench's reference on the fragmented pool."""

from __future__ import annotations

import os
import sys

import pytest
import torch

from kvbench.fixtures.pool import paged_pool
from kvbench.measure import flashinfer_peer as fp
from kvbench.measure.peers import flashinfer_peers
from kvbench.ops.paged_decode import check_paged_decode, make_decode_query


def test_plan_inputs_match_a_naive_walk_of_the_block_table():
    g = torch.Generator().manual_seed(5)
    page = 16
    lens = [1, 16, 17, 1000, 33]
    table = torch.randint(0, 500, (len(lens), 70), generator=g, dtype=torch.int32)
    indptr, indices, last = fp.plan_inputs(table, torch.tensor(lens, dtype=torch.int32), page)
    want_ptr, want_idx, want_last = [0], [], []
    for b, n in enumerate(lens):
        pages = -(-n // page)
        want_idx += table[b, :pages].tolist()
        want_ptr.append(want_ptr[-1] + pages)
        want_last.append(n - (pages - 1) * page)
    assert indptr.tolist() == want_ptr and indices.tolist() == want_idx
    assert last.tolist() == want_last and indices.dtype == torch.int32


def test_plan_inputs_reject_a_table_too_short_for_the_lengths():
    with pytest.raises(ValueError, match="need up to 3 pages but block_table has 2"):
        fp.plan_inputs(torch.zeros(1, 2, dtype=torch.int32), torch.tensor([40]), 16)


def test_missing_flashinfer_names_what_is_missing(monkeypatch, tmp_path):
    monkeypatch.delenv("KVBENCH_FLASHINFER_SITE", raising=False)
    monkeypatch.setattr(fp, "DEFAULT_SITE", tmp_path / "absent")
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # `import flashinfer` raises
    with pytest.raises(fp.PeerUnavailable, match="not installed and there is no carried copy"):
        fp.load_flashinfer()
    monkeypatch.setenv("KVBENCH_FLASHINFER_SITE", str(tmp_path))
    with pytest.raises(fp.PeerUnavailable, match="incomplete; missing: .*flashinfer/__init__.py"):
        fp.load_flashinfer()


def test_flashinfer_workspace_is_under_the_private_cache_root(monkeypatch, tmp_path):
    """FlashInfer's JIT workspace defaulted to /tmp/kvbench-flashinfer, a name any user can
    create first. Loaded from a (fake) carried copy, it now lands in the cache root."""
    site = tmp_path / "site"
    for pkg, body in (("flashinfer", f"__version__ = {fp.CARRIED_VERSION!r}\n"), ("tvm_ffi", "")):
        (site / pkg).mkdir(parents=True)
        (site / pkg / "__init__.py").write_text(body)
    monkeypatch.setenv("KVBENCH_FLASHINFER_SITE", str(site))
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("FLASHINFER_WORKSPACE_BASE", "TVM_FFI_CACHE_DIR"):
        monkeypatch.delenv(var, raising=False)
    for name in ("flashinfer", "tvm_ffi"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    try:
        assert fp.load_flashinfer().__version__ == fp.CARRIED_VERSION
    finally:
        for name in ("flashinfer", "tvm_ffi"):
            sys.modules.pop(name, None)
    workspace = tmp_path / "cache" / "flashinfer"
    assert os.environ["FLASHINFER_WORKSPACE_BASE"] == str(workspace) and workspace.is_dir()
    assert os.environ["TVM_FFI_CACHE_DIR"] == str(workspace / "tvm-ffi")


def test_table_lists_the_peers_with_their_reason_on_cpu():
    pool = paged_pool(2, 40, kv_heads=2, head_dim=64, min_l2_multiple=0, device="cpu")
    q = make_decode_query(pool, 4)
    peers = flashinfer_peers(pool, q)
    assert set(peers) == {"peer:flashinfer/decode", "peer:flashinfer/decode_tc"}
    for fn in peers.values():
        with pytest.raises(fp.PeerUnavailable, match="CUDA only"):
            fn(q)


@pytest.mark.parametrize(
    ("storage", "dtype", "match"),
    [
        ("split", torch.float16, "combined token-major K/V buffer"),
        ("combined", "fp8", "fp16 or bf16 only"),
        ("combined", torch.float16, "CUDA only"),
    ],
)
def test_make_flashinfer_decode_says_why_it_cannot_run(storage, dtype, match):
    pool = paged_pool(2, 40, kv_heads=2, head_dim=64, dtype=dtype, storage=storage,
                      min_l2_multiple=0, device="cpu")
    with pytest.raises(fp.PeerUnavailable, match=match):
        fp.make_flashinfer_decode(pool.buffer, pool.block_table, pool.seq_lens, q_heads=4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_flashinfer_matches_the_reference_on_the_fragmented_pool(dtype):
    # every last-page fill: 8, 15, 1 and 16 tokens
    pool = paged_pool(4, [1000, 1023, 977, 16], dtype=dtype, device="cuda")
    q = make_decode_query(pool, 32)
    try:
        for fn in flashinfer_peers(pool, q).values():
            check_paged_decode(fn, pool, q)  # raises on a mismatch or an unavailable peer
    except fp.PeerUnavailable as exc:
        pytest.skip(f"FlashInfer not available here: {exc}")
    finally:
        pool.free()
