"""Experiment 22's loop ablation: -DKVB_TRACE builds of cluster_decode.cu with the tile loop's
math removed (copies only) or its in-loop copies removed (math on the first stages only). Their
outputs are wrong by construction, so they are traced unchecked; the shipped source is traced
beside them (checked). Usage: python3 abl_loop.py [--build-only] [--json PATH]"""
import json
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
import torch  # noqa: E402
import trace_cluster_decode as tcd  # noqa: E402
from bench_cluster_decode import parse_case  # noqa: E402
from gpu_experiment import cluster_library  # noqa: E402

from kvbench import checks  # noqa: E402
from kvbench.kernels import cuda_build  # noqa: E402

CUDA = Path("kvbench/kernels/cuda")
src = (CUDA / "cluster_decode.cu").read_text()
A = "    const uint32_t vs = ks + S::K_BYTES;\n"
B = "\n  // ---- the CTA's partial: combine its warps"
i, j = src.index(A) + len(A), src.index(B)
body_end = src.rindex("  }\n", i, j)
C = "    if (i + NSTAGE - 1 < num_tiles) issue_tile(i + NSTAGE - 1, pages_ahead);\n"
D = "    load_pages(i + NSTAGE, pages_ahead);\n"
assert C in src and D in src
VARIANTS = {
    "shipped": None,
    "no_math": src[:i] + "    (void)vs;\n" + src[body_end:],
    "no_loop_copies": src.replace(C, "").replace(D, ""),
}
libs = {}
for name, text in VARIANTS.items():
    if text is None:
        libs[name] = tcd.build_trace_library()
        continue
    (CUDA / f"abl_{name}.cu").write_text(text)
    out = Path(f".device/abl_{name}")
    out.mkdir(exist_ok=True)
    libs[name], _ = cuda_build.compile_source(f"abl_{name}", out, extra=("-DKVB_TRACE",))
if "--build-only" in sys.argv:
    sys.exit(0)

dev = torch.device("cuda")
cases = [parse_case(c) for c in ("1,4096", "1,32768", "8,4096")]
real_check = checks.check_paged_decode
res = {}
for name, lib in libs.items():
    checks.check_paged_decode = real_check if name == "shipped" else (lambda *a, **k: None)
    with cluster_library(str(lib)):
        for case in cases:
            for setting, summ in tcd.run_case(case, [None], 20, dev).items():
                res[f"{name} {case[0]} {setting}"] = summ
if "--json" in sys.argv:
    Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(res, indent=1))
print(f"{'variant case setting':40s} {'span':>6s} " + " ".join(f"p{k}~" for k in range(7)))
for key, s in res.items():
    print(f"{key[:40]:40s} {s['span']:6.2f} " +
          " ".join(f"{s[f'{p} med']:4.2f}" for p in tcd.PHASES))
