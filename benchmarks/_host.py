"""The host's speed, for the host-side series (KVAlloc, DispatchOverhead).

A host-side call (a Python allocator, a dispatch lookup) takes as long as the core running it
is fast at that moment. On shared machines (a VM's vCPU whose sibling thread another tenant
uses, a host slice of a GPU server) a core runs the same work ~1.5-1.8x slower for seconds at a
time, and all host series of a process move together with it (docs/harness.md, "Host-side
series noise"). Two things follow, both done here:

- choose the core: probe every core this process may use with a short canary (a fixed
  pure-Python loop), pin to the fastest (`pin_fastest_core`);
- record the speed: the canary on the pinned core before and after each measurement group
  (`canary_us`), written to the sidecar beside the GPU's NVML state, so a report can say that
  the host was slower when a host series moved.

Why a hand-written canary and not pyperf's calibration: pyperf tunes loop counts and warns of
an unstable system but measures no reference workload per process that a report can compare
across commits. Part of the working-tree suite: imports nothing from the commit under test.
"""

from __future__ import annotations

import os
import time

#: Iterations of the canary loop: tens of microseconds on a current x86 core, so probing 16
#: cores x PROBE_ROUNDS x CANARY_REPEATS costs milliseconds.
CANARY_LOOP = 2000
#: Timings per canary (the least is kept: the noise of a host call only adds time).
CANARY_REPEATS = 7
#: Passes over all cores when probing (a core must be fast in each pass to be chosen).
PROBE_ROUNDS = 3


def _loop() -> int:
    return sum(i * i for i in range(CANARY_LOOP))


def canary_us(repeats: int = CANARY_REPEATS) -> float:
    """The least of `repeats` timings of the canary loop on the current core, in us."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        _loop()
        best = min(best, time.perf_counter_ns() - t0)
    return best / 1e3


def allowed_cores() -> list[int]:
    """The cores this process may run on ([] where the OS does not say)."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def probe_cores(cores: list[int], rounds: int = PROBE_ROUNDS) -> dict[int, float]:
    """core -> its slowest canary over `rounds` passes (a core that was slow in any pass is
    not a fast core); leaves the process pinned to the last core probed."""
    worst: dict[int, float] = {}
    for _ in range(rounds):
        for core in cores:
            os.sched_setaffinity(0, {core})
            worst[core] = max(worst.get(core, 0.0), canary_us())
    return worst


def pin_fastest_core() -> dict:
    """Pin this process to the core whose canary was fastest; return what was decided
    ({"core", "probe_us": {core: canary us}}; {} where the OS has no affinity calls)."""
    cores = allowed_cores()
    if not cores:
        return {}
    probe = probe_cores(cores)
    core = min(probe, key=probe.get)
    os.sched_setaffinity(0, {core})
    return {"core": core, "probe_us": {str(c): round(us, 2) for c, us in probe.items()}}


def host_state() -> dict:
    """The host's speed now: the canary on the current core, and which core that is."""
    cores = allowed_cores()
    return {"canary_us": round(canary_us(), 2),
            "core": cores[0] if len(cores) == 1 else None}
