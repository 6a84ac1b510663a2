"""results/benchmarks.json is what asv discovers from benchmarks/, byte for byte.

asv publish shows only the series that file lists, and `asv run` rewrites it: a stale copy
hides new series from a fresh clone's dashboard and dirties the tree after every run.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.history.asv import suite

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "asv.conf.json"


def test_committed_file_is_what_asv_run_writes(tmp_path):
    """asv's own Benchmarks.save() of the discovered suite, into a scratch results dir, gives
    the committed bytes: `asv run` leaves results/benchmarks.json unchanged."""
    from asv.benchmarks import Benchmarks
    from asv.config import Config

    found = suite.discover(CONFIG)
    conf = Config.load(str(CONFIG))
    conf.results_dir = str(tmp_path)
    Benchmarks(conf, [v for k, v in found.items() if k != "version"]).save()
    committed = (ROOT / "results" / "benchmarks.json").read_bytes()
    fresh = (tmp_path / "benchmarks.json").read_bytes()
    assert fresh == committed, (
        "results/benchmarks.json differs from the suite in benchmarks/: run `kvbench discover` "
        "and commit it\n" + "\n".join(suite.differences(CONFIG)))


def test_write_and_differences_round_trip(tmp_path):
    """write() fixes a stale file and differences() names what was stale."""
    conf = json.loads("\n".join(line for line in CONFIG.read_text().splitlines()
                                if not line.lstrip().startswith("//")))
    conf.update(benchmark_dir=str(ROOT / "benchmarks"), results_dir=str(tmp_path / "results"),
                repo=str(ROOT))
    config = tmp_path / "asv.conf.json"
    config.write_text(json.dumps(conf))
    assert suite.differences(config) == [
        f"{tmp_path / 'results' / 'benchmarks.json'} does not exist"]
    path = suite.write(config)
    assert suite.differences(config) == []
    stale = json.loads(path.read_text())
    stale["kv_write.KVWrite.track_us"]["params"][0].pop()
    del stale["kv_alloc.KVAlloc.track_us"]
    path.write_text(json.dumps(stale))
    assert suite.differences(config) == [
        "kv_alloc.KVAlloc.track_us: in benchmarks/, missing from benchmarks.json",
        "kv_write.KVWrite.track_us: params differ",
    ]
    proc = subprocess.run([sys.executable, "-m", "kvbench.cli", "discover", "--check",
                           "--config", str(config)], capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "run `kvbench discover`" in proc.stdout, proc.stdout
    suite.write(config)
    assert suite.differences(config) == []


def test_a_missing_config_is_named(tmp_path):
    with pytest.raises(ValueError, match="asv.conf.json file"):
        suite.discover(tmp_path / "nope.json")


def test_paths_resolve_against_the_config_folder_not_the_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a folder with no benchmarks/ and no results/
    assert suite.benchmarks_json_path(CONFIG) == ROOT / "results" / "benchmarks.json"
    assert "kv_alloc.KVAlloc.track_us" in suite.discover(CONFIG)
