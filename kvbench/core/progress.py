"""A live status line for long commands (`kvbench main`, `table`, `tune`, `calibrate`).

Measuring a table takes minutes; without a sign of life a user cannot tell a slow run from a
hung one. The status line (a spinner, what is being measured now, rows done, elapsed time)
is drawn with `rich` on stderr, only where stdout and stderr are terminals: under `--json`, in CI
logs, in asv's captured output or piped into a file the output stays exactly the plain text it was.
`rich` is imported lazily and is optional: the GPU image has only torch/triton/numpy, and
there the status is simply not drawn.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any


def _enabled(quiet: bool) -> bool:
    if quiet:
        return False
    # Both: the line is drawn on stderr, and while it is, rich routes stdout's prints above
    # it through the same console, which would move a redirected stdout onto stderr.
    for stream in (sys.stdout, sys.stderr):
        isatty = getattr(stream, "isatty", None)
        if isatty is None or not isatty():
            return False
    try:
        import rich  # noqa: F401
    except ImportError:
        return False
    return True


class Status:
    """What a command is doing now; update() redraws the line, a no-op when disabled."""

    def __init__(self, title: str, live: Any = None) -> None:
        self.title = title
        self.rows = 0
        self.what = ""
        self._live = live
        self._start = time.monotonic()

    @property
    def shown(self) -> bool:
        return self._live is not None

    def update(self, what: str | None = None, *, rows: int | None = None) -> None:
        if what is not None:
            self.what = what
        if rows is not None:
            self.rows = rows
        if self._live is not None:
            elapsed = time.monotonic() - self._start
            counted = f"  ({self.rows} rows measured)" if self.rows else ""
            from rich.text import Text  # plain text: op, row and case names are not markup

            self._live.update(Text(f"{self.title}: {self.what}{counted}  [{elapsed:.0f} s]"))


#: The status of the command running now (None outside one): table builders report into it.
_current: Status | None = None


@contextlib.contextmanager
def status(title: str, *, quiet: bool = False) -> Iterator[Status]:
    """A live status line for the block (nothing drawn when quiet or stderr is no terminal).
    Nested calls reuse the outer line with the inner title."""
    global _current
    outer = _current
    if outer is not None:
        saved = outer.title
        outer.title = title
        try:
            yield outer
        finally:
            outer.title = saved
        return
    if not _enabled(quiet):
        _current = Status(title)
        try:
            yield _current
        finally:
            _current = None
        return
    from rich.console import Console

    console = Console(stderr=True)
    from rich.text import Text

    with console.status(Text(title), spinner="dots") as live:
        _current = Status(title, live)
        try:
            yield _current
        finally:
            _current = None


def report(what: str, *, rows: int | None = None) -> None:
    """Tell the running command's status line what is being measured now (no-op outside)."""
    if _current is not None:
        _current.update(what, rows=rows)
