"""`kvbench regressions` shows what the sidecars say differed across a step (issue 21).

Synthetic asv results (kvbench/history/verdict/simulate.py) with a planted step, and sidecars
written by the suite's own writer (benchmarks/runner/sidecar.write_sidecar, as a kvbench asv run
writes them) where the step coincides with an auto switch, a register change, a low SM clock
or an error drift. Without sidecars the report is what it was.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import numpy as np
import pytest
from test_regressions import _history, _steady, sim

from benchmarks.runner import sidecar as _sidecar
from kvbench.history.verdict import context
from kvbench.history.verdict.page import render_page
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.text import plot_findings, print_table

N, STEP_AT = 24, 14
BUSY = {"sm_mhz": 1980, "mem_mhz": 3201, "temp_c": 40, "power_w": 300.0,
        "clock_event_mask": 0, "clock_event_reasons": [], "at": "t"}
IDLE = {**BUSY, "sm_mhz": 345, "clock_event_mask": 1, "clock_event_reasons": ["GpuIdle"]}
KERNEL = {"name": "_split_kv_kernel", "registers": 128, "spills": 0, "shared_bytes": 16384,
          "num_warps": 4, "num_stages": 2, "maxnreg": None}
ERROR = {"max_abs": 6.1e-5, "max_rel": 6.7e-4, "scale": 0.9999927, "bias": -1.8e-7, "n": 4096}


def _entry(selected="triton/split_kv", resources=None, error=None, state=0):
    """One case entry as the suite's measured() hands it to write_sidecar."""
    return {"samples_s": [1e-4] * 5, "median_us": 100.0, "selected": selected, "explain": "",
            "timer": "bench/cold", "max_abs_diff": 6.1e-5, "measured_error": error or ERROR,
            "resources": [KERNEL] if resources is None else resources, "state": state}


def _write_sidecars(monkeypatch, results, commits, entry_of, state_of=lambda i: (IDLE, BUSY),
                    host_of=lambda i: None):
    """A sidecar per commit for sim.Latency's case ('s',), through the suite's writer."""
    for i, commit in enumerate(commits):
        before, after = state_of(i)
        host = host_of(i)
        host_fields = {} if host is None else {"host_before": host[0], "host_after": host[1]}
        monkeypatch.setenv("ASV_COMMIT", commit)
        monkeypatch.setenv("ASV_ENV_NAME", sim.ENV)
        monkeypatch.setenv("ASV_KVBENCH_MACHINE", sim.MACHINE)
        monkeypatch.setenv("ASV_KVBENCH_RESULTS_DIR", str(results))
        states = [{"keys": ["('s',)"], "before": before, "after": after, **host_fields}]
        assert _sidecar.write_sidecar("decode", {"Latency": {("s",): entry_of(i)}}, states)


@pytest.fixture
def stepped(tmp_path):
    """A latency series with a +20% step at commit STEP_AT, and its commits."""
    rng = np.random.default_rng(3)
    values = _steady(rng, N, 100e-6, 0.004)
    values[STEP_AT:] *= 1.20
    history, commits = _history(tmp_path, {"s": (sim.LATENCY, list(values))})
    return history, commits


def _finding(history):
    report = analyze(history)
    (finding,) = report.findings
    assert finding.verdict == "regression" and finding.settled == history.commits[STEP_AT]
    return report, finding


def _texts(finding):
    return [fact.text for fact in finding.context]


def test_an_auto_switch_at_the_step_is_reported(stepped, monkeypatch):
    history, commits = stepped
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry(
        "cuda/cluster_decode" if i < STEP_AT else "triton/split_kv"))
    report, finding = _finding(history)
    assert _texts(finding) == ["auto switched cuda/cluster_decode -> triton/split_kv"]
    (fact,) = report.to_json()["findings"][0]["context"]
    assert fact == {"kind": "auto_switch", "text": _texts(finding)[0],
                    "before": "cuda/cluster_decode", "after": "triton/split_kv"}


def test_a_register_change_is_reported_and_a_bare_function_handle_is_not(stepped, monkeypatch):
    history, commits = stepped
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry(
        resources=[KERNEL] if i < STEP_AT else [{**KERNEL, "registers": 168}]))
    _, finding = _finding(history)
    assert _texts(finding) == ["registers 128 -> 168"]
    # what triton 3.6's launch hook gives: a handle that differs per process, no resources
    assert context.resource_facts([{"function": 867238800}], [{"function": 902900400}]) == []
    assert context.resource_facts([{"function": 1}], [{**KERNEL, "registers": 168}]) == []


def test_a_low_sm_clock_and_a_throttle_reason_are_reported(stepped, monkeypatch):
    history, commits = stepped
    throttled = {**BUSY, "sm_mhz": 1410, "clock_event_mask": 4,
                 "clock_event_reasons": ["SwPowerCap"]}
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry(),
                    state_of=lambda i: (IDLE, BUSY if i < STEP_AT else throttled))
    _, finding = _finding(history)
    # the idle reading before a group's first launch is neither a clock nor a throttle
    assert _texts(finding) == ["SM clock 1980 -> 1410 MHz during the run",
                               "clock-event reasons none -> SwPowerCap"]


def test_a_slower_host_is_reported_and_a_steady_one_is_not(stepped, monkeypatch):
    history, commits = stepped
    fast = ({"canary_us": 72.0, "core": 15}, {"canary_us": 74.5, "core": 15})
    slow = ({"canary_us": 73.0, "core": 15}, {"canary_us": 128.4, "core": 15})
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry(),
                    host_of=lambda i: fast if i < STEP_AT else slow)
    _, finding = _finding(history)
    # each side's slowest reading: the host was slow for part of the settled side's group
    assert _texts(finding) == ["host canary 74 -> 128 us: the host ran 1.72x slower"]
    steady = [{"canary_us": 74.5 * 1.1}]
    assert context.host_state_facts([fast[1]], steady) == []
    assert context.host_state_facts([slow[1]], [fast[0]])[0].text.endswith("1.78x faster")
    assert context.host_state_facts([{"canary_us": None}], [fast[0]]) == []


def test_a_host_case_the_gate_flagged_is_reported(stepped, monkeypatch):
    """The suite's canary gate could not measure the settled side's case on a fast host."""
    history, commits = stepped
    fast = {"canary_us": [72.4, 72.2], "core": 14, "attempts": 1, "reference_us": 71.7,
            "fast": True}
    slow = {"canary_us": [126.0, 120.8], "core": 4, "attempts": 4, "reference_us": 70.1,
            "fast": False}
    _write_sidecars(monkeypatch, history.results_dir, commits,
                    lambda i: {**_entry(), "host": fast if i < STEP_AT else slow})
    _, finding = _finding(history)
    # a host case's record carries its canary, so the series was judged at the typical speed
    # (tests/test_host_speed.py); that fact comes first
    assert _texts(finding)[0].startswith("judged at the host's typical speed")
    assert _texts(finding)[1:] == [("host slow on the settled side: canary 126 us against its "
                                    "fast 70 us after 4 attempts")]
    assert context.host_gate_facts(fast, fast) == []
    assert context.host_gate_facts(None, {"fast": False}) == []  # nothing to say it with
    # the suite measures host cases in several processes and keeps the least
    processes = [{"median_us": 9.0, "fast": False}, {"median_us": 9.5, "fast": True}, None]
    (fact,) = context.host_gate_facts({**slow, "processes": processes, "kept": 0}, fast)
    assert fact.text == ("host slow on the parent side: canary 126 us against its fast 70 us "
                         "after 4 attempts (the least of 3 processes)")


def test_a_change_of_the_machines_fast_speed_is_reported(stepped, monkeypatch):
    """Both sides measured on a fast host, but the fastest canary their processes read moved:
    another machine behind the same name (a fresh device machine) or its state changed."""
    history, commits = stepped
    first = {"canary_us": [84.9, 83.5], "core": 4, "attempts": 1, "reference_us": 83.0,
             "fast": True}
    second = {**first, "canary_us": [70.2, 69.1], "reference_us": 66.3}
    _write_sidecars(monkeypatch, history.results_dir, commits,
                    lambda i: {**_entry(), "host": first if i < STEP_AT else second})
    _, finding = _finding(history)
    assert _texts(finding)[0].startswith("judged at the host's typical speed")
    assert _texts(finding)[1:] == [("host's fast canary 83 -> 66 us: the machine ran 1.25x "
                                    "faster at its best (another host, or its state changed)")]
    assert context.host_speed_facts(first, {**first, "reference_us": 83.0 * 1.15}) == []
    assert context.host_speed_facts(first, None) == []


def test_the_fast_speed_fact_separates_a_new_lease_from_one_leases_commits():
    """A recorded host group over 15 commits: commits 1-10 on one device machine, 11-15 on
    another behind the same name. Every series gets the fact at the change of machine and
    none between commits of one machine."""
    path = Path(__file__).resolve().parents[3] / "tests/data/h200-2026-12-01-s16" / \
        "host_suite_runs.jsonl"
    runs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    series = sorted(set.intersection(*(set(r) for r in runs)))
    facts = {i: sum(bool(context.host_speed_facts(runs[i][n]["host"], runs[i + 1][n]["host"]))
                    for n in series) for i in range(len(runs) - 1)}
    assert len(runs) == 15 and len(series) == 27
    assert facts.pop(9) == 27  # commit 10 -> 11: the new machine
    assert sum(facts.values()) == 0


def test_a_cuda_kernels_local_memory_change_is_reported():
    cuda = {"name": "cluster_decode_kernel<fp16, group=4>", "registers": 168,
            "local_bytes": 0, "shared_bytes": 99328, "num_warps": 8, "sass_arch": "sm_90"}
    facts = context.resource_facts([cuda], [{**cuda, "registers": 255, "local_bytes": 64}])
    assert [f.text for f in facts] == ["registers 168 -> 255", "local memory bytes 0 -> 64"]


def test_an_error_drift_is_reported(stepped, monkeypatch):
    history, commits = stepped
    drifted = {**ERROR, "max_abs": 2.4e-4, "scale": 1.005}
    _write_sidecars(monkeypatch, history.results_dir, commits,
                    lambda i: _entry(error=ERROR if i < STEP_AT else drifted))
    _, finding = _finding(history)
    assert _texts(finding) == ["max_abs error 6.1e-05 -> 0.00024",
                               "error scale 0.999993 -> 1.005"]


def test_the_facts_show_in_the_table_the_page_and_the_plot(stepped, monkeypatch, tmp_path):
    history, commits = stepped
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry(
        "cuda/cluster_decode" if i < STEP_AT else "triton/split_kv"))
    report, _ = _finding(history)
    text = "auto switched cuda/cluster_decode -> triton/split_kv"
    plain, fancy = io.StringIO(), io.StringIO()
    monkeypatch.setenv("COLUMNS", "400")  # rich folds a wide table in 80 columns
    print_table(report, plain, rich=False, by="series")
    print_table(report, fancy, rich=True, by="series")
    assert f"context: {text}" in plain.getvalue()
    assert "context" in fancy.getvalue() and "cluster_decode" in fancy.getvalue()
    assert html.escape(text) in render_page({sim.MACHINE: report}, {})
    import matplotlib.axes

    titles = []
    real_set_title = matplotlib.axes.Axes.set_title
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title",
                        lambda ax, label, **kw: (titles.append(label),
                                                 real_set_title(ax, label, **kw))[1])
    (png,) = plot_findings(report, tmp_path / "plots")
    assert png.stat().st_size > 0 and text in titles[0]


def test_without_sidecars_the_report_is_unchanged(stepped, monkeypatch):
    history, commits = stepped
    bare_report, bare = _finding(history)
    assert bare.context == ()
    plain = io.StringIO()
    print_table(bare_report, plain, rich=False, by="series")
    assert "context" not in plain.getvalue()
    data = bare_report.to_json()
    assert data["findings"][0]["context"] == [] and data["skipped_sidecars"] == []
    # sidecars that differ in nothing meaningful: the same report
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry(
        resources=[{"function": 1000 + i}]))
    same = analyze(history).to_json()
    assert json.dumps(same["findings"]) == json.dumps(data["findings"])


def test_a_sidecar_of_another_schema_is_listed_not_fatal(stepped, monkeypatch):
    history, commits = stepped
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry())
    bad = next((history.results_dir / sim.MACHINE / "kvbench").glob(f"{commits[STEP_AT][:8]}-*"))
    bad.write_text(json.dumps({"schema": 99}))
    report, finding = _finding(history)
    assert finding.context == ()
    (problem,) = report.sidecar_problems
    assert problem["commit"] == commits[STEP_AT] and "schema 99" in problem["reason"]


def test_case_key_matches_the_suites_repr():
    assert context.case_key("paged_decode.PagedDecode.track_us",
                            ("'auto'", "'fp16'", "'b1_c4k'")) == \
        ("PagedDecode", "('auto', 'fp16', 'b1_c4k')")
    assert context.case_key("kv_alloc.KVAlloc.track_us", ("'host/freelist'", "'fragmented'",
                                                          "64")) == \
        ("KVAlloc", "('host/freelist', 'fragmented', 64)")
    assert context.case_key("sim.Latency.track_us", ("'s'",)) == ("Latency", "('s',)")


def test_the_sidecar_cache_lists_the_folder_once_for_all_commits(stepped, monkeypatch):
    """A host series reads every commit's sidecar; a glob per commit would list the folder
    once per commit (quadratic in the history). The cache lists it once, and reads the same
    records as a reader of one commit does."""
    from kvbench.history.verdict import sidecar

    history, commits = stepped
    _write_sidecars(monkeypatch, history.results_dir, commits, lambda i: _entry())
    alone = {c: sidecar.read_commit(history.results_dir, sim.MACHINE, c) for c in commits}
    listings = []
    real_scandir = sidecar.os.scandir
    monkeypatch.setattr(sidecar.os, "scandir", lambda p: listings.append(p) or real_scandir(p))
    monkeypatch.setattr(Path, "glob", lambda *a: pytest.fail("globbed per commit"))
    cache = context.SidecarCache(history.results_dir, sim.MACHINE)
    for c in commits:
        assert cache.get(c).cases == alone[c].cases
    assert len(listings) == 1 and cache.get("0" * 40) is None and not cache.problems
