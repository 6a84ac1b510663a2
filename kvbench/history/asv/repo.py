"""The repository's history as kvbench reads it: git commands, first-parent lines, ranges.

The results, the verdict engine, bisect and record all name commits of one repository's
first-parent history (the line a merge-based workflow lands on): the one git helper and the
one range grammar live here, below every room that needs them.
"""

from __future__ import annotations

import subprocess
from pathlib import Path


def git(repo: Path, *args: str) -> str:
    """Run git in `repo` and return its stdout; ValueError naming the command when it fails."""
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise ValueError(f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip()}")
    return proc.stdout


def repository_of(results_dir: Path) -> Path:
    """The top of the git work tree that holds `results_dir` (where its commits are)."""
    return Path(git(results_dir, "rev-parse", "--show-toplevel").strip())


def first_parent_line(repo: Path, rev: str = "HEAD") -> list[str]:
    """Full hashes of `rev`'s first-parent history, oldest first."""
    return git(repo, "rev-list", "--first-parent", "--reverse", rev).split()


def resolve(repo: Path, rev: str) -> str:
    """The full hash `rev` names in `repo`; ValueError when it names no commit."""
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").strip()
    except ValueError:
        raise ValueError(
            f"{rev!r} names no commit in {repo} (give a hash, branch or tag)"
        ) from None


def resolve_range(repo: Path, text: str) -> list[str]:
    """[base, c1, ..., end]: full hashes of the first-parent history of RANGE 'BASE..END'."""
    if text.count("..") != 1 or "..." in text:
        raise ValueError(f"range {text!r}: expected BASE..END (two dots, e.g. HEAD~32..HEAD)")
    base_name, end_name = text.split("..")
    if not base_name or not end_name:
        raise ValueError(f"range {text!r}: name both ends, BASE..END (e.g. HEAD~32..HEAD)")
    base, end = resolve(repo, base_name), resolve(repo, end_name)
    listed = git(repo, "rev-list", "--first-parent", "--reverse", f"{base}..{end}").split()
    if not listed:
        raise ValueError(f"range {text!r} holds no commit ({base_name} is not before {end_name})")
    first_parent = git(repo, "rev-parse", f"{listed[0]}^").strip()
    if first_parent != base:
        raise ValueError(f"range {text!r}: {base_name} is not on {end_name}'s first-parent "
                         "history; pick a base on it (e.g. END~N)")
    return [base, *listed]


def subjects(repo: Path, commits: list[str]) -> dict[str, str]:
    """{full hash: subject line} of `commits` (those git knows; {} when git cannot tell)."""
    if not commits:
        return {}
    try:
        out = git(repo, "log", "--no-walk=unsorted", "--format=%H%x00%s", *commits)
    except ValueError:
        return {}
    return dict(line.split("\0", 1) for line in out.splitlines() if "\0" in line)


def changed_paths(repo: Path, parent: str, commit: str) -> list[str]:
    """The paths that differ between two commits (renames as their delete and add): what a
    change landing between them could have changed. ValueError when git cannot tell."""
    out = git(repo, "diff", "--name-only", "--no-renames", "-z", parent, commit)
    return [p for p in out.split("\0") if p]
