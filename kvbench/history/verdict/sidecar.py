"""Read the sidecars the asv suite writes beside its results (benchmarks/runner/sidecar.py).

One file per (commit, env, measurement group) under ``<results>/<machine>/kvbench/``; this
merges a commit's groups into one view keyed like asv's params, for the regressions engine and
reports ("auto switched rows", "registers 128 -> 168", "SM clock 1980 -> 1410 MHz"). Format:
docs/harness.md, "The sidecar".

Sidecars sit in results/, which anyone can write into, so a file is read like a result file
(kvbench.history.verdict.results.read_bounded: regular files only, bounded) and checked
against every shape this module and its readers rely on; a file that fails is skipped with
its reason (`problems`), never raised, so any bytes in any sidecar cost only its context.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA = 1
SUBDIR = "kvbench"
SUFFIX = ".kvjson"


@dataclass
class CommitSidecar:
    """What the suite recorded for one commit on one machine (all groups merged).

    cases: (class name, params tuple as repr'd by the suite) -> the case's record
    ({"status": "measured" | "failed" | "skipped", ...}; docs/harness.md). states: per group,
    the NVML state list of its measurement groups; a measured record's "state" indexes its
    group's list (``state_of``).
    """

    commit: str
    machine: str
    envs: set[str] = field(default_factory=set)
    cases: dict[tuple[str, str], dict] = field(default_factory=dict)
    states: dict[str, list[dict]] = field(default_factory=dict)
    groups_of: dict[tuple[str, str], str] = field(default_factory=dict)
    #: per group, the `id` of the device that measured it (the file's "device"), if recorded
    devices: dict[str, str] = field(default_factory=dict)

    def device_of(self, key: tuple[str, str]) -> str | None:
        """The id of the device that measured the case `key` (context.case_key: its group's
        device), None where the sidecar does not record one."""
        return self.devices.get(self.groups_of.get(key, ""))

    def state_of(self, cls: str, params: tuple) -> dict | None:
        """The NVML state (before/after) of the measurement group that measured this case."""
        key = (cls, repr(tuple(params)))
        record = self.cases.get(key)
        if not record or record.get("state") is None:
            return None
        states = self.states.get(self.groups_of.get(key, ""), [])
        index = record["state"]
        # Two envs' files of one group: the later one's states replaced the earlier's.
        return states[index] if 0 <= index < len(states) else None

    def case(self, cls: str, params: tuple) -> dict | None:
        return self.cases.get((cls, repr(tuple(params))))


def sidecar_dir(results_dir: str | os.PathLike, machine: str) -> Path:
    return Path(results_dir) / machine / SUBDIR


def index(results_dir: str | os.PathLike, machine: str) -> dict[str, list[Path]]:
    """Every sidecar file of `machine`, by the commit prefix (8 characters) it is named by:
    one listing of the folder, for a reader that visits many commits (a per-commit glob
    lists the whole folder each time, which grows with the square of the history)."""
    folder = sidecar_dir(results_dir, machine)
    out: dict[str, list[Path]] = {}
    if folder.is_dir():
        for entry in os.scandir(folder):
            if entry.name.endswith(SUFFIX) and entry.name[8:9] == "-":
                out.setdefault(entry.name[:8], []).append(Path(entry.path))
    return out


def _checked(data: object) -> dict:
    """One parsed sidecar file as read_commit uses it; ValueError saying what is wrong."""
    if not isinstance(data, dict):
        raise ValueError(f"a JSON object was expected, got {type(data).__name__}")  # noqa: TRY004
    if data.get("schema") != SCHEMA:
        raise ValueError(f"sidecar schema {data.get('schema')!r}, this kvbench reads schema "
                         f"{SCHEMA}")
    for key in ("commit", "machine", "env", "group"):
        if not isinstance(data.get(key), str):
            raise ValueError(f'"{key}" must be a string')  # noqa: TRY004
    device = data.get("device")
    if device is not None and not (isinstance(device, dict) and isinstance(device.get("id"), str)):
        raise ValueError('"device" must be an object with a string "id"')
    states = data.get("states", [])
    if not isinstance(states, list) or not all(isinstance(x, dict) for x in states):
        raise ValueError('"states" must be a list of objects')
    classes = data.get("classes")
    if not isinstance(classes, dict) or not all(isinstance(c, dict) for c in classes.values()):
        raise ValueError('"classes" must be an object of objects')
    for cases in classes.values():
        for record in cases.values():
            if not isinstance(record, dict):
                raise ValueError("a case record must be an object")  # noqa: TRY004
            state = record.get("state")
            if state is not None and (isinstance(state, bool) or not isinstance(state, int)
                                      or not 0 <= state < len(states)):
                raise ValueError(f'a case\'s "state" must index "states", got {state!r}')
    return data


def _read_file(path: Path) -> dict:
    """One sidecar file, bounded and checked; ValueError saying what is wrong."""
    from kvbench.history.verdict.results import read_bounded

    raw = read_bounded(path)
    try:
        return _checked(json.loads(raw.decode("utf-8")))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 ({exc.reason})") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None


def read_commit(results_dir: str | os.PathLike, machine: str, commit: str,
                files: list[Path] | None = None,
                problems: list[dict[str, str]] | None = None) -> CommitSidecar | None:
    """The merged sidecar of `commit` (a full hash or its first 8+ characters) on `machine`,
    or None when the suite wrote none that can be read. A file that cannot be read or is
    not shaped as the suite writes it (another schema included) is left out, with
    {"commit", "file", "reason"} appended to `problems` when given.
    `files`: the commit's sidecar files when the caller listed the folder (`index`)."""
    if not isinstance(commit, str) or len(commit) < 8:
        raise ValueError(f"commit must be a hash of at least 8 characters, got {commit!r}")
    if files is None:
        folder = sidecar_dir(results_dir, machine)
        files = list(folder.glob(f"{commit[:8]}-*{SUFFIX}")) if folder.is_dir() else []
    merged: CommitSidecar | None = None
    for path in sorted(files):
        try:
            data = _read_file(Path(path))
        except ValueError as exc:  # json's errors are ValueErrors too
            if problems is not None:
                problems.append({"commit": commit, "file": Path(path).name, "reason": str(exc)})
            continue
        if not data["commit"].startswith(commit):
            continue
        if merged is None:
            merged = CommitSidecar(data["commit"], data["machine"])
        merged.envs.add(data["env"])
        group = data["group"]
        merged.states[group] = data.get("states", [])
        if data.get("device") is not None:
            merged.devices[group] = data["device"]["id"]
        for cls, cases in data["classes"].items():
            for params, record in cases.items():
                merged.cases[(cls, params)] = record
                merged.groups_of[(cls, params)] = group
    return merged


def read_machine(results_dir: str | os.PathLike, machine: str) -> dict[str, CommitSidecar]:
    """Every commit's merged sidecar on `machine`: {full commit hash: CommitSidecar}."""
    out = {}
    for prefix, files in sorted(index(results_dir, machine).items()):
        found = read_commit(results_dir, machine, prefix, files)
        if found is not None:
            out[found.commit] = found
    return out
