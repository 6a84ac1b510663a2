"""paged_decode: one decode step over the fragmented paged KV pool, per selector x dtype x shape.

Geometry: kvbench.ops.paged_decode's (Llama-3/Qwen3 decode: 32 query heads, 8 KV heads,
head_dim 128, 16-token pages); PagedDecodeGeometry measures the other model geometries of
kvbench.ops.decode_geometry at one case each.
Cases name batch x context ("b8_c4k" = 8 sequences of 4096 tokens). fp16, bf16 and fp8 are
separate rows, not a dtype axis to compare along: fp8 halves the bytes but is dequant-bound,
so a lower fp8 GB/s is a different limit, not a regression.

Each case is one call into kvbench's measuring pipeline (kvbench.measure.pipeline): the row
the selector names is selected and asserted, checked against the op's fp64 reference
(check_paged_decode), then timed by bench() (cold L2) with its last timed call verified. The
timed callable is the kernel row dispatch selected, called with the pool's tensors:
dispatch's own host overhead is measured separately in dispatch_overhead.py.
"""

from __future__ import annotations

from typing import ClassVar

from . import _common as c

OP = "paged_decode"
SELECTORS = ["auto", "triton/single_pass", "triton/split_kv", "cuda/cluster_decode",
             "torch/gather_sdpa"]
DTYPES = ["fp16", "bf16", "fp8"]
#: case -> (batch, context tokens)
CASES = {
    "b1_c4k": (1, 4096),
    "b1_c32k": (1, 32768),
    "b4_c1k": (4, 1024),
    "b8_c4k": (8, 4096),
    "b32_c4k": (32, 4096),
    "b64_c8k": (64, 8192),
}
#: The case a CPU runs (torch rows only): single-threaded gather+SDPA takes ~0.1-0.3 s a call
#: there, so one small case keeps the CPU suite within its budget.
CPU_CASES = ("b4_c1k",)
#: layout/storage ablation (each fixture property keeps a row that measures what it is worth):
#: variant -> (layout, storage, KV dtype). Dim-major V pages are the fp8 kernel's layout lever
#: (docs/decisions.md, "fp8 dim-major V pages"), tracked at both dtypes; fp8 in combined storage is
#: PagedDecode's own fp8 row at the same case.
VARIANTS = {
    "frag_combined": ("fragmented", "combined", "fp16"),
    "contig_combined": ("contiguous", "combined", "fp16"),
    "frag_split": ("fragmented", "split", "fp16"),
    "frag_v_dim_major": ("fragmented", "v_dim_major", "fp16"),
    "frag_v_dim_major_fp8": ("fragmented", "v_dim_major", "fp8"),
}
ABLATION_CASE = "b32_c4k"
#: Rows of the cross product not measured per commit, with why: the torch peer at bf16 runs
#: the same torch code as at fp16 (gather, SDPA) in another dtype, kvbench's own bf16 kernel
#: path is covered by the Triton and auto rows, and the peer's six bf16 rows cost seconds of
#: the per-commit budget; fp16 and fp8 keep the peer. Rows that cannot
#: read a pool (cuda/cluster_decode: fp8 from dim-major V pages only, 16-bit from token-major
#: ones) are not listed here: the registry of the commit under test says so (_unserved).
TRIMMED_ROWS = {
    ("torch/gather_sdpa", "bf16"): "the torch peer is measured at fp16 and fp8 only",
}
#: PagedDecodeGeometry's axis: kvbench.ops.decode_geometry.GEOMETRIES by name (literal: asv's
#: lookup processes import no kvbench; tests/benchmarks/test_asv_config.py keeps the two equal).
GEOMETRIES = ["llama3-8b", "qwen2.5-7b", "phi-3-mini-128k", "gemma-2-9b", "nemotron-4-340b"]
#: (batch, context tokens) of every geometry's one case, and its KV dtype (see the class).
GEOMETRY_CASE = (8, 8192)
GEOMETRY_DTYPE = "fp16"


def _measure_pool(w: c.Worker, dev: str, pool, keys: list[tuple[str, ...]], results: dict,
                  ) -> None:
    """Each key's selector row on one pool, through the measuring pipeline (keys[i][0] is the
    selector; the rest of the key only labels the result)."""
    op = c.need("kvbench.ops.paged_decode", "decode_inputs")
    inputs = op.decode_inputs(pool, seed=0)
    timings: dict = {}

    def one(key: tuple[str, ...]) -> dict:
        return w.measure_case(inputs, key[0], dev, timings)

    w.run_cases(keys, one, results)


def _pool(dev: str, case: str, dtype: str, layout: str = "fragmented", storage: str = "combined"):
    op = c.need("kvbench.ops.paged_decode", "decode_pool")
    batch, context = CASES[case]
    return op.decode_pool(batch, context, dtype, dev, layout=layout, storage=storage, seed=0)


def _group(w: c.Worker, dev: str, keys: list, dtype: str, case: str, results: dict,
           **layout: str) -> None:
    """One pool for `keys` (same dtype, case and layout), measured, then freed."""
    w.run_group(
        keys,
        lambda: _pool(dev, case, dtype, **layout),
        lambda pool: _measure_pool(w, dev, pool, keys, results),
        results,
        release=c.release_pool,
    )


def measure_decode(w: c.Worker) -> dict:
    """Every (selector, dtype, case) of PagedDecode, measured in this one process."""
    results: dict = {}
    dev = w.prepare_process()
    for case in CASES:
        for dtype in DTYPES:
            for (row, row_dtype), why in TRIMMED_ROWS.items():
                if row_dtype == dtype:
                    c.skip_all([(row, dtype, case)], f"{c.TRIMMED}: {why}", results)
            keys = [(s, dtype, case) for s in SELECTORS if (s, dtype) not in TRIMMED_ROWS]
            if dev == "cpu" and case not in CPU_CASES:
                c.skip_all(keys, f"{case} is a GPU-size case; a CPU runs {', '.join(CPU_CASES)}",
                           results)
            else:
                _group(w, dev, keys, dtype, case, results)
    return results


def measure_ablation(w: c.Worker) -> dict:
    """Every (selector, variant) of PagedDecodeAblation at ABLATION_CASE."""
    results: dict = {}
    dev = "cpu" if c.no_nvidia_driver() else w.prepare_process()
    for variant, (layout, storage, dtype) in VARIANTS.items():
        keys = [(s, variant) for s in SELECTORS]
        if dev == "cpu":
            c.skip_all(keys, f"the ablation runs at {ABLATION_CASE}, a GPU-size case", results)
        else:
            _group(w, dev, keys, dtype, ABLATION_CASE, results, layout=layout, storage=storage)
    return results


def measure_geometry(w: c.Worker) -> dict:
    """Every geometry of PagedDecodeGeometry at GEOMETRY_CASE under auto (a GPU-size case: a
    CPU records skips)."""
    results: dict = {}
    keys = [(name,) for name in GEOMETRIES]
    dev = "cpu" if c.no_nvidia_driver() else w.prepare_process()
    if dev == "cpu":
        batch, context = GEOMETRY_CASE
        c.skip_all(keys, f"the geometries run at batch {batch} x {context} tokens, a GPU-size "
                   "case", results)
    else:
        measure_geometries(w, dev, keys, results, *GEOMETRY_CASE)
    return results


def measure_geometries(w: c.Worker, dev: str, keys: list[tuple[str, ...]], results: dict,
                       batch: int, context: int) -> None:
    """Each key's geometry at (batch, context), GEOMETRY_DTYPE, auto: one pool per geometry
    (its heads, head_dim, page size), its case through the measuring pipeline with the
    geometry's decode options, then freed. A commit without the geometry table, or without a
    name on it, records the key as skipped."""
    for key in keys:
        w.run_group(
            [key],
            lambda key=key: _geometry_pool(dev, key[0], batch, context),
            lambda pool, key=key: _measure_geometry_pool(w, dev, key, pool, results),
            results,
            release=c.release_pool,
        )


def _geometry(name: str):
    table = c.need("kvbench.ops.decode_geometry", "GEOMETRIES")
    if name not in table.GEOMETRIES:
        raise c.Skip(f"this commit's kvbench.ops.decode_geometry has no geometry {name!r}")
    return table.GEOMETRIES[name]


def _geometry_pool(dev: str, name: str, batch: int, context: int):
    op = c.need("kvbench.ops.paged_decode", "geometry_pool", "geometry_inputs")
    return op.geometry_pool(_geometry(name), batch, context, GEOMETRY_DTYPE, dev, seed=0)


def _measure_geometry_pool(w: c.Worker, dev: str, key: tuple[str, ...], pool,
                           results: dict) -> None:
    op = c.need("kvbench.ops.paged_decode", "geometry_inputs")
    inputs = op.geometry_inputs(_geometry(key[0]), pool, seed=0)
    w.run_cases([key], lambda _key: w.measure_case(inputs, c.AUTO, dev, {}), results)


class PagedDecode(c._WithGbps):
    """Decode latency (regression series) and GB/s (display) per selector x dtype x shape."""

    params: ClassVar[list] = [SELECTORS, DTYPES, list(CASES)]
    param_names: ClassVar[list] = ["selector", "dtype", "case"]

    setup_cache = c.setup_cache_suite


class PagedDecodeAblation(c._WithGbps):
    """Layout/storage ablation at one shape: fragmented vs contiguous pages, combined vs split
    storage, token- vs dim-major V pages (fp16 and fp8)."""

    params: ClassVar[list] = [SELECTORS, list(VARIANTS)]
    param_names: ClassVar[list] = ["selector", "variant"]

    setup_cache = c.setup_cache_suite


class PagedDecodeGeometry(c._WithGbps):
    """Decode latency and GB/s of `auto` at each model geometry engines serve
    (kvbench.ops.decode_geometry: llama3-8b, qwen2.5-7b, phi-3-mini-128k, gemma-2-9b with its
    soft-cap and 4096-token window, nemotron-4-340b), one case each.

    Why these shapes and no more: the rest of the suite measures one geometry (Llama-3's) in
    depth, and the per-commit budget has room for a handful of cases, not for the cross
    product of geometries with selectors, dtypes and contexts. So: auto only (the row an
    engine would get; the sidecar records which ran, so a step names its row), fp16 only,
    and one case, batch 8 x 8192 tokens (GEOMETRY_CASE): five bench() rows and five pools a
    commit. 8192 tokens is longer than Gemma-2's window, so the window drops half of each
    sequence there (a window walk that started at token 0 would show as a step); batch 8
    times the geometries' KV heads is 32 to 256 (sequence, kv head) programs, below and
    above an H200's 132 SMs, so triton/split_kv's choice whether to split goes both ways.
    The geometries' kernels are compiled specializations of their own (padded tiles for 96
    and 192, groups 7 and 12, the option paths): a commit that changes a kernel compiles
    them once more.
    A commit without the geometry table records every case as skipped.
    """

    params: ClassVar[list] = [GEOMETRIES]
    param_names: ClassVar[list] = ["geometry"]

    setup_cache = c.setup_cache_suite
