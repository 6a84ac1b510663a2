"""What kvbench's asv plugin guards in asv's own process (kvbench/history/asv/asv_env.py, issue 37):

- a stored number is never replaced by NaN or by a skip: a case a re-run has no number for
  keeps the stored value, samples and statistics (same benchmark name and version), and asv's
  log says so;
- the result file and the sidecar are written together: the suite's sidecar waits under a
  pending name, which no reader globs, until asv saved the result file; a killed run (no save)
  leaves the stored pair as it was.

On real asv Results objects (asv is pinned ==0.6.6; the wrappers keep add_result's and save's
own signatures, checked here).
"""

from __future__ import annotations

import inspect
import json
import logging
import math
from pathlib import Path

import pytest
from asv.results import Results
from asv.runner import BenchmarkResult

from benchmarks.runner import sidecar as _sidecar
from kvbench.history.asv import asv_env
from kvbench.history.verdict import sidecar as reader

MACHINE, ENV, COMMIT = "m1", "kvbench-offline-py3.11", "0123456789abcdef" * 2 + "01234567"
NAME = "kv_alloc.KVAlloc.track_us"
#: The plugin names its asv command to the suite's processes in this variable (spelt out here:
#: it is the contract between benchmarks/runner/sidecar.py and the plugin, checked below).
RUN_VAR = "ASV_KVBENCH_RUN"
#: This process's asv command, as the plugin names it.
THIS_RUN = getattr(asv_env, "RUN_TOKEN", "this-run")
PARAMS = [["'a'", "'b'", "'c'"]]


def _results() -> Results:
    return Results({"machine": MACHINE}, {}, COMMIT, 0, "3.11", ENV, {})


def _bench(version: str = "1") -> dict:
    return {"name": NAME, "version": version, "params": PARAMS}


def _run(values: list) -> BenchmarkResult:
    """A run's result: a number becomes samples asv computes statistics of."""
    samples = [None if v is None or math.isnan(v) else [v, v * 1.01, v * 0.99] for v in values]
    number = [None if s is None else 1 for s in samples]
    return BenchmarkResult(result=list(values), samples=samples, number=number, errcode=0,
                           stderr="", profile=None)


def _na(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


# ---- asv's signatures: the wrappers are written against asv 0.6.6 ---------------------------


def test_add_result_and_save_keep_asv_066_signatures():
    """Fails when asv's add_result or save changes shape: the wrappers must then be revisited."""
    original = Results.add_result.__wrapped__
    expected = ["self", "benchmark", "result", "started_at", "duration", "record_samples",
                "append_samples", "selected_idx"]
    sig = inspect.signature(original)
    assert list(sig.parameters) == expected
    assert [p.default for p in sig.parameters.values()][3:] == [None, None, False, False, None]
    wrapper = inspect.signature(Results.add_result, follow_wrapped=False)
    assert str(wrapper) == str(sig)
    assert list(inspect.signature(Results.save.__wrapped__).parameters) == ["self", "result_dir"]
    assert str(inspect.signature(Results.save, follow_wrapped=False)) == \
        str(inspect.signature(Results.save.__wrapped__))


def test_the_suite_and_the_plugin_name_the_run_alike():
    assert _sidecar.RUN_VAR == asv_env.RUN_VAR == RUN_VAR
    assert _sidecar.PENDING == asv_env.PENDING
    assert (_sidecar.SUBDIR, _sidecar.SUFFIX) == (asv_env.SIDECAR_DIR, asv_env.SIDECAR_SUFFIX)


def test_guards_install_once():
    add_result, save = Results.add_result, Results.save
    asv_env.install_result_guards()
    asv_env.install_result_guards()
    assert Results.add_result is add_result and Results.save is save
    assert getattr(Results.add_result, "_kvbench_guard", False)
    assert not getattr(Results.add_result.__wrapped__, "_kvbench_guard", False)
    assert not getattr(Results.save.__wrapped__, "_kvbench_guard", False)


# ---- stored numbers kept -----------------------------------------------------------------------


def test_na_never_replaces_a_stored_number(tmp_path, caplog):
    res = _results()
    res.add_result(_bench(), _run([1e-5, 2e-5, 3e-5]), record_samples=True)
    res.save(str(tmp_path))
    path = tmp_path / MACHINE / f"{COMMIT[:8]}-{ENV}.json"
    stored_stats = Results.load(str(path)).get_result_stats(NAME, PARAMS)

    again = _results()
    again.load_data(str(tmp_path))
    with caplog.at_level(logging.INFO):
        # 'a' skipped (NaN), 'b' failed (None), 'c' measured anew
        again.add_result(_bench(), _run([math.nan, None, 4e-5]), record_samples=True)
    again.save(str(tmp_path))

    loaded = Results.load(str(path))
    values = loaded.get_result_value(NAME, PARAMS)
    assert values[:2] == [1e-5, 2e-5]
    assert values[2] == pytest.approx(4e-5)
    stats = loaded.get_result_stats(NAME, PARAMS)
    assert stats[:2] == stored_stats[:2]
    samples = loaded.get_result_samples(NAME, PARAMS)
    assert samples[0] == pytest.approx([1e-5, 1.01e-5, 0.99e-5])
    said = [r.getMessage() for r in caplog.records if NAME in r.getMessage()]
    assert any("kept the stored numbers of 2 of 3 params" in m for m in said), said


def test_selection_and_versions_are_respected():
    res = _results()
    res.add_result(_bench(), _run([1e-5, 2e-5, 3e-5]))
    # asv's own selection: 'a' not selected (asv keeps it), 'b' selected and skipped (kept
    # by the guard), 'c' selected and measured
    res.add_result(_bench(), _run([math.nan, math.nan, 5e-5]), selected_idx={1, 2})
    assert res.get_result_value(NAME, PARAMS)[:2] == [1e-5, 2e-5]
    # a new benchmark version is another series: nothing of the old one is kept
    res.add_result(_bench("2"), _run([math.nan, math.nan, 6e-5]))
    values = res.get_result_value(NAME, PARAMS)
    assert _na(values[0]) and _na(values[1])


def test_nothing_stored_nothing_kept():
    res = _results()
    res.add_result(_bench(), _run([math.nan, None, 3e-5]))
    values = res.get_result_value(NAME, PARAMS)
    assert _na(values[0]) and _na(values[1]) and values[2] == pytest.approx(3e-5)


# ---- result file and sidecar written together ------------------------------------------------


def _entry(median_us: float, state: int = 0) -> dict:
    """One case entry as the suite's measured() hands it to write_sidecar."""
    return {"samples_s": [median_us * 1e-6] * 3, "median_us": median_us, "selected": "host/x",
            "explain": "", "timer": "host", "state": state}


@pytest.fixture
def suite_env(monkeypatch, tmp_path):
    """The variables kvbench's plugin gives the suite's measuring process."""
    monkeypatch.setenv("ASV_COMMIT", COMMIT)
    monkeypatch.setenv("ASV_ENV_NAME", ENV)
    monkeypatch.setenv("ASV_KVBENCH_MACHINE", MACHINE)
    monkeypatch.setenv("ASV_KVBENCH_RESULTS_DIR", str(tmp_path))
    monkeypatch.delenv(RUN_VAR, raising=False)
    return monkeypatch


def _write(monkeypatch, classes: dict, state: str) -> str:
    states = [{"keys": [], "before": state, "after": state}]
    path = _sidecar.write_sidecar("suite", classes, states)
    assert path
    return path


def _store(tmp_path, values: list) -> None:
    res = _results()
    res.load_data(str(tmp_path))
    res.add_result(_bench(), _run(values))
    res.save(str(tmp_path))


def _stored_pair(tmp_path) -> tuple[bytes, bytes]:
    result = tmp_path / MACHINE / f"{COMMIT[:8]}-{ENV}.json"
    side = tmp_path / MACHINE / "kvbench" / f"{COMMIT[:8]}-{ENV}.suite.kvjson"
    return result.read_bytes(), side.read_bytes()


def test_a_killed_run_leaves_the_stored_pair_and_a_save_promotes(tmp_path, suite_env):
    # the stored pair: a run before (its sidecar written in place, as a replayed history's)
    _write(suite_env, {"KVAlloc": {("a",): _entry(10.0), ("b",): _entry(20.0),
                                   ("c",): _entry(30.0)}}, "old state")
    _store(tmp_path, [10e-6, 20e-6, 30e-6])
    before = _stored_pair(tmp_path)

    # a new asv run measures 'c' only, then is killed before asv saves the result file
    suite_env.setenv(RUN_VAR, THIS_RUN)
    pending = _write(suite_env, {"KVAlloc": {("a",): {"skip": "not selected: this run "
                                                                "measures only ..."},
                                             ("c",): _entry(40.0)}}, "new state")
    assert _stored_pair(tmp_path) == before, "a run killed before the save changed the sidecar"
    assert pending.endswith(".pending") and Path(pending).is_file()
    files = reader.index(tmp_path, MACHINE)
    assert [p.name for ps in files.values() for p in ps] == [f"{COMMIT[:8]}-{ENV}.suite.kvjson"]
    seen = reader.read_commit(tmp_path, MACHINE, COMMIT)
    assert seen.case("KVAlloc", ("c",))["median_us"] == 30.0

    # the run goes on: asv saves the result file, the sidecar follows it into place
    _store(tmp_path, [math.nan, math.nan, 40e-6])
    assert not Path(pending).exists()
    result = Results.load(str(tmp_path / MACHINE / f"{COMMIT[:8]}-{ENV}.json"))
    values = result.get_result_value(NAME, PARAMS)
    seen = reader.read_commit(tmp_path, MACHINE, COMMIT)
    for (param,), value in zip([("a",), ("b",), ("c",)], values, strict=True):
        record = seen.case("KVAlloc", param)
        assert record["status"] == "measured"
        assert record["median_us"] == pytest.approx(value * 1e6)  # the pair agrees
    assert seen.state_of("KVAlloc", ("a",))["before"] == "old state"  # kept with its state
    assert seen.state_of("KVAlloc", ("c",))["before"] == "new state"


def test_a_class_asv_did_not_store_keeps_its_sidecar_record(tmp_path, suite_env):
    """`asv run --bench kv_alloc` over a recorded commit: the suite's process measures every
    class of the group, asv stores KVAlloc's numbers alone, and the sidecar took KVWrite's new
    record over the one describing KVWrite's stored number."""
    _write(suite_env, {"KVAlloc": {("a",): _entry(10.0)},
                       "KVWrite": {("a",): _entry(30.0)}}, "old state")
    _store(tmp_path, [10e-6, math.nan, math.nan])
    suite_env.setenv(RUN_VAR, THIS_RUN)
    _write(suite_env, {"KVAlloc": {("a",): _entry(11.0)},
                       "KVWrite": {("a",): _entry(99.0)}}, "new state")
    _store(tmp_path, [11e-6, math.nan, math.nan])  # asv stores the selected benchmark only
    seen = reader.read_commit(tmp_path, MACHINE, COMMIT)
    assert seen.case("KVAlloc", ("a",))["median_us"] == 11.0
    assert seen.case("KVWrite", ("a",))["median_us"] == 30.0
    assert seen.state_of("KVWrite", ("a",))["before"] == "old state"


def test_a_first_run_of_one_class_leaves_out_the_classes_asv_did_not_store(tmp_path, suite_env):
    """The first `asv run --bench kv_alloc` of a commit (no sidecar yet): the suite's process
    measured KVWrite too, asv stored no KVWrite number, so the sidecar has no KVWrite record
    (a record there would describe a number no result file holds)."""
    suite_env.setenv(RUN_VAR, THIS_RUN)
    _write(suite_env, {"KVAlloc": {("a",): _entry(11.0)},
                       "KVWrite": {("a",): _entry(99.0)}}, "new state")
    _store(tmp_path, [11e-6, math.nan, math.nan])
    seen = reader.read_commit(tmp_path, MACHINE, COMMIT)
    assert seen.case("KVAlloc", ("a",))["median_us"] == 11.0
    assert seen.case("KVWrite", ("a",)) is None
    body = json.loads(_stored_pair(tmp_path)[1])
    assert "('a',)" not in body["classes"].get("KVWrite", {})


def test_stored_cases_are_the_params_this_run_gave_a_number():
    run = _run([1e-5, math.nan, None])
    assert asv_env.stored_cases(_bench(), run, None) == {("KVAlloc", "('a',)")}
    assert asv_env.stored_cases(_bench(), run, {1, 2}) == set()
    two = {"name": "m.C.track_us", "params": [["'x'"], ["1", "64"]]}
    assert asv_env.stored_cases(two, _run([1e-5, 2e-5]), None) == {("C", "('x', 1)"),
                                                                     ("C", "('x', 64)")}


def test_a_pending_sidecar_of_a_run_that_never_saved_is_removed(tmp_path, suite_env):
    suite_env.setenv(RUN_VAR, "0" * 16)  # a killed asv command
    stale = _write(suite_env, {"KVAlloc": {("a",): _entry(99.0)}}, "killed")
    suite_env.setenv(RUN_VAR, THIS_RUN)
    _write(suite_env, {"KVAlloc": {("a",): _entry(10.0)}}, "now")
    _store(tmp_path, [10e-6, math.nan, math.nan])
    assert not Path(stale).exists()
    folder = tmp_path / MACHINE / "kvbench"
    assert sorted(p.name for p in folder.iterdir()) == [f"{COMMIT[:8]}-{ENV}.suite.kvjson"]
    body = json.loads((folder / f"{COMMIT[:8]}-{ENV}.suite.kvjson").read_text())
    assert body["classes"]["KVAlloc"]["('a',)"]["median_us"] == 10.0


def test_a_save_cut_off_mid_write_leaves_the_stored_file_whole(tmp_path, monkeypatch):
    """asv writes the result file in place; the plugin has it written beside and renamed, so a
    write that dies half way (a killed machine) leaves the stored file as it was."""
    res = _results()
    res.add_result(_bench(), _run([1e-5, 2e-5, 3e-5]), record_samples=True)
    res.save(str(tmp_path))
    path = tmp_path / MACHINE / f"{COMMIT[:8]}-{ENV}.json"
    stored = path.read_bytes()

    import asv.results

    def cut_off(target, data, api_version=None, compact=False):
        Path(target).write_text('{"commit_hash": "01')
        raise KeyboardInterrupt

    monkeypatch.setattr(asv.results.util, "write_json", cut_off)
    again = _results()
    again.add_result(_bench(), _run([5e-5, 6e-5, 7e-5]), record_samples=True)
    with pytest.raises(KeyboardInterrupt):
        again.save(str(tmp_path))
    assert path.read_bytes() == stored
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary left
    monkeypatch.undo()
    again.save(str(tmp_path))
    assert Results.load(str(path)).get_result_value(NAME, PARAMS) == pytest.approx(
        [5e-5, 6e-5, 7e-5])
