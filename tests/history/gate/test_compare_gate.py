"""kvbench compare's judgment and regressions --confirm, on given run values (no asv): the
A/B verdict per series, the run-wide FDR, and what a fresh measurement does to a suspect."""

from __future__ import annotations

import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kvbench.history.bisect import abtest
from kvbench.history.gate import compare
from kvbench.history.gate.confirm import confirm
from kvbench.history.gate.selection import bench_regex, narrowest_selection, split_name
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import History, Point, Series

UNITS = {"m.C.track_us": "seconds", "m.C.track_gbps": "GB/s"}


def _runs(rng, level, n=5, noise=0.005):
    return list(level * np.exp(noise * rng.standard_normal(n)))


def test_a_slower_series_among_many_flat_ones_is_the_one_regression():
    rng = np.random.default_rng(0)
    runs = {f"m.C.track_us('s{i}')": (_runs(rng, 1e-5), _runs(rng, 1e-5)) for i in range(200)}
    runs["m.C.track_us('slow')"] = (_runs(rng, 1e-5), _runs(rng, 1.2e-5))
    runs["m.C.track_gbps('slow')"] = (_runs(rng, 100.0), _runs(rng, 100 / 1.2))
    result = compare.judge("a" * 40, "b" * 40, runs, UNITS, 5)
    regressed = {s.series for s in result.of(abtest.REGRESSION)}
    assert regressed == {"m.C.track_us('slow')", "m.C.track_gbps('slow')"}
    assert result.of(abtest.IMPROVEMENT) == []
    assert len(result.of(abtest.NO_CHANGE)) > 150  # five runs a side can say "no change"
    slow = next(s for s in result.series if s.series == "m.C.track_us('slow')")
    assert 0.15 < slow.ab.effect < 0.25 and slow.ab.ci_low > 0 and slow.p_adjusted <= compare.FDR_Q
    data = result.to_json()
    assert data["summary"]["regression"] == 2
    assert data["schema"] == compare.SCHEMA == "kvbench.compare/3" and "p_t" in data["series"][0]


def test_two_identical_commits_give_no_regression_and_few_rounds_stay_inconclusive():
    rng = np.random.default_rng(1)
    runs = {f"m.C.track_us('s{i}')": (_runs(rng, 1e-5), _runs(rng, 1e-5)) for i in range(300)}
    result = compare.judge("a" * 40, "b" * 40, runs, UNITS, 5)
    assert result.of(abtest.REGRESSION) == result.of(abtest.IMPROVEMENT) == []
    short = {"m.C.track_us('x')": (_runs(rng, 1e-5, 3), _runs(rng, 1e-5, 3))}
    (only,) = compare.judge("a" * 40, "b" * 40, short, UNITS, 3).series
    assert only.outcome == abtest.INCONCLUSIVE  # no change needs five runs a side
    one = compare.judge("a" * 40, "b" * 40, {"m.C.track_us('y')": ([1e-5], [1e-5, 1e-5])},
                        UNITS, 1)
    assert one.series == [] and "2 a side" in one.unmatched["m.C.track_us('y')"]


def test_a_lone_series_is_called_different_only_at_compares_alpha():
    """One series, five runs a side, +8%: t-test p ~0.005 and an interval clear of 0, which
    abtest.ALPHA would call a regression; compare's per-series rate keeps it inconclusive.
    +25% is a regression."""
    base = [v * 3e-6 for v in (1.0, 1.03, 0.97, 1.05, 0.99)]
    for factor, expected in ((1.08, abtest.INCONCLUSIVE), (1.25, abtest.REGRESSION)):
        runs = {"m.C.track_us('x')": (base, [v * factor for v in base])}
        (only,) = compare.judge("a" * 40, "b" * 40, runs, UNITS, 5).series
        assert only.outcome == expected, only.reason
        if factor == 1.08:
            assert compare.ALPHA < only.p_t <= abtest.ALPHA and only.ab.ci_low > 0


def test_a_flat_lone_series_under_host_noise_is_rarely_called_different():
    """The gate on two unchanged commits: host-like run values (6% log spread, right-skewed
    outliers of +15-60% in 8% of runs, as a loaded 2-core runner gives), five a side, one
    series at a time (no BH help). At most 2 in 1,000 may reach compare.ALPHA (expected ~1);
    the bisect threshold abtest.ALPHA would let ~7 in 1,000 through."""
    rng = np.random.default_rng(7)

    def side():
        x = 0.06 * rng.standard_normal(5)
        outlier = rng.random(5) < 0.08
        x[outlier] += rng.uniform(0.15, 0.6, int(outlier.sum()))
        return list(3e-6 * np.exp(x))

    p = np.array([compare.t_test_p(side(), side()) for _ in range(4000)])
    assert (p <= compare.ALPHA).sum() <= 8
    assert (p <= abtest.ALPHA).sum() > 8  # the stricter rate is what keeps the count down


def _history_with_newest_step(step: float) -> History:
    rng = np.random.default_rng(3)
    commits = [f"{i:040x}" for i in range(1, 13)]
    series = []
    for name in ("'a'", "'b'"):
        x = 0.005 * rng.standard_normal(12)
        if name == "'a'":
            x[-1] += math.log1p(step)
        series.append(Series("m.C.track_us", (name,), ("s",), "seconds", "e",
                             [Point(c, 1e-5 * math.exp(v)) for c, v in zip(commits, x)]))
    return History("m", Path("/nonexistent-kvbench-test"), commits[-1], commits, commits,
                   series, [], runs=dict.fromkeys(commits, 0))


def test_confirm_turns_a_suspect_into_a_regression_or_dismisses_it():
    rng = np.random.default_rng(4)
    for head_level, expected in ((1.2e-5, "confirmed"), (1.0e-5, "dismissed")):
        verdicts = analyze(_history_with_newest_step(0.2))
        (suspect,) = verdicts.suspects
        calls = []

        def measure(parent, commit, findings, head_level=head_level, calls=calls):
            calls.append((parent, commit, [f.series.name for f in findings]))
            runs = {f.series.name: (_runs(rng, 1e-5), _runs(rng, head_level)) for f in findings}
            return compare.judge(parent, commit, runs, UNITS, 5)

        out = confirm(verdicts, measure)
        assert calls == [(suspect.parent, suspect.commit, [suspect.series.name])]
        if expected == "confirmed":
            (f,) = out.regressions
            assert f.kind == "step" and f.confirmation["outcome"] == abtest.REGRESSION
            assert out.suspects == [] and out.dismissed == []
        else:
            assert out.regressions == out.suspects == []
            (d,) = out.dismissed
            assert d.confirmation["outcome"] == abtest.NO_CHANGE


def test_the_tables_say_what_the_fresh_ab_found_for_each_suspect():
    """A step the fresh A/B calls the same way reads "confirmed"; a suspect it cannot call
    stays a suspect that says so ("A/B inconclusive"), and one the fresh runs could not
    measure says that and why: neither reads as confirmed."""
    from kvbench.history.verdict.regressions import NOT_MEASURED_AFRESH
    from kvbench.history.verdict.text import commit_row, row

    rng = np.random.default_rng(5)
    cases = (("confirmed", lambda f: (_runs(rng, 1e-5), _runs(rng, 1.2e-5))),
             ("A/B inconclusive", lambda f: (_runs(rng, 1e-5, n=2), _runs(rng, 1.2e-5, n=2))),
             ("not measured afresh", None))
    for label, runs_of in cases:
        verdicts = analyze(_history_with_newest_step(0.2))

        def measure(parent, commit, findings, runs_of=runs_of):
            if runs_of is None:
                return compare.run_compare(SimpleNamespace(measure_all=lambda c: [{}, {}]),
                                           parent, commit, rounds=5, units=UNITS,
                                           only=[f.series.name for f in findings],
                                           log=lambda text: None)
            return compare.judge(parent, commit, {f.series.name: runs_of(f) for f in findings},
                                 UNITS, 5)

        out = confirm(verdicts, measure)
        (f,) = out.regressions + out.suspects
        assert f.confirmation_label == label
        assert f"({label})" in row(f)[0] and f"({label})" in commit_row(out.culprits()[0])[0]
        if label != "confirmed":
            assert f.kind == "suspect" and "confirmed" not in row(f)[0]
        if runs_of is None:
            assert f.confirmation["outcome"] == NOT_MEASURED_AFRESH
            assert "skips it at these commits" in f.confirmation["reason"]


def test_run_compare_stops_after_a_round_that_measured_none_of_the_series():
    """The suite skips the series at both commits (e.g. commits older than it serves): one
    round says so, the other rounds are not run, and each series is listed with why."""
    calls, logged = [], []

    def measure_all(commits):
        calls.append(commits)
        return [{"m.C.track_us('other')": SimpleNamespace(value=1e-5)} for _ in commits]

    result = compare.run_compare(SimpleNamespace(measure_all=measure_all), "a" * 40, "b" * 40,
                                 rounds=5, units=UNITS, only=["m.C.track_us('x')"],
                                 log=logged.append)
    assert len(calls) == 1 and result.rounds == 1 and result.series == []
    assert "skips it at these commits" in result.unmatched["m.C.track_us('x')"]
    assert "4 further round(s) skipped" in logged[-1]


def test_run_compare_stops_when_one_commit_measured_none_and_says_why():
    """The suite skips the series at the base only (its kvbench predates the op): a
    comparison needs both sides, so one round ends the runs and each series carries asv's
    skip message for that commit."""
    calls, logged = [], []
    base, head = "a" * 40, "b" * 40

    class Measurer:
        def measure_all(self, commits):
            calls.append(commits)
            self.why_none = {base: "this commit's kvbench has no kvbench.ops.kv_alloc"}
            return [{} if c == base else {"m.C.track_us('x')": SimpleNamespace(value=1e-5)}
                    for c in commits]

    result = compare.run_compare(Measurer(), base, head, rounds=5, units=UNITS,
                                 log=logged.append)
    assert len(calls) == 1 and result.rounds == 1 and result.series == []
    assert result.unmatched["m.C.track_us('x')"] == (
        "0 base and 1 head runs (2 a side needed); aaaaaaaa: this commit's kvbench has no "
        "kvbench.ops.kv_alloc")
    assert "measured at aaaaaaaa: 4 further round(s) skipped" in logged[-1]
    assert "kvbench.ops.kv_alloc" in logged[-1]


def test_suite_measurer_keeps_asv_skip_message_of_a_commit_with_no_value(tmp_path, monkeypatch):
    """why_none comes from the commit's own part of asv's output, not the other commit's,
    and is not the skip of a class the selection left out (asv prints those too)."""
    (tmp_path / "asv.conf.json").write_text("{}")
    m = compare.SuiteMeasurer(tmp_path, "box", tmp_path / "work")
    out = ("· For kvbench commit aaaaaaaa <main>:\n  asv: skipped: old commit lacks it\n"
           "  asv: skipped: NotImplementedError('not selected: this run measures only C')\n"
           "· For kvbench commit bbbbbbbb <main>:\n  [50%] ··· ok\n")
    monkeypatch.setattr(m, "_asv_run", lambda commits, bench: (0, out))
    monkeypatch.setattr(m, "_read_all", lambda commit: {} if commit.startswith("a") else
                        {"m.C.track_us('x')": SimpleNamespace(value=1e-5)})
    m.measure_all(["a" * 40, "b" * 40])
    assert m.why_none == {"a" * 40: "old commit lacks it"}


def test_confirm_measures_only_the_suspects_benchmarks_and_case():
    verdicts = analyze(_history_with_newest_step(0.2))
    names = [f.series.name for f in verdicts.suspects]
    regex = bench_regex(names)
    assert re.search(regex, "m.C.track_us('a')") and re.search(regex, "m.C.track_us")
    assert not re.search(regex, "m.C.track_gbps('a')")
    assert narrowest_selection(names) == "C('a')"  # one case: that case alone


def test_the_selection_widens_to_the_class_and_names_each_class():
    us, gbps = "m.C.track_us('a', 64)", "m.C.track_gbps('a', 64)"
    assert split_name(us) == ("m.C.track_us", "'a', 64") and split_name("m.C.t") == ("m.C.t", "")
    assert narrowest_selection([us, gbps]) == "C('a', 64)"  # latency and GB/s: one case
    assert narrowest_selection([us, "m.C.track_us('b', 64)"]) == "C"
    # several classes: each its own narrowest part, not the whole suite
    assert narrowest_selection([us, "n.D.track_us('a', 64)"]) == "C('a', 64); D('a', 64)"
    assert narrowest_selection(["n.D.track_us('x')", us, "m.C.track_us('b', 64)"]) == "C; D('x')"
    assert narrowest_selection(["m.C.track_us"]) == "C"
    assert narrowest_selection(["track_us('a')"]) is None
    assert narrowest_selection([]) is None


def test_the_exit_status_follows_fail_on():
    from kvbench.history.verdict.regressions_cmd import exit_status

    verdicts = analyze(_history_with_newest_step(0.2))
    assert exit_status(verdicts, "regression") == 0  # a suspect is not a regression yet
    assert exit_status(verdicts, "suspect") == 1
    assert exit_status(verdicts, "never") == 0


def test_t_test_p_pools_the_variance_and_is_quiet_with_one_constant_side(recwarn):
    """A rounded host timer can repeat one value in every run of a side: its variance is 0 and
    enters the pooled variance as such (df = 2n - 2), and no warning reaches compare's
    output. The p is checked against the textbook formula."""
    from scipy import stats

    before, after = [6.9e-6] * 3, [6.9e-6, 7.2e-6, 7.0e-6]
    p = compare.t_test_p(before, after)
    b = np.log(after)
    pooled = (len(b) - 1) * b.var(ddof=1) / (len(before) + len(b) - 2)
    t = (b.mean() - math.log(6.9e-6)) / math.sqrt(pooled * (1 / len(before) + 1 / len(b)))
    assert p == pytest.approx(2 * stats.t.sf(abs(t), len(before) + len(b) - 2), rel=1e-9)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    assert compare.t_test_p([1e-5] * 2, [1e-5 * (1 + 1e-15)] * 2) == 1.0  # float noise only
    assert compare.t_test_p([1e-5] * 2, [1.1e-5] * 2) == 0.0


def test_three_noisy_runs_against_three_tight_ones_of_a_large_step_are_a_regression():
    """The e2e gate's plant on a loaded CI runner: the allocator call 4-9 us, the planted
    busy-wait ~410 us with a tighter spread. Welch's df fall to ~2 there (p ~0.003, above
    compare.ALPHA); the pooled test keeps 4 and calls the step."""
    runs = {"m.C.track_us('x')": ([8.506e-06, 4.3905e-06, 8.3395e-06],
                                  [4.16991e-4, 4.180935e-4, 4.05655e-4])}
    (only,) = compare.judge("a" * 40, "b" * 40, runs, UNITS, 3).series
    assert only.outcome == abtest.REGRESSION and only.p_t < compare.ALPHA / 10, only.reason


# ---- compare's recheck ------------------------------------------------------------------------

def _first(rng, flagged: dict[str, float], flat: int = 30) -> compare.Comparison:
    """A first A/B: `flat` unchanged series plus the `flagged` ones at the given head/base
    factor (each called a regression or an improvement)."""
    runs = {f"m.C.track_us('s{i}')": (_runs(rng, 1e-5), _runs(rng, 1e-5)) for i in range(flat)}
    for name, factor in flagged.items():
        runs[name] = (_runs(rng, 1e-5), _runs(rng, factor * 1e-5))
    return compare.judge("a" * 40, "b" * 40, runs, UNITS, 5)


def test_recheck_measures_only_the_claims_and_keeps_those_the_new_runs_make_again():
    rng = np.random.default_rng(11)
    flagged = {"m.C.track_us('real')": 1.3, "m.C.track_us('fluke')": 1.3,
               "m.C.track_us('flip')": 1.3, "m.C.track_us('gone')": 1.3,
               "m.C.track_us('faster')": 0.7}
    first = _first(rng, flagged)
    assert {s.series for s in first.series if s.outcome in compare.CHANGED} == set(flagged)
    second_factor = {"m.C.track_us('real')": 1.25, "m.C.track_us('fluke')": 1.0,
                     "m.C.track_us('flip')": 0.75, "m.C.track_us('faster')": 0.7}
    asked = []

    def measure(names):
        asked.append(sorted(names))
        runs = {n: (_runs(rng, 1e-5), _runs(rng, second_factor[n] * 1e-5))
                for n in names if n in second_factor}
        return compare.judge("a" * 40, "b" * 40, runs, UNITS, 5)

    out = compare.recheck(first, measure)
    assert asked == [sorted(flagged)]  # one second A/B, of the claims alone
    by = {s.series: s for s in out.series}
    assert len(out.series) == len(first.series) and out.rechecked == sorted(
        flagged, key=[s.series for s in first.series].index)
    real = by["m.C.track_us('real')"]
    assert real.outcome == abtest.REGRESSION and real.first.outcome == abtest.REGRESSION
    assert 0.2 < real.ab.effect < 0.3  # the second A/B's effect, not the first's +30%
    assert "made again" in real.reason
    assert by["m.C.track_us('fluke')"].outcome == abtest.NO_CHANGE
    assert "not made again" in by["m.C.track_us('fluke')"].reason
    assert by["m.C.track_us('flip')"].outcome == abtest.INCONCLUSIVE  # reversed
    assert by["m.C.track_us('gone')"].outcome == abtest.INCONCLUSIVE  # not measured again
    assert by["m.C.track_us('faster')"].outcome == abtest.IMPROVEMENT
    assert by["m.C.track_us('s0')"].first is None  # not a claim: not measured again
    data = out.to_json()
    fluke = next(s for s in data["series"] if s["series"] == "m.C.track_us('fluke')")
    assert fluke["first"]["outcome"] == abtest.REGRESSION and data["rechecked"] == out.rechecked
    plain = next(s for s in data["series"] if s["series"] == "m.C.track_us('s0')")
    assert plain["first"] is None and data["alpha"] == compare.ALPHA


def test_recheck_of_a_comparison_without_claims_measures_nothing():
    first = _first(np.random.default_rng(12), {})
    assert first.of(abtest.REGRESSION) == first.of(abtest.IMPROVEMENT) == []

    def measure(names):
        raise AssertionError(f"measured {names}")

    assert compare.recheck(first, measure) is first


def test_a_first_stage_false_claim_rarely_survives_the_recheck():
    """On two commits that change nothing, whatever the first A/B called changed (here each
    of 300 flat series forced to look +30% in the first runs) is judged on fresh flat runs:
    a claim survives at compare.ALPHA per series (expected 0.3 here; at most 2 allowed)."""
    rng = np.random.default_rng(13)
    names = [f"m.C.track_us('f{i}')" for i in range(300)]
    first = compare.judge("a" * 40, "b" * 40,
                          {n: (_runs(rng, 1e-5), _runs(rng, 1.3e-5)) for n in names}, UNITS, 5)
    assert len(first.of(abtest.REGRESSION)) == 300
    out = compare.recheck(first, lambda asked: compare.judge(
        "a" * 40, "b" * 40, {n: (_runs(rng, 1e-5), _runs(rng, 1e-5)) for n in asked}, UNITS, 5))
    assert len(out.of(abtest.REGRESSION)) + len(out.of(abtest.IMPROVEMENT)) <= 2
    assert len(out.of(abtest.NO_CHANGE)) > 250


def test_run_compare_judges_only_the_named_series():
    class Measurer:
        def measure_all(self, commits):
            return [{"m.C.track_us('x')": SimpleNamespace(value=1e-5),
                     "m.C.track_us('y')": SimpleNamespace(value=2e-5)} for _ in commits]

    result = compare.run_compare(Measurer(), "a" * 40, "b" * 40, rounds=2, units=UNITS,
                                 only=["m.C.track_us('x')"], log=lambda text: None)
    assert [s.series for s in result.series] == ["m.C.track_us('x')"]


def test_the_printed_comparison_shows_the_first_ab_beside_a_rechecked_claim():
    import argparse

    from kvbench.history.gate import compare_cmd

    rng = np.random.default_rng(14)
    first = _first(rng, {"m.C.track_us('slow')": 1.3}, flat=3)
    out = compare.recheck(first, lambda names: compare.judge(
        "a" * 40, "b" * 40, {n: (_runs(rng, 1e-5), _runs(rng, 1.3e-5)) for n in names},
        UNITS, 5))
    lines = compare_cmd.format_comparison(out).splitlines()
    assert lines[0].startswith("regression") and "m.C.track_us('slow')" in lines[0]
    assert "(first A/B +" in lines[0]
    assert lines[-1].endswith("1 called changed measured again, 1 reproduced")
    assert "measured again" not in compare_cmd.format_comparison(first)

    parser = argparse.ArgumentParser()
    compare_cmd.add_arguments(parser)
    assert parser.parse_args(["a", "b"]).recheck is True
    assert parser.parse_args(["a", "b", "--no-recheck"]).recheck is False


BENCHMARKS = {"version": 2,
              "kv_alloc.KVAlloc.track_us": {"params": [["'auto'", "'host/freelist'"], ["1", "64"]],
                                            "unit": "seconds"},
              "kv_write.KVWrite.track_gbps": {"params": [["'auto'"]], "unit": "GB/s"}}


def test_a_selection_or_bench_that_names_nothing_in_the_suite_is_refused():
    """A typo in --select measured nothing and a --fail-on regression gate passed on 0
    series; a --bench that matches nothing, or is no regex, stopped asv with a traceback."""
    from kvbench.history.gate.selection import check_bench, check_selection

    for good in ("KVAlloc", "KVAlloc; KVWrite", "KVAlloc('host/freelist', 64)",
                 "KVWrite('auto')"):
        check_selection(good, BENCHMARKS)
    for bad, message in (("KVAloc", "no class 'KVAloc'; its classes: KVAlloc, KVWrite"),
                         ("KVAlloc; KVWrit", "no class 'KVWrit'"),
                         ("KVAlloc('host/freelist',64)", "e.g. KVAlloc('auto', 1)"),
                         (" ; ", "names no class")):
        with pytest.raises(ValueError, match=re.escape(message)):
            check_selection(bad, BENCHMARKS)
    for good in ("KVAlloc", r"track_us\('auto', 64\)", "^kv_write"):
        check_bench(good, BENCHMARKS)
    with pytest.raises(ValueError, match="matches no benchmark of the suite"):
        check_bench("zzz_nomatch", BENCHMARKS)
    with pytest.raises(ValueError, match="not a regular expression"):
        check_bench("(", BENCHMARKS)


def test_rounds_that_cannot_compare_are_refused():
    for rounds in (0, 1, 101):
        with pytest.raises(ValueError, match="from 2 .* to 100"):
            compare.check_rounds(rounds)
    compare.check_rounds(2)


def test_when_asv_fails_compare_exits_1_and_keeps_the_log(monkeypatch, capsys, tmp_path):
    from kvbench.history.gate import compare_cmd

    kept = []

    def failing(self, commit):
        kept.append(self.workdir)
        (self.workdir / "asv.log").write_text("asv said why")
        raise RuntimeError(f"asv run exited 1 (log: {self.log_path})")

    monkeypatch.setattr(compare.SuiteMeasurer, "discover", failing)
    monkeypatch.setattr("kvbench.history.asv.machine.check_machine", lambda name: None)
    code = compare_cmd.main(["HEAD~1", "HEAD", "--machine", "box"])
    err = capsys.readouterr().err
    assert code == 1 and "asv run exited 1" in err and f"kept in {kept[0]}" in err
    assert (kept[0] / "asv.log").read_text() == "asv said why"
    import shutil
    shutil.rmtree(kept[0])


def _failing_at_head(base: str, head: str, crash: set[str]):
    """A measurer whose series `crash` fail at `head` in every run (asv stores None), the
    others measured at both commits."""
    rng = np.random.default_rng(3)
    names = ["m.C.track_us('ok')", *sorted(crash)]

    class Measurer:
        def __init__(self):
            self.failed = {}

        def measure_all(self, commits):
            self.failed = {head: set(crash)} if head in commits else {}
            return [{n: SimpleNamespace(value=float(rng.normal(1e-5, 1e-8))) for n in names
                     if not (c == head and n in crash)} for c in commits]

    return Measurer()


def test_a_series_that_fails_at_head_is_broken_not_uncomparable():
    """A failed benchmark (asv's None) was dropped like a skip: a series HEAD breaks became
    "not comparable" and a --fail-on regression gate passed."""
    base, head = "a" * 40, "b" * 40
    crash = "m.C.track_us('crash')"
    result = compare.run_compare(_failing_at_head(base, head, {crash}), base, head, rounds=3,
                                 units=UNITS, log=lambda text: None)
    assert set(result.broken) == {crash} and crash not in result.unmatched
    assert result.broken[crash] == ("failed in 3 of 3 run(s) at bbbbbbbb, measured in 3 at "
                                    "aaaaaaaa (asv's log has the error)")
    assert [s.series for s in result.series] == ["m.C.track_us('ok')"]
    assert result.to_json()["broken"] == result.broken
    # every series failing at HEAD: one round, and each is broken
    whole = compare.run_compare(_failing_at_head(base, head, {crash, "m.C.track_us('ok')"}),
                                base, head, rounds=5, units=UNITS, log=lambda text: None)
    assert whole.rounds == 1 and set(whole.broken) == {crash, "m.C.track_us('ok')"}


def test_a_series_failing_at_both_commits_or_only_at_base_is_not_broken():
    base, head = "a" * 40, "b" * 40
    name = "m.C.track_us('x')"

    class Measurer:
        def measure_all(self, commits):
            self.failed = {base: {name}, head: {name}} if both else {base: {name}}
            return [{} if (c == base or both) else {name: SimpleNamespace(value=1e-5)}
                    for c in commits]

    for both in (True, False):
        result = compare.run_compare(Measurer(), base, head, rounds=2, units=UNITS,
                                     log=lambda text: None)
        assert result.broken == {}


def test_the_gate_fails_on_a_series_broken_at_head(monkeypatch, capsys):
    import json

    from kvbench.history.asv.repo import resolve
    from kvbench.history.gate import compare_cmd

    base, head = resolve(Path("."), "HEAD~1"), resolve(Path("."), "HEAD")
    bench = {"m.C.track_us": {"unit": "seconds", "params": [["'ok'", "'crash'"]]}, "version": 2}

    def discover(self, commit):
        self.results_dir.mkdir(parents=True, exist_ok=True)
        (self.results_dir / "benchmarks.json").write_text(json.dumps(bench))
        return bench

    measurer = _failing_at_head(base, head, {"m.C.track_us('crash')"})
    monkeypatch.setattr(compare.SuiteMeasurer, "discover", discover)
    def measure_all(self, commits):
        found = measurer.measure_all(commits)
        self.failed = measurer.failed
        return found

    monkeypatch.setattr(compare.SuiteMeasurer, "measure_all", measure_all)
    monkeypatch.setattr("kvbench.history.asv.machine.check_machine", lambda name: None)
    code = compare_cmd.main(["HEAD~1", "HEAD", "--machine", "box", "--rounds", "2",
                             "--fail-on", "regression"])
    out = capsys.readouterr().out
    assert code == 1
    assert "broken       m.C.track_us('crash'): failed in 2 of 2 run(s)" in out
    assert "1 broken at" in out
    assert compare_cmd.main(["HEAD~1", "HEAD", "--machine", "box", "--rounds", "2"]) == 0


def test_suite_measurer_reads_a_failure_apart_from_a_skip(tmp_path):
    """asv stores a failed benchmark as None and a skipped one as NaN."""
    from asv.results import Results
    from asv.runner import BenchmarkResult

    (tmp_path / "asv.conf.json").write_text("{}")
    m = compare.SuiteMeasurer(tmp_path, "box", tmp_path / "work")
    commit = "c" * 40
    res = Results({"machine": "box"}, {}, commit, 0, "3.11", "env", {})
    bench = {"name": "m.C.track_us", "version": "1", "params": [["'a'", "'b'", "'c'"]]}
    res.add_result(bench, BenchmarkResult(result=[1e-5, None, math.nan],
                                          samples=[[1e-5, 1.01e-5], None, None],
                                          number=[1, None, None], errcode=1, stderr="boom",
                                          profile=None))
    res.save(str(m.results_dir))
    found = m._read_all(commit)
    assert list(found) == ["m.C.track_us('a')"]
    assert m.failed == {commit: {"m.C.track_us('b')"}}


def test_a_malformed_config_is_a_usage_error(tmp_path, capsys, monkeypatch):
    from kvbench.cli import main

    monkeypatch.setattr("kvbench.history.asv.machine.check_machine", lambda name: None)

    bad = tmp_path / "asv.conf.json"
    bad.write_text('{"version": 1, "repo": ".",')  # cut off
    for argv in (["compare", "HEAD~1", "HEAD", "--machine", "box", "--config", str(bad)],
                 ["regressions", "--machine", "box", "--config", str(bad)]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert f"--config {bad}: not an asv.conf.json asv can read" in capsys.readouterr().err


def _suspects_of(monkeypatch, machine: str):
    """regressions' judge answering one suspect of `machine`'s history."""
    from kvbench.history.verdict import regressions_cmd as base

    verdicts = SimpleNamespace(suspects=[SimpleNamespace(series=SimpleNamespace(name="m.C.t"),
                                                         parent="a" * 40, commit="b" * 40)],
                               history=SimpleNamespace(machine=machine))
    monkeypatch.setattr(base, "judge", lambda args: verdicts)
    monkeypatch.setattr(base, "check_outputs", lambda args: None)
    monkeypatch.setattr(base, "report", lambda args, v: 0)


def test_confirm_refuses_a_history_whose_machine_asv_does_not_know_here(monkeypatch, capsys):
    """A history recorded on another host was confirmed under its name here: asv stopped
    with a traceback ("No information stored about machine")."""
    from kvbench.cli import main

    _suspects_of(monkeypatch, "no-such-machine-here")
    with pytest.raises(SystemExit) as exc:
        main(["regressions", "--machine", "no-such-machine-here", "--confirm"])
    assert exc.value.code == 2
    assert "--machine no-such-machine-here" in capsys.readouterr().err


def test_confirm_keeps_the_log_when_asv_fails(monkeypatch, capsys):
    from kvbench.cli import main

    def failing(self, commit):
        (self.workdir / "asv.log").write_text("asv said why")
        raise RuntimeError(f"asv could not discover the suite (log: {self.log_path})")

    _suspects_of(monkeypatch, "box")
    monkeypatch.setattr("kvbench.history.asv.machine.check_machine", lambda name: None)
    monkeypatch.setattr(compare.SuiteMeasurer, "discover", failing)
    assert main(["regressions", "--machine", "box", "--confirm"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kvbench regressions --confirm: asv could not discover")
    log = Path(err.split("(log: ")[1].split(")")[0])
    assert log.read_text() == "asv said why" and f"kept in {log.parent}" in err
    import shutil
    shutil.rmtree(log.parent)
