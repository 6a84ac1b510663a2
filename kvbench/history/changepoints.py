"""Where a series changes level: PELT candidates over the whole history, kept only if significant.

Method (docs/history.md says why this one):
1. Candidates: ruptures' PELT (Killick et al. 2012) with the least-squares cost on the series'
   log values divided by its noise, `jump=1` (every commit is a possible boundary) and
   `min_size=2` (a new level must hold for two measured commits: one point cannot be told from
   a 2x outlier of a host-side series). PELT searches every segmentation of the whole
   history, so a step that lands across two commits or a drift over many is seen as a level
   change, not only as a large neighbour difference. Its penalty is deliberately low: PELT
   proposes, the test below decides.
2. Pruning, as Otava/hunter does after E-divisive: each boundary is tested on the segments on
   either side of it (up to WINDOW points each) with a two-sample statistic whose noise comes
   from the whole history (noise.py), not from the few points of a segment:
       t = (median after - median before) / se,
       se^2 = sigma_within^2 (c^2/n_a + c^2/n_b) + sigma_runs^2 sum_r (f_b(r) - f_a(r))^2
   with c = 1.2533 (a median's efficiency) and f_a(r) the share of the before
   segment's points measured in run r: a boundary inside one run is judged against the
   process-to-process noise only, a boundary that coincides with a change of run also against
   the run-to-run shift. A side of at most SHORT_SIDE points is tested as one point
   (_test_level): heavy tails make short segments the usual false alarm. The boundary whose
   p-value (Student t, the noise estimate's degrees of freedom) is largest and above alpha,
   or whose effect is below the minimum effect, is removed and its neighbours re-tested,
   until every boundary passes.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from kvbench.history.noise import Noise

#: Points on each side of a boundary that its test reads (Otava reads 50 around a point).
WINDOW = 30
#: A new level must hold for this many measured commits.
MIN_SIZE = 2
#: A median's standard error against a mean's (normal data): 1.2533 sigma / sqrt(n).
MEDIAN_SE = 1.2533
#: A side of a boundary with this many points or fewer is tested like a single point.
SHORT_SIDE = 3


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

    @property
    def delta(self) -> float:
        return self.level_after - self.level_before


def _se_factor(n: int) -> float:
    """Variance of a side's test level in units of sigma_within^2 (see _test_level)."""
    return 1.0 if n <= SHORT_SIDE else MEDIAN_SE ** 2 / n


def _test_level(values: np.ndarray, toward: float) -> float:
    """The level a side is tested at: its median, or for a short side its weakest point.

    A side of SHORT_SIDE points or fewer is tested as if it were one point, at the point
    nearest the other side (n <= 2) or its median (n == 3): a pair of 2x outliers of a
    heavy-tailed host series has a mean far from the level but its weaker point seldom is,
    while a real step moves every point."""
    if len(values) <= 2:
        return float(values[np.argmin(np.abs(values - toward))])
    return float(np.median(values))


def run_mismatch(runs_before, runs_after) -> float:
    """sum over runs r of (share of the after segment in r - share of the before one)^2."""
    before, after = Counter(runs_before), Counter(runs_after)
    return sum((after[r] / len(runs_after) - before[r] / len(runs_before)) ** 2
               for r in set(before) | set(after))


def standard_error(noise: Noise, runs_before, runs_after) -> float:
    """Standard error of (median after - median before) for segments measured in these runs."""
    var = noise.within ** 2 * (_se_factor(len(runs_before)) + _se_factor(len(runs_after))) \
        + noise.runs ** 2 * run_mismatch(runs_before, runs_after)
    return math.sqrt(var)


def test_break(x: np.ndarray, runs: list, start: int, index: int, stop: int, noise: Noise,
               df: int) -> Break:
    """The Break at `index` between segment x[start:index] and x[index:stop]."""
    from scipy import stats

    lo, hi = max(start, index - WINDOW), min(stop, index + WINDOW)
    before, after = x[lo:index], x[index:hi]
    level_before, level_after = float(np.median(before)), float(np.median(after))
    se = standard_error(noise, runs[lo:index], runs[index:hi])
    t = (_test_level(after, level_before) - _test_level(before, level_after)) / se
    p = float(2.0 * stats.t.sf(abs(t), df=df))
    return Break(index, level_before, level_after, index - lo, hi - index, se, t, p)


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
    y = ((x - np.median(x)) / scale).reshape(-1, 1)
    pelt = ruptures.Pelt(custom_cost=_l2_cost(), min_size=MIN_SIZE, jump=1)
    ends = pelt.fit(y).predict(pen=penalty)
    return [int(e) for e in ends[:-1]]


def find_breaks(x, runs, noise: Noise, *, alpha: float, min_effect: float,
                penalty: float) -> list[Break]:
    """Significant level changes of log series `x` whose |effect| >= min_effect (log).

    `runs[i]` is point i's measurement run (results.run_ids)."""
    x = np.asarray(x, dtype=float)
    runs = list(runs)
    df = noise.df
    bounds = candidates(x, noise.total, penalty=penalty)
    while bounds:
        edges = [0, *bounds, len(x)]
        tested = [test_break(x, runs, edges[i], edges[i + 1], edges[i + 2], noise, df)
                  for i in range(len(bounds))]
        weak = [b for b in tested if b.p > alpha or abs(b.delta) < min_effect]
        if not weak:
            return tested
        weakest = max(weak, key=lambda b: (b.p, -abs(b.delta)))
        bounds.remove(weakest.index)
    return []


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
