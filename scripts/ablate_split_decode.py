"""Where does a split-KV decode's time go beyond reading its bytes? (GPU)

    python scripts/ablate_split_decode.py [--json PATH] [--rounds N]

Experiment 15 (docs/perf-notes.md) measured the bytes-only bound of each decode case
(bound:page_read). At batch 1 x 4k the decode takes 15.2 us against an 8.6 us bound. This
script splits the decode into its two kernels under the same timer, on the split cases of
sweep_paged_decode.py (where a reduce runs), per round:
  - decode: the shipped decode (auto split count, PDL on sm_90), verified against fp64;
  - split only: the same call with the reduce launch skipped (its output is not a result:
    the partials are never combined; timed for attribution only);
  - reduce only: the reduce kernel alone on the partials of a verified decode call;
  - decode, PDL off: the reduce launched after the split kernel without programmatic
    dependent launch;
  - page_read: the bytes-only bound (harness/stream_read.page_read_fn, checked first);
  - empty: harness event_floor().
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Callable, Iterator
from functools import partial

import torch
from gpu_experiment import experiment_parser, start_experiment
from sweep_paged_decode import CASES

from kvbench.core.jsonfile import write_json_atomic
from kvbench.fixtures.pool import paged_pool
from kvbench.harness import bench, event_floor
from kvbench.harness.stream_read import page_read_fn
from kvbench.kernels import paged_decode as pd
from kvbench.kernels._device import sm_count
from kvbench.ops.paged_decode import check_page_read, check_paged_decode, make_decode_query

ROWS = ("decode", "split only", "reduce only", "decode PDL off", "page_read", "empty")


class _ReduceRecorder:
    """Stands in for pd._reduce_kernel: records the launch (grid, args, kwargs) and, unless
    `skip`, forwards it to the real kernel."""

    def __init__(self, real: object, *, skip: bool) -> None:
        self.real, self.skip, self.launch = real, skip, None

    def __getitem__(self, grid: tuple[int, ...]) -> Callable[..., None]:
        def launch(*args: object, **kwargs: object) -> None:
            self.launch = (grid, args, kwargs)
            if not self.skip:
                self.real[grid](*args, **kwargs)

        return launch


@contextlib.contextmanager
def _reduce_replaced(recorder: _ReduceRecorder) -> Iterator[None]:
    saved = pd._reduce_kernel
    pd._reduce_kernel = recorder
    try:
        yield
    finally:
        pd._reduce_kernel = saved


def _pdl_off(fn: Callable[..., object]) -> Callable[..., object]:
    """`fn` (a decode entry point) called with the reduce launched without PDL."""
    def call(*args: object, **kwargs: object) -> object:
        saved, pd.REDUCE_PDL = pd.REDUCE_PDL, False
        try:
            return fn(*args, **kwargs)
        finally:
            pd.REDUCE_PDL = saved

    return call


def ablate_case(batch: int, ctx: int, dtype: str, dev: torch.device) -> dict[str, float]:
    """One case, one round: every row checked where it has a result, then timed (us)."""
    torch.cuda.empty_cache()
    pool = paged_pool(batch, ctx, dtype=dtype, device=dev)
    q = make_decode_query(pool, 32)
    decode_fn = pd.paged_decode_split_kv
    check_paged_decode(decode_fn, pool, q)
    check_paged_decode(_pdl_off(decode_fn), pool, q)
    real = pd._reduce_kernel
    recorder = _ReduceRecorder(real, skip=False)
    with _reduce_replaced(recorder):
        check_paged_decode(decode_fn, pool, q)
    if recorder.launch is None:
        raise RuntimeError(f"b{batch}x{ctx} {dtype} ran without a reduce: not a split case")
    grid, r_args, r_kwargs = recorder.launch
    skipper = _ReduceRecorder(real, skip=True)
    decode = partial(decode_fn, q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens,
                     k_scale=pool.k_scale, v_scale=pool.v_scale)

    def split_only() -> object:
        with _reduce_replaced(skipper):
            return decode()

    read = page_read_fn(pool.k_cache, pool.v_cache, pool.attended_page_ids(), sm_count(dev))
    check_page_read(read, pool)
    out = {
        "decode": bench(decode).median_us,
        "split only": bench(split_only).median_us,
        "reduce only": bench(lambda: real[grid](*r_args, **r_kwargs)).median_us,
        "decode PDL off": bench(_pdl_off(decode)).median_us,
        "page_read": bench(read).median_us,
        "empty": event_floor(dev).median_us,
    }
    pool.free()
    return out


def main(argv: list[str] | None = None) -> int:
    started = start_experiment(experiment_parser(__doc__, rounds=3), argv)
    if started is None:
        return 2
    args, meta, dev = started
    sms = sm_count(dev)
    cases = [c for c in CASES
             if pd.choose_num_splits(c[1], 8, c[2], sms, 16) > 1]  # Llama-3-8B: 8 kv heads
    results: dict[str, list[dict[str, float]]] = {}
    for rnd in range(args.rounds):
        for label, batch, ctx, dtype in cases:
            results.setdefault(f"{label}:{dtype}", []).append(ablate_case(batch, ctx, dtype, dev))
            if args.json:
                write_json_atomic(args.json, {"metadata": meta, "results": results}, indent=1)
        print(f"round {rnd} done", flush=True)
    print(f"\n{'case (mean us over rounds)':26s}" + "".join(f"{r:>15s}" for r in ROWS))
    for key, rounds in results.items():
        print(f"{key:26s}" + "".join(
            f"{statistics.mean(r[row] for r in rounds):15.2f}" for row in ROWS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
