#!/usr/bin/env bash
# A/B on the H200: triton/split_kv at b4_c1k (bf16, fp8) in fresh processes, old and new tree
# alternating, 5 rounds: is the +10% of one asv run each a change or the series' run-level modes?
set -uo pipefail
ROOT=$(pwd); W=/tmp/kvb-sbs
if [ ! -d "$W/repo/.git" ]; then rm -rf "$W"; mkdir -p "$W"; git clone -q "$ROOT/.device/sbs.bundle" "$W/repo"; fi
cd "$W/repo"
OLD=$(git rev-list --reverse main | sed -n 1p); NEW=$(git rev-list --reverse main | sed -n 2p)
[ "${REVERSE:-0}" = 1 ] && ORDER="$NEW $OLD"
for round in 1 2 3 4 5; do
  for c in ${ORDER:-$OLD $NEW}; do
    git checkout -q "$c"
    PYTHONPATH=$PWD python3 - "$c" "$round" <<'PY' >> "$OUT/ab_b4.jsonl"
import json, sys
import torch
try:
    from kvbench.fixtures.pool import paged_pool
    from kvbench.ops.paged_decode import make_decode_query
except ImportError:
    from kvbench.pool import paged_pool
    from kvbench.checks import make_decode_query
from kvbench.harness import bench
from kvbench.kernels.paged_decode import paged_decode_split_kv as fn
out = {"commit": sys.argv[1][:7], "round": int(sys.argv[2])}
for dtype in ("bf16", "fp8", "fp16"):
    pool = paged_pool(4, 1024, kv_heads=8, head_dim=128, page_size=16, dtype=dtype,
                      min_l2_multiple=8, device="cuda", seed=0)
    q = make_decode_query(pool, 32, seed=0)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    fn(*args, **kw)
    out[dtype] = bench(lambda: fn(*args, **kw)).median_us
    pool.free(); torch.cuda.empty_cache()
print(json.dumps(out))
PY
  done
done
cat "$OUT/ab_b4.jsonl"
