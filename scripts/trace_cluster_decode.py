"""Where one cuda/cluster_decode launch spends its time, phase by phase (GPU)

    python scripts/trace_cluster_decode.py [--json PATH] [--rounds N] [--reps N]
                                           [--case BATCH,CONTEXT[,DTYPE[,STORAGE]] ...]
                                           [--splits 8,16]

The event timer gives one number per launch and Nsight Compute averages over warps; neither
says which link of a short launch's chain is long. This builds cluster_decode.cu with
-DKVB_TRACE (thread 0 of every CTA reads %globaltimer at 8 marks: entry, first copies issued,
first tile landed, last tile done, the warps' partials stored, the CTA's partial pushed to its
peers, the peers' partials of its outputs received, its outputs stored) and launches it at each
case and split count (the auto count and each --splits value), cold L2 (the harness's flush
before each launch) and warm, --reps launches each, every output checked against the fp64
reference first. Per setting it reports the medians over launches of: the span (first entry to
last done), the entry skew across CTAs, and each phase's median and max over CTAs. The shipped
build has no trace code. Experiment 21 (docs/perf-notes.md).
"""

from __future__ import annotations

import ctypes
import itertools
import statistics
import sys
import tempfile
from functools import partial
from pathlib import Path

import torch
from bench_cluster_decode import parse_case
from gpu_experiment import cluster_library, experiment_parser, run_rounds, start_experiment

from kvbench.fixtures.pool import paged_pool
from kvbench.harness.flush import flusher
from kvbench.kernels import cuda_build
from kvbench.kernels import paged_decode_cluster as pdc
from kvbench.ops.paged_decode import check_paged_decode, make_decode_query

#: The marks' names, in the kernel's order (cluster_decode.cu, KVB_MARK).
MARKS = ("entry", "issued", "first_tile", "last_tile", "warps_stored", "pushed", "received",
         "stored")
#: Phase i runs from mark i to mark i + 1.
PHASES = tuple(f"{a}->{b}" for a, b in itertools.pairwise(MARKS))
DEFAULT_CASES = ("1,4096", "1,1024")


def build_trace_library() -> str:
    """The -DKVB_TRACE build of cluster_decode.cu, in a directory of its own."""
    lib, _ = cuda_build.compile_source(pdc.LIBRARY, Path(tempfile.mkdtemp(prefix="kvb_trace_")),
                                       extra=("-DKVB_TRACE",))
    return str(lib)


def read_marks(ctas: int) -> torch.Tensor:
    """The last launch's marks, [ctas, len(MARKS)] int64 ns (after a synchronize)."""
    lib = pdc._library()
    if lib.kvb_constant(b"TRACE_POINTS") != len(MARKS):
        raise RuntimeError(f"the kernel records {lib.kvb_constant(b'TRACE_POINTS')} marks, "
                           f"this script names {len(MARKS)}: update MARKS")
    lib.kvb_trace_read.argtypes = [ctypes.c_void_p, ctypes.c_int]
    buf = (ctypes.c_uint64 * (ctas * len(MARKS)))()
    code = lib.kvb_trace_read(ctypes.cast(buf, ctypes.c_void_p), ctas)
    if code != 0:
        raise RuntimeError(f"kvb_trace_read failed: cudaError {code} (not a -DKVB_TRACE build?)")
    return torch.tensor(list(buf), dtype=torch.int64).view(ctas, len(MARKS))


def summarize(launches: list[torch.Tensor]) -> dict[str, float]:
    """Medians over launches (us): span, entry skew, and per phase the median / max over CTAs;
    ``tick``: the smallest nonzero step between any two marks seen (the timer's resolution
    bounds what a phase shorter than it can say)."""
    per: dict[str, list[float]] = {}
    steps = torch.cat([m.flatten().unique().diff() for m in launches])
    tick = float(steps[steps > 0].min()) / 1000.0 if bool((steps > 0).any()) else float("nan")
    for m in launches:
        m = m.double() / 1000.0
        per.setdefault("span", []).append(float(m[:, -1].max() - m[:, 0].min()))
        per.setdefault("entry_skew", []).append(float(m[:, 0].max() - m[:, 0].min()))
        d = m[:, 1:] - m[:, :-1]
        for i, name in enumerate(PHASES):
            per.setdefault(f"{name} med", []).append(float(d[:, i].median()))
            per.setdefault(f"{name} max", []).append(float(d[:, i].max()))
    return {"tick": tick, **{k: statistics.median(v) for k, v in per.items()}}


def run_case(case: tuple, settings: list[int | None], reps: int, dev: torch.device) -> dict:
    _, batch, ctx, dtype, storage = case
    torch.cuda.empty_cache()
    pool = paged_pool(batch, ctx, dtype=dtype, storage=storage, device=dev)
    q = make_decode_query(pool, 32)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kw = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    flush = flusher(dev)
    out: dict[str, dict] = {}
    for n in settings:
        if n is None:
            n = pdc.auto_splits(dev, pool.k_cache.dtype, 32 // pool.kv_heads,
                                batch * pool.kv_heads, ctx)
        fn = partial(pdc.paged_decode_cluster, num_splits=n)
        check_paged_decode(fn, pool, q)
        ctas = n * pool.kv_heads * batch
        for l2 in ("cold", "warm"):
            launches = []
            for _ in range(reps):
                if l2 == "cold":
                    flush()
                fn(*args, **kw)
                torch.cuda.synchronize(dev)
                launches.append(read_marks(ctas))
            out[f"s{n} {l2}"] = summarize(launches)
    pool.free()
    return out


def table(results: dict[str, list[dict]]) -> str:
    """Round 0's summaries (later rounds in the JSON), one row per case x setting x L2; phases
    numbered p0..p6 (the legend follows the table)."""
    cols = ["span", "entry_skew", "tick", *[f"{p} med" for p in PHASES],
            *[f"{p} max" for p in PHASES]]
    heads = ["span", "skew", "tick", *[f"p{i}~" for i in range(len(PHASES))],
             *[f"p{i}^" for i in range(len(PHASES))]]
    lines = [f"{'case setting':34s}" + "".join(f"{h:>7s}" for h in heads)]
    for case, rounds in results.items():
        for setting, summary in rounds[0].items():
            lines.append(f"{(case + ' ' + setting)[:34]:34s}" +
                         "".join(f"{summary[c]:7.2f}" for c in cols))
    legend = ", ".join(f"p{i} {p}" for i, p in enumerate(PHASES))
    return "\n".join(lines) + f"\n(us; ~ median over CTAs, ^ max over CTAs; {legend})"


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, rounds=1)
    parser.add_argument("--reps", type=int, default=20, help="launches per setting and L2 mode")
    parser.add_argument("--splits", default="", help="split counts beside the auto count")
    parser.add_argument("--case", action="append", default=[],
                        metavar="BATCH,CONTEXT[,DTYPE[,STORAGE]]")

    def check(a) -> None:
        try:
            a.cases = tuple(parse_case(c) for c in (a.case or DEFAULT_CASES))
        except ValueError as exc:
            parser.error(str(exc))
        try:
            a.settings = [None, *(int(n) for n in a.splits.split(",") if n)]
        except ValueError:
            parser.error(f"--splits wants comma-separated split counts, got {a.splits!r}")
        if a.reps < 1:
            parser.error(f"--reps must be >= 1, got {a.reps}")

    started = start_experiment(parser, argv, check)
    if started is None:
        return 2
    args, meta, dev = started
    meta["trace_marks"] = MARKS
    with cluster_library(build_trace_library()):
        results = run_rounds(args.rounds, args.cases, lambda c: f"{c[0]}:{c[3]}",
                             lambda c: run_case(c, args.settings, args.reps, dev), args.json, meta)
    print("\n" + table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
