"""A case that crashes its process loses only itself.

The suite measures a whole group of classes in one setup_cache process (benchmarks/_common.py).
A segfault or a fatal CUDA error in one case used to take every later case of the group with
it. Now the setup_cache process only supervises: it forks a child that measures the group and
reports each case as it starts and as it ends; if the child dies, the case it was measuring is
recorded as crashed (with the signal) and a fresh child measures the rest, handed every case
already recorded so it skips them (a group's input is rebuilt only if one of its cases is
left). The normal path costs one fork per group: the child imports torch and creates the CUDA
context, as the setup_cache process did before, and the parent never touches CUDA (fork after
a CUDA context is unsafe). Only a crash costs a new import and context (a few seconds).
"""

from __future__ import annotations

import multiprocessing
import signal
import sys
from collections.abc import Callable
from typing import Any

#: In a measuring child: its pipe to the supervisor, the class being measured, and the cases
#: recorded before (by an earlier child): class -> {key: entry}.
_CHANNEL: Any = None
_CLASS: str | None = None
_CARRIED: dict[str, dict] = {}


def set_class(cls: str) -> None:
    global _CLASS
    _CLASS = cls


def carried(key: tuple) -> dict | None:
    """The entry an earlier child recorded for `key` of the current class (skip it), or None."""
    return _CARRIED.get(_CLASS or "", {}).get(key)


def _send(*message: Any) -> None:
    if _CHANNEL is not None:
        _CHANNEL.send(message)


def case_started(key: tuple) -> None:
    _send("case", _CLASS, key)


def case_finished(key: tuple, entry: dict) -> None:
    _send("entry", _CLASS, key, entry)


def group_started(keys: list) -> None:
    _send("group", _CLASS, list(keys))


def group_state(keys: list, state: dict, results: dict, index: int) -> None:
    """Link the measured cases of a group to its machine state: through the supervisor in a
    child (which numbers the states of all children), directly in-process."""
    if _CHANNEL is not None:
        _send("state", _CLASS, list(keys), state)
        return
    for key in keys:
        if isinstance(results.get(key), dict) and "samples_s" in results[key]:
            results[key]["state"] = index


def _signal_name(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


def _child(measure: Callable[[], dict], carried_cases: dict, channel: Any) -> None:
    global _CHANNEL, _CARRIED
    _CHANNEL, _CARRIED = channel, carried_cases
    out = measure()
    channel.send(("done", out))
    channel.close()


def run_isolated(measure: Callable[[], dict], states: list) -> dict[str, dict]:
    """measure() -> {class: results} in forked children until one finishes; crashed cases
    recorded as errors. `states` (the sidecar's list) receives every child's group states and
    entries get their index into it."""
    ctx = multiprocessing.get_context("fork")
    recorded: dict[str, dict] = {}
    crashes = 0
    while True:
        receive, send = ctx.Pipe(duplex=False)
        child = ctx.Process(target=_child, args=(measure, recorded, send), daemon=False)
        child.start()
        send.close()
        current: tuple | None = None
        final = None
        while True:
            try:
                message = receive.recv()
            except EOFError:
                break
            kind = message[0]
            if kind == "done":
                final = message[1]
            elif kind == "group":
                current = ("group", message[1], message[2])
            elif kind == "case":
                current = ("case", message[1], message[2])
            elif kind == "entry":
                recorded.setdefault(message[1], {})[message[2]] = message[3]
                current = None
            elif kind == "state":
                states.append(message[3])
                for key in message[2]:
                    found = recorded.get(message[1], {}).get(key)
                    if isinstance(found, dict) and "samples_s" in found:
                        found["state"] = len(states) - 1
        child.join()
        receive.close()
        if final is not None:
            for cls, cases in recorded.items():  # the supervisor's copies carry the states
                if cls in final and isinstance(final[cls], dict):
                    final[cls].update(cases)
            return final
        crashes += 1
        why = (f"the measuring process died ({_signal_name(child.exitcode)}) while measuring "
               "this case; the rest of its group was measured in a fresh process")
        print(f"kvbench suite: {why}: {current}", file=sys.stderr)
        if current is None or crashes > 1000:
            # Outside any case (import, setup): nothing to skip; every class not finished fails.
            return {cls: dict(cases, __class_error__=why) for cls, cases in recorded.items()} or \
                {"__crashed__": {"__class_error__": why}}
        _, cls, what = current
        keys = [what] if current[0] == "case" else what
        for key in keys:
            recorded.setdefault(cls, {}).setdefault(key, {"error": why})
