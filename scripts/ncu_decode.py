"""Decode-step kernels (paged decode, KV write) under Nsight Compute: one profiled call per case.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section WarpStateStats --section Occupancy --csv --page details \
        python scripts/ncu_decode.py [--case b64_c8k:fp8 ...] [--storage v_dim_major] > ncu.csv

    # the instruction mix by SASS opcode (docs/perf-notes.md, experiment 10)
    ncu --profile-from-start off --clock-control none --metrics sass__inst_executed_per_opcode \
        --print-metric-instances details --csv --page raw \
        python scripts/ncu_decode.py --case b64_c8k:fp16 --case b64_c8k:fp8 > opcodes.csv

    # a kernel's own device time below the event timer's floor (kv_write at decode size)
    ncu --profile-from-start off --clock-control none --metrics gpu__time_duration.sum --csv \
        python scripts/ncu_decode.py --case write_decode_64:fp16 --case write_decode_64:fp8

Why: bench() gives a case's whole time (kernels plus the gaps between them, against a
~4.7 µs event floor); ncu gives each kernel's own duration and where its warps stall, which
is what tells "launch-bound" from "latency-bound" from "issue-bound" (docs/perf-notes.md).
Each case is compiled and run once unprofiled, then one call runs between
cudaProfilerStart/Stop. ncu's default cache control flushes caches before each profiled
kernel: cold L2, as bench() measures.
"""

from __future__ import annotations

import argparse
import sys

import torch

from kvbench.fixtures.pool import STORAGES, paged_pool
from kvbench.kernels import paged_decode as pd
from kvbench.ops.kv_write import kv_write, make_write_inputs
from kvbench.ops.paged_decode import make_decode_query

#: kv_write cases: (label, new tokens); the table's decode-size rows (kvbench.measure.table).
WRITE_CASES = (("write_decode_64", 64), ("write_decode_1", 1))
#: KV dtypes by the names paged_pool accepts.
_DTYPES = ("fp16", "bf16", "fp8")
#: (label, batch, context, kv dtype)
CASES = (
    ("b1_c4k", 1, 4096, "fp16"),
    ("b1_c32k", 1, 32768, "fp16"),
    ("b64_c8k", 64, 8192, "fp16"),
    ("b64_c8k", 64, 8192, "fp8"),
)


def profile_once(label: str, call) -> None:
    """Run ``call`` once unprofiled (compile, allocate), then once inside the profiled range."""
    call()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push(label)
    torch.cuda.profiler.start()
    call()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
    torch.cuda.nvtx.range_pop()
    print(f"profiled {label}", file=sys.stderr)


DECODE_ROWS = ("triton/split_kv", "cuda/cluster_decode")


def _decode_fn(row: str):
    """The decode row's function (the CUDA one imported only when asked: it builds with nvcc)."""
    if row == "cuda/cluster_decode":
        from kvbench.kernels.paged_decode_cluster import paged_decode_cluster

        return paged_decode_cluster
    return pd.paged_decode_split_kv


def fp8_config(text: str) -> dict[str, int]:
    """'BLOCK_N,warps,stages[,maxnreg]' -> a paged_decode CONFIG entry."""
    parts = [int(x) for x in text.split(",")]
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(f"want BLOCK_N,warps,stages[,maxnreg], got {text!r}")
    return dict(zip(("BLOCK_N", "num_warps", "num_stages", "maxnreg"), parts))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=None, metavar="LABEL:DTYPE",
                        help="profile only these cases (e.g. b64_c8k:fp8); default: all")
    parser.add_argument("--fp8-dequant", choices=pd._FP8_DEQUANT_MODES, default=None,
                        help="paged_decode FP8_DEQUANT for the fp8 decode cases")
    parser.add_argument("--fp8-config", type=fp8_config, default=None,
                        metavar="BLOCK_N,WARPS,STAGES[,MAXNREG]",
                        help="launch config of the fp8 decode kernels (single pass and split)")
    parser.add_argument("--storage", choices=STORAGES, default="combined",
                        help="the decode cases' pool storage (v_dim_major: experiment 16)")
    parser.add_argument("--v-page-rows", action="store_true",
                        help="paged_decode CONFIG 'v_page_rows' on (experiment 19)")
    parser.add_argument("--row", choices=DECODE_ROWS, default="triton/split_kv",
                        help="the decode row profiled (cuda/cluster_decode: experiment 18)")
    args_ns = parser.parse_args(argv)
    known = {f"{label}:{dtype}" for label, _, _, dtype in CASES}
    known |= {f"{label}:{dtype}" for label, _ in WRITE_CASES for dtype in _DTYPES}
    for want in args_ns.case or ():
        if want not in known:
            parser.error(f"--case {want!r}: accepted cases are {', '.join(sorted(known))}")
    if args_ns.fp8_dequant:
        pd.FP8_DEQUANT = args_ns.fp8_dequant
    if args_ns.fp8_config:
        pd.CONFIG["single_pass_fp8"] = pd.CONFIG["split_kv_fp8"] = args_ns.fp8_config
    if args_ns.v_page_rows:
        for key in ("single_pass", "single_pass_fp8", "split_kv", "split_kv_fp8"):
            pd.CONFIG[key] = {**pd.CONFIG[key], "v_page_rows": True}
    wanted = set(args_ns.case or known)
    dev = torch.device("cuda")
    for label, batch, ctx, dtype in CASES:
        if f"{label}:{dtype}" not in wanted:
            continue
        pool = paged_pool(batch, ctx, dtype=dtype, storage=args_ns.storage, device=dev)
        q = make_decode_query(pool, 32)
        args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
        kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
        decode = _decode_fn(args_ns.row)
        profile_once(f"{label}_{dtype}", lambda: decode(*args, **kwargs))  # noqa: B023
        del q, args
        pool.free()
    for label, n in WRITE_CASES:
        for dtype in _DTYPES:
            if f"{label}:{dtype}" not in wanted:
                continue
            pool = paged_pool(1, 4096, dtype=dtype, device=dev)
            k, v, slots = make_write_inputs(pool, n)
            args = (k, v, pool.k_cache, pool.v_cache, slots)
            kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
            profile_once(f"{label}_{dtype}", lambda: kv_write(*args, **kwargs))  # noqa: B023
            pool.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
