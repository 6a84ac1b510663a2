"""A culprit whose range changed no file a measurement reads is labelled as the machine's
step (kvbench/history/verdict/code_scope.py), on a real git history; one that changed code,
or whose range git cannot read, is not."""

from __future__ import annotations

import io
import math
import subprocess
from pathlib import Path

import numpy as np
import pytest

from kvbench.history.verdict import code_scope, text
from kvbench.history.verdict.regressions import analyze
from kvbench.history.verdict.results import History, Point, Series


@pytest.mark.parametrize(("path", "measured"), [
    ("kvbench/kernels/paged_decode.py", True),
    ("pyproject.toml", True),
    ("csrc/new_kernel.cu", True),  # a path the rule does not know counts as measured
    ("requirements.txt", True),
    ("docs/verdicts.md", False),
    ("README.md", False),
    ("kvbench/kernels/NOTES.md", False),
    ("tests/ops/test_paged_decode.py", False),
    ("results/h200/abcd1234-env.json", False),
    ("benchmarks/paged_decode.py", False),  # asv runs the current suite at every commit
    ("asv.conf.json", False),
    (".ci/run", False),
    ("scripts/profile_suite.py", False),
    ("docs/dashboard.png", False),
])
def test_which_paths_a_measurement_reads(path, measured):
    assert code_scope.measured_paths([path]) == ([path] if measured else [])


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, body in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(body)
    run = lambda *a: subprocess.run(["git", "-C", str(repo), *a], check=True,
                                    capture_output=True, text=True).stdout
    run("add", "-A")
    run("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message)
    return run("rev-parse", "HEAD").strip()


def test_a_step_at_a_docs_only_commit_is_labelled_and_one_at_a_code_commit_is_not(tmp_path):
    """Twenty commits, a 20% step in eight series at a docs-only commit (7) and another in
    eight at a kernel commit (14): both are found; only the first says no code changed."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    commits = []
    for i in range(20):
        files = {"docs/notes.md": f"{i}\n"}
        if i == 14 or i == 0:
            files["kvbench/kernel.py"] = f"X = {i}\n"
        commits.append(_commit(tmp_path, files, f"commit {i}"))
    rng = np.random.default_rng(5)
    rows = {f"s{k}": 0.004 * rng.standard_normal(20) for k in range(24)}
    for k in range(8):
        rows[f"s{k}"][7:] += math.log1p(0.20)
        rows[f"s{k + 8}"][14:] += math.log1p(0.20)
    series = [Series("sim.Gpu.track_us", (repr(name),), ("series",), "seconds", "sim",
                     [Point(c, 1e-5 * math.exp(v)) for c, v in zip(commits, values)])
              for name, values in rows.items()]
    results = tmp_path / "results" / "sim"
    results.mkdir(parents=True)
    history = History("sim", results, commits[-1], commits, commits, series, [],
                      runs=dict.fromkeys(commits, 0))
    report = analyze(history)
    culprits = {c.commit: c for c in report.culprits()}
    docs, code = culprits[commits[7]], culprits[commits[14]]
    assert len(docs.slower) == 8 and len(code.slower) == 8
    assert docs.changed == ("docs/notes.md",) and docs.changed_measured_code is False
    assert code.changed_measured_code is True
    by_commit = {c["commit"]: c for c in report.to_json()["culprits"]}
    assert by_commit[commits[7]]["changed_measured_code"] is False
    assert by_commit[commits[14]]["changed_measured_code"] is True
    out = io.StringIO()
    text.print_table(report, out, rich=False)
    lines = out.getvalue().splitlines()
    assert any(line.startswith("regression (no code changed)") and commits[7][:8] in line
               for line in lines)
    assert not any("(no code changed)" in line and commits[14][:8] in line for line in lines)
    labelled = [c for c in culprits.values() if c.changed_measured_code is False]
    assert {commits.index(c.commit) for c in labelled} <= set(range(20)) - {0, 14}
    assert (f"{len(labelled)} culprit commit(s) changed no file a measurement reads"
            in out.getvalue())
    assert (f"  {commits[7][:8]} (parent {commits[6][:8]}): 8 slower, 0 faster; changed "
            "docs/notes.md") in lines


def test_without_a_repository_the_label_is_unknown(tmp_path):
    """Results outside any git work tree: the culprits are still reported, unlabelled."""
    commits = [f"{i:040x}" for i in range(1, 21)]
    rng = np.random.default_rng(6)
    rows = {f"s{k}": 0.004 * rng.standard_normal(20) for k in range(8)}
    for k in range(8):
        rows[f"s{k}"][10:] += math.log1p(0.20)
    series = [Series("sim.Gpu.track_us", (repr(name),), ("series",), "seconds", "sim",
                     [Point(c, 1e-5 * math.exp(v)) for c, v in zip(commits, values)])
              for name, values in rows.items()]
    history = History("sim", tmp_path, commits[-1], commits, commits, series, [],
                      runs=dict.fromkeys(commits, 0))
    (culprit,) = analyze(history).culprits()
    assert culprit.changed is None and culprit.changed_measured_code is None
    assert culprit.to_json()["changed_measured_code"] is None
