"""How much a series moves between commits that change nothing: its noise, from its own history.

Each point of an asv series is one process's median (kvbench's suite measures a commit's cases
in one `setup_cache` process), so the spread between successive commits is the spread between
processes; the samples inside one process are correlated and understate it (docs/history.md,
"What asv's own tools answer"). The history adds a second component:
commits measured in one asv invocation (a *run*, results.run_ids) share a host, a GPU and its
state, and two runs of one machine name may differ by a few percent as a whole with the same
kernel (each allocation of a machine is its own GPU, clocks and host). The model, on log values
(0.01 ~ 1%):

    log x_i = level_i + run_effect[run(i)] + e_i,   e ~ sigma_within,   run_effect ~ sigma_runs

- sigma_within: from the successive differences of commits of the same run, centred on
  their median (which removes a drift's slope), the larger of two estimates:
  1.4826 * MAD / sqrt(2), robust to a few real steps and 2x outliers, and the RMS of the
  smallest 90% of the differences (at least two left out: one slow process makes two;
  normal-consistent), which sees a process that switches between two modes: a host path
  that runs in one of two speed modes per process has half its successive differences near
  0 and half as large as the gap between the modes, and a MAD alone reads that series as
  quiet and reports every mode switch as a step.
- sigma_runs: from the successive differences that cross a run boundary,
  sqrt(max(0, mean(d^2)/2 - sigma_within^2)). A mean of squares, not a MAD: the run effects
  of one machine name are few and often bimodal (two hosts), and a robust scale would call
  the minority host an outlier and report its runs as steps.

Differences that cross a candidate step are left out (`exclude`; the caller excludes every
boundary the change-point search proposes, before any is confirmed), so the noise of a series
with steps is the noise of its flat stretches and a step never inflates the noise it is
judged against. When a history has too few same-run differences
(one commit per run, e.g. nightly CI), all successive differences estimate sigma_within and
sigma_runs is 0: the run-to-run spread is then inside sigma_within.

A short series (the first commits of a new kernel row, every one of them a kernel change)
cannot estimate its own noise. Its within-run noise is then moderated toward a prior, as in
limma's empirical Bayes t (Smyth 2004):

    sigma^2 = (d0 * prior^2 + d * own^2) / (d0 + d),   degrees of freedom d0 + d - 1,

with d the series' own differences and d0 = PRIOR_DF. The prior comes from the machine's noise
model (noise_model.py): the series' own noise in the machine's long history where it has
one, else its within-process spread (asv's 99% interval of each point's median) times the
typical ratio of between-process to within-process noise of its benchmark's long series on
the same machine: a row whose samples are tight gets a tight prior. A long series' own estimate
dominates; with no prior available the own estimate stands alone. The run-to-run sigma is
moderated the same way toward its benchmark's median over the machine's long series: a
series that crossed a handful of runs without a shift has not shown that runs never shift.

A span with no model at all (a fresh CI span, a branch) has one more reference: its other
series of the same benchmark (span_prior.py). Their pooled noise is a floor, not a prior: a
series whose few differences read far quieter than its family's is raised toward it (the
same moderation, weight at most PRIOR_DF), and nothing is lowered or gains degrees of freedom.

A run can be noisier than the series' other runs: one lease of a machine whose host is busy
moves a host-bound row (a torch op of several small kernels) by several times its usual
commit-to-commit spread while every other lease is quiet. The pooled sigma_within is the quiet
leases', and every bump of the noisy lease would read as a step. So each run with
NOISY_RUN_MIN_DIFFERENCES same-run differences of its own is tested against the same-run
differences of the series' other runs, as many at least (one-sided F test of their trimmed-RMS
variances at NOISY_RUN_ALPHA; a history of one run has no such test); a run that fails keeps
its own sigma and degrees of freedom (`noisy_runs`), and a step whose test window holds its
points is judged against them (Noise.for_runs). A run is never made quieter than the series:
only a measured excess counts, so a history of equally noisy runs is judged as before.

Tails: a series (or its family) whose differences have more than HEAVY_TAIL_SHARE tail events
(tail_share) is `heavy_tailed`; only such series have their short sides tested at their
weakest point (changepoints.py). Heavy tails are measured, never assumed.

asv's within-process interval is also a floor: a series is not quieter between processes than
inside one.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

#: MAD -> standard deviation for normal data.
MAD_TO_SIGMA = 1.4826
#: z of asv's two-sided 99% interval, to turn its width into a standard error.
Z99 = 2.5758
#: No series is quieter than this (relative): a series whose stored values repeat exactly
#: (rounded timers) would otherwise have zero noise and report every last-digit change.
SIGMA_FLOOR = 1e-3
#: Share of the largest differences the trimmed RMS leaves out (real steps, rare outliers).
TRIM = 0.10
#: ... and at least this many: one slow process is two large successive differences (into
#: it and out of it), so a short series with one outlier point keeps half of it otherwise.
TRIM_AT_LEAST = 2
#: The trimmed RMS is used from this many differences on.
TRIM_MIN = 10
#: Fewer successive differences than this give no usable noise estimate.
MIN_DIFFERENCES = 4
#: Weight of the prior, in differences (see the module docstring).
PRIOR_DF = 10
#: A series with at least this many differences informs its benchmark's prior ratio.
PRIOR_SOURCE_DIFFERENCES = 15
#: A centred successive difference this many (difference) sigmas out is a tail event: a
#: normal series has 6e-5 of them, a host-side series whose process sometimes runs 2x slow
#: (Student t with 3 degrees of freedom) about 2%, a GPU family where one series in five has
#: one slow process about 1%.
TAIL_SIGMAS = 4.0
#: A family whose long series have more than this share of tail events is heavy-tailed: its
#: short sides are tested at their weakest point (changepoints.SHORT_SIDE), not their mean.
HEAVY_TAIL_SHARE = 0.003
#: A series is heavy-tailed on its own evidence with at least this many tail events (and
#: more than HEAVY_TAIL_SHARE of its differences): a normal series of 45 commits has three
#: in about 3 of 10,000 histories.
HEAVY_TAIL_EVENTS = 3
#: A run's own within-run noise is estimated once it has this many same-run differences
#: (kvbench record measures a dozen or more commits a run; fewer say little about a variance).
NOISY_RUN_MIN_DIFFERENCES = 8
#: One-sided level of the F test that calls a run noisier than its series' other runs.
NOISY_RUN_ALPHA = 0.01
#: The test's degrees of freedom per successive difference: neighbouring differences share a
#: point and the trimmed RMS drops the largest tenth, so n differences carry fewer than n.
#: At half, equally noisy runs are called noisier at about NOISY_RUN_ALPHA; at one per
#: difference several times as often (docs/decisions.md, "A noisy run keeps its own noise").
NOISY_RUN_DF_SHARE = 0.5
#: A series with this many differences reports its share of tail events (Noise.tail_share),
#: which its family pools (noise_model.learn): a family of short series measures its tails
#: together long before any one of them could.
TAIL_MIN_DIFFERENCES = 5


@dataclass(frozen=True)
class Noise:
    """A series' noise on the log scale (0.01 ~ 1%) and where it came from."""

    within: float  # per commit inside one run (moderated, floored)
    runs: float  # of a whole run's level (0 when the history cannot separate it)
    differences: int  # the series' own successive differences behind `within`
    within_process: float | None  # median standard error of one process's median (asv CI)
    prior: float | None = None  # the prior `within` was moderated toward, if any
    prior_df: int = 0
    run_differences: int = 0  # successive differences across runs behind `runs`
    #: measured heavy tails (its own long history or its family's): short sides are tested
    #: at their weakest point; False where none were measured (side means are tested)
    heavy_tailed: bool = False
    #: the share of tail events among its own differences (tail_share), where it has at
    #: least TAIL_MIN_DIFFERENCES of them; None otherwise
    tail_share: float | None = None
    #: `within` was raised toward its family's pooled noise in a span without a model
    #: (Prior.span): its own differences read quieter than its family's
    raised_to_family: bool = False
    #: (run, its own within sigma, its differences) of each run measured noisier than the
    #: series' other runs (module docstring); empty for most series
    noisy_runs: tuple[tuple[int, float, int], ...] = ()

    def for_runs(self, runs: Iterable[int]) -> Noise:
        """The noise a step among points of `runs` is judged against: the noisiest of those
        runs' own (its sigma and degrees of freedom) where one of them is in `noisy_runs`,
        else this."""
        wanted = set(runs)
        own = [(sigma, n) for run, sigma, n in self.noisy_runs if run in wanted]
        if not own:
            return self
        sigma, n = max(own)
        return dataclasses.replace(self, within=sigma, differences=n, prior=None, prior_df=0,
                                   noisy_runs=())

    @property
    def df(self) -> int:
        """Degrees of freedom of a t statistic on this noise."""
        return max(self.differences + self.prior_df - 1, 1)

    @property
    def total(self) -> float:
        """The noise of one commit's value against the series' level (log scale)."""
        return math.hypot(self.within, self.runs)

    @property
    def pct(self) -> float:
        """`total` as a percentage of the value (one standard deviation)."""
        return 100.0 * math.expm1(self.total)


def median(a) -> float:
    """The median of a short 1-D array of finite values, equal to np.median's: the engine
    takes ~100k of them over a history, and on a few dozen values np.median's general (axis,
    NaN, out) machinery costs an order of magnitude more than the sort."""
    s = np.sort(np.asarray(a, dtype=float).ravel())
    n = len(s)
    if n == 0:
        raise ValueError("median of no values")
    half = n // 2
    return float(s[half]) if n % 2 else float((s[half - 1] + s[half]) / 2.0)


def _mad_sigma(d: np.ndarray) -> float:
    return MAD_TO_SIGMA * median(np.abs(d - median(d))) / math.sqrt(2.0)


def _trimmed_variance(kept_share: float) -> float:
    """E[Z^2 | |Z| < z] for a standard normal, z its (1 + kept_share) / 2 quantile: the
    consistency factor of an RMS over the smallest `kept_share` of |Z| (0.623 at 90%)."""
    z = NormalDist().inv_cdf((1.0 + kept_share) / 2.0)
    return 1.0 - 2.0 * z * NormalDist().pdf(z) / kept_share


def _trimmed_rms_sigma(d: np.ndarray) -> float:
    """sigma from the RMS of the centred differences without their largest TRIM share (at
    least TRIM_AT_LEAST of them)."""
    dev = np.sort(np.abs(d - median(d)))
    trimmed = max(len(dev) - math.ceil((1.0 - TRIM) * len(dev)), TRIM_AT_LEAST)
    kept = dev[:max(1, len(dev) - trimmed)]
    factor = _trimmed_variance(len(kept) / len(dev))
    return math.sqrt(float(np.mean(kept ** 2)) / factor) / math.sqrt(2.0)


def within_sigma(d: np.ndarray) -> float:
    """The larger of the MAD and the trimmed-RMS estimates (module docstring); the MAD alone
    for fewer than TRIM_MIN differences, where trimming 10% removes nothing and a series'
    few differences are as likely its real steps as its noise (the prior covers them)."""
    if len(d) < TRIM_MIN:
        return _mad_sigma(d)
    return max(_mad_sigma(d), _trimmed_rms_sigma(d))


def tail_share(d: np.ndarray) -> float:
    """Share of the centred differences `d` more than TAIL_SIGMAS of their robust (MAD)
    difference sigma from their median: ~6e-5 for normal noise. In a short series (fewer
    than PRIOR_SOURCE_DIFFERENCES) the largest is left out: one real step the screen let
    through is one large difference and would read as a heavy tail there alone."""
    centred = np.sort(np.abs(d - median(d)))
    if len(centred) < PRIOR_SOURCE_DIFFERENCES:
        centred = centred[:-1]
    scale = MAD_TO_SIGMA * median(centred) if len(centred) else 0.0
    if scale <= 0:
        return 0.0
    return float(np.mean(centred > TAIL_SIGMAS * scale))


def within_process_sigma(values: Sequence[float], ci_low: Sequence[float | None],
                         ci_high: Sequence[float | None]) -> float | None:
    """Median relative standard error of one process's median, from asv's 99% intervals."""
    rel = [(hi - lo) / (2 * Z99 * v) for v, lo, hi in zip(values, ci_low, ci_high)
           if lo is not None and hi is not None and v > 0 and hi >= lo]
    return float(np.median(rel)) if rel else None


@dataclass(frozen=True)
class Prior:
    """What a series' benchmark says about its noise before its own history does."""

    within: float | None  # prior within-run sigma (prior_for)
    runs: float | None  # prior run-to-run sigma
    heavy_tailed: bool = False  # the family's long series have heavy tails (tail_share)
    #: a span without a model: its family's pooled sigma (span_prior.py) and that sigma's
    #: weight in differences. It only raises the series' own estimate (to the moderated
    #: value, where that is larger) and adds no degrees of freedom: on recorded histories the
    #: family's series differ more than their few differences can show.
    span: float | None = None
    span_df: int = 0


def estimate(log_values: Sequence[float], runs: Sequence[int], *, exclude: Iterable[int] = (),
             within_process: float | None = None, prior: Prior | None = None) -> Noise | None:
    """The series' Noise, or None when the history is too short and there is no prior.

    `runs[i]` is the measurement run of point i; `exclude` holds indices i whose difference
    log x[i] - log x[i-1] crosses a detected step; each component is moderated toward
    `prior` (weight PRIOR_DF differences) where the prior has it. Without a within prior, a
    span prior (Prior.span) can only raise the within estimate."""
    x = np.asarray(log_values, dtype=float)
    prior = prior or Prior(None, None)
    skip = set(exclude)
    pairs = [i for i in range(1, len(x)) if i not in skip]
    same_pairs = [i for i in pairs if runs[i] == runs[i - 1]]
    same = np.array([x[i] - x[i - 1] for i in same_pairs])
    cross = np.array([x[i] - x[i - 1] for i in pairs if runs[i] != runs[i - 1]])
    crossing = 0
    if len(same) >= MIN_DIFFERENCES:
        within, used = within_sigma(same), len(same)
        between_runs, crossing = 0.0, len(cross)
        if crossing:
            between_runs = math.sqrt(max(float(np.mean(cross ** 2)) / 2.0 - within ** 2, 0.0))
    elif len(same) + len(cross) >= MIN_DIFFERENCES:
        every = np.concatenate([same, cross])
        within, used, between_runs = within_sigma(every), len(every), 0.0
    elif prior.within is not None:
        within, used, between_runs = prior.within, 0, 0.0
    else:
        return None
    prior_df = 0
    if prior.within is not None:
        prior_df = PRIOR_DF
        within = _moderate(within, used, prior.within, PRIOR_DF)
    raised = False
    if prior.within is None and prior.span is not None and used:
        floor = _moderate(within, used, prior.span, prior.span_df)
        raised, within = floor > within, max(within, floor)
    if prior.runs is not None and crossing:
        between_runs = _moderate(between_runs, crossing, prior.runs, PRIOR_DF)
    within = max(within, within_process or 0.0, SIGMA_FLOOR)
    own = np.concatenate([same, cross])
    share = tail_share(own) if len(own) >= TAIL_MIN_DIFFERENCES else None
    heavy = prior.heavy_tailed or (share is not None and share > HEAVY_TAIL_SHARE
                                   and share * len(own) >= HEAVY_TAIL_EVENTS - 1e-9)
    noisy = _noisy_runs(x, runs, same_pairs, within) if len(same) >= MIN_DIFFERENCES else ()
    return Noise(within=within, runs=between_runs, differences=used,
                 within_process=within_process, prior=prior.within, prior_df=prior_df,
                 run_differences=crossing, heavy_tailed=heavy, tail_share=share,
                 raised_to_family=raised, noisy_runs=noisy)


def _noisy_runs(x: np.ndarray, runs: Sequence[int], same_pairs: list[int],
                within: float) -> tuple[tuple[int, float, int], ...]:
    """The runs whose own same-run differences (indices `same_pairs` of x) are significantly
    more spread than those of every other run together: (run, own sigma, differences) each,
    the sigma at least the series' `within`. A history of one run has none."""
    by_run: dict[int, list[float]] = {}
    for i in same_pairs:
        by_run.setdefault(runs[i], []).append(x[i] - x[i - 1])
    noisy = []
    for run, d in by_run.items():
        rest = [v for other, values in by_run.items() if other != run for v in values]
        if len(d) < NOISY_RUN_MIN_DIFFERENCES or len(rest) < NOISY_RUN_MIN_DIFFERENCES:
            continue
        d, rest = np.asarray(d), np.asarray(rest)
        spread, others = _trimmed_rms_sigma(d), _trimmed_rms_sigma(rest)
        if others > 0 and (spread / others) ** 2 > _f_critical(_f_df(len(d)), _f_df(len(rest))):
            noisy.append((run, max(within_sigma(d), within), len(d)))
    return tuple(noisy)


def _f_df(differences: int) -> int:
    """Degrees of freedom of a trimmed-RMS variance of successive differences in the F test:
    NOISY_RUN_DF_SHARE of their number (neighbouring differences share a point)."""
    return max(1, round(NOISY_RUN_DF_SHARE * differences))


@functools.lru_cache(maxsize=4096)
def _f_critical(dfn: int, dfd: int) -> float:
    """The F(dfn, dfd) quantile a variance ratio must exceed at NOISY_RUN_ALPHA (cached: the
    engine asks for the same few pairs once per estimate of every series)."""
    from scipy import stats

    return float(stats.f.isf(NOISY_RUN_ALPHA, dfn, dfd))


def _moderate(own: float, own_df: int, prior: float, prior_df: int) -> float:
    return math.sqrt((prior_df * prior ** 2 + own_df * own ** 2) / (prior_df + own_df))
