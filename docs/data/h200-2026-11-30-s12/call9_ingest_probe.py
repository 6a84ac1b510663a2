"""Session 12, calls 8-9: bytes per SM into shared memory by copy kind (ingest_probe.cu). Each row:
n CTAs (one per SM) each read their own contiguous share through a 3 x 64 KiB ring; cold L2
(the harness's flush), event timer (kvbench.harness.timers.bench). Usage: python3 ingest_probe.py [--json PATH]"""
import ctypes
import json
import shutil
import sys
from pathlib import Path

import torch

from kvbench.harness.timers import bench
from kvbench.kernels import cuda_build

shutil.copy(".device/ingest_probe.cu", "kvbench/kernels/cuda/ingest_probe.cu")
lib_path, _ = cuda_build.compile_source("ingest_probe", Path(".device/probe_lib"))
lib = ctypes.CDLL(str(lib_path))
lib.probe.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                      ctypes.c_void_p, ctypes.c_void_p]
dev = torch.device("cuda")
MiB = 1 << 20
src = torch.zeros(160 * MiB, dtype=torch.uint8, device=dev)
out = torch.zeros(1024, dtype=torch.float32, device=dev)
KINDS = [("empty", 3, 16), ("ldgsts16", 0, 16), ("bulk4k_t0", 1, 4096), ("bulk16k_t0", 1, 16384),
         ("bulk256_all", 2, 256), ("bulk1k_all", 2, 1024)]
rows = []
if "--paged" not in sys.argv:
    for total in (16 * MiB, 128 * MiB):
        for n in (64, 128):
            per = total // n
            for name, kind, chunk in KINDS:
                def fn(kind=kind, per=per, n=n, chunk=chunk):
                    rc = lib.probe(kind, src.data_ptr(), per, n, chunk, out.data_ptr(),
                                   torch.cuda.current_stream().cuda_stream)
                    if rc:
                        raise RuntimeError(f"probe kind {kind}: cuda error {rc}")
                for l2 in ("cold", "warm"):
                    us = bench(fn, l2=l2).median_us
                    gbps = 0.0 if kind == 3 else n * per / us / 1e3
                    rows.append({"total_mib": total // MiB, "ctas": n, "kind": name, "l2": l2,
                                 "us": us, "gbps": gbps, "gbps_per_sm": gbps / n})
else:
    # call 9: the decode's pattern (kind 4) beside a contiguous read of the same bytes
    lib.probe_paged.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
    pages = 8192  # 256 MiB of K and 256 MiB of V: the pool >= 8x L2
    kbuf = torch.zeros(pages * 32768, dtype=torch.uint8, device=dev)
    vbuf = torch.zeros(pages * 32768, dtype=torch.uint8, device=dev)
    gen = torch.Generator().manual_seed(0)
    for tokens, splits_list in ((4096, (4, 8, 16)), (32768, (8, 16))):
        for order in ("random", "in_order"):
            n_pages = tokens // 16
            ids = (torch.randperm(pages, generator=gen)[:n_pages] if order == "random"
                   else torch.arange(n_pages)).to(torch.int32).to(dev)
            for splits in splits_list:
                def fn(tokens=tokens, splits=splits, ids=ids):
                    rc = lib.probe_paged(kbuf.data_ptr(), vbuf.data_ptr(), ids.data_ptr(), tokens,
                                         splits, out.data_ptr(), torch.cuda.current_stream().cuda_stream)
                    if rc:
                        raise RuntimeError(f"probe_paged: cuda error {rc}")
                total = tokens * 8 * 256 * 2
                for l2 in ("cold", "warm"):
                    us = bench(fn, l2=l2).median_us
                    n = 8 * splits
                    rows.append({"total_mib": total / MiB, "ctas": n, "kind": f"paged_{order}",
                                 "l2": l2, "us": us, "gbps": total / us / 1e3,
                                 "gbps_per_sm": total / us / 1e3 / n})
    for n in (64, 128):  # contiguous 16 MiB and the empty kernel, same call
        for name, kind in (("empty", 3), ("ldgsts16", 0)):
            def fn(kind=kind, n=n):
                lib.probe(kind, src.data_ptr(), 16 * MiB // n, n, 16, out.data_ptr(),
                          torch.cuda.current_stream().cuda_stream)
            us = bench(fn, l2="cold").median_us
            rows.append({"total_mib": 16, "ctas": n, "kind": name, "l2": "cold", "us": us,
                         "gbps": 0.0 if kind == 3 else 16 * MiB / us / 1e3,
                         "gbps_per_sm": 0.0 if kind == 3 else 16 * MiB / us / 1e3 / n})
torch.cuda.synchronize()
assert float(out.abs().sum()) == 0.0
meta = {"gpu": torch.cuda.get_device_name(dev), "torch": torch.__version__,
        "cuda": torch.version.cuda, "stage_bytes": 65536, "stages": 3, "threads": 256}
if "--json" in sys.argv:
    Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps({"metadata": meta, "rows": rows}, indent=1))
print(f"{'MiB':>4s} {'CTAs':>4s} {'kind':12s} {'l2':4s} {'us':>8s} {'GB/s':>7s} {'GB/s/SM':>8s}")
for r in rows:
    print(f"{r['total_mib']:4.0f} {r['ctas']:4d} {r['kind']:12s} {r['l2']:4s} {r['us']:8.2f} {r['gbps']:7.0f} {r['gbps_per_sm']:8.1f}")
