"""metadata(): what a number needs to be reproduced, including the kernel env vars."""

import json

from kvbench.harness import format_metadata, metadata
from kvbench.harness import meta as meta_mod

KEYS = {
    "gpu",
    "cpu",
    "sm_count",
    "l2_bytes",
    "peaks",
    "ceilings",
    "driver",
    "cuda",
    "torch",
    "triton",
    "numpy",
    "python",
    "platform",
    "hostname",
    "commit",
    "command",
    "timestamp",
    "env",
}


def test_keys_and_json_serialisable(tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path))
    m = metadata(command="pytest harness")
    assert KEYS <= set(m)
    assert m["command"] == "pytest harness"
    assert m["commit"]
    json.dumps(m)


def test_env_lists_the_selectors_with_their_values(tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KVBENCH_PAGED_DECODE", "triton/split_kv")
    monkeypatch.delenv("KVBENCH_KV_WRITE", raising=False)
    env = metadata()["env"]
    assert env["KVBENCH_PAGED_DECODE"] == "triton/split_kv"
    assert "KVBENCH_KV_WRITE" in env and env["KVBENCH_KV_WRITE"] is None
    assert {"KVBENCH_KV_GATHER", "KVBENCH_KV_ALLOC"} <= set(env)


def test_explicit_kvbench_commit_beats_a_stale_checkout(monkeypatch):
    monkeypatch.delenv("ASV_COMMIT", raising=False)
    monkeypatch.setattr(meta_mod, "_run", lambda cmd, cwd=None: "0a03dd9-dirty")
    monkeypatch.setenv("KVBENCH_COMMIT", "78224b1")
    assert meta_mod.commit() == "78224b1"


def test_commit_falls_back_to_asv_commit_outside_a_checkout(monkeypatch):
    monkeypatch.delenv("KVBENCH_COMMIT", raising=False)
    monkeypatch.setattr(meta_mod, "_run", lambda cmd, cwd=None: None)  # no git answer
    monkeypatch.setenv("ASV_COMMIT", "abc1234")
    assert meta_mod.commit() == "abc1234"
    monkeypatch.setenv("KVBENCH_COMMIT", "78224b1")
    assert meta_mod.commit() == "abc1234"  # under asv, asv names the measured commit
    monkeypatch.delenv("ASV_COMMIT")
    monkeypatch.delenv("KVBENCH_COMMIT")
    assert meta_mod.commit() == "unknown"


def test_commit_ignores_a_repository_that_merely_contains_the_package(monkeypatch, tmp_path):
    # Under asv the package sits in .asv/env/... inside the repo: git would answer for the
    # working tree, which is the wrong commit.
    def fake_run(cmd, cwd=None):
        return str(tmp_path) if "rev-parse" in cmd else "deadbee-dirty"

    monkeypatch.setattr(meta_mod, "_run", fake_run)
    monkeypatch.delenv("KVBENCH_COMMIT", raising=False)
    monkeypatch.setenv("ASV_COMMIT", "abc1234")
    assert meta_mod.commit() == "abc1234"


def test_default_command_is_argv(tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr("sys.argv", ["kvbench", "table", "paged_decode"])
    assert metadata()["command"] == "kvbench table paged_decode"


def test_format_metadata_is_a_short_header(tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KVBENCH_KV_ALLOC", "host/freelist")
    m = metadata(command="cmd")
    text = format_metadata(m)
    lines = text.splitlines()
    assert 4 <= len(lines) <= 8 and all(line.startswith("#") for line in lines)
    assert m["commit"] in text and "torch" in text and "KVBENCH_KV_ALLOC=host/freelist" in text
