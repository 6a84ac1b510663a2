"""`kvbench tune <op>`: measure every verified row per shape bucket; store what dispatch ranks on.

For each case (one per bucket of the op) tune builds the inputs with the project fixtures,
asks dispatch which rows pass every filter and their golden check (verified_rows), runs each
row's full-size correctness check (installed with record_golden), then times it with the
harness: bench() (cold L2) for the idempotent kernels, bench_host() for the allocator, whose
cost is the host waiting. The last timed call of a kernel runs on a perturbed input and its
output is verified (kvbench.ops.<op>.proof_<op>): a row that memoizes or skips work after its
first call raises VerificationError instead of entering the table. The table is JSON under
the kvbench cache dir (kvbench.core.paths: <cache root>/perf, KVBENCH_CACHE_DIR moves the
root), one file per (device name, op):

    {"schema": 1, "device_name", "op", "kvbench_commit", "date", "metadata",
     "entries": [{"bucket", "spec", "dtype", "tags", "us", "case", "timer", "l2", "error"}]}

plus one "any" entry per row (its worst bucket) for problems dispatched without a shape.
`kvbench tune <op> --dtype D --storage S` measures the op at another KV dtype or pool storage;
its entries replace only those of the same (dtype, tags) in the file, so one table holds every
dtype and layout tuned on the device. A stored table that cannot be read whole (a torn file,
another schema, one malformed entry) is moved aside as ``<name>.corrupt-<UTC time>`` with a
warning naming both paths before the tune measures anything, and its valid entries are kept:
no tune loses what an earlier one stored. Writes are atomic (kvbench.core.jsonfile).

Units: entries store MICROSECONDS ("us"); the perf provider built from them returns
milliseconds (the provider convention), and dispatch converts back in core._provider_us.

The default perf provider of kvbench.dispatch reads these tables lazily per device name. A
table is used only for the exact device name it was measured on: numbers from another GPU (or
from a CPU run through the Triton interpreter) never rank rows here. Each entry carries the
dtype it was measured at, and the provider answers only for that dtype: a row's rank can
change with the dtype (cuda/cluster_decode leads the Triton decode at fp16 and trails it at
fp8), so a problem of another dtype is ranked by the preference rules. Likewise the layout:
an entry carries the problem's layout tags (fp8 decode from token-major or dim-major V pages
runs different rows at different speeds) and answers problems with exactly those tags; an
entry without tags (tables written before they were recorded) answers any. By default each
op is tuned at one dtype (CASES below: fp16 for decode/write, fp8 for the gather, int64 rows
for the allocator) in the engine's storage (combined, token-major).
"""

from __future__ import annotations

import argparse
import json
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import torch

from kvbench.core.dtypes import ROW_DTYPES
from kvbench.dispatch import core
from kvbench.dispatch.core import record_golden
from kvbench.dispatch.perf_tables import (
    SCHEMA,
    repair_stored_table,
    table_entries,
    table_path,
    write_table,
)
from kvbench.dispatch.registry import ANY_BUCKET, BUCKETS, TUNED_DTYPE, validate_op
from kvbench.harness.calibrate import load_ceilings
from kvbench.measure import pipeline
from kvbench.measure.options import add_tune_arguments
from kvbench.ops import op_module
from kvbench.ops.common import OpInputs


@dataclass(frozen=True)
class TuneCase:
    """One measured case: the op, its dtype, a label and the fixture parameters.

    params per op:
      paged_decode   batch, seq_len, kv_heads, q_heads, head_dim, page_size
      kv_write       n, num_seqs, seq_len, kv_heads, head_dim, page_size
      kv_gather_fp8  kv_len, pool_tokens, extra_rows
      kv_alloc       n, num_rows
    """

    op: str
    label: str
    dtype: str
    params: dict[str, int] = field(default_factory=dict)
    storage: str = "combined"  # paged_pool's storage (paged_decode, kv_write)


def _cases(op: str, which: str) -> tuple[TuneCase, ...]:
    """The op module's tune cases (TUNE_CASES or TUNE_CASES_CPU) at the op's tuned dtype."""
    return tuple(TuneCase(op, label, TUNED_DTYPE[op], dict(params))
                 for label, params in getattr(op_module(op), which))


#: Device-sized cases, one per bucket (registry.BUCKETS order), from each op module.
CASES: dict[str, tuple[TuneCase, ...]] = {op: _cases(op, "TUNE_CASES") for op in BUCKETS}
#: CPU cases: the Triton rows run in the interpreter, so their numbers only rank interpreter
#: speed; they exist so `kvbench tune` works end to end on a developer machine and the table
#: carries the CPU's name, which no GPU will match. The allocator numbers are real host costs.
CPU_CASES: dict[str, tuple[TuneCase, ...]] = {op: _cases(op, "TUNE_CASES_CPU") for op in BUCKETS}


def tune_dtypes(op: str) -> tuple[str, ...]:
    """The dtypes `op` can be tuned at (`--dtype`): those some registered row of it serves,
    in ROW_DTYPES order (the fixtures build every one of them)."""
    rows = core.active_registry().specs(validate_op(op))
    return tuple(d for d in ROW_DTYPES if any(d in spec.dtypes for spec in rows))


#: The ops whose cases build a paged pool, so `--storage` applies.
POOL_OPS = ("paged_decode", "kv_write")


def default_cases(
    op: str, device: torch.device | str | None = None, *, dtype: str | None = None,
    storage: str | None = None,
) -> tuple[TuneCase, ...]:
    """The op's cases for the device, at `dtype` and pool `storage` when given (ValueError
    naming what is accepted otherwise)."""
    from kvbench.fixtures.pool import STORAGES

    dev = core.resolve_device(device)
    cases = (CASES if dev.type == "cuda" else CPU_CASES)[validate_op(op)]
    if dtype is not None and dtype not in tune_dtypes(op):
        raise ValueError(f"{op} is tuned at dtype {', '.join(tune_dtypes(op))}; got {dtype!r}")
    if storage is not None and op not in POOL_OPS:
        raise ValueError(f"--storage applies to {', '.join(POOL_OPS)} (a paged pool), not {op}")
    if storage is not None and storage not in STORAGES:
        raise ValueError(f"storage {storage!r} is not accepted; accepted: {STORAGES}")
    changes = {k: v for k, v in (("dtype", dtype), ("storage", storage)) if v is not None}
    if storage is not None and storage != ENGINE_STORAGE:
        same = layout_tags(op, dtype or TUNED_DTYPE[op], storage)
        if same == layout_tags(op, dtype or TUNED_DTYPE[op], ENGINE_STORAGE):
            raise ValueError(
                f"--storage {storage}: {op} calls on it carry the layout tags of the engine's "
                f"{ENGINE_STORAGE} storage ({', '.join(sorted(same)) or 'none'}), so dispatch "
                f"cannot tell them apart and its entries would replace {ENGINE_STORAGE}'s in "
                f"the perf table; `kvbench table {op}` times it (its layout ablation rows)")
    return tuple(replace(c, **changes) for c in cases) if changes else cases


#: The storage the perf tables' untagged layout stands for: the engine's combined buffer.
ENGINE_STORAGE = "combined"


def layout_tags(op: str, dtype: str, storage: str) -> frozenset[str]:
    """The layout tags dispatch sees for `op` calls on a pool of `storage`, from a pool of a
    few pages built on the CPU (tags come from strides and dtypes, not sizes; one page would
    make the combined buffer's views contiguous)."""
    small = {"batch": 2, "num_seqs": 2, "seq_len": 64, "n": 2, "kv_heads": 2, "q_heads": 2,
             "head_dim": 16, "page_size": 16}
    inputs, release = op_module(op).tune_inputs(small, dtype, storage, torch.device("cpu"))
    try:
        return frozenset(inputs.problem.tags)
    finally:
        release()


# ---- one case's inputs -----------------------------------------------------------------------


def _inputs(case: TuneCase, dev: torch.device) -> tuple[OpInputs, Callable[[], None]]:
    """The case's inputs, built by its op module (tune_inputs) on the project fixtures as the
    asv suite builds them, and what frees them."""
    return op_module(case.op).tune_inputs(case.params, case.dtype, case.storage, dev)


def tune(
    op: str,
    *,
    device: torch.device | str | None = None,
    cases: Sequence[TuneCase] | None = None,
    dtype: str | None = None,
    storage: str | None = None,
) -> dict:
    """Measure every verified row of `op` over its cases; write and install the perf table.

    `dtype` / `storage` select the default cases' KV dtype and pool storage (default_cases);
    explicit `cases` carry their own. The new entries replace those of the stored table
    measured at the same (dtype, tags), and those of that dtype without tags; the rest of the
    file is kept (an unreadable file or entry is moved aside first: repair_stored_table).
    Returns the table dict (also written to table_path(device name, op)).
    Afterwards the default perf provider is active and reads the new table.
    """
    from kvbench.harness import metadata

    validate_op(op)
    dev = core.resolve_device(device)
    name = core.device_name(dev)
    cases = tuple(default_cases(op, dev, dtype=dtype, storage=storage) if cases is None
                  else cases)
    for c in cases:
        if not isinstance(c, TuneCase) or c.op != op:
            raise ValueError(f"cases must be TuneCase entries for {op}, got {c!r}")
    repair_stored_table(name, op)  # before minutes of measuring, not after
    check_table_writable(name, op)
    entries = []
    skipped: list[dict] = []  # rows that failed their gate, proof or plausibility, with why
    picks = []  # what `auto` selects per case before this table exists, and after
    for case in cases:
        inputs, release = _inputs(case, dev)
        try:
            prob = inputs.problem
            bucket_name = prob.bucket
            picks.append({"case": case.label, "bucket": bucket_name, "problem": prob,
                          "before": _auto_pick(op, prob, dev)})
            for spec in core.verified_rows(
                op, dtype=prob.dtype, tags=prob.tags, shape=prob.shape, device=dev
            ):
                t = _measure(inputs, spec, case, skipped)
                if t is None:
                    continue
                entries.append(
                    {
                        "bucket": bucket_name,
                        "spec": spec.name,
                        "dtype": prob.dtype,
                        "tags": sorted(prob.tags),
                        "us": t.median_us,
                        "case": case.label,
                        "timer": t.timer,
                        "l2": t.l2,
                        "error": t.proof,
                    }
                )
        finally:
            release()
    entries += _any_bucket_entries(entries, len(cases))
    path = table_path(name, op)
    meta = metadata(command=_command(op, cases))
    date = datetime.now(UTC).isoformat(timespec="seconds")
    for entry in entries:
        entry["measured_under"] = provenance(meta, date)
    table = {
        "schema": SCHEMA,
        "device_name": name,
        "op": op,
        "kvbench_commit": meta.get("commit"),
        "date": date,
        "metadata": meta,
        "entries": _kept_entries(path, name, op, entries) + entries,
    }
    write_table(path, table)
    core.reload_perf_tables()
    core.reset_perf_provider()
    for pick in picks:
        pick["after"] = _auto_pick(op, pick.pop("problem"), dev)
    table["picks"] = picks
    table["skipped"] = skipped
    return table


def _measure(inputs: OpInputs, spec, case: TuneCase, skipped: list[dict]):
    """One verified row on one case through the measuring pipeline: the full-size gate
    (recorded as the row's golden record), then the timing with its last timed call verified,
    then plausibility. A row that fails any of them, or raises (a launcher's error, CUDA
    out of memory, Triton out of resources), gets no entry: it is recorded unverified (auto
    then never selects it), listed in `skipped` with the reason, and the tune goes on (the
    other rows' and cases' measurements reach the table)."""
    fn = spec.load()
    prob = inputs.problem
    try:
        diff = pipeline.check(inputs, fn)  # full-size gate before any timing
        record_golden(prob.op, spec.name, prob.dtype, prob.device, max_abs_diff=diff,
                      detail=f"tune {case.label}")
        timing = pipeline.time_call(inputs, fn, row=spec.name)
        ceilings = load_ceilings(core.device_name(prob.device))
        bad = pipeline.implausible(spec.name, timing, inputs, ceilings)
        if bad:
            raise pipeline.Implausible(bad[0])
    except Exception as exc:  # noqa: BLE001 - any failure of one row is that row's, see above
        reason = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        record_golden(prob.op, spec.name, prob.dtype, prob.device, max_abs_diff=None,
                      verified=False, detail=f"tune {case.label}: {reason}")
        skipped.append({"case": case.label, "spec": spec.name, "reason": reason})
        warnings.warn(f"kvbench tune: {spec.name} @ {case.label} gets no entry: {reason}",
                      stacklevel=3)
        return None
    return timing


def _command(op: str, cases: Sequence[TuneCase]) -> str:
    """The `kvbench tune` command that measures `cases`: --dtype / --storage where every case
    has one other than the op's default (the table's header names what its newest run was)."""
    words = [f"kvbench tune {op}"]
    for flag, values, default in (("--dtype", {c.dtype for c in cases}, TUNED_DTYPE[op]),
                                  ("--storage", {c.storage for c in cases}, ENGINE_STORAGE)):
        if len(values) == 1 and values != {default}:
            words.append(f"{flag} {values.pop()}")
    return " ".join(words)


def provenance(meta: dict, date: str | None) -> dict:
    """What an entry was measured under: the kvbench commit, torch and triton of its run and
    its date. Each entry keeps its own, since a table's header describes only its newest run
    and the entries of other dtypes and layouts are carried over from older ones."""
    return {"commit": meta.get("commit"), "torch": meta.get("torch"),
            "triton": meta.get("triton"), "date": date}


def _kept_entries(path: Path, device_name: str, op: str, new: list[dict]) -> list[dict]:
    """The stored table's entries that a run measuring `new` does not replace: those of
    another (dtype, tags), each written with its dtype and tags made explicit, and with its
    provenance (an entry of a table written before entries carried one gets that table's
    header's). An entry without tags (a table written before entries carried them) stands for
    the engine's storage (ENGINE_STORAGE), so it is replaced by a run measuring that storage at
    its dtype, and kept by a run of another storage. The table was repaired before the run
    (repair_stored_table); one that became unreadable since is moved aside the same way."""
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text())
        parsed = table_entries(data, device_name, op)
    except (OSError, ValueError):
        repair_stored_table(device_name, op)
        if not path.exists():
            return []
        data = json.loads(path.read_text())
        parsed = table_entries(data, device_name, op)
    measured = {(e["dtype"], frozenset(e["tags"])) for e in new}
    engine_tags: dict[str, frozenset[str]] = {}

    def engine_measured(dtype: str) -> bool:
        if dtype not in engine_tags:
            engine_tags[dtype] = layout_tags(op, dtype, ENGINE_STORAGE)
        return (dtype, engine_tags[dtype]) in measured

    header = data.get("metadata")
    inherited = provenance(header, data.get("date")) if isinstance(header, dict) else None
    kept = []
    for raw, (_, _, dtype, tags, _) in zip(data["entries"], parsed, strict=True):
        if (dtype, tags) in measured or (
                tags is None and any(d == dtype for d, _ in measured) and engine_measured(dtype)):
            continue
        entry = {**raw, "dtype": dtype, **({} if tags is None else {"tags": sorted(tags)})}
        if "measured_under" not in entry and inherited is not None:
            entry["measured_under"] = inherited
        kept.append(entry)
    return kept


def _auto_pick(op: str, prob, dev: torch.device) -> str:
    """The row `auto` dispatch selects for a problem with whatever perf data is active now."""
    try:
        sel = core.dispatch(op, dtype=prob.dtype, tags=prob.tags, shape=prob.shape, device=dev)
        return sel.spec.name
    except ValueError as exc:  # DispatchError: nothing can serve it; say so in the table
        return f"(none: {str(exc).splitlines()[0]})"


def _any_bucket_entries(entries: list[dict], n_cases: int) -> list[dict]:
    """Entries for the "any" bucket (problems dispatched without a shape, e.g. a
    KVCacheManager choosing its backend at construction): each row's worst case over the
    buckets, for rows measured in every case only, so no row wins by a missing bucket."""
    by_spec: dict[tuple[str, str, tuple[str, ...]], list[float]] = {}
    for e in entries:
        by_spec.setdefault((e["spec"], e["dtype"], tuple(e["tags"])), []).append(e["us"])
    return [
        {
            "bucket": ANY_BUCKET,
            "spec": spec,
            "dtype": dtype,
            "tags": list(tags),
            "us": max(us),
            "case": "worst over buckets",
            "timer": "derived",
            "l2": "-",
        }
        for (spec, dtype, tags), us in by_spec.items()
        if n_cases and len(us) == n_cases
    ]


def format_table(table: dict) -> str:
    """The stored table, grouped by (dtype, tags), each group's entries by bucket and µs."""
    def tags_of(e: dict) -> str:
        return ",".join(e["tags"]) if e.get("tags") is not None else "(any)"

    width = max([len(tags_of(e)) for e in table["entries"]] + [4])
    lines = [
        f"# {table['op']} on {table['device_name']} ({table['kvbench_commit']}, {table['date']})",
        f"{'dtype':<6} {'tags':<{width}} {'bucket':<22} {'spec':<22} {'us':>12}  case",
    ]

    def order(e: dict) -> tuple:
        return (e.get("dtype", ""), e.get("tags") or [], e["bucket"], e["us"])

    for e in sorted(table["entries"], key=order):
        lines.append(f"{e.get('dtype', '?'):<6} {tags_of(e):<{width}} {e['bucket']:<22} "
                     f"{e['spec']:<22} {e['us']:>12.2f}  {e.get('case', '')}")
    return "\n".join(lines)


def check_table_writable(device_name: str, op: str) -> None:
    """CacheRootError when the perf table of (device, op) could not be written (the cache
    root or perf/ unusable, perf/ read-only): raised before the minutes of measuring, not
    after them."""
    from kvbench.core.jsonfile import check_writable
    from kvbench.core.paths import CacheRootError

    path = table_path(device_name, op)
    try:
        check_writable(path)
    except ValueError as exc:
        raise CacheRootError(f"cannot store the perf table: {exc}") from None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kvbench tune", description=__doc__.splitlines()[0])
    add_tune_arguments(parser)
    args = parser.parse_args(argv)
    try:
        default_cases(args.op, args.device, dtype=args.dtype, storage=args.storage)
    except ValueError as exc:  # before any measurement: say what is accepted
        parser.error(str(exc))
    table = tune(args.op, device=args.device, dtype=args.dtype, storage=args.storage)
    print(format_table(table))
    print(f"stored in {table_path(table['device_name'], args.op)}")
    print("\nauto picks per case (before this table -> after it):")
    for pick in table["picks"]:
        print(f"  {pick['case']:<28} {pick['bucket']:<22} {pick['before']} -> {pick['after']}")
    for skip in table["skipped"]:
        print(f"  no entry: {skip['spec']} @ {skip['case']}: {skip['reason']}")
    return 0
