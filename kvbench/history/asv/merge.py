"""`kvbench merge`: the validated, atomic union of asv results folders (shards, GPU workers).

A results folder is asv's: benchmarks.json (the suite's description), and per machine a folder
holding machine.json, one result file per (commit, environment) named `<hash>-<env>.json`,
and kvbench's sidecars in its `kvbench/` sub-folder (`<hash>-<env>.<group>.kvjson`).

Rules:
- **Validated before anything is written.** Every JSON file of every input and of the target
  is read whole and parsed (a truncated or non-JSON file is a refusal naming it); the inputs
  and the target must describe one suite (every benchmark present in two of them has one
  `version`), one machine per machine name (machine.json equal) and one environment name per
  machine. A difference is a refusal that names what differs, where.
- **Duplicates.** A commit measured twice (one result file name in two places) keeps the
  target's file when the target has it: a stored number is never replaced. Between inputs,
  the file with more measured values wins, a tie going to the input named first. Each
  duplicate is reported. A kept result brings its own sidecars and no other's.
- **Atomic.** The union is staged in a folder beside the target (unchanged files hard-linked,
  new ones written from the bytes that were validated), checked again, and exchanged with the
  target in one rename (Linux renameat2 RENAME_EXCHANGE; os.replace when there is no target
  yet). An interrupted merge leaves the target as it was and a staging folder at most. Where
  the filesystem cannot exchange, the target is renamed aside first and the staged folder
  renamed into place; between the two renames the old target sits at `<target>.kvbench-old-*`
  beside it, and the error names it.
- **Locks.** Each input's and the target's machine folders are held with the recording lock
  (record.machine_lock): a folder asv is writing into is not merged.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kvbench.core.jsonfile import read_bounded
from kvbench.history.asv.record import LOCK_NAME, machine_lock

#: The largest JSON file read (asv result files of this suite are at most a few MB).
MAX_BYTES = 64 << 20
SIDECAR_DIR = "kvbench"
SIDECAR_SUFFIX = ".kvjson"


class MergeRefused(ValueError):
    """The inputs cannot be merged into the target; the message says what differs, where."""


@dataclass
class _Folder:
    """One results folder, read and parsed."""

    path: Path
    benchmarks: dict | None
    machines: dict[str, dict] = field(default_factory=dict)  # name -> machine.json
    results: dict[tuple[str, str], tuple[bytes, dict]] = field(default_factory=dict)
    sidecars: dict[tuple[str, str], bytes] = field(default_factory=dict)  # (machine, name)
    other: list[Path] = field(default_factory=list)  # files merge does not carry


@dataclass
class MergeReport:
    """What a merge did: files added to the target, duplicates and what was not carried."""

    target: Path
    added: list[str] = field(default_factory=list)  # "<machine>/<file>" result files
    sidecars: int = 0
    notes: list[str] = field(default_factory=list)  # one line per duplicate or file left


def _parse(path: Path) -> tuple[bytes, object]:
    try:
        raw = read_bounded(path, MAX_BYTES)
        return raw, json.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise MergeRefused(f"{path}: not a whole JSON file ({exc}); nothing was merged") \
            from None


def _read_folder(path: Path, *, required: bool) -> _Folder:
    """Every file merge reads under `path`, parsed; MergeRefused on the first that is not
    what asv (or the suite's sidecar writer) writes."""
    if not path.is_dir():
        if required:
            raise MergeRefused(f"{path}: no such results folder")
        return _Folder(path, None)
    bench = path / "benchmarks.json"
    benchmarks = None
    if bench.exists():
        _, benchmarks = _parse(bench)
        if not isinstance(benchmarks, dict):
            raise MergeRefused(f"{bench}: not asv's benchmarks.json (a JSON object)")
    elif required:
        raise MergeRefused(f"{path}: not an asv results folder (no benchmarks.json)")
    folder = _Folder(path, benchmarks)
    for machine_json in sorted(path.glob("*/machine.json")):
        machine = machine_json.parent.name
        _, record = _parse(machine_json)
        if not isinstance(record, dict):
            raise MergeRefused(f"{machine_json}: not asv's machine.json (a JSON object)")
        folder.machines[machine] = record
        for entry in sorted(machine_json.parent.iterdir()):
            if entry.name in ("machine.json", LOCK_NAME) or entry.name == SIDECAR_DIR:
                continue
            if entry.suffix != ".json" or not entry.is_file():
                folder.other.append(entry)
                continue
            raw, data = _parse(entry)
            _check_result(entry, data)
            folder.results[(machine, entry.name)] = (raw, data)
        sidecars = machine_json.parent / SIDECAR_DIR
        if sidecars.is_dir():
            for entry in sorted(sidecars.iterdir()):
                if entry.name.endswith(SIDECAR_SUFFIX) and entry.is_file():
                    raw, data = _parse(entry)
                    if not isinstance(data, dict):
                        raise MergeRefused(f"{entry}: not a kvbench sidecar (a JSON object)")
                    folder.sidecars[(machine, entry.name)] = raw
                else:
                    folder.other.append(entry)
    if required and not folder.machines:
        raise MergeRefused(f"{path}: holds no machine folder (no */machine.json)")
    return folder


def _check_machine_folders(target: _Folder, sources: Sequence[_Folder]) -> None:
    """MergeRefused where a source's machine has a folder in the target that is not a machine
    folder (no machine.json) and holds files: merge does not read them, so they are not known
    to be results, and the union would put the source's files beside or over them. A folder
    holding only the recording lock (machine_lock made it, for a first recording) is not
    refused: it gets its machine.json from the source."""
    for source in sources:
        for machine in source.machines:
            folder = target.path / machine
            if (folder.is_dir() and machine not in target.machines
                    and any(entry.name != LOCK_NAME for entry in folder.iterdir())):
                raise MergeRefused(f"{folder}: in the target but not an asv machine folder (no "
                                   "machine.json), so its files are not read as results; give it "
                                   "its machine.json (`kvbench machine`) or move it away first")


def _write_new(path: Path, raw: bytes) -> None:
    """`raw` as a new file at `path` in the staged union. The staged tree's files are hard
    links to the target's: an existing one is never written through (that would change the
    target's file in place before any check), it refuses."""
    if path.exists():
        raise MergeRefused(f"{path.name}: the staged union already holds it from the target; "
                           "nothing was merged (a stored file is never replaced)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)


def _check_result(path: Path, data: object) -> None:
    if not isinstance(data, dict) or data.get("version") != 2:
        raise MergeRefused(f"{path}: not an asv 0.6 result file (format version 2)")
    for key, kind in (("commit_hash", str), ("env_name", str), ("results", dict),
                      ("result_columns", list)):
        if not isinstance(data.get(key), kind):
            raise MergeRefused(f"{path}: '{key}' is missing or not a {kind.__name__}")
    if not path.name.startswith(data["commit_hash"][:8]) or \
            not path.name.endswith(f"-{data['env_name']}.json"):
        raise MergeRefused(f"{path}: its name does not match its commit "
                           f"{data['commit_hash'][:8]} and environment {data['env_name']}")


def measured_values(data: dict) -> int:
    """How many finite numbers a result file's `result` column holds (its measured cases)."""
    columns = data.get("result_columns", [])
    if "result" not in columns:
        return 0
    k = columns.index("result")
    count = 0
    for row in data["results"].values():
        values = row[k] if isinstance(row, list) and k < len(row) else None
        for v in values if isinstance(values, list) else [values]:
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
                count += 1
    return count


def _check_compatible(folders: Sequence[_Folder]) -> None:
    """MergeRefused naming the first difference of suite, machine or environment."""
    versions: dict[str, tuple[object, Path]] = {}
    for f in folders:
        for name, info in (f.benchmarks or {}).items():
            if not isinstance(info, dict):
                continue
            version = info.get("version")
            if name in versions and versions[name][0] != version:
                other = versions[name]
                raise MergeRefused(
                    f"benchmark versions differ: {name} is version {other[0]!r} in "
                    f"{other[1]} and {version!r} in {f.path}; results of two suites are "
                    "not one history")
            versions.setdefault(name, (version, f.path))
    machines: dict[str, tuple[dict, Path]] = {}
    for f in folders:
        for name, record in f.machines.items():
            if name in machines and machines[name][0] != record:
                first, where = machines[name]
                keys = sorted(k for k in set(first) | set(record) if first.get(k) != record.get(k))
                what = "; ".join(f"{k}: {first.get(k)!r} in {where}, {record.get(k)!r} in "
                                 f"{f.path}" for k in keys[:4])
                raise MergeRefused(f"machine {name!r} differs ({what}): the results of two "
                                   "machines are not one history")
            machines.setdefault(name, (record, f.path))
    envs: dict[str, tuple[set[str], Path]] = {}
    for f in folders:
        by_machine: dict[str, set[str]] = {}
        for (machine, _), (_, data) in f.results.items():
            by_machine.setdefault(machine, set()).add(data["env_name"])
        for machine, names in by_machine.items():
            if machine in envs and envs[machine][0] != names:
                first, where = envs[machine]
                raise MergeRefused(
                    f"environment names differ for machine {machine!r}: "
                    f"{', '.join(sorted(first))} in {where}, {', '.join(sorted(names))} in "
                    f"{f.path}")
            envs.setdefault(machine, (names, f.path))


def _sidecars_of(folder: _Folder, machine: str, result_name: str) -> dict[str, bytes]:
    """The sidecars of one result file (`<hash>-<env>.json`): `<hash>-<env>.*.kvjson`."""
    stem = result_name[:-len(".json")] + "."
    return {name: raw for (m, name), raw in folder.sidecars.items()
            if m == machine and name.startswith(stem)}


def plan_union(target: _Folder, sources: Sequence[_Folder], report: MergeReport
               ) -> tuple[dict[tuple[str, str], bytes], dict[tuple[str, str], bytes]]:
    """The result files and sidecars to add to the target ((machine, name) -> bytes), with
    the duplicate rule applied and every duplicate noted in `report`."""
    chosen: dict[tuple[str, str], tuple[_Folder, bytes, int]] = {}
    for source in sources:
        for key, (raw, data) in source.results.items():
            machine, name = key
            if key in target.results:
                report.notes.append(f"{machine}/{name}: in {target.path} and {source.path}; "
                                    f"kept the target's (a stored result is never replaced)")
                continue
            values = measured_values(data)
            if key in chosen:
                kept, _, kept_values = chosen[key]
                winner = source if values > kept_values else kept
                report.notes.append(
                    f"{machine}/{name}: measured in {kept.path} ({kept_values} values) and "
                    f"{source.path} ({values}); kept {winner.path}'s")
                if winner is kept:
                    continue
            chosen[key] = (source, raw, values)
    results = {key: raw for key, (_, raw, _) in chosen.items()}
    sidecars: dict[tuple[str, str], bytes] = {}
    for (machine, name), (source, _, _) in chosen.items():
        for side_name, raw in _sidecars_of(source, machine, name).items():
            if (machine, side_name) in target.sidecars:
                report.notes.append(f"{machine}/{SIDECAR_DIR}/{side_name}: already in the "
                                    "target; kept the target's")
                continue
            sidecars[(machine, side_name)] = raw
    for source in sources:
        for path in source.other:
            report.notes.append(f"{path}: not carried (not a result file or sidecar)")
    return results, sidecars


def _merged_benchmarks(target: _Folder, sources: Sequence[_Folder]) -> dict:
    """benchmarks.json of the union: every benchmark any folder describes, the description
    of the last input naming it (the suite that measured the new results), else the target's."""
    merged = dict(target.benchmarks or {})
    for source in sources:
        merged.update(source.benchmarks or {})
    return merged


def _stage(target: _Folder, sources: Sequence[_Folder], results, sidecars,
           benchmarks: dict) -> Path:
    """The union in a new folder beside the target; its path."""
    parent = target.path.parent
    staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{target.path.name}.kvbench-merge-"))
    try:
        if target.path.is_dir():
            _link_tree(target.path, staging)
        for folder in [target, *sources]:
            for machine, record in folder.machines.items():
                path = staging / machine / "machine.json"
                if not path.exists():
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(json.dumps(record, indent=4, sort_keys=True) + "\n")
        for (machine, name), raw in results.items():
            _write_new(staging / machine / name, raw)
        for (machine, name), raw in sidecars.items():
            _write_new(staging / machine / SIDECAR_DIR / name, raw)
        if benchmarks != target.benchmarks:
            bench = staging / "benchmarks.json"
            bench.unlink(missing_ok=True)  # a hard link to the target's: never written through
            bench.write_text(json.dumps(benchmarks, indent=4, sort_keys=True) + "\n")
        staged = _read_folder(staging, required=True)  # the union reads as a whole again
        expected = set(target.results) | set(results)
        if set(staged.results) != expected:
            raise MergeRefused(f"{staging}: the staged union lost result files; nothing was "
                               "merged")
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return staging


def _link_tree(source: Path, dest: Path) -> None:
    """Every file of `source` under `dest` as a hard link (a copy across filesystems): the
    staged files are only ever replaced, never written through. A recording lock file is
    linked too, so a lock held on the target's folder holds on the merged one."""
    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, dest, dirs_exist_ok=True, copy_function=link)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap the paths `a` and `b` (Linux renameat2 RENAME_EXCHANGE); False where
    the system or filesystem cannot (another OS, an old kernel or libc)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                          ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"exchanging {a} and {b}: {os.strerror(err)}")


def _swap(staging: Path, target: Path) -> None:
    """Put `staging` in place of `target` (module docstring, "Atomic")."""
    if not target.exists():
        os.replace(staging, target)
        return
    if exchange(staging, target):
        shutil.rmtree(staging)  # now the old target
        return
    old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f"{target.name}.kvbench-old-"))
    os.rmdir(old)
    os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:  # noqa: BLE001 - re-raised, naming where both folders are
        raise OSError(f"the merge stopped between two renames: the old {target} is at "
                      f"{old} and the merged one at {staging}; rename one of them back") \
            from None
    shutil.rmtree(old)


def merge(sources: Iterable[str | os.PathLike], target: str | os.PathLike, *,
          hold_target_locks: bool = True) -> MergeReport:
    """Merge the results folders `sources` into `target` (created when absent); MergeRefused
    naming what differs when they are not one history. `hold_target_locks=False` when the
    caller already holds the target's machine locks (kvbench record --gpus)."""
    target = Path(target).absolute()
    paths = [Path(s).absolute() for s in sources]
    if not paths:
        raise MergeRefused("nothing to merge: name at least one results folder")
    if target.exists() and not target.is_dir():
        raise MergeRefused(f"{target}: exists and is not a folder (--into names a results "
                           "folder, made when absent)")
    if not target.parent.is_dir():
        raise MergeRefused(f"{target}: its parent {target.parent} is not an existing folder")
    for path in paths:
        if path.resolve() == target.resolve():  # ../ and symbolic links name it too
            raise MergeRefused(f"{path} is the target itself")
    if len({p.resolve() for p in paths}) != len(paths):
        raise MergeRefused("a results folder is named twice")
    folders = [_read_folder(p, required=True) for p in paths]
    current = _read_folder(target, required=False)
    _check_compatible([current, *folders])
    _check_machine_folders(current, folders)
    report = MergeReport(target)
    results, sidecars = plan_union(current, folders, report)
    with contextlib.ExitStack() as locks:
        for folder in folders:
            for machine in folder.machines:
                locks.enter_context(machine_lock(folder.path, machine))
        if hold_target_locks:
            for machine in current.machines:
                locks.enter_context(machine_lock(target, machine))
        staging = _stage(current, folders, results, sidecars,
                         _merged_benchmarks(current, folders))
        _swap(staging, target)
    report.added = sorted(f"{machine}/{name}" for machine, name in results)
    report.sidecars = len(sidecars)
    return report
