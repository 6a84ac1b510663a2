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
docs/verdicts.md and versioned: a change that renames or removes a key bumps the version.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

from kvbench.core import progress
from kvbench.history.verdict import (
    changepoints,
    code_scope,
    devices,
    host_speed,
    noise,
    noise_model,
    span_prior,
)
from kvbench.history.verdict.context import Fact, SidecarCache, case_key
from kvbench.history.verdict.results import History, Series

SCHEMA = "kvbench.regressions/3"

#: Direction by unit: +1 when bigger is worse (latency), -1 when smaller is worse (throughput).
WORSE_SIGN = {"seconds": +1, "GB/s": -1}

#: False discovery rate across the run's series (Benjamini-Hochberg): a step is reported when
#: its p-value, corrected for the position the search chose (changepoints.Break.p_series),
#: passes BH at this rate among every hypothesis the run tested (one interior search and two
#: edges per judged series). With every series flat it bounds the chance of any false report
#: in the run; docs/verdicts.md gives the measured rates (kvbench.history.verdict.detection).
FDR_Q = 0.05
#: And each reported step's own p-value, corrected for its position, at most this: BH alone
#: lets a run with many real steps (a commit that moved fifty series) pass the others' noise
#: at up to FDR_Q each; this keeps a flat series' false-report rate bounded in every run.
ALPHA_SERIES = 1e-3
#: Hypotheses per judged series under FDR_Q: the interior search, the newest and the first
#: commit.
TESTS_PER_SERIES = 3
#: A series whose noise has fewer degrees of freedom than this is not judged: its test could
#: not tell a step from the noise it estimates in the same breath.
MIN_DF = 3
#: The minimum detectable effect, in units of the noise a step is seen against (the
#: within-run noise when a run has commits on both sides of it, else the total): a smaller
#: step is not reported even when it is significant (a long history makes a 1-sigma shift
#: significant; between two GPUs of one name that is not a code change).
MDE_SIGMAS = 3.0
#: PELT's penalty on the standardized series: low, so that PELT proposes and the test decides.
PENALTY = 3.0
#: A series needs this many measured commits to be judged (with fewer, a machine noise model
#: is the only noise reference and one point the only side).
MIN_POINTS = 4
#: A proposed boundary's difference this many sigmas (of the other differences) from their
#: median is a candidate step: it is left out of the noise (_step_differences).
EDGE_CANDIDATE_Z = 3.0
#: A cross-run difference this many times the RMS of the other cross-run differences is a
#: candidate step too: farther out than EDGE_CANDIDATE_Z, because a series has few run changes
#: and the largest of a handful of honest run shifts is often 3 RMS from the rest.
CROSS_RUN_CANDIDATE_Z = 8.0
#: Rounds of (find the steps, re-estimate the noise without them).
NOISE_PASSES = 3
#: Rounds of (propose candidate steps, estimate the noise without those that stand out).
CANDIDATE_PASSES = 3
#: An interior point slower than both of its neighbours by more than this many noise sigmas
#: is one slow process, not a level: the series is judged without it (_without_slow_stretches).
#: One point is never a level (changepoints.MIN_SIZE), but left in, it drags the level of its
#: segment: an outlier two commits before a step at the newest commit made one level of
#: itself, the point after it and the step's point, and the step was placed at the outlier.
#: For a stretch of consecutive slow points (SLOW_STRETCH_MAX) it is their mean's bar.
ISOLATED_SLOW_Z = 5.0
#: The longest run of consecutive interior points set aside as slow processes: a host busy
#: through several consecutive measurements reads as a level that comes and goes (a
#: regression and the improvement that undoes it, at two innocent commits); each point of
#: such a stretch must also be EDGE_CANDIDATE_Z sigmas slower than both points around it.
SLOW_STRETCH_MAX = 3

#: A confirmation's outcome when the fresh runs gave the series no value at either commit
#: (the current suite skips it there: a commit older than the suite serves, or a new series).
NOT_MEASURED_AFRESH = "not measured"


@dataclass(frozen=True)
class Excursion:
    """One to SLOW_STRETCH_MAX consecutive points slower than the agreeing points either side,
    set aside as slow processes: what a reader needs to tell them from a change undone a few
    commits later (`kvbench compare parent commit`)."""

    commit: str  # the first slow point's commit
    parent: str  # the measured commit before it
    slower_pct: float  # how much slower the stretch's mean is than the two points around it
    last: str  # the last slow point's commit (`commit` for a stretch of one point)
    points: int  # measured commits in the stretch


@dataclass(frozen=True)
class Finding:
    """One reported level change of one series."""

    series: Series
    verdict: str  # "regression" or "improvement"
    #: "step" (lands within two commits), "drift" (spread over more) or "suspect" (one point at
    #: an end of the history: a step or an outlier, until a fresh A/B measurement says which)
    kind: str
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
    #: p corrected for the position the search chose, then for the run's every hypothesis
    #: (Benjamini-Hochberg at FDR_Q): what the finding passed
    p_adjusted: float = math.nan
    edge: str = ""  # "newest" / "first" for a suspect
    #: a fresh A/B measurement of parent against commit (kvbench regressions --confirm):
    #: the ABResult's JSON with the commits, or None when none was made; its outcome is
    #: compare's, or NOT_MEASURED_AFRESH when the fresh runs gave the series no value
    confirmation: dict | None = None

    @property
    def confirmation_label(self) -> str | None:
        """What `--confirm` found, for the tables: "confirmed" (a step the fresh A/B called the
        same way), "A/B inconclusive", "not measured afresh", or None (no fresh A/B)."""
        if not self.confirmation:
            return None
        if self.kind == "step":
            return "confirmed"
        outcome = self.confirmation.get("outcome")
        return "not measured afresh" if outcome == NOT_MEASURED_AFRESH else f"A/B {outcome}"

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
            "p_adjusted": self.p_adjusted,
            "mde_pct": round(self.mde_pct, 4),
            "within_run": self.within_run,
            "edge": self.edge,
            "confirmation": self.confirmation,
            "host_speed_scaled": self.host_speed_scaled,
            "context": [fact.to_json() for fact in self.context],
        }


@dataclass
class SeriesVerdict:
    """What the analysis of one series found; noise is None when it was not judged
    (`why_not` says why). `mde_pct`: the smallest step at the newest commit this run would
    report (the edge test's critical effect at its standard error, degrees of freedom and the
    run's FDR bar for a lone finding), None where that edge cannot be tested."""

    series: Series
    noise: noise.Noise | None
    mde_pct: float | None
    findings: list[Finding] = field(default_factory=list)
    host_speed_scaled: bool = False
    why_not: str = ""
    #: the per-device offsets (log) subtracted before judging (devices.py); {} for one device
    device_offsets: dict[str, float] = field(default_factory=dict)
    #: points judged slow processes and left out (_without_slow_stretches)
    set_aside: tuple[Excursion, ...] = ()

    def to_json(self) -> dict:
        n = self.noise
        return {
            "series": self.series.name,
            "unit": self.series.unit,
            "points": len(self.series.points),
            "judged": n is not None,
            "not_judged_because": self.why_not or None,
            "df": None if n is None else n.df,
            "heavy_tailed": None if n is None else n.heavy_tailed,
            "noise_raised_to_family": None if n is None else n.raised_to_family,
            "noise_pct": None if n is None else round(n.pct, 4),
            "noise_within_run_pct": None if n is None
            else round(100 * math.expm1(n.within), 4),
            "noise_between_runs_pct": None if n is None else round(100 * math.expm1(n.runs), 4),
            "noise_within_process_pct": None if n is None or n.within_process is None
            else round(100 * math.expm1(n.within_process), 4),
            "mde_newest_pct": None if self.mde_pct is None else round(self.mde_pct, 4),
            "findings": len(self.findings),
            "host_speed_scaled": self.host_speed_scaled,
            "device_offsets_pct": {d: round(100 * math.expm1(v), 4)
                                   for d, v in self.device_offsets.items()},
            "set_aside": [{"commit": e.commit, "last": e.last, "points": e.points,
                           "parent": e.parent, "slower_pct": round(e.slower_pct, 4)}
                          for e in self.set_aside],
        }


def twin_key(series: Series) -> tuple[str, tuple]:
    """What a µs series and its GB/s twin share: the class (benchmark without its method) and
    the params; one timing feeds both, so they are one entry of a culprit."""
    return series.benchmark.rsplit(".", 1)[0], tuple(series.params)


@dataclass(frozen=True)
class Culprit:
    """Every finding whose first moved commit is one commit: one line of the default table."""

    commit: str
    subject: str
    findings: tuple[Finding, ...]
    #: The paths that differ between its findings' parents and it (None when git cannot
    #: tell, e.g. results read outside their repository).
    changed: tuple[str, ...] | None = None

    @property
    def slower(self) -> list[Finding]:
        """One finding per twin pair that got worse (the worst of the pair)."""
        return _fold([f for f in self.findings if f.verdict == "regression"])

    @property
    def faster(self) -> list[Finding]:
        return _fold([f for f in self.findings if f.verdict == "improvement"])

    @property
    def suspect(self) -> bool:
        """Every finding of it is a suspect (one point at an end of the history)."""
        return all(f.kind == "suspect" for f in self.findings)

    @property
    def worst_pct(self) -> float:
        """The largest worsening (positive) of its series, else its smallest improvement."""
        return max(f.worse_pct for f in self.findings)

    @property
    def median_pct(self) -> float:
        """The median effect (worse positive) over its folded series."""
        return float(np.median([f.worse_pct for f in self.slower + self.faster]))

    @property
    def parent(self) -> str:
        return self.findings[0].parent

    @property
    def at_run_boundary(self) -> bool:
        """No measurement run has commits on both sides of any of its steps: the commit
        starts a new run (another lease, host or day), whose level and a code change read
        alike; a fresh A/B of parent and commit on one machine tells them apart."""
        return not any(f.within_run for f in self.findings)

    @property
    def changed_measured_code(self) -> bool | None:
        """Whether its range changed a file a measurement reads (code_scope.py); False: only
        files code_scope.UNMEASURED names changed, so the step is the machine's; None when git
        cannot tell."""
        return None if self.changed is None else bool(code_scope.measured_paths(self.changed))

    def to_json(self) -> dict:
        return {"commit": self.commit, "parent": self.parent, "subject": self.subject,
                "suspect": self.suspect, "at_run_boundary": self.at_run_boundary,
                "changed_measured_code": self.changed_measured_code,
                "slower": [f.series.name for f in self.slower],
                "faster": [f.series.name for f in self.faster],
                "worst_pct": round(self.worst_pct, 4), "median_pct": round(self.median_pct, 4),
                "findings": len(self.findings)}


def _changed(repo, findings: list[Finding]) -> tuple[str, ...] | None:
    """Every path changed between a culprit's findings' parents and its commit (the union:
    series measured at different commits have different parents); None when git fails."""
    from kvbench.history.asv.repo import changed_paths

    paths: set[str] = set()
    try:
        for parent in sorted({f.parent for f in findings}):
            paths.update(changed_paths(repo, parent, findings[0].commit))
    except ValueError:
        return None
    return tuple(sorted(paths))


def _fold(findings: list[Finding]) -> list[Finding]:
    best: dict[tuple, Finding] = {}
    for f in findings:
        key = twin_key(f.series)
        if key not in best or f.worse_pct > best[key].worse_pct:
            best[key] = f
    return sorted(best.values(), key=lambda f: -abs(f.worse_pct))


@dataclass
class Verdicts:
    """Every series' verdict for one machine, and the findings to print."""

    history: History
    since: str | None
    verdicts: list[SeriesVerdict]
    #: sidecars that exist but could not be read: [{commit, reason}] (their facts are left out)
    sidecar_problems: list[dict[str, str]] = field(default_factory=list)
    #: the noise model the series were judged with (stored, updated by this history)
    model: noise_model.NoiseModel | None = None
    #: hypotheses behind the run's FDR (interior searches and edges of the judged series)
    hypotheses: int = 0
    #: suspects a fresh A/B measurement found to be no change (kvbench regressions --confirm)
    dismissed: list[Finding] = field(default_factory=list)

    def after_since(self, commit: str) -> bool:
        """Whether `commit` lies after `since` on the first-parent line (any commit when
        there is no `since`): what the report speaks of."""
        if self.since is None:
            return True
        order = self.history.order
        return order[commit] > order[self.since]

    @property
    def findings(self) -> list[Finding]:
        """Findings after `since`, regressions first, each group worst first."""
        found = [f for v in self.verdicts for f in v.findings if self.after_since(f.commit)]
        return sorted(found, key=lambda f: (f.verdict != "regression", -abs(f.worse_pct)))

    @property
    def regressions(self) -> list[Finding]:
        """Reported regressions: steps and drifts, and suspects a fresh A/B confirmed."""
        return [f for f in self.findings if f.verdict == "regression" and f.kind != "suspect"]

    @property
    def suspects(self) -> list[Finding]:
        """Findings one point at an end of the history shows and nothing has confirmed yet."""
        return [f for f in self.findings if f.kind == "suspect"]

    def culprits(self) -> list[Culprit]:
        """The findings grouped by the commit they moved at, worst commit first (a commit
        with a regression before one with improvements only, then by its worst effect)."""
        from kvbench.history.asv.repo import repository_of, subjects

        groups: dict[str, list[Finding]] = {}
        for f in self.findings:
            groups.setdefault(f.commit, []).append(f)
        try:
            repo = repository_of(self.history.results_dir)
        except ValueError:
            repo = None
        names = {} if repo is None else subjects(repo, list(groups))
        out = [Culprit(c, names.get(c, ""), tuple(fs),
                       None if repo is None else _changed(repo, fs))
               for c, fs in groups.items()]
        return sorted(out, key=lambda c: (not c.slower, c.suspect, -c.worst_pct))

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
                "changepoints": "ruptures PELT (l2, jump=1, min_size=2) then pruning by t-test "
                                "(Bonferroni over positions), edge tests at the first and "
                                "newest commits, Benjamini-Hochberg over the run",
                "fdr_q": FDR_Q,
                "alpha_series": ALPHA_SERIES,
                "hypotheses": self.hypotheses,
                "min_df": MIN_DF,
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
                "not_judged": sum(v.noise is None for v in self.verdicts),
                "regressions": len(self.regressions),
                "improvements": sum(f.verdict == "improvement" and f.kind != "suspect"
                                    for f in self.findings),
                "suspects": len(self.suspects),
                "dismissed": len(self.dismissed),
                "skipped_results": len(h.skipped),
            },
            "culprits": [c.to_json() for c in self.culprits()],
            "findings": [f.to_json() for f in self.findings],
            "dismissed": [f.to_json() for f in self.dismissed],
            "series": [v.to_json() for v in self.verdicts],
        }


@dataclass
class _Fit:
    """One series' noise, its interior breaks and its edge tests (before the run-wide FDR)."""

    noise: noise.Noise | None
    breaks: list[changepoints.Break] = field(default_factory=list)
    edges: list[changepoints.Break] = field(default_factory=list)  # every edge tested
    why_not: str = ""  # why the series is not judged (noise is None)


def _step_differences(x: np.ndarray, runs: list[int], proposed: set[int], within_process,
                      prior: noise.Prior) -> set[int]:
    """The proposed boundaries whose difference (x[i] - x[i-1]) stands out from the
    differences of its kind: the differences the first noise estimate must not see.

    - inside one run: more than EDGE_CANDIDATE_Z difference sigmas from the centre of the
      other same-run differences, the noise estimated without any proposed boundary;
    - across a run change: more than CROSS_RUN_CANDIDATE_Z times the RMS of the other cross-run
      differences (largest first, each left out once it stands out), so that a kernel change
      recorded in a new run does not make every run look as far apart as it. An RMS, not a
      MAD: one machine name's runs are often bimodal (two hosts), and a robust scale would
      screen the minority host's shifts out and report its runs as steps.

    Only the ones that stand out: a low-penalty search proposes boundaries at the noise's own
    bumps too, and leaving all of them out would take the largest honest differences away and
    make the noise look smaller than it is. On a span too short for a reference without the
    edge differences, they join it; without any reference (too few other differences and no
    prior), every proposed same-run difference is left out."""
    d = np.diff(x)
    same = {i for i in proposed if runs[i] == runs[i - 1]}
    cross = {i: d[i - 1] for i in range(1, len(x)) if runs[i] != runs[i - 1]}
    out: set[int] = set()
    for i in sorted(proposed - same, key=lambda k: -abs(d[k - 1])):
        others = [v for k, v in cross.items() if k != i and k not in out]
        if len(others) < noise.MIN_DIFFERENCES or \
                abs(d[i - 1]) <= CROSS_RUN_CANDIDATE_Z * math.sqrt(
                    float(np.mean(np.square(others)))):
            break
        out.add(i)
    rest = noise.estimate(x, runs, exclude=proposed, within_process=within_process, prior=prior)
    if rest is None:  # a short span: the edge differences join the reference they are held to
        rest = noise.estimate(x, runs, exclude=proposed - {1, len(x) - 1},
                              within_process=within_process, prior=prior)
    if rest is None:
        return out | same
    kept = [d[i - 1] for i in range(1, len(x)) if i not in proposed and runs[i] == runs[i - 1]]
    centre = float(np.median(kept)) if kept else 0.0
    return out | {i for i in same
                  if abs(d[i - 1] - centre) > EDGE_CANDIDATE_Z * math.sqrt(2.0) * rest.total}


def _fit(x: np.ndarray, runs: list[int], within_process: float | None,
         prior: noise.Prior) -> _Fit:
    """Noise, interior breaks and edge tests of one series.

    The noise never sees a difference at a candidate step: of PELT's candidates (at the
    current noise's scale) and the two edge differences, those that stand out from the rest
    (_step_differences) are left out, and the candidates are searched again at the cleaner
    scale until they settle. A series too short to estimate its own noise (fewer than
    PRIOR_DF differences) starts from its prior alone."""
    est = noise.estimate(x, runs, within_process=within_process, prior=prior)
    if est is not None and prior.within is not None and est.differences < noise.PRIOR_DF:
        est = noise.estimate(x, runs, exclude=range(len(x)), within_process=within_process,
                             prior=prior)
    exclude: set[int] = set()
    for _ in range(CANDIDATE_PASSES):
        if est is None:
            break
        proposed = set(changepoints.candidates(x, est.total, penalty=PENALTY)) | {1, len(x) - 1}
        found = _step_differences(x, runs, proposed, within_process, prior)
        if found == exclude:
            break
        exclude = found
        est = noise.estimate(x, runs, exclude=exclude, within_process=within_process,
                             prior=prior)
    if est is None:
        return _Fit(None, why_not="too few differences without a candidate step to estimate "
                                  "its noise, and no noise model for it")
    if est.df < MIN_DF:
        return _Fit(None, why_not=f"its noise has {est.df} degrees of freedom (fewer than "
                                  f"{MIN_DF}) and no noise model for it")
    breaks, edges = _breaks_and_edges(x, runs, est)
    for _ in range(NOISE_PASSES):
        # the differences at every confirmed step (its transition) and at a significant
        # edge leave the noise too
        crossing = set(exclude)
        for b in breaks:
            first, stop = changepoints.transition(x, b, b.noise.total)
            crossing.update(range(first, stop + 1))
        crossing.update(e.index for e in edges if e.p <= ALPHA_SERIES)
        refined = noise.estimate(x, runs, exclude=crossing, within_process=within_process,
                                 prior=prior)
        if refined is None or refined == est:
            break
        est = refined  # the breaks are always judged by the noise returned with them
        breaks, edges = _breaks_and_edges(x, runs, est)
    return _Fit(est, breaks, edges)


def _breaks_and_edges(x: np.ndarray, runs: list[int], est: noise.Noise):
    """The interior breaks and the two edge tests of `x` at noise `est`."""
    breaks = changepoints.find_breaks(x, runs, est, alpha=ALPHA_SERIES, mde_sigmas=MDE_SIGMAS,
                                      penalty=PENALTY)
    edges = []
    for which in ("newest", "first"):
        breaks, edge = _edge(x, runs, est, breaks, which)
        if edge is not None:
            edges.append(edge)
    return breaks, edges


def _edge(x: np.ndarray, runs: list[int], est: noise.Noise, breaks: list, which: str):
    """(breaks, the edge test at `which`), where a break that holds only the edge's MIN_SIZE
    points is replaced by the edge when the edge fits the points better (a smaller sum of
    squares about the segment means): a step at the newest commit otherwise reads as a
    two-point level at half its size, placed one commit early."""
    edge = changepoints.edge_test(x, runs, est, breaks, which)
    if edge is not None:
        return breaks, edge
    n = len(x)
    at = n - changepoints.MIN_SIZE if which == "newest" else changepoints.MIN_SIZE
    near = [b for b in breaks if b.index == at]
    if not near:
        return breaks, None
    rest = [b for b in breaks if b is not near[0]]
    alt = changepoints.edge_test(x, runs, est, rest, which)
    if alt is None:
        return breaks, None
    edge_at = n - 1 if which == "newest" else 1
    lo = max([b.index for b in rest if b.index < at], default=0)
    hi = min([b.index for b in rest if b.index > at], default=n)
    if _sse(x[lo:hi], edge_at - lo) < _sse(x[lo:hi], at - lo):
        return rest, alt
    return breaks, None


def _sse(x: np.ndarray, split: int) -> float:
    """Sum of squares of `x` about the means of x[:split] and x[split:]."""
    return float(sum(np.sum((part - part.mean()) ** 2) for part in (x[:split], x[split:])
                     if len(part)))


def _finding(series: Series, history: History, x: np.ndarray, brk: changepoints.Break,
             p_adjusted: float, mde_log: float) -> Finding:
    from scipy import stats

    est = brk.noise  # what the step was judged against: the series' or a noisy run's own
    # a suspect names its edge commit itself: the points beside it are its segment's level
    first, stop = ((brk.index, brk.index) if brk.edge
                   else changepoints.transition(x, brk, est.total))
    commits = [p.commit for p in series.points]
    delta = brk.delta
    half = float(stats.t.ppf(0.975, est.df)) * brk.se
    worse = WORSE_SIGN[series.unit] * delta > 0
    kind = "suspect" if brk.edge else ("drift" if stop - first >= 2 else "step")
    return Finding(
        series=series,
        verdict="regression" if worse else "improvement",
        kind=kind,
        parent=commits[first - 1],
        commit=commits[first],
        settled=commits[stop],
        transition=tuple(commits[first:stop]),
        commits_in_range=history.commits_between(commits[first - 1], commits[stop]),
        before=math.exp(brk.level_before),
        after=math.exp(brk.level_after),
        effect_pct=100.0 * math.expm1(delta),
        ci95_pct=(100.0 * math.expm1(delta - half), 100.0 * math.expm1(delta + half)),
        t=brk.t, p=brk.p,
        points_before=brk.n_before,
        points_after=brk.n_after,
        noise=est,
        mde_pct=100.0 * math.expm1(mde_log),
        within_run=brk.within_run,
        p_adjusted=p_adjusted,
        edge=brk.edge,
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
    #: its successive differences without those at candidate steps (what `own` saw)
    own_differences: np.ndarray = field(default_factory=lambda: np.empty(0))
    scaled: host_speed.Scaled | None = None
    device_offsets: dict[str, float] = field(default_factory=dict)
    #: the series with every point, where `series` is judged without some (`set_aside`)
    whole: Series | None = None
    set_aside: tuple[Excursion, ...] = ()  # points not judged (slow processes)

    @property
    def family(self) -> str:
        return self.series.benchmark

    @property
    def full(self) -> Series:
        """The series with every measured point: what a verdict and its plot show."""
        return self.whole or self.series


def _slow_stretch(s: np.ndarray, runs: list[int], i: int, est: noise.Noise) -> int:
    """The length of the shortest stretch of slow points starting at interior index i (0:
    none). `s` is worse-positive; a stretch s[i..j] qualifies when the points either side of
    it (i-1, j+1) agree (within EDGE_CANDIDATE_Z difference sigmas: one level on both
    sides), each of its points is EDGE_CANDIDATE_Z sigmas and their mean ISOLATED_SLOW_Z
    sigmas slower than the slower of those two.

    The sigma is the noise those points share: `est.within` where the stretch and both its
    neighbours were measured in one run (they share its run effect, which then cancels),
    `est.total` where a run boundary falls among them. Against the total, a busy host
    inside one lease of a machine whose leases differ by more than its commits (run noise
    several times the within-run noise) would read as a regression and its undoing."""
    for k in range(1, SLOW_STRETCH_MAX + 1):
        j = i + k - 1
        if j + 1 >= len(s):
            return 0
        sigma = est.within if len(set(runs[i - 1:j + 2])) == 1 else est.total
        around = max(s[i - 1], s[j + 1])
        if abs(s[j + 1] - s[i - 1]) > EDGE_CANDIDATE_Z * math.sqrt(2.0) * sigma:
            continue
        stretch = s[i:j + 1]
        if (min(stretch) - around > EDGE_CANDIDATE_Z * sigma
                and float(np.mean(stretch)) - around > ISOLATED_SLOW_Z * sigma):
            return k
    return 0


def _without_slow_stretches(p: _Prepared, est: noise.Noise) -> _Prepared | None:
    """`p` without its stretches of 1 to SLOW_STRETCH_MAX interior points slower than the two
    points around them, where those two agree (within EDGE_CANDIDATE_Z difference sigmas: one
    level on both sides): one point ISOLATED_SLOW_Z sigmas slower; several, each
    EDGE_CANDIDATE_Z and their mean ISOLATED_SLOW_Z sigmas slower (_slow_stretch). None where
    there is none or too few points would be left.

    Slower only: a GPU kernel's process can be slow (a busy host, a clock that had not come
    up) but not faster than its code, so a fast point is a level and a lone slow one is not.
    The first and newest points have one neighbour and stay: there one point is a suspect,
    for --confirm to settle; so does a slow stretch that reaches the newest point."""
    if len(p.x) < 3:
        return None
    s = WORSE_SIGN[p.series.unit] * p.x
    stretches: list[tuple[int, int]] = []
    i = 1
    while i < len(s) - 1:
        k = _slow_stretch(s, p.runs, i, est)
        if k:
            stretches.append((i, k))
        i += max(k, 1)
    drop = {i + m for i, k in stretches for m in range(k)}
    if not drop or len(s) - len(drop) < MIN_POINTS:
        return None
    keep = [i for i in range(len(s)) if i not in drop]
    points = p.series.points
    excursions = tuple(
        Excursion(points[i].commit, points[i - 1].commit,
                  100.0 * math.expm1(float(np.mean(s[i:i + k])) - (s[i - 1] + s[i + k]) / 2.0),
                  last=points[i + k - 1].commit, points=k)
        for i, k in stretches)
    return dataclasses.replace(
        p, series=dataclasses.replace(p.series, points=[points[i] for i in keep]),
        x=p.x[keep], runs=[p.runs[i] for i in keep], whole=p.series, set_aside=excursions)


def _prepare(series: Series, history: History, sidecars: SidecarCache) -> _Prepared | str:
    """The series ready to judge, or why it cannot be judged at all."""
    if series.unit not in WORSE_SIGN:
        raise ValueError(f"{series.name}: unit {series.unit!r} has no direction; "
                         f"known units: {', '.join(WORSE_SIGN)}")
    if len(series.points) < MIN_POINTS:
        return f"fewer than {MIN_POINTS} measured commits"
    scaled = host_speed.at_typical_speed(series, sidecars)
    if scaled is not None:
        series = scaled.series
    values = [p.value for p in series.points]
    if min(values) <= 0:
        return "a value that is not positive"
    x = np.log(values)
    runs = [history.runs.get(p.commit, -1 - i) for i, p in enumerate(series.points)]
    adjusted = devices.adjust(x, runs, _devices(series, sidecars))
    if adjusted is not None:
        x, runs = adjusted.x, adjusted.runs
    within_process = noise.within_process_sigma(
        values, [p.ci99_low for p in series.points], [p.ci99_high for p in series.points])
    own, own_differences = _own_noise(x, runs, within_process)
    return _Prepared(series, x, runs, within_process, own, own_differences, scaled,
                     {} if adjusted is None else adjusted.offsets)


def _devices(series: Series, sidecars: SidecarCache) -> list[str | None]:
    """The device id each point's sidecar names (devices.py); all None, reading one sidecar
    only, when the newest point's names none (a history recorded before devices were)."""
    key = case_key(series.benchmark, series.params)

    def device(commit: str) -> str | None:
        found = sidecars.get(commit)
        return None if found is None else found.device_of(key)

    if not series.points or device(series.points[-1].commit) is None:
        return [None] * len(series.points)
    return [device(p.commit) for p in series.points]


def _own_noise(x: np.ndarray, runs: list[int], within_process: float | None):
    """The series' noise from its own history alone (no prior), without the differences at
    candidate steps: what the machine's noise model learns from it; and those differences
    (what a span without a model pools, span_prior.py)."""
    est = noise.estimate(x, runs, within_process=within_process)
    if est is None:
        return None, np.empty(0)
    proposed = set(changepoints.candidates(x, est.total, penalty=PENALTY)) | {1, len(x) - 1}
    screened = _step_differences(x, runs, proposed, within_process, noise.Prior(None, None))
    kept = np.array([x[i] - x[i - 1] for i in range(1, len(x)) if i not in screened])
    return noise.estimate(x, runs, exclude=screened, within_process=within_process) or est, kept


def span_priors(ready: list[_Prepared],
                model: noise_model.NoiseModel) -> dict[str, span_prior.SpanPrior]:
    """Per family, the prior pooled from this run's series (span_prior.py) where `model`
    gives none of them a within prior: a span that has no noise reference of its own."""
    families: dict[str, list[span_prior.Member]] = {}
    for p in ready:
        if model.prior(p.family, p.series.name, p.within_process).within is None:
            families.setdefault(p.family, []).append(
                span_prior.Member(p.own_differences, np.diff(p.x), p.within_process))
    learned = {family: span_prior.learn(members) for family, members in families.items()}
    return {family: prior for family, prior in learned.items() if prior is not None}


def _prior(p: _Prepared, model: noise_model.NoiseModel,
           pooled: dict[str, span_prior.SpanPrior]) -> noise.Prior:
    """The series' prior: the model's, else a floor from its family's series in this span."""
    prior = model.prior(p.family, p.series.name, p.within_process)
    span = pooled.get(p.family)
    within = None if span is None or prior.within is not None else span.within(p.within_process)
    if within is None:
        return prior
    return dataclasses.replace(prior, span=within, span_df=span.df)


def learned_model(history: History, prepared: list[_Prepared]) -> noise_model.NoiseModel:
    """The noise model of this history's long series (noise_model.learn)."""
    return noise_model.learn(
        history.machine,
        (noise_model.Learned(p.series.name, p.family, p.own) for p in prepared
         if p.own is not None),
        commits=len(history.commits), head=history.head)


def _critical_log(est: noise.Noise, se: float, alpha: float, within_run: bool) -> float:
    """The smallest |effect| (log) the test reports at this standard error and level: the
    larger of the t-test's critical effect and the MDE floor."""
    from scipy import stats

    t_crit = float(stats.t.isf(alpha / 2.0, est.df))
    return max(t_crit * se, changepoints.min_effect(est, within_run, MDE_SIGMAS))


def _reportable(brk: changepoints.Break, q: float, est: noise.Noise) -> bool:
    """A tested step the run reports: BH-adjusted p within FDR_Q, its own position-corrected
    p within ALPHA_SERIES, and an effect at least the MDE floor."""
    return (q <= FDR_Q and brk.p_series <= ALPHA_SERIES
            and abs(brk.delta) >= changepoints.min_effect(est, brk.within_run, MDE_SIGMAS))


def benjamini_hochberg(p_values: list[float], hypotheses: int, q: float) -> list[float]:
    """BH-adjusted p-values of `p_values` among `hypotheses` tests in all (the others count
    as p = 1: they were tested and found nothing); scipy.stats.false_discovery_control."""
    from scipy import stats

    if not p_values:
        return []
    padded = list(p_values) + [1.0] * max(0, hypotheses - len(p_values))
    return [float(v) for v in stats.false_discovery_control(padded, method="bh")[:len(p_values)]]


def analyze(history: History, *, since: str | None = None,
            model: noise_model.NoiseModel | None = None) -> Verdicts:
    """Judge every series of `history` whose unit has a direction.

    `since` (a full hash on the history's first-parent line) limits the findings reported to
    steps whose first moved commit comes after it; the noise still uses the whole history.
    `model`: the machine's stored noise model (noise_model.py), the noise reference of
    series too short to estimate their own; this history's own long series update it."""
    if since is not None and since not in set(history.first_parent):
        raise ValueError(f"--since {since[:12]} is not on the first-parent line of "
                         f"{history.head[:12]}")
    judged = [s for s in history.series if s.unit in WORSE_SIGN]
    sidecars = SidecarCache(history.results_dir, history.machine)
    prepared = [(s, _prepare(s, history, sidecars)) for s in judged]
    ready = [p for _, p in prepared if isinstance(p, _Prepared)]
    learned = learned_model(history, ready)
    used = learned if model is None else model.updated_by(learned)
    pooled = span_priors(ready, used)
    fits: list[tuple[_Prepared, _Fit]] = []
    verdicts: list[SeriesVerdict] = []
    for i, (s, p) in enumerate(prepared):
        progress.report(f"judging series {i + 1}/{len(prepared)}")
        if not isinstance(p, _Prepared):
            verdicts.append(SeriesVerdict(s, None, None, why_not=p))
            continue
        prior = _prior(p, used, pooled)
        fit = _fit(p.x, p.runs, p.within_process, prior)
        reduced = None if fit.noise is None else _without_slow_stretches(p, fit.noise)
        if reduced is not None:
            refit = _fit(reduced.x, reduced.runs, reduced.within_process, prior)
            if refit.noise is not None:
                p, fit = reduced, refit
        if fit.noise is None:
            verdicts.append(SeriesVerdict(p.series, None, None, why_not=fit.why_not,
                                          host_speed_scaled=p.scaled is not None))
            continue
        fits.append((p, fit))
    # one FDR over every hypothesis of the run: an interior search and two edges per series
    hypotheses = TESTS_PER_SERIES * len(fits) + sum(max(0, len(f.breaks) - 1) for _, f in fits)
    tested = [(i, b) for i, (_, f) in enumerate(fits) for b in f.breaks + f.edges]
    adjusted = benjamini_hochberg([b.p_series for _, b in tested], hypotheses, FDR_Q)
    # the bar for a step that is the run's only one: BH's first rank, and the series' own cap
    alpha_alone = min(FDR_Q / max(hypotheses, 1), ALPHA_SERIES)
    kept: dict[int, list[Finding]] = {}
    for (i, brk), q in zip(tested, adjusted):
        p, fit = fits[i]
        floor = _critical_log(brk.noise, brk.se, alpha_alone / brk.positions, brk.within_run)
        if _reportable(brk, q, brk.noise):
            finding = _finding(p.series, history, p.x, brk, q, floor)
            kept.setdefault(i, []).append(dataclasses.replace(finding, series=p.full))
    for i, (p, fit) in enumerate(fits):
        newest = next((e for e in fit.edges if e.edge == "newest"), None)
        mde_newest = None if newest is None else 100.0 * math.expm1(
            _critical_log(newest.noise, newest.se, alpha_alone, newest.within_run))
        findings = kept.get(i, [])
        if p.scaled is not None:
            findings = [dataclasses.replace(f, host_speed_scaled=True,
                                            context=(p.scaled.fact(f.parent, f.settled),))
                        for f in findings]
        verdicts.append(SeriesVerdict(p.full, fit.noise, mde_newest, findings,
                                      p.scaled is not None, device_offsets=p.device_offsets,
                                      set_aside=p.set_aside))
    order = {s.name: k for k, s in enumerate(judged)}
    verdicts.sort(key=lambda v: order.get(v.series.name, len(order)))
    progress.report("reading the sidecars of the findings' commits")
    for verdict in verdicts:
        verdict.findings = [with_context(f, sidecars) for f in verdict.findings]
    return Verdicts(history=history, since=since, verdicts=verdicts,
                    sidecar_problems=sidecars.problems, model=used, hypotheses=hypotheses)


def with_context(finding: Finding, sidecars: SidecarCache) -> Finding:
    """The finding with the sidecar facts of its two sides (parent, settled) attached."""
    s = finding.series
    facts = sidecars.facts(finding.parent, finding.settled, s.benchmark, s.params)
    return dataclasses.replace(finding, context=finding.context + tuple(facts)) if facts \
        else finding
