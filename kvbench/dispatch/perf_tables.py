"""Perf tables: the stored latencies the default perf provider ranks rows by.

`kvbench tune <op>` (kvbench.measure.tune) measures them; this module only reads, checks and
writes the files, so dispatch (which decides, never measures) can use them. The table is JSON
under the kvbench cache root (kvbench.core.paths: <cache root>/perf, KVBENCH_CACHE_DIR moves
the root), one file per (device name, op):

    {"schema": 1, "device_name", "op", "kvbench_commit", "date", "metadata",
     "entries": [{"bucket", "spec", "dtype", "tags", "us", "case", "timer", "l2", "error"}]}

Units: entries store MICROSECONDS ("us"); the provider built from them returns milliseconds
(the provider convention), and dispatch converts back in core._provider_us.

A table is used only for the exact device name it was measured on: numbers from another GPU
(or from a CPU run through the Triton interpreter) never rank rows here. Each entry carries the
dtype it was measured at, and the provider answers only for that dtype (a row's rank can change
with the dtype); likewise the layout tags: an entry answers problems with exactly its tags, and
an entry without tags (tables written before they were recorded) answers any. A stored table
that cannot be read whole is moved aside (``<name>.corrupt-<UTC time>``), never overwritten,
and its valid entries are kept. Writes are atomic (kvbench.core.jsonfile).
"""

from __future__ import annotations

import json
import math
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from kvbench.core import paths
from kvbench.core.dtypes import ROW_DTYPES
from kvbench.core.jsonfile import move_aside, write_json_atomic
from kvbench.dispatch.registry import BUCKETS, TUNED_DTYPE, validate_op

SCHEMA = 1
#: (op, bucket, spec name, device name, dtype, tags) -> milliseconds, or None if unmeasured.
PerfProvider = Callable[[str, str, str, str, str, frozenset[str]], "float | None"]


def tables_dir(*, create: bool = True) -> Path:
    """The perf tables' folder under the cache root (kvbench.core.paths); create=False for
    readers, which must not create folders."""
    return paths.perf_tables_dir(create=create)


def _slug(device_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", device_name).strip("_") or "device"


def table_path(device_name: str, op: str, *, create: bool = True) -> Path:
    return tables_dir(create=create) / f"{_slug(device_name)}__{validate_op(op)}.json"


def write_table(path: Path, data: dict) -> None:
    write_json_atomic(path, data, indent=2, default=str)  # a reader sees old or new, never torn


def table_entries(
    data: object, device_name: str, op: str
) -> list[tuple[str, str, str, frozenset[str] | None, float]]:
    """(bucket, spec, dtype, tags, us) of a stored table of `op`, or ValueError saying what is
    wrong (the file, or its first unusable entry).

    An entry's dtype is its own "dtype", else the table's, else the dtype `kvbench tune`
    measures the op at (CASES): tables written before entries carried one. Its tags are its
    "tags" (a list of layout tags), or None for an entry written before tags were recorded."""
    entries = _table_header(data, device_name, op)
    return [_table_entry(i, e, data, op) for i, e in enumerate(entries)]


def _table_header(data: object, device_name: str, op: str) -> list:
    """The entries list of a stored table whose schema, op and device match; ValueError
    otherwise."""
    if not isinstance(data, dict):
        # ValueError, like json's own: the caller handles every unusable file the same way.
        raise ValueError(f"a JSON object was expected, got {type(data).__name__}")  # noqa: TRY004
    if data.get("op", op) != op:
        raise ValueError(f"it holds op {data.get('op')!r}, its file name says {op!r}")
    if data.get("schema") != SCHEMA:
        raise ValueError(f"schema {data.get('schema')!r}, this kvbench reads schema {SCHEMA}")
    if data.get("device_name") != device_name:
        raise ValueError(f"it was measured on {data.get('device_name')!r}, not {device_name!r}")
    entries = data.get("entries")
    if not isinstance(entries, list):
        raise ValueError(f"'entries' must be a list, got {type(entries).__name__}")  # noqa: TRY004
    return entries


def _table_entry(
    i: int, e: object, data: dict, op: str
) -> tuple[str, str, str, frozenset[str] | None, float]:
    """(bucket, spec, dtype, tags, us) of entries[i] of a table, or ValueError naming it."""
    value = e.get("us") if isinstance(e, dict) else None
    if not (isinstance(e, dict) and isinstance(e.get("bucket"), str)
            and isinstance(e.get("spec"), str) and isinstance(value, (int, float))
            and not isinstance(value, bool) and math.isfinite(value) and value > 0):
        raise ValueError(
            f"entries[{i}] must be an object with string 'bucket' and 'spec' and a positive "
            f"finite number 'us', got {e!r}"
        )
    dtype = e.get("dtype", data.get("dtype") or TUNED_DTYPE[op])
    if dtype not in ROW_DTYPES:
        raise ValueError(f"entries[{i}] has dtype {dtype!r}; accepted: {ROW_DTYPES}")
    tags = e.get("tags")
    if tags is not None and not (isinstance(tags, list)
                                 and all(isinstance(t, str) for t in tags)):
        raise ValueError(f"entries[{i}] has tags {tags!r}; a list of strings was expected")
    return e["bucket"], e["spec"], dtype, None if tags is None else frozenset(tags), float(value)


def repair_stored_table(device_name: str, op: str) -> Path | None:
    """Before a tune writes `op`'s table: if the stored one cannot be read whole, move it
    aside and keep what can still be used. Returns the aside path, or None when the file is
    absent or sound.

    The file is renamed ``<name>.corrupt-<UTC time>`` (its bytes unchanged: nothing the user
    stored is lost) and a UserWarning names both paths. When its header is sound, its valid
    entries are written back (atomically) as the table the tune then merges into, so one bad
    entry costs that entry only, never the other dtypes' and layouts' measurements. A file
    that cannot be moved aside stops the tune with a RuntimeError, before any measurement,
    rather than be overwritten."""
    path = table_path(device_name, op)
    if not path.exists():
        return None
    kept: list[dict] = []
    try:
        data = json.loads(path.read_text())
        entries = _table_header(data, device_name, op)
    except (OSError, ValueError) as exc:
        problem = f"it cannot be read ({exc}); none of its entries could be kept"
    else:
        errors = []
        for i, e in enumerate(entries):
            try:
                _table_entry(i, e, data, op)
                kept.append(e)
            except ValueError as exc:
                errors.append(str(exc))
        if not errors:
            return None
        problem = (f"{len(errors)} of its {len(entries)} entries are unusable "
                   f"({'; '.join(errors)});"
                   f" its {len(kept)} valid entries stay in the table")
    try:
        aside = move_aside(path)
    except OSError as exc:
        raise RuntimeError(
            f"perf table {path} is unusable and could not be moved aside ({exc}); "
            "move or fix it by hand, then run `kvbench tune` again"
        ) from exc
    if kept:
        write_table(path, {**data, "entries": kept})
    warnings.warn(f"perf table {path}: {problem}; moved it to {aside}", stacklevel=2)
    return aside


#: The versions a perf table's timings depend on besides the device: a table measured under
#: another torch or triton may rank rows by kernels that have since been recompiled.
_VERSION_KEYS = ("torch", "triton")


def _stale_versions(data: dict) -> str | None:
    """'torch X (now Y), ...' for each version that differs from this process's, in the
    table's header or in an entry's own provenance ("measured_under": entries carried over
    from an older run keep theirs), or None. A table without either (hand-written, tests) is
    not judged."""
    from kvbench.core.versions import triton_version

    now = {"torch": str(torch.__version__), "triton": triton_version()}  # as metadata() writes them
    recorded = [data.get("metadata")] + [e.get("measured_under") for e in data.get("entries", ())
                                         if isinstance(e, dict)]
    changed = sorted({f"{key} {r[key]} (now {now[key]})" for r in recorded
                      if isinstance(r, dict) for key in _VERSION_KEYS
                      if r.get(key) is not None and r.get(key) != now.get(key)})
    return ", ".join(changed) or None


def load_perf_table(device_name: str) -> PerfProvider:
    """A perf provider over the tables stored for `device_name` (ms, or None if unmeasured).

    A file that cannot be used (unreadable, another schema or device, a malformed entry) is
    skipped with a warning that names it, what is wrong, and the command that rewrites it:
    one bad file must not break dispatch of every op. A table measured under another torch
    or triton version is used, with a warning naming the versions: its ranking is likely
    still right, but its numbers are not this software's. The provider answers None for any
    other device name.
    """
    us: dict[tuple[str, str, frozenset[str] | None, str, str], float] = {}
    try:
        directory = tables_dir(create=False)
    except paths.CacheRootError as exc:  # dispatch goes on, ranked by the preference rules
        warnings.warn(f"ignoring perf tables: {exc}", stacklevel=2)
        directory = None
    for op in BUCKETS if directory is not None else ():
        path = directory / f"{_slug(device_name)}__{op}.json"
        if not path.exists():
            continue
        try:
            data = json.loads(path.read_text())
            entries = table_entries(data, device_name, op)
        except (OSError, ValueError) as exc:
            warnings.warn(f"ignoring perf table {path}: {exc}; re-run `kvbench tune {op}` (it "
                          "moves the file aside and keeps its valid entries)", stacklevel=2)
            continue
        stale = _stale_versions(data)
        if stale:
            warnings.warn(f"perf table {path} was measured under {stale}; dispatch still ranks "
                          f"by it: re-run `kvbench tune {op}`", stacklevel=2)
        for bucket_name, spec_name, dtype, tags, value in entries:
            us[(op, dtype, tags, bucket_name, spec_name)] = value

    def provider(
        op: str, bucket_name: str, spec_name: str, dev_name: str, dtype: str,
        tags: frozenset[str],
    ) -> float | None:
        """The entry measured at exactly these tags, else one recorded without tags."""
        if dev_name != device_name:
            return None
        value = us.get((op, dtype, frozenset(tags), bucket_name, spec_name))
        if value is None:
            value = us.get((op, dtype, None, bucket_name, spec_name))
        return None if value is None else value / 1000.0  # table µs -> provider ms

    provider.device_name = device_name  # type: ignore[attr-defined]
    provider.entries = len(us)  # type: ignore[attr-defined]
    return provider


_LOADED: dict[str, PerfProvider] = {}


def stored_tables_provider(
    op: str, bucket_name: str, spec_name: str, dev_name: str, dtype: str, tags: frozenset[str]
) -> float | None:
    """The default provider: stored tables for `dev_name`, loaded once per process and name."""
    provider = _LOADED.get(dev_name)
    if provider is None:
        provider = _LOADED[dev_name] = load_perf_table(dev_name)
    return provider(op, bucket_name, spec_name, dev_name, dtype, tags)


def clear_table_cache() -> None:
    """Forget loaded tables (after writing one, or when KVBENCH_CACHE_DIR changes); the caller
    also drops cached decisions (kvbench.dispatch.core.reload_perf_tables does both)."""
    _LOADED.clear()
