"""Build a published folder beside its final place, then swap it in, one publish at a time.

`asv publish` deletes html_dir before it writes the new dashboard, so a publish that fails or
is interrupted half way used to leave no dashboard at all. Here the new folder is built in a
private work folder next to the target (same filesystem, so each rename is atomic) and
renamed into place only once every step succeeded; on any error the target is untouched.
Two publishes at once are serialised by fcntl.flock on a lock file, so neither builds on the
other's half-written state.

A process killed between the two renames of `replace` leaves the previous folder inside its
work folder; the next build (under the lock) puts it back before it sweeps stale work folders.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

#: Work folders are named .<target name><WORK_TAG><random> beside the target.
WORK_TAG = ".kvbench-build-"
#: The previous target, moved inside the work folder while the new one is renamed in.
OLD = "previous"


@contextlib.contextmanager
def locked(lock_file: Path) -> Iterator[None]:
    """Hold an exclusive flock on lock_file (created if missing) for the with-block."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a", encoding="utf-8") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _prefix(target: Path) -> str:
    return f".{target.name}{WORK_TAG}"


def sweep(target: Path) -> None:
    """Remove the work folders an earlier, killed build left beside target, first restoring
    a previous target that was moved aside and never replaced. Call only under the lock."""
    for work in sorted(target.parent.glob(_prefix(target) + "*")):
        old = work / OLD
        if old.is_dir() and not os.path.lexists(target):
            os.rename(old, target)
        shutil.rmtree(work, ignore_errors=True)


def replace(new: Path, target: Path, old: Path) -> None:
    """Move target to old (if it exists), then new to target; on failure of the second
    rename put target back."""
    had_target = os.path.lexists(target)
    if had_target:
        os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        if had_target and not os.path.lexists(target):
            os.rename(old, target)
        raise


@contextlib.contextmanager
def building(target: Path) -> Iterator[Path]:
    """Yield a path (not yet existing) to build target's new contents at; when the block
    ends normally that folder replaces target, when it raises target is left as it was.
    The work folder is removed either way. The caller holds the lock."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep(target)
    work = Path(tempfile.mkdtemp(prefix=_prefix(target), dir=target.parent))
    try:
        build = work / target.name
        yield build
        replace(build, target, work / OLD)
    finally:
        shutil.rmtree(work, ignore_errors=True)
