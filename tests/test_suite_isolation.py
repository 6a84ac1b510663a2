"""A case that crashes its measuring process loses only itself (benchmarks/_isolate.py)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import _common as c
from benchmarks import _sidecar


def _fake_measure() -> dict:
    """Two groups of cases; ('b',) segfaults its process, ('e',) raises."""
    results: dict = {}

    def body(key: tuple) -> dict:
        if key == ("b",):
            os.kill(os.getpid(), signal.SIGSEGV)
        if key == ("e",):
            raise ValueError("an ordinary failure")
        return {"samples_s": [1e-6, 2e-6], "median_us": 1.5, "selected": key[0]}

    for keys in ([("a",), ("b",), ("c",)], [("d",), ("e",)]):
        c.run_group(keys, lambda: None, lambda _, keys=keys: c.run_cases(keys, body, results),
                    results)
    return results


def test_a_segfaulting_case_loses_only_itself(monkeypatch, capsys):
    monkeypatch.setitem(c.GROUPS, "fake", (("_planted_module", "_fake_measure", "Fake"),))
    monkeypatch.setattr(c.importlib, "import_module",
                        lambda name: sys.modules[__name__] if name.endswith("_planted_module")
                        else __import__(name))
    monkeypatch.setattr(_sidecar, "STATES", [])
    out = c.measure_group("fake")["Fake"]
    assert "SIGSEGV" in out[("b",)]["error"]
    assert {k for k, e in out.items() if "samples_s" in e} == {("a",), ("c",), ("d",)}
    assert "an ordinary failure" in out[("e",)]["error"]
    # every measured case points at the machine state of its measurement group
    assert all(isinstance(out[k]["state"], int) for k in (("a",), ("c",), ("d",)))
    assert "died (SIGSEGV)" in capsys.readouterr().err
