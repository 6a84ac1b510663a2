"""How often the verdict engine reports a step, by history length, step position and size:
the detection table of docs/verdicts.md, measured on synthetic series.

    python -m kvbench.history.verdict.detection [--series N] [--seed S] [--json PATH]

Each cell judges N series of one length with one step (a slowdown of `effect`) at one
position, together with N flat series of the same noise, in one analyze() run (so the run's
FDR sees half of its series stepped, as after a commit that moved many series; the per-series
cap ALPHA_SERIES bounds each series alone). A series counts as found when a finding of it names
the stepped commit as its first moved commit (a suspect counts: the newest and first commits
can only be suspects); a finding anywhere else in it is misplaced. Flat cells (every series
flat: the run's FDR at its strictest) give the rate of flat series with a reported step and,
apart, of those with only a suspect (one outlier point at an end of the history reads exactly
like a step there: that is what `--confirm` re-measures).

Noise (log scale, per commit):
- gpu: normal, sigma 0.5%; in one series in five, one point +5% (a slow process);
- host: Student t with 3 degrees of freedom scaled to a robust sigma of 3% (the allocator's
  and dispatch's series move so, a 2x point now and then).
Positions: "first" (the step at the second commit: one point before it), "interior" (at the
middle), "newest" (at the last commit: one point after it). The machine's noise model is given
as a long history would have learned it (each series' sigma, the family's tails), or left out
(`model: none`: the span must estimate its own noise).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

#: History lengths, positions, effects (relative) of the table.
LENGTHS = (4, 6, 8, 12, 20, 40)
POSITIONS = ("first", "interior", "newest")
EFFECTS = (0.02, 0.05, 0.10, 0.20)
NOISES = ("gpu", "host")
#: gpu: the per-commit sigma, the share of series with one outlier point, its size
GPU_SIGMA, GPU_OUTLIER_SHARE, GPU_OUTLIER = 0.005, 0.2, 0.05
#: host: the robust sigma of the t3 noise, and t3's robust (MAD-based) sigma
HOST_SIGMA, T3_ROBUST_SIGMA = 0.03, 0.7649 * 1.4826
BENCHMARK = {"gpu": "sim.Gpu.track_us", "host": "sim.Host.track_us"}


def noise_values(rng: np.random.Generator, noise: str, n: int) -> np.ndarray:
    """One series' log noise of `n` commits."""
    if noise == "gpu":
        x = GPU_SIGMA * rng.standard_normal(n)
        if rng.random() < GPU_OUTLIER_SHARE:
            x[rng.integers(n)] += math.log1p(GPU_OUTLIER)
        return x
    if noise == "host":
        return HOST_SIGMA * rng.standard_t(3, size=n) / T3_ROBUST_SIGMA
    raise ValueError(f"noise must be one of {', '.join(NOISES)}, got {noise!r}")


def step_index(position: str, n: int) -> int:
    """The index of the first stepped commit."""
    return {"first": 1, "interior": n // 2, "newest": n - 1}[position]


#: Commits of the long flat history a cell's noise model is learned from.
LEARN_COMMITS = 45


def learned_model(rng: np.random.Generator, noise: str, names: list[str]):
    """The noise model `kvbench regressions --save-noise-model` stores after a long flat
    history of these series (LEARN_COMMITS commits of the same noise)."""
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import History, Point, Series

    commits = [f"{i:040x}" for i in range(1, LEARN_COMMITS + 1)]
    made = [Series(BENCHMARK[noise], (name.split("(")[1].rstrip(")"),), ("series",), "seconds",
                   "sim", [Point(c, 1e-5 * math.exp(v))
                           for c, v in zip(commits, noise_values(rng, noise, LEARN_COMMITS))])
            for name in names]
    return analyze(History("sim", Path("/nonexistent-kvbench-sim"), commits[-1], commits,
                           commits, made, [], runs=dict.fromkeys(commits, 0))).model


def judge_cell(rng: np.random.Generator, *, noise: str, n: int, position: str | None,
               effect: float, series: int, model: bool) -> dict:
    """One cell: `series` stepped series (none when position is None) and `series` flat ones
    judged in one run; counts of found, misplaced and flat series with a finding."""
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import History, Point, Series

    commits = [f"{i:040x}" for i in range(1, n + 1)]
    at = None if position is None else step_index(position, n)
    made = []
    for k in range(2 * series if position is None else series * 2):
        x = noise_values(rng, noise, n)
        stepped = position is not None and k < series
        if stepped:
            x[at:] += math.log1p(effect)
        points = [Point(c, 1e-5 * math.exp(v)) for c, v in zip(commits, x)]
        made.append((Series(BENCHMARK[noise], (repr(f"s{k}"),), ("series",), "seconds", "sim",
                            points), stepped))
    history = History("sim", Path("/nonexistent-kvbench-sim"), commits[-1], commits, commits,
                      [s for s, _ in made], [], runs=dict.fromkeys(commits, 0))
    names = [s.name for s, _ in made]
    report = analyze(history, model=learned_model(rng, noise, names) if model else None)
    by_name = {v.series.name: v for v in report.verdicts}
    found = misplaced = false = suspect = judged = 0
    for s, stepped in made:
        v = by_name[s.name]
        judged += v.noise is not None
        hits = [f for f in v.findings if f.commit == commits[at]] if stepped else []
        found += bool([f for f in hits if f.verdict == "regression"])
        others = [f for f in v.findings if f not in hits]
        if stepped:
            misplaced += bool(others)
        else:
            false += any(f.kind != "suspect" for f in others)
            suspect += bool(others) and all(f.kind == "suspect" for f in others)
    return {"series": series, "found": found, "misplaced": misplaced, "flat_series": series,
            "flat_with_finding": false, "flat_with_suspect_only": suspect, "judged": judged}


def table(*, series: int, seed: int, lengths=LENGTHS, effects=EFFECTS) -> dict:
    """Every cell of the detection table, with and without a noise model, and the flat rates."""
    rng = np.random.default_rng(seed)
    rows = []
    for model in (True, False):
        for noise in NOISES:
            for n in lengths:
                flat = judge_cell(rng, noise=noise, n=n, position=None, effect=0.0,
                                  series=series, model=model)
                rows.append({"model": model, "noise": noise, "n": n, "position": "flat",
                             "effect": 0.0, **flat})
                for position in POSITIONS:
                    for effect in effects:
                        cell = judge_cell(rng, noise=noise, n=n, position=position,
                                          effect=effect, series=series, model=model)
                        rows.append({"model": model, "noise": noise, "n": n,
                                     "position": position, "effect": effect, **cell})
    return {"series_per_cell": series, "seed": seed, "rows": rows}


def format_table(result: dict) -> str:
    """Found % per (model, noise, length) x (position, effect); flat: false reports per
    1,000 series."""
    rows = result["rows"]
    effects = sorted({r["effect"] for r in rows if r["position"] != "flat"})
    head = (["model", "noise", "n", "flat: reported /1000", "suspect /1000"]
            + [f"{p[:3]} {e:.0%}" for p in POSITIONS for e in effects])
    out = [" | ".join(head), " | ".join("---" for _ in head)]
    keys = sorted({(r["model"], r["noise"], r["n"]) for r in rows},
                  key=lambda k: (not k[0], k[1], k[2]))
    for model, noise, n in keys:
        cells = {(r["position"], r["effect"]): r for r in rows
                 if (r["model"], r["noise"], r["n"]) == (model, noise, n)}
        flat = cells[("flat", 0.0)]
        line = ["stored" if model else "none", noise, str(n),
                f"{1000 * flat['flat_with_finding'] / flat['flat_series']:.1f}",
                f"{1000 * flat['flat_with_suspect_only'] / flat['flat_series']:.0f}"]
        for p in POSITIONS:
            for e in effects:
                c = cells.get((p, e))
                line.append("-" if c is None else f"{100 * c['found'] / c['series']:.0f}")
        out.append(" | ".join(line))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=200, help="series per cell (%(default)s)")
    parser.add_argument("--seed", type=int, default=20261206)
    parser.add_argument("--json", default=None, metavar="PATH")
    args = parser.parse_args(argv)
    if args.series < 1:
        parser.error(f"--series must be >= 1, got {args.series}")
    t0 = time.perf_counter()
    result = table(series=args.series, seed=args.seed)
    result["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(format_table(result))
    print(f"({args.series} series a cell, seed {args.seed}, {result['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
