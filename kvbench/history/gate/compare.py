"""Two commits, every series, measured fresh: did HEAD change anything against BASE?

What `asv continuous` should be. Each round is one `asv run` of both commits (order BASE, HEAD
in even rounds and HEAD, BASE in odd ones, so a drift of the machine cancels), through
bisect's AsvMeasurer with a private results directory: each commit's measuring process gives
one value per series (the median of that process's samples). After the rounds, per series:

- the effect and its interval, and "no change", come from kvbench bisect's A/B test
  (abtest.decide: median ratio, bootstrap interval, no change only inside the MDE);
- "different" is claimed across the series, not per series: one comparison tests hundreds of
  series at once, so each series' two-sample t-test on the log run values (parametric: five
  runs a side can reach a small p, which the rank tests of a single-series A/B cannot) is
  corrected by Benjamini-Hochberg at FDR_Q over every series compared; the raw p must also be
  at most ALPHA (BH alone would pass a lone series at 5%), the effect interval exclude 0 and
  the effect reach abtest.MDE_FLOOR;
- everything else is inconclusive, with why.

recheck() then measures the series called changed once more, in a second fresh A/B of only
those series, and the claim stands only where that A/B makes it again: it is judged on the
second A/B's runs alone (the first ones were selected for being extreme), so on two commits
that change nothing a claim needs two independent false positives, and the effect reported
is not inflated by the selection.

The direction comes from the unit (latency up, GB/s down is a regression).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

from kvbench.history.bisect import abtest
from kvbench.history.bisect.measurer import (
    HIGHER_IS_BETTER,
    OK,
    AsvMeasurer,
    Run,
    commit_output,
    no_value_reason,
)

#: The version of compare's --json (and of a `confirmation` in kvbench regressions' JSON):
#: it changes when a key is renamed or removed or changes meaning (docs/verdicts.md).
SCHEMA = "kvbench.compare/3"
#: False discovery rate over the compared series of a "different" claim.
FDR_Q = 0.05
#: Per-series false-positive rate of a "different" claim: the raw t-test p must be at most
#: this. The verdict engine's goal for flat series is at most 1 false finding per 1,000
#: series, and a gate run on two unchanged commits is the flat case. Stricter than bisect's
#: abtest.ALPHA, which judges one commit a search has already singled out.
ALPHA = 0.001
#: Process runs a side: the fewest that can compare a series (judge() needs two a side) and
#: the most a run may ask for (each is an asv process per commit).
MIN_ROUNDS, MAX_ROUNDS = 2, 100


def check_rounds(rounds: int) -> None:
    """ValueError unless MIN_ROUNDS <= rounds <= MAX_ROUNDS (--rounds of compare and of
    regressions --confirm)."""
    if not MIN_ROUNDS <= rounds <= MAX_ROUNDS:
        raise ValueError(f"--rounds {rounds}: from {MIN_ROUNDS} (a series needs two runs a side "
                         f"to be compared) to {MAX_ROUNDS}")


class SuiteMeasurer(AsvMeasurer):
    """AsvMeasurer for many series at once: `bench` (an asv --bench regex, default every
    benchmark) and, when `select` names one class or case, the suite's selective mode."""

    def __init__(self, repo, machine: str, workdir, *, bench: str | None = None,
                 select: str | None = None, **kwargs) -> None:
        super().__init__(repo, None, machine, workdir, **kwargs)
        self.bench, self.select = bench or ".", select
        #: per commit of the latest measure_all that gave no value at all: why, from asv's
        #: output (its skip message or error line; "" when asv said nothing)
        self.why_none: dict[str, str] = {}
        #: per commit of the latest measure_all: the series asv ran and recorded as failed
        #: (a value of None: an exception in the benchmark or its process), apart from the
        #: skipped ones (NaN: the suite does not serve the case at that commit)
        self.failed: dict[str, set[str]] = {}

    def _env(self) -> dict[str, str]:
        env = super()._env()
        if self.select:
            env["KVBENCH_ASV_SELECT"] = self.select
        else:
            env.pop("KVBENCH_ASV_SELECT", None)
        return env

    def measure_all(self, commits: Sequence[str]) -> list[dict[str, Run]]:
        """{series name: Run} per commit, in order, from one asv run."""
        code, out = self._asv_run(commits, self.bench)
        if code not in (0, 2):
            raise RuntimeError(f"asv run exited {code} (log: {self.log_path}):\n{out[-3000:]}")
        self.failed = {}
        found = [self._read_all(commit) for commit in commits]
        self.why_none = {commit: no_value_reason(commit_output(out, commit))
                         for commit, values in zip(commits, found) if not values}
        return found

    def _read_all(self, commit: str) -> dict[str, Run]:
        import glob

        from asv.results import Results

        found: dict[str, Run] = {}
        paths = glob.glob(str(self.results_dir / self.machine / f"{commit[:8]}-*.json"))
        for path in paths:
            result = Results.load(path)
            for name in result.get_all_result_keys():
                params = result.get_result_params(name)
                values = result.get_result_value(name, params)
                samples = result.get_result_samples(name, params) or [None] * len(values)
                for combo, value, sample in zip(itertools.product(*params), values, samples):
                    key = f"{name}({', '.join(combo)})" if combo else name
                    if value is None:
                        self.failed.setdefault(commit, set()).add(key)
                        continue
                    if math.isnan(value):
                        continue
                    found[key] = Run(commit, abtest.median(sample) if sample else float(value),
                                     OK, samples=len(sample or []))
            os.remove(path)
        return found


@dataclass(frozen=True)
class SeriesComparison:
    """One series' verdict: the A/B test's evidence and the run-wide claim."""

    series: str
    unit: str
    outcome: str  # abtest.REGRESSION / IMPROVEMENT / NO_CHANGE / INCONCLUSIVE
    reason: str
    ab: abtest.ABResult
    p_t: float  # t_test_p
    p_adjusted: float
    #: where this verdict is recheck()'s: the first A/B's verdict, which called it changed
    first: SeriesComparison | None = None

    def to_json(self) -> dict:
        return {"series": self.series, "unit": self.unit, "outcome": self.outcome,
                "reason": self.reason, "p_t": self.p_t, "p_adjusted": self.p_adjusted,
                "effect_pct": round(100 * self.ab.effect, 4),
                "ci95_pct": [round(100 * self.ab.ci_low, 4), round(100 * self.ab.ci_high, 4)],
                "mde_pct": round(100 * self.ab.mde, 4), "noise_pct": round(100 * self.ab.noise, 4),
                "before": list(self.ab.before), "after": list(self.ab.after),
                "first": self.first.to_json() if self.first else None}


@dataclass
class Comparison:
    base: str
    head: str
    rounds: int
    series: list[SeriesComparison] = field(default_factory=list)
    #: series measured on one side only, or with fewer than 2 runs a side: name -> why
    unmatched: dict[str, str] = field(default_factory=dict)
    #: series recheck() measured again (those the first A/B called changed)
    rechecked: list[str] = field(default_factory=list)
    #: series broken by HEAD: asv recorded a failure at HEAD in some round and none at BASE,
    #: where it measured them: name -> how often each side failed. A gate fails on these as
    #: on a regression (a kernel HEAD breaks must not pass as "not comparable").
    broken: dict[str, str] = field(default_factory=dict)

    def of(self, outcome: str) -> list[SeriesComparison]:
        return [s for s in self.series if s.outcome == outcome]

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "base": self.base, "head": self.head,
                "rounds": self.rounds, "fdr_q": FDR_Q, "alpha": ALPHA,
                "summary": {o: len(self.of(o)) for o in abtest.OUTCOMES},
                "rechecked": list(self.rechecked),
                "series": [s.to_json() for s in self.series], "unmatched": self.unmatched,
                "broken": self.broken}


#: A side whose log run values spread less than this is constant: float rounding, far below
#: any timer's resolution (a rounded timer repeating one value reads exactly constant).
CONSTANT_LOG_SPREAD = 1e-12


def t_test_p(before: Sequence[float], after: Sequence[float]) -> float:
    """Two-sided two-sample t-test of the log run values, variance pooled over both sides;
    where both sides are constant, 1.0 when they are equal and 0.0 when they differ.

    Pooled, not Welch's: the null hypothesis is that HEAD changes nothing, so both sides'
    runs come from one distribution and share one variance. With equal runs a side the
    statistic is Welch's; the degrees of freedom are 2n - 2 where Welch's fall towards n - 1
    when one side is much tighter, which a large step makes it (a busy-wait's runs spread
    less than the call it slows), so at three runs a side Welch's t often cannot claim a
    many-fold step past ALPHA. On flat pairs both are calibrated (docs/decisions.md)."""
    import warnings

    import numpy as np
    from scipy import stats

    a, b = np.log(np.asarray(before, float)), np.log(np.asarray(after, float))
    if np.ptp(a) <= CONSTANT_LOG_SPREAD and np.ptp(b) <= CONSTANT_LOG_SPREAD:
        return 0.0 if abs(float(a.mean() - b.mean())) > CONSTANT_LOG_SPREAD else 1.0
    with warnings.catch_warnings():
        # one constant side: its variance is 0 and enters the pooled one as such, but scipy
        # warns of cancellation in computing it (a warning per such series in compare's output)
        warnings.filterwarnings("ignore", message="Precision loss occurred",
                                category=RuntimeWarning)
        return float(stats.ttest_ind(a, b, equal_var=True).pvalue)


def judge(base: str, head: str, runs: dict[str, tuple[list[float], list[float]]],
          units: dict[str, str], rounds: int) -> Comparison:
    """The Comparison of per-series run values {name: (base runs, head runs)}."""
    from kvbench.history.verdict.regressions import benjamini_hochberg

    out = Comparison(base, head, rounds)
    tested = []
    for name, (a, b) in sorted(runs.items()):
        unit = units.get(name.split("(")[0])
        if unit not in HIGHER_IS_BETTER:
            out.unmatched[name] = f"unit {unit!r} has no direction"
        elif min(len(a), len(b)) < 2:
            out.unmatched[name] = f"{len(a)} base and {len(b)} head runs (2 a side needed)"
        else:
            tested.append((name, unit, a, b))
    p_values = [t_test_p(a, b) for _, _, a, b in tested]
    adjusted = benjamini_hochberg(p_values, len(tested), FDR_Q)
    for (name, unit, a, b), p, q in zip(tested, p_values, adjusted):
        ab = abtest.decide(a, b, higher_is_better=HIGHER_IS_BETTER[unit])
        if q <= FDR_Q and p <= ALPHA and (ab.ci_low > 0 or ab.ci_high < 0) \
                and abs(ab.effect) >= abtest.MDE_FLOOR:
            worse = (ab.effect < 0) if HIGHER_IS_BETTER[unit] else (ab.effect > 0)
            outcome = abtest.REGRESSION if worse else abtest.IMPROVEMENT
            reason = (f"t-test p {p:.3g} <= {ALPHA}, {q:.3g} after BH over {len(tested)} "
                      f"series <= {FDR_Q}; the effect interval excludes 0")
        elif ab.outcome == abtest.NO_CHANGE:
            outcome, reason = abtest.NO_CHANGE, ab.reason
        else:
            outcome = abtest.INCONCLUSIVE
            reason = f"t-test p {p:.3g}, BH-adjusted {q:.3g}"
            if ab.outcome == abtest.INCONCLUSIVE:
                reason += f"; {ab.reason}"
        out.series.append(SeriesComparison(name, unit, outcome, reason, ab, p, q))
    return out


def run_compare(measurer: SuiteMeasurer, base: str, head: str, *, rounds: int,
                units: dict[str, str], only: Collection[str] | None = None,
                log=print) -> Comparison:
    """`rounds` interleaved asv runs of base and head, then judge() of every series measured,
    or of the `only` ones (the family a recheck or a confirmation tests; the measuring
    process may measure their neighbours too). A first round that measured none of them at
    one of the commits ends the runs: a comparison needs both sides, and more rounds would
    measure nothing there too (the suite skips those series at that commit). An `only`
    series never measured, or measured at one side only, is listed in `unmatched` with why
    (asv's skip message where the measurer has one: SuiteMeasurer.why_none)."""
    runs: dict[str, tuple[list[float], list[float]]] = {}
    keep = set(only) if only is not None else None
    why: dict[str, str] = {}
    failures: dict[str, list[int]] = {}  # name -> [failed runs at base, at head]
    done = 0
    for i in range(rounds):
        order = [base, head] if i % 2 == 0 else [head, base]
        measured = dict(zip(order, measurer.measure_all(order)))
        for commit, text in getattr(measurer, "why_none", {}).items():
            why.setdefault(commit, text)
        for side, commit in enumerate((base, head)):
            for name in getattr(measurer, "failed", {}).get(commit, ()):
                failures.setdefault(name, [0, 0])[side] += 1
        for name in set(measured[base]) | set(measured[head]):
            a, b = runs.setdefault(name, ([], []))
            if name in measured[base]:
                a.append(measured[base][name].value)
            if name in measured[head]:
                b.append(measured[head][name].value)
        done += 1
        log(f"round {i + 1}/{rounds}: {len(measured[base])} series at {base[:8]}, "
            f"{len(measured[head])} at {head[:8]}")
        asked = [r for name, r in runs.items() if keep is None or name in keep]
        empty = [commit for commit, side in ((base, 0), (head, 1))
                 if not any(r[side] for r in asked)]
        if empty:
            where = " or ".join(c[:8] for c in empty)
            log(f"no series asked for was measured at {where}: {rounds - done} further round(s) "
                f"skipped (the suite skips them at {where} or does not select them"
                f"{_why(why, empty)})")
            break
    if keep is not None:
        runs = {name: r for name, r in runs.items() if name in keep}
        failures = {name: f for name, f in failures.items() if name in keep}
    out = judge(base, head, runs, units, done)
    for name, (at_base, at_head) in sorted(failures.items()):
        measured_at_base = len(runs.get(name, ((), ()))[0])
        if at_head and not at_base and measured_at_base:
            out.broken[name] = (f"failed in {at_head} of {done} run(s) at {head[:8]}, measured "
                                f"in {measured_at_base} at {base[:8]} (asv's log has the error)")
            out.unmatched.pop(name, None)
    for name, (a, b) in runs.items():
        lacking = [c for c, side in ((base, a), (head, b)) if not side]
        if name in out.unmatched and lacking:
            out.unmatched[name] += _why(why, lacking)
    for name in sorted(keep or ()):
        if name not in runs:
            out.unmatched[name] = (f"no value at {base[:8]} or {head[:8]} in {done} round(s): "
                                   "the suite skips it at these commits or does not select it"
                                   f"{_why(why, [base, head])}")
    return out


def _why(why: dict[str, str], commits: Sequence[str]) -> str:
    """'; <hash8>: <asv's reason>' for each of `commits` that measured nothing and says why."""
    return "".join(f"; {c[:8]}: {why[c]}" for c in commits if why.get(c))


#: The outcomes recheck() measures again: the claims.
CHANGED = (abtest.REGRESSION, abtest.IMPROVEMENT)


def recheck(first: Comparison, measure: Callable[[list[str]], Comparison]) -> Comparison:
    """`first` with every series it called changed measured again and judged on the new runs.

    measure(names) runs a second fresh A/B of exactly those series and judges them (the
    command: run_compare over the same measurer, narrowed to them). Per series: the second
    A/B's verdict, with the first one attached (`first`), except that a claim the second A/B
    reverses (a regression it calls an improvement, or the other way) is inconclusive. A
    series the second A/B did not measure is inconclusive too; a claim is never kept on the
    first A/B's runs alone."""
    flagged = [s.series for s in first.series if s.outcome in CHANGED]
    if not flagged:
        return first
    second = {s.series: s for s in measure(flagged).series}
    out = Comparison(first.base, first.head, first.rounds, unmatched=dict(first.unmatched),
                     rechecked=flagged, broken=dict(first.broken))
    for s in first.series:
        fresh = second.get(s.series)
        if s.outcome not in CHANGED:
            out.series.append(s)
        elif fresh is None:
            out.series.append(dataclasses.replace(
                s, outcome=abtest.INCONCLUSIVE, first=s,
                reason=f"the first A/B said {s.outcome}; the recheck measured no runs of it"))
        elif fresh.outcome in CHANGED and fresh.outcome != s.outcome:
            out.series.append(dataclasses.replace(
                fresh, outcome=abtest.INCONCLUSIVE, first=s,
                reason=f"the first A/B said {s.outcome}, the recheck {fresh.outcome}"))
        else:
            verb = "made again" if fresh.outcome == s.outcome else "not made again"
            out.series.append(dataclasses.replace(
                fresh, first=s, reason=f"{fresh.reason} (recheck: the first A/B's "
                                       f"{s.outcome} {verb})"))
    return out
