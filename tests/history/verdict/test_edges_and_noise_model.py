"""The verdict engine at the edges of a history and on short spans (issue: verdicts where a CI
gate looks): a step at the newest commit is a suspect; a span without a noise reference is not
judged; a machine's stored noise model lets a short span be judged."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from kvbench.history.verdict import noise_model
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import History, Point, Series

BENCH = "sim.Gpu.track_us"


def _history(rows: dict[str, np.ndarray]) -> History:
    """An in-memory history: one series per row of log offsets from 10 µs."""
    n = len(next(iter(rows.values())))
    commits = [f"{i:040x}" for i in range(1, n + 1)]
    series = [Series(BENCH, (repr(name),), ("series",), "seconds", "sim",
                     [Point(c, 1e-5 * math.exp(v)) for c, v in zip(commits, values)])
              for name, values in rows.items()]
    return History("sim", Path("/nonexistent-kvbench-test"), commits[-1], commits, commits,
                   series, [], runs=dict.fromkeys(commits, 0))


def _rows(rng, n, k=30, sigma=0.005):
    return {f"s{i}": sigma * rng.standard_normal(n) for i in range(k)}


def _learned(rng, names, sigma=0.005):
    long = _history({name.split("'")[1]: sigma * rng.standard_normal(45) for name in names})
    return analyze(long).model


def test_a_step_at_the_newest_commit_is_reported_as_a_suspect():
    rng = np.random.default_rng(1)
    rows = _rows(rng, 12)
    rows["s0"][-1] += math.log1p(0.10)  # 20 sigma, the newest commit only
    report = analyze(_history(rows))
    (f,) = [f for f in report.findings if f.series.params == ("'s0'",)]
    assert f.kind == "suspect" and f.edge == "newest" and f.verdict == "regression"
    assert f.commit == report.history.commits[-1] and f.points_after == 1
    assert 7 < f.effect_pct < 13
    assert report.regressions == [] and report.suspects == [f]
    assert report.to_json()["summary"]["suspects"] == 1
    assert report.culprits()[0].suspect


def test_a_fresh_six_commit_span_finds_its_step_on_its_own_noise():
    """The issue's span: six commits, a 20% step after the second, no other history. The
    step's difference is left out of the noise; a series whose edge differences stand out too
    has too few left and is not judged (with its reason), every other one is judged on its own
    differences and the step is found at its commit (or, where the first point stands apart
    too, a suspect at the first commit): never judged and missed."""
    rng = np.random.default_rng(2)
    rows = _rows(rng, 6)
    for values in rows.values():
        values[2:] += math.log1p(0.20)
    report = analyze(_history(rows))
    steps = [f for f in report.findings if f.kind == "step"]
    assert {f.commit for f in steps} == {report.history.commits[2]}
    # beside them at most a suspect: the first point against a segment that holds the step
    assert all(f.kind == "suspect" for f in report.findings if f not in steps)
    judged = [v for v in report.verdicts if v.noise is not None]
    assert all(v.findings for v in judged)  # judged, so something is said about the step
    assert len(steps) >= len(rows) // 2 - 1 and len(judged) >= len(rows) // 2
    assert all("no noise model" in v.why_not for v in report.verdicts if v.noise is None)


def test_a_span_without_a_noise_reference_is_not_judged_and_says_why():
    """Four commits and no model: too few differences are left once the candidate steps are
    out, so no series is judged, each says why, and the summary counts them."""
    rng = np.random.default_rng(5)
    rows = _rows(rng, 4)
    for values in rows.values():
        values[2:] += math.log1p(0.20)
    report = analyze(_history(rows))
    assert all(v.noise is None and "no noise model" in v.why_not for v in report.verdicts)
    assert report.to_json()["summary"]["not_judged"] == len(rows)
    assert report.findings == []


def test_a_stored_noise_model_judges_the_same_short_span(tmp_path):
    """The same span with the machine's model (learned from a long flat history, saved and
    read back): every stepped series is found at the stepped commit, none is spared."""
    rng = np.random.default_rng(3)
    rows = _rows(rng, 6)
    for values in rows.values():
        values[2:] += math.log1p(0.20)
    history = _history(rows)
    model = _learned(rng, [s.name for s in history.series])
    path = noise_model.save(model, tmp_path / "kvbench" / noise_model.FILENAME)
    read = noise_model.load(path)
    assert read.series.keys() == model.series.keys()
    report = analyze(history, model=read)
    found = {f.series.name for f in report.findings
             if f.commit == history.commits[2] and f.verdict == "regression"}
    assert found == {s.name for s in history.series}


def test_a_flat_history_of_normal_noise_reports_nothing():
    rng = np.random.default_rng(4)
    for n in (8, 20, 45):
        report = analyze(_history(_rows(rng, n, k=60)))
        assert report.regressions == [] and report.findings == [], n


def test_a_noise_model_file_that_is_not_one_is_named(tmp_path):
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(ValueError, match="not a kvbench noise model"):
        noise_model.load(bad)
    bad.write_text("{")
    with pytest.raises(ValueError, match="unreadable noise model"):
        noise_model.load(bad)
    assert noise_model.load(tmp_path / "absent.json") is None
    bad.write_text(json.dumps({"schema": noise_model.SCHEMA, "families": {},
                               "series": {"s": {"within": -1, "runs": 0, "differences": 3}}}))
    with pytest.raises(ValueError, match="malformed"):
        noise_model.load(bad)


def test_the_detection_table_runs_and_finds_large_newest_steps_with_a_model():
    from kvbench.history.verdict import detection

    result = detection.table(series=20, seed=7, lengths=(12,), effects=(0.10,))
    rows = {(r["model"], r["noise"], r["position"]): r for r in result["rows"]}
    newest = rows[(True, "gpu", "newest")]
    assert newest["found"] >= 18  # 20 sigma at the newest commit
    assert rows[(True, "gpu", "flat")]["flat_with_finding"] == 0
    assert "stored | gpu | 12" in detection.format_table(result)


def test_one_slow_process_does_not_inflate_a_short_series_noise():
    """Twelve commits of 0.5% noise with one +5% point (a slow process): its two large
    differences both stay out of the trimmed RMS, so the noise reads near 0.5%, not 2-3x it
    (which would hide a 5% step at the newest commit)."""
    from kvbench.history.verdict import noise

    rng = np.random.default_rng(7)
    widths = []
    for _ in range(200):
        x = 0.005 * rng.standard_normal(12)
        x[rng.integers(1, 11)] += math.log1p(0.05)
        widths.append(noise.estimate(x, [0] * 12).within)
    assert 0.004 < float(np.median(widths)) < 0.0075, np.median(widths)


def test_one_slow_process_before_a_newest_step_is_set_aside_and_the_step_found():
    """Ten commits of 0.5% noise, a +5% point two commits before a +5% step at the newest
    commit: with the slow point in, it and the step's point read as one two-point level placed
    at the outlier's commit. The slow point lies above both of its neighbours, which agree:
    one slow process, set aside (named in the verdict), and the step is found at its commit."""
    rng = np.random.default_rng(11)
    rows = _rows(rng, 10)
    names = list(rows)
    model = _learned(rng, [f"sim.Gpu.track_us('{n}')" for n in names])
    for name in names[:10]:
        rows[name][7] = rows[name][6] + math.log1p(0.05)
        rows[name][8] = rows[name][6]
        rows[name][9] += math.log1p(0.05)
    report = analyze(_history(rows), model=model)
    commits = report.history.commits
    by_name = {v.series.params[0]: v for v in report.verdicts}
    for name in names[:10]:
        verdict = by_name[repr(name)]
        (excursion,) = verdict.set_aside
        assert (excursion.commit, excursion.parent) == (commits[7], commits[6]), name
        assert 4.0 < excursion.slower_pct < 6.5, excursion
        assert len(verdict.series.points) == 10  # the verdict shows every point
        (f,) = verdict.findings
        assert f.commit == commits[-1] and f.verdict == "regression", (name, f)
        assert len(f.series.points) == 10
        assert [e["commit"] for e in verdict.to_json()["set_aside"]] == [commits[7]]
    for name in names[10:]:
        assert by_name[repr(name)].set_aside == ()
    from kvbench.history.verdict.text import set_aside_lines

    head, line = set_aside_lines(report)
    assert head.startswith("10 point(s) set aside as slow processes")
    assert "kvbench compare PARENT COMMIT" in head
    assert line.split()[:5] == [commits[7][:8], "(parent", f"{commits[6][:8]}):", "10", "series,"]
    # a report --since a later commit speaks of that span only: the stretch is before it
    report.since = commits[8]
    assert set_aside_lines(report) == []
    report.since = commits[6]
    assert len(set_aside_lines(report)) == 2


def _prepared(values, runs=None):
    """One series of `values` ready for the set-aside rules (commits numbered from 1), all in
    one run unless `runs` gives each commit's."""
    from kvbench.history.verdict.regressions import _Prepared

    x = np.log(np.asarray(values))
    series = Series(BENCH, ("'s'",), ("series",), "seconds", "sim",
                    [Point(f"{i:040x}", v) for i, v in enumerate(values, 1)])
    return _Prepared(series, x, list(runs or [0] * len(x)), None, None)


def _half_percent_noise():
    from kvbench.history.verdict import noise

    return noise.estimate(0.005 * np.random.default_rng(3).standard_normal(30), [0] * 30)


def test_a_fast_point_and_a_slow_point_at_a_step_are_not_set_aside():
    """Only a point slower than two neighbours of one level is one slow process: a fast point
    is the code's level (a process is not faster than its code), and a slow point whose
    neighbours sit at two levels is where a step landed."""
    from kvbench.history.verdict.regressions import _without_slow_stretches

    est = _half_percent_noise()
    flat = [1.0, 1.002, 0.998, 1.001, 0.999, 1.0]
    slow = flat.copy()
    slow[3] = 1.05
    assert [e.commit for e in _without_slow_stretches(_prepared(slow), est).set_aside] == \
        [f"{4:040x}"]
    fast = flat.copy()
    fast[3] = 0.95
    assert _without_slow_stretches(_prepared(fast), est) is None
    at_step = [1.0, 1.0, 1.0, 1.15, 1.10, 1.10]  # slow over both, but they are two levels
    assert _without_slow_stretches(_prepared(at_step), est) is None
    gbps = [1 / v for v in slow]  # throughput: slow is low
    gbps_prepared = _prepared(gbps)
    gbps_prepared.series.unit = "GB/s"
    assert [e.commit for e in _without_slow_stretches(gbps_prepared, est).set_aside] == \
        [f"{4:040x}"]


def test_a_slow_stretch_of_three_commits_is_set_aside_and_nothing_reported():
    """A busy host through three consecutive measurements: 20 commits of 1% noise, points
    8-10 at +60%, +30%, +90% (the middle one is faster than both of its neighbours: no
    one-point rule sets it aside), the points either side at the old level. Judged with the
    stretch in, it read as a regression and the improvement that undid it, at two innocent
    commits; set aside as one stretch, nothing is reported and the footer names it."""
    rng = np.random.default_rng(5)
    rows = _rows(rng, 20, sigma=0.01)
    for name in rows:
        for k, pct in zip((8, 9, 10), (0.60, 0.30, 0.90)):
            rows[name][k] = rows[name][7] + math.log1p(pct)
    report = analyze(_history(rows))
    commits = report.history.commits
    for verdict in report.verdicts:
        assert verdict.findings == [], verdict.findings
        (e,) = verdict.set_aside
        assert (e.commit, e.last, e.parent, e.points) == (commits[8], commits[10], commits[7], 3)
        assert 50.0 < e.slower_pct < 70.0, e
        (row,) = verdict.to_json()["set_aside"]
        assert (row["commit"], row["last"], row["points"]) == (commits[8], commits[10], 3)
    from kvbench.history.verdict.text import set_aside_lines

    head, line = set_aside_lines(report)[:2]
    assert head.startswith(f"{3 * len(rows)} point(s) set aside as slow processes")
    assert line.startswith(f"  {commits[8][:8]}..{commits[10][:8]} (3 commits) "
                           f"(parent {commits[7][:8]}): {len(rows)} series")


def test_stretches_are_not_set_aside_at_a_step_at_the_newest_commit_or_when_not_all_slow():
    """A stretch needs the same level on both sides, every point of it slow and room after it:
    a step that stays, slow points that reach the newest commit and four slow points (a
    level) are judged as they are; two slow points with one at the old level between them
    are two lone slow points, not one stretch of three."""
    from kvbench.history.verdict.regressions import _without_slow_stretches

    est = _half_percent_noise()
    flat = [1.0, 1.002, 0.998, 1.001, 0.999, 1.0, 1.001, 0.999]
    two = flat.copy()
    two[3:5] = [1.06, 1.08]
    (e,) = _without_slow_stretches(_prepared(two), est).set_aside
    assert (e.commit, e.last, e.points) == (f"{4:040x}", f"{5:040x}", 2)
    stays = flat[:3] + [1.08] * 5  # a step: the points after it never come back
    assert _without_slow_stretches(_prepared(stays), est) is None
    at_newest = flat[:5] + [1.08, 1.07, 1.09]
    assert _without_slow_stretches(_prepared(at_newest), est) is None
    one_back = flat.copy()
    one_back[3:6] = [1.08, 1.0, 1.08]  # two lone slow points, not one stretch of three
    assert [(x.commit, x.points) for x in
            _without_slow_stretches(_prepared(one_back), est).set_aside] == \
        [(f"{4:040x}", 1), (f"{6:040x}", 1)]
    four = flat.copy()
    four[2:6] = [1.08] * 4  # longer than SLOW_STRETCH_MAX: a level, judged
    assert _without_slow_stretches(_prepared(four), est) is None


def test_a_slow_stretch_inside_one_run_is_judged_against_the_within_run_noise():
    """Leases of one machine differ by more than its commits (run noise 5%, within a run
    0.5%): two points 8% slower than the agreeing points around them, all four in one run,
    are a busy host (their run effect cancels), set aside; the same values where a new run
    starts among them are judged against the total noise, and 8% is within it."""
    from kvbench.history.verdict import noise
    from kvbench.history.verdict.regressions import _without_slow_stretches

    est = noise.Noise(within=0.005, runs=0.05, differences=30, within_process=None)
    values = [1.0, 1.002, 0.998, 1.001, 1.08, 1.07, 0.999, 1.0, 1.001, 0.999]
    one_run = _without_slow_stretches(_prepared(values), est)
    (e,) = one_run.set_aside
    assert (e.commit, e.last, e.points) == (f"{5:040x}", f"{6:040x}", 2)
    assert one_run.x.size == len(values) - 2
    boundary = [0] * 5 + [1] * 5  # the second slow point opens a run
    assert _without_slow_stretches(_prepared(values, boundary), est) is None


def test_a_step_where_a_new_measurement_run_starts_is_named_as_such():
    """Eight runs of three commits: a 30% step in three series exactly where run 5 starts
    (no run has commits on both sides: a new lease's level would read the same) and a 10%
    step inside run 3. The first culprit is flagged at a run boundary, with the command that
    tells the two apart; the second is not."""
    import io

    from kvbench.history.verdict import text

    rng = np.random.default_rng(2)
    n = 24
    rows = _rows(rng, n, k=40)
    for k in range(3):
        rows[f"s{k}"][12:] += math.log1p(0.30)
    rows["s3"][7:] += math.log1p(0.10)
    history = _history(rows)
    history = History(history.machine, history.results_dir, history.head, history.commits,
                      history.first_parent, history.series, [],
                      runs={c: i // 3 for i, c in enumerate(history.commits)})
    report = analyze(history)
    culprits = {c.commit: c for c in report.culprits()}
    boundary, inside = culprits[history.commits[12]], culprits[history.commits[7]]
    assert boundary.at_run_boundary and len(boundary.slower) == 3
    assert not inside.at_run_boundary
    assert [c["at_run_boundary"] for c in report.to_json()["culprits"]] == [True, False]
    out = io.StringIO()
    text.print_table(report, out, rich=False)
    assert "1 culprit commit(s) start a new measurement run" in out.getvalue()
    assert f"  {history.commits[12][:8]} (parent {history.commits[11][:8]})" in out.getvalue()
    from kvbench.history.verdict import page

    assert ("1 culprit commit(s) start a new measurement run"
            in page.render_page({"sim": report}, {}))
