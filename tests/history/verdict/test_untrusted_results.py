"""Result files are untrusted input: a bad one is skipped with its name and why, never a crash.

Anyone can put a file into results/<machine>/ (a merge, a bad copy, a hostile pull request).
The reader refuses what is not a regular file before opening it (a FIFO would hang it, a link
to /dev/zero exhaust memory), bounds what it reads, checks the format it relies on, and keeps
only values that can be measurements. A file with nothing usable does not make its commit a
measured one.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.history.verdict import results
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import load_history

sys.path.insert(0, os.path.dirname(__file__))
from test_regressions import sim

GOOD = [1e-5, 1.01e-5, 0.99e-5, 1e-5]


@pytest.fixture
def history(tmp_path):
    """A four-commit history with a good result file per commit; (results dir, commits)."""
    commits = sim.git_history(tmp_path, len(GOOD))
    truth = sim.Truth("s", "gpu", "given")
    truth.values = np.asarray(GOOD)
    res = sim.write_results(tmp_path, commits, [0] * len(GOOD), [truth],
                            np.random.default_rng(0))
    return res, commits


def _file_of(res, commit):
    (path,) = (res / sim.MACHINE).glob(f"{commit[:8]}-*.json")
    return path


def _reasons(res) -> dict[str, str]:
    return {s["file"]: s["reason"] for s in load_history(res, sim.MACHINE).skipped}


@pytest.mark.parametrize(("body", "why"), [
    ("[]", "a JSON list, not an object"),
    ('{"version": 2}', "'commit_hash' is NoneType"),
    ('{"version": 1}', "format version 2 expected"),
    ("[" * 200_000 + "]" * 200_000, "nested too deeply"),
    ("\xff\xfe", "not UTF-8"),
    ("{", "unreadable"),
], ids=["list", "no-commit", "version-1", "deep-nesting", "not-utf8", "cut-off"])
def test_a_malformed_file_is_skipped_and_named(history, body, why):
    res, commits = history
    path = _file_of(res, commits[1])
    if body == "\xff\xfe":
        path.write_bytes(b"\xff\xfe")
    else:
        path.write_text(body)
    reasons = _reasons(res)
    assert why in reasons[path.name], reasons
    assert commits[1] not in load_history(res, sim.MACHINE).commits


def test_files_that_are_not_regular_files_are_refused_unopened(history, tmp_path):
    res, _ = history
    folder = res / sim.MACHINE
    os.mkfifo(folder / "fifo0000-env.json")  # opening it for reading would block forever
    os.symlink("/dev/zero", folder / "zero0000-env.json")  # reading it would never end
    os.symlink(tmp_path / "nowhere", folder / "gone0000-env.json")
    (folder / "dir00000-env.json").mkdir()
    reasons = _reasons(res)
    assert reasons["fifo0000-env.json"] == "unreadable: not a regular file"
    assert reasons["zero0000-env.json"] == "unreadable: not a regular file"
    assert reasons["dir00000-env.json"] == "unreadable: not a regular file"
    assert reasons["gone0000-env.json"].startswith("unreadable: cannot be read")


def test_a_file_larger_than_a_result_file_is_refused(history, monkeypatch):
    res, commits = history
    path = _file_of(res, commits[1])
    monkeypatch.setattr(results, "MAX_RESULT_BYTES", path.stat().st_size + 100)
    path.write_text(path.read_text() + " " * 1000)  # still valid JSON, but too large
    reasons = _reasons(res)
    assert (list(reasons) == [path.name]
            and "more than a file of its kind holds" in reasons[path.name])


@pytest.mark.parametrize("value", [True, -1e-4, 0, 1e308, "fast"])
def test_values_that_cannot_be_measurements_are_left_out_and_counted(history, value):
    res, commits = history
    path = _file_of(res, commits[2])
    data = json.loads(path.read_text())
    col = data["result_columns"].index("result")
    for row in data["results"].values():
        row[col] = [value]
    path.write_text(json.dumps(data))
    h = load_history(res, sim.MACHINE)
    assert commits[2] not in h.commits  # no value left: not a measured commit
    reason = {s["file"]: s["reason"] for s in h.skipped}.get(path.name, "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        assert reason.startswith("1 value(s) that cannot be measurements"), reason
    else:  # not a number at all: no value of any series
        assert reason == "no value of a known series", reason
    (series,) = h.series
    assert [p.value for p in series.points] == pytest.approx([GOOD[0], GOOD[1], GOOD[3]])
    report = analyze(h)
    assert report.to_json()["summary"]["skipped_results"] == 1


JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers()
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
#: A result file's top-level keys, each holding anything: the shapes a reader is most likely
#: to trip over.
FILE_LIKE = st.fixed_dictionaries({}, optional={
    "version": st.sampled_from([2, 1, "2", None]) | JSON,
    "commit_hash": JSON, "env_name": JSON, "params": JSON, "result_columns": JSON,
    "results": st.dictionaries(st.text(max_size=20), JSON, max_size=3) | JSON,
})


@settings(max_examples=120, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200) | JSON.map(json.dumps) | FILE_LIKE.map(json.dumps))
def test_any_bytes_or_json_give_a_skip_or_a_history_never_an_exception(history, body):
    res, commits = history
    path = _file_of(res, commits[1])
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    h = load_history(res, sim.MACHINE)
    assert set(h.commits) >= {commits[0], commits[2], commits[3]}
    assert commits[1] in h.commits or path.name in {s["file"] for s in h.skipped}
    analyze(h).to_json()


def test_a_copy_of_a_result_file_is_read_once(history):
    """A second file of one (commit, environment) counted its values twice and shrank the
    noise the verdicts are judged against; it is skipped and named with the file read."""
    res, commits = history
    path = _file_of(res, commits[1])
    copy = path.with_name(path.stem + "-copy.json")
    copy.write_bytes(path.read_bytes())
    loaded = load_history(res, sim.MACHINE)
    (series,) = loaded.series
    assert [p.commit for p in series.points] == commits
    (skip,) = loaded.skipped  # the first in name order is read, the other named
    first, second = sorted([path.name, copy.name])
    assert skip == {"file": second, "reason": f"a second result of commit {commits[1][:8]} in "
                                              f"{series.env} (read from {first})"}


@pytest.mark.parametrize(("body", "why"), [
    ('{"version": 2, "x', "unreadable"),
    ("[1, 2]", "not asv's benchmarks.json"),
])
def test_a_damaged_benchmarks_json_is_named(history, body, why):
    res, _ = history
    (res / "benchmarks.json").write_text(body)
    with pytest.raises(ValueError, match=why) as exc:
        load_history(res, sim.MACHINE)
    assert str(res / "benchmarks.json") in str(exc.value)


def test_a_unit_that_is_not_a_string_is_not_a_unit(history):
    res, _ = history
    data = json.loads((res / "benchmarks.json").read_text())
    for info in data.values():
        if isinstance(info, dict):
            info["unit"] = ["seconds"]
    (res / "benchmarks.json").write_text(json.dumps(data))
    assert results.load_units(res) == {}
