"""The measuring loop freezes what each class imported (so the collection between groups
scans only what cases create) and thaws it when the loop ends; prepare_process called
outside the loop freezes nothing."""

from __future__ import annotations

import gc
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.runner.worker import Worker


def test_freeze_only_inside_the_measuring_loop_and_thawed_after(monkeypatch):
    import torch

    # prepare_process drops TRITON_INTERPRET and sets torch to one thread on a CPU (a
    # measuring process's settings): restored for the tests after this one in the process.
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    seen = {}

    def measure(w):
        w.prepare_process()
        seen["frozen_in_loop"] = gc.get_freeze_count()
        return {}

    package = types.ModuleType("kvb_fake_suite")
    package.__path__ = []
    module = types.ModuleType("kvb_fake_suite.m")
    module.measure = measure
    monkeypatch.setitem(sys.modules, "kvb_fake_suite", package)
    monkeypatch.setitem(sys.modules, "kvb_fake_suite.m", module)
    gc.unfreeze()
    worker = Worker({"g": (("m", "measure", "Fake"),)}, "kvb_fake_suite")
    worker.prepare_process()
    assert gc.get_freeze_count() == 0  # outside the loop: nothing frozen
    out = worker.measure_group("g")
    assert out == {"Fake": {}}
    assert seen["frozen_in_loop"] > 0 and gc.get_freeze_count() == 0
