"""A case that crashes its measuring process loses only itself (benchmarks/_isolate.py)."""

from __future__ import annotations

import gc
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

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


def _counting_measure() -> dict:
    """One case whose number is the measuring process's id: the processes are distinct."""
    results: dict = {}

    def body(_key: tuple) -> dict:
        return {"samples_s": [os.getpid() * 1e-6], "median_us": float(os.getpid())}

    c.run_group([("a",)], lambda: None, lambda _: c.run_cases([("a",)], body, results), results)
    return results


def _plant_group(monkeypatch, measure, processes: int) -> None:
    """A group "fake" of one class, Fake, whose measure function is `measure` (from this
    module), measured by `processes` processes, with no sidecar states."""
    monkeypatch.setitem(c.GROUPS, "fake", (("_planted_module", measure.__name__, "Fake"),))
    monkeypatch.setitem(c.GROUP_PROCESSES, "fake", processes)
    monkeypatch.setattr(c.importlib, "import_module",
                        lambda name: sys.modules[__name__] if name.endswith("_planted_module")
                        else __import__(name))
    monkeypatch.setattr(_sidecar, "STATES", [])


def test_a_group_measured_by_several_processes_keeps_the_least(monkeypatch):
    _plant_group(monkeypatch, _counting_measure, 3)
    entry = c.measure_group("fake")["Fake"][("a",)]
    pids = [p["median_us"] for p in entry["host"]["processes"]]
    assert len(set(pids)) == 3 and os.getpid() not in pids  # three forked children
    assert entry["median_us"] == min(pids)
    assert entry["state"] == pids.index(min(pids))  # its own process's machine state


def _frozen_measure() -> dict:
    """One case whose number is how many objects the measuring process found frozen out of
    the collector when it started (1 + the count, so that it is a positive time)."""
    frozen = gc.get_freeze_count()
    results: dict = {}

    def body(_key: tuple) -> dict:
        return {"samples_s": [1e-6], "median_us": 1.0 + frozen}

    c.run_group([("a",)], lambda: None, lambda _: c.run_cases([("a",)], body, results), results)
    return results


@pytest.mark.parametrize("count", [1, 3])
def test_several_processes_inherit_the_supervisors_heap_frozen(monkeypatch, count):
    """With several measuring processes, each child's full collections between cases skip
    the heap it inherited (the supervisor froze it before forking) and the supervisor's own
    collector gets it back afterwards; one process (no fork of a supervisor that imported
    torch for it) leaves the collector alone."""
    _plant_group(monkeypatch, _frozen_measure, count)
    assert gc.get_freeze_count() == 0
    entry = c.measure_group("fake")["Fake"][("a",)]
    seen = [p["median_us"] - 1 for p in entry["host"]["processes"]] if count > 1 else \
        [entry["median_us"] - 1]
    assert gc.get_freeze_count() == 0
    if count == 1:
        assert seen == [0]
    else:
        assert len(seen) == count and min(seen) > 1000, seen  # the whole inherited heap


def test_a_callers_own_freeze_is_left_frozen(monkeypatch):
    """A supervisor that froze objects itself keeps them frozen after the group."""
    _plant_group(monkeypatch, _frozen_measure, 2)
    gc.freeze()
    try:
        before = gc.get_freeze_count()
        entry = c.measure_group("fake")["Fake"][("a",)]
        # frozen objects freed by reference counting leave the count, so compare loosely
        assert gc.get_freeze_count() > before // 2 > 1000
        assert all(p["median_us"] - 1 > before // 2 for p in entry["host"]["processes"])
    finally:
        gc.unfreeze()


def test_the_host_groups_process_count_can_be_set_and_is_checked(monkeypatch):
    monkeypatch.delenv(c.HOST_PROCESSES_VAR, raising=False)
    assert c.group_processes("host") == c.GROUP_PROCESSES["host"] == 10
    from kvbench.core.env import SETTINGS  # what `kvbench env` tells a user
    assert f"(default {c.GROUP_PROCESSES['host']};" in SETTINGS[c.HOST_PROCESSES_VAR]
    assert c.group_processes("decode") == 1
    monkeypatch.setenv(c.HOST_PROCESSES_VAR, "1")
    assert c.group_processes("host") == 1
    assert c.group_processes("decode") == 1  # the GPU groups are not its business
    for bad in ("0", "two", "-1", "1.5"):
        monkeypatch.setenv(c.HOST_PROCESSES_VAR, bad)
        with pytest.raises(ValueError, match=rf"KVBENCH_HOST_PROCESSES='{re.escape(bad)}': "
                                             r"expected a whole number .* >= 1 \(default 10\)"):
            c.group_processes("host")


def test_the_supervisor_imports_torch_before_forking_several_processes_only():
    """Several measuring processes inherit torch from their supervisor instead of importing it
    each; one process imports it itself, as before; the import creates no CUDA state. Run in a
    fresh interpreter: this one has torch imported already."""
    code = textwrap.dedent("""
        import os, sys
        from benchmarks import _common as c
        seen = []
        c._isolate.run_isolated = lambda measure, states: seen.append("torch" in sys.modules) or {}
        c._sidecar.write_sidecar = lambda group, out: None
        for count in ("1", "3"):
            os.environ[c.HOST_PROCESSES_VAR] = count
            c.measure_group("host")
        print(seen, sys.modules["torch"].cuda.is_initialized())
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, check=True).stdout
    assert out.split() == ["[False,", "True,", "True,", "True]", "False"], out
