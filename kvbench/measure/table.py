"""`kvbench table <op>`: every registry row and every peer of an op, checked, then timed.

The standalone equivalent of the seed's bench_paged_decode.py / bench_kv_write.py, built only
from the harness (timers, Work, report, metadata), the fixture and the registry: no timing code
of its own. Per case it
  1. builds the inputs with the fixture (never torch.randn caches, never .contiguous()),
  2. forces each row through its env-var selector and dispatch, asserting that the row dispatch
     selected is the row the table names (seed 000: `sel.spec.name == _IMPL`),
  3. runs the row's correctness check against the op's torch reference (a wrong row gets no number),
  4. times it with the op's timer (bench, or bench_host for the allocator); the last timed
     call runs on a perturbed input and its output is verified too (kvbench.kernels.kv_alloc.proof_*,
     harness/proof.py): a row that memoizes or skips work after its first call gets no number,
     and the error figures of that call go to the JSON ("error"),
and prints report() (throughput first), the dispatch explain() of `auto`, the host floor where
rows approach it, and the metadata header. `--json PATH` writes the same rows for tools.
Exit status: 0; 1 when no row could be measured; 2 when a row is above a spec peak or
above 1.05x the best ceiling `kvbench calibrate` measured on this device (a measurement bug,
listed under "violations" in the JSON); 130 when interrupted (Ctrl-C), after
printing and writing the rows measured until then (`"interrupted": true` in the JSON).
On a GPU every decode case also carries `bound:page_read`: the case's pages read and nothing
else, under the same timer (the bytes-only bound at that size; docs/harness.md).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import torch

from kvbench.core import progress
from kvbench.core.env import selector_var
from kvbench.core.jsonfile import check_writable, output_path, write_json_atomic
from kvbench.dispatch.core import dispatch, spec_names
from kvbench.fixtures.pool import paged_pool
from kvbench.harness import (
    Row,
    Work,
    bench,
    bench_host,
    bench_kernel,
    device_peaks,
    event_floor,
    host_floor,
    metadata,
    report,
    violations,
)
from kvbench.harness.calibrate import load_ceilings
from kvbench.harness.meta import format_metadata
from kvbench.harness.report import EVENT_TIMERS
from kvbench.harness.timers import KERNEL_TIMER_FLOOR_FACTOR
from kvbench.measure.plots import CEILING_FOR_OP
from kvbench.ops.common import last_selection
from kvbench.ops.kv_gather_fp8 import (
    check_kv_gather_fp8,
    kv_gather_fp8,
    kv_gather_fp8_work,
    proof_kv_gather_fp8,
)
from kvbench.ops.kv_write import (
    check_kv_write,
    kv_write,
    kv_write_work,
    make_write_inputs,
    proof_kv_write,
)
from kvbench.ops.paged_decode import (
    check_page_read,
    check_paged_decode,
    make_decode_query,
    page_read_work,
    paged_decode,
    paged_decode_work,
    proof_paged_decode,
)

#: Llama-3-8B decode geometry (issue 6): 32 query heads over 8 KV heads, head_dim 128.
Q_HEADS, KV_HEADS, HEAD_DIM, PAGE_SIZE = 32, 8, 128, 16

#: (case label, batch, context) on a GPU. The first five are the roofline targets of issue 6.
DECODE_CASES_GPU: tuple[tuple[str, int, int], ...] = (
    ("b1_c4k", 1, 4096),
    ("b1_c32k", 1, 32768),
    ("b8_c4k", 8, 4096),
    ("b32_c4k", 32, 4096),
    ("b64_c8k", 64, 8192),
)
#: The full batch x context grid of issue 3 (`--grid`).
DECODE_GRID_GPU = tuple(
    (f"b{b}_c{c // 1024}k", b, c) for b in (1, 8, 32, 64) for c in (1024, 4096, 8192, 32768)
)
#: On a CPU only torch rows run (Triton rows need CUDA or the interpreter, which is far too
#: slow to time); the shapes are small so the main job finishes in minutes.
DECODE_CASES_CPU: tuple[tuple[str, int, int], ...] = (("b2_c512", 2, 512), ("b4_c2k", 4, 2048))

WRITE_CASES_GPU: tuple[tuple[str, int], ...] = (("prefill_16k", 16384), ("decode_64", 64), ("decode_1", 1))
WRITE_CASES_CPU: tuple[tuple[str, int], ...] = (("prefill_1k", 1024), ("decode_64", 64))

GATHER_CASES_GPU: tuple[tuple[str, int], ...] = (("kv8k", 8192), ("kv32k", 32768), ("kv64k", 65536))
GATHER_CASES_CPU: tuple[tuple[str, int], ...] = (("kv2k", 2048),)

ALLOC_ROWS = 1 << 16
ALLOC_STATES = ("bump", "run_search", "fragmented")
ALLOC_SIZES = (1, 64)
#: The impl name of each decode case's bytes-only bound row (GPU; _page_read_row).
PAGE_READ_BOUND = "bound:page_read"


@dataclass
class Table:
    """What one `kvbench table <op>` run produced."""

    op: str
    rows: list[Row] = field(default_factory=list)
    explains: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)
    checks: dict[str, float] = field(default_factory=dict)
    #: "<impl> @ <case>" -> error figures of the last timed call's verification
    #: (harness/proof.py: max_abs, max_rel, scale, bias, n), for rows timed with a proof.
    errors: dict[str, dict] = field(default_factory=dict)
    #: Set when the run was interrupted (Ctrl-C): the rows are those measured before it.
    interrupted: bool = False
    #: The floors of the timers its rows used (measure_floors): host_floor() for bench_host
    #: rows, event_floor() for bench / bench_stateful rows; None where no row used that timer.
    floor_us: float | None = None
    event_floor_us: float | None = None

    def as_json(self, meta: dict[str, Any]) -> dict[str, Any]:
        return {
            "op": self.op,
            "metadata": meta,
            "rows": [
                {**asdict(r), "gbps": r.gbps, "tflops": r.tflops} for r in self.rows
            ],
            "max_abs_diff": self.checks,
            "error": self.errors,
            "skipped": self.skipped,
            "explain": self.explains,
            "interrupted": self.interrupted,
            "host_floor_us": self.floor_us,
            "event_floor_us": self.event_floor_us,
            "bound_ratios": bound_ratios(self.rows),
            "violations": violations(self.rows, device_peaks(), _ceilings()),
        }


@contextlib.contextmanager
def forced(op: str, name: str) -> Iterator[None]:
    """Force `op`'s selector to `name` for the block, restoring the caller's value after."""
    var = selector_var(op)
    before = os.environ.get(var)
    os.environ[var] = name
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(var, None)
        else:
            os.environ[var] = before


def _run_forced(op: str, name: str, call: Callable[[], Any]) -> Callable[..., Any]:
    """Run `call` (an ops.* call) with the row forced; return the target dispatch selected.

    Raises if dispatch ran another row: the table must never name one kernel while another ran.
    """
    with forced(op, name):
        call()
    sel = last_selection(op)
    if sel is None or sel.spec.name != name:
        ran = None if sel is None else sel.spec.name
        raise AssertionError(f"{op}: table row {name!r} but dispatch ran {ran!r}")
    return sel.target


def _auto_explain(op: str, call: Callable[[], Any]) -> str:
    """What `auto` picks for this problem, and why: the decision chain from the real op call."""
    try:
        with forced(op, "auto"):
            call()
        sel = last_selection(op)
        return "(no selection)" if sel is None else sel.explain()
    except Exception as exc:  # noqa: BLE001 - explain is informative; its failure is reported
        return f"(auto failed: {type(exc).__name__}: {exc})"


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _skip(table: Table, label: str, exc: BaseException) -> None:
    table.skipped[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


#: Why a Triton row gets no number on a CPU, even with TRITON_INTERPRET=1 set: the asv suite
#: skips them the same way (benchmarks/_common.check_then_time).
CPU_TRITON_SKIP = "Triton rows are not timed on a CPU: the interpreter's timings mean nothing"


def _timed_rows(table: Table, op: str, case: str, dev: torch.device,
                names: Sequence[str] | None = None) -> list[str]:
    """The registry rows of `op` to check and time at `case` (all of them, or `names`). On a
    CPU the Triton rows are listed as skipped with CPU_TRITON_SKIP instead: through the
    interpreter they take minutes per table and their times describe the interpreter."""
    names = list(spec_names(op) if names is None else names)
    if dev.type != "cpu":
        return names
    for name in names:
        if name.startswith("triton/"):
            table.skipped[f"{name} @ {case}"] = CPU_TRITON_SKIP
    return [n for n in names if not n.startswith("triton/")]


def _ceilings() -> Any:
    """calibrate's cached ceilings of this device (None if never calibrated): the bound of
    the IMPLAUSIBLE check in report.violations."""
    return load_ceilings(device_peaks().name)


@functools.cache
def _event_floor_us() -> float:
    return event_floor().median_us


def _near_event_floor(timing: Any) -> bool:
    """A CUDA event-timed row within KERNEL_TIMER_FLOOR_FACTOR of the event timer's floor."""
    return (timing.timer == "bench" and timing.device.startswith("cuda")
            and timing.median_us <= KERNEL_TIMER_FLOOR_FACTOR * _event_floor_us())


def _device_rows(impl: str, case: str, call: Callable[[], Any], work: Work, *,
                 l2: str = "cold", proof: Any = None, table: Table | None = None) -> list[Row]:
    """The event-timed row of an idempotent call, and, when the call makes the host wait for
    the GPU (TimingResult.host_syncs: report() flags it), its bench_host row beside it: the
    event samples of such a call hold host gaps, so only the caller's wall time is a number
    to compare (docs/harness.md). Warm ablation rows get no host row: bench_host flushes.
    proof: the op's TimedProof (kvbench.kernels.kv_alloc.proof_<op>): the last timed call's output is
    verified, its error figures kept in table.errors."""
    timing = bench(call, l2=l2, proof=proof)
    if table is not None and timing.proof is not None:
        table.errors[f"{impl} @ {case}"] = timing.proof
    rows = [Row.from_timing(impl, case, timing, work)]
    if _near_event_floor(timing):  # the events may time the timer here: kernel time beside
        rows.append(Row.from_timing(impl, case, bench_kernel(call, l2=l2), work,
                                    note="CUPTI kernel time"))
    if timing.host_syncs and l2 == "cold":
        rows.append(Row.from_timing(impl, case, bench_host(call), work,
                                    note="syncs the host: what the caller waits"))
    return rows


def _free(*objs: Any) -> None:
    for obj in objs:
        if hasattr(obj, "free"):
            obj.free()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- paged_decode ---------------------------------------------------------------------------


def _decode_peers(pool: Any, q: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """Peers a user would pick instead, on the same inputs, built outside the timed region.

    - torch/sdpa_contiguous: SDPA on a contiguous copy of the same KV (the unpaged upper
      bound; the copy itself is the measurement mistake seed 000 warns about, so it is made
      here, untimed, and only when every sequence has the same length).
    - torch/flex_attention: torch.compile'd flex_attention on that contiguous copy (GPU only).
    - flashinfer/decode, flashinfer/decode_tc: FlashInfer's paged decode (CUDA-core and
      tensor-core kernels) on the pool's own combined buffer (GPU, fp16/bf16; see
      kvbench.measure.flashinfer_peer for where FlashInfer comes from). Planned here, untimed.
    """
    peers: dict[str, Callable[[], torch.Tensor]] = {}
    if q.is_cuda and pool.kv_dtype_name != "fp8":
        peers.update(_flashinfer_peers(pool, q))
    lens = pool.seq_lens_list
    if pool.kv_dtype_name == "fp8" or len(set(lens)) != 1:
        return peers
    length = lens[0]
    pages = -(-length // pool.page_size)
    idx = pool.block_table[:, :pages].long()

    def contiguous(cache: torch.Tensor) -> torch.Tensor:
        rows = cache[idx]  # [B, pages, page, Hkv, D]
        rows = rows.reshape(q.shape[0], pages * pool.page_size, pool.kv_heads, pool.head_dim)
        return rows[:, :length].transpose(1, 2).contiguous()  # [B, Hkv, L, D]

    k, v = contiguous(pool.k_cache), contiguous(pool.v_cache)
    q4 = q.unsqueeze(2)  # [B, Hq, 1, D]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa_contiguous(*_: Any, **__: Any) -> torch.Tensor:
        return sdpa(q4, k, v, enable_gqa=True).squeeze(2)

    peers["peer:torch/sdpa_contiguous"] = sdpa_contiguous
    if q.is_cuda:
        try:
            from torch.nn.attention.flex_attention import flex_attention

            flex = torch.compile(flex_attention, dynamic=False)

            def flex_contiguous(*_: Any, **__: Any) -> torch.Tensor:
                return flex(q4, k, v, enable_gqa=True).squeeze(2)

            peers["peer:torch/flex_attention"] = flex_contiguous
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            peers["peer:torch/flex_attention"] = partial(_raise, exc)
    return peers


def _flashinfer_peers(pool: Any, q: torch.Tensor) -> dict[str, Callable[..., torch.Tensor]]:
    """FlashInfer's two decode kernels as peers; a row that cannot run carries its reason."""
    from kvbench.measure.flashinfer_peer import make_flashinfer_decode

    peers: dict[str, Callable[..., torch.Tensor]] = {}
    for name, tensor_cores in (("decode", False), ("decode_tc", True)):
        try:
            run = make_flashinfer_decode(
                # FlashInfer's NHD layout is the combined token-major buffer only.
                pool.buffer if pool.storage == "combined" else None,
                pool.block_table, pool.seq_lens, q_heads=q.shape[1],
                use_tensor_cores=tensor_cores,
            )
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            peers[f"peer:flashinfer/{name}"] = partial(_raise, exc)
            continue

        def flashinfer_decode(q: torch.Tensor, *_: Any, _run: Any = run, **__: Any) -> Any:
            return _run(q)  # the KV arguments were bound at plan time

        peers[f"peer:flashinfer/{name}"] = flashinfer_decode
    return peers


def _raise(exc: BaseException, *_: Any, **__: Any) -> Any:
    raise exc


def decode_case(
    table: Table,
    label: str,
    batch: int,
    context: int,
    *,
    dtype: str = "fp16",
    layout: str = "fragmented",
    storage: str = "combined",
    min_l2_multiple: float | None = None,
    l2: str = "cold",
    rows: Sequence[str] | None = None,
    with_peers: bool = True,
) -> None:
    """Check then time every paged_decode row (and peers) on one fixture construction."""
    dev = _device()
    _free()  # the previous case's tensors are gone once its function returned
    mult = (8 if dev.type == "cuda" else 0) if min_l2_multiple is None else min_l2_multiple
    pool = paged_pool(  # dtype by name: the pool's names are the table's
        batch, context, kv_heads=KV_HEADS, head_dim=HEAD_DIM, page_size=PAGE_SIZE,
        dtype=dtype, layout=layout, storage=storage, min_l2_multiple=mult, device=dev,
    )
    q = make_decode_query(pool, Q_HEADS)
    args = (q, pool.k_cache, pool.v_cache, pool.block_table, pool.seq_lens)
    kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    work = paged_decode_work(
        pool.seq_lens_list, q_heads=Q_HEADS, kv_heads=KV_HEADS, head_dim=HEAD_DIM,
        kv_dtype=dtype, q_bytes=q.element_size(), page_size=PAGE_SIZE,
    )
    case = f"{label} {dtype}" + ("" if (layout, storage) == ("fragmented", "combined") else f" {layout}/{storage}")
    if mult not in (0, 8):
        case += f" pool>={mult:g}xL2"
    table.explains[case] = _auto_explain("paged_decode", lambda: paged_decode(*args, **kwargs))
    candidates: dict[str, Callable[..., Any]] = {}
    for name in _timed_rows(table, "paged_decode", case, dev, rows):
        try:
            candidates[name] = _run_forced("paged_decode", name, lambda: paged_decode(*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - an unavailable row is listed with its reason
            _skip(table, f"{name} @ {case}", exc)
    if with_peers:
        candidates.update(_decode_peers(pool, q))
    for name, fn in candidates.items():
        progress.report(f"{name} @ {case}", rows=len(table.rows))
        call = partial(fn, *args, **kwargs)
        try:
            table.checks[f"{name} @ {case}"] = check_paged_decode(fn, pool, q)
            proof = proof_paged_decode(fn, pool, q)
            table.rows.extend(_device_rows(name, case, call, work, l2=l2, proof=proof,
                                           table=table))
        except Exception as exc:  # noqa: BLE001
            _skip(table, f"{name} @ {case}", exc)
    if dev.type == "cuda":
        _page_read_row(table, case, pool, l2)
    _free(pool)  # the caller's next case starts with empty_cache(), after these locals die


def _page_read_row(table: Table, case: str, pool: Any, l2: str) -> None:
    """``bound:page_read``: the case's pages read through their index and nothing else, under
    the same timer. The read ceiling is measured on 2 GiB; at a small case no kernel reaches
    it, and this row is what reading the bytes alone costs at that size (docs/harness.md).
    GPU only (a Triton kernel; the interpreter is not timed)."""
    from kvbench.harness.stream_read import page_read_fn
    from kvbench.kernels._device import sm_count

    name = f"{PAGE_READ_BOUND} @ {case}"
    work = page_read_work(
        pool.seq_lens_list, kv_heads=pool.kv_heads, head_dim=pool.head_dim,
        kv_dtype=pool.kv_dtype_name, page_size=pool.page_size,
    )
    try:
        read = page_read_fn(pool.k_cache, pool.v_cache, pool.attended_page_ids(), sm_count(pool.device))
        table.checks[name] = check_page_read(read, pool)
        timing = bench(read, l2=l2)
    except Exception as exc:  # noqa: BLE001 - reported like any row that cannot run
        _skip(table, name, exc)
        return
    table.rows.append(Row.from_timing(PAGE_READ_BOUND, case, timing, work))


def table_paged_decode(*, grid: bool = False, ablations: bool = True,
                       table: Table | None = None) -> Table:
    table = Table("paged_decode") if table is None else table
    on_gpu = torch.cuda.is_available()
    cases = (DECODE_GRID_GPU if grid else DECODE_CASES_GPU) if on_gpu else DECODE_CASES_CPU
    for label, b, c in cases:
        decode_case(table, label, b, c)
    # Every dtype path is its own bottleneck (seed 000): fp8 and bf16 rows at the big cases.
    big = [cases[-1]] + ([cases[1]] if on_gpu else [])
    for label, b, c in big:
        for dtype in ("bf16", "fp8"):
            decode_case(table, label, b, c, dtype=dtype, with_peers=False)
    if ablations:
        label, b, c = cases[-1]
        for layout, storage in (
            ("contiguous", "combined"), ("fragmented", "split"), ("fragmented", "head_major"),
            ("fragmented", "v_dim_major"),
        ):
            decode_case(table, label, b, c, layout=layout, storage=storage, with_peers=False)
        # Dim-major V pages are the fp8 kernel's layout lever (docs/perf-notes.md, experiment
        # 16): its fp8 row beside the fp16 one above, for the fp8 / fp16 ratio in one storage.
        decode_case(table, label, b, c, dtype="fp8", storage="v_dim_major", with_peers=False)
        if on_gpu:
            decode_case(table, label, b, c, min_l2_multiple=32, with_peers=False)
            decode_case(table, label + " warm-L2", b, c, l2="warm", with_peers=False)
    return table


# ---- kv_write --------------------------------------------------------------------------------


def _graph_row(fn: Callable[[], Any]) -> Callable[[], Any]:
    """`fn` captured in a CUDA graph: the replay shows device time without launch overhead."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # warm up on the side stream, as CUDA graph capture requires
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def write_case(table: Table, label: str, n: int, dtype: str, *, storage: str = "combined",
               order: str = "scattered") -> None:
    """Check then time every kv_write row writing ``n`` tokens into a fresh pool (plus a CUDA
    graph replay beside each decode-size row on a GPU); ``order``: the slots' order
    (make_write_inputs)."""
    dev = _device()
    on_gpu = dev.type == "cuda"
    seqs = max(1, -(-n // 4096))
    pool = paged_pool(
        seqs, 4096, kv_heads=KV_HEADS, head_dim=HEAD_DIM, page_size=PAGE_SIZE,
        dtype=dtype, storage=storage, min_l2_multiple=8 if on_gpu else 0, device=dev,
    )
    k, v, slots = make_write_inputs(pool, n, order=order)
    args = (k, v, pool.k_cache, pool.v_cache, slots)
    kwargs = {"k_scale": pool.k_scale, "v_scale": pool.v_scale}
    work = kv_write_work(
        n, kv_heads=KV_HEADS, head_dim=HEAD_DIM, in_bytes=k.element_size(), cache_dtype=dtype,
    )
    case = (f"{label} {dtype}" + ("" if storage == "combined" else f" {storage}")
            + ("" if order == "scattered" else f" {order}-order"))
    table.explains[case] = _auto_explain("kv_write", lambda: kv_write(*args, **kwargs))
    for name in _timed_rows(table, "kv_write", case, dev):
        progress.report(f"{name} @ {case}", rows=len(table.rows))
        try:
            fn = _run_forced("kv_write", name, lambda: kv_write(*args, **kwargs))
            table.checks[f"{name} @ {case}"] = check_kv_write(fn, pool, k, v, slots)
            call = partial(fn, *args, **kwargs)
            proof = proof_kv_write(fn, pool, k, v, slots)
            rows = _device_rows(name, case, call, work, proof=proof, table=table)
            table.rows.extend(rows)
        except Exception as exc:  # noqa: BLE001
            _skip(table, f"{name} @ {case}", exc)
            continue
        if rows[0].host_syncs:
            continue  # a call that waits for the host cannot be captured in a graph
        if on_gpu and n <= 64:
            try:
                replay = _graph_row(call)
                table.rows.append(
                    Row.from_timing(name, case, bench(replay, proof=proof), work,
                                    note="CUDA graph replay")
                )
            except Exception as exc:  # noqa: BLE001 - a row that syncs cannot be captured
                _skip(table, f"{name} @ {case} (CUDA graph)",
                      RuntimeError(f"not capturable in a CUDA graph: {exc}"))
    _free(pool)


def table_kv_write(*, table: Table | None = None) -> Table:
    table = Table("kv_write") if table is None else table
    cases = WRITE_CASES_GPU if _device().type == "cuda" else WRITE_CASES_CPU
    for label, n in cases:
        for dtype in ("fp16", "bf16", "fp8"):
            write_case(table, label, n, dtype)
    # What writing dim-major V pages costs (the fp8 decode's layout, docs/perf-notes.md
    # experiment 16): scattered slots (the cases above) and a prefill's slots in page order,
    # where a page's run of V rows can be stored as vectors; token-major beside it.
    label, n = cases[0]
    for dtype in ("fp16", "fp8"):
        write_case(table, label, n, dtype, storage="v_dim_major")
        for storage in ("combined", "v_dim_major"):
            write_case(table, label, n, dtype, storage=storage, order="pages")
    return table


# ---- kv_gather_fp8 ---------------------------------------------------------------------------


def table_kv_gather_fp8(*, table: Table | None = None) -> Table:
    from kvbench.fixtures.gather_pool import (
        TOPK_PAD_ROWS,
        build_gather_pool,
        build_page_table_flat,
        gather_pool_tokens,
    )

    table = Table("kv_gather_fp8") if table is None else table
    dev = _device()
    cases = GATHER_CASES_GPU if dev.type == "cuda" else GATHER_CASES_CPU
    pool_tokens = gather_pool_tokens(max(n for _, n in cases), dev)
    kv_cache = build_gather_pool(pool_tokens, device=dev)
    for label, kv_len in cases:
        pt = build_page_table_flat([kv_len], pool_tokens, device=dev)
        work = kv_gather_fp8_work(kv_len, TOPK_PAD_ROWS)
        case = f"{label}+{TOPK_PAD_ROWS}pad"
        table.explains[case] = _auto_explain(
            "kv_gather_fp8", lambda: kv_gather_fp8(kv_cache, pt, extra_rows=TOPK_PAD_ROWS)  # noqa: B023 - called before the loop moves on
        )
        for name in _timed_rows(table, "kv_gather_fp8", case, dev):
            progress.report(f"{name} @ {case}", rows=len(table.rows))
            try:
                fn = _run_forced(
                    "kv_gather_fp8", name,
                    lambda: kv_gather_fp8(kv_cache, pt, extra_rows=TOPK_PAD_ROWS),  # noqa: B023 - called before the loop moves on
                )
                table.checks[f"{name} @ {case}"] = check_kv_gather_fp8(fn, kv_cache, pt, TOPK_PAD_ROWS)
                call = partial(fn, kv_cache, pt, extra_rows=TOPK_PAD_ROWS)
                proof = proof_kv_gather_fp8(fn, kv_cache, pt, TOPK_PAD_ROWS)
                table.rows.extend(_device_rows(name, case, call, work, proof=proof, table=table))
            except Exception as exc:  # noqa: BLE001
                _skip(table, f"{name} @ {case}", exc)
    return table


# ---- kv_alloc --------------------------------------------------------------------------------


def table_kv_alloc(*, table: Table | None = None) -> Table:
    """Allocator states through bench_host (host stalls are invisible to CUDA events)."""
    from kvbench.ops.kv_alloc import KVCacheManager, checked_alloc, prepare_state

    table = Table("kv_alloc") if table is None else table
    dev = _device()
    table.floor_us = host_floor(dev).median_us
    for name in spec_names("kv_alloc"):
        for state in ALLOC_STATES:
            for n in ALLOC_SIZES:
                case = f"{state} n={n}"
                progress.report(f"{name} @ {case}", rows=len(table.rows))
                try:
                    manager = KVCacheManager(ALLOC_ROWS, device=dev, impl=name)
                    held: list[torch.Tensor] = []

                    def reset(manager=manager, state=state, n=n, held=held) -> None:
                        held.clear()
                        prepare_state(manager, state, n=n)

                    def alloc(manager=manager, n=n, held=held) -> None:
                        held.append(manager.alloc(n))

                    reset()
                    checked_alloc(manager, n)  # distinct rows, all free before: gate first
                    table.checks[f"{name} @ {case}"] = 0.0
                    timing = bench_host(alloc, reset)
                    table.rows.append(
                        Row.from_timing(name, case, timing, Work(), note=f"state={state}")
                    )
                except Exception as exc:  # noqa: BLE001
                    _skip(table, f"{name} @ {case}", exc)
    # The cost of a cached dispatch decision, a tracked number of its own (issue 4).
    try:
        dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev)
        timing = bench_host(lambda: dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev))
        table.rows.append(Row.from_timing("dispatch/cached", "kv_alloc n=1", timing, Work()))
    except Exception as exc:  # noqa: BLE001
        _skip(table, "dispatch/cached", exc)
    return table


BUILDERS: dict[str, Callable[..., Table]] = {
    "paged_decode": table_paged_decode,
    "kv_write": table_kv_write,
    "kv_gather_fp8": table_kv_gather_fp8,
    "kv_alloc": table_kv_alloc,
}




def measure_floors(table: Table) -> None:
    """Measure, once, the floor of each timer the table's rows used (its host floor may be
    set already, by the allocator table), so the report and the JSON show the same floors."""
    timers = {r.timer for r in table.rows}
    if table.floor_us is None and "bench_host" in timers:
        table.floor_us = host_floor().median_us
    if table.event_floor_us is None and timers & set(EVENT_TIMERS):
        table.event_floor_us = event_floor().median_us


def bound_ratios(rows: Sequence[Row]) -> dict[str, dict[str, float]]:
    """Per case with a ``bound:page_read`` row: every other bench() row's time over the time
    of the bound measured in the same L2 state (1.0 = the row costs what reading its bytes
    costs at that size); a warm row is compared with a warm bound only, like with like."""
    bounds = {(r.case, r.l2): r.us for r in rows if r.impl == PAGE_READ_BOUND}
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        bound = bounds.get((r.case, r.l2))
        if bound is not None and r.impl != PAGE_READ_BOUND and r.timer == "bench":
            out.setdefault(r.case, {})[r.impl] = r.us / bound
    return out


#: The ops whose rows are GPU kernels (or torch's ops meant for the GPU): on a CPU their
#: numbers prove only that the suite runs. kv_alloc's host rows are real host costs anywhere.
GPU_KERNEL_OPS = ("paged_decode", "kv_write", "kv_gather_fp8")
CPU_NOTE = ("# note: CPU run of GPU kernels: these rows run torch's CPU ops at small shapes; "
            "they prove the suite runs and check correctness, not how fast the kernels are "
            "(run on a GPU for that)")


def render(table: Table, meta: dict[str, Any], *, file: Any = None) -> None:
    """Metadata header, the report (throughput first), each row over its case's bytes-only
    bound, auto's explain(), skipped rows."""
    file = sys.stdout if file is None else file  # resolved per call (redirections, capture)
    peaks = device_peaks()
    print(format_metadata(meta), file=file)
    if _device().type == "cpu" and table.op in GPU_KERNEL_OPS:
        print(CPU_NOTE, file=file)
    measure_floors(table)
    report(
        table.rows, peaks=peaks, ceilings=_ceilings(), floor_us=table.floor_us,
        event_floor_us=table.event_floor_us, ceiling=CEILING_FOR_OP[table.op],
        title=f"kvbench table {table.op}", file=file,
    )
    ratios = bound_ratios(table.rows)
    if ratios:
        print(f"\ntime / {PAGE_READ_BOUND} (the case's pages read and nothing else, same timer: "
              "1.00x costs what its bytes cost at that size):", file=file)
        for case, by_impl in ratios.items():
            cells = ", ".join(f"{impl} {ratio:.2f}x" for impl, ratio in by_impl.items())
            print(f"  {case}: {cells}", file=file)
    if table.explains:
        first = next(iter(table.explains))
        print(f"\ndispatch explain() for auto at {first}:\n{table.explains[first]}", file=file)
    if table.interrupted:
        print("\nINTERRUPTED: the rows above are those measured before the interrupt",
              file=file)
    if table.skipped:
        print(f"\nrows not measured ({len(table.skipped)}; each row and its reason in --json's "
              "\"skipped\"):", file=file)
        for line in skipped_summary(table.skipped):
            print(f"  {line}", file=file)


def skipped_summary(skipped: dict[str, str]) -> list[str]:
    """One line per reason: how many rows, which impls, at how many cases (the rows of one
    reason are usually one impl at every case, or every Triton row on a CPU)."""
    by_reason: dict[str, list[tuple[str, str]]] = {}
    for label, why in skipped.items():
        impl, _, case = label.partition(" @ ")
        by_reason.setdefault(why, []).append((impl, case))
    lines = []
    for why, labels in by_reason.items():
        impls = sorted({impl for impl, _ in labels})
        cases = {case for _, case in labels if case}
        where = f" at {len(cases)} case{'s' * (len(cases) != 1)}" if cases else ""
        count = f"{len(labels)} row{'s' * (len(labels) != 1)}"
        lines.append(f"{count} ({', '.join(impls)}){where}: {why}")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvbench table")
    parser.add_argument("op", choices=sorted(BUILDERS))
    parser.add_argument("--json", dest="json_path", type=output_path, default=None,
                        help="write the rows as JSON (the path is checked before measuring)")
    parser.add_argument("--grid", action="store_true", help="paged_decode: full batch x context grid")
    parser.add_argument("--no-ablations", action="store_true", help="paged_decode: skip ablation rows")
    parser.add_argument("--plot", metavar="PATH", type=output_path, default=None,
                        help="also draw the rows' GB/s against the spec peak and the measured "
                             "ceiling, per case (PNG/SVG/PDF by suffix; not kv_alloc)")
    args = parser.parse_args(argv)
    if args.op != "paged_decode":
        for flag, given in (("--grid", args.grid), ("--no-ablations", args.no_ablations)):
            if given:
                parser.error(f"{flag} applies to paged_decode only, not {args.op}")
    if args.plot and args.op == "kv_alloc":
        parser.error("--plot draws GB/s: kv_alloc's rows move no bytes (read its table); "
                     "--plot takes paged_decode, kv_write or kv_gather_fp8")
    kwargs: dict[str, Any] = {}
    if args.op == "paged_decode":
        kwargs = {"grid": args.grid, "ablations": not args.no_ablations}
    table = Table(args.op)
    try:
        with progress.status(f"kvbench table {args.op}"):
            table = BUILDERS[args.op](table=table, **kwargs)
    except KeyboardInterrupt:  # keep what was measured: print and write it, marked as partial
        table.interrupted = True
    meta = metadata(command="kvbench table " + " ".join(argv or sys.argv[1:]))
    render(table, meta)
    if args.json_path:  # atomically: a failed write leaves the previous file as it was
        write_json_atomic(args.json_path, table.as_json(meta), indent=2, default=str)
    if args.plot and any(r.work.moved > 0 for r in table.rows):
        from kvbench.measure.plots import plot_roofline

        print(f"roofline plot: {plot_roofline(table.as_json(meta), args.plot)}")
    if table.interrupted:
        return 130  # the shell's status for SIGINT
    if not table.rows:
        return 1
    # A row above a spec peak is a measurement bug: the run says so in its status too.
    return 2 if violations(table.rows, device_peaks(), _ceilings()) else 0


def run_all(json_dir: str | None = None) -> int:
    """The main job: every op's table on this device (CPU: torch rows, allocator, floor).

    An op that fails is reported and the others still run (exit status non-zero); the JSON
    directory is created and checked before anything is measured.
    """
    if json_dir is not None:
        try:
            os.makedirs(json_dir, exist_ok=True)
            check_writable(os.path.join(json_dir, "probe.json"))
        except (OSError, ValueError) as exc:
            raise SystemExit(f"kvbench main: --json-dir {json_dir}: {exc}") from None
    status = 0
    for op in BUILDERS:
        print(f"== kvbench table {op}: measuring ...", flush=True)
        argv = [op] + ([] if json_dir is None else ["--json", os.path.join(json_dir, f"{op}.json")])
        try:
            code = main(argv)
        except Exception as exc:  # noqa: BLE001 - one op's failure must not cost the others
            print(f"kvbench table {op} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
            code = 1
        if code == 130:  # interrupted: its rows are printed and written; stop the job there
            return code
        status |= code
        print()
    return status
