"""What else changed across a step: the sidecar facts of the commits on both sides of it.

A finding of `kvbench regressions` (or bisect's confirmed pair) says a series moved between
two commits. The suite's sidecars (benchmarks/runner/sidecar.py, read by
kvbench/history/verdict/sidecar.py) say what else differed between those two measurements, which is
often the explanation:

- `auto_switch`: the registry row `auto` (or the selector) actually ran changed
  ("auto switched cuda/cluster_decode -> triton/split_kv");
- `resources`: a compiled kernel of the row (Triton, or kvbench's CUDA kernel) changed its
  registers, spills, local or shared memory, warps or stages ("registers 128 -> 168");
- `gpu_state`: the GPU's SM or memory clock during the case's measurement group differed, or
  a clock-event (throttle) reason other than GpuIdle was present on one side
  ("SM clock 1980 -> 1410 MHz during the run");
- `host_state`: the host ran slower or faster: a host-side case on one side could not be
  measured at the host's fast speed (the suite's canary gate, benchmarks/runner/host.py: "host slow
  on the settled side: canary 126 us against its fast 70 us after 4 attempts"), the fastest
  canary its process read moved by HOST_SPEED_CHANGE ("host's fast canary 83 -> 66 us: the
  machine ran 1.25x faster at its best"), or else the canary before and after the case's group
  differed by more than HOST_CHANGE ("host canary 72 -> 128 us: the host ran 1.78x slower");
- `error`: the measured error of the verified timed call moved (max_abs, scale, bias).

Absent sidecars (older commits, other environments) give no facts and never an error.
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from kvbench.history.verdict.sidecar import CommitSidecar

#: The resource keys that describe a compiled kernel; a record without any of them (the
#: launch hook's bare {"function": <handle>} under some Triton versions) says nothing.
RESOURCE_KEYS = ("registers", "spills", "local_bytes", "shared_bytes", "num_warps",
                 "num_stages", "maxnreg")
RESOURCE_LABELS = {"registers": "registers", "spills": "spills",
                   "local_bytes": "local memory bytes", "shared_bytes": "shared bytes",
                   "num_warps": "warps", "num_stages": "stages", "maxnreg": "maxnreg"}
#: A clock differs when the two sides are this far apart (relative): NVML reads clocks in
#: steps, and a boosted GPU reads the same clock group after group.
CLOCK_CHANGE = 0.05
#: The reason NVML gives for a clock that is low because the GPU had nothing to do: the
#: reading before a group's first launch, not a throttle.
IDLE_REASON = "GpuIdle"
#: max_abs moved when one side is at least this factor of the other (rounding errors of a
#: kernel are a few units in the last place; a factor 2 is a changed computation).
MAX_ABS_FACTOR = 2.0
#: scale / bias moved when they differ by more than this (absolute). The systematic-error
#: criterion's tightest tolerance (fp16 scale) is 2.4e-4; an unchanged row moves far less.
SCALE_CHANGE = 1e-4
BIAS_CHANGE = 1e-4
#: The host's canary differs when the slower side's slowest reading is this factor of the
#: other's: a shared machine's slow spells cost far more than this, while one machine state
#: repeats within a few percent (docs/harness.md, "Host-side series noise").
HOST_CHANGE = 1.15
#: The machine's best speed differs when the fastest canary the measuring process read (the
#: gate's reference) is this factor of the other side's: above the spread of commits measured
#: on one machine allocation, below that between allocations, so a change of machine is named
#: and a steady machine is not (a smaller change of machine goes unreported; docs/harness.md).
HOST_SPEED_CHANGE = 1.17


@dataclass(frozen=True)
class Fact:
    """One difference between the two sides of a step, with a sentence to print."""

    kind: str  # auto_switch | resources | gpu_state | host_state | error
    text: str
    before: object = None
    after: object = None

    def to_json(self) -> dict:
        return {"kind": self.kind, "text": self.text, "before": self.before,
                "after": self.after}


def case_key(benchmark: str, params: tuple[str, ...]) -> tuple[str, str]:
    """The sidecar's key of an asv series: (class name, repr of the params tuple).

    asv names a series `module.Class.method` with each param as a Python literal; the suite
    keys its records by `repr(tuple(params))` ("('auto', 'fp16', 'b1_c4k')", "('s',)")."""
    parts = benchmark.split(".")
    cls = parts[-2] if len(parts) >= 2 else parts[0]
    try:
        values = tuple(ast.literal_eval(p) for p in params)
    except (ValueError, SyntaxError):
        return cls, "(" + ", ".join(params) + ")"
    return cls, repr(values)


def _measured(sidecar: CommitSidecar | None, key: tuple[str, str]) -> dict | None:
    record = sidecar.cases.get(key) if sidecar is not None else None
    if not isinstance(record, dict) or record.get("status") != "measured":
        return None
    return record


def host_reference_us(sidecar: CommitSidecar | None, key: tuple[str, str]) -> float | None:
    """The fast canary (us; the host gate's reference, benchmarks/runner/host.py) the suite recorded
    with a measured host-side case; None for another case, an unmeasured one or no sidecar."""
    record = _measured(sidecar, key)
    host = record.get("host") if record is not None else None
    ref = _number(host.get("reference_us")) if isinstance(host, dict) else None
    return ref if ref is not None and ref > 0 else None


def _state(sidecar: CommitSidecar, key: tuple[str, str],
           fields: tuple[str, str] = ("before", "after")) -> list[dict]:
    """The readings of the case's measurement group that are dicts: NVML's (before, after) by
    default, the host canary's with fields=("host_before", "host_after")."""
    record = sidecar.cases.get(key) or {}
    index, group = record.get("state"), sidecar.groups_of.get(key)
    states = sidecar.states.get(group) or []
    if not isinstance(index, int) or not 0 <= index < len(states):
        return []
    state = states[index] or {}
    return [state[k] for k in fields if isinstance(state.get(k), dict)]


def _running_clock(readings: list[dict], field: str) -> float | None:
    """The clock while the group ran: the lowest reading not taken at idle (a group starts
    from the idle clock; NVML marks that reading GpuIdle)."""
    busy = [r[field] for r in readings if isinstance(r.get(field), (int, float))
            and IDLE_REASON not in (r.get("clock_event_reasons") or [])]
    return min(busy) if busy else None


def _throttle_reasons(readings: list[dict]) -> list[str]:
    return sorted({reason for r in readings for reason in (r.get("clock_event_reasons") or [])
                   if reason != IDLE_REASON})


def gpu_state_facts(before: list[dict], after: list[dict]) -> list[Fact]:
    if not before or not after:
        return []
    facts = []
    for field, label in (("sm_mhz", "SM clock"), ("mem_mhz", "memory clock")):
        a, b = _running_clock(before, field), _running_clock(after, field)
        if a and b and abs(b / a - 1) > CLOCK_CHANGE:
            facts.append(Fact("gpu_state", f"{label} {a:.0f} -> {b:.0f} MHz during the run",
                              {field: a}, {field: b}))
    a, b = _throttle_reasons(before), _throttle_reasons(after)
    if a != b:
        facts.append(Fact("gpu_state", f"clock-event reasons {','.join(a) or 'none'} -> "
                          f"{','.join(b) or 'none'}",
                          {"clock_event_reasons": a}, {"clock_event_reasons": b}))
    return facts


def _kernels(resources: object) -> dict[str, dict] | None:
    """name -> meaningful resource keys of each compiled kernel; None when the record says
    nothing (not a list, "n/a", or entries without any resource key)."""
    if not isinstance(resources, list):
        return None
    out = {}
    for i, entry in enumerate(resources):
        if not isinstance(entry, dict):
            continue
        known = {k: entry[k] for k in RESOURCE_KEYS if entry.get(k) is not None}
        if known:
            out[str(entry.get("name") or f"kernel {i}")] = known
    return out or None


def resource_facts(before: object, after: object) -> list[Fact]:
    a, b = _kernels(before), _kernels(after)
    if a is None or b is None:
        return []
    facts = []
    if set(a) != set(b):
        facts.append(Fact("resources", f"kernels {', '.join(sorted(a))} -> "
                          f"{', '.join(sorted(b))}", sorted(a), sorted(b)))
    shared = sorted(set(a) & set(b))
    for name in shared:
        for key in RESOURCE_KEYS:
            va, vb = a[name].get(key), b[name].get(key)
            if va is not None and vb is not None and va != vb:
                where = f"{name}: " if len(shared) > 1 or set(a) != set(b) else ""
                facts.append(Fact("resources", f"{where}{RESOURCE_LABELS[key]} {va} -> {vb}",
                                  {"kernel": name, key: va}, {"kernel": name, key: vb}))
    return facts


def host_gate_facts(before: object, after: object) -> list[Fact]:
    """A fact when the suite's host gate (benchmarks/runner/host.py, HostGate.on_fast_host) could
    not measure a host-side case at the host's fast speed on one side (in the process whose number
    was kept, where the suite used several): that side's number was taken on a slow host, and a step
    there may be the machine's."""
    facts = []
    for side, record in (("parent", before), ("settled", after)):
        if not isinstance(record, dict) or record.get("fast") is not False:
            continue
        canary = [v for v in record.get("canary_us") or () if _number(v) is not None]
        ref = _number(record.get("reference_us"))
        if canary and ref:
            processes = record.get("processes")
            where = (f" (the least of {len(processes)} processes)"
                     if isinstance(processes, list) and len(processes) > 1 else "")
            text = (f"host slow on the {side} side: canary {max(canary):.0f} us against its "
                    f"fast {ref:.0f} us after {record.get('attempts')} attempts{where}")
            facts.append(Fact("host_state", text, *((record, None) if side == "parent"
                                                     else (None, record))))
    return facts


def host_speed_facts(before: object, after: object) -> list[Fact]:
    """A fact when the fastest canary the measuring process read (the gate's reference) moved
    by HOST_SPEED_CHANGE between the two sides: the machine's best speed changed (another host
    behind the same machine name, or its state), so every host series moves with it."""
    a = _number(before.get("reference_us")) if isinstance(before, dict) else None
    b = _number(after.get("reference_us")) if isinstance(after, dict) else None
    if a is None or b is None or min(a, b) <= 0 or max(a / b, b / a) < HOST_SPEED_CHANGE:
        return []
    how = f"{b / a:.2f}x slower" if b > a else f"{a / b:.2f}x faster"
    return [Fact("host_state", f"host's fast canary {a:.0f} -> {b:.0f} us: the machine ran "
                 f"{how} at its best (another host, or its state changed)",
                 {"reference_us": a}, {"reference_us": b})]


def host_state_facts(before: list[dict], after: list[dict]) -> list[Fact]:
    """A fact when the host's canary (its slowest reading per side) moved by HOST_CHANGE."""
    a = [v for r in before if (v := _number(r.get("canary_us"))) is not None]
    b = [v for r in after if (v := _number(r.get("canary_us"))) is not None]
    if not a or not b or min(max(a), max(b)) <= 0:
        return []
    slow_a, slow_b = max(a), max(b)
    ratio = slow_b / slow_a
    if max(ratio, 1 / ratio) < HOST_CHANGE:
        return []
    how = f"{ratio:.2f}x slower" if ratio > 1 else f"{1 / ratio:.2f}x faster"
    return [Fact("host_state", f"host canary {slow_a:.0f} -> {slow_b:.0f} us: the host ran "
                 f"{how}", {"canary_us": slow_a}, {"canary_us": slow_b})]


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def error_facts(before: object, after: object) -> list[Fact]:
    if not isinstance(before, dict) or not isinstance(after, dict):
        return []
    facts = []
    a, b = _number(before.get("max_abs")), _number(after.get("max_abs"))
    if a is not None and b is not None and max(a, b) > 0 and \
            (min(a, b) == 0 or max(a, b) / min(a, b) >= MAX_ABS_FACTOR):
        facts.append(Fact("error", f"max_abs error {a:.2g} -> {b:.2g}",
                          {"max_abs": a}, {"max_abs": b}))
    for key, limit in (("scale", SCALE_CHANGE), ("bias", BIAS_CHANGE)):
        a, b = _number(before.get(key)), _number(after.get(key))
        if a is not None and b is not None and abs(b - a) > limit:
            facts.append(Fact("error", f"error {key} {a:.6g} -> {b:.6g}", {key: a}, {key: b}))
    return facts


def step_facts(before: CommitSidecar | None, after: CommitSidecar | None,
               benchmark: str, params: tuple[str, ...]) -> list[Fact]:
    """What the sidecars of the two sides of a step say differed for this series' case;
    [] when either side has no sidecar or did not measure the case."""
    key = case_key(benchmark, params)
    a, b = _measured(before, key), _measured(after, key)
    if a is None or b is None:
        return []
    facts = []
    if a.get("selected") and b.get("selected") and a["selected"] != b["selected"]:
        facts.append(Fact("auto_switch", f"auto switched {a['selected']} -> {b['selected']}",
                          a["selected"], b["selected"]))
    facts += resource_facts(a.get("resources"), b.get("resources"))
    facts += gpu_state_facts(_state(before, key), _state(after, key))
    host = host_gate_facts(a.get("host"), b.get("host"))
    host += host_speed_facts(a.get("host"), b.get("host"))
    group = ("host_before", "host_after")
    facts += host or host_state_facts(_state(before, key, group), _state(after, key, group))
    facts += error_facts(a.get("error"), b.get("error"))
    return facts


class SidecarCache:
    """Reads each commit's sidecar once; a missing or unreadable one is None (the reason of
    an unreadable one is kept in `problems`, never raised: context is optional)."""

    def __init__(self, results_dir, machine: str) -> None:
        self.results_dir, self.machine = results_dir, machine
        self._read: dict[str, CommitSidecar | None] = {}
        self._files: dict | None = None  # the folder's listing, made on the first read
        self.problems: list[dict[str, str]] = []

    def get(self, commit: str) -> CommitSidecar | None:
        if commit not in self._read:
            from kvbench.history.verdict.sidecar import index, read_commit

            try:
                if self._files is None:
                    self._files = index(self.results_dir, self.machine)
                files = self._files.get(commit[:8], []) if isinstance(commit, str) else None
                self._read[commit] = read_commit(self.results_dir, self.machine, commit, files,
                                                 problems=self.problems)
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                self._read[commit] = None
                self.problems.append({"commit": commit, "reason": f"{type(exc).__name__}: {exc}"})
        return self._read[commit]

    def facts(self, before: str, after: str, benchmark: str,
              params: tuple[str, ...]) -> list[Fact]:
        try:
            return step_facts(self.get(before), self.get(after), benchmark, params)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            self.problems.append({"commit": after, "reason": f"{type(exc).__name__}: {exc}"})
            return []
