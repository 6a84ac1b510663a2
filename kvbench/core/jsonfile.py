"""Writing kvbench's JSON outputs so that a failed or interrupted write loses nothing.

A result file (a table's rows, the perf table dispatch ranks on, the measured ceilings) is
written to a temporary file in the same directory and renamed over the target: a reader sees
the old file or the new one, never a torn one, and a full disk leaves the old file intact.
Output paths are also checked before a run spends minutes measuring into them, and a stored
file that cannot be read is moved aside (`move_aside`), never overwritten: what is in it may
still be recoverable by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def check_writable(path: str | os.PathLike[str]) -> Path:
    """`path` as a Path if a file can be written there; ValueError naming what is wrong.

    The directory is probed by creating (and removing) a temporary file in it, as the atomic
    write will: ``os.access`` answers yes to root for any directory, and yes on /proc or
    /sys, where creating a file then fails after the measurement. An existing target must be
    a regular file: the atomic rename would replace a device node such as /dev/null."""
    target = Path(path)
    if target.is_dir():
        raise ValueError(f"{target}: is a directory; give a file path")
    if target.exists() and not target.is_file():
        raise ValueError(f"{target}: exists and is not a regular file; give a file path")
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{target}: its directory {parent} does not exist (or is not a directory)")
    try:
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{target.name}-", suffix=".probe")
    except OSError as exc:
        raise ValueError(f"{target}: its directory {parent} is not writable "
                         f"(creating a file there failed: {exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return target


def output_path(text: str) -> Path:
    """argparse ``type=`` of an output file option (``--json PATH``): checked with
    check_writable while the arguments are parsed, so a bad path is a usage error (exit 2)
    before anything is measured."""
    try:
        return check_writable(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def replacement_mode(target: str | os.PathLike[str]) -> int:
    """The permission bits a file written through a temporary one must get before it replaces
    `target`: target's own where it exists, else what open() gives a new file (0o666 less the
    umask). mkstemp makes its files 0600, which a rename would carry into results, tables and
    published JSON that others on the machine (or a web server) read."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_json_atomic(path: str | os.PathLike[str], data: Any, **dump_kwargs: Any) -> Path:
    """json.dump `data` to `path` through a temporary file and an atomic rename (the file
    keeps its mode, or gets a new file's: replacement_mode)."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, **dump_kwargs)
        os.chmod(tmp, replacement_mode(target))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def move_aside(path: str | os.PathLike[str]) -> Path:
    """Rename an unreadable stored file to ``<name>.corrupt-<UTC time>`` beside it; return the
    new path. OSError if the rename fails: the caller must then not overwrite the file."""
    source = Path(path)
    aside = source.with_name(f"{source.name}.corrupt-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}")
    source.rename(aside)
    return aside


def read_bounded(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of `path` if it is a regular file (a symlink to one counts) of at most
    `limit` bytes; ValueError naming what it is otherwise. A FIFO, a device (/dev/zero), a
    directory or a dangling link is refused before it is opened for reading."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise ValueError(f"cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file")
    if info.st_size > limit:
        raise ValueError(f"{info.st_size} bytes, more than a file of its kind holds "
                         f"({limit} at most)")
    with open(path, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"grew past {limit} bytes while read")
    return data
