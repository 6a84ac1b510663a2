"""Several GPUs of one model under one machine name (kvbench/history/verdict/devices.py): a
device offset is no step, whether the shards alternate devices or hold them in blocks, and a
real step inside one shard is still found.

Synthetic histories: 40 commits measured in one run, flat latency series with 0.5% noise per
commit; commits measured on GPU-a and GPU-b, GPU-b 2% slower on every series. The sidecars name
each commit's device, as the suite writes them."""

from __future__ import annotations

import numpy as np
import pytest

from kvbench.history.verdict import devices, simulate
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import load_history

N = 40
SIGMA = 0.005
OFFSET = 0.02
SERIES = 12
LAYOUTS = {"alternating": [k % 2 for k in range(N)],  # round-robin shards, one GPU each
           "blocks": [0] * (N // 2) + [1] * (N // 2)}  # shard 0 then shard 1


def _history(tmp_path, layout, *, step_at=None, step=0.05, sidecars=True, seed=7):
    rng = np.random.default_rng(seed)
    commits = simulate.git_history(tmp_path / "repo", N)
    device = LAYOUTS[layout]
    truths = []
    for k in range(SERIES):
        t = simulate.Truth(f"s{k}", "gpu", "flat")
        log_x = np.log(50e-6) + SIGMA * rng.standard_normal(N) + OFFSET * np.array(device)
        if step_at is not None and k == 0:
            log_x[step_at:] += np.log1p(step)
            t.scenario, t.start, t.stop = "step", step_at, step_at
        t.values = np.exp(log_x)
        truths.append(t)
    results = simulate.write_results(tmp_path / "repo", commits, [0] * N, truths, rng)
    if sidecars:
        simulate.write_device_sidecars(results, commits, [f"GPU-{'ab'[d]}" for d in device],
                                       truths)
    return analyze(load_history(results, simulate.MACHINE)), commits


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_device_offset_is_no_finding(tmp_path, layout):
    report, _ = _history(tmp_path, layout)
    assert [(f.series.name, f.kind) for f in report.findings] == []
    judged = [v for v in report.verdicts if v.noise is not None]
    assert len(judged) == SERIES
    if layout == "alternating":  # the offset is measured where the devices alternate
        found = [v.device_offsets["GPU-b"] for v in judged]
        # each a median of 39 crossings (standard error ~0.14%); their median closer still
        assert all(abs(f - OFFSET) < 0.006 for f in found), found
        assert float(np.median(found)) == pytest.approx(OFFSET, abs=0.002)
        # and the noise judged is the commits' own, not the devices' difference
        assert all(v.noise.pct < 0.8 for v in judged)


def test_without_the_devices_the_offset_reads_as_steps(tmp_path):
    """The same block history with sidecars that name no device: the shard boundary is
    reported as a step (what the device model is for)."""
    report, commits = _history(tmp_path, "blocks", sidecars=False)
    assert any(f.commit == commits[N // 2] for f in report.findings)


@pytest.mark.parametrize(("layout", "at"), [("alternating", 25), ("blocks", 10),
                                           ("blocks", 29)])
def test_a_real_step_inside_one_shard_is_found(tmp_path, layout, at):
    report, commits = _history(tmp_path, layout, step_at=at)
    found = [f for f in report.findings if f.series.params == ("'s0'",)]
    assert len(found) == 1, [(f.series.name, f.commit[:8]) for f in report.findings]
    assert found[0].verdict == "regression" and found[0].commit == commits[at]
    assert found[0].effect_pct == pytest.approx(5.0, abs=1.5)
    assert [f for f in report.findings if f.series.params != ("'s0'",)] == []


def test_offsets_of_three_devices_from_their_crossings():
    rng = np.random.default_rng(3)
    labels = [["x", "y", "z"][k % 3] for k in range(60)]
    true = {"x": 0.0, "y": 0.03, "z": -0.01}
    x = np.array([true[d] for d in labels]) + 0.002 * rng.standard_normal(60)
    found, reference = devices.offsets(x, labels)
    assert reference == "x"
    for d, v in true.items():
        assert found[d] == pytest.approx(v, abs=0.003)
    # one change of device (blocks): no estimate, each device its own run
    blocks = ["x"] * 10 + ["y"] * 10
    assert devices.offsets(np.zeros(20), blocks)[0] == {"x": 0.0, "y": 0.0}
    adjusted = devices.adjust(np.zeros(20), [0] * 20, blocks)
    assert adjusted.runs == [0] * 10 + [1] * 10
    assert devices.adjust(np.zeros(20), [0] * 20, [None] * 20) is None
