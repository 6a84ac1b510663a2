"""The suite's one-case mode (KVBENCH_ASV_SELECT, benchmarks/_common.py): `kvbench bisect`
re-measures exactly the series it bisects, and nothing else of the group."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the asv suite package `benchmarks` lives at the repo root

from benchmarks import _common, dispatch_overhead, kv_alloc
from benchmarks.runner.worker import Worker

SELECTED = ("host/freelist", "fragmented", 64)


def test_case_label_is_asvs_param_repr():
    assert _common.case_label("KVAlloc", SELECTED) == "KVAlloc('host/freelist', 'fragmented', 64)"
    assert _common.case_label("X", ("a",)) == "X('a')"


def test_selected_run_measures_one_case_and_builds_nothing_else(monkeypatch):
    monkeypatch.setenv(_common.SELECT_VAR, _common.case_label("KVAlloc", SELECTED))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    built = []
    real_build = Worker.run_group

    def counting_run_group(self, keys, build, measure, results, release=None):
        def build_and_count():
            built.append(keys[0][0])
            return build()
        return real_build(self, keys, build_and_count, measure, results, release)

    monkeypatch.setattr(Worker, "run_group", counting_run_group)
    other = []
    monkeypatch.setattr(dispatch_overhead, "measure", lambda w: other.append(1) or {})
    out = _common.measure_group_here("suite")  # in this process, so the counters see it

    assert other == [], "the suite's other classes must not run at all"
    with pytest.raises(NotImplementedError, match="not selected"):
        _common.class_results(out, "DispatchOverhead")
    alloc = _common.class_results(out, "KVAlloc")
    measured = [k for k, v in alloc.items() if "samples_s" in v]
    assert measured == [SELECTED]
    assert all(v["skip"].startswith(_common.NOT_SELECTED)
               for k, v in alloc.items() if k != SELECTED)
    assert built == ["host/freelist"], "only the selected selector's manager is built"
    assert len(alloc) == len(kv_alloc.SELECTORS) * len(kv_alloc.STATES) * len(kv_alloc.NS)
    suite = kv_alloc.KVAlloc()
    suite.setup(out, *SELECTED)
    assert suite.track_us(out, *SELECTED)["samples"]
    with pytest.raises(NotImplementedError, match="not selected"):
        suite.setup(out, "auto", "bump", 1)


def test_without_the_variable_every_case_is_measured(monkeypatch):
    monkeypatch.delenv(_common.SELECT_VAR, raising=False)
    results: dict = {}
    worker = _common.worker()
    worker.run_cases([("a",), ("b",)], lambda key: {"ok": key}, results)
    assert results == {("a",): {"ok": ("a",)}, ("b",): {"ok": ("b",)}}
    assert worker.not_selected(("a",)) is None


def test_selected_run_through_the_isolated_child_keeps_one_case(monkeypatch):
    """measure_group (the forked, crash-isolated path asv runs) returns the same selection."""
    monkeypatch.setenv(_common.SELECT_VAR, _common.case_label("KVAlloc", SELECTED))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    out = _common.measure_group("suite")
    alloc = _common.class_results(out, "KVAlloc")
    assert [k for k, v in alloc.items() if "samples_s" in v] == [SELECTED]
    with pytest.raises(NotImplementedError, match="not selected"):
        _common.class_results(out, "DispatchOverhead")


def test_a_selection_of_several_names_measures_what_each_names(monkeypatch):
    """A compare's recheck over claims in several classes: two cases of one class and a
    whole other class, ';' between them; the suite's remaining classes do not run."""
    other = ("auto", "bump", 1)
    names = [_common.case_label("KVAlloc", SELECTED), "DispatchOverhead",
             _common.case_label("KVAlloc", other)]
    monkeypatch.setenv(_common.SELECT_VAR, " ; ".join(names))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    ran = []
    monkeypatch.setattr(dispatch_overhead, "measure", lambda w: ran.append(w.cls) or {})
    out = _common.measure_group_here("suite")

    assert ran == ["DispatchOverhead"]
    alloc = _common.class_results(out, "KVAlloc")
    assert sorted(k for k, v in alloc.items() if "samples_s" in v) == sorted([SELECTED, other])
    rest = [cls for _, _, cls in _common.GROUPS["suite"]
            if cls not in ("KVAlloc", "DispatchOverhead")]
    assert rest
    for cls in rest:
        with pytest.raises(NotImplementedError, match="not selected"):
            _common.class_results(out, cls)


def test_the_suite_and_kvbench_split_a_selection_alike():
    from benchmarks.runner import worker
    from kvbench.history.bisect import measurer
    from kvbench.history.gate import selection

    assert worker.SELECT_SEPARATOR == selection.SELECT_SEPARATOR
    assert worker.NOT_SELECTED == measurer.NOT_SELECTED
    joined = selection.narrowest_selection(
        ["kv_alloc.KVAlloc.track_us('auto', 'bump', 1)", "kv_write.KVWrite.track_us('x')"])
    assert worker.selected_names(joined) == ("KVAlloc('auto', 'bump', 1)", "KVWrite('x')")
    assert worker.selects_class(joined, "KVWrite") and not worker.selects_class(joined, "KVW")
