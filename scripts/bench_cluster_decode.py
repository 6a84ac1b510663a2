"""Cluster-combined CUDA decode against the Triton split-KV decode and the bytes-only bound (GPU)

    python scripts/bench_cluster_decode.py [--json PATH] [--rounds N] [--splits 4,8,16]
                                           [--cluster-lib LABEL=PATH ...]
                                           [--case BATCH,CONTEXT[,DTYPE[,STORAGE]] ...]

Experiment 18 (docs/perf-notes.md). At batch 1 x 4k the Triton split kernel plus its reduce
take ~14.6 us against 8.7 us for reading the pages alone. ``cuda/cluster_decode`` combines the
splits of a (sequence, kv head) through distributed shared memory in one launch. Per case and
round, alternating rows so drift hits all of them: every decode row checked against the fp64
reference first, then timed under the harness's cold-L2 bench():
  - triton/split_kv (shipped, auto split count);
  - cuda/cluster_decode at the auto split count and at each --splits value, and each
    --cluster-lib build (e.g. an older commit's) at the auto split count;
  - page_read (the case's pages read and nothing else) and the event floor.
--case replaces the built-in CASES (e.g. the shapes a dispatch rule was not measured at).
"""

from __future__ import annotations

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

from kvbench.fixtures.pool import KV_DTYPES, STORAGES, paged_pool
from kvbench.harness import bench, event_floor
from kvbench.harness.stream_read import page_read_fn
from kvbench.kernels import paged_decode as pd
from kvbench.kernels import paged_decode_cluster as pdc
from kvbench.kernels._device import sm_count
from kvbench.ops.paged_decode import check_page_read, check_paged_decode, make_decode_query

#: (label, batch, context, KV dtype, pool storage): fp8 runs on dim-major V pages, the layout
#: the cluster kernel reads fp8 from (and the Triton kernel's fastest fp8 storage, exp. 16).
CASES = (
    ("b1_c4k", 1, 4096, "fp16", "combined"),
    ("b1_c1k", 1, 1024, "fp16", "combined"),
    ("b8_c4k", 8, 4096, "fp16", "combined"),
    ("b64_c8k", 64, 8192, "fp16", "combined"),
    ("b64_c8k", 64, 8192, "fp8", "v_dim_major"),
    ("b1_c32k", 1, 32768, "fp8", "v_dim_major"),
    ("b32_c4k", 32, 4096, "fp8", "v_dim_major"),
)


def parse_case(text: str) -> tuple[str, int, int, str, str]:
    """'BATCH,CONTEXT[,DTYPE[,STORAGE]]' -> a CASES entry; ValueError naming what is accepted.
    fp8 defaults to dim-major V pages (the cluster kernel's fp8 layout), 16-bit to combined."""
    parts = text.split(",")
    try:
        if not 2 <= len(parts) <= 4:
            raise ValueError
        batch, context = int(parts[0]), int(parts[1])
    except ValueError:
        raise ValueError(f"--case wants BATCH,CONTEXT[,DTYPE[,STORAGE]], got {text!r}") from None
    dtype = parts[2] if len(parts) > 2 else "fp16"
    storage = parts[3] if len(parts) > 3 else ("v_dim_major" if dtype == "fp8" else "combined")
    if batch < 1 or context < 1 or dtype not in KV_DTYPES or storage not in STORAGES:
        raise ValueError(f"--case {text!r}: batch and context >= 1, dtype one of {KV_DTYPES}, "
                         f"storage one of {STORAGES}")
    return (f"b{batch}_c{context}", batch, context, dtype, storage)


def run_case(batch: int, ctx: int, dtype: str, storage: str, dev: torch.device,
             splits: list[int], libs: dict[str, str]) -> dict:
    torch.cuda.empty_cache()
    pool = paged_pool(batch, ctx, dtype=dtype, storage=storage, device=dev)
    q = make_decode_query(pool, 32)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    rows = {"triton/split_kv": pd.paged_decode_split_kv, "cluster auto": pdc.paged_decode_cluster}
    for s in splits:
        rows[f"cluster s{s}"] = partial(pdc.paged_decode_cluster, num_splits=s)
    for label, path in libs.items():
        rows[f"cluster {label}"] = called_under(partial(cluster_library, path),
                                                pdc.paged_decode_cluster)
    out: dict[str, float] = {}
    for name, fn in rows.items():
        out[f"{name} max_abs_diff"] = check_paged_decode(fn, pool, q)
    read = page_read_fn(pool.k_cache, pool.v_cache, pool.attended_page_ids(), sm_count(dev))
    check_page_read(read, pool)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    for name, fn in rows.items():
        out[name] = bench(partial(fn, *args, **kw)).median_us
    out["page_read"] = bench(read).median_us
    out["empty"] = event_floor(dev).median_us
    out["auto splits"] = pdc.auto_splits(dev, pool.k_cache.dtype, 32 // pool.kv_heads,
                                         batch * pool.kv_heads, ctx)
    pool.free()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, rounds=3)
    parser.add_argument("--splits", default="", help="forced split counts to add")
    add_cluster_lib_option(parser)
    parser.add_argument("--case", action="append", default=[],
                        metavar="BATCH,CONTEXT[,DTYPE[,STORAGE]]", help="replaces CASES")

    def check(a) -> None:
        parse_cluster_libs(parser, a.cluster_lib)
        try:
            a.cases = tuple(parse_case(c) for c in a.case) or CASES
        except ValueError as exc:
            parser.error(str(exc))

    started = start_experiment(parser, argv, check)
    if started is None:
        return 2
    args, meta, dev = started
    libs = parse_cluster_libs(parser, args.cluster_lib)
    meta["cluster_libs"] = libs
    splits = [int(s) for s in args.splits.split(",") if s]
    meta["max_active_clusters"] = {
        s: pdc.max_active_clusters(dev, torch.float16, 4, s) for s in range(1, 17)}
    print("max active clusters (fp16, group 4):", meta["max_active_clusters"], flush=True)
    results = run_rounds(
        args.rounds, args.cases, lambda c: f"{c[0]}:{c[3]}",
        lambda c: run_case(*c[1:], dev, splits, libs), args.json, meta)
    cols = ["triton/split_kv", "cluster auto", *[f"cluster s{s}" for s in splits],
            *[f"cluster {k}" for k in libs], "page_read", "empty"]
    print("\n" + mean_table(results, cols, 16, lambda rounds: f"   {rounds[0]['auto splits']}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
