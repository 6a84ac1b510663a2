"""The repository's first-parent history and the range grammar (kvbench.history.asv.repo)."""

from __future__ import annotations

import subprocess

import pytest

from kvbench.history.asv import repo


def test_ranges_are_first_parent_history(tmp_path):
    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                              cwd=tmp_path, check=True, capture_output=True,
                              text=True).stdout.strip()

    git("init", "-q", "-b", "main")
    for i in range(4):
        (tmp_path / "f").write_text(str(i))
        git("add", "f")
        git("commit", "-qm", f"c{i}")
    commits = repo.resolve_range(tmp_path, "HEAD~3..HEAD")
    assert commits == [git("rev-parse", f"HEAD~{k}") for k in (3, 2, 1, 0)]
    assert repo.first_parent_line(tmp_path) == commits
    for bad, match in (("HEAD~3", "BASE..END"), ("HEAD...HEAD~1", "BASE..END"),
                       ("HEAD..HEAD~2", "holds no commit"),
                       ("nope..HEAD", "'nope' names no commit"),
                       ("HEAD~1..nope", "'nope' names no commit"),
                       ("..HEAD", "name both ends")):
        with pytest.raises(ValueError, match=match):
            repo.resolve_range(tmp_path, bad)
