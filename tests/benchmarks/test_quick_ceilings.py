"""A CPU's quick plausibility calibration is measured once per asv environment
(benchmarks/runner/worker.quick_cpu_ceilings): the first commit's measuring process writes it
beside the environment, every later one reads it; an entry the commit's Ceilings cannot take is
measured again; outside asv nothing is written; `kvbench calibrate`'s own cache is untouched."""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.runner import worker as w

# the module: kvbench.harness re-exports a function of that name
calibrate = importlib.import_module("kvbench.harness.calibrate")


class CountingCalibrate:
    """kvbench.harness.calibrate with a counted, instant calibrate() (same Ceilings)."""

    Ceilings = calibrate.Ceilings

    def __init__(self) -> None:
        self.calls: list[dict] = []
        fields = dataclasses.fields(calibrate.Ceilings)
        self._value = calibrate.Ceilings(**{f.name: 100.0 + i for i, f in enumerate(fields)})

    def calibrate(self, **kwargs):
        self.calls.append(kwargs)
        return self._value


def test_measured_once_per_environment_then_read(tmp_path, monkeypatch):
    monkeypatch.setenv("ASV_ENV_DIR", str(tmp_path))
    cal = CountingCalibrate()
    first = w.quick_cpu_ceilings(cal, "cpu-x")
    second = w.quick_cpu_ceilings(cal, "cpu-x")
    assert first == second == cal._value
    assert len(cal.calls) == 1
    assert cal.calls[0] == {"size_bytes": w.CPU_PLAUSIBILITY_CALIBRATION_BYTES, "store": False}
    kept = json.loads((tmp_path / w.QUICK_CEILINGS_FILE).read_text())
    assert list(kept) == ["cpu-x"]
    w.quick_cpu_ceilings(cal, "cpu-y")  # another device name: its own entry
    assert len(cal.calls) == 2
    assert sorted(json.loads((tmp_path / w.QUICK_CEILINGS_FILE).read_text())) == ["cpu-x", "cpu-y"]


def test_an_entry_this_commit_cannot_take_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setenv("ASV_ENV_DIR", str(tmp_path))
    (tmp_path / w.QUICK_CEILINGS_FILE).write_text(json.dumps({"cpu-x": {"old_field": 1.0}}))
    cal = CountingCalibrate()
    assert w.quick_cpu_ceilings(cal, "cpu-x") == cal._value
    assert len(cal.calls) == 1
    (tmp_path / w.QUICK_CEILINGS_FILE).write_text("not json")
    assert w.quick_cpu_ceilings(cal, "cpu-x") == cal._value
    assert len(cal.calls) == 2


def test_outside_asv_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.delenv("ASV_ENV_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    cal = CountingCalibrate()
    w.quick_cpu_ceilings(cal, "cpu-x")
    w.quick_cpu_ceilings(cal, "cpu-x")
    assert len(cal.calls) == 2
    assert list(tmp_path.iterdir()) == []


def test_a_folder_that_cannot_keep_it_still_gives_the_measurement(tmp_path, monkeypatch):
    """The environment's folder refuses the file: this commit's measuring goes on with the
    value just measured, and no temporary file is left behind."""
    monkeypatch.setenv("ASV_ENV_DIR", str(tmp_path))

    def refuse(src, dst):
        raise PermissionError(f"read-only: {dst}")

    monkeypatch.setattr(w.os, "replace", refuse)
    cal = CountingCalibrate()
    assert w.quick_cpu_ceilings(cal, "cpu-x") == cal._value
    assert list(tmp_path.iterdir()) == []
