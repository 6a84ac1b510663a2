"""Golden records of registry rows: a row is verified by running its check, nothing else.

The first time dispatch considers a row for a (dtype, device kind), it imports the row's
target and runs its `golden_check` (kvbench.ops.<op>.golden_check_<op>: the op's check on a
tiny problem against the torch reference); the outcome is a GoldenRecord cached for the
process. A check that
raises, for any reason (mismatch, a kernel that fails to compile, a module that does not
exist at this commit), leaves the row unverified, and auto never selects an unverified row;
explain() prints why. Benchmarks and `kvbench tune` run the full-size check of the rows they
time and install it with record_golden(), so the record names the shapes that were measured.
"""

from __future__ import annotations

import datetime as _dt
import math

import torch

from kvbench.dispatch.spec import GoldenRecord, KernelSpec

#: (op, spec name, dtype, device kind) -> record. Per process, on purpose: a new commit or a
#: new Triton means a new process (asv spawns one per benchmark), so a stale pass cannot leak.
_RECORDS: dict[tuple[str, str, str, str], GoldenRecord] = {}


def now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    msg = text[0] if text else ""
    if len(msg) > 300:
        msg = msg[:297] + "..."
    return f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__


def run_check(spec: KernelSpec, dtype: str, device: torch.device) -> GoldenRecord:
    """Run the row's golden check now (no cache); any exception makes the record unverified."""
    try:
        fn = spec.load()
        diff = float(spec.golden_check(fn, dtype, device))
        if not math.isfinite(diff):
            raise ValueError(f"golden check returned a non-finite max_abs_diff {diff}")
    except Exception as exc:  # noqa: BLE001 - every failure means "not verified"; see explain()
        return GoldenRecord(spec.name, dtype, device.type, False, None, now(), _first_line(exc))
    return GoldenRecord(spec.name, dtype, device.type, True, diff, now(), "golden check")


def ensure_verified(spec: KernelSpec, dtype: str, device: torch.device) -> GoldenRecord:
    """The cached record for (row, dtype, device kind), running the check the first time."""
    key = (spec.op, spec.name, dtype, device.type)
    record = _RECORDS.get(key)
    if record is None:
        record = run_check(spec, dtype, device)
        _RECORDS[key] = record
    return record


def lookup(op: str, spec_name: str, dtype: str, device_kind: str) -> GoldenRecord | None:
    """The cached record, or None when the row was not checked in this process."""
    return _RECORDS.get((op, spec_name, dtype, device_kind))


def install(op: str, record: GoldenRecord) -> None:
    """Keep `record` as the verification of (op, its row, its dtype, its device kind); the
    caller (dispatch.core.record_golden) drops the decisions it may change."""
    _RECORDS[(op, record.spec_name, record.dtype, record.device_kind)] = record


def forget_all() -> None:
    """Forget every record (dispatch.core.clear_golden)."""
    _RECORDS.clear()
