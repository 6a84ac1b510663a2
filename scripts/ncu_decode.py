"""Paged decode kernels under Nsight Compute: one profiled call per case, run by ncu.

    ncu --profile-from-start off --clock-control none --section SpeedOfLight \
        --section WarpStateStats --section Occupancy --csv --page details \
        python scripts/ncu_decode.py [--case b64_c8k:fp8 ...] > ncu.csv

    # the instruction mix by SASS opcode (docs/perf-notes.md, experiment 10)
    ncu --profile-from-start off --clock-control none --metrics sass__inst_executed_per_opcode \
        --print-metric-instances details --csv --page raw \
        python scripts/ncu_decode.py --case b64_c8k:fp16 --case b64_c8k:fp8 > opcodes.csv

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

from kvbench.checks import make_decode_query
from kvbench.kernels import paged_decode as pd
from kvbench.pool import paged_pool

#: (label, batch, context, kv dtype)
CASES = (
    ("b1_c4k", 1, 4096, "fp16"),
    ("b1_c32k", 1, 32768, "fp16"),
    ("b64_c8k", 64, 8192, "fp16"),
    ("b64_c8k", 64, 8192, "fp8"),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", default=None, metavar="LABEL:DTYPE",
                        help="profile only these cases (e.g. b64_c8k:fp8); default: all")
    args_ns = parser.parse_args(argv)
    known = {f"{label}:{dtype}" for label, _, _, dtype in CASES}
    for want in args_ns.case or ():
        if want not in known:
            parser.error(f"--case {want!r}: accepted cases are {', '.join(sorted(known))}")
    dev = torch.device("cuda")
    for label, batch, ctx, dtype in CASES:
        if args_ns.case and f"{label}:{dtype}" not in args_ns.case:
            continue
        pool = paged_pool(batch, ctx, dtype={"fp16": torch.float16, "fp8": "fp8"}[dtype],
                          device=dev)
        q = make_decode_query(pool, 32)
        args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
        kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
        pd.paged_decode_split_kv(*args, **kwargs)  # compile, allocate
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(f"{label}_{dtype}")
        torch.cuda.profiler.start()
        pd.paged_decode_split_kv(*args, **kwargs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        torch.cuda.nvtx.range_pop()
        print(f"profiled {label} {dtype}", file=sys.stderr)
        del q, args
        pool.free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
