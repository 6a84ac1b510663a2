"""The timing proof's evidence on a GPU: CUPTI vs event time for the small decode and write
cases, the compiled decode rows' error figures, and the NVML state the sidecar records.
Writes JSON to argv[1] and prints a short table last. Run by scripts/device/proof_h200.sh:

    python3 scripts/device/proof_h200.py OUT.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.runner import sidecar as _sidecar
from kvbench.api import kv_write, last_selection, paged_decode
from kvbench.fixtures.pool import paged_pool
from kvbench.harness import bench, bench_kernel, event_floor
from kvbench.ops.kv_write import check_kv_write, make_write_inputs, proof_kv_write
from kvbench.ops.paged_decode import (
    check_paged_decode,
    make_decode_query,
    proof_paged_decode,
)


def main(out_path: str) -> None:
    rows, figures = [], []
    floor = event_floor().median_us
    state_before = _sidecar.gpu_state()
    for dtype in ("fp16", "bf16", "fp8"):
        for batch, context in ((1, 4096), (8, 4096), (64, 8192)):
            storage = "v_dim_major" if dtype == "fp8" else "combined"
            pool = paged_pool(batch, context, kv_heads=8, head_dim=128, page_size=16,
                              dtype=dtype, storage=storage, device="cuda", seed=0)
            q = make_decode_query(pool, 32, seed=0)
            args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
            kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
            check_paged_decode(paged_decode, pool, q)
            sel = last_selection("paged_decode")
            fn = sel.target
            call = lambda fn=fn, args=args, kw=kw: fn(*args, **kw)
            ev = bench(call, proof=proof_paged_decode(fn, pool, q))
            res = _sidecar.kernel_resources(call)
            figures.append({"case": f"decode b{batch} c{context} {dtype}", "row": sel.spec.name,
                            "error": ev.proof, "resources": res})
            if batch <= 8 and dtype == "fp16":
                kt = bench_kernel(call)
                rows.append(("decode", f"b{batch}_c{context // 1024}k", sel.spec.name,
                             ev.median_us, kt.median_us))
            pool.free()
    for n in (1, 64):
        pool = paged_pool(max(1, n), 4096, kv_heads=8, head_dim=128, page_size=16, dtype="fp16",
                          device="cuda", seed=0)
        k, v, slots = make_write_inputs(pool, n)
        args = (k, v, pool.k_cache, pool.v_cache, slots)
        kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
        check_kv_write(kv_write, pool, k, v, slots)
        sel = last_selection("kv_write")
        call = lambda fn=sel.target, args=args, kw=kw: fn(*args, **kw)
        ev = bench(call, proof=proof_kv_write(sel.target, pool, k, v, slots))
        kt = bench_kernel(call)
        rows.append(("kv_write", f"decode_{n}", sel.spec.name, ev.median_us, kt.median_us))
        pool.free()
    result = {"event_floor_us": floor, "cupti_vs_event": rows, "decode_error_figures": figures,
              "nvml_before": state_before, "nvml_after": _sidecar.gpu_state()}
    Path(out_path).write_text(json.dumps(result, indent=1, default=str))
    print(f"event floor {floor:.2f} us; NVML before {state_before}")
    for f in figures:
        e = f["error"] or {}
        print(f"  {f['case']:24s} {f['row']:22s} scale-1 {e.get('scale', 1) - 1:+.2e} "
              f"bias {e.get('bias') or 0:+.2e} resources {f['resources']}")
    print(f"{'op':9s} {'case':9s} {'row':22s} {'events us':>10s} {'CUPTI us':>9s}")
    for op, case, row, ev_us, k_us in rows:
        print(f"{op:9s} {case:9s} {row:22s} {ev_us:10.2f} {k_us:9.2f}")


if __name__ == "__main__":
    main(sys.argv[1])
