"""`python -m kvbench.measure.alloc_table`: the allocator and dispatch-overhead table of
docs/allocator.md.

Every number comes from the harness (bench_host, host_floor, metadata); this module only
chooses the cases. Columns per row:

  single        bench_host of one alloc(n) per sample, reset by prepare_state (outside the
                window): the number the asv suite records
  single-floor  single minus the host floor (bench_host of a no-op: perf_counter plus, on
                CUDA, the trailing synchronize that is part of every sample)
  reset floor   bench_host of a no-op after the same reset: what the timer reads right
                after that reset with no allocator call in the window
  single-rfloor single minus the reset floor, the two measured back to back
Every cell is measured in --rounds interleaved rounds (all cells, then all cells again) and
each column is the median over the rounds, with the rounds listed: on a shared VM host a
slow phase of a few seconds can move one cell of one round 2-3x, which a
single pass reports as that cell's number (docs/allocator.md).
  batched       bench_host of BATCH back-to-back alloc(n) per sample, divided by BATCH

Why both: the single call is the first one after a reset that, in run_search and
fragmented, frees half the pool: that walks MBs of host memory and evicts the CPU caches
the next call needs (torch's slicing path, the allocator's arrays), so a call of a few µs
reads several times that. Batched amortizes that one cold call over BATCH warm ones: the
cost per call in a decode step that allocates for a whole batch of sequences.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Sequence
from functools import partial

import torch

from kvbench.api import KVCacheManager, paged_decode
from kvbench.core.device import resolve_device
from kvbench.core.jsonfile import output_path, write_json_atomic
from kvbench.ops.kv_alloc import STATES, alloc_inputs, prepare_state

IMPLS = ("torch/legacy", "host/freelist")

SIZES = (1, 64)
BATCH = 64
ROUNDS = 3
DISPATCH_LOOP = 2000


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def measure_alloc(num_rows: int, device: torch.device | str, rounds: int = ROUNDS) -> list[dict]:
    """bench_host medians (µs) per impl x state x n over interleaved rounds, each cell's row
    selected, asserted and gated by the measuring pipeline once, before any timing.

    single: one alloc(n) as the pipeline times it (kvbench.ops.kv_alloc.alloc_inputs);
    reset_floor: the host timer's floor with the same reset, so single - reset_floor is the
    call alone; batched: BATCH allocs in one sample, per alloc (the per-call overhead
    amortised)."""
    from kvbench.harness import bench_host, host_floor
    from kvbench.measure import pipeline

    cells = []
    for impl in IMPLS:
        for n in SIZES:
            for state in STATES:
                inputs = alloc_inputs(num_rows, n, device, states=(state,))
                cls = pipeline.select(inputs, impl).target
                pipeline.check(inputs, cls)  # correctness before timing
                cells.append((impl, n, state, inputs, cls))
    per_round: dict[tuple, dict[str, list[float]]] = {
        cell[:3]: {"single_us": [], "reset_floor_us": [], "batched_us": [], "samples": []}
        for cell in cells
    }
    for _ in range(rounds):
        for impl, n, state, inputs, cls in cells:
            m = KVCacheManager(num_rows, device=device, impl=impl)
            reset = partial(prepare_state, m, state, n=n)
            reset_floor = host_floor(device, reset=reset)
            single = pipeline.time_call(inputs, cls, row=impl)

            def batch(m: KVCacheManager = m, n: int = n) -> None:
                for _ in range(BATCH):
                    m.alloc(n)

            batched = bench_host(
                batch, reset=partial(prepare_state, m, state, n=n * BATCH), device=device
            )
            got = per_round[(impl, n, state)]
            got["single_us"].append(single.median_us)
            got["reset_floor_us"].append(reset_floor.median_us)
            got["batched_us"].append(batched.median_us / BATCH)
            got["samples"].append(len(single.samples_us))
    rows = []
    for (impl, n, state), got in per_round.items():
        net = [a - b for a, b in zip(got["single_us"], got["reset_floor_us"], strict=True)]
        rows.append(
            {
                "impl": impl,
                "state": state,
                "n": n,
                "single_us": _median(got["single_us"]),
                "reset_floor_us": _median(got["reset_floor_us"]),
                "single_minus_reset_floor_us": _median(net),
                "batched_us": _median(got["batched_us"]),
                "samples": min(got["samples"]),
                "rounds": {**got, "single_minus_reset_floor_us": net},
            }
        )
    return rows


def measure_dispatch_overhead(device: torch.device | str) -> dict:
    """Per-call cost of kvbench.paged_decode with a cached decision over a no-op row."""
    from kvbench.dispatch import KernelSpec, LayoutRequirement, Registry, using_registry
    from kvbench.harness import bench_host

    def noop_row(*args, **kwargs):
        return None

    spec = KernelSpec(
        name="noop/row",
        op="paged_decode",
        dtypes=("fp16",),
        target=noop_row,
        golden_check=lambda fn, dtype, dev: 0.0,
        layout=LayoutRequirement(required=("kv:paged",)),
    )
    buf = torch.zeros(64, 2, 16, 8, 128, dtype=torch.float16, device=device)
    k, v = buf[:, 0], buf[:, 1]
    q = torch.zeros(8, 32, 128, dtype=torch.float16, device=device)
    bt = torch.zeros(8, 8, dtype=torch.int32, device=device)
    sl = torch.ones(8, dtype=torch.int32, device=device)
    with using_registry(Registry([spec])):
        paged_decode(q, k, v, bt, sl)

        def via_ops():
            for _ in range(DISPATCH_LOOP):
                paged_decode(q, k, v, bt, sl)

        def direct():
            for _ in range(DISPATCH_LOOP):
                noop_row(q, k, v, bt, sl, sm_scale=None, k_scale=None, v_scale=None)

        r_ops = bench_host(via_ops, device=device)
        r_direct = bench_host(direct, device=device)
    t_ops, t_direct = r_ops.median_us / DISPATCH_LOOP, r_direct.median_us / DISPATCH_LOOP
    # Fastest sample too: on a shared machine the median also measures the neighbours.
    fastest = (min(r_ops.samples_us) - min(r_direct.samples_us)) / DISPATCH_LOOP
    return {
        "ops_us": t_ops,
        "direct_us": t_direct,
        "overhead_us": t_ops - t_direct,
        "overhead_fastest_us": fastest,
    }


def _over_rounds(results: list[dict]) -> dict:
    """Median of each field over rounds, with the rounds kept under "rounds"."""
    keys = results[0].keys()
    out: dict = {k: _median([r[k] for r in results]) for k in keys}
    out["rounds"] = {k: [r[k] for r in results] for k in keys}
    return out


def render(
    meta: dict, floor_us: float, rows: list[dict], dispatch: dict, num_rows: int, rounds: int
) -> str:
    from kvbench.harness import format_metadata

    out = [format_metadata(meta), ""]
    out.append(
        f"kv_alloc, num_rows={num_rows}, bench_host medians in µs, median over {rounds} "
        f"interleaved rounds (host floor {floor_us:.2f} µs = bench_host of a no-op)"
    )
    out.append("")
    out.append(
        "| impl | state | n | single µs | single - floor µs | reset floor µs "
        "| single - reset floor µs | that, per round | batched µs/call |"
    )
    out.append("| --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for r in rows:
        per = ", ".join(f"{x:.1f}" for x in r["rounds"]["single_minus_reset_floor_us"])
        out.append(
            f"| {r['impl']} | {r['state']} | {r['n']} | {r['single_us']:.2f} | "
            f"{r['single_us'] - floor_us:.2f} | {r['reset_floor_us']:.2f} | "
            f"{r['single_minus_reset_floor_us']:.2f} | {per} | {r['batched_us']:.2f} |"
        )
    out.append("")
    out.append(
        "step between states (x the bump row of the same impl and n; spread = max/min over "
        "the three states, of single - reset floor and of the batched column):"
    )
    out.append("")
    for impl in IMPLS:
        for n in SIZES:
            mine = [r for r in rows if r["impl"] == impl and r["n"] == n]
            single = {r["state"]: r["single_minus_reset_floor_us"] for r in mine}
            batched = {r["state"]: r["batched_us"] for r in mine}
            steps = ", ".join(f"{s} {batched[s] / batched['bump']:.1f}x" for s in STATES[1:])
            out.append(
                f"- {impl} n={n}: batched {steps}; spread single "
                f"{max(single.values()) / min(single.values()):.2f}x, batched "
                f"{max(batched.values()) / min(batched.values()):.2f}x"
            )
    out.append("")
    per = ", ".join(f"{x:.2f}" for x in dispatch["rounds"]["overhead_us"])
    out.append(
        f"dispatch overhead (kvbench.api.paged_decode, cached decision, no-op row, "
        f"{DISPATCH_LOOP} calls per sample): {dispatch['ops_us']:.2f} µs per call via "
        f"ops, {dispatch['direct_us']:.2f} µs calling the row directly, overhead "
        f"{dispatch['overhead_us']:.2f} µs (medians; per round {per}); fastest samples: "
        f"overhead {dispatch['overhead_fastest_us']:.2f} µs"
    )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    from kvbench.harness import host_floor, metadata

    parser = argparse.ArgumentParser(
        prog="python -m kvbench.measure.alloc_table", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--device", default=None, help="torch device (default: cuda if present)")
    parser.add_argument("--num-rows", type=int, default=32768)
    parser.add_argument("--json", type=output_path, default=None,
                        help="also write the numbers to this file (checked before measuring)")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help=f"interleaved rounds per cell (default {ROUNDS})")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    # prepare_state lays out four runs of the largest request (a batch of BATCH x max(SIZES))
    least = 4 * max(SIZES) * BATCH
    if args.num_rows < least:
        parser.error(f"--num-rows must be >= {least} (four runs of the batched column's "
                     f"{BATCH} x {max(SIZES)} rows), got {args.num_rows}")
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        parser.error(f"--device: {exc}")
    command = "python -m kvbench.measure.alloc_table " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    meta = metadata(command=command.strip())
    if hasattr(os, "getloadavg"):
        meta["loadavg"] = os.getloadavg()  # other processes share the cores: say so
    floor = host_floor(device).median_us
    rows = measure_alloc(args.num_rows, device, args.rounds)
    dispatch = _over_rounds([measure_dispatch_overhead(device) for _ in range(args.rounds)])
    print(render(meta, floor, rows, dispatch, args.num_rows, args.rounds))
    if args.json:
        write_json_atomic(
            args.json,
            {"metadata": meta, "host_floor_us": floor, "alloc": rows, "dispatch": dispatch},
            indent=2, default=str,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
