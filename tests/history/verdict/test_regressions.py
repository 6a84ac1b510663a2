"""`kvbench regressions` on synthetic asv histories whose truth is known, and on the committed one.

Synthetic histories come from kvbench/history/verdict/simulate.py: a real git repository (its
first-parent line orders the commits) and asv 0.6.6 result files for many series with
realistic noise: GPU-like (normal within a run, whole runs shifted by ~1%) and host-like
(Student t3, ~30% median change between identical commits, so 2x values are routine).
The rate test asserts bounds on the false-positive rate over flat series and the detection
rate of planted steps; docs/history.md records the rates the script measures at a larger size.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kvbench.history.verdict import regressions, results
from kvbench.history.verdict import simulate as sim
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import load_history

ROOT = Path(__file__).resolve().parents[3]




def _history(tmp_path, series: dict[str, tuple[str, list[float]]], runs=None):
    """A repository with one commit per value and results holding `series`.

    series: name -> (benchmark, values). Returns (History, commits)."""
    n = len(next(iter(series.values()))[1])
    commits = sim.git_history(tmp_path, n)
    truths = []
    for name, (benchmark, values) in series.items():
        truth = sim.Truth(name, "gpu", "given", benchmark)
        truth.values = np.asarray(values, dtype=float)
        truths.append(truth)
    runs = runs or [0] * n
    res = sim.write_results(tmp_path, commits, runs, truths, np.random.default_rng(0))
    return load_history(res, sim.MACHINE), commits


def _steady(rng, n, level, sigma):
    return level * np.exp(sigma * rng.standard_normal(n))


# ---- reading asv results ----------------------------------------------------------------------


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_commits_follow_the_first_parent_line_and_side_commits_are_skipped(tmp_path):
    repo = tmp_path
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.invalid")
    _git(repo, "config", "user.name", "t")
    made = {}
    for name in ("a", "b"):
        _git(repo, "commit", "-q", "--allow-empty", "-m", name)
        made[name] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", "side")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "side")
    made["side"] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "c")
    made["c"] = _git(repo, "rev-parse", "HEAD")
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge", "side")
    made["merge"] = _git(repo, "rev-parse", "HEAD")
    order = ["a", "b", "side", "c", "merge"]
    truth = sim.Truth("s", "gpu", "given")
    truth.values = np.array([1e-5, 2e-5, 9e-5, 3e-5, float("nan")])
    res = sim.write_results(repo, [made[k] for k in order], [0] * 5, [truth],
                            np.random.default_rng(0))
    history = load_history(res, sim.MACHINE)
    # the merge's file holds no value at all: not a measured commit, and named as such
    assert history.commits == [made[k] for k in ("a", "b", "c")]
    assert sorted((s["file"][:8], s["reason"]) for s in history.skipped) == sorted([
        (made["side"][:8], f"commit {made['side'][:8]} is not on HEAD's first-parent line"),
        (made["merge"][:8], "no value of a known series")])
    (series,) = history.series
    # the NaN of the merge commit is a point that did not run: left out, not read as zero
    assert [p.value for p in series.points] == [1e-5, 2e-5, 3e-5]
    assert series.unit == "seconds" and series.name == "sim.Latency.track_us('s')"
    assert history.commits_between(made["b"], made["c"]) == 1


def test_unit_falls_back_to_the_method_name():
    assert results.unit_of("x.Y.track_gbps", {}) == "GB/s"
    assert results.unit_of("x.Y.track_us", {}) == "seconds"
    assert results.unit_of("x.Y.time_thing", {}) == "seconds"
    assert results.unit_of("x.Y.track_other", {}) is None
    assert results.unit_of("x.Y.track_other", {"x.Y.track_other": "GB/s"}) == "GB/s"


def test_runs_split_on_machine_record_and_time_gap():
    params_a, params_b = (("num_cpu", "16"),), (("num_cpu", "32"),)
    ids = results.run_ids({
        "c1": (params_a, 0.0), "c2": (params_a, 60_000.0),
        "c3": (params_a, 60_000.0 + results.RUN_GAP_MS + 1),
        "c4": (params_b, 120_000.0), "c5": (params_a, None)})
    assert ids["c1"] == ids["c2"]
    assert len({ids["c2"], ids["c3"], ids["c4"], ids["c5"]}) == 4


def test_unknown_machine_names_the_machines_there(tmp_path):
    history_dir = tmp_path / "results" / "box"
    history_dir.mkdir(parents=True)
    (history_dir / "machine.json").write_text("{}")
    with pytest.raises(ValueError, match=r"machines there: box"):
        load_history(tmp_path / "results", "h100")


# ---- direction and the shape of a step --------------------------------------------------------


def test_gbps_drop_is_a_regression_and_latency_drop_an_improvement(tmp_path):
    rng = np.random.default_rng(1)
    time_up = _steady(rng, 30, 100e-6, 0.004)
    time_up[18:] *= 1.08
    time_down = _steady(rng, 30, 100e-6, 0.004)
    time_down[18:] /= 1.08
    gbps_down = _steady(rng, 30, 2000.0, 0.004)
    gbps_down[18:] /= 1.08
    gbps_up = _steady(rng, 30, 2000.0, 0.004)
    gbps_up[18:] *= 1.08
    history, commits = _history(tmp_path, {
        "time_up": (sim.LATENCY, time_up), "time_down": (sim.LATENCY, time_down),
        "gbps_down": (sim.THROUGHPUT, gbps_down), "gbps_up": (sim.THROUGHPUT, gbps_up)})
    report = analyze(history)
    verdicts = {f.series.params[0]: f for f in report.findings}
    assert set(verdicts) == {"'time_up'", "'time_down'", "'gbps_down'", "'gbps_up'"}
    assert verdicts["'time_up'"].verdict == "regression"
    assert verdicts["'gbps_down'"].verdict == "regression"
    assert verdicts["'time_down'"].verdict == "improvement"
    assert verdicts["'gbps_up'"].verdict == "improvement"
    for f in verdicts.values():
        assert (f.parent, f.commit, f.settled) == (commits[17], commits[18], commits[18])
        assert 6.0 < abs(f.effect_pct) < 10.0
        lo, hi = f.ci95_pct
        assert lo < f.effect_pct < hi and (lo > 0 or hi < 0)
    assert verdicts["'gbps_down'"].worse_pct > 0 and verdicts["'gbps_up'"].worse_pct < 0
    # regressions first, the worst first
    assert [f.verdict for f in report.findings][:2] == ["regression", "regression"]


def test_step_over_two_commits_names_both(tmp_path):
    rng = np.random.default_rng(2)
    values = _steady(rng, 30, 50e-6, 0.003)
    values[15] *= 1.05
    values[16:] *= 1.10
    history, commits = _history(tmp_path, {"spread": (sim.LATENCY, values)})
    (f,) = analyze(history).findings
    assert f.verdict == "regression" and f.kind == "step"
    assert (f.parent, f.commit, f.settled) == (commits[14], commits[15], commits[16])
    assert f.transition == (commits[15],) and f.commits_in_range == 2


def test_slow_drift_is_found(tmp_path):
    rng = np.random.default_rng(3)
    values = _steady(rng, 45, 50e-6, 0.004)
    values[15:] *= np.exp(np.minimum(np.arange(30) + 1, 15) * 0.006)  # +0.6% a commit for 15
    history, commits = _history(tmp_path, {"drift": (sim.LATENCY, values)})
    findings = analyze(history).findings
    assert findings and all(f.verdict == "regression" for f in findings)
    index = {c: i for i, c in enumerate(commits)}
    assert all(14 <= index[f.parent] and index[f.settled] <= 30 for f in findings)


def test_since_keeps_only_later_steps(tmp_path):
    rng = np.random.default_rng(4)
    values = _steady(rng, 40, 50e-6, 0.003)
    values[10:] *= 1.1
    values[30:] *= 1.1
    history, commits = _history(tmp_path, {"two": (sim.LATENCY, values)})
    assert len(analyze(history).findings) == 2
    (late,) = analyze(history, since=commits[20]).findings
    assert late.commit == commits[30]
    with pytest.raises(ValueError, match="first-parent"):
        analyze(history, since="0" * 40)


def test_host_noise_does_not_flood_the_report(tmp_path):
    """40 flat host-style series (Student t3, ~30% median change, 2-3x values routine):
    at most one finding, and every series states an MDE of more than 2x."""
    rng = np.random.default_rng(5)
    series = {f"h{k}": (sim.LATENCY, 60e-6 * np.exp(
        0.31 * rng.standard_t(3, size=45) / sim.T3_ROBUST_SIGMA)) for k in range(40)}
    history, _ = _history(tmp_path, series)
    ratios = [max(s.points, key=lambda p: p.value).value
              / min(s.points, key=lambda p: p.value).value
              for s in history.series]
    assert min(ratios) > 2.0  # every series holds a 2x swing between identical commits
    report = analyze(history)
    assert len(report.findings) <= 1, [f.series.name for f in report.findings]
    assert all(v.mde_pct > 100 for v in report.verdicts)


def test_a_process_that_runs_in_two_modes_is_noise(tmp_path):
    """The CPU runner's dispatch path runs in a 2.5 or a 4.3 µs mode per process: a series
    that jumps between the two at random is flat, whatever a MAD of its steps says."""
    rng = np.random.default_rng(8)
    series = {f"m{k}": (sim.LATENCY, np.where(rng.random(27) < 0.5, 2.5e-6, 4.3e-6)
                        * np.exp(0.02 * rng.standard_normal(27))) for k in range(10)}
    history, _ = _history(tmp_path, series)
    report = analyze(history)
    assert report.findings == [], [(f.series.name, f.effect_pct) for f in report.findings]
    assert all(v.mde_pct > 50 for v in report.verdicts)


# ---- the rates, measured ---------------------------------------------------------------------


def test_false_positive_and_detection_rates_on_a_simulated_history():
    """Bounds on the rates of kvbench.history.verdict.simulate (seed fixed, 40 series per
    scenario x noise model, 45 commits); docs/history.md has the rates at 200 series. The
    bounds sit ~3 binomial standard deviations (at 40 series) inside the 200-series rates."""
    result = sim.simulate(seed=20261201, per_scenario=40)
    rates = result["rates"]

    def rate(key, what="correct"):
        return rates[key][what] / rates[key]["series"]

    for noise in sim.NOISE:
        host = noise == "host"
        assert rate(f"flat/{noise}", "spurious") <= 0.05, (noise, rates[f"flat/{noise}"])
        assert rate(f"step5/{noise}") >= (0.5 if host else 0.75), noise
        assert rate(f"spread/{noise}") >= (0.5 if host else 0.75), noise
        assert rate(f"drift/{noise}") >= 0.85, noise
        assert rate(f"gbps_drop/{noise}") >= (0.45 if host else 0.75), noise
        # a GB/s drop is never called an improvement at its commit; elsewhere in such a series
        # a run's shift can be read as a step (as on a flat one: the spurious bound below)
        assert rates[f"gbps_drop/{noise}"]["improvement_verdicts"] <= 1, noise
        # below the MDE (3 sigma) a step is seldom reported; at 5 sigma it usually is. The
        # step is in units of the total noise; inside a run the MDE is 3 x the within-run
        # noise, so where runs dominate the noise (gpu: 0.4% within, 1% runs) 2 sigma is not
        # below it
        if sim.NOISE[noise][1] < sim.NOISE[noise][0]:
            assert rate(f"step2/{noise}") <= 0.3, noise
        assert rate(f"step2/{noise}") <= rate(f"step3/{noise}") <= rate(f"step5/{noise}")
        for scenario in ("step2", "step3", "step5", "spread", "drift", "gbps_drop"):
            assert rate(f"{scenario}/{noise}", "spurious") <= 0.2, (scenario, noise)


# ---- the committed H200 history -------------------------------------------------------------


#: The newest commit of the H200 history these tests' expectations were read from: the history
#: is read along its first-parent line (later recordings, with their own steps, left out).
H200_UP_TO = "2ee8c4ea9419c28879fb5ec8b9f7a5da4e0c7f66"


@pytest.fixture(scope="module")
def h200_report():
    if not (ROOT / "results" / "h200").is_dir():
        pytest.fail("results/h200 is committed; this checkout lacks it")
    return analyze(load_history(ROOT / "results", "h200", rev=H200_UP_TO))


def test_h200_history_reports_the_fp8_register_cap_and_no_torch_or_dispatch_step(h200_report):
    a4648dc = [f for f in h200_report.regressions if f.settled.startswith("a4648dc")]
    names = {f.series.name for f in a4648dc}
    assert "paged_decode.PagedDecode.track_us('triton/single_pass', 'fp8', 'b8_c4k')" in names
    assert "paged_decode.PagedDecode.track_gbps('triton/single_pass', 'fp8', 'b8_c4k')" in names
    # the same commit's intended gain at batch 64 x 8k is an improvement, in both units
    gains = {f.series.name for f in h200_report.findings
             if f.settled.startswith("a4648dc") and f.verdict == "improvement"}
    assert "paged_decode.PagedDecode.track_us('triton/split_kv', 'fp8', 'b64_c8k')" in gains
    # torch's own rows change only with the machine; dispatch overhead is 30% noise. The first
    # recorded commit differs from every later one in the torch rows (a suspect at its edge,
    # one culprit line), and no step is reported in them
    assert not [f for f in h200_report.findings if f.kind != "suspect" and (
        "'torch/" in f.series.name or "DispatchOverhead" in f.series.name)]


def test_a_planted_step_in_a_new_run_on_top_of_the_h200_history():
    """The H200 acceptance shape, simulated: a new asv run of five commits on top of
    results/h200 (two harmless, the plant, two harmless; the run as a whole shifted ~1%, 0.3%
    between processes), the plant slowing the six triton/single_pass fp16 rows by 4%: at least
    four of the six are reported at the planted commit (b4_c1k's own noise is 0.9%, and a
    point of b8_c4k's run sits 3.8 sigma up, so that step is placed one commit early). Nothing
    else inside the new run is a step but at most one series: the simulated process noise
    (0.3%) is above some series' recorded noise, which makes suspects at the newest commit (and
    a 0.4% step in one), and a run shift beyond a series' recorded run-to-run noise is a step
    at the run change (judged across runs)."""
    out = sim.plant_on_history(load_history(ROOT / "results", "h200", rev=H200_UP_TO),
                               size=0.04, seed=12)
    assert len(out["planted"]) == 6
    assert out["found"] <= out["planted"] and len(out["found"]) >= 4
    others = [f for f in out["others"] if f.series.name not in out["planted"]]
    assert len([f for f in others if f.kind != "suspect" and f.within_run]) <= 1
    assert all(f.commit == f.series.points[-1].commit for f in others
               if f.kind == "suspect")
    assert all(f.within_run for f in out["report"].findings if f.series.name in out["found"])


# ---- the command ---------------------------------------------------------------------------


def _cli_history(tmp_path):
    rng = np.random.default_rng(6)
    slow = _steady(rng, 24, 80e-6, 0.004)
    slow[12:] *= 1.2
    flat = _steady(rng, 24, 30e-6, 0.004)
    history, commits = _history(tmp_path, {"slow": (sim.LATENCY, slow),
                                           "flat": (sim.LATENCY, flat)})
    return history.results_dir, commits


class _Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _run_cli(*args, capsys):
    """`kvbench regressions ARGS` in this process (the CLI's main, exit status included)."""
    from kvbench.cli import main

    try:
        code = main(["regressions", *args])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out = capsys.readouterr()
    return _Result(code, out.out, out.err)


def test_cli_gate_json_and_plots(tmp_path, capsys):
    res, commits = _cli_history(tmp_path)
    out = tmp_path / "report.json"
    plots = tmp_path / "plots"
    proc = _run_cli("--machine", sim.MACHINE, "--results", str(res), "--json", str(out),
                    "--plot", str(plots), "--fail-on", "regression", capsys=capsys)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "regression" in proc.stdout and "sim.Latency.track_us('slow')" in proc.stdout
    assert "'flat'" not in proc.stdout
    data = json.loads(out.read_text())
    assert data["schema"] == regressions.SCHEMA and data["machine"] == sim.MACHINE
    assert data["summary"]["regressions"] == 1 and data["commits"] == commits
    (finding,) = data["findings"]
    assert finding["commit"] == commits[12] and finding["parent"] == commits[11]
    assert finding["direction"] == "higher_is_worse" and finding["unit"] == "seconds"
    assert 15 < finding["effect_pct"] < 25 and finding["ci95_pct"][0] > 0
    for key in ("noise_pct", "mde_pct", "before", "after", "p", "commits_in_range"):
        assert key in finding
    assert {s["series"] for s in data["series"]} == {
        "sim.Latency.track_us('slow')", "sim.Latency.track_us('flat')"}
    (png,) = plots.iterdir()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    import matplotlib.image

    pixels = matplotlib.image.imread(png)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 500 and pixels.std() > 0.05

    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask  # not the temporary file's 0600
    assert _run_cli("--machine", sim.MACHINE, "--results", str(res), capsys=capsys).returncode == 0
    after = _run_cli("--machine", sim.MACHINE, "--results", str(res), "--since", commits[12],
                     "--fail-on", "regression", capsys=capsys)
    assert after.returncode == 0 and "0 regressions" in after.stdout


def test_cli_bad_input_is_a_usage_error(tmp_path, capsys):
    res, _ = _cli_history(tmp_path)
    proc = _run_cli("--machine", "nope", "--results", str(res), capsys=capsys)
    assert proc.returncode == 2 and f"machines there: {sim.MACHINE}" in proc.stderr
    proc = _run_cli("--machine", sim.MACHINE, "--results", str(res), "--since", "no-such-rev",
                    capsys=capsys)
    assert proc.returncode == 2 and "names no commit" in proc.stderr
    proc = _run_cli("--machine", sim.MACHINE, "--results", str(res), "--json",
                    str(tmp_path / "missing" / "r.json"), capsys=capsys)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_another_machines_noise_model_is_refused_and_nothing_saved(tmp_path, capsys):
    """A model learned on one machine judged another's history without a word, and
    --save-noise-model then stored it as this machine's."""
    from kvbench.history.verdict import noise_model

    res, _ = _cli_history(tmp_path)
    other = noise_model.save(noise_model.NoiseModel("other-box"), tmp_path / "other.json")
    own = noise_model.path_for(res, sim.MACHINE)
    proc = _run_cli("--machine", sim.MACHINE, "--results", str(res), "--noise-model", str(other),
                    "--save-noise-model", capsys=capsys)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the noise model of machine 'other-box'" in proc.stderr
    assert not own.exists()
    proc = _run_cli("--machine", sim.MACHINE, "--results", str(res), "--save-noise-model",
                    capsys=capsys)
    assert proc.returncode == 0 and noise_model.load(own).machine == sim.MACHINE


def test_prefix_sum_cost_segments_like_ruptures_l2():
    """changepoints' O(1) least-squares cost must give ruptures' own CostL2 segmentation."""
    import ruptures

    from kvbench.history.verdict import changepoints

    rng = np.random.default_rng(7)
    for _ in range(50):
        y = rng.standard_normal(45)
        y[int(rng.integers(5, 40)):] += rng.uniform(0, 4)
        y[int(rng.integers(0, 45))] += rng.uniform(-6, 6)
        ours = changepoints.candidates(y, 1.0, penalty=6.0)
        theirs = ruptures.Pelt(model="l2", min_size=changepoints.MIN_SIZE, jump=1).fit(
            (y - np.median(y)).reshape(-1, 1)).predict(pen=6.0)[:-1]
        assert ours == theirs


def test_default_machine_is_kvbench_machines_name(tmp_path, capsys, monkeypatch):
    import kvbench.history.asv.machine

    res, _ = _cli_history(tmp_path)
    monkeypatch.setattr(kvbench.history.asv.machine, "machine_record",
                        lambda name=None: {"machine": sim.MACHINE})
    proc = _run_cli("--results", str(res), capsys=capsys)
    assert proc.returncode == 0 and proc.stdout.startswith(f"{sim.MACHINE}: 24 measured commits")


def test_rich_table_lists_the_findings(tmp_path):
    import io

    from kvbench.history.verdict.text import print_table

    res, commits = _cli_history(tmp_path)
    out = io.StringIO()
    print_table(analyze(load_history(res, sim.MACHINE)), out, rich=True, by="series")
    text = out.getvalue()
    assert "regression" in text and "'slow'" in text and commits[11][:8] in text
    assert "1 regression, " in text


def test_the_default_table_is_one_line_per_culprit_commit_with_twins_folded(tmp_path):
    """Two series step at one commit: one line naming the commit and its subject, 2 series
    slower; a µs series and its GB/s twin (one class, one set of params) share a key."""
    import io

    from kvbench.history.verdict.regressions import twin_key
    from kvbench.history.verdict.text import print_table

    rng = np.random.default_rng(8)
    slow = _steady(rng, 24, 80e-6, 0.004)
    slow[12:] *= 1.2
    other = _steady(rng, 24, 50e-6, 0.004)
    other[12:] *= 1.1
    history, commits = _history(tmp_path, {"slow": (sim.LATENCY, slow),
                                           "other": (sim.LATENCY, other)})
    report = analyze(history)
    (culprit,) = report.culprits()
    assert len(culprit.slower) == 2
    us = history.series[0]
    gbps = dataclasses.replace(us, benchmark=us.benchmark.replace("track_us", "track_gbps"))
    assert twin_key(us) == twin_key(gbps) != twin_key(history.series[1])
    assert culprit.commit == commits[12] and culprit.subject
    out = io.StringIO()
    print_table(report, out, rich=False)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("regression")]
    assert len(lines) == 1 and commits[12][:8] in lines[0] and culprit.subject in lines[0]
    assert report.to_json()["culprits"][0]["commit"] == commits[12]


def test_names_from_result_files_are_text_not_markup_or_math(tmp_path, monkeypatch):
    """A param that reads as rich markup or matplotlib math text is printed and drawn as it
    is: "[/red]" crashed the terminal table (MarkupError), "[link=...]" hid a hyperlink behind
    plain text, "$\\nosuchcmd{$" crashed the plot and the published page's writer."""
    import io

    from kvbench.history.verdict.text import plot_findings, print_table

    rng = np.random.default_rng(11)
    values = _steady(rng, 24, 50e-6, 0.005)
    values[12:] *= 1.5
    name = "[/red][link=https://evil.example]auto[/link]$\\nosuchcmd{$"
    history, _ = _history(tmp_path / "h", {name: (sim.LATENCY, list(values))})
    report = analyze(history)
    (finding,) = report.findings
    assert "[/red][link=" in finding.series.name and "nosuchcmd{$" in finding.series.name
    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "400")  # one line per row: the name is not folded
    print_table(report, out, rich=True)
    printed = out.getvalue()
    assert "[/red][link=https://evil.example]auto[/link]" in printed
    assert "\x1b]8;" not in printed  # no terminal hyperlink escape
    (png,) = plot_findings(report, tmp_path / "plots")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_history_too_short_to_judge_says_so_and_what_to_do(tmp_path):
    from kvbench.history.verdict.regressions import MIN_POINTS
    from kvbench.history.verdict.text import not_judged_lines, summary_line

    rng = np.random.default_rng(3)
    history, _ = _history(tmp_path, {"s": (sim.LATENCY, list(_steady(rng, 3, 5e-5, 0.01)))})
    line = summary_line(analyze(history))
    assert "0 of 1 series judged" in line and "1 series NOT judged" in line
    assert not_judged_lines(analyze(history)) == [
        f"  1 series not judged: fewer than {MIN_POINTS} measured commits"]
