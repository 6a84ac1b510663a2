"""Does the cold-L2 flush's own traffic change what the timed kernel costs? (GPU)

    python scripts/ablate_flush.py [--json PATH] [--rounds N]
    bash scripts/gpu_session.sh ablate-flush        # on a bare device machine (installs first)

Until 2026-11-30 the CUDA flush summed the int32 flush buffer into an int64 scalar, and torch
casts the whole buffer to int64 first: every flush read 120 MiB, wrote a 240 MiB temporary and
read it back. Hypothesis: the timed kernel after it sees the same L2 state as after a pure read
(an int32 sum), so nothing changes but the flush's own cost (docs/harness.md, flush ablation:
two runs confirmed it, and the int32 sum became the default). This script measures every flush mode of harness.flush (CUDA_FLUSH_MODES)
on the cases where a difference would show: the small decode (batch 1 x 4k, 16 MiB, a quarter
of L2), its bytes-only bound (page_read), the big decode (64 x 8k, 2 GiB), the decode-size KV
write (64 tokens: its stores land in L2), an 8 MiB copy and the trivial kernel (the event
floor). Each case is checked before it is timed; rounds rotate the order of the modes so a
drift in clocks does not line up with one mode. The same cases warm (no flush) are printed as
the optimistic bound, and each mode's flush is timed by itself (warm: its cost per sample).
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from functools import partial

import torch
from gpu_experiment import experiment_parser, start_experiment

from kvbench.core.jsonfile import write_json_atomic
from kvbench.fixtures.pool import paged_pool
from kvbench.harness import bench, timers
from kvbench.harness.flush import CUDA_FLUSH_MODES, flusher
from kvbench.harness.stream_read import page_read_fn
from kvbench.harness.validate_gpu import SMALL_COPY_BYTES, copy_buffers
from kvbench.kernels import paged_decode as pd
from kvbench.kernels._device import sm_count
from kvbench.kernels.kv_write import kv_write_triton
from kvbench.ops.kv_write import check_kv_write, make_write_inputs
from kvbench.ops.paged_decode import check_page_read, check_paged_decode, make_decode_query


def decode_case(batch: int, ctx: int, dev: torch.device) -> tuple[Callable[[], object], object]:
    """The shipped split-KV decode on a fragmented >= 8x L2 fp16 pool, verified first."""
    pool = paged_pool(batch, ctx, dtype=torch.float16, device=dev)
    q = make_decode_query(pool, 32)
    check_paged_decode(pd.paged_decode_split_kv, pool, q)
    return partial(pd.paged_decode_split_kv, q, pool.k_cache, pool.v_cache, pool.block_table,
                   pool.seq_lens), pool


def build_cases(dev: torch.device) -> tuple[dict[str, Callable[[], object]], list[object]]:
    """Every case as a checked, idempotent callable; the second value keeps the pools alive."""
    keep: list[object] = []
    cases: dict[str, Callable[[], object]] = {}
    one = torch.zeros(1, dtype=torch.int32, device=dev)
    cases["empty (zero 1 int32)"] = one.zero_
    src, dst = copy_buffers(SMALL_COPY_BYTES, dev)
    cases["copy 8 MiB"] = partial(dst.copy_, src)
    cases["decode b1x4k"], small = decode_case(1, 4096, dev)
    read = page_read_fn(small.k_cache, small.v_cache, small.attended_page_ids(), sm_count(dev))
    check_page_read(read, small)
    cases["page_read b1x4k"] = read
    cases["decode b64x8k"], big = decode_case(64, 8192, dev)
    wpool = paged_pool(1, 4096, dtype=torch.float16, device=dev)
    k, v, slots = make_write_inputs(wpool, 64)
    check_kv_write(kv_write_triton, wpool, k, v, slots)  # it passes the pool's arguments
    cases["kv_write 64 tok"] = partial(kv_write_triton, k, v, wpool.k_cache, wpool.v_cache, slots)
    keep += [small, big, wpool, src, dst, one]
    return cases, keep


def main(argv: list[str] | None = None) -> int:
    started = start_experiment(experiment_parser(__doc__, rounds=3), argv)
    if started is None:
        return 2
    args, meta, dev = started
    cases, _keep = build_cases(dev)
    results: dict[str, dict[str, list[float]]] = {m: {c: [] for c in cases} for m in CUDA_FLUSH_MODES}
    warm = {c: bench(fn, l2="warm", device=dev).median_us for c, fn in cases.items()}
    flush_cost = {m: bench(flusher(dev, mode=m), l2="warm", device=dev).median_us
                  for m in CUDA_FLUSH_MODES}
    saved = timers.FLUSH_MODE
    try:
        for rnd in range(args.rounds):
            k = rnd % len(CUDA_FLUSH_MODES)
            for mode in CUDA_FLUSH_MODES[k:] + CUDA_FLUSH_MODES[:k]:
                timers.FLUSH_MODE = mode
                for case, fn in cases.items():
                    results[mode][case].append(bench(fn, device=dev).median_us)
            if args.json:
                write_json_atomic(args.json, {"metadata": meta, "rounds_done": rnd + 1, "cold_us": results,
                                              "warm_us": warm, "flush_us": flush_cost}, indent=1)
            print(f"round {rnd} done", flush=True)
    finally:
        timers.FLUSH_MODE = saved
    modes = CUDA_FLUSH_MODES
    print(f"\n{'case (median us; mean of rounds, min-max)':28s}"
          + "".join(f"{m:>19s}" for m in modes) + f"{'warm':>9s}")
    for case in cases:
        cells = []
        for m in modes:
            v = results[m][case]
            cells.append(f"{statistics.mean(v):7.2f} ({min(v):.1f}-{max(v):.1f})".rjust(19))
        print(f"{case:28s}" + "".join(cells) + f"{warm[case]:9.2f}")
    print(f"{'flush itself (warm)':28s}" + "".join(f"{flush_cost[m]:19.2f}" for m in modes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
