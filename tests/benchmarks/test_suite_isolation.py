"""A case that crashes its measuring process loses only itself (benchmarks/runner/isolate.py)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks import _common as c
from benchmarks.runner import host as _host
from benchmarks.runner import worker as _worker


def _fake_measure(w) -> dict:
    """Two groups of cases; ('b',) segfaults its process, ('e',) raises."""
    results: dict = {}

    def body(key: tuple) -> dict:
        if key == ("b",):
            os.kill(os.getpid(), signal.SIGSEGV)
        if key == ("e",):
            raise ValueError("an ordinary failure")
        return {"samples_s": [1e-6, 2e-6], "median_us": 1.5, "selected": key[0]}

    for keys in ([("a",), ("b",), ("c",)], [("d",), ("e",)]):
        w.run_group(keys, lambda: None, lambda _, keys=keys: w.run_cases(keys, body, results),
                    results)
    return results


def test_a_segfaulting_case_loses_only_itself(monkeypatch, capsys):
    monkeypatch.setitem(c.GROUPS, "fake", (("_planted_module", "_fake_measure", "Fake"),))
    monkeypatch.setattr(_worker.importlib, "import_module",
                        lambda name: sys.modules[__name__] if name.endswith("_planted_module")
                        else __import__(name))
    out = c.measure_group("fake")["Fake"]
    assert "SIGSEGV" in out[("b",)]["error"]
    assert {k for k, e in out.items() if "samples_s" in e} == {("a",), ("c",), ("d",)}
    assert "an ordinary failure" in out[("e",)]["error"]
    # every measured case points at the machine state of its measurement group
    assert all(isinstance(out[k]["state"], int) for k in (("a",), ("c",), ("d",)))
    assert "died (SIGSEGV)" in capsys.readouterr().err


def _pinning_measure(w) -> dict:
    """A host-side class: pins its process to one core, as kv_alloc's measure function does."""
    cores = _host.allowed_cores()
    if cores:
        os.sched_setaffinity(0, {cores[0]})
    return {("a",): {"skip": "pinned"}}


def _pinning_with_a_thread_measure(w) -> dict:
    """A host-side class that starts a thread while pinned (as torch's pool or the CUDA
    driver may): the thread waits until the next class reads its affinity."""
    cores = _host.allowed_cores()
    if cores:
        os.sched_setaffinity(0, {cores[0]})
    started = threading.Event()
    _THREAD["tid"], _THREAD["stop"] = None, threading.Event()

    def body():
        _THREAD["tid"] = threading.get_native_id()
        started.set()
        _THREAD["stop"].wait(30)

    threading.Thread(target=body, daemon=True).start()
    started.wait(30)
    return {("a",): {"skip": "pinned"}}


_THREAD: dict = {}


def _thread_affinity_measure(w) -> dict:
    """The next class: records the cores the thread started while pinned may run on."""
    cores = sorted(os.sched_getaffinity(_THREAD["tid"]))
    _THREAD["stop"].set()
    return {("a",): {"skip": repr(cores)}}


def _affinity_measure(w) -> dict:
    """The next class: records the cores its process may run on."""
    return {("a",): {"skip": repr(sorted(_host.allowed_cores()))}}


def _plant_classes(monkeypatch, *classes: tuple[str, str]) -> None:
    """A group "fake" of (measure function of this module, class name)."""
    monkeypatch.setitem(c.GROUPS, "fake",
                        tuple(("_planted_module", func, cls) for func, cls in classes))
    monkeypatch.setattr(_worker.importlib, "import_module",
                        lambda name: sys.modules[__name__] if name.endswith("_planted_module")
                        else __import__(name))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity calls here")
def test_a_host_class_pinning_its_process_leaves_the_next_class_every_core(monkeypatch):
    """One process measures every class: the core a host-side class pinned itself to must not
    confine the GPU classes measured after it."""
    _plant_classes(monkeypatch, ("_pinning_measure", "Host"), ("_affinity_measure", "Next"))
    out = c.measure_group_here("fake")
    assert out["Next"][("a",)]["skip"] == repr(sorted(_host.allowed_cores()))


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no CPU affinity calls here")
def test_a_thread_started_while_pinned_gets_every_core_back(monkeypatch):
    _plant_classes(monkeypatch, ("_pinning_with_a_thread_measure", "Host"),
                   ("_thread_affinity_measure", "Next"))
    out = c.measure_group_here("fake")
    assert out["Next"][("a",)]["skip"] == repr(sorted(_host.allowed_cores()))


def test_a_class_named_alone_is_measured_and_the_others_are_not(monkeypatch):
    _plant_classes(monkeypatch, ("_affinity_measure", "A"), ("_affinity_measure", "B"))
    monkeypatch.setenv(c.SELECT_VAR, "B")
    out = c.measure_group_here("fake")
    assert out["A"] == {c._CLASS_SKIP: f"{c.NOT_SELECTED} B"}
    assert ("a",) in out["B"]
    monkeypatch.setenv(c.SELECT_VAR, "B('x',)")  # a case of B: B is measured, A is not
    out = c.measure_group_here("fake")
    assert ("a",) in out["B"] and c._CLASS_SKIP in out["A"]


def _measured_a(w) -> dict:
    results: dict = {}
    keys = [("x",)]
    w.run_group(keys, lambda: None, lambda _: w.run_cases(
        keys, lambda key: {"samples_s": [1e-6, 2e-6], "median_us": 1.5, "selected": "x"},
        results), results)
    return results


def _dies_between_cases(w) -> dict:
    """A class whose process dies outside any case (its setup), after class A finished."""
    os.kill(os.getpid(), signal.SIGSEGV)


def test_a_process_dying_outside_a_case_keeps_the_classes_it_measured(monkeypatch, capsys):
    """The classes finished before the crash were turned into failures (every case "failed,
    no number recorded"), and the classes never reached read as skipped."""
    _plant_classes(monkeypatch, ("_measured_a", "A"), ("_dies_between_cases", "B"),
                   ("_measured_a", "C"))
    out = c.measure_group("fake")
    a = c.class_results(out, "A")
    assert c.entry(a, ("x",))["median_us"] == 1.5
    for cls in ("B", "C"):  # B died in its setup, C was never reached: failures, with why
        with pytest.raises(RuntimeError, match=r"not measured .*\n.*died \(SIGSEGV\) outside"):
            c.entry(c.class_results(out, cls), ("x",))
    assert "died (SIGSEGV)" in capsys.readouterr().err
