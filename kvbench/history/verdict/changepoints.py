"""Where a series changes level: PELT candidates over the whole history, kept only if significant.

Method (docs/verdicts.md says why this one):
1. Candidates: ruptures' PELT (Killick et al. 2012) with the least-squares cost on the series'
   log values divided by its noise, `jump=1` (every commit is a possible boundary) and
   `min_size=2` (a new level must hold for two measured commits: one point cannot be told from
   a 2x outlier of a host-side series). PELT searches every segmentation of the whole
   history, so a step that lands across two commits or a drift over many is seen as a level
   change, not only as a large neighbour difference. Its penalty is deliberately low: PELT
   proposes, the test below decides.
2. Pruning, as Otava/hunter does after E-divisive: each boundary is tested on the segments on
   either side of it (up to WINDOW points each) against the noise of the whole history
   (noise.py, estimated without the differences at any candidate boundary), not the few points
   of a segment; where the window holds points of a run measured noisier than the rest of the
   history, against that run's own noise (Noise.for_runs). The two levels are estimated by
   generalized least squares with a random effect per measurement run (covariance
   sigma_within^2 I + sigma_runs^2 [same run]): where a run has points on both sides its shift
   cancels and the step is judged against the process-to-process noise; a step that coincides
   with a change of run is judged against the run-to-run shift too. Long sides are winsorized
   at WINSOR sigmas. A boundary must also pass the two-sample t-test of its sides against their
   own spread (_local_p, Otava's test): a series that wanders more than its commit-to-commit
   noise is not a step. A series with measured heavy tails (noise.heavy_tailed: host-side
   series whose process sometimes runs 2x slow) has a side of at most SHORT_SIDE points tested
   at its weakest value (_observations): there a pair of outliers is the usual false alarm;
   every other series is tested on its side means. The position is chosen by the search, so a
   boundary's p-value is corrected for it (Bonferroni over the `positions` the search could
   have chosen). The boundary whose corrected p-value is largest and above alpha, or whose
   effect is below min_effect() (the MDE), is removed and its neighbours re-tested, until every
   boundary passes.
3. The edges. A new level must hold for MIN_SIZE commits inside the history, so a step at
   the newest measured commit (or the first) is one point against a segment: `edge_test`
   tests exactly that point, a position fixed in advance (no correction for a search). One
   point cannot be told from an outlier, so the engine reports it as a suspect, which a
   fresh A/B measurement confirms or dismisses (`kvbench regressions --confirm`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kvbench.history.verdict.noise import Noise, median

#: Points on each side of a boundary that its test reads (Otava reads 50 around a point).
WINDOW = 30
#: A new level must hold for this many measured commits.
MIN_SIZE = 2
#: A long side's points are clipped this many total sigmas from its median before the test.
WINSOR = 3.0
#: A side of a boundary with this many points or fewer is tested like a single point.
SHORT_SIDE = 3
#: The sides' own two-sample test (_local_p) applies when both hold at least this many points:
#: with fewer, their own spread has too few degrees of freedom to say anything, and the
#: history's noise is the only reference.
LOCAL_MIN_SIDE = 4


@dataclass(frozen=True)
class Break:
    """A level change between x[index-1] and x[index] (log scale)."""

    index: int
    level_before: float  # median of the segment before (log)
    level_after: float  # median of the segment after (log)
    n_before: int
    n_after: int
    se: float  # standard error of level_after - level_before (log)
    t: float
    p: float
    within_run: bool  # a measurement run has points on both sides: its shift cancels
    #: the noise it was judged against: the series', or a noisy run's own (Noise.for_runs)
    noise: Noise
    positions: int = 1  # boundaries the search chose among (the p-value's correction)
    edge: str = ""  # "newest" / "first": a one-point side at an end of the history

    @property
    def delta(self) -> float:
        return self.level_after - self.level_before

    @property
    def p_series(self) -> float:
        """p corrected for the choice of position within the series (Bonferroni)."""
        return min(1.0, self.p * self.positions)


def _observations(values: np.ndarray, toward: float, noise: Noise):
    """(levels, test levels, short) of a side: what its points contribute to the test.

    A long side: its points, winsorized at WINSOR total sigmas from its median. A side of at
    most SHORT_SIDE points is *tested* at its weakest value (the point nearest the other side
    for n <= 2, its median for n == 3) on every point, and counts as one point (`short`: its
    points share one extra within-run noise term): a pair of 2x outliers of a heavy-tailed host
    series has a mean far from the level but its weaker point seldom is, while a real step
    moves every point. Each point keeps its run, so a run that spans the step still cancels.
    Only a heavy-tailed series (noise.heavy_tailed) is tested so; the others on their points."""
    if len(values) <= SHORT_SIDE and noise.heavy_tailed:
        if len(values) <= 2:
            test_level = float(values[np.argmin(np.abs(values - toward))])
        else:
            test_level = median(values)
        return list(values), [test_level] * len(values), True
    centre, bound = median(values), WINSOR * noise.total
    clipped = list(np.clip(values, centre - bound, centre + bound))
    return clipped, clipped, False


def _gls(y: np.ndarray, side_b: np.ndarray, runs: list, short: np.ndarray, noise: Noise):
    """Generalized least squares of the two-level model with random run effects.

    Observations y (columns: one response each) are level_a + (level_b - level_a) * side_b +
    run effect + noise, with covariance sigma_within^2 (I + [both in one short side]) +
    sigma_runs^2 [same run]. Returns (level_a per column, delta per column, variance of
    delta). Where a run has points on both sides its effect cancels in the contrast: a step
    inside a run is judged against the process-to-process noise, a step at a change of run
    against the run-to-run shift too."""
    run_ids = np.asarray([hash(r) for r in runs])
    same_run = (run_ids[:, None] == run_ids[None, :]).astype(float)
    same_short = ((short[:, None] == short[None, :]) & (short[:, None] > 0)).astype(float)
    cov = noise.within ** 2 * (np.eye(len(run_ids)) + same_short) + noise.runs ** 2 * same_run
    design = np.column_stack([np.ones(len(run_ids)), side_b])
    solved = np.linalg.solve(cov, np.column_stack([design, y]))
    information = design.T @ solved[:, :2]
    beta = np.linalg.solve(information, design.T @ solved[:, 2:])
    variance = float(np.linalg.inv(information)[1, 1])
    return beta[0], beta[1], variance


def test_break(x: np.ndarray, runs: list, start: int, index: int, stop: int, noise: Noise,
               df: int, *, positions: int = 1, edge: str = "") -> Break:
    """The Break at `index` between segment x[start:index] and x[index:stop]."""
    from scipy import stats

    lo, hi = max(start, index - WINDOW), min(stop, index + WINDOW)
    local = noise.for_runs(runs[lo:hi])
    if local is not noise:  # a noisy run's points are in the window: its own noise and df
        noise, df = local, local.df
    before, after = x[lo:index], x[index:hi]
    a_level, a_test, a_short = _observations(before, median(after), noise)
    b_level, b_test, b_short = _observations(after, median(before), noise)
    y = np.column_stack([a_level + b_level, a_test + b_test])
    side_b = np.array([0.0] * len(a_level) + [1.0] * len(b_level))
    short = np.array([1 if a_short else 0] * len(a_level) + [2 if b_short else 0] * len(b_level))
    level_a, delta, variance = _gls(y, side_b, runs[lo:hi], short, noise)
    se = math.sqrt(variance)
    t = float(delta[1]) / se
    p = max(float(2.0 * stats.t.sf(abs(t), df=df)), _local_p(before, after))
    return Break(index, float(level_a[0]), float(level_a[0] + delta[0]), index - lo, hi - index,
                 se, t, p, within_run=bool(set(runs[lo:index]) & set(runs[index:hi])),
                 positions=positions, edge=edge, noise=noise)


def _local_p(before: np.ndarray, after: np.ndarray) -> float:
    """Two-sample t-test of the side means against the sides' own pooled spread (Otava's
    test), n_a + n_b - 2 degrees of freedom; 0 where a side is shorter than LOCAL_MIN_SIDE or
    the sides hold no spread to pool.

    The history's noise (noise.py) is commit-to-commit; a series that wanders (a host whose
    speed drifts over a few commits) moves more than that around a level, and a boundary is
    reported only when its own two sides also say it is a step."""
    from scipy import stats

    n_a, n_b = len(before), len(after)
    dof = n_a + n_b - 2
    if min(n_a, n_b) < LOCAL_MIN_SIDE:
        return 0.0
    ss = float(np.sum((before - before.mean()) ** 2) + np.sum((after - after.mean()) ** 2))
    if ss <= 0:
        return 0.0
    se = math.sqrt(ss / dof * (1.0 / n_a + 1.0 / n_b))
    return float(2.0 * stats.t.sf(abs(float(after.mean() - before.mean())) / se, df=dof))


def _l2_cost():
    """ruptures' least-squares cost (CostL2) from prefix sums: O(1) per segment, not a np.var."""
    from ruptures.base import BaseCost

    class CumulativeL2(BaseCost):
        model = "l2"
        min_size = MIN_SIZE

        def fit(self, signal):
            y = np.asarray(signal, dtype=float).reshape(len(signal), -1)
            self.signal = y
            self.sums = np.vstack([np.zeros(y.shape[1]), np.cumsum(y, axis=0)])
            self.squares = np.concatenate([[0.0], np.cumsum((y ** 2).sum(axis=1))])
            return self

        def error(self, start, end):
            n = end - start
            s = self.sums[end] - self.sums[start]
            return float(self.squares[end] - self.squares[start] - (s @ s) / n)

    return CumulativeL2()


def candidates(x: np.ndarray, scale: float, *, penalty: float) -> list[int]:
    """PELT boundaries of the standardized series (indices where a new segment starts)."""
    import ruptures

    if len(x) < 2 * MIN_SIZE:
        return []
    y = ((x - median(x)) / scale).reshape(-1, 1)
    pelt = ruptures.Pelt(custom_cost=_l2_cost(), min_size=MIN_SIZE, jump=1)
    ends = pelt.fit(y).predict(pen=penalty)
    return [int(e) for e in ends[:-1]]


def min_effect(noise: Noise, within_run: bool, mde_sigmas: float) -> float:
    """The smallest reportable |effect| (log): mde_sigmas x the noise a step is seen against,
    the within-run noise when a run has points on both sides, else the total."""
    return mde_sigmas * (noise.within if within_run else noise.total)


def positions(n: int) -> int:
    """Boundaries the search can place in n points (each side at least MIN_SIZE)."""
    return max(1, n - 2 * MIN_SIZE + 1)


def find_breaks(x, runs, noise: Noise, *, alpha: float, mde_sigmas: float,
                penalty: float) -> list[Break]:
    """Significant level changes of log series `x` at least min_effect() large: each
    boundary's p corrected for its position (Break.p_series) at most `alpha`.

    `runs[i]` is point i's measurement run (results.run_ids)."""
    x = np.asarray(x, dtype=float)
    runs = list(runs)
    df = noise.df
    searched = positions(len(x))
    bounds = candidates(x, noise.total, penalty=penalty)
    while bounds:
        edges = [0, *bounds, len(x)]
        tested = [test_break(x, runs, edges[i], edges[i + 1], edges[i + 2], noise, df,
                             positions=searched)
                  for i in range(len(bounds))]
        weak = [b for b in tested
                if b.p_series > alpha
                or abs(b.delta) < min_effect(b.noise, b.within_run, mde_sigmas)]
        if not weak:
            return tested
        weakest = max(weak, key=lambda b: (b.p, -abs(b.delta)))
        bounds.remove(weakest.index)
    return []


def edge_test(x, runs, noise: Noise, breaks: list[Break], which: str) -> Break | None:
    """The newest (or first) point of `x` tested against the segment next to it (bounded by
    the nearest confirmed break): a Break with a one-point side and edge=`which`, or None
    when that segment has fewer than MIN_SIZE points. Not corrected for position: the edge
    is fixed before looking."""
    x = np.asarray(x, dtype=float)
    n = len(x)
    if which == "newest":
        start = max([b.index for b in breaks], default=0)
        if n - 1 - start < MIN_SIZE:
            return None
        return test_break(x, list(runs), start, n - 1, n, noise, noise.df, edge=which)
    if which == "first":
        stop = min([b.index for b in breaks], default=n)
        if stop - 1 < MIN_SIZE:
            return None
        return test_break(x, list(runs), 0, 1, stop, noise, noise.df, edge=which)
    raise ValueError(f"edge must be 'newest' or 'first', got {which!r}")


def transition(x, brk: Break, sigma: float, *, z: float = 3.0) -> tuple[int, int]:
    """The measured points that lie between the two levels of `brk`: (first, stop) indices.

    A step that lands over two commits leaves a point half-way; a drift leaves several. A point
    next to the boundary is in the transition when it sits more than z sigma from its own
    segment's level toward the other level. Returns (index, index) when there is none."""
    x = np.asarray(x, dtype=float)
    sign = 1.0 if brk.delta > 0 else -1.0
    first = brk.index
    while first - 1 > brk.index - brk.n_before and \
            sign * (x[first - 1] - brk.level_before) > z * sigma:
        first -= 1
    stop = brk.index
    while stop < brk.index + brk.n_after - 1 and \
            sign * (brk.level_after - x[stop]) > z * sigma:
        stop += 1
    return first, stop
