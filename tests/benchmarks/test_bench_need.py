"""benchmarks/runner/compat.need / need_first: the suite runs against older kvbench commits, so a
name that moved is looked up where the measured commit keeps it, and a commit without it
skips with every place tried named."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the asv suite package `benchmarks` lives at the repo root

from benchmarks import _common


@pytest.fixture
def old_and_new(monkeypatch):
    """Two fake module locations: `fake_new` (no longer holds the name) and `fake_old`."""
    new = types.ModuleType("fake_new")
    old = types.ModuleType("fake_old")
    old.last_selection = "old"
    monkeypatch.setitem(sys.modules, "fake_new", new)
    monkeypatch.setitem(sys.modules, "fake_old", old)
    return new, old


def test_need_first_prefers_the_first_place_that_has_every_name(old_and_new):
    new, old = old_and_new
    places = [("fake_new", ("last_selection",)), ("fake_old", ("last_selection",))]
    assert _common.need_first(places) is old  # an older commit: only the old place has it
    new.last_selection = "new"
    assert _common.need_first(places) is new  # this commit: the new place wins


def test_need_first_skips_over_a_module_that_does_not_exist(old_and_new):
    places = [("fake_missing_module", ("last_selection",)), ("fake_old", ("last_selection",))]
    assert _common.need_first(places).last_selection == "old"


def test_need_first_skips_naming_every_place_when_none_has_it(old_and_new):
    places = [("fake_new", ("last_selection",)), ("fake_missing_module", ("x",))]
    with pytest.raises(_common.Skip) as exc:
        _common.need_first(places)
    assert "fake_new has no last_selection" in str(exc.value)
    assert "no fake_missing_module" in str(exc.value)


def test_dispatch_overhead_finds_last_selection_in_this_tree():
    mod = _common.need_first([("kvbench.api", ("last_selection",)),
                              ("kvbench.ops.common", ("last_selection",))])
    assert mod.__name__ == "kvbench.api"
