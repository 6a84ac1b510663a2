"""kvbench.history.bisect.search: the search on synthetic measurements (a fake measurer), the series
and range parsing, and the report. tests/test_bisect_e2e.py drives the real asv."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import numpy as np
import pytest

from kvbench.history.bisect import abtest, bisect_cmd
from kvbench.history.bisect import measurer as am
from kvbench.history.bisect import search as bs

SERIES = "paged_decode.PagedDecode.track_us('triton/split_kv', 'fp16', 'b64_c8k')"


class FakeMeasurer:
    """Run values from `level(index)` with relative Gaussian noise; `broken` cannot run."""

    def __init__(self, commits, level, *, noise=0.005, broken=(), seed=0):
        self.index = {c: i for i, c in enumerate(commits)}
        self.level, self.noise, self.broken = level, noise, set(broken)
        self.rng = np.random.default_rng(seed)
        self.calls: list[list[str]] = []

    def measure(self, commits):
        self.calls.append(list(commits))
        runs = []
        for c in commits:
            if c in self.broken:
                runs.append(am.Run(c, None, am.SKIPPED, "this commit has no kvbench.ops"))
            else:
                value = self.level(self.index[c]) * (1 + self.noise * self.rng.standard_normal())
                runs.append(am.Run(c, value, am.OK, samples=100, process_s=1.0))
        return runs


def _commits(n):
    return [f"{i:02d}" + "0" * 38 for i in range(n + 1)]  # base + n commits


def _bisect(commits, measurer, **kw):
    kw.setdefault("higher_is_better", False)
    return bs.run_bisect(measurer, commits, series=SERIES, range_text="HEAD~32..HEAD",
                         machine="h200", unit="seconds", log=lambda _: None, **kw)


@pytest.mark.parametrize("culprit", [1, 13, 32])
def test_a_step_is_named_and_confirmed_within_the_run_budget(culprit):
    commits = _commits(32)
    fake = FakeMeasurer(commits, lambda i: 500e-6 * (1.04 if i >= culprit else 1.0), seed=culprit)
    report = _bisect(commits, fake)
    assert report.verdict == bs.REGRESSION, report.summary
    assert report.culprit == commits[culprit] and report.parent == commits[culprit - 1]
    assert report.confirmation["outcome"] == abtest.REGRESSION
    assert 0.03 < report.confirmation["effect"] < 0.05
    # 32 commits: 10 end-point runs + 5 search steps x 3 + 10 confirmation runs
    assert len(report.runs) <= 40, len(report.runs)
    assert {r.phase for r in report.runs} == {"endpoints", "search", "confirmation"}


def test_flat_range_says_no_regression_and_names_no_commit():
    commits = _commits(32)
    fake = FakeMeasurer(commits, lambda i: 500e-6, seed=3)
    report = _bisect(commits, fake)
    assert report.verdict == bs.NO_REGRESSION and report.culprit is None
    assert report.summary.startswith("no regression in HEAD~32..HEAD")
    assert report.search == [] and report.confirmation is None
    assert {c for call in fake.calls for c in call} == {commits[0], commits[-1]}


def test_an_improvement_is_not_a_regression():
    commits = _commits(8)
    fake = FakeMeasurer(commits, lambda i: 500e-6 * (0.9 if i >= 4 else 1.0))
    report = _bisect(commits, fake)
    assert report.verdict == bs.NO_REGRESSION and "improved by" in report.summary


def test_a_gbps_drop_is_bisected_as_a_regression():
    commits = _commits(8)
    fake = FakeMeasurer(commits, lambda i: 4000.0 * (0.95 if i >= 6 else 1.0))
    report = _bisect(commits, fake, higher_is_better=True)
    assert report.verdict == bs.REGRESSION and report.culprit == commits[6]
    assert report.confirmation["effect"] < 0


def test_commits_that_cannot_run_are_skipped_and_listed():
    commits = _commits(8)
    broken = {commits[0], commits[4]}  # the base (old history) and the first midpoint
    fake = FakeMeasurer(commits, lambda i: 1e-3 * (1.5 if i >= 6 else 1.0), broken=broken)
    report = _bisect(commits, fake)
    assert report.verdict == bs.REGRESSION and report.culprit == commits[6]
    assert set(report.skipped) == broken
    assert all("no kvbench.ops" in why for why in report.skipped.values())
    assert report.endpoints["before_commit"] == commits[1]  # moved inward past the base
    assert "skipped" in bs.format_outcome(report)


def test_a_step_behind_a_commit_that_cannot_run_names_both():
    commits = _commits(4)
    fake = FakeMeasurer(commits, lambda i: 1e-3 * (1.5 if i >= 3 else 1.0), broken={commits[2]})
    report = _bisect(commits, fake)
    assert report.verdict == bs.REGRESSION
    assert report.parent == commits[1] and report.culprit == commits[3]
    assert report.untested_between == [commits[2]] and "or one of the 1 commits" in report.summary


def test_an_unclear_commit_whose_later_runs_fail_is_not_measured_forever():
    """A commit carrying half the step is unclear, so the search measures it again; the cap
    counted values, so once its runs failed (a device lost mid-bisect) it was measured
    without end (300 asv runs before a stand-in stopped it)."""
    commits = _commits(8)

    class HalfStepThenFailing(FakeMeasurer):
        seen = 0

        def measure(self, cs):
            if len(self.calls) > 200:
                raise AssertionError("the search did not stop measuring")
            if cs == [commits[4]]:
                self.seen += 1
                if self.seen > 1:
                    self.calls.append(list(cs))
                    return [am.Run(cs[0], None, am.FAILED, "CUDA error: device lost")]
            return super().measure(cs)

    fake = HalfStepThenFailing(commits, lambda i: 100e-6 * (1.0 if i < 4 else
                                                         1.5 if i == 4 else 2.0))
    _bisect(commits, fake)
    assert sum(c == [commits[4]] for c in fake.calls) <= 3 * bs.SEARCH_RUNS_CAP_FACTOR


def test_a_drift_without_a_step_is_inconclusive_not_a_named_commit():
    commits = _commits(16)  # +0.4% a commit: the end points differ, no single commit does
    fake = FakeMeasurer(commits, lambda i: 1e-3 * (1 + 0.004 * i), noise=0.003, seed=5)
    report = _bisect(commits, fake)
    assert report.verdict == bs.INCONCLUSIVE and report.culprit is None
    assert report.confirmation is not None and "narrowed" in report.summary


def test_report_json_is_the_documented_schema():
    commits = _commits(4)
    fake = FakeMeasurer(commits, lambda i: 1e-3 * (1.2 if i >= 2 else 1.0))
    data = json.loads(json.dumps(_bisect(commits, fake).to_json()))
    assert data["schema"] == bs.SCHEMA
    for key in ("range", "series", "machine", "unit", "direction", "verdict", "summary",
                "culprit", "parent", "skipped", "untested_between", "endpoints", "search",
                "confirmation", "runs", "cost", "commits"):
        assert key in data, key
    for key in ("before_commit", "after_commit", "outcome", "before", "after", "effect",
                "ci_low", "ci_high", "p_mannwhitney", "p_ks", "p", "noise", "mde", "rounds"):
        assert key in data["confirmation"], key
    assert set(data["runs"][0]) == {"commit", "value", "status", "reason", "samples",
                                    "process_s", "phase"}
    assert data["cost"]["runs"] == len(data["runs"])


def test_series_names_are_parsed_and_checked():
    s = am.parse_series(SERIES)
    assert s.benchmark == "paged_decode.PagedDecode.track_us" and s.cls == "PagedDecode"
    assert s.select == "PagedDecode('triton/split_kv', 'fp16', 'b64_c8k')"
    assert s.name == SERIES
    assert am.parse_series('kv_alloc.KVAlloc.track_us("host/freelist","bump",64)').name == \
        "kv_alloc.KVAlloc.track_us('host/freelist', 'bump', 64)"
    for bad in ("paged_decode.PagedDecode.track_us", "track_us('a')", "a.B.c(foo bar)",
                "a.B.c()"):
        with pytest.raises(ValueError, match="expected|params"):
            am.parse_series(bad)
    benchmarks = {"kv_alloc.KVAlloc.track_us": {
        "params": [["'auto'", "'host/freelist'"], ["'bump'"], ["1", "64"]],
        "param_names": ["selector", "state", "n"], "unit": "seconds"},
        "x.Y.track_gbps": {"params": [["'a'"]], "param_names": ["p"], "unit": "GB/s"}}
    assert am.check_series(am.parse_series("kv_alloc.KVAlloc.track_us('auto', 'bump', 64)"),
                           benchmarks) is False
    assert am.check_series(am.parse_series("x.Y.track_gbps('a')"), benchmarks) is True
    with pytest.raises(ValueError, match="n=65 is not a param value; accepted: 1, 64"):
        am.check_series(am.parse_series("kv_alloc.KVAlloc.track_us('auto', 'bump', 65)"),
                        benchmarks)
    with pytest.raises(ValueError, match="takes 3 params"):
        am.check_series(am.parse_series("kv_alloc.KVAlloc.track_us('auto')"), benchmarks)
    with pytest.raises(ValueError, match="not in the suite"):
        am.check_series(am.parse_series("a.B.track_us('auto')"), benchmarks)


def test_bad_arguments_are_value_errors():
    commits = _commits(2)
    fake = FakeMeasurer(commits, lambda i: 1.0)
    with pytest.raises(ValueError, match="max_rounds"):
        _bisect(commits, fake, rounds=6, max_rounds=5)
    for runs in (0, 1001):
        with pytest.raises(ValueError, match="search-runs must be from 1 to 1000"):
            _bisect(commits, fake, search_runs=runs)
    with pytest.raises(ValueError, match="at least one commit"):
        _bisect(commits[:1], fake)


def test_cli_rejects_bad_input_with_usage_errors(capsys, tmp_path):
    from kvbench.cli import main

    bad_config = tmp_path / "asv.conf.json"
    bad_config.write_text('{"version": 1, "repo": ".",')  # cut off

    for argv, message in (
        (["bisect", "HEAD~1..HEAD", "paged_decode.PagedDecode.track_us"], "expected module.Class"),
        (["bisect", "HEAD~1", SERIES], "BASE..END"),
        (["bisect", "HEAD~1..HEAD", SERIES, "--rounds", "6", "--max-rounds", "5"], "max_rounds"),
        (["bisect", "HEAD~1..HEAD", SERIES, "--mde", "-1"], "percentage"),
        (["bisect", "HEAD~1..HEAD", SERIES, "--search-runs", "1000000"], "from 1 to 1000"),
        # four runs a side cannot reach bisect's p bar: every answer would be inconclusive
        (["bisect", "HEAD~1..HEAD", SERIES, "--rounds", "2", "--max-rounds", "4"],
         "--max-rounds 4: at least 5"),
        (["bisect", "HEAD~1..HEAD", SERIES, "--config", str(bad_config)],
         "not an asv.conf.json asv can read"),
    ):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert message in capsys.readouterr().err


def test_an_asv_failure_keeps_the_log_bisect_names(monkeypatch, capsys):
    """The error named <workdir>/asv.log, and the command's cleanup had removed it."""
    from kvbench.cli import main

    def failing(self, commit):
        (self.workdir / "asv.log").write_text("asv said why")
        raise RuntimeError(f"asv run exited 1 (log: {self.log_path})")

    monkeypatch.setattr(am.AsvMeasurer, "discover", failing)
    monkeypatch.setattr("kvbench.history.asv.machine.check_machine", lambda name: None)
    assert main(["bisect", "HEAD~1..HEAD", SERIES, "--machine", "box"]) == 1
    err = capsys.readouterr().err
    log = Path(err.split("(log: ")[1].split(")")[0])
    assert log.read_text() == "asv said why" and f"kept in {log.parent}" in err
    import shutil
    shutil.rmtree(log.parent)


ASV_OUTPUT = (
    """\
[ 0.00%] · For kvbench commit 210c51db <main~5>:
[ 0.00%] ·· Benchmarking kvbench-offline-py3.11
[50.00%] ···· For parameters: 'host/freelist', 'fragmented', 64
               asv: skipped: NotImplementedError('this commit has no """
    """kvbench.ops.kv_alloc.checked_alloc')
[50.00%] · For kvbench commit 7b8df986 <main>:
[100.00%] ···· For parameters: 'host/freelist', 'fragmented', 64
               Traceback (most recent call last):
               RuntimeError: case ('host/freelist', 'fragmented', 64) failed in setup_cache
"""
)


def test_asv_output_is_split_per_commit_and_the_reason_found():
    first = am.commit_output(ASV_OUTPUT, "210c51db" + "0" * 32)
    second = am.commit_output(ASV_OUTPUT, "7b8df986" + "0" * 32)
    assert am.no_value_reason(first) == ("NotImplementedError('this commit has no "
                                 "kvbench.ops.kv_alloc.checked_alloc')")
    assert am.no_value_reason(second).startswith("RuntimeError: case ('host/freelist'")
    assert am.commit_output(ASV_OUTPUT, "deadbeef" + "0" * 32) == ""
    assert am.no_value_reason("nothing useful") == ""


# ---- the sidecar facts of the confirmed pair (issue 21) ----------------------------------------


def _sidecar_of(monkeypatch, results, commit, selected, machine="h200"):
    """The sidecar a kvbench asv run writes for SERIES's case, through the suite's writer."""
    from benchmarks.runner import sidecar as _sidecar

    series = am.parse_series(SERIES)
    key = tuple(ast.literal_eval(p) for p in series.param_reprs)
    for var, value in (("ASV_COMMIT", commit), ("ASV_ENV_NAME", "env"),
                       ("ASV_KVBENCH_MACHINE", machine), ("ASV_KVBENCH_RESULTS_DIR", str(results))):
        monkeypatch.setenv(var, value)
    entry = {"samples_s": [1e-3], "selected": selected, "measured_error": None,
             "resources": [], "state": None}
    assert _sidecar.write_sidecar("decode", {series.cls: {key: entry}})


def test_the_confirmed_pair_gets_its_sidecar_facts(tmp_path, monkeypatch):
    commits = _commits(8)
    report = _bisect(commits, FakeMeasurer(commits, lambda i: 1e-3 * (1.2 if i >= 5 else 1.0)))
    assert report.verdict == bs.REGRESSION and report.culprit == commits[5]
    plain = bs.format_outcome(report)
    bs.attach_context(report, tmp_path, am.parse_series(SERIES))  # no sidecars: nothing
    assert report.context == [] and bs.format_outcome(report) == plain
    _sidecar_of(monkeypatch, tmp_path, commits[4], "cuda/cluster_decode")
    _sidecar_of(monkeypatch, tmp_path, commits[5], "triton/split_kv")
    bs.attach_context(report, tmp_path, am.parse_series(SERIES))
    text = "auto switched cuda/cluster_decode -> triton/split_kv"
    assert [f["text"] for f in report.context] == [text]
    assert f"  context: {text}" in bs.format_outcome(report)
    assert json.loads(json.dumps(report.to_json()))["context"][0]["kind"] == "auto_switch"


def test_bisect_log_keeps_its_lines_and_feeds_the_status(capsys):
    from kvbench.core import progress

    class Counting:
        invocations = 7

    with progress.status("kvbench bisect x") as st:
        bisect_cmd._log_with_status(Counting())("  search 0a1b2c3d: 1 us -> bad")
        assert st.what == "search 0a1b2c3d; 7 asv runs so far"
    assert capsys.readouterr().out == "  search 0a1b2c3d: 1 us -> bad\n"
