"""The host's speed, for the host-side series (KVAlloc, DispatchOverhead).

A host-side call (a Python allocator, a dispatch lookup) takes as long as the core running it
is fast at that moment. On shared machines (a VM whose vCPUs share physical cores with other
tenants, the host slice of a GPU server) a core runs the same work ~1.5-1.9x slower for tens of
milliseconds to seconds at a time, and every host series of a process moves with it
(docs/harness.md, "Host-side series noise"). A fixed pure-Python loop, the canary, reads that
state; the suite uses it three ways, through one HostGate object per measuring process
(the worker's):

- the reference: the fastest canary this gate has seen on any of the process's cores, probed
  when the process pins itself (`HostGate.pin_fastest_core`) and lowered by every later
  reading;
- the gate: a host case is measured on the core that is fastest now, and accepted only when
  the canary before and after it is within HOST_GATE of the reference; otherwise it is
  measured again after a pause, up to HOST_ATTEMPTS times (`HostGate.on_fast_host`);
- the record: what the gate saw goes into the case's sidecar record, and the canary before
  and after each measurement group into the group's state, so a report can say the host was
  slower when a host series moved.

A fast canary is not the whole story: with the host fast around it, a case still lands 10-20%
apart from one process to the next, for a reason no reading inside the process shows. The
suite measures a commit in one process (the host group's cost is bounded to seconds), so a
host series moves by that much between commits; the verdict engine judges it against its own
history's noise and states the smallest step it can detect (docs/harness.md, "Host-side
series").

Why a hand-written canary and not a library's: pyperf calibrates loop counts and warns of an
unstable system, but measures no reference workload that a gate or a later report can use.
Part of the working-tree suite: imports nothing from the commit under test.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

#: Iterations of the canary loop: tens of microseconds on a current x86 core, so probing 16
#: cores x CANARY_REPEATS costs milliseconds.
CANARY_LOOP = 2000
#: Timings per canary (the least is kept: the noise of a host call only adds time).
CANARY_REPEATS = 7
#: Passes over all cores when a process first pins itself (its reference comes from them).
PROBE_ROUNDS = 3
#: A case is accepted when the canary around it is at most this factor of the reference: the
#: slow state runs the canary ~1.5-1.9x slower, a fast core repeats within a few percent.
HOST_GATE = 1.25
#: Measurements of one case before the least slow one is kept and flagged (fast: false).
HOST_ATTEMPTS = 4
#: Pause before measuring a case again (slow spells last tens of ms to seconds).
HOST_RETRY_PAUSE_S = 0.05


def _loop() -> int:
    return sum(i * i for i in range(CANARY_LOOP))


def allowed_cores() -> list[int]:
    """The cores this process may run on ([] where the OS does not say)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def restore_affinity(cores: list[int]) -> None:
    """Let every thread of this process run on `cores` again (as allowed_cores() returned them
    before a host-side class pinned the process to one core); nothing where the OS has no
    affinity calls. Every thread, not only the calling one: Linux pins the calling thread, and
    a thread started while it was pinned (torch's CPU pool, the CUDA driver's helpers) inherits
    the one core and keeps it."""
    if not cores or not hasattr(os, "sched_setaffinity"):
        return
    try:
        threads = [int(tid) for tid in os.listdir("/proc/self/task")]
    except OSError:
        threads = [0]
    for tid in threads:
        try:
            os.sched_setaffinity(tid, cores)
        except OSError:  # a thread that ended meanwhile
            pass


class HostGate:
    """The canary's reference, the core choice and the gate of one measuring process.

    `reference_us` is the fastest canary this gate has read (None before the first reading):
    every reading lowers it, so the gate of a process that probed all its cores first judges
    each case against that process's fastest state.
    """

    def __init__(self) -> None:
        self.reference_us: float | None = None

    def canary_us(self, repeats: int = CANARY_REPEATS) -> float:
        """The least of `repeats` timings of the canary loop on the current core, in us (each
        reading also lowers the reference)."""
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter_ns()
            _loop()
            best = min(best, time.perf_counter_ns() - t0)
        us = best / 1e3
        self.reference_us = us if self.reference_us is None else min(self.reference_us, us)
        return us

    def probe_cores(self, cores: list[int], rounds: int = 1) -> dict[int, float]:
        """core -> its slowest canary over `rounds` passes (a core that was slow in any pass is
        not a fast core); leaves the process pinned to the last core probed."""
        worst: dict[int, float] = {}
        for _ in range(rounds):
            for core in cores:
                os.sched_setaffinity(0, {core})
                worst[core] = max(worst.get(core, 0.0), self.canary_us())
        return worst

    def pin_fastest_core(self, rounds: int = PROBE_ROUNDS, cores: list[int] | None = None) -> dict:
        """Pin this process to the core whose canary was fastest over `rounds` passes; return
        {"core", "probe_us": {core: canary us}} ({} where the OS has no affinity calls)."""
        cores = allowed_cores() if cores is None else cores
        if not cores:
            return {}
        probe = self.probe_cores(cores, rounds)
        core = min(probe, key=probe.get)
        os.sched_setaffinity(0, {core})
        return {"core": core, "probe_us": {str(c): round(us, 2) for c, us in probe.items()}}

    def host_state(self) -> dict:
        """The host's speed now: the canary on the current core, and which core that is."""
        cores = allowed_cores()
        return {"canary_us": round(self.canary_us(), 2),
                "core": cores[0] if len(cores) == 1 else None}

    def on_fast_host(self, measure: Callable[[], dict], cores: list[int]) -> dict:
        """`measure()` (one case's entry) taken on the fastest of `cores` now, again after a
        pause while the canary around it is slower than HOST_GATE x the reference, at most
        HOST_ATTEMPTS times; the entry whose slower canary was least is returned, with
        entry["host"] = {"canary_us": [before, after], "reference_us", "core", "attempts",
        "fast"}. An entry without a number (an error) is returned as it is."""
        best: tuple[float, dict, dict] | None = None
        for attempt in range(1, HOST_ATTEMPTS + 1):
            core = self.pin_fastest_core(1, cores).get("core") if cores else None
            before = self.canary_us()
            entry = measure()
            after = self.canary_us()
            if "samples_s" not in entry:
                return entry
            slower = max(before, after)
            record = {"canary_us": [round(before, 2), round(after, 2)], "core": core}
            if best is None or slower < best[0]:
                best = (slower, entry, record)
            if slower <= HOST_GATE * self.reference_us:
                break
            time.sleep(HOST_RETRY_PAUSE_S)
        slower, entry, record = best
        ref = self.reference_us
        entry["host"] = {**record, "attempts": attempt, "reference_us": round(ref, 2),
                         "fast": slower <= HOST_GATE * ref}
        return entry
