"""A machine's noise model: what its long history says about each series' noise, kept for the
short spans that cannot say it themselves.

A fresh span (a CI job's last six commits, a branch measured on its own) has a handful of
successive differences per series, and some of them are the very steps it is looking for: it
cannot estimate its own noise. The machine's long history can. `learn` reads the noise
estimates of a judged history (each series' own, without a prior) and keeps:

- per series with at least noise.PRIOR_SOURCE_DIFFERENCES differences: its within-run and
  run-to-run sigma (log scale) and how many differences they came from;
- per family, the share of tail events pooled over every series with at least
  noise.TAIL_MIN_DIFFERENCES differences;
- per family (a benchmark, e.g. `paged_decode.PagedDecode.track_us`) and pooled over the
  machine (key ""): the median ratio of between-process to within-process noise (a series
  the model has never seen gets its own within-process spread times this ratio), the median
  run-to-run sigma, and the share of tail events (noise.tail_share): a family is
  heavy-tailed when it exceeds noise.HEAVY_TAIL_SHARE.

The model is stored beside the machine's sidecars (results/<machine>/kvbench/noise-model.json,
written with `kvbench regressions --save-noise-model`) and read by every later judgment of
that machine: a series then starts from its stored noise (weight noise.PRIOR_DF differences)
and its own differences refine it. A history's own long series always inform its families
too; the stored model fills the gaps.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from kvbench.history.verdict import noise

SCHEMA = "kvbench.noise-model/1"
FILENAME = "noise-model.json"
#: A stored model file larger than this is not a noise model (it is read whole).
MAX_BYTES = 16 << 20


@dataclass(frozen=True)
class FamilyNoise:
    """What a benchmark's long series say about a series of it the model has not seen."""

    ratio: float | None  # median between-process / within-process noise
    runs: float | None  # median run-to-run sigma (log)
    tail_share: float | None  # mean share of tail events (noise.tail_share)
    series: int  # long series behind its ratio and runs sigma

    @property
    def heavy_tailed(self) -> bool:
        return self.tail_share is not None and self.tail_share > noise.HEAVY_TAIL_SHARE


@dataclass(frozen=True)
class SeriesNoise:
    within: float  # log sigma between processes of one run
    runs: float  # log sigma of a run's level
    differences: int


@dataclass
class NoiseModel:
    machine: str
    families: dict[str, FamilyNoise] = field(default_factory=dict)
    series: dict[str, SeriesNoise] = field(default_factory=dict)
    commits: int = 0  # measured commits of the history it was learned from
    head: str = ""  # that history's newest commit

    def prior(self, family: str, series: str, within_process: float | None) -> noise.Prior:
        """The prior of one series: its stored noise where the model has it, else its
        within-process spread times its family's (or the machine's) ratio."""
        fam = self.families.get(family) or self.families.get("")
        heavy = bool(fam and fam.heavy_tailed)
        known = self.series.get(series)
        if known is not None:
            return noise.Prior(within=known.within, runs=known.runs, heavy_tailed=heavy)
        within = None
        if fam and fam.ratio is not None and within_process:
            within = fam.ratio * within_process
        return noise.Prior(within=within, runs=fam.runs if fam else None, heavy_tailed=heavy)

    def updated_by(self, newer: NoiseModel) -> NoiseModel:
        """This model with `newer`'s families and series put over it (a history's own long
        series win over the stored ones)."""
        return NoiseModel(self.machine, {**self.families, **newer.families},
                          {**self.series, **newer.series},
                          max(self.commits, newer.commits), newer.head or self.head)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "machine": self.machine, "commits": self.commits,
                "head": self.head,
                "families": {k: asdict(v) for k, v in sorted(self.families.items())},
                "series": {k: asdict(v) for k, v in sorted(self.series.items())}}

    @classmethod
    def from_json(cls, data: object, where: str) -> NoiseModel:
        """Parse a stored model; ValueError naming `where` and what is wrong."""
        def bad(why: str) -> ValueError:
            return ValueError(f"{where}: not a kvbench noise model ({why})")

        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise bad(f"schema must be {SCHEMA!r}")
        families, series = data.get("families"), data.get("series")
        if not isinstance(families, dict) or not isinstance(series, dict):
            raise bad("families and series must be objects")
        try:
            fams = {str(k): FamilyNoise(_opt(v["ratio"]), _opt(v["runs"]),
                                        _opt(v["tail_share"]), int(v["series"]))
                    for k, v in families.items()}
            sers = {str(k): SeriesNoise(_pos(v["within"]), _opt(v["runs"]) or 0.0,
                                        int(v["differences"]))
                    for k, v in series.items()}
        except (KeyError, TypeError, ValueError) as exc:
            raise bad(f"an entry is malformed: {exc!r}") from None
        return cls(str(data.get("machine", "")), fams, sers, int(data.get("commits", 0) or 0),
                   str(data.get("head", "")))


def _opt(value: object) -> float | None:
    if value is None:
        return None
    out = float(value)  # type: ignore[arg-type]
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"{value!r} is not a finite non-negative number")
    return out


def _pos(value: object) -> float:
    out = _opt(value)
    if out is None or out <= 0:
        raise ValueError(f"{value!r} is not a positive number")
    return out


def path_for(results_dir: str | os.PathLike, machine: str) -> Path:
    """Where a machine's stored model lives (beside its sidecars)."""
    from kvbench.history.verdict.sidecar import sidecar_dir

    return sidecar_dir(results_dir, machine) / FILENAME


def load(path: str | os.PathLike) -> NoiseModel | None:
    """The model stored at `path`, None when there is none; ValueError for a file that is not
    one (named, with why)."""
    import json

    path = Path(path)
    if not path.exists():
        return None
    if not path.is_file():
        raise ValueError(f"{path}: not a regular file")
    if path.stat().st_size > MAX_BYTES:
        raise ValueError(f"{path}: larger than {MAX_BYTES >> 20} MiB, not a noise model")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable noise model ({exc})") from None
    return NoiseModel.from_json(data, str(path))


def save(model: NoiseModel, path: str | os.PathLike) -> Path:
    """Write `model` whole (temp file + rename: an interrupted save keeps the old one)."""
    from kvbench.core.jsonfile import write_json_atomic

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, model.to_json(), indent=1)
    return path


@dataclass(frozen=True)
class Learned:
    """One series' own noise (no prior), the input of `learn`."""

    series: str
    family: str
    own: noise.Noise


def learn(machine: str, items: Iterable[Learned], *, commits: int = 0,
          head: str = "") -> NoiseModel:
    """The model of a history's long series (those with >= PRIOR_SOURCE_DIFFERENCES)."""
    ratios: dict[str, list[float]] = {}
    run_sigmas: dict[str, list[float]] = {}
    tails: dict[str, list[float]] = {}
    counts: dict[str, int] = {}
    series: dict[str, SeriesNoise] = {}
    for item in items:
        est = item.own
        for key in (item.family, ""):
            if est.tail_share is not None:  # tails pool every series that measured them
                tails.setdefault(key, []).append(est.tail_share)
                counts.setdefault(key, 0)
        if est.differences < noise.PRIOR_SOURCE_DIFFERENCES:
            continue
        series[item.series] = SeriesNoise(est.within, est.runs, est.differences)
        for key in (item.family, ""):
            counts[key] = counts.get(key, 0) + 1
            if est.within_process:
                ratios.setdefault(key, []).append(est.within / est.within_process)
            if est.run_differences >= noise.MIN_DIFFERENCES:
                run_sigmas.setdefault(key, []).append(est.runs)

    def median(values: list[float] | None) -> float | None:
        return float(np.median(values)) if values else None

    families = {key: FamilyNoise(median(ratios.get(key)), median(run_sigmas.get(key)),
                                 float(np.mean(tails[key])) if key in tails else None, n)
                for key, n in counts.items()}
    return NoiseModel(machine, families, series, commits, head)
