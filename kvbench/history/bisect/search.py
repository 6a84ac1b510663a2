"""The search behind `kvbench bisect RANGE SERIES`: which commit of RANGE made SERIES worse,
confirmed, or "no regression in RANGE".

One series, fresh measurements only. SERIES is asv's own name of one param combination,
`module.Class.method(param, ...)` with the params as Python literals, e.g.
`paged_decode.PagedDecode.track_us('triton/split_kv', 'fp16', 'b64_c8k')`. Every value used
is measured by this command, at the commit it belongs to, by the real asv (which builds and
installs each commit); nothing is read from the user's results/. The suite's one-case mode
(KVBENCH_ASV_SELECT, benchmarks/_common.py) makes each run measure only that series.

The unit of evidence is one process run (the median of its samples; `Run`). The steps:

1. End points: the range's base and end, measured in interleaved rounds (A,B then B,A, so a
   linear drift cancels) and judged by kvbench.history.bisect.abtest (min p of Mann-Whitney U and
   KS; regression / improvement / no change / inconclusive, rounds added while inconclusive
   up to a cap). Not a regression -> "no regression in RANGE" and no commit is named. An end
   point where the series cannot run (asv skip, failure) is moved inward and reported.
2. Search: binary search on the first-parent commits between the two sides. A visited
   commit gets `search_runs` runs and is placed by `abtest.side_of` against the runs of the
   commits already known good and bad; an unclear position gets more runs (up to 3x). A
   commit where the series cannot run is skipped (git bisect's rule: look at a neighbour)
   and listed.
3. Confirmation: the first bad commit against its nearest runnable parent, interleaved
   rounds again, judged by the same A/B test. Only a confirmed regression names a commit;
   otherwise the answer is "inconclusive" with the evidence.

The measuring side is a `Measurer` (kvbench.history.bisect.measurer.AsvMeasurer drives asv;
tests pass a fake), so the search itself is a pure function of the values it is given.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from kvbench.history.bisect import abtest
from kvbench.history.bisect.measurer import (
    OK,
    Measurer,
    Run,
)
from kvbench.history.verdict.text import format_value

SCHEMA = "kvbench-bisect/1"
#: Runs a search step gives a visited commit before placing it (more while unclear).
SEARCH_RUNS = 3
#: An unclear commit gets up to this many times search_runs runs.
SEARCH_RUNS_CAP_FACTOR = 3

REGRESSION = "regression"
NO_REGRESSION = "no regression"
INCONCLUSIVE = "inconclusive"


# ---- the outcome ---------------------------------------------------------------------------

@dataclass
class BisectOutcome:
    """What bisect found, with every run; `to_json` is the --json schema (docs/bisect.md)."""

    range: str
    series: str
    machine: str
    unit: str
    higher_is_better: bool
    commits: list[str]
    subjects: dict[str, str] = field(default_factory=dict)
    verdict: str = INCONCLUSIVE
    summary: str = ""
    culprit: str | None = None
    parent: str | None = None
    skipped: dict[str, str] = field(default_factory=dict)  # commit -> first run's why
    untested_between: list[str] = field(default_factory=list)
    endpoints: dict | None = None
    search: list[dict] = field(default_factory=list)
    confirmation: dict | None = None
    runs: list[Run] = field(default_factory=list)
    wall_s: float = 0.0
    #: what the sidecars of parent and culprit say differed (kvbench/history/verdict/context.py):
    #: [{kind, text, before, after}]; [] without sidecars or without a confirmed pair
    context: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "runs"}
        out["schema"] = SCHEMA
        out["direction"] = "higher is better" if self.higher_is_better else "lower is better"
        out["runs"] = [asdict(r) for r in self.runs]
        out["cost"] = {"runs": len(self.runs),
                       "process_s": sum(r.process_s or 0.0 for r in self.runs),
                       "wall_s": self.wall_s}
        return out


def _ab_json(result: abtest.ABResult, before: str, after: str) -> dict:
    return {"before_commit": before, "after_commit": after, **result.to_json()}


# ---- the bisection ----------------------------------------------------------------------------

class _Session:
    """Runs measurements through the measurer and records every run in the outcome."""

    def __init__(self, measurer: Measurer, outcome: BisectOutcome, log) -> None:
        self.measurer, self.outcome, self.log = measurer, outcome, log

    def measure(self, commits: Sequence[str], phase: str) -> list[Run]:
        runs = self.measurer.measure(list(commits))
        runs = [Run(**{**asdict(r), "phase": phase}) for r in runs]
        self.outcome.runs.extend(runs)
        for run in runs:
            if run.status != OK and run.commit not in self.outcome.skipped:
                self.outcome.skipped[run.commit] = f"{run.status}: {run.reason}"
        return runs

    def ab(self, before: str, after: str, phase: str, *, rounds: int, max_rounds: int,
           mde: float | None, first: tuple[float, float] | None = None) -> abtest.ABResult:
        """Interleaved A/B rounds (A,B then B,A ...) of two commits, decided by abtest.
        `first`: round 1's values when already measured in that order (the end-point probe)."""

        def one_round(i: int) -> tuple[float | None, float | None]:
            if i == 0 and first is not None:
                return first
            order = (before, after) if i % 2 == 0 else (after, before)
            got = {r.commit: r.value for r in self.measure(order, phase)}
            self.log(f"  {phase} round {i + 1}: {self.fmt(got.get(before))} -> "
                     f"{self.fmt(got.get(after))}")
            return got.get(before), got.get(after)

        return abtest.run_sequential(one_round, rounds=rounds, max_rounds=max_rounds,
                                     higher_is_better=self.outcome.higher_is_better, mde=mde)

    def fmt(self, value: float | None) -> str:
        return format_value(value, self.outcome.unit)


def _effect_text(result: abtest.ABResult) -> str:
    """An A/B result's evidence in the verdict line: effect, interval, p, rounds."""
    return (f"effect {result.effect:+.2%} [{result.ci_low:+.2%}, {result.ci_high:+.2%}], "
            f"p {result.p:.3g}, {result.rounds} rounds")


def _runnable_endpoints(session: _Session, commits: list[str]
                        ) -> tuple[int, int, tuple[float, float]] | None:
    """(lo, hi, their values): the oldest and newest commits of the range where the series
    runs, found by probe runs that move inward past those that cannot run, with the values of
    the successful probe (round 1 of the end-point A/B); None if fewer than two run."""
    lo, hi = 0, len(commits) - 1
    while lo < hi:
        runs = session.measure([commits[lo], commits[hi]], "endpoints")
        got = {r.commit: r.value for r in runs if r.status == OK}
        if commits[lo] in got and commits[hi] in got:
            session.log(f"  endpoints round 1: {session.fmt(got[commits[lo]])} -> "
                        f"{session.fmt(got[commits[hi]])}")
            return lo, hi, (got[commits[lo]], got[commits[hi]])
        if commits[lo] not in got:
            lo += 1
        if commits[hi] not in got:
            hi -= 1
    return None


def check_search_runs(search_runs: int) -> None:
    """ValueError unless 1 <= search_runs <= abtest.MAX_ROUNDS (each run is an asv process)."""
    if not 1 <= search_runs <= abtest.MAX_ROUNDS:
        raise ValueError(f"--search-runs must be from 1 to {abtest.MAX_ROUNDS} (each run is an "
                         f"asv process), got {search_runs}")


def run_bisect(measurer: Measurer, commits: list[str], *, series: str, range_text: str,
               machine: str, unit: str, higher_is_better: bool, rounds: int = abtest.MIN_ROUNDS,
               max_rounds: int = 2 * abtest.MIN_ROUNDS, search_runs: int = SEARCH_RUNS,
               mde: float | None = None, subjects: dict[str, str] | None = None,
               log=print) -> BisectOutcome:
    """Bisect `commits` ([base, ..., end], oldest first) for a regression of one series."""
    abtest.check_rounds(rounds, max_rounds)
    check_search_runs(search_runs)
    if len(commits) < 2:
        raise ValueError("a range needs a base and at least one commit after it")
    t0 = time.monotonic()
    outcome = BisectOutcome(range_text, series, machine, unit, higher_is_better, list(commits),
                    subjects=dict(subjects or {}))
    session = _Session(measurer, outcome, log)
    short = {c: c[:8] for c in commits}

    def finish(verdict: str, summary: str) -> BisectOutcome:
        outcome.verdict, outcome.summary = verdict, summary
        outcome.wall_s = time.monotonic() - t0
        return outcome

    log(f"end points: {short[commits[0]]} .. {short[commits[-1]]} ({len(commits) - 1} commits)")
    ends = _runnable_endpoints(session, commits)
    if ends is None:
        return finish(INCONCLUSIVE, f"{series} runs at fewer than two commits of {range_text}: "
                      "nothing to compare")
    lo, hi, first = ends
    result = session.ab(commits[lo], commits[hi], "endpoints", rounds=rounds,
                        max_rounds=max_rounds, mde=mde, first=first)
    outcome.endpoints = _ab_json(result, commits[lo], commits[hi])
    ends_text = f"{short[commits[lo]]}..{short[commits[hi]]}"
    if result.outcome in (abtest.NO_CHANGE, abtest.IMPROVEMENT):
        what = (f"no change beyond the MDE of +-{result.mde:.1%}"
                if result.outcome == abtest.NO_CHANGE
                else f"it improved by {abs(result.effect):.1%}")
        return finish(NO_REGRESSION, f"no regression in {range_text}: the end points "
                      f"({ends_text}) do not differ for the worse ({what}: "
                      f"{_effect_text(result)})")
    if result.outcome == abtest.INCONCLUSIVE:
        return finish(INCONCLUSIVE, f"inconclusive over {range_text}: the end points "
                      f"({ends_text}) after {result.rounds} rounds: {result.reason}")

    # 2. search between the two sides
    values: dict[str, list[float]] = {}
    for run in outcome.runs:
        if run.value is not None:
            values.setdefault(run.commit, []).append(run.value)
    good = list(values[commits[lo]])
    bad = list(values[commits[hi]])
    cannot_run = set(outcome.skipped)

    def candidates(a: int, b: int) -> list[int]:
        return [i for i in range(a + 1, b) if commits[i] not in cannot_run]

    while candidates(lo, hi):
        middle = (lo + hi) / 2
        m = min(candidates(lo, hi), key=lambda i: (abs(i - middle), i))
        runs = session.measure([commits[m]], "search")
        if runs[0].status != OK:
            cannot_run.add(commits[m])
            log(f"  search {short[commits[m]]}: cannot run ({runs[0].status}: {runs[0].reason})")
            continue
        got = [runs[0].value]
        tried = 1  # runs asked for, failed ones included: the cap counts these, not values
        for _ in range(search_runs - 1):
            got += [r.value for r in session.measure([commits[m]], "search") if r.value is not None]
            tried += 1
        side, position = abtest.side_of(got, good, bad)
        while side == abtest.UNCLEAR and tried < search_runs * SEARCH_RUNS_CAP_FACTOR:
            got += [r.value for r in session.measure([commits[m]], "search") if r.value is not None]
            tried += 1
            side, position = abtest.side_of(got, good, bad)
        placed = (side if side != abtest.UNCLEAR
                  else (abtest.BAD if position >= 0.5 else abtest.GOOD))
        outcome.search.append({"commit": commits[m], "runs": got, "side": side, "placed": placed,
                              "position": position, "good_median": abtest.median(good),
                              "bad_median": abtest.median(bad)})
        log(f"  search {short[commits[m]]}: {', '.join(session.fmt(v) for v in got)} -> {side}"
            f" (position {position:.2f} from good 0 to bad 1)")
        if placed == abtest.BAD:
            hi, bad = m, bad + got
        else:
            lo, good = m, good + got
    outcome.untested_between = [commits[i] for i in range(lo + 1, hi)]
    outcome.culprit, outcome.parent = commits[hi], commits[lo]

    # 3. confirmation: the first bad commit against its nearest runnable parent
    result = session.ab(commits[lo], commits[hi], "confirmation", rounds=rounds,
                        max_rounds=max_rounds, mde=mde)
    outcome.confirmation = _ab_json(result, commits[lo], commits[hi])
    also = (f" (or one of the {len(outcome.untested_between)} commits between them where the "
            "series cannot run)" if outcome.untested_between else "")
    evidence = (f"{session.fmt(abtest.median(result.before))} -> "
                f"{session.fmt(abtest.median(result.after))}, {_effect_text(result)}")
    if result.outcome == abtest.REGRESSION:
        return finish(REGRESSION, f"regression at {short[commits[hi]]}{also} against "
                      f"{short[commits[lo]]}: {evidence}")
    outcome.culprit = None
    return finish(INCONCLUSIVE, f"inconclusive: the search narrowed the step to "
                  f"{short[commits[hi]]}{also}, but its A/B against {short[commits[lo]]} says "
                  f"{result.outcome} ({evidence}; {result.reason})")


# ---- the outcome's context and text ---------------------------------------------------------

def attach_context(outcome: BisectOutcome, results_dir: str | os.PathLike, series) -> None:
    """Add the sidecar facts of the confirmed pair (parent, culprit) to the outcome.

    bisect's asv runs write sidecars into its private results directory (kvbench's env
    plugin passes that directory and --machine to the suite); each commit's file is that of
    the last run there. No confirmed pair or no sidecars: nothing is added."""
    from kvbench.history.verdict.context import SidecarCache

    if not (outcome.culprit and outcome.parent):
        return
    sidecars = SidecarCache(results_dir, outcome.machine)
    facts = sidecars.facts(outcome.parent, outcome.culprit, series.benchmark, series.param_reprs)
    outcome.context = [fact.to_json() for fact in facts]


def format_outcome(outcome: BisectOutcome) -> str:
    """The evidence, as text: per-run values of both sides, effect, interval, p, rounds."""
    unit = outcome.unit
    better = "higher" if outcome.higher_is_better else "lower"
    lines = [f"kvbench bisect {outcome.range} {outcome.series}",
             f"machine {outcome.machine}; {better} is better"]

    def ab_lines(title: str, ab: dict | None) -> None:
        if not ab:
            return
        lines.append(f"{title}: {ab['before_commit'][:8]} -> {ab['after_commit'][:8]}: "
                     f"{ab['outcome']} ({ab['reason']})")
        lines.append(f"  before runs: {', '.join(format_value(v, unit) for v in ab['before'])}")
        lines.append(f"  after runs:  {', '.join(format_value(v, unit) for v in ab['after'])}")
        lines.append(f"  effect {ab['effect']:+.2%} [{ab['ci_low']:+.2%}, {ab['ci_high']:+.2%}] "
                     f"({abtest.CONFIDENCE:.0%} interval); p {ab['p']:.3g} (Mann-Whitney "
                     f"{ab['p_mannwhitney']:.3g}, KS {ab['p_ks']:.3g}); noise {ab['noise']:.2%},"
                     f" MDE {ab['mde']:.2%}; {ab['rounds']} rounds")

    ab_lines("end points", outcome.endpoints)
    for step in outcome.search:
        lines.append(f"search {step['commit'][:8]}: "
                     f"{', '.join(format_value(v, unit) for v in step['runs'])} -> {step['side']}"
                     f" (position {step['position']:.2f})")
    ab_lines("confirmation", outcome.confirmation)
    for fact in outcome.context:
        lines.append(f"  context: {fact['text']}")
    if outcome.skipped:
        lines.append("skipped: commits where a run gave no value (asv skip or failure)")
        for commit, why in outcome.skipped.items():
            lines.append(f"  {commit[:8]} {outcome.subjects.get(commit, '')[:50]}: {why[:160]}")
    processes = sum(r.process_s or 0.0 for r in outcome.runs)
    lines.append(f"cost: {len(outcome.runs)} process runs ({processes:.0f} s measuring), "
                 f"{outcome.wall_s:.0f} s wall")
    lines.append(f"VERDICT: {outcome.summary}")
    return "\n".join(lines)


#: the command's exit status per verdict: a verdict is an answer (0), inconclusive is not (3)
EXIT = {REGRESSION: 0, NO_REGRESSION: 0, INCONCLUSIVE: 3}
