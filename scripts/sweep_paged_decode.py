"""Sweep the Triton paged-decode launch config, kernel variants and split count on a GPU.

    python scripts/sweep_paged_decode.py [--json PATH] [--quick | --focus | --occupancy |
                                          --fp8-tiles | --points FILE]
                                         [--case LABEL:DTYPE ...] [--storage S]

For each case (Llama-3-8B decode geometry on the fragmented >= 8x L2 pool) and each point
(module overrides of kvbench.kernels.paged_decode: CONFIG launch config, FP8_DEQUANT; x split
count), the output is verified against the fp64 reference (computed
once per case) and timed with the harness's bench() (cold L2). Prints, per case, the best
point next to what the module's current defaults give, so a change of defaults is a measured
decision (docs/perf-notes.md).

  --quick   launch config (BLOCK_N x warps x stages) x splits 1..64, fp16 and fp8 cases
  --focus   fp8 only, the default neighbourhood x FP8_DEQUANT, splits 1/8/32
  --occupancy  the default launch config x register cap (CONFIG "maxnreg": none, 168, 128:
            3 or 4 CTAs per SM instead of 2) x stages, and the reduce kernel's SPLIT_BLOCK
            (16, 32, 64: how many split partials one iteration loads) at the auto split count
  --latency  the reduce launched with and without programmatic dependent launch
            (pd.REDUCE_PDL) at the auto split count, every case. Experiment 9 ran it at 58a64ca
            with two more switches (V before QK^T, the reduce's loads first): dropped
  --fp8-unpipelined  fp8 cases only, num_stages 1 x BLOCK_N 64/128 x warps 4/8 x cap none/128:
            without the software pipeliner the uint8 tile is loaded into registers and widened
            there, then reaches the MMA through an fp16 shared-memory tile (ldmatrix) instead of
            element-wise byte reads of a cp.async tile (docs/perf-notes.md, experiment 10)
  --fp8-tiles  fp8 cases only: tile size (BLOCK_N 64/128/256) x warps (4/8) x stages (2-4) x
            register cap (none / 128) at the auto split count: does a smaller tile, or more
            warps per tile, buy the issue-bound fp8 kernel more CTAs per SM without spills?
  --points FILE  the points listed in a JSON file: a list of override dicts as above, each
            with an optional "splits" list (default: the auto split count)
  --case    only these cases (e.g. b64_c8k:fp8), any mode
  --storage the pool's K/V storage (kvbench.fixtures.pool.STORAGES; default combined, the engine's)

The kernel-variant ablation of docs/perf-notes.md experiments 5-6 (MMA_ROWS, SPLIT_COMBINE:
refuted, removed) ran as `--ablate` of this script at commit fd26675; experiment 11's
FP8_DEQUANT "words" grid (removed with the mode) as `--fp8-words` at 3a4c2da.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch

from kvbench.core.jsonfile import output_path, write_json_atomic
from kvbench.fixtures.pool import STORAGES, paged_pool
from kvbench.harness import bench, verify
from kvbench.kernels import paged_decode as pd
from kvbench.ops.paged_decode import make_decode_query, paged_decode_ref, paged_decode_work

CASES = (
    ("b1_c4k", 1, 4096, "fp16"),
    ("b1_c32k", 1, 32768, "fp16"),
    ("b8_c4k", 8, 4096, "fp16"),
    ("b32_c4k", 32, 4096, "fp16"),
    ("b64_c8k", 64, 8192, "fp16"),
    ("b64_c8k", 64, 8192, "fp8"),
    ("b1_c32k", 1, 32768, "fp8"),
)
SPLITS = (1, 2, 4, 8, 16, 32, 64)
# fp8 cases also sweep how bytes are widened (pd.FP8_DEQUANT): the "cvt" vs "bits" ablation.
FP8_DEQUANT_MODES = ("cvt", "bits")
#: fp8-only modes: (BLOCK_N, warps, stages) grids, each point swept uncapped and capped.
FP8_CAPPED_GRIDS = {
    "fp8-tiles": ((64, 128, 256), (4, 8), (2, 3, 4)),
    "fp8-unpipelined": ((64, 128), (4, 8), (1,)),
}
#: Module attributes a point may override besides CONFIG (restored after each case).
_SWITCHES = ("FP8_DEQUANT", "REDUCE_PDL")
#: Point keys that set the reduce kernel's config rather than the decode kernel's.
_REDUCE_KEYS = {"REDUCE_SPLIT_BLOCK": "SPLIT_BLOCK"}


def launch_grid(blocks, warps, stages) -> list[dict[str, int]]:
    return [
        {"BLOCK_N": b, "num_warps": w, "num_stages": s}
        for b, w, s in itertools.product(blocks, warps, stages)
    ]


def points_for(fp8: bool, mode: str) -> list[dict]:
    """The override dicts of one case: launch config keys plus any _SWITCHES."""
    if mode == "latency":  # switches only: every kernel keeps its shipped launch config
        return [{"REDUCE_PDL": pdl} for pdl in (False, True)]
    if mode in FP8_CAPPED_GRIDS:  # each launch point uncapped, then under the 128 cap
        grid = launch_grid(*FP8_CAPPED_GRIDS[mode])
        return [{**c, **cap} for cap in ({}, {"maxnreg": 128}) for c in grid]
    if mode == "occupancy":
        default = pd.CONFIG["single_pass_fp8" if fp8 else "single_pass"]
        uncapped = {k: v for k, v in default.items() if k != "maxnreg"}
        caps = [{}, {"maxnreg": 168}, {"maxnreg": 128}]
        decode = [{**uncapped, "num_stages": st, **cap} for cap in caps for st in (2, 3)]
        reduce = [{**default, "REDUCE_SPLIT_BLOCK": b} for b in (32, 64)]
        return decode + reduce
    focus = mode == "focus"
    blocks = (128,) if focus else (64, 128, 256) if fp8 else (32, 64, 128)
    warps = (4,) if focus else (4, 8)
    stages = (2, 3) if mode in ("quick", "focus") else (2, 3, 4)
    base = launch_grid(blocks, warps, stages)
    if not fp8:
        return base
    return [{**c, "FP8_DEQUANT": m} for m in FP8_DEQUANT_MODES for c in base]


def splits_for(mode: str, ctx: int, auto: int) -> tuple[int, ...]:
    """Split counts a mode sweeps: all of SPLITS for the launch-config grids, a few for
    --focus, and only the auto count for modes that vary one thing at the shipped split."""
    wanted = SPLITS if mode in ("full", "quick") else (1, 8, 32) if mode == "focus" else (auto,)
    return tuple(ns for ns in wanted if ns <= ctx // 16)


def load_points(path: str) -> list[dict]:
    """--points FILE: a JSON list of override dicts (launch keys, _SWITCHES, reduce keys), each
    with an optional "splits" list of split counts."""
    with open(path) as fh:
        entries = json.load(fh)
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError(f"{path}: want a JSON list of objects, got {type(entries).__name__}")
    for entry in entries:
        splits = entry.get("splits", [])
        if not isinstance(splits, list) or not all(isinstance(n, int) and n >= 1 for n in splits):
            raise ValueError(f"{path}: 'splits' must be a list of ints >= 1, got {splits!r}")
    return entries


def apply(point: dict) -> None:
    """Set one point's overrides on the kernel module (both split and single-pass configs)."""
    launch = {k: v for k, v in point.items() if k not in _SWITCHES and k not in _REDUCE_KEYS}
    for key in list(pd.CONFIG):
        if launch and key.startswith(("single_pass", "split_kv")):
            pd.CONFIG[key] = dict(launch)
    for point_key, config_key in _REDUCE_KEYS.items():
        if point_key in point:
            pd.CONFIG["reduce"] = {**pd.CONFIG["reduce"], config_key: point[point_key]}
    for name in _SWITCHES:
        if name in point:
            setattr(pd, name, point[name])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None, type=output_path)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--quick", action="store_true")
    group.add_argument("--focus", action="store_true",
                       help="fp8 cases only, default neighbourhood, splits 1/8/32 (a short run)")
    group.add_argument("--occupancy", action="store_true",
                       help="register cap x stages and reduce SPLIT_BLOCK (see the docstring)")
    group.add_argument("--latency", action="store_true",
                       help="reduce with / without programmatic dependent launch")
    group.add_argument("--fp8-unpipelined", action="store_true",
                       help="fp8 only: num_stages 1 (see the docstring)")
    group.add_argument("--fp8-tiles", action="store_true",
                       help="fp8 only: BLOCK_N x warps x stages x register cap (see the docstring)")
    group.add_argument("--points", default=None, metavar="FILE",
                       help="JSON list of override dicts, each with optional 'splits'")
    parser.add_argument("--case", action="append", default=None, metavar="LABEL:DTYPE",
                        help="only these cases (default: the mode's cases)")
    parser.add_argument("--storage", choices=STORAGES, default="combined",
                        help="the pool's K/V storage (head_major: the access-pattern ablation)")
    args = parser.parse_args(argv)
    known = {f"{c[0]}:{c[3]}" for c in CASES}
    for want in args.case or ():
        if want not in known:
            parser.error(f"--case {want!r}: accepted cases are {', '.join(sorted(known))}")
    mode = ("quick" if args.quick else "focus" if args.focus
            else "occupancy" if args.occupancy else "fp8-tiles" if args.fp8_tiles
            else "points" if args.points
            else "latency" if args.latency
            else "fp8-unpipelined" if args.fp8_unpipelined else "full")
    fp8_only = mode == "focus" or mode in FP8_CAPPED_GRIDS
    cases = [c for c in CASES if c[3] == "fp8"] if fp8_only else list(CASES)
    if args.case:
        cases = [c for c in CASES if f"{c[0]}:{c[3]}" in args.case]
    listed = load_points(args.points) if args.points else None
    dev = torch.device("cuda")
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    defaults = {k: dict(v) for k, v in pd.CONFIG.items()}
    default_switches = {name: getattr(pd, name) for name in _SWITCHES}
    points: list[dict] = []
    summary: list[tuple] = []
    for label, batch, ctx, dtype in cases:
        torch_dtype = {"fp16": torch.float16, "fp8": "fp8"}[dtype]
        pool = paged_pool(batch, ctx, dtype=torch_dtype, storage=args.storage, device=dev)
        q = make_decode_query(pool, 32)
        a = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
        kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
        ref = paged_decode_ref(*a, **kw)
        rtol, atol = pd._RTOL[dtype], pd._ATOL[dtype]
        work = paged_decode_work(
            pool.seq_lens_list, q_heads=32, kv_heads=8, head_dim=128, kv_dtype=dtype
        )
        # What the shipped defaults do (auto split count).
        out = pd.paged_decode_split_kv(*a, **kw)
        verify(f"{label} {dtype} default", out, ref, rtol=rtol, atol=atol)
        default_us = bench(lambda a=a, kw=kw: pd.paged_decode_split_kv(*a, **kw)).median_us
        chosen = pd.choose_num_splits(batch, 8, ctx, sms, 16)
        best = (float("inf"), None, None)
        for entry in listed if listed is not None else points_for(dtype == "fp8", mode):
            point = {k: v for k, v in entry.items() if k != "splits"}
            apply(point)
            for ns in entry.get("splits") or splits_for(mode, ctx, chosen):

                def call(ns=ns, a=a, kw=kw):
                    return pd.paged_decode_split_kv(*a, **kw, num_splits=ns)

                row = {"case": label, "dtype": dtype, "cfg": point, "splits": ns}
                try:
                    verify(f"{label} {dtype} {point} splits={ns}", call(), ref, rtol=rtol, atol=atol)
                    us = bench(call, repeat=40).median_us
                except Exception as exc:  # noqa: BLE001 - a point that fails is recorded
                    points.append({**row, "error": f"{type(exc).__name__}: {str(exc)[:200]}"})
                    continue
                points.append({**row, "us": us, "gbps": work.moved / us / 1e3})
                if us < best[0]:
                    best = (us, point, ns)
        pd.CONFIG.update({k: dict(v) for k, v in defaults.items()})
        for name, value in default_switches.items():
            setattr(pd, name, value)
        summary.append((label, dtype, default_us, chosen, best, work.moved))
        del q, a, ref, out
        pool.free()
    print(
        f"\n{'case':10s} {'dt':4s} {'default us':>10s} {'GB/s':>6s} {'splits':>6s} | "
        f"{'best us':>8s} {'GB/s':>6s}  config"
    )
    for label, dtype, dus, chosen, (bus, cfg, ns), moved in summary:
        print(
            f"{label:10s} {dtype:4s} {dus:10.1f} {moved / dus / 1e3:6.0f} {chosen:6d} | "
            f"{bus:8.1f} {moved / bus / 1e3:6.0f}  {cfg} splits={ns}"
        )
    if args.json:
        write_json_atomic(
            args.json,
            {
                "mode": mode,
                "storage": args.storage,
                "points": points,
                "summary": [
                    {
                        "case": s[0],
                        "dtype": s[1],
                        "default_us": s[2],
                        "default_splits": s[3],
                        "best_us": s[4][0],
                        "best_cfg": s[4][1],
                        "best_splits": s[4][2],
                    }
                    for s in summary
                ],
            },
            indent=1,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
