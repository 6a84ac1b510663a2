"""Do fp8 decodes wait on the L2's tag lookups? Whole-line V copies against half-line ones (GPU)

    python scripts/bench_fp8_v_lines.py [--json PATH] [--rounds N] [--cluster-lib LABEL=PATH]

Experiment 19 (docs/perf-notes.md). Nsight Compute put both fp8 decodes on dim-major V pages
at 80-84% of the L2's tag-lookup rate with DRAM at 53-66%: their V tiles are copied as eight
64-byte pieces per warp-wide copy (8 pages x 4 d rows), two lookups per 128-byte line, where
a dim-major page of one head is 2 KiB contiguous. Rows per case, alternating, each checked
against the fp64 reference at full size first, then timed under the harness's cold-L2 bench():
  - triton/split_kv with CONFIG "v_page_rows" off (page-sized pieces) and on (each page
    loaded as one contiguous row, reordered to [tokens, d] in registers; shipped since
    experiment 19; the first run, at 525bb1a, named these rows "triton/split_kv" and
    "triton v_page_rows");
  - cuda/cluster_decode as built from this tree, plus any --cluster-lib build (e.g. the
    previous commit's, for the copy mapping before and after in one call).
"""

from __future__ import annotations

import contextlib
import sys
from functools import partial

import torch
from gpu_experiment import (
    add_cluster_lib_option,
    called_under,
    cluster_library,
    experiment_parser,
    mean_table,
    parse_cluster_libs,
    run_rounds,
    start_experiment,
)

from kvbench.fixtures.pool import paged_pool
from kvbench.harness import bench
from kvbench.kernels import paged_decode as pd
from kvbench.kernels import paged_decode_cluster as pdc
from kvbench.ops.paged_decode import check_paged_decode, make_decode_query

#: (label, batch, context, KV dtype, pool storage). fp16 combined is the fp8 target's
#: denominator; fp16 dim-major shows what the Triton load change does to 16-bit pages.
CASES = (
    ("b64_c8k", 64, 8192, "fp8", "v_dim_major"),
    ("b32_c4k", 32, 4096, "fp8", "v_dim_major"),
    ("b1_c32k", 1, 32768, "fp8", "v_dim_major"),
    ("b64_c8k", 64, 8192, "fp16", "v_dim_major"),
    ("b64_c8k", 64, 8192, "fp16", "combined"),
)


@contextlib.contextmanager
def triton_config(**extra):
    """Every decode CONFIG entry with ``extra`` merged in, restored on exit."""
    saved = {k: dict(v) for k, v in pd.CONFIG.items()}
    for key in pd.CONFIG:
        if key != "reduce":
            pd.CONFIG[key] = {**pd.CONFIG[key], **extra}
    try:
        yield
    finally:
        pd.CONFIG.update(saved)


def run_case(batch: int, ctx: int, dtype: str, storage: str, dev: torch.device,
             libs: dict[str, str]) -> dict:
    torch.cuda.empty_cache()
    pool = paged_pool(batch, ctx, dtype=dtype, storage=storage, device=dev)
    q = make_decode_query(pool, 32)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    rows = {
        f"triton v_page_rows {name}": called_under(
            partial(triton_config, v_page_rows=on), pd.paged_decode_split_kv)
        for name, on in (("off", False), ("on", True))
    }
    if (dtype == "fp8") == (storage == "v_dim_major"):  # the layouts the CUDA kernel reads
        rows["cluster"] = pdc.paged_decode_cluster
        for label, path in libs.items():
            rows[f"cluster {label}"] = called_under(
                partial(cluster_library, path), pdc.paged_decode_cluster)
    out: dict[str, float] = {}
    for name, fn in rows.items():
        out[f"{name} max_abs_diff"] = check_paged_decode(fn, pool, q)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    for name, fn in rows.items():
        out[name] = bench(partial(fn, *args, **kw)).median_us
    pool.free()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, rounds=2)
    add_cluster_lib_option(parser)
    started = start_experiment(parser, argv, lambda a: parse_cluster_libs(parser, a.cluster_lib))
    if started is None:
        return 2
    args, meta, dev = started
    libs = parse_cluster_libs(parser, args.cluster_lib)
    meta["cluster_libs"] = libs
    results = run_rounds(
        args.rounds, CASES, lambda c: f"{c[0]}:{c[3]}:{c[4]}",
        lambda c: run_case(*c[1:], dev, libs), args.json, meta)
    cols = ["triton v_page_rows off", "triton v_page_rows on", "cluster",
            *[f"cluster {k}" for k in libs]]
    print("\n" + mean_table(results, cols, 24))
    return 0


if __name__ == "__main__":
    sys.exit(main())
