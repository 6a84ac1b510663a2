"""The runner against an older kvbench: what the commit lacks is skipped or left at its own
default, the rest is measured, and nothing crashes (benchmarks/runner/__init__.py says how).

asv installs each measured commit's kvbench and runs this tree's benchmarks/ against it. The
older kvbench is played here by stubs in sys.modules: a measuring pipeline without
measure_row, a harness timers module without the newer knobs. A forked
worker (the manager's path) inherits the stubs, as it inherits the installed package.
"""

from __future__ import annotations

import importlib
import itertools
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the asv suite package `benchmarks` lives at the repo root

from benchmarks import _common, dispatch_overhead, kv_alloc, kv_gather_fp8, kv_write
from benchmarks import paged_decode as bench_decode
from benchmarks.runner import worker as _worker

CLASSES = {cls.__name__: cls for cls in (
    kv_alloc.KVAlloc, dispatch_overhead.DispatchOverhead, kv_write.KVWrite,
    kv_gather_fp8.KVGatherFp8, bench_decode.PagedDecode, bench_decode.PagedDecodeAblation,
    bench_decode.PagedDecodeGeometry)}
#: A case every commit with the pipeline measures on a CPU, and that moves bytes (so the
#: runner asks for plausibility ceilings).
WRITE_CASE = "KVWrite('torch/index_copy', 'fp16', 'decode_64')"


@pytest.fixture
def cpu_process(monkeypatch):
    """A CPU measuring process as asv starts it: no inherited interpreter, no selection, torch's
    thread count restored afterwards."""
    import torch

    threads = torch.get_num_threads()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv(_common.SELECT_VAR, raising=False)
    if torch.cuda.is_available():
        pytest.skip("plays an older kvbench on the CPU machine's suite")
    yield
    torch.set_num_threads(threads)


def test_a_pipeline_without_measure_row_skips_every_case_and_crashes_none(monkeypatch,
                                                                         cpu_process):
    """An older kvbench.measure.pipeline (no measure_row, no least_median): the whole suite,
    through the manager's forked worker, records every case of every class as a skip that
    names the missing name; no case and no class fails."""
    from kvbench.measure import pipeline

    old = types.ModuleType("kvbench.measure.pipeline")
    old.cpu_skip = pipeline.cpu_skip
    old.unserved = pipeline.unserved
    monkeypatch.setitem(sys.modules, "kvbench.measure.pipeline", old)
    out = _common.measure_group("suite")
    assert set(out) == set(CLASSES)
    for name, cls in CLASSES.items():
        results = _common.class_results(out, name)  # raises on a class-level failure
        assert set(results) == set(itertools.product(*cls.params)), name
        errors = {k: v["error"] for k, v in results.items() if "error" in v}
        assert errors == {}, f"{name}: {errors}"
        assert all("skip" in v for v in results.values()), name
    reasons = {v["skip"] for v in _common.class_results(out, "KVAlloc").values()}
    assert reasons == {"this commit's kvbench.measure.pipeline has no measure_row"}
    reasons = {v["skip"] for v in _common.class_results(out, "DispatchOverhead").values()}
    assert reasons == {"this commit's kvbench.measure.pipeline has no least_median"}
    with pytest.raises(NotImplementedError, match="has no measure_row"):
        kv_alloc.KVAlloc().setup(out, "auto", "bump", 1)  # asv: skipped, not failed


def test_a_harness_without_the_newer_knobs_still_measures(monkeypatch, cpu_process):
    """An older harness: timers has the budget and repeat range but not BENCH_STOP_CI or
    HOST_BUDGET_S. The runner sets the knobs the commit has, leaves the others unset (the
    commit's own defaults), and the case gets its number."""
    # The case's modules are imported with the real timers: the stub below is only what the
    # runner sees when it sets the knobs, as an older commit's harness would be.
    for module in ("kvbench.harness.calibrate", "kvbench.measure.pipeline",
                   "kvbench.ops.kv_write", "kvbench.ops.paged_decode"):
        importlib.import_module(module)

    old_timers = types.ModuleType("kvbench.harness.timers")
    old_timers.BENCH_BUDGET_S = 0.15
    old_timers.BENCH_REPEAT_RANGE = (10, 1000)
    monkeypatch.setitem(sys.modules, "kvbench.harness.timers", old_timers)
    monkeypatch.setenv(_common.SELECT_VAR, WRITE_CASE)
    worker = _common.worker()
    out = worker.measure_group("suite")

    assert old_timers.BENCH_BUDGET_S == _worker.SUITE_BENCH_BUDGET_S
    assert old_timers.BENCH_REPEAT_RANGE == _worker.SUITE_BENCH_REPEAT_RANGE
    assert not hasattr(old_timers, "BENCH_STOP_CI") and not hasattr(old_timers, "HOST_BUDGET_S")
    results = _common.class_results(out, "KVWrite")
    key = ("torch/index_copy", "fp16", "decode_64")
    assert results[key]["samples_s"] and results[key]["selected"] == "torch/index_copy"
    assert all("skip" in v for k, v in results.items() if k != key)
    with pytest.raises(NotImplementedError, match="not selected"):
        _common.class_results(out, "KVAlloc")


def test_an_op_module_the_commit_lacks_skips_its_groups(monkeypatch, cpu_process):
    """A commit from before an op (no kvbench.ops.kv_write): its class's groups are recorded
    as skips naming the module, in this process; the selected class crashes nothing."""
    monkeypatch.setitem(sys.modules, "kvbench.ops.kv_write", None)  # ImportError
    monkeypatch.setenv(_common.SELECT_VAR, "KVWrite")
    out = _common.worker().measure_group("suite")
    results = _common.class_results(out, "KVWrite")
    assert set(results) == set(itertools.product(*kv_write.KVWrite.params))
    measured_here = {k: v["skip"] for k, v in results.items() if "GPU-size" not in v["skip"]}
    assert measured_here and all("has no kvbench.ops.kv_write" in why
                                 for why in measured_here.values()), measured_here


#: A geometry case small enough for torch's CPU rows: (batch, context tokens).
TINY_GEOMETRY_CASE = (2, 48)


@pytest.fixture(scope="module")
def geometry_worker():
    """One measuring worker for the geometry tests, as the suite has one per commit: its CPU
    plausibility calibration (seconds of cache flushes on a small runner) is paid once."""
    return _common.worker()


def _measure_geometries_on_cpu(worker) -> dict:
    """PagedDecodeGeometry's measuring body on this CPU at TINY_GEOMETRY_CASE (its own case
    is GPU-size, which a CPU skips before looking kvbench up)."""
    from kvbench.dispatch.core import clear_decisions

    worker.cls = "PagedDecodeGeometry"
    dev = worker.prepare_process()
    clear_decisions()  # decisions cached by earlier tests were made with the interpreter on
    results: dict = {}
    keys = [(name,) for name in bench_decode.GEOMETRIES]
    bench_decode.measure_geometries(worker, dev, keys, results, *TINY_GEOMETRY_CASE)
    assert set(results) == set(keys)
    return results


def test_this_commit_measures_every_geometry_with_its_options(cpu_process,
                                                              geometry_worker):
    """The baseline of the two tests below: with this tree's kvbench every geometry of the
    axis is measured (auto, checked against the fp64 reference with the geometry's options,
    timed with its proof); gemma-2-9b's problem carries its window and soft-cap."""
    results = _measure_geometries_on_cpu(geometry_worker)
    for (name,), found in results.items():
        assert "samples_s" in found, f"{name}: {found}"
        assert found["selected"] == "torch/gather_sdpa" and found["gbps"] > 0, found
        assert found["measured_error"] is not None  # the last timed call was verified
    assert "options=('window', 'softcap')" in results[("gemma-2-9b",)]["explain"]
    assert "options=()" in results[("llama3-8b",)]["explain"]


def test_a_commit_without_the_geometry_table_skips_the_geometries(monkeypatch, cpu_process,
                                                                  geometry_worker):
    """A commit from before the geometry axis: first one whose paged_decode oracle has no
    geometry_pool, then one with no kvbench.ops.decode_geometry module. Every geometry is
    recorded as a skip naming what is missing; nothing fails."""
    from kvbench.ops import paged_decode

    old = types.ModuleType("kvbench.ops.paged_decode")
    old.decode_pool, old.decode_inputs = paged_decode.decode_pool, paged_decode.decode_inputs
    monkeypatch.setitem(sys.modules, "kvbench.ops.paged_decode", old)
    results = _measure_geometries_on_cpu(geometry_worker)
    assert {v.get("skip") for v in results.values()} == {
        "this commit's kvbench.ops.paged_decode has no geometry_pool"}

    monkeypatch.setitem(sys.modules, "kvbench.ops.paged_decode", paged_decode)
    monkeypatch.setitem(sys.modules, "kvbench.ops.decode_geometry", None)  # ImportError
    results = _measure_geometries_on_cpu(geometry_worker)
    assert all("this commit has no kvbench.ops.decode_geometry" in v.get("skip", "")
               for v in results.values()), results


def test_a_geometry_the_commit_does_not_list_is_skipped_and_the_others_measured(
        monkeypatch, cpu_process, geometry_worker):
    """A commit whose geometry table holds fewer names than this suite's axis: the names it
    lacks are skips naming them; the ones it has are measured (auto, checked, timed)."""
    from kvbench.ops import decode_geometry

    old = types.ModuleType("kvbench.ops.decode_geometry")
    old.GEOMETRIES = {"phi-3-mini-128k": decode_geometry.GEOMETRIES["phi-3-mini-128k"]}
    monkeypatch.setitem(sys.modules, "kvbench.ops.decode_geometry", old)
    results = _measure_geometries_on_cpu(geometry_worker)
    found = results.pop(("phi-3-mini-128k",))
    assert found["samples_s"] and found["selected"] == "torch/gather_sdpa", found
    assert {k: v["skip"] for k, v in results.items()} == {
        (name,): f"this commit's kvbench.ops.decode_geometry has no geometry {name!r}"
        for (name,) in results}


def test_a_host_op_without_work_is_measured(monkeypatch, cpu_process):
    """The first commits with the pipeline give the allocator's inputs no Work (None): the
    runner read inputs.work.moved and every KVAlloc case failed with an AttributeError."""
    import dataclasses

    from kvbench.ops import kv_alloc as op

    real = op.alloc_inputs

    def old_alloc_inputs(*args, **kwargs):
        return dataclasses.replace(real(*args, **kwargs), work=None)

    monkeypatch.setattr(op, "alloc_inputs", old_alloc_inputs)
    monkeypatch.setenv(_common.SELECT_VAR, "KVAlloc('host/freelist', 'bump', 1)")
    out = _common.worker().measure_group("suite")
    found = _common.class_results(out, "KVAlloc")[("host/freelist", "bump", 1)]
    assert "error" not in found, found.get("error")
    assert found["samples_s"] and found["gbps"] is None
