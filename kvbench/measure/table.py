"""`kvbench table <op>`: every registry row and every peer of an op, checked, then timed.

One command in place of a benchmark script per op (bench_paged_decode.py and the like), built only
from the harness (timers, Work, report, metadata), the fixture and the registry: no timing code
of its own. Per case it
  1. builds the inputs with the fixture (never torch.randn caches, never .contiguous()),
  2. forces each row through its env-var selector and dispatch, asserting that the row dispatch
     selected is the row the table names (else the table names one kernel, dispatch runs another),
  3. runs the row's correctness check against the op's torch reference (a wrong row gets no number),
  4. times it with the op's timer (bench, or bench_host for the allocator); the last timed
     call runs on a perturbed input and its output is verified too (kvbench.ops.<op>.proof_*,
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
`--geometry NAME` (or `all`) measures the decode cases at named model geometries instead
(kvbench.ops.decode_geometry: heads, head_dim, page size, window and soft-cap), fp16, with an
`auto` row beside every registry row and peer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from kvbench.core import progress
from kvbench.core.env import AUTO
from kvbench.core.jsonfile import check_writable, write_json_atomic
from kvbench.dispatch.core import dispatch, spec_names
from kvbench.fixtures.gather_pool import (
    TOPK_PAD_ROWS,
    build_gather_pool,
    build_page_table_flat,
    gather_pool_tokens,
)
from kvbench.harness import (
    Row,
    Work,
    bench,
    bench_host,
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
from kvbench.measure import pipeline
from kvbench.measure.options import add_table_arguments
from kvbench.measure.peers import decode_peers
from kvbench.measure.plots import CEILING_FOR_OP, plotting_missing
from kvbench.ops.common import OpInputs
from kvbench.ops.decode_geometry import Geometry, select_geometries
from kvbench.ops.kv_alloc import alloc_inputs
from kvbench.ops.kv_gather_fp8 import (
    gather_inputs,
)
from kvbench.ops.kv_write import (
    write_inputs,
)
from kvbench.ops.paged_decode import (
    check_page_read,
    decode_inputs,
    decode_pool,
    geometry_inputs,
    geometry_pool,
    page_read_work,
)

#: (case label, batch, context) on a GPU. The five roofline targets of the decode kernels.
DECODE_CASES_GPU: tuple[tuple[str, int, int], ...] = (
    ("b1_c4k", 1, 4096),
    ("b1_c32k", 1, 32768),
    ("b8_c4k", 8, 4096),
    ("b32_c4k", 32, 4096),
    ("b64_c8k", 64, 8192),
)
#: The full batch x context grid (`--grid`).
DECODE_GRID_GPU = tuple(
    (f"b{b}_c{c // 1024}k", b, c) for b in (1, 8, 32, 64) for c in (1024, 4096, 8192, 32768)
)
#: On a CPU only torch rows run (Triton rows need CUDA or the interpreter, which is far too
#: slow to time); the shapes are small so the main job finishes in minutes.
DECODE_CASES_CPU: tuple[tuple[str, int, int], ...] = (("b2_c512", 2, 512), ("b4_c2k", 4, 2048))

WRITE_CASES_GPU: tuple[tuple[str, int], ...] = (("prefill_16k", 16384), ("decode_64", 64),
                                                ("decode_1", 1))
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
    #: The model geometries a `--geometry` table measured (kvbench.ops.decode_geometry), by
    #: name: what its case labels' geometry names stand for.
    geometries: dict[str, dict] = field(default_factory=dict)
    #: `--kernel-time`: every GPU row also gets its CUPTI kernel time, not only the rows near
    #: the event floor (pipeline.companion_timings).
    kernel_time: bool = False

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
            "geometries": self.geometries,
            "violations": violations(self.rows, device_peaks(), _ceilings()),
        }


def _device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def _skip(table: Table, label: str, exc: BaseException) -> None:
    table.skipped[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"


def _rows_to_time(table: Table, inputs: OpInputs, case: str,
                  names: Sequence[str] | None = None) -> dict[str, Callable[..., Any]]:
    """{row name: the kernel dispatch runs for it} for the registry rows of the op (all, or
    `names`) at `case`: each selected with its selector pinned and asserted (the table never
    names one kernel while another ran). A row that cannot run here is listed as skipped with
    the reason (on a CPU: the Triton and CUDA rows, pipeline.cpu_skip)."""
    op = inputs.problem.op
    found: dict[str, Callable[..., Any]] = {}
    for name in spec_names(op) if names is None else names:
        why = pipeline.cpu_skip(name, inputs.problem.device.type)
        if why:
            table.skipped[f"{name} @ {case}"] = why
            continue
        try:
            found[name] = pipeline.select(inputs, name).target
        except Exception as exc:  # noqa: BLE001 - an unavailable row is listed with its reason
            _skip(table, f"{name} @ {case}", exc)
    return found


def _ceilings() -> Any:
    """calibrate's cached ceilings of this device (None if never calibrated): the bound of
    the IMPLAUSIBLE check in report.violations."""
    return load_ceilings(device_peaks().name)


def _measured_rows(table: Table, inputs: OpInputs, name: str, case: str,
                   fn: Callable[..., Any], *, l2: str = "cold") -> list[Row]:
    """The gate, then the rows of one kernel on one case: its event-timed row (its last timed
    call verified, the error figures kept in table.errors) and the pipeline's companion
    timings (CUPTI kernel time near the event floor; the caller's wall time for a call that
    makes the host wait). The gate's error goes to table.checks."""
    table.checks[f"{name} @ {case}"] = pipeline.check(inputs, fn)
    timing = pipeline.time_call(inputs, fn, row=name, l2=l2)
    if timing.proof is not None:
        table.errors[f"{name} @ {case}"] = timing.proof
    rows = [Row.from_timing(name, case, timing, inputs.work)]
    for extra, note in pipeline.companion_timings(inputs, fn, timing, l2=l2,
                                                  kernel_time=table.kernel_time):
        rows.append(Row.from_timing(name, case, extra, inputs.work, note=note))
    return rows


def _free(*objs: Any) -> None:
    for obj in objs:
        if hasattr(obj, "free"):
            obj.free()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# ---- paged_decode ---------------------------------------------------------------------------


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
    geometry: Geometry | None = None,
) -> None:
    """Check then time every paged_decode row (and peers) on one fixture construction.

    ``geometry``: a model geometry (kvbench.ops.decode_geometry) instead of the default one:
    its heads, head_dim, page size and decode options, its name in the case label, and an
    `auto` row beside the others (the row dispatch picks for this geometry, reported with
    that row's timing)."""
    dev = _device()
    _free()  # the previous case's tensors are gone once its function returned
    layout_kw = {"layout": layout, "storage": storage, "min_l2_multiple": min_l2_multiple}
    if geometry is None:
        pool = decode_pool(batch, context, dtype, dev, **layout_kw)
        inputs = decode_inputs(pool)
    else:
        pool = geometry_pool(geometry, batch, context, dtype, dev, **layout_kw)
        inputs = geometry_inputs(geometry, pool)
        table.geometries[geometry.name] = geometry.as_dict()
    case = f"{label} {dtype}" + ("" if (layout, storage) == ("fragmented", "combined")
                                 else f" {layout}/{storage}")
    if min_l2_multiple not in (None, 0, 8):
        case += f" pool>={min_l2_multiple:g}xL2"
    if geometry is not None:
        case += f" {geometry.name}"
    table.explains[case] = pipeline.explain(inputs)
    candidates = _rows_to_time(table, inputs, case, rows)
    if with_peers:
        candidates.update(decode_peers(pool, inputs.extra["q"], **inputs.extra["options"]))
    for name, fn in candidates.items():
        progress.report(f"{name} @ {case}", rows=len(table.rows))
        try:
            table.rows.extend(_measured_rows(table, inputs, name, case, fn, l2=l2))
        except Exception as exc:  # noqa: BLE001
            _skip(table, f"{name} @ {case}", exc)
    if geometry is not None:
        _auto_rows(table, inputs, case)
    if dev.type == "cuda":
        if inputs.extra["options"].get("window") is None:
            _page_read_row(table, case, pool, l2)
        else:
            table.skipped[f"{PAGE_READ_BOUND} @ {case}"] = (
                "reads every attended page; a windowed decode reads the window's pages only, "
                "so there is no like-for-like bound")
    _free(pool)  # the caller's next case starts with empty_cache(), after these locals die


def _auto_rows(table: Table, inputs: OpInputs, case: str) -> None:
    """`auto` at this case: the row dispatch picks (its selector unpinned), reported with the
    rows that row got here and its name in the note. The pick is the same kernel on the same
    inputs, checked and timed above; timing it again would add only noise to the comparison
    of auto with the fastest row. A pick that has no number here is listed as not measured."""
    label = f"{AUTO} @ {case}"
    try:
        picked = pipeline.select(inputs, AUTO).spec.name
    except Exception as exc:  # noqa: BLE001 - reported like any row that cannot run
        _skip(table, label, exc)
        return
    timed = [r for r in table.rows if r.impl == picked and r.case == case]
    if not timed:
        why = table.skipped.get(f"{picked} @ {case}", "not measured")
        table.skipped[label] = f"auto picks {picked}, which has no number here: {why}"
        return
    table.checks[label] = table.checks[f"{picked} @ {case}"]
    table.rows.extend(replace(r, impl=AUTO, note="; ".join(filter(None, (f"ran {picked}", r.note))))
                      for r in timed)


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
        read = page_read_fn(pool.k_cache, pool.v_cache, pool.attended_page_ids(),
                            sm_count(pool.device))
        table.checks[name] = check_page_read(read, pool)
        timing = bench(read, l2=l2)
    except Exception as exc:  # noqa: BLE001 - reported like any row that cannot run
        _skip(table, name, exc)
        return
    table.rows.append(Row.from_timing(PAGE_READ_BOUND, case, timing, work))


def table_paged_decode(*, grid: bool = False, ablations: bool = True,
                       geometries: Sequence[Geometry] = (),
                       table: Table | None = None) -> Table:
    """The decode table: every row and peer at the default geometry's cases, then bf16 / fp8
    and the layout ablations; with `geometries` (`--geometry`), instead every row, auto and
    the peers at each of those model geometries' cases, fp16 (the same cases, or the grid)."""
    table = Table("paged_decode") if table is None else table
    on_gpu = torch.cuda.is_available()
    cases = (DECODE_GRID_GPU if grid else DECODE_CASES_GPU) if on_gpu else DECODE_CASES_CPU
    if geometries:
        for geometry in geometries:
            for label, b, c in cases:
                decode_case(table, label, b, c, geometry=geometry)
        return table
    for label, b, c in cases:
        decode_case(table, label, b, c)
    # Every dtype path is its own bottleneck (fp8 decode is dequant-bound where fp16 is
    # bandwidth-bound, so fp8 is not a dtype column): fp8 and bf16 rows at the big cases.
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
        # Dim-major V pages are the fp8 kernel's layout lever (docs/decisions.md, "fp8
        # dim-major V pages"): its fp8 row beside the fp16 one above, for the fp8 / fp16 ratio
        # in one storage.
        decode_case(table, label, b, c, dtype="fp8", storage="v_dim_major", with_peers=False)
        if on_gpu:
            decode_case(table, label, b, c, min_l2_multiple=32, with_peers=False)
            decode_case(table, label + " warm-L2", b, c, l2="warm", with_peers=False)
    return table


# ---- kv_write --------------------------------------------------------------------------------


def write_case(table: Table, label: str, n: int, dtype: str, *, storage: str = "combined",
               order: str = "scattered") -> None:
    """Check then time every kv_write row writing ``n`` tokens into a fresh pool (plus a CUDA
    graph replay beside each decode-size row on a GPU); ``order``: the slots' order
    (make_write_inputs)."""
    dev = _device()
    pool = decode_pool(max(1, -(-n // 4096)), 4096, dtype, dev, storage=storage)
    inputs = write_inputs(pool, n, order=order)
    case = (f"{label} {dtype}" + ("" if storage == "combined" else f" {storage}")
            + ("" if order == "scattered" else f" {order}-order"))
    table.explains[case] = pipeline.explain(inputs)
    for name, fn in _rows_to_time(table, inputs, case).items():
        progress.report(f"{name} @ {case}", rows=len(table.rows))
        try:
            rows = _measured_rows(table, inputs, name, case, fn)
            table.rows.extend(rows)
        except Exception as exc:  # noqa: BLE001
            _skip(table, f"{name} @ {case}", exc)
            continue
        if rows[0].host_syncs or dev.type != "cuda" or n > 64:
            continue  # a call that waits for the host cannot be captured in a graph
        try:
            timing = pipeline.graph_replay_timing(inputs, fn)
            table.rows.append(Row.from_timing(name, case, timing, inputs.work,
                                              note="CUDA graph replay"))
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
    # What writing dim-major V pages costs (the fp8 decode's layout, docs/decisions.md,
    # "Dim-major V writes"): scattered slots (the cases above) and a prefill's slots in page order,
    # where a page's run of V rows can be stored as vectors; token-major beside it.
    label, n = cases[0]
    for dtype in ("fp16", "fp8"):
        write_case(table, label, n, dtype, storage="v_dim_major")
        for storage in ("combined", "v_dim_major"):
            write_case(table, label, n, dtype, storage=storage, order="pages")
    return table


# ---- kv_gather_fp8 ---------------------------------------------------------------------------


def table_kv_gather_fp8(*, table: Table | None = None) -> Table:
    table = Table("kv_gather_fp8") if table is None else table
    dev = _device()
    cases = GATHER_CASES_GPU if dev.type == "cuda" else GATHER_CASES_CPU
    pool_tokens = gather_pool_tokens(max(n for _, n in cases), dev)
    kv_cache = build_gather_pool(pool_tokens, device=dev)
    for label, kv_len in cases:
        pt = build_page_table_flat([kv_len], pool_tokens, device=dev)
        inputs = gather_inputs(kv_cache, pt, TOPK_PAD_ROWS)
        case = f"{label}+{TOPK_PAD_ROWS}pad"
        table.explains[case] = pipeline.explain(inputs)
        for name, fn in _rows_to_time(table, inputs, case).items():
            progress.report(f"{name} @ {case}", rows=len(table.rows))
            try:
                table.rows.extend(_measured_rows(table, inputs, name, case, fn))
            except Exception as exc:  # noqa: BLE001
                _skip(table, f"{name} @ {case}", exc)
    return table


# ---- kv_alloc --------------------------------------------------------------------------------


def table_kv_alloc(*, table: Table | None = None) -> Table:
    """Allocator states through the host timer (host stalls are invisible to CUDA events)."""
    table = Table("kv_alloc") if table is None else table
    dev = _device()
    table.floor_us = host_floor(dev).median_us
    for state in ALLOC_STATES:
        for n in ALLOC_SIZES:
            case = f"{state} n={n}"
            inputs = alloc_inputs(ALLOC_ROWS, n, dev, states=(state,))
            for name, fn in _rows_to_time(table, inputs, case).items():
                progress.report(f"{name} @ {case}", rows=len(table.rows))
                try:
                    rows = _measured_rows(table, inputs, name, case, fn)
                    table.rows.extend(replace(r, note=f"state={state}") for r in rows)
                except Exception as exc:  # noqa: BLE001
                    _skip(table, f"{name} @ {case}", exc)
    # The cost of a cached dispatch decision, a tracked number of its own.
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
    add_table_arguments(parser)
    args = parser.parse_args(argv)
    if args.op != "paged_decode":
        for flag, given in (("--grid", args.grid), ("--no-ablations", args.no_ablations),
                            ("--geometry", args.geometry is not None)):
            if given:
                parser.error(f"{flag} applies to paged_decode only, not {args.op}")
    geometries: tuple[Geometry, ...] = ()
    if args.geometry is not None:
        try:
            geometries = select_geometries(args.geometry)
        except ValueError as exc:
            parser.error(f"--geometry: {exc}")
    if args.grid and not torch.cuda.is_available():
        parser.error(f"--grid is the GPU's batch x context grid ({len(DECODE_GRID_GPU)} cases); "
                     "this machine has no CUDA device, and its table runs the small CPU cases")
    if args.kernel_time and not torch.cuda.is_available():
        parser.error("--kernel-time reads CUPTI kernel times and needs a CUDA device; this "
                     "machine has none (the table's event and host timers run without it)")
    if args.plot and args.op == "kv_alloc":
        parser.error("--plot draws GB/s: kv_alloc's rows move no bytes (read its table); "
                     "--plot takes paged_decode, kv_write or kv_gather_fp8")
    if args.plot and plotting_missing():
        parser.error(f"--plot: {plotting_missing()}")
    kwargs: dict[str, Any] = {}
    if args.op == "paged_decode":
        kwargs = {"grid": args.grid, "ablations": not args.no_ablations,
                  "geometries": geometries}
    table = Table(args.op, kernel_time=args.kernel_time)
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
