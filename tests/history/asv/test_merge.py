"""`kvbench merge`: the union of results folders, refused (target untouched) when they are not
one history, duplicates kept by the stated rule, sidecars carried, atomic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.history.asv import merge as merge_mod
from kvbench.history.asv.merge import MergeRefused, merge
from kvbench.history.asv.merge_cmd import main as merge_main
from kvbench.history.asv.record import LOCK_NAME

ENV = "kvbench-offline-py3.11"
MACHINE_RECORD = {"machine": "box", "arch": "x86_64", "cpu": "sim", "num_cpu": "2",
                  "os": "Linux", "ram": "1", "version": 1}
BENCH = "kv_alloc.KVAlloc.track_us"


def _folder(path: Path, commits: dict[str, list], *, env: str = ENV, machine: dict | None = None,
            version: str = "1") -> Path:
    """An asv results folder: benchmarks.json, box/machine.json, one result file and one
    sidecar per commit (values: the `result` column)."""
    (path / "box" / "kvbench").mkdir(parents=True, exist_ok=True)
    (path / "benchmarks.json").write_text(json.dumps(
        {"version": 2, BENCH: {"name": BENCH, "version": version, "unit": "seconds"}}))
    (path / "box" / "machine.json").write_text(json.dumps(machine or MACHINE_RECORD))
    for commit, values in commits.items():
        data = {"version": 2, "commit_hash": commit, "env_name": env,
                "result_columns": ["result", "params"], "params": {},
                "results": {BENCH: [values, [["'a'", "'b'"]]]}}
        (path / "box" / f"{commit[:8]}-{env}.json").write_text(json.dumps(data))
        (path / "box" / "kvbench" / f"{commit[:8]}-{env}.suite.kvjson").write_text(
            json.dumps({"schema": 1, "commit": commit, "from": path.name}))
    return path


def _bytes(path: Path, *, locks: bool = True) -> dict[str, bytes]:
    """Every file under `path` by relative name (`locks=False`: without the recording lock
    file, which a merge that got as far as locking leaves, empty of meaning, as record does)."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file() and (locks or p.name != LOCK_NAME)}


C = {k: k * 40 for k in "abcdef"}


def test_a_union_with_its_duplicates_kept_by_the_rule(tmp_path):
    target = _folder(tmp_path / "results", {C["a"]: [1e-5, 2e-5]})
    s0 = _folder(tmp_path / "s0", {C["a"]: [9e-5, 9e-5], C["b"]: [1e-5, None]})
    s1 = _folder(tmp_path / "s1", {C["b"]: [3e-5, 4e-5], C["c"]: [5e-5, 6e-5]})
    before_a = (target / "box" / f"{C['a'][:8]}-{ENV}.json").read_bytes()
    report = merge([s0, s1], target)
    assert report.added == [f"box/{C['b'][:8]}-{ENV}.json", f"box/{C['c'][:8]}-{ENV}.json"]
    assert (target / "box" / f"{C['a'][:8]}-{ENV}.json").read_bytes() == before_a
    kept_b = json.loads((target / "box" / f"{C['b'][:8]}-{ENV}.json").read_text())
    assert kept_b["results"][BENCH][0] == [3e-5, 4e-5]  # s1's: two values against one
    side_b = json.loads((target / "box" / "kvbench" / f"{C['b'][:8]}-{ENV}.suite.kvjson")
                        .read_text())
    assert side_b["from"] == "s1"  # the kept result's own sidecar
    assert any("kept the target's" in n for n in report.notes)
    assert any(f"{s0} (1 values)" in n and f"kept {s1}'s" in n for n in report.notes)
    assert json.loads((target / "box" / "machine.json").read_text()) == MACHINE_RECORD
    assert BENCH in json.loads((target / "benchmarks.json").read_text())
    assert not list(tmp_path.glob(".results.kvbench-*"))  # no staging or old folder left


def test_into_a_new_folder(tmp_path, capsys):
    s0 = _folder(tmp_path / "s0", {C["a"]: [1e-5, 2e-5]})
    s1 = _folder(tmp_path / "s1", {C["b"]: [1e-5, 2e-5]})
    assert merge_main([str(s0), str(s1), "--into", str(tmp_path / "merged")]) == 0
    assert "merged 2 result file(s) and 2 sidecar(s)" in capsys.readouterr().out
    assert len(list((tmp_path / "merged" / "box").glob("*.json"))) == 3  # + machine.json


@pytest.mark.parametrize(("spoil", "message"), [
    (lambda s: _folder(s, {C["d"]: [1e-5, 1e-5]},
                       machine={**MACHINE_RECORD, "cpu": "other"}),
     "machine 'box' differs (cpu: 'sim' in"),
    (lambda s: _folder(s, {C["d"]: [1e-5, 1e-5]}, env="kvbench-offline-py3.12"),
     "environment names differ for machine 'box': kvbench-offline-py3.11 in"),
    (lambda s: _folder(s, {C["d"]: [1e-5, 1e-5]}, version="2"),
     "benchmark versions differ: kv_alloc.KVAlloc.track_us is version '1' in"),
    (lambda s: (_folder(s, {C["d"]: [1e-5, 1e-5]}),
                (s / "box" / f"{C['d'][:8]}-{ENV}.json").write_bytes(
                    (s / "box" / f"{C['d'][:8]}-{ENV}.json").read_bytes()[:-7])),
     "not a whole JSON file"),
    (lambda s: (_folder(s, {C["d"]: [1e-5, 1e-5]}),
                (s / "box" / "kvbench" / f"{C['d'][:8]}-{ENV}.suite.kvjson").write_text('{"a')),
     "not a whole JSON file"),
])
def test_a_refusal_names_the_difference_and_leaves_the_target_untouched(tmp_path, capsys,
                                                                        spoil, message):
    target = _folder(tmp_path / "results", {C["a"]: [1e-5, 2e-5]})
    good = _folder(tmp_path / "good", {C["b"]: [1e-5, 2e-5]})
    spoil(tmp_path / "bad")
    before = _bytes(target)
    assert merge_main([str(good), str(tmp_path / "bad"), "--into", str(target)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kvbench merge: refused: ") and message in err, err
    assert len(err.strip().splitlines()) == 1
    assert _bytes(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "good", "results"]


def test_a_target_folder_without_its_machine_record_is_refused_and_left_as_it_was(tmp_path,
                                                                                 capsys):
    """The target's box/ lost its machine.json: merge does not read the files in it, and a
    source file of the same name staged beside them was written through the hard link into
    the target's own file before the check refused."""
    target = _folder(tmp_path / "results", {C["a"]: [1e-5, 2e-5], C["b"]: [1e-5, 2e-5]})
    (target / "box" / "machine.json").unlink()
    source = _folder(tmp_path / "new", {C["a"]: [9e-5, 9e-5]})
    before = _bytes(target)
    assert merge_main([str(source), "--into", str(target)]) == 1
    err = capsys.readouterr().err
    assert "not an asv machine folder (no machine.json)" in err, err
    assert _bytes(target) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "results"]


def test_a_staged_file_is_never_written_through(tmp_path):
    target = _folder(tmp_path / "results", {C["a"]: [1e-5, 2e-5]})
    staged = tmp_path / "staged"
    staged.mkdir()
    linked = staged / "a.json"
    linked.hardlink_to(target / "box" / f"{C['a'][:8]}-{ENV}.json")
    before = _bytes(target)
    with pytest.raises(MergeRefused, match="never replaced"):
        merge_mod._write_new(linked, b"{}")
    assert _bytes(target) == before


def test_an_interrupted_merge_leaves_the_target_as_it_was(tmp_path, monkeypatch):
    target = _folder(tmp_path / "results", {C["a"]: [1e-5, 2e-5]})
    s0 = _folder(tmp_path / "s0", {C["b"]: [1e-5, 2e-5]})
    before = _bytes(target)
    real = Path.write_bytes

    def interrupted(self, data):
        real(self, data)
        raise KeyboardInterrupt  # after the first staged file

    monkeypatch.setattr(Path, "write_bytes", interrupted)
    with pytest.raises(KeyboardInterrupt):
        merge([s0], target)
    monkeypatch.undo()
    assert _bytes(target, locks=False) == before
    assert not list(tmp_path.glob(".results.kvbench-merge-*"))
    merge([s0], target)  # and the same merge then goes through
    assert f"box/{C['b'][:8]}-{ENV}.json" in _bytes(target)


def test_the_swap_is_one_exchange_where_the_filesystem_has_it(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "x").write_text("a")
    if not merge_mod.exchange(a, b):
        pytest.skip("this filesystem cannot exchange two paths atomically")
    assert (b / "x").read_text() == "a" and not (a / "x").exists()


def test_a_folder_being_recorded_is_not_merged(tmp_path):
    from kvbench.history.asv.record import machine_lock

    target = _folder(tmp_path / "results", {C["a"]: [1e-5, 2e-5]})
    s0 = _folder(tmp_path / "s0", {C["b"]: [1e-5, 2e-5]})
    with machine_lock(target, "box"), pytest.raises(ValueError, match="being recorded"):
        merge([s0], target)
    with pytest.raises(MergeRefused, match="is the target itself"):
        merge([target], target)


def test_a_target_machine_folder_holding_only_the_recording_lock_is_merged_into(tmp_path):
    """record --gpus locks the target's machine folder before merging into it, which makes
    the folder (lock file only) on a first recording: that folder is not refused."""
    target = tmp_path / "results"
    (target / "box").mkdir(parents=True)
    (target / "box" / LOCK_NAME).write_text("")
    source = _folder(tmp_path / "new", {C["a"]: [1e-5, 2e-5]})
    report = merge([source], target)
    assert report.added == [f"box/{C['a'][:8]}-{ENV}.json"]
    assert (target / "box" / "machine.json").is_file()


def test_into_a_file_a_missing_parent_or_the_source_itself_is_refused(tmp_path, capsys):
    source = _folder(tmp_path / "new", {C["a"]: [1e-5, 2e-5]})
    afile = tmp_path / "notadir.txt"
    afile.write_text("mine")
    for into, message in ((afile, "exists and is not a folder"),
                          (tmp_path / "no" / "such" / "results", "is not an existing folder"),
                          (tmp_path / "new" / ".." / "new", "is the target itself")):
        assert merge_main([str(source), "--into", str(into)]) == 1
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err
    assert afile.read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "notadir.txt"]
