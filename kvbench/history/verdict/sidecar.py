"""Read the sidecars the asv suite writes beside its results (benchmarks/_sidecar.py).

One file per (commit, env, measurement group) under ``<results>/<machine>/kvbench/``; this
merges a commit's groups into one view keyed like asv's params, for the regressions engine and
reports ("auto switched rows", "registers 128 -> 168", "SM clock 1980 -> 1410 MHz"). Format:
docs/harness.md, "The sidecar".
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

    def state_of(self, cls: str, params: tuple) -> dict | None:
        """The NVML state (before/after) of the measurement group that measured this case."""
        key = (cls, repr(tuple(params)))
        record = self.cases.get(key)
        if not record or record.get("state") is None:
            return None
        return self.states[self.groups_of[key]][record["state"]]

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


def read_commit(results_dir: str | os.PathLike, machine: str, commit: str,
                files: list[Path] | None = None) -> CommitSidecar | None:
    """The merged sidecar of `commit` (a full hash or its first 8+ characters) on `machine`,
    or None when the suite wrote none. Raises ValueError for a file of another schema.
    `files`: the commit's sidecar files when the caller listed the folder (`index`)."""
    if not isinstance(commit, str) or len(commit) < 8:
        raise ValueError(f"commit must be a hash of at least 8 characters, got {commit!r}")
    if files is None:
        folder = sidecar_dir(results_dir, machine)
        files = list(folder.glob(f"{commit[:8]}-*{SUFFIX}")) if folder.is_dir() else []
    files = sorted(files)
    if not files:
        return None
    merged: CommitSidecar | None = None
    for path in files:
        data = json.loads(path.read_text())
        if data.get("schema") != SCHEMA:
            raise ValueError(f"{path}: sidecar schema {data.get('schema')!r}, this kvbench "
                             f"reads schema {SCHEMA}")
        if not data["commit"].startswith(commit):
            continue
        if merged is None:
            merged = CommitSidecar(data["commit"], data["machine"])
        merged.envs.add(data["env"])
        group = data["group"]
        merged.states[group] = data.get("states", [])
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
