"""`results/benchmarks.json` from the suite in benchmarks/, so it can never drift.

asv keeps, beside the results, a description of every benchmark (name, params, code,
version, setup_cache key). `asv publish` shows only the series that file lists, so a
committed copy from an older suite hides newer series from a fresh clone's dashboard, and
`asv run` rewrites the tracked file and dirties the tree. This module runs asv's own
discovery (`python -m asv.benchmark discover`, the command asv runs inside its environment)
with this interpreter and this checkout on the path: offline, about a second, no build.
`kvbench discover` and `kvbench publish` write the file with asv's own JSON writer, so the
bytes are those `asv run` would write; a test compares the committed file with discovery.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: Where `discover` and `check` look for the checkout by default: the repository root.
REPO_ROOT = Path(__file__).resolve().parents[2]


def _config(config: str | os.PathLike) -> Any:
    from asv.config import Config

    path = Path(config)
    if not path.is_file():
        raise ValueError(f"config must be an asv.conf.json file; {path} does not exist")
    return Config.load(str(path.resolve()))


def discover(config: str | os.PathLike = REPO_ROOT / "asv.conf.json") -> dict[str, Any]:
    """What asv writes to results/benchmarks.json for the suite at `config`'s benchmark_dir:
    {benchmark name: description, ..., "version": api_version}."""
    from asv.benchmarks import Benchmarks

    conf = _config(config)
    root = Path(config).resolve().parent
    env = dict(os.environ)
    # The benchmarks import kvbench: this checkout's, as asv's environment would install it.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory(prefix="kvbench-discover-") as tmp:
        out = Path(tmp) / "benchmarks.json"
        proc = subprocess.run(
            [sys.executable, "-m", "asv.benchmark", "discover",
             str((root / conf.benchmark_dir).resolve()), str(out)],
            cwd=tmp, env=env, capture_output=True, text=True, timeout=300, check=False,
        )
        if proc.returncode != 0 or not out.is_file():
            raise RuntimeError(f"asv discovery of {conf.benchmark_dir} failed "
                               f"(exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
        found = json.loads(out.read_text(encoding="utf-8"))
    described = {bench["name"]: bench for bench in found}
    return {**described, "version": Benchmarks.api_version}


def benchmarks_json_path(config: str | os.PathLike = REPO_ROOT / "asv.conf.json") -> Path:
    """results_dir/benchmarks.json of `config`, resolved as asv resolves it."""
    from asv.benchmarks import Benchmarks

    conf = _config(config)
    root = Path(config).resolve().parent  # asv.conf.json's paths are relative to its folder
    return Path(Benchmarks.get_benchmark_file_path(str(root / conf.results_dir))).resolve()


def differences(config: str | os.PathLike = REPO_ROOT / "asv.conf.json") -> list[str]:
    """One line per benchmark whose stored description differs from discovery's (empty:
    the stored file is what asv would write)."""
    path = benchmarks_json_path(config)
    want = discover(config)
    try:
        have = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [f"{path} does not exist"]
    lines = []
    for name in sorted(set(want) | set(have)):
        if name not in have:
            lines.append(f"{name}: in benchmarks/, missing from {path.name}")
        elif name not in want:
            lines.append(f"{name}: in {path.name}, no longer in benchmarks/")
        elif have[name] != want[name]:
            fields = sorted(k for k in set(have[name]) | set(want[name])
                            if have[name].get(k) != want[name].get(k))
            lines.append(f"{name}: {', '.join(fields)} differ")
    return lines


def write(config: str | os.PathLike = REPO_ROOT / "asv.conf.json") -> Path:
    """Rewrite results/benchmarks.json from discovery, atomically, with asv's JSON writer
    (the bytes `asv run` writes); return its path."""
    from asv import util

    from kvbench.core.jsonfile import replacement_mode

    data = discover(config)
    path = benchmarks_json_path(config)
    version = data.pop("version")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".benchmarks-", suffix=".json")
    os.close(fd)
    try:
        util.write_json(tmp, data, api_version=version)
        os.chmod(tmp, replacement_mode(path))
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path
