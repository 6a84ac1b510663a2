"""Time the public ops on the fast path (KVBENCH_CHECK unset) in this process's kvbench tree.

Prints one JSON line per case: median device time (cold L2, harness bench()) and the host
time to enqueue one call (the launcher's validation cost). Run once per tree, alternating.
"""
import json, os, sys
os.environ.pop("KVBENCH_CHECK", None)
import torch
import kvbench, kvbench.ops as ops
from kvbench.harness import bench
from kvbench.pool import paged_pool
from kvbench.checks import make_decode_query, make_write_inputs

tag = sys.argv[1]
rows = []
for batch, ctx, dtype in [(1, 4096, "fp16"), (8, 4096, "fp16"), (64, 8192, "fp16"), (1, 32768, "fp16"), (8, 4096, "fp8")]:
    storage = "v_dim_major" if dtype == "fp8" else "combined"
    pool = paged_pool(batch, ctx, kv_heads=8, head_dim=128, page_size=16, dtype=dtype, storage=storage,
                      min_l2_multiple=8, device="cuda", seed=0)
    q = make_decode_query(pool, 32, seed=0)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    t = bench(lambda: ops.paged_decode(*args, **kw), device="cuda")
    rows.append({"tree": tag, "op": "paged_decode", "case": f"{dtype} b{batch}x{ctx}",
                 "row": ops.last_selection("paged_decode").spec.name, "us": t.median_us, "host_us": t.host_us})
    pool.free(); del pool, q, args
    torch.cuda.empty_cache()
for n, dtype in [(64, "fp16"), (16384, "fp16"), (64, "fp8"), (16384, "fp8")]:
    pool = paged_pool(64, 2048, kv_heads=8, head_dim=128, page_size=16, dtype=dtype,
                      min_l2_multiple=8, device="cuda", seed=0)
    k, v, slots = make_write_inputs(pool, n, seed=0)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale} if dtype == "fp8" else {}
    t = bench(lambda: ops.kv_write(k, v, pool.k_cache, pool.v_cache, slots, **kw), device="cuda")
    rows.append({"tree": tag, "op": "kv_write", "case": f"{dtype} n{n}",
                 "row": ops.last_selection("kv_write").spec.name, "us": t.median_us, "host_us": t.host_us})
    pool.free(); del pool
    torch.cuda.empty_cache()
for r in rows:
    print(json.dumps(r), flush=True)
