"""A case that crashes its process loses only itself.

The suite measures a whole group of classes in one setup_cache process (manager.py).
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

#: The key of a class whose measure function raised.
CLASS_ERROR = "__class_error__"
#: The key of a class whose process died outside any case after the class had started: its
#: recorded cases stand, the others fail with this reason.
CLASS_UNFINISHED = "__class_unfinished__"
#: The key, among a group's classes, of why the classes the process never reached failed.
GROUP_CRASHED = "__crashed__"


class Reporter:
    """A measuring process's line to its supervisor, and the cases an earlier child recorded.

    In a forked child `channel` is its pipe end and `carried` maps class -> {key: entry}
    recorded before a crash (those cases are not measured again). A worker measuring in its
    own process (a test, scripts/profile_suite.py) has a Reporter with no channel: it reports
    nothing and carries nothing.
    """

    def __init__(self, channel: Any = None, carried: dict[str, dict] | None = None) -> None:
        self.channel = channel
        self.carried_cases = carried or {}

    def carried(self, cls: str, key: tuple) -> dict | None:
        """The entry an earlier child recorded for `key` of `cls` (skip it), or None."""
        return self.carried_cases.get(cls, {}).get(key)

    def _send(self, *message: Any) -> None:
        if self.channel is not None:
            self.channel.send(message)

    def case_started(self, cls: str, key: tuple) -> None:
        self._send("case", cls, key)

    def case_finished(self, cls: str, key: tuple, entry: dict) -> None:
        self._send("entry", cls, key, entry)

    def group_started(self, cls: str, keys: list) -> None:
        self._send("group", cls, list(keys))

    def group_state(self, cls: str, keys: list, state: dict) -> bool:
        """Hand a group's machine state to the supervisor, which numbers the states of all
        children and links the group's measured cases to it; False in-process (the worker
        links them itself)."""
        if self.channel is None:
            return False
        self._send("state", cls, list(keys), state)
        return True


def _signal_name(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit status {exitcode}"


def _child(measure: Callable[[Reporter], dict], carried_cases: dict, channel: Any) -> None:
    out = measure(Reporter(channel, carried_cases))
    channel.send(("done", out))
    channel.close()


def run_isolated(measure: Callable[[Reporter], dict], states: list) -> dict[str, dict]:
    """measure(reporter) -> {class: results} in forked children until one finishes; crashed
    cases recorded as errors. `states` (the sidecar's list) receives every child's group states and
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
        died = f"the measuring process died ({_signal_name(child.exitcode)})"
        if current is None or crashes > 1000:
            where = "outside any case" if current is None else f"a {crashes}th time"
            why = f"{died} {where}; the cases after it were not measured"
            print(f"kvbench suite: {why}", file=sys.stderr)
            # Outside any case (an import, a class's setup): nothing to skip and retry. The
            # cases recorded keep their numbers; every case not recorded fails with why.
            out = {cls: dict(cases, **{CLASS_UNFINISHED: why}) for cls, cases in recorded.items()}
            out[GROUP_CRASHED] = {CLASS_ERROR: why}
            return out
        why = (f"{died} while measuring this case; the rest of its group was measured in a "
               "fresh process")
        print(f"kvbench suite: {why}: {current}", file=sys.stderr)
        _, cls, what = current
        keys = [what] if current[0] == "case" else what
        for key in keys:
            recorded.setdefault(cls, {}).setdefault(key, {"error": why})
