"""Session 12, call 7: where the first phase of a cluster_decode launch (entry -> first tiles'
copies issued, ~3.4 us cold at batch 1 x 4k) goes. Trace builds (-DKVB_TRACE) of the shipped
source with its second mark moved earlier: right after the cluster barrier's arrive
(`m1_after_arrive`), after seq_len is read (`m1_after_seq_len`: a branch on num_tiles waits
for it), after the first stage's block-table entries are read (`m1_after_bt`: a branch on
thread 0's first entry), and where it is shipped (after the copies are issued). Phase p0 of
each build is entry -> that point; the outputs are right in every build (only a timer read
moves), so every row is checked. Usage: python3 abl_p0.py [--json PATH]"""
import json
import sys
from pathlib import Path

sys.path.insert(0, "scripts")
import torch  # noqa: E402
import trace_cluster_decode as tcd  # noqa: E402
from bench_cluster_decode import parse_case  # noqa: E402
from gpu_experiment import cluster_library  # noqa: E402

from kvbench.kernels import cuda_build  # noqa: E402

CUDA = Path("kvbench/kernels/cuda")
src = (CUDA / "cluster_decode.cu").read_text()
MARK1 = "  KVB_MARK(1);  // the first tiles' copies issued (their block-table entries loaded)\n"
ARRIVE = '  asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");\n'
TILES = "  const int num_tiles = (end - start + TILE_N - 1) / TILE_N;\n"
BT = "    for (int s = 0; s < NSTAGE - 1; ++s) load_pages(s, pages[s]);\n"
for p in (MARK1, ARRIVE, TILES, BT):
    assert src.count(p) == 1, p
base = src.replace(MARK1, "")
VARIANTS = {
    "m1_after_arrive": base.replace(ARRIVE, ARRIVE + "  KVB_MARK(1);\n"),
    "m1_after_seq_len": base.replace(TILES, TILES + "  if (num_tiles == -12345) __trap();\n  KVB_MARK(1);\n"),
    "m1_after_bt": base.replace(BT, BT + "    if (pages[0][0] == -12345) __trap();\n    KVB_MARK(1);\n"),
    "shipped": None,
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

dev = torch.device("cuda")
cases = [parse_case(c) for c in ("1,4096", "1,1024", "8,4096")]
res = {}
for rnd in range(2):
    for name, lib in libs.items():
        with cluster_library(str(lib)):
            for case in cases:
                for setting, summ in tcd.run_case(case, [None], 20, dev).items():
                    res[f"{name} {case[0]} {setting} r{rnd}"] = summ
if "--json" in sys.argv:
    Path(sys.argv[sys.argv.index("--json") + 1]).write_text(json.dumps(res, indent=1))
print(f"{'variant case setting':44s} {'span':>6s} " + " ".join(f"p{k}~" for k in range(7)))
for key, s in res.items():
    print(f"{key[:44]:44s} {s['span']:6.2f} " +
          " ".join(f"{s[f'{p} med']:4.2f}" for p in tcd.PHASES))
