"""What does reading a decode case's bytes cost, at that case's size? (GPU)

    python scripts/sweep_page_read.py [--json PATH] [--case LABEL:DTYPE ...] [--rounds N]
    bash scripts/gpu_session.sh sweep-page-read     # on a bare device machine (installs first)

For each decode case of sweep_paged_decode.py (Llama-3-8B geometry, fragmented >= 8x L2 pool,
cold L2, the harness's bench()), per round and in this order:
  - decode: the shipped paged decode (auto split count), verified against the fp64 reference;
  - page_read: harness/stream_read.page_read_fn over the case's attended pages at every point
    of GRID (chunk x warps x programs per SM), each verified by check_page_read;
  - contiguous: stream_read_fn over a contiguous buffer of the same bytes (no page index, no
    fragmentation), at programs per SM 4..32;
  - empty: harness event_floor(), the event timer's floor for a trivial kernel.
Prints per case the decode, the shipped page_read point, the best page_read point and the
best contiguous read, so the bytes-only bound of each case is a measured number
(docs/perf-notes.md, experiment 15), and the shipped PAGE_READ_CONFIG a measured choice.
"""

from __future__ import annotations

import itertools
import statistics
import sys
from functools import partial

import torch
from gpu_experiment import experiment_parser, start_experiment
from sweep_paged_decode import CASES

from kvbench.core.jsonfile import write_json_atomic
from kvbench.fixtures.pool import paged_pool
from kvbench.harness import bench, event_floor
from kvbench.harness.stream_read import CONFIG as STREAM_READ_CONFIG
from kvbench.harness.stream_read import PAGE_READ_CONFIG, page_read_fn, stream_read_fn
from kvbench.kernels import paged_decode as pd
from kvbench.kernels._device import sm_count
from kvbench.ops.paged_decode import (
    check_page_read,
    check_paged_decode,
    make_decode_query,
    page_read_work,
    page_read_xor,
)

#: page_read_fn points: CHUNK (int32 words per item) x warps x programs per SM. One stage:
#: the loop's sm_90 code does not change with num_stages (stream_read.PAGE_READ_CONFIG).
GRID = [
    {"CHUNK": c, "num_warps": w, "num_stages": 1, "programs_per_sm": p}
    for c, w, p in itertools.product((1024, 2048, 4096), (4, 8), (4, 8, 16, 32))
]
CONTIGUOUS_PROGRAMS_PER_SM = (4, 8, 16, 32)


def sweep_case(label: str, batch: int, ctx: int, dtype: str, sms: int) -> dict:
    """One case, one round: every point verified, then timed; microseconds."""
    dev = torch.device("cuda")
    torch.cuda.empty_cache()
    pool = paged_pool(batch, ctx, dtype=dtype, device=dev)
    q = make_decode_query(pool, 32)
    check_paged_decode(pd.paged_decode_split_kv, pool, q)
    decode = partial(pd.paged_decode_split_kv, q, pool.k_cache, pool.v_cache, pool.block_table,
                     pool.seq_lens, k_scale=pool.k_scale, v_scale=pool.v_scale)
    out = {"decode": bench(decode).median_us}
    ids = pool.attended_page_ids()
    want = page_read_xor(pool)
    out["page_read"] = []
    for cfg in GRID:
        read = page_read_fn(pool.k_cache, pool.v_cache, ids, sms, cfg)
        check_page_read(read, pool, want)
        out["page_read"].append({"cfg": cfg, "us": bench(read).median_us})
    shipped = page_read_fn(pool.k_cache, pool.v_cache, ids, sms)
    check_page_read(shipped, pool, want)
    out["shipped"] = bench(shipped).median_us
    nbytes = int(page_read_work(pool.seq_lens_list, kv_heads=pool.kv_heads, head_dim=pool.head_dim,
                                kv_dtype=dtype, page_size=pool.page_size).moved)
    flat = torch.empty(nbytes // 4 * 4, dtype=torch.uint8, device=dev).random_(0, 256)
    out["contiguous"] = []
    for pps in CONTIGUOUS_PROGRAMS_PER_SM:
        cfg = {**STREAM_READ_CONFIG, "programs_per_sm": pps}
        out["contiguous"].append({"cfg": cfg, "us": bench(stream_read_fn(flat, sms, cfg)).median_us})
    out["empty"] = event_floor(dev).median_us
    out["bytes"] = nbytes
    pool.free()  # this case's tensors die on return; the next case starts from empty_cache
    return out


def summary_line(key: str, rounds: list[dict]) -> str:
    """One case's line: means over rounds of decode, the shipped and the best page_read point
    (best by its mean), the best contiguous read and the trivial kernel."""

    def mean(values) -> float:
        return statistics.mean(values)

    best = min(range(len(GRID)), key=lambda i: mean(r["page_read"][i]["us"] for r in rounds))
    return (
        f"{key:12s} {rounds[0]['bytes'] / 1e6:6.1f} {mean(r['decode'] for r in rounds):8.2f} "
        f"{mean(r['shipped'] for r in rounds):8.2f} "
        f"{mean(r['page_read'][best]['us'] for r in rounds):8.2f} "
        f"{mean(min(c['us'] for c in r['contiguous']) for r in rounds):8.2f} "
        f"{mean(r['empty'] for r in rounds):6.2f}  {GRID[best]}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, rounds=2)
    parser.add_argument("--case", action="append", default=None, metavar="LABEL:DTYPE")
    known = {f"{c[0]}:{c[3]}": c for c in CASES}

    def check_cases(args) -> None:
        for want in args.case or ():
            if want not in known:
                parser.error(f"--case {want!r}: accepted cases are {', '.join(sorted(known))}")

    started = start_experiment(parser, argv, check_cases)
    if started is None:
        return 2
    args, meta, dev = started
    cases = [known[c] for c in args.case] if args.case else list(CASES)
    sms = sm_count(dev)
    results: dict[str, list[dict]] = {}
    for rnd in range(args.rounds):
        for label, batch, ctx, dtype in cases:
            key = f"{label}:{dtype}"
            results.setdefault(key, []).append(sweep_case(label, batch, ctx, dtype, sms))
            print(f"round {rnd} {key} done", flush=True)
            if args.json:  # each case as it finishes, atomically: an interrupt keeps the rest
                write_json_atomic(args.json, {"metadata": meta, "grid": GRID,
                                              "shipped": PAGE_READ_CONFIG, "results": results},
                                  indent=1)
    print(f"\n{'case':12s} {'MB':>6s} {'decode':>8s} {'shipped':>8s} {'best pr':>8s} "
          f"{'contig':>8s} {'empty':>6s}  best page_read point (us: means over rounds)")
    for key, rounds in results.items():
        print(summary_line(key, rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
