"""The verdict per step: which level changes in a machine's history are real, and which way.

For every series (results.py) this module estimates the noise from the history (noise.py),
finds the significant level changes over the whole history (changepoints.py), and turns each
into a Finding: the commit range it landed in, before -> after in the series' unit, the effect
with a 95% interval, the noise and the minimum detectable effect, and a direction-aware
verdict: a latency series (unit seconds) regresses when it goes up, a throughput series
(GB/s) when it goes down. A GB/s drop is a regression, never an improvement. A host-side
series whose sidecars carry the machine's canary is judged at the host's typical speed
(host_speed.py): a slow spell of the machine is not a step of the code.

`Verdicts.to_json()` is the `--json` output; its schema (SCHEMA) is documented in
docs/history.md and versioned: a change that renames or removes a key bumps the version.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from kvbench.core import progress
from kvbench.history.verdict import changepoints, host_speed, noise
from kvbench.history.verdict.context import Fact, SidecarCache
from kvbench.history.verdict.results import History, Series

SCHEMA = "kvbench.regressions/1"

#: Direction by unit: +1 when bigger is worse (latency), -1 when smaller is worse (throughput).
WORSE_SIGN = {"seconds": +1, "GB/s": -1}

#: Two-sided significance level of a reported step (Student t on the history's noise). Set
#: with the simulation (kvbench.history.verdict.simulate): it keeps flat, heavy-tailed
#: host-style series quiet; docs/history.md gives the measured rates.
ALPHA = 1e-3
#: The minimum detectable effect, in units of the noise a step is seen against (the
#: within-run noise when a run has commits on both sides of it, else the total): a smaller
#: step is not reported even when it is significant (a long history makes a 1-sigma shift
#: significant; between two GPUs of one name that is not a code change).
MDE_SIGMAS = 3.0
#: PELT's penalty on the standardized series: low, so that PELT proposes and the test decides.
PENALTY = 3.0
#: A series needs this many measured commits to be judged.
MIN_POINTS = 6
#: Rounds of (find the steps, re-estimate the noise without them).
NOISE_PASSES = 2


@dataclass(frozen=True)
class Finding:
    """One reported level change of one series."""

    series: Series
    verdict: str  # "regression" or "improvement"
    kind: str  # "step" (lands within two commits) or "drift" (spread over more)
    parent: str  # last measured commit at the old level
    commit: str  # first measured commit that moved
    settled: str  # first measured commit at the new level
    transition: tuple[str, ...]  # measured commits between the levels (commit..before settled)
    commits_in_range: int  # first-parent commits in (parent, settled]: what a bisect searches
    before: float  # level before, in the series' unit (the test's estimate of the segment)
    after: float
    effect_pct: float  # after / before - 1, in %
    ci95_pct: tuple[float, float]
    t: float
    p: float
    points_before: int
    points_after: int
    noise: noise.Noise
    mde_pct: float  # the MDE that applied: within-run or across runs (within_run)
    within_run: bool  # a measurement run has commits on both sides of the step
    #: what the sidecars of parent and settled say differed (auto's row, kernel resources,
    #: GPU clocks, measured error): kvbench/history/verdict/context.py; () without sidecars
    context: tuple[Fact, ...] = ()
    #: the series was judged at the host's typical speed (kvbench/history/verdict/host_speed.py):
    #: its points, before and after are scaled by each commit's canary
    host_speed_scaled: bool = False

    @property
    def worse_pct(self) -> float:
        """The effect in the direction of worse (positive = worse), in %."""
        return WORSE_SIGN[self.series.unit] * self.effect_pct

    def to_json(self) -> dict:
        s = self.series
        return {
            "series": s.name,
            "benchmark": s.benchmark,
            "params": dict(zip(s.param_names, s.params)),
            "env": s.env,
            "unit": s.unit,
            "direction": "higher_is_worse" if WORSE_SIGN[s.unit] > 0 else "lower_is_worse",
            "verdict": self.verdict,
            "kind": self.kind,
            "parent": self.parent,
            "commit": self.commit,
            "settled": self.settled,
            "transition": list(self.transition),
            "commits_in_range": self.commits_in_range,
            "before": self.before,
            "after": self.after,
            "effect_pct": round(self.effect_pct, 4),
            "worse_pct": round(self.worse_pct, 4),
            "ci95_pct": [round(v, 4) for v in self.ci95_pct],
            "t": round(self.t, 3),
            "p": self.p,
            "points_before": self.points_before,
            "points_after": self.points_after,
            "noise_pct": round(self.noise.pct, 4),
            "noise_within_run_pct": round(100 * math.expm1(self.noise.within), 4),
            "noise_between_runs_pct": round(100 * math.expm1(self.noise.runs), 4),
            "mde_pct": round(self.mde_pct, 4),
            "within_run": self.within_run,
            "host_speed_scaled": self.host_speed_scaled,
            "context": [fact.to_json() for fact in self.context],
        }


@dataclass
class SeriesVerdict:
    """What the analysis of one series found; noise is None when it was too short to judge."""

    series: Series
    noise: noise.Noise | None
    mde_pct: float | None
    findings: list[Finding] = field(default_factory=list)
    host_speed_scaled: bool = False

    def to_json(self) -> dict:
        n = self.noise
        return {
            "series": self.series.name,
            "unit": self.series.unit,
            "points": len(self.series.points),
            "judged": n is not None,
            "noise_pct": None if n is None else round(n.pct, 4),
            "noise_within_run_pct": None if n is None
            else round(100 * math.expm1(n.within), 4),
            "noise_between_runs_pct": None if n is None else round(100 * math.expm1(n.runs), 4),
            "noise_within_process_pct": None if n is None or n.within_process is None
            else round(100 * math.expm1(n.within_process), 4),
            "mde_pct": None if self.mde_pct is None else round(self.mde_pct, 4),
            "mde_within_run_pct": None if n is None
            else round(100 * math.expm1(MDE_SIGMAS * n.within), 4),
            "findings": len(self.findings),
            "host_speed_scaled": self.host_speed_scaled,
        }


@dataclass
class Verdicts:
    """Every series' verdict for one machine, and the findings to print."""

    history: History
    since: str | None
    verdicts: list[SeriesVerdict]
    #: sidecars that exist but could not be read: [{commit, reason}] (their facts are left out)
    sidecar_problems: list[dict[str, str]] = field(default_factory=list)

    @property
    def findings(self) -> list[Finding]:
        """Findings after `since`, regressions first, each group worst first."""
        order = {c: i for i, c in enumerate(self.history.first_parent)}
        floor = -1 if self.since is None else order[self.since]
        found = [f for v in self.verdicts for f in v.findings if order[f.commit] > floor]
        return sorted(found, key=lambda f: (f.verdict != "regression", -abs(f.worse_pct)))

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict == "regression"]

    def to_json(self) -> dict:
        from kvbench import __version__

        h = self.history
        return {
            "schema": SCHEMA,
            "kvbench": __version__,
            "machine": h.machine,
            "results_dir": str(h.results_dir),
            "head": h.head,
            "since": self.since,
            "method": {
                "changepoints": "ruptures PELT (l2, jump=1, min_size=2) then pruning by t-test",
                "alpha": ALPHA,
                "mde_sigmas": MDE_SIGMAS,
                "pelt_penalty": PENALTY,
                "prior_df": noise.PRIOR_DF,
                "min_points": MIN_POINTS,
                "min_size": changepoints.MIN_SIZE,
                "window": changepoints.WINDOW,
            },
            "commits": h.commits,
            "skipped_results": h.skipped,
            "skipped_sidecars": self.sidecar_problems,
            "summary": {
                "series": len(self.verdicts),
                "judged": sum(v.noise is not None for v in self.verdicts),
                "regressions": len(self.regressions),
                "improvements": len(self.findings) - len(self.regressions),
                "skipped_results": len(h.skipped),
            },
            "findings": [f.to_json() for f in self.findings],
            "series": [v.to_json() for v in self.verdicts],
        }


def mde_pct(sigma: float) -> float:
    """The minimum detectable effect of a series with log-noise sigma, in %."""
    return 100.0 * math.expm1(MDE_SIGMAS * sigma)


def _fit(x: np.ndarray, runs: list[int], within_process: float | None, prior: noise.Prior):
    """Noise and breaks, in two passes: the second estimates the noise without the steps.

    A series too short to estimate its own noise (fewer than PRIOR_DF differences) starts
    from its prior alone: its own differences may all be the steps it is looking for."""
    est = noise.estimate(x, runs, within_process=within_process, prior=prior)
    if est is None:
        return None, []
    if prior.within is not None and est.differences < noise.PRIOR_DF:
        est = noise.estimate(x, runs, exclude=range(len(x)), within_process=within_process,
                             prior=prior)
    breaks: list[changepoints.Break] = []
    for _ in range(NOISE_PASSES):
        breaks = changepoints.find_breaks(x, runs, est, alpha=ALPHA, mde_sigmas=MDE_SIGMAS,
                                          penalty=PENALTY)
        crossing = set()
        for b in breaks:
            first, stop = changepoints.transition(x, b, est.total)
            crossing.update(range(first, stop + 1))
        refined = noise.estimate(x, runs, exclude=crossing, within_process=within_process,
                                 prior=prior)
        if refined is None or refined == est:
            return est, breaks
        est = refined
    # the breaks are always judged by the noise that is returned with them
    return est, changepoints.find_breaks(x, runs, est, alpha=ALPHA, mde_sigmas=MDE_SIGMAS,
                                         penalty=PENALTY)


def _finding(series: Series, history: History, x: np.ndarray, est: noise.Noise,
             brk: changepoints.Break) -> Finding:
    from scipy import stats

    first, stop = changepoints.transition(x, brk, est.total)
    commits = [p.commit for p in series.points]
    level_before, level_after = brk.level_before, brk.level_after
    se, t, p = brk.se, brk.t, brk.p
    delta = brk.delta
    half = float(stats.t.ppf(0.975, est.df)) * se
    worse = WORSE_SIGN[series.unit] * delta > 0
    return Finding(
        series=series,
        verdict="regression" if worse else "improvement",
        kind="drift" if stop - first >= 2 else "step",
        parent=commits[first - 1],
        commit=commits[first],
        settled=commits[stop],
        transition=tuple(commits[first:stop]),
        commits_in_range=history.commits_between(commits[first - 1], commits[stop]),
        before=math.exp(level_before),
        after=math.exp(level_after),
        effect_pct=100.0 * math.expm1(delta),
        ci95_pct=(100.0 * math.expm1(delta - half), 100.0 * math.expm1(delta + half)),
        t=t, p=p,
        points_before=brk.n_before,
        points_after=brk.n_after,
        noise=est,
        mde_pct=100.0 * math.expm1(changepoints.min_effect(est, brk.within_run, MDE_SIGMAS)),
        within_run=brk.within_run,
    )


@dataclass
class _Prepared:
    """A series' log values, runs and own noise, before the machine-wide prior is known
    (`series` is the one judged: a host series rescaled to its typical speed when `scaled`)."""

    series: Series
    x: np.ndarray
    runs: list[int]
    within_process: float | None
    own: noise.Noise | None
    scaled: host_speed.Scaled | None = None

    @property
    def family(self) -> str:
        return self.series.benchmark


def _prepare(series: Series, history: History, sidecars: SidecarCache) -> _Prepared | None:
    if series.unit not in WORSE_SIGN:
        raise ValueError(f"{series.name}: unit {series.unit!r} has no direction; "
                         f"known units: {', '.join(WORSE_SIGN)}")
    if len(series.points) < MIN_POINTS:
        return None
    scaled = host_speed.at_typical_speed(series, sidecars)
    if scaled is not None:
        series = scaled.series
    values = [p.value for p in series.points]
    if min(values) <= 0:
        return None
    x = np.log(values)
    runs = [history.runs.get(p.commit, -1 - i) for i, p in enumerate(series.points)]
    within_process = noise.within_process_sigma(
        values, [p.ci99_low for p in series.points], [p.ci99_high for p in series.points])
    return _Prepared(series, x, runs, within_process,
                     noise.estimate(x, runs, within_process=within_process), scaled)


def _judge(prep: _Prepared, history: History,
           priors: dict[str, tuple[float, float]]) -> SeriesVerdict:
    prior = noise.prior_for(priors, prep.family, prep.within_process)
    est, breaks = _fit(prep.x, prep.runs, prep.within_process, prior)
    is_scaled = prep.scaled is not None
    if est is None:
        return SeriesVerdict(prep.series, None, None, host_speed_scaled=is_scaled)
    findings = [_finding(prep.series, history, prep.x, est, b) for b in breaks]
    if is_scaled:
        findings = [dataclasses.replace(f, host_speed_scaled=True,
                                        context=(prep.scaled.fact(f.parent, f.settled),))
                    for f in findings]
    return SeriesVerdict(prep.series, est, mde_pct(est.total), findings, is_scaled)


def analyze(history: History, *, since: str | None = None) -> Verdicts:
    """Judge every series of `history` whose unit has a direction.

    `since` (a full hash on the history's first-parent line) limits the findings reported to
    steps whose first moved commit comes after it; the noise still uses the whole history."""
    if since is not None and since not in set(history.first_parent):
        raise ValueError(f"--since {since[:12]} is not on the first-parent line of "
                         f"{history.head[:12]}")
    judged = [s for s in history.series if s.unit in WORSE_SIGN]
    sidecars = SidecarCache(history.results_dir, history.machine)
    prepared = [(s, _prepare(s, history, sidecars)) for s in judged]
    priors = noise.family_priors((p.own, p.family) for _, p in prepared
                                 if p is not None and p.own is not None)
    verdicts = []
    for i, (s, p) in enumerate(prepared):
        progress.report(f"judging series {i + 1}/{len(prepared)}")
        verdicts.append(SeriesVerdict(s, None, None) if p is None
                        else _judge(p, history, priors))
    progress.report("reading the sidecars of the findings' commits")
    for verdict in verdicts:
        verdict.findings = [with_context(f, sidecars) for f in verdict.findings]
    return Verdicts(history=history, since=since, verdicts=verdicts,
                  sidecar_problems=sidecars.problems)


def with_context(finding: Finding, sidecars: SidecarCache) -> Finding:
    """The finding with the sidecar facts of its two sides (parent, settled) attached."""
    s = finding.series
    facts = sidecars.facts(finding.parent, finding.settled, s.benchmark, s.params)
    return dataclasses.replace(finding, context=finding.context + tuple(facts)) if facts \
        else finding
