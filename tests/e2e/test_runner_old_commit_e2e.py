"""End to end: this tree's asv suite measures a kvbench commit from before its runner existed.

asv installs each measured commit's kvbench and runs the *current* benchmarks/ against it, so
the runner (benchmarks/runner/) must serve packages older than itself: what a commit lacks is
skipped by name, the rest measured (benchmarks/runner/__init__.py says how). The stubbed
older modules of tests/benchmarks/test_runner_old_kvbench.py check each fallback; this test
checks the real thing: a history whose first commit holds kvbench as the speed issue found it
(OLD, before the adaptive harness, the runner package and the history rooms) and whose second
is this checkout; `asv run` from the second measures the first with the real asv.
"""

from __future__ import annotations

import json
import math
import subprocess

import pytest
from test_asv_e2e import MACHINE, ROOT, History, _git, asv_env, commit, copy_checkout

#: The commit the speed issue was filed against: kvbench/history flat, fixed sample counts,
#: the measuring machinery in benchmarks/_common.py.
OLD = "fda3ff2"
#: The class measured: the public entry points' host cost. Its declaration reaches the
#: package through need_first (kvbench.api now, kvbench.ops.common at OLD), the measuring
#: pipeline and bench_host: the compatibility paths a package of OLD's age exercises.
CLASS = "DispatchOverhead"
BENCHMARK = "dispatch_overhead.DispatchOverhead.track_us"


def _old_tree(repo) -> None:
    """The tracked files of OLD (from this checkout's git), replacing the repo's files."""
    archive = subprocess.run(["git", "archive", "--format=tar", OLD], cwd=ROOT, check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=archive, check=True)


def _history(tmp_path) -> History:
    repo, home = tmp_path / "repo", tmp_path / "home"
    repo.mkdir()
    home.mkdir()
    try:
        _git(ROOT, "cat-file", "-e", f"{OLD}^{{commit}}")
    except subprocess.CalledProcessError:
        pytest.fail(f"this checkout lacks commit {OLD}: clone with history (not --depth)")
    _old_tree(repo)
    _git(repo, "init", "-q", "-b", "main")
    commits = {"old": commit(repo, f"kvbench at {OLD}", lambda r: None)}
    _git(repo, "rm", "-rq", ".")
    commits["new"] = commit(repo, "this checkout", copy_checkout)
    from kvbench.history.asv.machine import write_machine_record

    write_machine_record(MACHINE, home / ".asv-machine.json")
    return History(repo, commits, dict(asv_env(home), KVBENCH_ASV_SELECT=CLASS))


@pytest.mark.e2e
def test_the_current_suite_measures_a_commit_from_before_the_runner(tmp_path):
    hist = _history(tmp_path)
    old = hist.commits["old"]
    out = hist.asv("run", "--machine", MACHINE, "--launch-method", "forkserver", "--bench",
                   BENCHMARK, f"{old}^!", timeout=900)
    files = list((hist.repo / "results" / MACHINE).glob(f"{old[:8]}-*.json"))
    assert len(files) == 1, out[-4000:]
    stored = json.loads(files[0].read_text())
    assert stored["commit_hash"] == old
    columns = stored["result_columns"]
    entry = dict(zip(columns, stored["results"][BENCHMARK]))
    values, params = entry["result"], entry["params"]
    # every (op, path) of the class at OLD measured: OLD serves all three ops' torch rows on
    # a CPU and had every entry point the declaration asks for
    assert len(values) == 9, (params, values)
    assert all(v is not None and math.isfinite(v) and v > 0 for v in values), (params, values)
    assert "failed" not in out.lower(), out[-4000:]
