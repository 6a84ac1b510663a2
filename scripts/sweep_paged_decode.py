"""Sweep the Triton paged-decode launch config and split count on a GPU (one device call).

    python scripts/sweep_paged_decode.py [--json PATH] [--quick]

For each issue-6 case (Llama-3-8B decode geometry on the fragmented >= 8x L2 pool) and each
kernel config (BLOCK_N, num_warps, num_stages) x split count, the output is verified against
the fp64 reference (computed once per case) and timed with the harness's bench() (cold L2).
Prints, per case, the best point next to what the module's current CONFIG/SPLIT_POLICY gives,
so a change of defaults is a measured decision (docs/perf-notes.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys

import torch

from kvbench.checks import make_decode_query
from kvbench.harness import bench, verify
from kvbench.kernels import paged_decode as pd
from kvbench.pool import paged_pool
from kvbench.reference import paged_decode_ref
from kvbench.theory import paged_decode_work

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


def configs(fp8: bool, quick: bool, focus: bool = False) -> list[dict[str, int | str]]:
    """Launch configs; fp8 ones carry the FP8_DEQUANT mode too (not a pd.CONFIG key).

    focus: only the neighbourhood of the shipped default (BLOCK_N 128, 4 warps).
    """
    blocks = (128,) if focus else (64, 128, 256) if fp8 else (32, 64, 128)
    warps = (4,) if focus else (4, 8)
    stages = (2, 3) if quick or focus else (2, 3, 4)
    base = [
        {"BLOCK_N": b, "num_warps": w, "num_stages": s}
        for b, w, s in itertools.product(blocks, warps, stages)
    ]
    if not fp8:
        return base
    return [{**c, "FP8_DEQUANT": m} for m in FP8_DEQUANT_MODES for c in base]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--focus", action="store_true",
                        help="fp8 cases only, default neighbourhood, splits 1/8/32 (a short run)")
    args = parser.parse_args(argv)
    cases = [c for c in CASES if c[3] == "fp8"] if args.focus else list(CASES)
    splits = (1, 8, 32) if args.focus else SPLITS
    dev = torch.device("cuda")
    defaults = {k: dict(v) for k, v in pd.CONFIG.items()}
    default_dequant = pd.FP8_DEQUANT
    points: list[dict] = []
    summary: list[tuple] = []
    for label, batch, ctx, dtype in cases:
        torch_dtype = {"fp16": torch.float16, "fp8": "fp8"}[dtype]
        pool = paged_pool(batch, ctx, dtype=torch_dtype, device=dev)
        q = make_decode_query(pool, 32)
        a = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
        kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
        ref = paged_decode_ref(*a, **kw)
        rtol, atol = pd._RTOL[dtype], pd._ATOL[dtype]
        work = paged_decode_work(
            pool.seq_lens_list, q_heads=32, kv_heads=8, head_dim=128, kv_dtype=dtype
        )
        suffix = "_fp8" if dtype == "fp8" else ""
        # What the shipped defaults do (auto split count).
        out = pd.paged_decode_split_kv(*a, **kw)
        verify(f"{label} {dtype} default", out, ref, rtol=rtol, atol=atol)
        default_us = bench(lambda a=a, kw=kw: pd.paged_decode_split_kv(*a, **kw)).median_us
        chosen = pd.choose_num_splits(
            batch, 8, ctx, torch.cuda.get_device_properties(dev).multi_processor_count, 16
        )
        best = (float("inf"), None, None)
        for cfg in configs(dtype == "fp8", args.quick, args.focus):
            launch = {k: v for k, v in cfg.items() if k != "FP8_DEQUANT"}
            pd.CONFIG["single_pass" + suffix] = dict(launch)
            pd.CONFIG["split_kv" + suffix] = dict(launch)
            pd.FP8_DEQUANT = cfg.get("FP8_DEQUANT", default_dequant)
            for ns in splits:
                if ns > ctx // 16:
                    continue

                def call(ns=ns, a=a, kw=kw):
                    return pd.paged_decode_split_kv(*a, **kw, num_splits=ns)

                try:
                    verify(f"{label} {dtype} {cfg} splits={ns}", call(), ref, rtol=rtol, atol=atol)
                    us = bench(call, repeat=40).median_us
                except Exception as exc:  # noqa: BLE001 - a config that fails is recorded
                    points.append(
                        {
                            "case": label,
                            "dtype": dtype,
                            "cfg": cfg,
                            "splits": ns,
                            "error": f"{type(exc).__name__}: {str(exc)[:200]}",
                        }
                    )
                    continue
                points.append(
                    {
                        "case": label,
                        "dtype": dtype,
                        "cfg": cfg,
                        "splits": ns,
                        "us": us,
                        "gbps": work.moved / us / 1e3,
                    }
                )
                if us < best[0]:
                    best = (us, cfg, ns)
        pd.CONFIG.update({k: dict(v) for k, v in defaults.items()})
        pd.FP8_DEQUANT = default_dequant
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
        with open(args.json, "w") as fh:
            json.dump(
                {
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
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
