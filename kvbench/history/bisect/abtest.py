"""The A/B decision of `kvbench bisect`: did B change against A, judged on process-level runs.

Unit of evidence: one independent process run, reduced to the median of its samples. Samples
of one process are correlated (same pool, same clocks, same allocator state) and the shifts
between processes are larger than the spread within one, so a test on samples is
overconfident; a test on run medians is not (docs/bisect.md).

The test is Pinpoint's (Chromium's bisection service): p = min(Mann-Whitney U, two-sample
Kolmogorov-Smirnov), both two-sided, both from scipy.stats (exact at these sample sizes).
Mann-Whitney sees a shift of the centre, Kolmogorov-Smirnov also a change of shape (a bimodal
side); the minimum makes the test sensitive to either at a small cost in false positives,
measured in tests/test_abtest.py. Three outcomes (four with the improvement, which is a
difference in the good direction):

* different (regression or improvement): p <= ALPHA and the effect interval excludes 0;
  the direction of the series says which of the two it is (latency up, GB/s down = worse).
* no change: needs evidence, not just a high p: at least MIN_ROUNDS runs a side, p > P_SAME
  AND the whole effect interval inside (-MDE, +MDE), the minimum detectable effect. A few
  noisy runs give a wide interval and stay inconclusive.
* inconclusive: anything else; `run_sequential` then adds rounds up to a cap.

With n runs a side, min p cannot go below 2 / C(2n, n): 5 runs a side is the fewest that can
reach p <= 0.01 (0.0079, complete separation), so MIN_ROUNDS is 5.

The effect is the relative change of the median run, B over A (+0.04: B's value 4% higher),
with a percentile-bootstrap interval (scipy.stats.bootstrap). The MDE defaults to
NOISE_MULTIPLE x the between-process noise (pooled standard deviation of the run medians,
each side relative to its own median), at least MDE_FLOOR; a caller that knows the series' noise
from its history passes its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

#: p <= ALPHA: the two sides differ (Pinpoint's DIFFERENT threshold).
ALPHA = 0.01
#: "no change" needs p above this (and the effect interval inside the MDE).
P_SAME = 0.10
#: Coverage of the effect interval.
CONFIDENCE = 0.95
#: Default MDE: this many times the between-process noise ...
NOISE_MULTIPLE = 3.0
#: ... and never below this relative effect (a GPU decode series repeats within ~0.5%).
MDE_FLOOR = 0.005
#: Fewest runs a side at which min(MWU, KS) can reach p <= ALPHA.
MIN_ROUNDS = 5
#: Bootstrap resamples of the effect interval (fixed seed: one input, one answer).
BOOTSTRAP_RESAMPLES = 2000

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no change"
INCONCLUSIVE = "inconclusive"
OUTCOMES = (REGRESSION, IMPROVEMENT, NO_CHANGE, INCONCLUSIVE)


@dataclass(frozen=True)
class ABResult:
    """One A/B verdict with its evidence (values are the per-run medians, in series units)."""

    outcome: str
    reason: str
    before: tuple[float, ...]
    after: tuple[float, ...]
    higher_is_better: bool
    effect: float  # relative change of the median run, after over before (+0.04 = 4% higher)
    ci_low: float
    ci_high: float
    p_mannwhitney: float
    p_ks: float
    p: float
    noise: float  # between-process noise, relative (between_process_noise)
    mde: float  # relative
    rounds: int = 0  # A/B rounds run (set by run_sequential)
    failed_runs: int = 0  # runs that gave no value (set by run_sequential)
    extra: dict = field(default_factory=dict)

    @property
    def worse(self) -> bool:
        return self.outcome == REGRESSION

    def to_json(self) -> dict:
        out = asdict(self)
        out["before"] = list(self.before)
        out["after"] = list(self.after)
        out["median_before"] = median(self.before)
        out["median_after"] = median(self.after)
        return out


def median(values: Sequence[float]) -> float:
    import numpy as np

    return float(np.median(np.asarray(values, dtype=float)))


def p_values(before: Sequence[float], after: Sequence[float]) -> tuple[float, float, float]:
    """(Mann-Whitney U p, Kolmogorov-Smirnov p, their minimum), all two-sided."""
    import warnings

    from scipy import stats

    p_mw = float(stats.mannwhitneyu(before, after, alternative="two-sided").pvalue)
    with warnings.catch_warnings():  # ties: scipy falls back to the asymptotic p and says so
        warnings.simplefilter("ignore", RuntimeWarning)
        p_ks = float(stats.ks_2samp(before, after, alternative="two-sided").pvalue)
    return p_mw, p_ks, min(p_mw, p_ks)


def relative_effect(before: Sequence[float], after: Sequence[float]) -> float:
    """median(after) / median(before) - 1."""
    return median(after) / median(before) - 1.0


def effect_interval(before: Sequence[float], after: Sequence[float],
                    confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile-bootstrap interval of relative_effect (runs resampled within each side)."""
    import numpy as np
    from scipy import stats

    a = np.asarray(before, dtype=float)
    b = np.asarray(after, dtype=float)

    def stat(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis) - 1.0

    res = stats.bootstrap((a, b), stat, paired=False, vectorized=True, method="percentile",
                          confidence_level=confidence, n_resamples=BOOTSTRAP_RESAMPLES,
                          random_state=np.random.default_rng(0))
    low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
    point = relative_effect(a, b)
    # A side whose runs are all equal has a degenerate bootstrap: the interval is the point.
    return (point if math.isnan(low) else low), (point if math.isnan(high) else high)


def between_process_noise(before: Sequence[float], after: Sequence[float]) -> float:
    """Relative spread of the run medians between processes: each side's runs divided by
    that side's own median, then the pooled standard deviation of those ratios (so a side
    100x slower does not read as 100x noisier). Not a MAD: at 5 runs a side the MAD reads
    about half the true spread (one deviation is 0 by construction), which would shrink the
    default MDE."""
    import numpy as np

    a = np.asarray(before, dtype=float) / median(before)
    b = np.asarray(after, dtype=float) / median(after)
    pooled = ((len(a) - 1) * a.var(ddof=1) + (len(b) - 1) * b.var(ddof=1)) / (len(a) + len(b) - 2)
    return float(np.sqrt(pooled))


def default_mde(noise: float) -> float:
    return max(MDE_FLOOR, NOISE_MULTIPLE * noise)


def _check_runs(name: str, values: Sequence[float]) -> None:
    if len(values) < 2:
        raise ValueError(f"{name}: an A/B test needs at least 2 runs a side, got {len(values)}")
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}: run values must be finite and > 0, got {list(values)}")


def decide(before: Sequence[float], after: Sequence[float], *, higher_is_better: bool,
           mde: float | None = None) -> ABResult:
    """The A/B outcome of `after` against `before` (per-run medians of one series).

    higher_is_better: False for latency (a rise is a regression), True for throughput.
    mde: relative minimum detectable effect for "no change"; default from the runs' noise.
    """
    _check_runs("before", before)
    _check_runs("after", after)
    if mde is not None and not (0 < mde < 10):
        raise ValueError(f"mde is a relative effect in (0, 10) (0.02 = 2%), got {mde}")
    p_mw, p_ks, p = p_values(before, after)
    effect = relative_effect(before, after)
    low, high = effect_interval(before, after)
    noise = between_process_noise(before, after)
    mde = default_mde(noise) if mde is None else mde
    if p <= ALPHA and (low > 0 or high < 0):
        worse = (effect < 0) if higher_is_better else (effect > 0)
        outcome = REGRESSION if worse else IMPROVEMENT
        reason = f"p {p:.3g} <= {ALPHA} and the effect interval excludes 0"
    elif p <= ALPHA:
        outcome = INCONCLUSIVE
        reason = (f"p {p:.3g} <= {ALPHA} but the effect interval [{low:+.2%}, {high:+.2%}] "
                  "contains 0: the runs differ in shape, not in median")
    elif min(len(before), len(after)) < MIN_ROUNDS:
        outcome = INCONCLUSIVE
        reason = (f"p {p:.3g}: {min(len(before), len(after))} runs a side are too few to claim "
                  f"anything (no change needs {MIN_ROUNDS}, as a difference does)")
    elif p > P_SAME and -mde < low and high < mde:
        outcome = NO_CHANGE
        reason = (f"p {p:.3g} > {P_SAME} and the effect interval [{low:+.2%}, {high:+.2%}] "
                  f"lies inside +-{mde:.2%} (MDE)")
    else:
        outcome = INCONCLUSIVE
        why = []
        if p <= P_SAME:
            why.append(f"p {p:.3g} is between {ALPHA} and {P_SAME}")
        if not (-mde < low and high < mde):
            why.append(f"the effect interval [{low:+.2%}, {high:+.2%}] reaches past "
                       f"+-{mde:.2%} (MDE)")
        reason = " and ".join(why)
    return ABResult(outcome, reason, tuple(map(float, before)), tuple(map(float, after)),
                    higher_is_better, effect, low, high, p_mw, p_ks, p, noise, mde)


#: The most A/B rounds one decision may take: each is two asv processes, so a larger number
#: is a typo, not a plan.
MAX_ROUNDS = 1000


def check_rounds(rounds: int, max_rounds: int) -> None:
    """ValueError unless 1 <= rounds <= max_rounds <= MAX_ROUNDS."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    if max_rounds < rounds:
        raise ValueError(f"max_rounds ({max_rounds}) must be >= rounds ({rounds})")
    if max_rounds > MAX_ROUNDS:
        raise ValueError(f"rounds and max_rounds must be <= {MAX_ROUNDS} (each round is two "
                         f"asv runs), got {max_rounds}")


def run_sequential(measure_round: Callable[[int], tuple[float | None, float | None]], *,
                   rounds: int, max_rounds: int, higher_is_better: bool,
                   mde: float | None = None) -> ABResult:
    """Measure A/B rounds and decide; while inconclusive add `rounds` more, up to max_rounds.

    measure_round(i) measures round i (the caller alternates the order A,B / B,A by i so a
    linear drift cancels) and returns (A's run value, B's run value); None for a run that
    gave no value (it is counted in failed_runs and not retried). Decides once both sides
    have 2 values; with fewer after max_rounds it raises RuntimeError.
    """
    check_rounds(rounds, max_rounds)
    before: list[float] = []
    after: list[float] = []
    done = failed = 0
    target = rounds
    while True:
        while done < target:
            a, b = measure_round(done)
            done += 1
            for value, side in ((a, before), (b, after)):
                if value is None:
                    failed += 1
                else:
                    side.append(float(value))
        if min(len(before), len(after)) >= 2:
            result = decide(before, after, higher_is_better=higher_is_better, mde=mde)
            if result.outcome != INCONCLUSIVE or done >= max_rounds:
                return ABResult(**{**result.__dict__, "rounds": done, "failed_runs": failed})
        elif done >= max_rounds:
            raise RuntimeError(f"{done} rounds gave {len(before)} + {len(after)} run values: "
                               "too few to test (every run failed or was skipped?)")
        target = min(max_rounds, done + rounds)


#: Search positions: a commit is on the good side when its median run sits at most this far
#: along the way from the good side's median to the bad side's (1 - this: the bad side).
SIDE_BAND = 0.3
GOOD, BAD, UNCLEAR = "good", "bad", "unclear"


def side_of(runs: Sequence[float], good: Sequence[float],
            bad: Sequence[float]) -> tuple[str, float]:
    """Which side of a known step a commit's runs sit on: (GOOD | BAD | UNCLEAR, position).

    position = (median(runs) - median(good)) / (median(bad) - median(good)): 0 at the good
    side, 1 at the bad side. GOOD at <= SIDE_BAND, BAD at >= 1 - SIDE_BAND, else UNCLEAR
    (more runs, or a commit that carries part of the step). The search uses it only to
    choose where to look; the commit it names is confirmed by an A/B test (`decide`).
    """
    if not runs or not good or not bad:
        raise ValueError("side_of needs at least one run on each of runs, good and bad")
    span = median(bad) - median(good)
    if span == 0:
        raise ValueError("the good and bad sides have the same median: no step to locate")
    position = (median(runs) - median(good)) / span
    if position <= SIDE_BAND:
        return GOOD, position
    if position >= 1 - SIDE_BAND:
        return BAD, position
    return UNCLEAR, position
