"""Between-process noise of the host-side series, per estimator.

Runs `--processes` fresh interpreters (what asv does for identical commits); each measures a
few host-side series (KVAlloc states, the cached dispatch lookup) `--repeats` times with
bench_host, optionally pinned to one core (os.sched_setaffinity). Per series and estimator it
prints the median and max |relative change| between successive processes:

  first      the first measurement's median (what a single measurement per process gives)
  min        the least of the per-repeat medians
  median     the median of the per-repeat medians

--suite measures what the asv suite stores instead: each of `--processes` fresh interpreters
measures the host group as the suite measures one commit (benchmarks/_common.measure_group:
HOST_PROCESSES forked processes, each running KVAlloc's and DispatchOverhead's measure() with
core choice, canary gate and least of HOST_REPEATS; each case the least of them), and
every series is compared between those identical "commits", beside what the first process
alone would have given; the gate's record per case is kept in the JSON.

Each process also records what could explain a slow one: two canaries timed the same way (a
pure-Python loop and a tiny torch CPU op: if they are slow too, the machine was, not the
series), its involuntary context switches, the core's clock where the OS exposes it, and the
load average. Ablations: `--pin fastest` pins to the core the canary probe finds fastest,
`--core N` to core N instead of the last; `--no-aslr` starts each process with address-space
randomisation off (setarch -R); `--device cpu` keeps CUDA out of the process.

    python scripts/host_noise.py --processes 8 --repeats 5 [--pin [last|fastest]] [--core N]
        [--no-aslr] [--device cpu|auto] [--json out.json]
    python scripts/host_noise.py --suite --processes 10 [--runs runs.jsonl] [--json out.json]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # kvbench, benchmarks

from kvbench.core.jsonfile import output_path, write_json_atomic

SERIES = ("alloc freelist bump n=1", "alloc legacy run_search n=64", "dispatch cached")
CANARIES = ("canary python loop", "canary torch cpu op")


def _core_khz(core: int) -> int | None:
    path = f"/sys/devices/system/cpu/cpu{core}/cpufreq/scaling_cur_freq"
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def worker(repeats: int, pin: str, core: int | None, device: str) -> dict:
    from benchmarks import _host

    chosen = {}
    if pin == "fastest":
        chosen = _host.pin_fastest_core()
    elif pin == "last":
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[-1] if core is None else core})
    import resource
    import time

    import torch

    from kvbench.api import KVCacheManager
    from kvbench.dispatch import dispatch
    from kvbench.harness import bench_host
    from kvbench.ops.kv_alloc import prepare_state

    torch.set_num_threads(1)
    dev = "cuda" if device == "auto" and torch.cuda.is_available() else "cpu"
    one = torch.ones(8)
    free = KVCacheManager(1 << 16, device=dev, impl="host/freelist")
    legacy = KVCacheManager(1 << 16, device=dev, impl="torch/legacy")
    dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev)
    calls = {
        SERIES[0]: (lambda: free.alloc(1), lambda: prepare_state(free, "bump", n=1)),
        SERIES[1]: (lambda: legacy.alloc(64), lambda: prepare_state(legacy, "run_search", n=64)),
        SERIES[2]: (lambda: dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device=dev),
                    None),
    }
    calls[CANARIES[0]] = (_host._loop, None)
    calls[CANARIES[1]] = (lambda: one.add(1), None)
    switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
    khz = _core_khz(os.sched_getaffinity(0).pop()) if pin != "none" else None
    started = time.time()
    out = {name: [bench_host(fn, reset).median_us for _ in range(repeats)]
           for name, (fn, reset) in calls.items()}
    out["__process__"] = {
        "started": started, "seconds": time.time() - started, "device": dev,
        "cores": sorted(os.sched_getaffinity(0)), "core_khz": khz,
        "involuntary_switches": resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - switches,
        "loadavg": os.getloadavg(), "chosen": chosen,
        "canary_after_us": _host.canary_us()}
    return out


def suite_worker() -> dict:
    """Every host series of the asv suite, measured as the suite measures one commit, in this
    interpreter: the host group in HOST_PROCESSES forked processes (benchmarks/_common.
    measure_group), each case the least of them; {"Class(params)": {"median_us", "host"}}
    (host["processes"]: each process's own number)."""
    from benchmarks import _common

    out = {}
    for cls, results in _common.measure_group("host").items():
        for key, entry in results.items():
            if isinstance(key, tuple) and "median_us" in entry:
                out[f"{cls}{key}"] = {"median_us": entry["median_us"], "host": entry.get("host")}
    return out


def _one_process(case: dict) -> tuple[float, bool] | None:
    """(number, accepted) of the first measuring process of a case: what one process per
    commit gives (None: that process has no number)."""
    processes = (case["host"] or {}).get("processes")
    if not processes:
        return case["median_us"], (case["host"] or {}).get("fast", True)
    first = processes[0]
    return None if first is None else (first["median_us"], first["fast"])


def suite_main(commits: int, json_path: str | None, runs_file: str | None) -> None:
    """Measure the host group as `commits` identical commits would be (one fresh interpreter
    each), appending each one's output to `runs_file` as it finishes (an interrupted run keeps
    what it measured; a later call measures only the commits still missing), then compare:
    the suite's number (least of its processes) and the first process's alone."""
    existing = Path(runs_file).read_text().splitlines() if runs_file and \
        Path(runs_file).is_file() else []
    runs = [json.loads(line) for line in existing if line.strip()]
    for _ in range(max(0, commits - len(runs))):
        out = subprocess.run([sys.executable, __file__, "--worker", "--suite"], check=True,
                             capture_output=True, text=True).stdout
        line = out.strip().splitlines()[-1]
        runs.append(json.loads(line))
        if runs_file:
            with open(runs_file, "a") as f:
                f.write(line + "\n")
    if len(runs) < 2:
        raise SystemExit(f"{len(runs)} commit(s) measured: nothing to compare")
    series = sorted(set.intersection(*(set(r) for r in runs)))
    table = {}
    print(f"{len(runs)} commits, the suite's host series ({len(series)}): median / max "
          "successive change, the suite's number | the first process alone")
    for name in series:
        values = [r[name]["median_us"] for r in runs]
        firsts = [_one_process(r[name]) for r in runs]
        firsts = [f for f in firsts if f is not None]
        flagged = sum(not (r[name]["host"] or {}).get("fast", True) for r in runs)
        table[name] = {"values": values, "flagged": flagged,
                       "host": [r[name]["host"] for r in runs],
                       **dict(zip(("median_change", "max_change"), changes(values))),
                       "one_process": {
                           "values": [v for v, _ in firsts],
                           "flagged": sum(not fast for _, fast in firsts),
                           **dict(zip(("median_change", "max_change"),
                                      changes([v for v, _ in firsts])))}}
        one = table[name]["one_process"]
        print(f"  {name:52s} {100 * table[name]['median_change']:5.1f}% / "
              f"{100 * table[name]['max_change']:5.1f}% flagged {flagged} | "
              f"{100 * one['median_change']:5.1f}% / {100 * one['max_change']:5.1f}%")
    for label, rows in (("suite", list(table.values())),
                        ("first process", [t["one_process"] for t in table.values()])):
        meds = [t["median_change"] for t in rows]
        tops = [t["max_change"] for t in rows]
        both = sum(m <= 0.05 and x <= 0.15 for m, x in zip(meds, tops))
        print(f"  {label}: median of medians {100 * statistics.median(meds):.1f}%, worst "
              f"median {100 * max(meds):.1f}%, median of maxes {100 * statistics.median(tops):.1f}"
              f"%, worst max {100 * max(tops):.1f}%; median <= 5% and max <= 15%: {both}/"
              f"{len(rows)}; flagged {sum(t['flagged'] for t in rows)} of "
              f"{len(series) * len(runs)}")
    if json_path:
        write_json_atomic(json_path, {"suite": True, "commits": len(runs), "series": table},
                          indent=1)


def changes(values: list[float]) -> tuple[float, float]:
    rel = [abs(b / a - 1) for a, b in itertools.pairwise(values)]
    return statistics.median(rel), max(rel)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=8,
                    help="fresh interpreters to measure in; with --suite each is one "
                         "identical commit, measured as the suite measures a commit")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--pin", nargs="?", const="last", default="none",
                    choices=("none", "last", "fastest"),
                    help="pin each process to its last core (--pin) or to the core the "
                         "canary probe found fastest (--pin fastest)")
    ap.add_argument("--core", type=int, default=None,
                    help="with --pin last: this core instead of the last")
    ap.add_argument("--no-aslr", action="store_true", help="start processes under setarch -R")
    ap.add_argument("--device", choices=("auto", "cpu"), default="auto")
    ap.add_argument("--json", default=None, type=output_path,
                    help="also write the table here (atomically)")
    ap.add_argument("--suite", action="store_true",
                    help="the asv suite's host series, measured as the suite does")
    ap.add_argument("--runs", default=None,
                    help="with --suite: append each commit's output to this JSON-lines file; "
                         "commits it already holds count toward --processes")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.processes < 2 or args.repeats < 1:
        ap.error("--processes must be >= 2 and --repeats >= 1")
    if args.core is not None and (args.pin != "last" or
                                  args.core not in os.sched_getaffinity(0)):
        ap.error(f"--core needs --pin last and one of this process's cores "
                 f"{sorted(os.sched_getaffinity(0))}, got {args.core}")
    if args.suite:
        if args.worker:
            print(json.dumps(suite_worker()))
        else:
            suite_main(args.processes, args.json, args.runs)
        return
    if args.worker:
        print(json.dumps(worker(args.repeats, args.pin, args.core, args.device)))
        return
    runs = []
    for _ in range(args.processes):
        cmd = [sys.executable, __file__, "--worker", "--repeats", str(args.repeats),
               "--device", args.device]
        cmd += ["--pin", args.pin]
        cmd += ["--core", str(args.core)] if args.core is not None else []
        cmd = ["setarch", os.uname().machine, "-R", *cmd] if args.no_aslr else cmd
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    table = {}
    setup = {"pinned": args.pin, "core": args.core, "no_aslr": args.no_aslr,
             "device": args.device, "PYTHONHASHSEED": os.environ.get("PYTHONHASHSEED")}
    print(f"{args.processes} processes x {args.repeats} repeats, {setup}")
    for name in SERIES + CANARIES:
        per = [r[name] for r in runs]
        est = {"first": [p[0] for p in per], "min": [min(p) for p in per],
               "median": [statistics.median(p) for p in per]}
        table[name] = {k: dict(zip(("median_change", "max_change"), changes(v)), values=v)
                       for k, v in est.items()}
        cells = "  ".join(f"{k} {100 * c['median_change']:.1f}% / {100 * c['max_change']:.1f}%"
                          for k, c in table[name].items())
        print(f"  {name:30s} {cells}")
    if args.json:
        write_json_atomic(args.json, {**setup, "processes": args.processes,
                                      "repeats": args.repeats, "series": table,
                                      "per_process": [r["__process__"] for r in runs]},
                          indent=1)


if __name__ == "__main__":
    main()
