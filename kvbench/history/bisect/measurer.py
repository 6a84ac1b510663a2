"""One asv series, measured once per process by the real asv: what `kvbench bisect` measures with.

`Series` is asv's name of one param combination (`module.Class.method(param, ...)`), checked
against the suite asv discovers. `AsvMeasurer` runs `asv run` over a list of commits with a
copy of the project's asv.conf.json whose results_dir and html_dir are private (a temporary
directory), `--bench` matching exactly that combination and KVBENCH_ASV_SELECT naming it, so
the suite's one-case mode (benchmarks/_common.py) measures it alone; each commit's result file
is read (the median of that process's samples: a `Run`) and removed. asv still builds and
installs every commit, in the project's own environment and wheel cache.
"""

from __future__ import annotations

import ast
import glob
import itertools
import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kvbench.core.processes import run_tree
from kvbench.history.bisect import abtest

#: Variable read by the suite's worker (benchmarks/runner/worker.py): the one case it measures.
SELECT_VAR = "KVBENCH_ASV_SELECT"
#: How the suite's skip message of a case SELECT_VAR leaves out begins (the worker's
#: NOT_SELECTED): not a reason a selected series has no value.
NOT_SELECTED = "not selected: this run measures only"
#: Units of the series asv stores, and which way is better.
HIGHER_IS_BETTER = {"seconds": False, "GB/s": True}
OK, SKIPPED, FAILED = "ok", "skipped", "failed"


# ---- the series -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Series:
    """One asv param combination: benchmark 'module.Class.method' and its params' reprs."""

    benchmark: str
    param_reprs: tuple[str, ...]

    @property
    def cls(self) -> str:
        return self.benchmark.split(".")[-2]

    @property
    def name(self) -> str:
        """asv's name of the combination: benchmark(param, ...)."""
        return f"{self.benchmark}({', '.join(self.param_reprs)})"

    @property
    def select(self) -> str:
        """The KVBENCH_ASV_SELECT value: Class(param, ...)."""
        return f"{self.cls}({', '.join(self.param_reprs)})"

    @property
    def bench_regex(self) -> str:
        """asv --bench regex matching exactly this combination."""
        return "^" + re.escape(self.name) + "$"


_SERIES_FORM = ("module.Class.method(param, ...) with Python-literal params, e.g. "
                "\"paged_decode.PagedDecode.track_us('triton/split_kv', 'fp16', 'b64_c8k')\"")


def parse_series(text: str) -> Series:
    """Series from asv's name of one combination; ValueError naming the accepted form."""
    match = re.fullmatch(r"\s*([A-Za-z_]\w*(?:\.[A-Za-z_]\w*){2,})\s*\((.*)\)\s*", text)
    if not match:
        raise ValueError(f"series {text!r}: expected {_SERIES_FORM}")
    try:
        values = ast.literal_eval(f"({match.group(2)},)") if match.group(2).strip() else ()
    except (ValueError, SyntaxError):
        raise ValueError(f"series {text!r}: the params must be Python literals; expected "
                         f"{_SERIES_FORM}") from None
    if not values:
        raise ValueError(f"series {text!r}: name at least one param; expected {_SERIES_FORM}")
    return Series(match.group(1), tuple(repr(v) for v in values))


def check_series(series: Series, benchmarks: dict) -> bool:
    """Validate `series` against asv's benchmarks.json content; return higher_is_better."""
    info = benchmarks.get(series.benchmark)
    if info is None:
        known = sorted(k for k in benchmarks if k != "version")
        raise ValueError(f"benchmark {series.benchmark!r} is not in the suite; known: "
                         f"{', '.join(known)}")
    params = info.get("params") or []
    if len(params) != len(series.param_reprs):
        raise ValueError(f"{series.benchmark} takes {len(params)} params "
                         f"({', '.join(info.get('param_names', []))}), got "
                         f"{len(series.param_reprs)}")
    for name, value, allowed in zip(info.get("param_names", []), series.param_reprs, params,
                                    strict=True):
        if value not in allowed:
            raise ValueError(f"{series.benchmark}: {name}={value} is not a param value; "
                             f"accepted: {', '.join(allowed)}")
    unit = info.get("unit")
    if unit not in HIGHER_IS_BETTER:
        raise ValueError(f"{series.benchmark} has unit {unit!r}; bisect knows the direction of "
                         f"{', '.join(HIGHER_IS_BETTER)} only")
    return HIGHER_IS_BETTER[unit]


# ---- runs and the measurer ------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    """One measuring process at one commit: the median of its samples, or why there is none."""

    commit: str
    value: float | None
    status: str  # OK | SKIPPED | FAILED
    reason: str = ""
    samples: int = 0
    process_s: float | None = None  # asv's duration of the measuring (setup_cache) process
    phase: str = ""  # set by the bisection: endpoints / search / confirmation


class Measurer(Protocol):
    """Measures the series once per listed commit, in order, each in a fresh process."""

    def measure(self, commits: Sequence[str]) -> list[Run]: ...


# ---- asv as the measuring engine ------------------------------------------------------------

class AsvMeasurer:
    """Measures one series with the real asv, in a private results directory.

    A copy of the project's asv.conf.json goes into `workdir` with results_dir and html_dir
    pointing there (the user's results/ is never read or written); repo, benchmark_dir and
    env_dir stay the project's, so asv reuses the environment and the wheels it already
    built. asv imports the environment plugin (".kvbench.history.asv.asv_env") from the directory of
    the config it runs, so the project root goes on the asv process's PYTHONPATH (asv strips
    PYTHONPATH from the benchmark processes it starts). One `asv run` per call, commits in the
    given order, KVBENCH_ASV_SELECT naming the series; each result file is read and removed.
    """

    def __init__(self, repo: Path, series: Series | None, machine: str, workdir: Path, *,
                 conf_path: Path | None = None, log_path: Path | None = None,
                 timeout_s: float = 1800.0) -> None:
        from asv import util as asv_util

        self.repo, self.series, self.machine = Path(repo).resolve(), series, machine
        self.workdir = Path(workdir)
        self.results_dir = self.workdir / "results"
        self.log_path = log_path or self.workdir / "asv.log"
        self.timeout_s = timeout_s
        self.invocations = 0
        conf_path = Path(conf_path or self.repo / "asv.conf.json")
        if not conf_path.is_file():
            raise ValueError(f"{conf_path}: no asv.conf.json (run from the project root or "
                             "pass --config)")
        conf = asv_util.load_json(str(conf_path), js_comments=True)
        here = conf_path.resolve().parent
        conf["repo"] = str((here / conf.get("repo", ".")).resolve())
        conf["benchmark_dir"] = str((here / conf.get("benchmark_dir", "benchmarks")).resolve())
        conf["env_dir"] = str((here / conf.get("env_dir", "env")).resolve())
        conf["results_dir"] = str(self.results_dir)
        conf["html_dir"] = str(self.workdir / "html")
        self.conf_path = self.workdir / "asv.conf.json"
        self.plugin_root = here
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.conf_path.write_text(json.dumps(conf, indent=2))

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        env.setdefault("PIP_NO_INDEX", "1")
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(self.plugin_root), os.environ.get("PYTHONPATH", "")) if p)
        if self.series is not None:  # None: a subclass measures many series (gate/compare.py)
            env[SELECT_VAR] = self.series.select
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _asv_run(self, commits: Sequence[str], bench: str) -> tuple[int, str]:
        hashfile = self.workdir / "commits.txt"
        hashfile.write_text("".join(f"{c}\n" for c in commits))
        cmd = [sys.executable, "-m", "asv", "--config", str(self.conf_path), "run",
               "--machine", self.machine, "--record-samples", "--show-stderr",
               "--launch-method", "forkserver", "--bench", bench, f"HASHFILE:{hashfile}"]
        self.invocations += 1
        try:
            proc = run_tree(cmd, cwd=self.repo, env=self._env(), capture_output=True,
                             text=True, timeout=self.timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"asv run did not finish in {self.timeout_s:.0f} s "
                               f"(log: {self.log_path})") from exc
        out = proc.stdout + proc.stderr
        with open(self.log_path, "a") as f:
            f.write(f"$ {' '.join(cmd)}\n{out}\n[exit {proc.returncode}]\n")
        return proc.returncode, out

    def discover(self, commit: str) -> dict:
        """asv's discovery of the suite (benchmarks.json) with `commit` installed."""
        code, out = self._asv_run([commit], "just-discover")
        path = self.results_dir / "benchmarks.json"
        if code != 0 or not path.is_file():
            raise RuntimeError(f"asv could not discover the suite at {commit[:8]} (exit "
                               f"{code}):\n{out[-3000:]}")
        return json.loads(path.read_text())

    def measure(self, commits: Sequence[str]) -> list[Run]:
        code, out = self._asv_run(commits, self.series.bench_regex)
        if code not in (0, 2):  # 2: a benchmark failed, which the result file records
            raise RuntimeError(f"asv run exited {code} (log: {self.log_path}):\n{out[-3000:]}")
        return [self._read(commit, commit_output(out, commit)) for commit in commits]

    def _read(self, commit: str, log_text: str) -> Run:
        from asv.results import Results

        pattern = str(self.results_dir / self.machine / f"{commit[:8]}-*.json")
        paths = glob.glob(pattern)
        if not paths:
            return Run(commit, None, FAILED, no_value_reason(log_text) or "asv wrote no result")
        result = Results.load(paths[0])
        for path in paths:
            os.remove(path)
        name = self.series.benchmark
        if name not in result.get_all_result_keys():
            return Run(commit, None, FAILED,
                       no_value_reason(log_text) or "no result for the benchmark")
        params = result.get_result_params(name)
        combos = [tuple(c) for c in itertools.product(*params)]
        try:
            idx = combos.index(self.series.param_reprs)
        except ValueError:
            return Run(commit, None, SKIPPED, "the suite at this commit lacks the combination")
        value = result.get_result_value(name, params)[idx]
        samples = (result.get_result_samples(name, params) or [None] * len(combos))[idx]
        process_s = next((v for k, v in result.duration.items()
                          if k.startswith("<setup_cache")), None)
        if value is None:
            return Run(commit, None, FAILED, no_value_reason(log_text) or "the benchmark failed",
                       process_s=process_s)
        if math.isnan(value):  # asv's skip
            return Run(commit, None, SKIPPED, no_value_reason(log_text) or "skipped (n/a)",
                       process_s=process_s)
        if samples:
            value = abtest.median(samples)
        return Run(commit, float(value), OK, samples=len(samples or []), process_s=process_s)


def commit_output(out: str, commit: str) -> str:
    """The part of asv's output about `commit` (from its 'commit <hash8>' line to the next)."""
    parts = re.split(r"(?m)^.*For \S+ commit ([0-9a-f]{8})", out)
    for i in range(1, len(parts) - 1, 2):
        if parts[i] == commit[:8]:
            return parts[i + 1]
    return ""


def no_value_reason(text: str) -> str:
    """Why the series has no value, from asv's output: its skip message or the error line.
    The skips of the cases a selection leaves out are not that reason (a selective run skips
    every other class of the suite, and asv prints those skips too)."""
    skipped = [s for s in re.findall(r"asv: skipped: (.+)", text) if NOT_SELECTED not in s]
    if skipped:
        return skipped[-1].strip()
    errors = re.findall(r"(?m)^\s*((?:\w+\.)*\w*(?:Error|Exception)\b.*)$", text)
    if errors:
        return errors[-1].strip()[:300]
    if "setup_cache failed" in text:
        return "asv: setup_cache failed"
    return ""
