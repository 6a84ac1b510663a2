"""Sidecar files are untrusted input like result files: any bytes in one give either its
data or a skip with a reason, never an exception (kvbench.history.verdict.sidecar)."""

from __future__ import annotations

import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbench.history.verdict import sidecar
from kvbench.history.verdict.context import SidecarCache, step_facts

MACHINE = "gpu"
COMMIT = "a1b2c3d4" * 5
GOOD = {"schema": 1, "commit": COMMIT, "machine": MACHINE, "env": "e", "group": "suite",
        "states": [{"before": "s0"}],
        "classes": {"KVAlloc": {"('a',)": {"status": "measured", "median_us": 1.0,
                                           "state": 0}}}}

JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers()
                    | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
#: A sidecar's top-level keys, each holding anything (the schema mostly right, so the
#: fuzzing reaches the checks behind it).
SIDECAR_LIKE = st.fixed_dictionaries({"schema": st.sampled_from([1, 1, 1, "1", None])}, optional={
    "commit": st.sampled_from([COMMIT, COMMIT[:8]]) | JSON, "machine": JSON, "env": JSON,
    "group": JSON,
    "states": st.lists(st.dictionaries(st.text(max_size=4), JSON, max_size=2), max_size=2) | JSON,
    "classes": st.dictionaries(st.text(max_size=8), st.dictionaries(
        st.text(max_size=8), st.fixed_dictionaries({}, optional={
            "state": st.integers(-2, 3) | JSON, "status": JSON}) | JSON, max_size=2) | JSON,
        max_size=2) | JSON,
})


def _write(tmp_path, body: bytes, name: str = f"{COMMIT[:8]}-e.suite.kvjson"):
    folder = sidecar.sidecar_dir(tmp_path, MACHINE)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(body)
    return folder / name


def _use(found: sidecar.CommitSidecar) -> None:
    """Everything a reader does with a merged sidecar."""
    for cls, params in list(found.cases):
        found.case(cls, (params,))
        found.state_of(cls, (params,))
    step_facts(found, found, "kv_alloc.KVAlloc.track_us", ("a",))


@pytest.mark.parametrize(("body", "why"), [
    (b"[]", "JSON object was expected"),
    (json.dumps({**GOOD, "schema": 2}).encode(), "sidecar schema 2"),
    (json.dumps({**GOOD, "commit": 5}).encode(), '"commit" must be a string'),
    (json.dumps({**GOOD, "classes": {"K": {"x": {"state": 9}}}}).encode(), "must index"),
    (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
    (b"\xff\xfe", "not UTF-8"),
    (b"{", "Expecting"),
], ids=["list", "schema", "commit", "state", "deep", "not-utf8", "cut-off"])
def test_a_malformed_sidecar_is_skipped_with_its_reason(tmp_path, body, why):
    path = _write(tmp_path, body)
    problems: list = []
    assert sidecar.read_commit(tmp_path, MACHINE, COMMIT, problems=problems) is None
    assert [p["file"] for p in problems] == [path.name] and why in problems[0]["reason"]


def test_a_sidecar_that_is_not_a_regular_file_is_refused_unopened(tmp_path):
    folder = sidecar.sidecar_dir(tmp_path, MACHINE)
    folder.mkdir(parents=True)
    os.mkfifo(folder / f"{COMMIT[:8]}-e.suite.kvjson")  # opening it to read would hang
    cache = SidecarCache(tmp_path, MACHINE)
    assert cache.get(COMMIT) is None
    assert "not a regular file" in cache.problems[0]["reason"]


def test_a_good_sidecar_is_read(tmp_path):
    _write(tmp_path, json.dumps(GOOD).encode())
    found = sidecar.read_commit(tmp_path, MACHINE, COMMIT)
    assert found.state_of("KVAlloc", ("a",)) == {"before": "s0"}


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200) | JSON.map(json.dumps) | SIDECAR_LIKE.map(json.dumps))
def test_any_bytes_or_json_give_data_or_a_skip_never_an_exception(tmp_path, body):
    path = _write(tmp_path, body if isinstance(body, bytes) else body.encode())
    problems: list = []
    found = sidecar.read_commit(tmp_path, MACHINE, COMMIT, problems=problems)
    if found is None:  # skipped with its reason, or another commit's file
        assert problems or json.loads(path.read_text())["commit"] != COMMIT
    else:
        assert not problems
        _use(found)
    cache = SidecarCache(tmp_path, MACHINE)
    cache.get(COMMIT)
    assert cache.problems == problems
