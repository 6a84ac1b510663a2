"""Measure `kvbench regressions` on synthetic asv histories whose truth is known.

Writes a git repository with N first-parent commits and, for one machine, asv 0.6.6 result
files (results/<machine>/<hash>-<env>.json, results/benchmarks.json) holding many series:
flat ones, and ones with a planted step of k x the series' noise (up or down), a step spread
over two commits, a slow drift, and a GB/s drop. Then runs the verdict engine on the files
(kvbench.history.verdict) and counts, per scenario, the series it reports correctly and the flat
series it reports at all.

Noise models (log scale, so multiplicative), per point:
- gpu:  normal within a run (sigma_within) + a normal shift per run (sigma_runs): commits are
        measured in runs of 3-8, and whole runs of one machine name differ as a whole
        (the shape of the recorded GPU histories; docs/verdicts.md).
- host: Student t with 3 degrees of freedom, scaled to a robust sigma of 0.31, plus a run
        shift: heavy-tailed, so a 2x value between identical commits is routine (host series
        measured without the suite's canary gate and processes: a worst case; the suite's
        own host series are judged with --replay).
The "noise" a planted step is measured in is the series' total per-point sigma,
sqrt(sigma_within^2 + sigma_runs^2).

    python -m kvbench.history.verdict.simulate [--seed 20261201] [--series 200] [--json PATH]

prints the rates (and writes them as JSON); docs/verdicts.md quotes its output.

    python -m kvbench.history.verdict.simulate --replay RUNS.jsonl [--lease-ends 10]
        [--first N] [--processes K] [--no-canaries] [--json PATH]

instead judges real noise: a runs file of identical commits recorded by
`scripts/host_noise.py --suite --runs` (the suite's host group, with each case's host
record), written as a history with the suite's own sidecars and planted steps (replay).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kvbench.core.jsonfile import output_path, write_json_atomic

MACHINE = "simbox"
ENV = "sim-py3.11"
LATENCY = "sim.Latency.track_us"
THROUGHPUT = "sim.Throughput.track_gbps"

#: (name, sigma_within, sigma_runs, heavy tails)
NOISE = {
    "gpu": (0.004, 0.010, False),
    "gpu-small": (0.010, 0.005, False),
    "host": (0.31, 0.10, True),
}
#: t(3) has a robust (MAD-based) sigma of 1.1340: divide by it to get a robust sigma of 1.
T3_ROBUST_SIGMA = 1.1340


@dataclass
class Truth:
    """What was planted in one series."""

    name: str  # the param value naming the series
    noise: str  # key of NOISE
    scenario: str  # flat, step, spread, drift, gbps_drop
    benchmark: str = LATENCY
    size: float = 0.0  # in units of the series' total sigma (signed: + = value goes up)
    start: int = 0  # first commit index that moved
    stop: int = 0  # first commit index at the new level
    values: np.ndarray = field(default=None, repr=False)


def total_sigma(noise: str) -> float:
    within, runs, _ = NOISE[noise]
    return math.hypot(within, runs)


def make_runs(rng: np.random.Generator, n_commits: int) -> list[int]:
    """Run id per commit: consecutive runs of 3-8 commits."""
    runs, run = [], 0
    while len(runs) < n_commits:
        runs += [run] * int(rng.integers(3, 9))
        run += 1
    return runs[:n_commits]


def series_values(rng, truth: Truth, runs: list[int], n_commits: int) -> np.ndarray:
    """Values (seconds or GB/s) of one series: level x planted change x noise."""
    within, run_sigma, heavy = NOISE[truth.noise]
    if heavy:
        e = within * rng.standard_t(3, size=n_commits) / T3_ROBUST_SIGMA
    else:
        e = within * rng.standard_normal(n_commits)
    shifts = run_sigma * rng.standard_normal(max(runs) + 1)
    log_x = np.log(rng.uniform(10e-6, 500e-6)) + e + shifts[runs]
    delta = truth.size * total_sigma(truth.noise)
    if truth.scenario.startswith("step") or truth.scenario == "gbps_drop":
        log_x[truth.start:] += delta
    elif truth.scenario in ("spread", "drift"):
        span = truth.stop - truth.start + 1
        for k in range(truth.start, n_commits):
            log_x[k] += delta * min(k - truth.start + 1, span) / span
    if truth.benchmark == THROUGHPUT:
        log_x = np.log(1e-9 * 1e6) - log_x  # GB/s of a fixed byte count: up when time goes down
    return np.exp(log_x)


def plant(rng, n_commits: int, counts: dict[str, int]) -> list[Truth]:
    """The series of one simulation: `counts` per scenario and noise model."""
    truths: list[Truth] = []

    def position(after: int) -> int:
        return int(rng.integers(3, n_commits - after + 1))

    for noise in NOISE:
        for _ in range(counts.get("flat", 0)):
            truths.append(Truth(f"t{len(truths)}", noise, "flat"))
        for k in (2, 3, 5):
            for _ in range(counts.get("step", 0)):
                start = position(2)
                size = k * (1 if rng.random() < 0.5 else -1)
                truths.append(Truth(f"t{len(truths)}", noise, f"step{k}", size=size,
                                    start=start, stop=start))
        for _ in range(counts.get("spread", 0)):
            start = position(3)
            truths.append(Truth(f"t{len(truths)}", noise, "spread", size=5.0, start=start,
                                stop=start + 1))
        for _ in range(counts.get("drift", 0)):
            start = int(rng.integers(5, n_commits - 20))
            truths.append(Truth(f"t{len(truths)}", noise, "drift", size=8.0, start=start,
                                stop=start + 11))
        for _ in range(counts.get("gbps_drop", 0)):
            start = position(2)
            # the time goes up by 5 sigma, so the GB/s series drops by 5 sigma
            truths.append(Truth(f"t{len(truths)}", noise, "gbps_drop", THROUGHPUT, size=5.0,
                                start=start, stop=start))
    return truths


def git_history(repo: Path, n_commits: int) -> list[str]:
    """A fresh repository with n_commits first-parent commits; their hashes, oldest first."""
    subprocess.run(["git", "init", "-q", "-b", "main", str(repo)], check=True)
    stream = []
    for i in range(n_commits):
        message = f"commit {i}\n"
        content = f"{i}\n"
        stream.append(f"commit refs/heads/main\nmark :{i + 1}\n"
                      f"committer Sim <sim@example.invalid> {1_790_000_000 + 60 * i} +0000\n"
                      f"data {len(message)}\n{message}")
        if i:
            stream.append(f"from :{i}\n")
        stream.append(f"M 644 inline file.txt\ndata {len(content)}\n{content}\n")
    subprocess.run(["git", "-C", str(repo), "fast-import", "--quiet"], input="".join(stream),
                   text=True, check=True)
    out = subprocess.run(["git", "-C", str(repo), "rev-list", "--reverse", "main"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples", "profile"]


def write_results(repo: Path, commits: list[str], runs: list[int], truths: list[Truth],
                  rng: np.random.Generator, precision: dict[str, float] | None = None) -> Path:
    """asv result files of every commit under repo/results; returns the results dir.
    `precision`: each series' within-process relative standard error (what asv's 99% interval
    shows); by default its noise model's within-run sigma / 4-12."""
    results = repo / "results"
    machine_dir = results / MACHINE
    machine_dir.mkdir(parents=True)
    machine_params = {"machine": MACHINE, "arch": "x86_64", "cpu": "sim", "num_cpu": "2",
                      "os": "Linux", "ram": "1"}
    (machine_dir / "machine.json").write_text(json.dumps({**machine_params, "version": 1}))
    by_benchmark: dict[str, list[Truth]] = {}
    for t in truths:
        by_benchmark.setdefault(t.benchmark, []).append(t)
    benchmarks = {"version": 2}
    for name, members in by_benchmark.items():
        benchmarks[name] = {"name": name, "type": "track", "version": "1",
                            "unit": "GB/s" if name == THROUGHPUT else "seconds",
                            "param_names": ["series"],
                            "params": [[repr(t.name) for t in members]]}
    (results / "benchmarks.json").write_text(json.dumps(benchmarks))
    if precision is None:
        precision = {t.name: NOISE[t.noise][0] / rng.uniform(4, 12) for t in truths}
    for i, commit in enumerate(commits):
        started = 1_790_000_000_000 + runs[i] * 86_400_000 + i * 60_000
        rows = {}
        for name, members in by_benchmark.items():
            values = [float(t.values[i]) for t in members]
            half = [v * 2.5758 * precision[t.name] for v, t in zip(values, members)]
            rows[name] = [values, [[repr(t.name) for t in members]], "1", started, 1.0,
                          [v - h for v, h in zip(values, half)],
                          [v + h for v, h in zip(values, half)],
                          None, None, None, None, None, None]
        data = {"commit_hash": commit, "env_name": ENV, "date": started, "params": machine_params,
                "python": "3.11", "requirements": {}, "env_vars": {},
                "result_columns": COLUMNS, "results": rows, "durations": {}, "version": 2}
        (machine_dir / f"{commit[:8]}-{ENV}.json").write_text(json.dumps(data))
    return results


def build(root: Path, *, seed: int, n_commits: int, counts: dict[str, int]):
    """Repository + results of one simulation; returns (results dir, truths, commits, runs)."""
    rng = np.random.default_rng(seed)
    truths = plant(rng, n_commits, counts)
    runs = make_runs(rng, n_commits)
    for t in truths:
        t.values = series_values(rng, t, runs, n_commits)
    commits = git_history(root, n_commits)
    return write_results(root, commits, runs, truths, rng), truths, commits, runs


#: A finding of the right verdict this many commits from the planted range is "misplaced".
NEAR = 3


def score(report, truths: list[Truth], commits: list[str]) -> dict:
    """Per scenario x noise: how many series have a finding at the planted commits with the
    right verdict (correct), only one near them (misplaced: within NEAR commits), and any
    other finding (spurious: on a flat series, far from the change, or the wrong verdict)."""
    index = {c: i for i, c in enumerate(commits)}
    found: dict[str, list] = {}
    for f in report.findings:
        found.setdefault(f.series.params[0].strip("'"), []).append(f)
    table: dict[str, dict[str, int]] = {}
    for t in truths:
        row = table.setdefault(f"{t.scenario}/{t.noise}", {
            "series": 0, "correct": 0, "misplaced": 0, "spurious": 0, "improvement_verdicts": 0})
        row["series"] += 1
        expected = "regression" if t.size > 0 else "improvement"
        hit = near = spurious = False
        for f in found.get(t.name, []):
            lo, hi = index[f.parent], index[f.settled]
            planted = t.scenario != "flat" and f.verdict == expected
            if planted and lo < t.stop and hi >= t.start:
                hit = True
            elif planted and lo < t.stop + NEAR and hi >= t.start - NEAR:
                near = True
            else:
                spurious = True
            if t.scenario == "gbps_drop" and f.verdict == "improvement":
                row["improvement_verdicts"] += 1
        row["correct"] += hit
        row["misplaced"] += near and not hit
        row["spurious"] += spurious
    return table


def simulate(*, seed: int, n_commits: int = 45, per_scenario: int = 100,
             flat: int | None = None) -> dict:
    """Build, judge and score one simulation in a temporary directory; the rates as a dict."""
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import load_history

    counts = {"flat": per_scenario if flat is None else flat, "step": per_scenario,
              "spread": per_scenario, "drift": per_scenario, "gbps_drop": per_scenario}
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        results, truths, commits, _ = build(Path(tmp), seed=seed, n_commits=n_commits,
                                            counts=counts)
        history = load_history(results, MACHINE)
        report = analyze(history)
        elapsed = time.perf_counter() - t0
    table = score(report, truths, commits)
    return {"seed": seed, "commits": n_commits, "per_scenario": per_scenario,
            "noise_models": {k: {"sigma_within": v[0], "sigma_runs": v[1],
                                 "tails": "t3" if v[2] else "normal"} for k, v in NOISE.items()},
            "seconds": round(elapsed, 1), "rates": table}


#: The rows a plant on a real history slows (plant_on_history): single-pass fp16 decode.
PLANT_BENCHMARK = "paged_decode.PagedDecode.track_us"
PLANT_PARAMS = ("'triton/single_pass'", "'fp16'")


def plant_on_history(history, *, size: float, seed: int, before: int = 2, after: int = 2,
                     run_shift: float = 0.01, process_noise: float = 0.003) -> dict:
    """Append a new measurement run to a real History and judge only it (`--since` its head).

    The run holds `before` harmless commits, the plant and `after` harmless ones; every series
    that reached the old head continues at its last level x a run shift (normal, `run_shift`)
    x process noise (normal, `process_noise`); the PLANT_PARAMS rows of PLANT_BENCHMARK are
    `size` slower from the plant on. Returns the planted series, the ones reported at the
    plant, and every other finding."""
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import Point

    rng = np.random.default_rng(seed)
    new = [f"{seed:08x}{i:032x}" for i in range(1, before + after + 2)]
    old_head = history.commits[-1]
    history.first_parent = history.first_parent + new
    history.commits = history.commits + new
    run = max(history.runs.values()) + 1
    history.runs.update({c: run for c in new})
    planted = set()
    for s in history.series:
        if not s.points or s.points[-1].commit != old_head:
            continue
        level = float(np.median([p.value for p in s.points[-3:]]))
        level *= math.exp(run_shift * rng.standard_normal())
        hit = s.benchmark == PLANT_BENCHMARK and s.params[:2] == PLANT_PARAMS
        if hit:
            planted.add(s.name)
        for i, commit in enumerate(new):
            value = level * math.exp(process_noise * rng.standard_normal())
            s.points.append(Point(commit, value * (1 + size if hit and i >= before else 1)))
    report = analyze(history, since=old_head)
    found = {f.series.name for f in report.findings
             if f.series.name in planted and f.commit == new[before] and f.verdict == "regression"}
    others = [f for f in report.findings if f.series.name not in found]
    return {"planted": planted, "found": found, "others": others, "report": report,
            "plant": new[before]}


#: asv's 99% interval of a host row, relative half-width (the median over the host rows of
#: the stored GPU machine's results). A replayed series is given this within-process precision.
REPLAY_CI99 = 0.027
#: Steps planted into a replayed series, relative (each slower and faster).
REPLAY_SIZES = (0.10, 0.15, 0.20, 0.30, 0.50)
#: A planted step has at least this many commits on each side.
REPLAY_MARGIN = 3


def replay_truths(runs: list[dict], sizes=REPLAY_SIZES) -> list[tuple[Truth, str]]:
    """The series of a recorded runs file (scripts/host_noise.py --suite: one line per identical
    commit, {"Class(params)": {"median_us", ...}}): each as recorded (scenario "flat": the code
    never changed, so every finding is false), and copies with a step of each size planted
    at every commit with REPLAY_MARGIN commits on each side (the truth is known because the
    recorded commits are identical); each with the recorded series it was made from."""
    names = sorted(set.intersection(*(set(r) for r in runs)))
    n = len(runs)
    if n < 2 * REPLAY_MARGIN:
        raise SystemExit(f"{n} recorded commits: a replay needs at least {2 * REPLAY_MARGIN}")
    truths = []
    for name in names:
        values = np.array([r[name]["median_us"] * 1e-6 for r in runs])
        truths.append((Truth(f"t{len(truths)}", "recorded", "flat", values=values), name))
        for size in sizes:
            for sign in (+1, -1):
                for start in range(REPLAY_MARGIN, n - REPLAY_MARGIN + 1):
                    planted = values.copy()
                    planted[start:] *= (1 + size) ** sign
                    truths.append((Truth(f"t{len(truths)}", "recorded",
                                         f"step{'+' if sign > 0 else '-'}{size:.0%}",
                                         size=sign * size, start=start, stop=start,
                                         values=planted), name))
    return truths


def write_host_sidecars(results: Path, commits: list[str], runs: list[dict],
                        truths: list[tuple[Truth, str]]) -> None:
    """Each commit's sidecar, through the suite's own writer (benchmarks/runner/sidecar.py), holding
    for every replayed series the host record its recorded series had at that commit (the
    kept process's canaries and reference): what a kvbench asv run writes for a host case."""
    try:
        from benchmarks.runner import sidecar as _sidecar
    except ImportError:  # run from outside the repository root: the suite lives beside kvbench
        sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
        from benchmarks.runner import sidecar as _sidecar

    saved = dict(os.environ)
    try:
        os.environ.update(ASV_ENV_NAME=ENV, ASV_KVBENCH_MACHINE=MACHINE,
                          ASV_KVBENCH_RESULTS_DIR=str(results))
        for i, (commit, run) in enumerate(zip(commits, runs)):
            os.environ["ASV_COMMIT"] = commit
            cases = {(t.name,): {"samples_s": [t.values[i]],
                                 "median_us": run[name]["median_us"],
                                 "host": run[name]["host"]} for t, name in truths}
            if not _sidecar.write_sidecar("host", {LATENCY.split(".")[1]: cases}):
                raise SystemExit(f"the sidecar of {commit[:8]} was not written")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def write_device_sidecars(results: Path, commits: list[str], device_of: list[str],
                          truths: list[Truth]) -> None:
    """Each commit's sidecar naming the device that measured it (`device_of[i]`) for every
    latency series: what a fleet's kvbench asv runs write (benchmarks/runner/sidecar.py, "device"),
    without the measurement records the device model does not read."""
    cls = LATENCY.split(".")[1]
    folder = results / MACHINE / "kvbench"
    folder.mkdir(parents=True, exist_ok=True)
    for commit, device in zip(commits, device_of):
        body = {"schema": 1, "commit": commit, "env": ENV, "machine": MACHINE, "group": "suite",
                "device": {"kind": "cuda", "id": device}, "states": [],
                "classes": {cls: {repr((t.name,)): {"status": "measured"} for t in truths
                                  if t.benchmark == LATENCY}}}
        write_json_atomic(folder / f"{commit[:8]}-{ENV}.suite.kvjson", body)


def least_of_first(runs: list[dict], processes: int) -> list[dict]:
    """The recorded commits as if the suite had measured the host group with only its first
    `processes` processes: each case's number the least of theirs (recorded per case in
    host["processes"]). The host record, and so the canary, stays the one of the process the
    suite kept (the processes of one commit read canaries a few percent apart)."""
    out = []
    for run in runs:
        out.append({})
        for name, case in run.items():
            numbers = [p["median_us"] for p in case["host"]["processes"][:processes]
                       if p is not None]
            if not numbers:
                raise SystemExit(f"{name}: no number in the first {processes} processes")
            out[-1][name] = {**case, "median_us": min(numbers)}
    return out


def replay(runs_path: str | Path, *, lease_ends: tuple[int, ...] = (),
           canaries: bool = True, first: int | None = None,
           processes: int | None = None) -> dict:
    """Judge a recorded runs file's series as an asv history (replay_truths): the verdict
    engine on real between-commit noise. Commits up to each of `lease_ends` (1-based, the last
    commit of a machine lease) form one asv run; the rest another. With `canaries`, each
    commit's sidecar carries the recorded host records, so host series are judged at the
    host's typical speed (kvbench/history/verdict/host_speed.py); without, as stored values alone.
    `first`: replay only the first this many commits; `processes`: as measured by only the
    first this many of each commit's processes (least_of_first).
    Returns the rates as `simulate` does, plus the false findings on the recorded series."""
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import load_history

    runs_data = [json.loads(line) for line in Path(runs_path).read_text().splitlines()
                 if line.strip()][:first]
    for i, run in enumerate(runs_data, 1):
        for name, case in run.items():
            if not isinstance(case, dict) or "median_us" not in case or \
                    not isinstance(case.get("host"), dict):
                raise SystemExit(f"{runs_path}: commit {i}, {name}: expected a record of "
                                 "scripts/host_noise.py --suite ({'median_us', 'host'}); "
                                 f"got {str(case)[:80]}")
    if processes is not None:
        runs_data = least_of_first(runs_data, processes)
    n = len(runs_data)
    pairs = replay_truths(runs_data)
    truths = [t for t, _ in pairs]
    run_ids = [sum(i >= end for end in lease_ends) for i in range(n)]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        commits = git_history(Path(tmp), n)
        results = write_results(Path(tmp), commits, run_ids, truths, np.random.default_rng(0),
                                precision={t.name: REPLAY_CI99 / 2.5758 for t in truths})
        if canaries:
            write_host_sidecars(results, commits, runs_data, pairs)
        report = analyze(load_history(results, MACHINE))
        elapsed = time.perf_counter() - t0
    flat = {t.name: name for t, name in pairs if t.scenario == "flat"}
    false = [{"series": flat[f.series.params[0].strip("'")], "verdict": f.verdict,
              "effect_pct": round(f.effect_pct, 1),
              "commits": [commits.index(f.parent) + 1, commits.index(f.settled) + 1]}
             for f in report.findings if f.series.params[0].strip("'") in flat]
    return {"replay": str(runs_path), "canaries": canaries, "commits": n, "first": first,
            "processes": processes,
            "lease_ends": list(lease_ends),
            "series": len(flat), "ci99": REPLAY_CI99, "seconds": round(elapsed, 1),
            "rates": score(report, truths, commits), "false_on_recorded": false}


def replay_head(result: dict) -> str:
    """The first line of a replay's table: what was replayed, and how."""
    how = ["scaled by the recorded canaries" if result["canaries"] else "values alone"]
    if result.get("processes") is not None:
        how.append(f"least of the first {result['processes']} processes")
    return (f"replay of {result['replay']}: {result['series']} series x {result['commits']} "
            f"commits (runs end after {result['lease_ends'] or 'none'}; {'; '.join(how)})")


def format_table(result: dict) -> str:
    head = replay_head(result) if "replay" in result else (
        f"seed {result['seed']}, {result['commits']} commits, "
        f"{result['per_scenario']} series per scenario and noise model")
    lines = [f"{head} ({result['seconds']} s)",
             f"{'scenario/noise':<20}{'series':>7}{'correct':>9}{'misplaced':>11}{'spurious':>10}"]
    for key, row in sorted(result["rates"].items()):
        n = row["series"]
        lines.append(f"{key:<20}{n:>7}{row['correct'] / n:>9.1%}{row['misplaced'] / n:>11.1%}"
                     f"{row['spurious'] / n:>10.1%}")
    return "\n".join(lines)


def positive_int(text: str) -> int:
    """argparse type: a whole number >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a whole number >= 1")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kvbench.history.verdict.simulate",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--commits", type=int, default=45)
    parser.add_argument("--series", type=int, default=200,
                        help="series per scenario and noise model (default %(default)s)")
    parser.add_argument("--json", default=None, type=output_path,
                        help="also write the rates here (atomically)")
    parser.add_argument("--plant-on", default=None, metavar="MACHINE",
                        help="instead: plant a step in a new run on top of results/MACHINE")
    parser.add_argument("--plant-size", type=float, default=0.04,
                        help="relative slowdown of the plant (default %(default)s)")
    parser.add_argument("--results", default="results", help="results dir for --plant-on")
    parser.add_argument("--replay", default=None, metavar="RUNS_JSONL",
                        help="instead: judge a recorded runs file of identical commits "
                             "(scripts/host_noise.py --suite --runs) as a history, with planted "
                             "steps of " + ", ".join(f"{s * 100:.0f}%%" for s in REPLAY_SIZES))
    parser.add_argument("--lease-ends", default="",
                        help="with --replay: comma-separated last commits (1-based) of each "
                             "machine lease but the last; each lease is one asv run")
    parser.add_argument("--first", type=positive_int, default=None, metavar="N",
                        help="with --replay: only the first N recorded commits")
    parser.add_argument("--processes", type=positive_int, default=None, metavar="K",
                        help="with --replay: each case the least of only the first K of the "
                             "recorded processes of its commit")
    parser.add_argument("--no-canaries", action="store_true",
                        help="with --replay: write no sidecars, so the engine judges the "
                             "stored values alone")
    args = parser.parse_args(argv)
    if args.replay:
        try:
            ends = tuple(int(x) for x in args.lease_ends.split(",") if x.strip())
        except ValueError:
            parser.error(f"--lease-ends {args.lease_ends!r}: expected commit numbers like 10,15")
        result = replay(args.replay, lease_ends=ends, canaries=not args.no_canaries,
                        first=args.first, processes=args.processes)
        print(format_table(result))
        print("findings on the recorded (identical-commit) series: "
              f"{len(result['false_on_recorded'])}")
        for f in result["false_on_recorded"]:
            print(f"  {f['verdict']} {f['series']} {f['effect_pct']:+.1f}% commits {f['commits']}")
        if args.json:
            write_json_atomic(args.json, result, indent=2)
        return 0
    if args.plant_on:
        from kvbench.history.verdict.results import load_history

        out = plant_on_history(load_history(args.results, args.plant_on),
                               size=args.plant_size, seed=args.seed)
        print(f"plant {args.plant_size:+.1%} (seed {args.seed}): reported in "
              f"{len(out['found'])} of {len(out['planted'])} planted series; other findings "
              f"after the old head: {len(out['others'])}")
        for f in out["others"]:
            print(f"  {f.verdict} {f.series.name} {f.effect_pct:+.1f}%")
        return 0
    result = simulate(seed=args.seed, n_commits=args.commits, per_scenario=args.series)
    print(format_table(result))
    if args.json:
        write_json_atomic(args.json, result, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
