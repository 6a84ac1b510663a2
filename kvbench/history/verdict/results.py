"""Read a machine's asv results into per-series histories ordered by the repository's history.

asv 0.6.6 stores one file per (commit, environment) under results/<machine>/
(`<hash>-<env>.json`, format version 2): `result_columns` names the columns of each
benchmark's row, `params` is the list of parameter value lists, and each per-point column
(`result`, `stats_q_25`, ...) is flattened over `itertools.product(*params)`. A point that did
not run (a skip, a failure) is None or NaN; it is left out of the series, not read as zero.

The commits are put in the order of `git rev-list --first-parent HEAD` of the repository that
holds the results: the order in which changes landed on the branch, which is what a step in
a series is measured against. A result of a commit that is not on that line (a side branch,
an amended commit) cannot be placed and is listed in `History.skipped` with the reason.

A series is one (benchmark, parameter combination, environment); its unit comes from
results/benchmarks.json when that file describes the benchmark, else from asv's naming
(`time_*` and kvbench's `track_us` are seconds, `track_gbps` is GB/s).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from kvbench.core.jsonfile import read_bounded as _read_bounded
from kvbench.history.asv.repo import first_parent_line, repository_of, resolve

#: Units by the name of the benchmark's method, for a benchmark results/benchmarks.json lacks.
UNIT_BY_METHOD = {"track_us": "seconds", "track_gbps": "GB/s"}
#: The largest result file read: an asv result file of this suite is tens to hundreds of KB
#: (a raw-sample file of the old format ~2 MB); a file far larger is not one.
MAX_RESULT_BYTES = 64 << 20
#: Values a point may hold, per unit: a time is positive and under an hour, a bandwidth
#: positive and under 100 TB/s. Anything else (0, a negative, 1e308, true) is a broken file,
#: not a measurement, and is left out with the file named.
PLAUSIBLE = {"seconds": (0.0, 3600.0), "GB/s": (0.0, 1e5)}


@dataclass(frozen=True)
class Point:
    """One commit's value of one series: asv's `result` (the median of the run's samples)."""

    commit: str
    value: float
    q25: float | None = None
    q75: float | None = None
    ci99_low: float | None = None
    ci99_high: float | None = None


@dataclass
class Series:
    """The history of one benchmark x parameter combination on one machine, oldest first."""

    benchmark: str
    params: tuple[str, ...]
    param_names: tuple[str, ...]
    unit: str
    env: str
    points: list[Point] = field(default_factory=list)

    @property
    def name(self) -> str:
        """asv's name for the series: `module.Class.method('a', 'b')` (the `asv find` form)."""
        return f"{self.benchmark}({', '.join(self.params)})" if self.params else self.benchmark


@dataclass
class History:
    """Every series of one machine, and the commits they are ordered by."""

    machine: str
    results_dir: Path
    head: str
    commits: list[str]  # measured commits on the first-parent line, oldest first
    first_parent: list[str]  # the whole first-parent line of `head`, oldest first
    series: list[Series]
    skipped: list[dict[str, str]]
    runs: dict[str, int] = field(default_factory=dict)  # commit -> measurement run (run_ids)

    @functools.cached_property
    def order(self) -> dict[str, int]:
        """commit -> its position on the first-parent line (0: the oldest)."""
        return {c: i for i, c in enumerate(self.first_parent)}

    def commits_between(self, parent: str, commit: str) -> int:
        """How many first-parent commits lie in (parent, commit]: the range a bisect searches."""
        return self.order[commit] - self.order[parent]


def machines(results_dir: Path) -> list[str]:
    """Machine folders under results_dir (those holding a machine.json)."""
    return sorted(p.parent.name for p in Path(results_dir).glob("*/machine.json"))


def load_benchmarks(results_dir: Path) -> dict:
    """results/benchmarks.json (asv's description of the suite) as a dict, {} when absent;
    ValueError naming the file when it is not one asv wrote."""
    path = Path(results_dir) / "benchmarks.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable ({exc}); `kvbench publish` or `asv run` "
                         "rewrites it from the suite") from None
    if not isinstance(data, dict):
        raise ValueError(  # noqa: TRY004 - bad input, as every reader here raises
            f"{path}: not asv's benchmarks.json (a JSON object of benchmarks)")
    return data


def load_units(results_dir: Path) -> dict[str, str]:
    """benchmark name -> unit from results/benchmarks.json (empty when the file is absent; a
    unit that is not a string is left out: the method name's then stands, unit_of)."""
    return {name: info["unit"] for name, info in load_benchmarks(results_dir).items()
            if isinstance(info, dict) and isinstance(info.get("unit"), str) and info["unit"]}


def load_param_names(results_dir: Path) -> dict[str, tuple[str, ...]]:
    """benchmark name -> parameter names from results/benchmarks.json."""
    return {name: tuple(str(n) for n in info.get("param_names") or ())
            for name, info in load_benchmarks(results_dir).items()
            if isinstance(info, dict) and isinstance(info.get("param_names") or (), list)}


def unit_of(benchmark: str, units: dict[str, str]) -> str | None:
    """The benchmark's unit: benchmarks.json's, else by method name; None when unknown."""
    if benchmark in units:
        return units[benchmark]
    method = benchmark.rsplit(".", 1)[-1]
    if method.startswith("time_"):
        return "seconds"
    return UNIT_BY_METHOD.get(method)


def _number(value) -> float | None:
    """A finite number, or None (absent, NaN, infinite, or not a number at all: a bool, a
    string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return None if math.isnan(value) or math.isinf(value) else value


def plausible(value: float, unit: str) -> bool:
    """Whether `value` can be a measurement in `unit` (PLAUSIBLE; any finite for other units)."""
    low, high = PLAUSIBLE.get(unit, (-math.inf, math.inf))
    return low < value < high


#: Commits whose measurements started more than this far apart belong to different runs.
RUN_GAP_MS = 10 * 60 * 1000


def run_ids(started: dict[str, tuple[tuple, float | None]]) -> dict[str, int]:
    """Group commits into measurement runs: same machine record, starts within RUN_GAP_MS.

    `started` maps a commit to (its result file's machine params, earliest `started_at`).
    One asv invocation measures its commits back to back on one host, so they share the host's
    state; two invocations may run on different hosts or GPUs of one machine name, which
    shifts whole runs (noise.py models that). A commit without `started_at` is its own run."""
    order = sorted(started, key=lambda c: (repr(started[c][0]), started[c][1] is None,
                                           started[c][1] or 0.0))
    ids: dict[str, int] = {}
    run, previous = -1, None
    for commit in order:
        params, start = started[commit]
        if previous is None or start is None or previous[1] is None or params != previous[0] \
                or start - previous[1] > RUN_GAP_MS:
            run += 1
        ids[commit] = run
        previous = (params, start)
    return ids


def _started_at(data: dict) -> float | None:
    """The earliest `started_at` (ms) of a result file's benchmarks, None when none is stored."""
    columns = data["result_columns"]
    if "started_at" not in columns:
        return None
    i = columns.index("started_at")
    times = [_number(row[i]) for row in data["results"].values()
             if isinstance(row, list) and i < len(row)]
    times = [t for t in times if t is not None]
    return float(min(times)) if times else None


def read_bounded(path: Path) -> bytes:
    """The bytes of `path`, a regular file of at most MAX_RESULT_BYTES
    (kvbench.core.jsonfile.read_bounded); ValueError naming what it is otherwise."""
    return _read_bounded(path, MAX_RESULT_BYTES)


def _read_result_file(path: Path) -> dict:
    """One result file, checked against what the reader relies on (asv 0.6's format 2);
    ValueError saying what is wrong with it (a wrongly typed key is bad input, like any other
    defect of the file, and the reader skips every such file the same way)."""
    try:
        data = json.loads(read_bounded(path).decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason})") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply to be a result file") from None
    if not isinstance(data, dict):
        raise ValueError(f"a JSON {type(data).__name__}, not an object")  # noqa: TRY004
    if data.get("version") != 2:
        raise ValueError(f"not an asv 0.6 result file (format version 2 expected, got "
                         f"{data.get('version')!r})")
    checks = (("commit_hash", str), ("env_name", str), ("result_columns", list),
              ("results", dict))
    for key, kind in checks:
        if not isinstance(data.get(key), kind):
            raise ValueError(f"'{key}' is {type(data.get(key)).__name__}, expected "  # noqa: TRY004
                             f"{kind.__name__}")
    if not all(isinstance(c, str) for c in data["result_columns"]):
        raise ValueError("'result_columns' holds a non-string")
    if not isinstance(data.get("params", {}), dict):
        raise ValueError(  # noqa: TRY004
            f"'params' is {type(data.get('params')).__name__}, expected dict")
    return data


def _at(values, k: int) -> float | None:
    """Element k of a flattened per-point column, None when the column or element is absent."""
    return _number(values[k]) if isinstance(values, list) and k < len(values) else None


def _points_of(data: dict, commit: str):
    """Yield (benchmark, params combination, Point) for every point that has a value."""
    col = {name: i for i, name in enumerate(data["result_columns"])}
    for benchmark, row in data["results"].items():
        if not isinstance(row, list):
            continue
        column = {name: row[i] if i < len(row) else None for name, i in col.items()}
        results = column.get("result")
        if results is None:
            continue
        params = column.get("params") or []
        if not isinstance(params, list) or not all(
                isinstance(values, list) and all(isinstance(v, str) for v in values)
                for values in params):
            continue  # not asv's list of param value lists: nothing here can be placed
        combos = list(itertools.product(*params)) if params else [()]
        if not isinstance(results, list):
            results = [results]
        for k, combo in enumerate(combos[:len(results)]):
            value = _number(results[k])
            if value is None:
                continue
            yield benchmark, tuple(combo), Point(
                commit=commit, value=value,
                q25=_at(column.get("stats_q_25"), k), q75=_at(column.get("stats_q_75"), k),
                ci99_low=_at(column.get("stats_ci_99_a"), k),
                ci99_high=_at(column.get("stats_ci_99_b"), k))


def load_history(results_dir: str | Path, machine: str, *, rev: str = "HEAD",
                 repo: str | Path | None = None) -> History:
    """Read results_dir/machine/*.json into series ordered by `rev`'s first-parent history.

    ValueError when `machine` is not one folder name (command.check_machine_name), when the
    machine folder does not exist (naming the machines that do) or when it holds
    no result a commit of the history can place."""
    from kvbench.history.command import check_machine_name

    results_dir = Path(results_dir)
    machine_dir = results_dir / check_machine_name(machine)  # never a path out of results_dir
    if not machine_dir.is_dir():
        known = ", ".join(machines(results_dir)) or "none"
        raise ValueError(f"no results for machine {machine!r} in {results_dir} "
                         f"(machines there: {known})")
    repo = repository_of(results_dir) if repo is None else Path(repo)
    head = resolve(repo, rev)
    line = first_parent_line(repo, head)
    position = {c: i for i, c in enumerate(line)}
    units = load_units(results_dir)
    names = load_param_names(results_dir)

    skipped: list[dict[str, str]] = []
    by_key: dict[tuple[str, tuple[str, ...], str], Series] = {}
    measured: set[str] = set()
    started: dict[str, tuple[tuple, float | None]] = {}
    read_from: dict[tuple[str, str], str] = {}  # (commit, env) -> the file it was read from
    for path in sorted(machine_dir.glob("*.json")):
        if path.name == "machine.json":
            continue
        try:
            data = _read_result_file(path)
        except ValueError as exc:  # json.JSONDecodeError is a ValueError
            skipped.append({"file": path.name, "reason": f"unreadable: {exc}"})
            continue
        commit = data["commit_hash"]
        if commit not in position:
            skipped.append({"file": path.name,
                            "reason": f"commit {commit[:8]} is not on {rev}'s first-parent line"})
            continue
        env = data["env_name"]
        if (commit, env) in read_from:
            # a copy counted twice would shrink the noise each verdict is judged against
            skipped.append({"file": path.name, "reason": f"a second result of commit "
                            f"{commit[:8]} in {env} (read from {read_from[commit, env]})"})
            continue
        read_from[commit, env] = path.name
        points, implausible = [], 0
        for benchmark, combo, point in _points_of(data, commit):
            unit = unit_of(benchmark, units)
            if unit is None:
                continue
            if not plausible(point.value, unit):
                implausible += 1
                continue
            points.append((benchmark, combo, point, unit))
        if implausible:
            skipped.append({"file": path.name, "reason": f"{implausible} value(s) that cannot "
                            "be measurements (not a positive finite time under an hour or "
                            "bandwidth under 100 TB/s) left out"})
        if not points:
            if not implausible:
                skipped.append({"file": path.name, "reason": "no value of a known series"})
            continue
        measured.add(commit)
        params = tuple(sorted((str(k), str(v)) for k, v in data.get("params", {}).items()))
        start = _started_at(data)
        if commit in started and started[commit][1] is not None and start is not None:
            start = min(start, started[commit][1])
        started[commit] = (params, start)
        for benchmark, combo, point, unit in points:
            key = (benchmark, combo, env)
            if key not in by_key:
                param_names = names.get(benchmark, ())
                if len(param_names) != len(combo):
                    param_names = tuple(f"param{i + 1}" for i in range(len(combo)))
                by_key[key] = Series(benchmark, combo, param_names, unit, env)
            by_key[key].points.append(point)
    if not measured:
        raise ValueError(f"{machine_dir}: no result file of a commit on {rev}'s first-parent "
                         f"line ({len(skipped)} skipped)")
    for series in by_key.values():
        series.points.sort(key=lambda p: position[p.commit])
    commits = sorted(measured, key=position.__getitem__)
    series = sorted(by_key.values(), key=lambda s: (s.benchmark, s.params, s.env))
    return History(machine=machine, results_dir=results_dir, head=head, commits=commits,
                   first_parent=line, series=series, skipped=skipped, runs=run_ids(started))
