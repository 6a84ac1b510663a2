"""What the series of one run say about each other's noise, for a span with no noise model.

A fresh span (a CI job's last eight commits, a branch recorded on its own) gives each series
four to ten successive differences after the candidate steps are screened out. One series'
noise read from four differences is often far off: on host-like noise (Student t3) a
series whose few differences happen to be nearly equal reads 0.3% against a 3% spread, and its
next ordinary difference is then a 10-sigma "step". Where the machine has a stored noise
model, each series starts from it (noise_model.py). Where it has none, the run's other series
of the same benchmark are the next best reference: this module pools them, as limma's
empirical Bayes pools the genes of one experiment (Smyth 2004), and returns per family the
value each series' own estimate is raised toward when it reads quieter (noise.estimate):

- the pooled sigma: the robust (MAD) scale of every series' screened successive differences
  together, each divided by its series' within-process spread (asv's 99% interval) where
  every series of the family has one (a row whose samples are tight gets a tight prior, as
  in the stored model), as they are otherwise;
- its weight d0, in differences: at most noise.PRIOR_DF, less where the family's series
  differ from each other more than sampling alone explains. The spread of the series' own
  log sigma (from all their differences: the screen takes a varying number away) is
  compared with the spread the same estimator gives on pseudo-series drawn from all the
  family's differences (what a family of identical series would show); the excess is the
  between-series variance tau^2 of log sigma, and a scaled inverse chi^2 prior with d0
  degrees of freedom has var(log sigma) = trigamma(d0 / 2) / 4 (limma's moment match). Both
  spreads are robust (MAD), since one series' few differences can read near zero.

A floor, not a two-sided prior: on recorded histories (windows of 6 and 10 commits of the
H100 and H200 histories judged alone) moderating both ways reported dozens of steps the whole
history does not (one benchmark's rows differ in noise more than four differences each can
show), while the floor reported fewer of those than no pooling at all (docs/decisions.md).
Only series the stored and learned models know nothing about get it (a family with long
series in the history has its learned ratio).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from kvbench.history.verdict import noise

#: A family needs this many series with their own differences to pool: fewer say too little
#: about each other to stand in for a noise model.
MIN_SERIES = 8
#: Each pooled series needs at least this many screened differences (noise.MIN_DIFFERENCES:
#: below it, the series itself estimates nothing).
MIN_OWN = noise.MIN_DIFFERENCES
#: Pseudo-series drawn from all the family's differences to learn the spread of the estimator
#: on identical series. Fixed seed: one history always gets the same verdict.
PSEUDO_SERIES = 400
SEED = 20261207
#: A weight below this many differences adds nothing a series' own four do not: the family is
#: then too mixed to pool and gets no floor.
MIN_PRIOR_DF = 2


@dataclass(frozen=True)
class SpanPrior:
    """A family's pooled noise in a span without a model."""

    sigma: float  # log sigma of one commit, or its ratio to the within-process spread
    df: int  # its weight in differences (noise.Prior.span_df)
    normalised: bool  # sigma is a ratio to each series' within-process spread
    series: int  # series pooled

    def within(self, within_process: float | None) -> float | None:
        """The prior within-run sigma of one series of the family."""
        if not self.normalised:
            return self.sigma
        return self.sigma * within_process if within_process else None


@dataclass(frozen=True)
class Member:
    """One series of a family: its successive differences without those at candidate steps,
    all of them, and its within-process spread (None without asv intervals)."""

    differences: np.ndarray
    every: np.ndarray
    within_process: float | None


def _robust_sd(values: np.ndarray) -> float:
    return noise.MAD_TO_SIGMA * noise.median(np.abs(values - noise.median(values)))


def _inverse_trigamma(y: float) -> float:
    """x with trigamma(x) = y (y > 0), by Newton's method on 1 / trigamma as limma does."""
    from scipy.special import polygamma

    x = 0.5 + 1.0 / y
    for _ in range(50):
        tri = float(polygamma(1, x))
        step = tri * (1.0 - tri / y) / float(polygamma(2, x))
        x += step
        if x <= 0:
            x = 1e-6
        if abs(step) < 1e-8 * x:
            break
    return x


def prior_weight(own_log_sigmas: np.ndarray, pseudo_log_sigmas: np.ndarray) -> int:
    """d0 from the excess spread of the series' own log sigma over the pseudo-series'
    (module docstring), capped at noise.PRIOR_DF; 0 when the family is too mixed."""
    tau2 = _robust_sd(own_log_sigmas) ** 2 - _robust_sd(pseudo_log_sigmas) ** 2
    if tau2 <= 0:
        return noise.PRIOR_DF
    d0 = 2.0 * _inverse_trigamma(4.0 * tau2)
    if d0 < MIN_PRIOR_DF:
        return 0
    return int(min(noise.PRIOR_DF, math.floor(d0)))


def learn(members: Iterable[Member]) -> SpanPrior | None:
    """The family's pooled noise, or None where too few of its series have differences of
    their own or they are too mixed to stand for each other."""
    usable = [m for m in members if len(m.differences) >= MIN_OWN]
    if len(usable) < MIN_SERIES:
        return None
    normalised = all(m.within_process for m in usable)

    def scaled(m: Member, d: np.ndarray) -> np.ndarray:
        return (d - noise.median(d)) / (m.within_process if normalised else 1.0)

    pooled = np.concatenate([scaled(m, m.differences) for m in usable])
    sigma = _robust_sd(pooled) / math.sqrt(2.0)
    if not sigma > 0:
        return None
    every = [scaled(m, m.every) for m in usable]
    own = np.array([math.log(max(noise.within_sigma(d), 1e-12)) for d in every])
    rng = np.random.default_rng(SEED)
    pool_every = np.concatenate(every)
    sizes = rng.choice([len(d) for d in every], size=PSEUDO_SERIES)
    pseudo = np.array([math.log(max(noise.within_sigma(rng.choice(pool_every, size=k)), 1e-12))
                       for k in sizes])
    df = prior_weight(own, pseudo)
    if df == 0:
        return None
    return SpanPrior(sigma=sigma, df=df, normalised=normalised, series=len(usable))
