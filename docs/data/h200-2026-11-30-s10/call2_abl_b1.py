"""b1 x 4k / 1k ablation of cuda/cluster_decode: layout, storage, warm L2 (session 10)."""
import json, sys
from functools import partial
import torch
from kvbench import checks
from kvbench.harness import bench, event_floor
from kvbench.harness.stream_read import page_read_fn
from kvbench.kernels import paged_decode as pd
from kvbench.kernels import paged_decode_cluster as pdc
from kvbench.kernels._device import sm_count
from kvbench.pool import paged_pool

dev = torch.device("cuda")
out = {}
cases = [(4096, "fragmented", "combined"), (4096, "contiguous", "combined"),
         (4096, "fragmented", "head_major"), (1024, "fragmented", "combined")]
for rnd in range(2):
    for ctx, layout, storage in cases:
        torch.cuda.empty_cache()
        pool = paged_pool(1, ctx, layout=layout, storage=storage, device=dev)
        q = checks.make_decode_query(pool, 32)
        args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
        rows = {"triton": pd.paged_decode_split_kv,
                "c8:8": partial(pdc.paged_decode_cluster, num_splits=8, cluster_size=8),
                "c16:2": partial(pdc.paged_decode_cluster, num_splits=16, cluster_size=2),
                "c16:1": partial(pdc.paged_decode_cluster, num_splits=16, cluster_size=1)}
        for name, fn in rows.items():
            checks.check_paged_decode(fn, pool, q)
        read = page_read_fn(pool.k_cache, pool.v_cache, pool.attended_page_ids(), sm_count(dev))
        checks.check_page_read(read, pool)
        rows["page_read"] = None
        key = f"c{ctx}:{layout}:{storage}"
        for l2 in ("cold", "warm"):
            for name, fn in rows.items():
                f = read if fn is None else partial(fn, *args)
                out.setdefault(f"{key}:{l2}", {}).setdefault(name, []).append(bench(f, l2=l2).median_us)
        out.setdefault(f"{key}:cold", {}).setdefault("empty", []).append(event_floor(dev).median_us)
        pool.free()
    json.dump(out, open(sys.argv[1], "w"), indent=1)
cols = ["triton", "c8:8", "c16:2", "c16:1", "page_read", "empty"]
print(f"{'case':40s}" + "".join(f"{c:>11s}" for c in cols))
for k, v in out.items():
    print(f"{k:40s}" + "".join(f"{sum(v[c])/len(v[c]):11.2f}" if c in v else f"{'-':>11s}" for c in cols))
