"""`kvbench record`: which commits a machine lacks, newest first, resumable, one at a time."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kvbench.history.asv import record


def _repo(tmp_path: Path, n: int) -> tuple[Path, list[str]]:
    """A git repository of n commits; their full hashes, oldest first."""
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=repo, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    for i in range(n):
        git("commit", "-q", "--allow-empty", "-m", f"c{i}")
    return repo, git("rev-list", "--reverse", "HEAD").split()


def _store(results: Path, commit: str, body: str | None = None) -> Path:
    path = results / "box" / f"{commit[:8]}-kvbench-offline-py3.12.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"results": {}}) if body is None else body)
    return path


def test_the_default_range_starts_after_the_newest_recorded_commit(tmp_path):
    repo, c = _repo(tmp_path, 6)
    results = tmp_path / "results"
    assert record.default_range(repo, results, "box") == [c[-1]]  # nothing recorded: HEAD
    _store(results, c[1])
    _store(results, c[3])
    p = record.plan(repo, results, "box", None)
    assert p.commits == c[4:] and p.recorded == [] and p.todo == [c[5], c[4]]


def test_a_range_measures_only_what_has_no_result_newest_first(tmp_path):
    repo, c = _repo(tmp_path, 6)
    results = tmp_path / "results"
    _store(results, c[2])
    _store(results, c[4], body='{"results": {"a": [1')  # cut off: measured again
    p = record.plan(repo, results, "box", f"{c[0]}..{c[5]}")
    assert p.commits == c[1:] and p.recorded == [c[2]]
    assert p.todo == [c[5], c[4], c[3], c[1]]
    assert record.plan(repo, results, "box", c[3]).todo == [c[3]]
    with pytest.raises(ValueError, match="'nope' names no commit"):
        record.plan(repo, results, "box", "nope")


def test_one_recording_at_a_time_per_machine_folder(tmp_path):
    results = tmp_path / "results"
    with record.machine_lock(results, "box") as path:
        assert path.read_text().strip().isdigit()
        with pytest.raises(ValueError, match="being recorded by another process"), \
                record.machine_lock(results, "box"):
            pass
        with record.machine_lock(results, "other"):  # another machine's folder is free
            pass
    with record.machine_lock(results, "box"):  # released
        pass


def test_a_long_list_of_commits_is_summarised():
    """A hundred-commit range names its first commits and counts the rest, so a log line of
    `kvbench record` stays readable; a short list is named in full."""
    commits = [f"{i:08x}" + "0" * 32 for i in range(record.LISTED + 7)]
    text = record.listed(commits)
    assert text.split()[:record.LISTED] == [c[:8] for c in commits[:record.LISTED]]
    assert text.endswith(" and 7 more") and commits[record.LISTED][:8] not in text
    assert record.listed(commits[:3]) == " ".join(c[:8] for c in commits[:3])
    assert record.listed(commits[:record.LISTED]).count(" ") == record.LISTED - 1


def test_an_interrupted_recording_resumes_with_what_is_left(tmp_path):
    """asv stopped after the first commit (newest first): the next call measures the rest."""
    repo, c = _repo(tmp_path, 4)
    results = tmp_path / "results"
    conf = repo / "asv.conf.json"
    calls = []

    def fake_asv(command, cwd, check):
        hashes = Path(command[-1].removeprefix("HASHFILE:")).read_text().split()
        calls.append(hashes)
        assert command[command.index("--machine") + 1] == "box" and cwd == repo
        stop = 1 if len(calls) == 1 else len(hashes)
        for h in hashes[:stop]:
            _store(results, h)
        return subprocess.CompletedProcess(command, 130 if stop < len(hashes) else 0)

    lines = []
    code, measured = record.record(record.plan(repo, results, "box", f"{c[0]}..{c[3]}"), conf,
                                   log=lines.append, run=fake_asv)
    assert code == 130 and measured == [c[3]]
    assert "not recorded: " in lines[-1] and c[1][:8] in lines[-1]
    code, measured = record.record(record.plan(repo, results, "box", f"{c[0]}..{c[3]}"), conf,
                                   log=lines.append, run=fake_asv)
    assert code == 0 and measured == [c[2], c[1]]
    assert calls == [[c[3], c[2], c[1]], [c[2], c[1]]]  # nothing measured twice
    assert record.plan(repo, results, "box", f"{c[0]}..{c[3]}").todo == []


def test_a_results_folder_that_cannot_take_results_is_refused_before_measuring(tmp_path):
    """--results-dir under /proc or onto a file stopped with a traceback and exit 1 (asv
    failed), after the plan: now a usage error naming the folder, nothing measured."""
    from kvbench.history.asv.record_cmd import check_results_dir

    afile = tmp_path / "afile"
    afile.write_text("")
    for path, why in ((afile, "exists and is not a directory"),
                      (afile / "sub", "cannot be created"),
                      (Path("/proc/kvbench-no-such/x"), "cannot be created")):
        with pytest.raises(ValueError, match=why):
            check_results_dir(path, create=True)
    check_results_dir(afile / "sub", create=False)  # a dry run writes nothing
    made = tmp_path / "new" / "results"
    check_results_dir(made, create=True)
    assert made.is_dir() and list(made.iterdir()) == []
