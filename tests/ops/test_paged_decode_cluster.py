"""cuda/cluster_decode: the CUDA decode whose splits combine in a thread-block cluster.

CPU: the library compiles for sm_90a with nvcc (no spills, one kernel per dtype x group) and
its argument struct matches the ctypes mirror; the split policy; every input the kernel
refuses, refused by name. GPU (`pytest -m gpu` on the H200): against the fp64 reference at
every group size, page size and forced split count, ragged lengths (0, 1, a partial page, a
partial tile, long), stale NaN in every unattended slot, and at decode geometry.
"""

import ctypes
import re

import pytest
import torch

from kvbench.fixtures.pool import paged_pool
from kvbench.kernels import cuda_build
from kvbench.kernels import paged_decode_cluster as pdc
from kvbench.ops.paged_decode import check_paged_decode, make_decode_query

needs_nvcc = pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="no nvcc on this machine")


@needs_nvcc
def test_library_compiles_for_sm90a_without_spills(tmp_path):
    lib, log = cuda_build.compile_source(pdc.LIBRARY, tmp_path, extra=("-Xptxas", "-v"))
    assert lib.is_file()
    entries = re.findall(r"Compiling entry function '(\w+)' for 'sm_90a'", log)
    # fp16 / bf16 / fp8, x each group
    assert len(entries) == 3 * len(pdc.GROUPS), log
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    assert len(spills) == len(entries) and all(s == ("0", "0") for s in spills), log
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    assert regs and max(regs) <= 255, log  # __launch_bounds__(256, 1)
    assert ctypes.CDLL(str(lib)).kvb_args_size() == ctypes.sizeof(pdc.DecodeArgs)
    pdc.configure_library(ctypes.CDLL(str(lib)))  # the mirrored constants agree


@needs_nvcc
def test_the_kernel_declares_no_static_shared_memory(tmp_path):
    """The ring must start at the dynamic shared memory's base: one static __shared__ int put
    it 16 bytes in and made every launch slower (docs/decisions.md)."""
    import subprocess

    ptx = tmp_path / "cluster_decode.ptx"
    subprocess.run([cuda_build.find_nvcc(), "-O3", "-std=c++17", *cuda_build.ARCH_FLAGS, "-ptx",
                    "-o", str(ptx), str(cuda_build.SOURCE_DIR / f"{pdc.LIBRARY}.cu")],
                   check=True, capture_output=True)
    declared = [line.strip() for line in ptx.read_text().splitlines()
                if line.strip().startswith((".shared", ".extern .shared"))]
    assert declared and all(d.startswith(".extern .shared") for d in declared), declared


@needs_nvcc
def test_a_constant_edited_on_one_side_is_named(tmp_path, monkeypatch):
    lib, _ = cuda_build.compile_source(pdc.LIBRARY, tmp_path)
    monkeypatch.setattr(pdc, "TILE_N", 64)
    with pytest.raises(RuntimeError, match=r"constants differ .*'TILE_N': \(128, 64\)"):
        pdc.configure_library(ctypes.CDLL(str(lib)))
    assert ctypes.CDLL(str(lib)).kvb_constant(b"NO_SUCH") == -1


@needs_nvcc
def test_rebuilds_when_the_source_changes(tmp_path, monkeypatch):
    first, _ = cuda_build.compile_source(pdc.LIBRARY, tmp_path)
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    edited = (cuda_build.SOURCE_DIR / f"{pdc.LIBRARY}.cu").read_text() + "\n// edited\n"
    (src_dir / f"{pdc.LIBRARY}.cu").write_text(edited)
    monkeypatch.setattr(cuda_build, "SOURCE_DIR", src_dir)
    second, _ = cuda_build.compile_source(pdc.LIBRARY, tmp_path)
    assert first != second and first.is_file() and second.is_file()


def test_missing_nvcc_is_named(monkeypatch):
    monkeypatch.setattr(cuda_build, "find_nvcc", lambda: None)
    with pytest.raises(cuda_build.BuildError, match="needs nvcc"):
        cuda_build.compile_source(pdc.LIBRARY)


def test_split_policy():
    always = lambda s: 1000
    # batch 1 x 8 kv heads, 4k, 132 SMs: 16 splits of 2 tiles (128 CTAs, one wave)
    assert pdc.choose_cluster_splits(8, 4096, 132, always) == 16
    # the H200's occupancy (7 clusters of 16, 9 of 9): 9 and 8 splits both give 4 tiles per
    # CTA; the fewer CTAs win
    h200 = lambda s: {16: 7, 15: 7, 14: 7, 13: 7, 12: 7, 11: 7, 10: 7}.get(s, 9)
    assert pdc.choose_cluster_splits(8, 4096, 132, h200) == 8
    assert pdc.choose_cluster_splits(8, 32768, 132, h200) == 9  # 29 tiles vs 32 at 8
    assert pdc.choose_cluster_splits(64, 4096, 132, always) == 2
    assert pdc.choose_cluster_splits(16, 4096, 132, always) == 8
    # programs already fill the SMs: no split
    assert pdc.choose_cluster_splits(132, 4096, 132, always) == 1
    assert pdc.choose_cluster_splits(512, 8192, 132, always) == 1
    # short contexts: no split beyond one tile each, none shorter than MIN_TOKENS_PER_SPLIT
    assert pdc.choose_cluster_splits(8, 256, 132, always) == 2
    assert pdc.choose_cluster_splits(8, 100, 132, always) == 1


def _cpu_pool(**kw):
    args = {"kv_heads": 2, "head_dim": 128, "page_size": 16, "min_l2_multiple": 0, "seed": 0,
            "device": "cpu"}
    args.update(kw)
    return paged_pool(2, [5, 40], **args)


@pytest.mark.parametrize(
    ("pool_kw", "q_heads", "match"),
    [
        ({"dtype": "fp8"}, 4, "fp8 V from dim-major pages"),
        ({"dtype": "fp8", "storage": "v_dim_major", "page_size": 8}, 4, "page_size >= 16"),
        ({"dtype": "fp8", "storage": "v_dim_major", "q_dtype": torch.bfloat16}, 4,
         "fp8 caches with fp16 q"),
        ({"head_dim": 64}, 4, "head_dim 128"),
        ({}, 6, r"q_heads / kv_heads in \(1, 2, 4, 8\)"),
        ({"storage": "v_dim_major"}, 4, "token-major v_cache"),
        ({}, 4, "needs a CUDA device"),
        ({"dtype": "fp8", "storage": "v_dim_major"}, 4, "needs a CUDA device"),
    ],
)
def test_refused_inputs_are_named(pool_kw, q_heads, match):
    pool_kw = dict(pool_kw)
    q_dtype = pool_kw.pop("q_dtype", None)
    pool = _cpu_pool(**pool_kw)
    q = make_decode_query(pool, q_heads, dtype=q_dtype)
    with pytest.raises(ValueError, match=match):
        pdc.paged_decode_cluster(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                                 k_scale=pool.k_scale, v_scale=pool.v_scale)


def test_paged_decode_contract_checked_first():
    pool = _cpu_pool()
    q = make_decode_query(pool, 4)
    with pytest.raises(ValueError, match="seq_lens"):
        pdc.paged_decode_cluster(q, pool.k_cache, pool.v_cache, pool.block_table,
                                 pool.seq_lens.long())


# ---- GPU ---------------------------------------------------------------------------------------

_GPU = {"head_dim": 128, "min_l2_multiple": 0, "device": "cuda", "seed": 0}


def _check(pool, q_heads, **kw):
    q = make_decode_query(pool, q_heads, seed=1)
    fn = pdc.paged_decode_cluster
    if kw:
        def fn(*a, **k):
            return pdc.paged_decode_cluster(*a, **k, **kw)
    return check_paged_decode(fn, pool, q)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
@pytest.mark.parametrize("group", pdc.GROUPS)
@pytest.mark.parametrize("page_size", [8, 16, 64])
@pytest.mark.parametrize("splits", [None, 1, 3, 8, 14, 16])
def test_gpu_ragged(dtype, group, page_size, splits):
    lens = [1, 1, 15, 17, 129, 1000, 4097]
    pool = paged_pool(len(lens), lens, kv_heads=2, page_size=page_size, dtype=dtype, **_GPU)
    pool.seq_lens[0] = 0  # an empty slot of the batch: zero output
    try:
        _check(pool, 2 * group, **({} if splits is None else {"num_splits": splits}))
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize("group", pdc.GROUPS)
@pytest.mark.parametrize("page_size", [16, 64])
@pytest.mark.parametrize("splits", [None, 1, 3, 16])
def test_gpu_ragged_fp8(group, page_size, splits):
    """fp8 bytes (K token-major, V dim-major) against the same bytes widened by torch."""
    lens = [1, 1, 15, 17, 129, 1000, 4097]
    pool = paged_pool(len(lens), lens, kv_heads=2, page_size=page_size, dtype="fp8",
                      storage="v_dim_major", **_GPU)
    pool.seq_lens[0] = 0
    try:
        _check(pool, 2 * group, **({} if splits is None else {"num_splits": splits}))
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "storage"), [("fp16", "combined"), ("bf16", "combined"),
                                                ("fp8", "v_dim_major")])
def test_gpu_stale_nan_past_seq_len(dtype, storage):
    """Every slot no sequence attends holds NaN: the zero-filled rows past seq_len must not
    read them (0 x NaN = NaN), and no split may touch a page outside its range."""
    lens = [300, 17, 4096]
    pool = paged_pool(3, lens, kv_heads=2, page_size=16, dtype=dtype, storage=storage, **_GPU)
    try:
        attended = torch.zeros(pool.num_pages, pool.page_size, dtype=torch.bool, device="cuda")
        for seq, n in enumerate(lens):
            t = torch.arange(n, device="cuda")
            attended[pool.block_table[seq, t // pool.page_size].long(), t % pool.page_size] = True
        for cache in (pool.k_cache, pool.v_cache):
            cache[~attended] = 0x7F if dtype == "fp8" else float("nan")  # e4m3 NaN: 0x7F
        for splits in (None, 5, 16):
            _check(pool, 8, **({} if splits is None else {"num_splits": splits}))
    finally:
        pool.free()


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "storage"), [("fp16", "combined"), ("bf16", "combined"),
                                                ("fp8", "v_dim_major")])
@pytest.mark.parametrize(("batch", "context"), [(1, 4096), (1, 32768), (8, 4096), (64, 1024)])
def test_gpu_decode_geometry(dtype, storage, batch, context):
    pool = paged_pool(batch, context, kv_heads=8, head_dim=128, page_size=16, dtype=dtype,
                      storage=storage, device="cuda")
    try:
        check_paged_decode(pdc.paged_decode_cluster, pool, make_decode_query(pool, 32))
    finally:
        pool.free()


@pytest.mark.gpu
def test_gpu_bad_num_splits():
    pool = paged_pool(1, 64, kv_heads=2, page_size=16, dtype="fp16", **_GPU)
    q = make_decode_query(pool, 4)
    with pytest.raises(ValueError, match=r"num_splits must be None or an int in \[1, 16\]"):
        pdc.paged_decode_cluster(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                                 num_splits=17)


#: The mangled template arguments of each KV dtype code's instantiation.
_MANGLED_T = {0: "6__halfLb0", 1: "13__nv_bfloat16Lb0", 2: "6__halfLb1"}


def _ptxas_report(tmp_path) -> dict[tuple[int, int], dict]:
    """(dtype code, group) -> registers, local (stack) and static shared bytes per entry, as
    ptxas reports them when the library is built with the same flags plus -v."""
    _, log = cuda_build.compile_source(pdc.LIBRARY, tmp_path, extra=("-Xptxas", "-v"))
    found = {}
    for block in log.split("Compiling entry function")[1:]:
        entry = re.match(r" '(\w+)'", block).group(1)
        used = re.search(r"Used (\d+) registers", block)
        stack = re.search(r"(\d+) bytes stack frame", block)
        smem = re.search(r"(\d+) bytes smem", block)
        for code, mangled in _MANGLED_T.items():
            for group in pdc.GROUPS:
                if f"cluster_decode_kernelI{mangled}ELi{group}EE" in entry:
                    found[(code, group)] = {
                        "registers": int(used.group(1)),
                        "local_bytes": int(stack.group(1)) if stack else 0,
                        "static_shared": int(smem.group(1)) if smem else 0}
    return found


@pytest.mark.gpu
@needs_nvcc
def test_gpu_kernel_resources_are_the_compilers(tmp_path):
    """What the CUDA runtime says of each instantiation (the sidecar's record) is what ptxas
    reported when it compiled it: registers, local memory; shared = static + the dynamic ring."""
    reported = _ptxas_report(tmp_path)
    assert len(reported) == 3 * len(pdc.GROUPS)
    device = torch.device("cuda")
    for (code, group), want in reported.items():
        got = pdc.kernel_resources(device, code, group)
        assert got["registers"] == want["registers"], (code, group, got, want)
        assert got["local_bytes"] == want["local_bytes"], (code, group, got, want)
        assert got["shared_bytes"] > want["static_shared"], (code, group, got, want)
        assert got["num_warps"] == 8 and got["sass_arch"] == "sm_90", got
        assert got["name"] == f"cluster_decode_kernel<{pdc._CODE_NAMES[code]}, group={group}>"


@pytest.mark.gpu
@pytest.mark.parametrize(("dtype", "storage", "code"), [("fp16", "combined", 0),
                                                        ("bf16", "combined", 1),
                                                        ("fp8", "v_dim_major", 2)])
def test_gpu_a_launch_reports_its_kernel_to_the_hooks(dtype, storage, code):
    """The launch hook names the instantiation that ran (dtype and group from the inputs)."""
    pool = paged_pool(2, 300, kv_heads=2, page_size=16, dtype=dtype, storage=storage, **_GPU)
    seen = []
    cuda_build.LAUNCH_HOOKS.append(seen.append)
    try:
        q = make_decode_query(pool, 8)
        pdc.paged_decode_cluster(q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                                 k_scale=pool.k_scale, v_scale=pool.v_scale)
    finally:
        cuda_build.LAUNCH_HOOKS.remove(seen.append)
        pool.free()
    assert [d() for d in seen] == [pdc.kernel_resources(torch.device("cuda", 0), code, 4)]


def test_availability_is_the_kernels_layers_rule():
    """The registry row's availability (dispatch.spec) is cuda_build's rule, not a copy."""
    from kvbench.dispatch.spec import cuda_sm90_with_nvcc

    cpu = torch.device("cpu")
    assert cuda_build.unavailable_reason(cpu) == "needs a CUDA device, problem is on cpu"
    assert cuda_sm90_with_nvcc(cpu) == cuda_build.unavailable_reason(cpu)
    assert pdc.unavailable_reason(cpu) == cuda_build.unavailable_reason(cpu)
