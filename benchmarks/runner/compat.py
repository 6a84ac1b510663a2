"""Names of the measured commit's kvbench, looked up so that a missing one is a skip.

asv measures old commits with the current suite: a module or name the commit does not have
yet (or keeps elsewhere) must skip the cases that need it, never crash the measuring process.
Every lookup of kvbench in the runner and the declarations goes through `need` or
`need_first`, inside a function, at the time a case is measured.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any


class Skip(NotImplementedError):
    """A case that cannot run on this machine or commit (becomes an asv skip)."""


def need(module: str, *names: str) -> Any:
    """Import kvbench's `module` (and check `names` on it) or raise Skip naming what is missing."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise Skip(f"this commit has no {module} ({exc})") from None
    for name in names:
        if not hasattr(mod, name):
            raise Skip(f"this commit's {module} has no {name}")
    return mod


def need_first(places: Iterable[tuple[str, tuple[str, ...]]]) -> Any:
    """The first of `places` ((module, names) pairs, newest location first) whose module
    imports and has every name: a name that moved between kvbench versions is looked up where
    the measured commit keeps it. Skip naming every place tried when none has it."""
    tried = []
    for module, names in places:
        try:
            return need(module, *names)
        except Skip as exc:
            tried.append(str(exc))
    raise Skip("; ".join(tried) or "need_first: no place given")
