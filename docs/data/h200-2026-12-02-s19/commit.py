"""One identical "commit" of the host group, measured as the suite measures it
(benchmarks/_common.measure_group: forked processes one after another, each case the least of
them), with two changes under test: torch imported by this supervising process before the
children fork (instead of by each child), and HOST_PROCESSES / HOST_REPEATS set from the
command line. Each child also records, per case, the median of every repeat of every gate
attempt (pipeline.least_median's calls), so that fewer repeats and fewer processes can be
replayed from the same run. Prints one JSON line: {"suite": {"Class(params)": {"median_us",
"host"}}, "repeats": [per process: {"Class(params)": [attempt: [call: [repeat medians]]]}],
"kept_attempt": ..., "child_s": [...], "import_torch_s": ...}.
    python commit.py PROCESSES REPEATS"""
import json
import os
import sys
import time

sys.path.insert(0, os.getcwd())
processes, repeats = int(sys.argv[1]), int(sys.argv[2])
os.environ["KVBENCH_HOST_PROCESSES"] = str(processes)
t0 = time.perf_counter()
import torch  # noqa: F401  (the change under test: imported before the children fork)

import_torch_s = time.perf_counter() - t0
from benchmarks import _common as c
from benchmarks import _isolate

c.HOST_REPEATS = repeats
orig_here, orig_cases, orig_host_case = c.measure_group_here, c.run_cases, c.measure_host_case
record: dict = {}
current: list = [None]


def here(group):
    from kvbench.measure import pipeline
    orig_least = pipeline.least_median

    def least_median(measure, n=1):
        medians = []

        def one():
            t = measure()
            medians.append(t.median_us)
            return t
        out = orig_least(one, n)
        record[current[0]][-1].append(medians)
        return out
    pipeline.least_median = least_median
    out = orig_here(group)
    print("REPEATS " + json.dumps(record), flush=True)
    return out


def run_cases(keys, body, results):
    def one(key):
        current[0] = f"{c._measuring[-1]}{tuple(key)}"
        record[current[0]] = []
        return body(key)
    return orig_cases(keys, one, results)


def measure_host_case(measure):
    def attempt():
        record[current[0]].append([])
        return measure()
    return orig_host_case(attempt)


c.measure_group_here, c.run_cases, c.measure_host_case = here, run_cases, measure_host_case
child_s = []
orig_iso = _isolate.run_isolated


def run_isolated(*a, **k):
    t = time.perf_counter()
    out = orig_iso(*a, **k)
    child_s.append(round(time.perf_counter() - t, 2))
    return out


_isolate.run_isolated = run_isolated
suite = {}
for cls, results in c.measure_group("host").items():
    for key, entry in results.items():
        if isinstance(key, tuple) and "median_us" in entry:
            suite[f"{cls}{key}"] = {"median_us": entry["median_us"], "host": entry.get("host")}
print("RESULT " + json.dumps({"processes": processes, "repeats": repeats, "suite": suite,
                              "child_s": child_s, "import_torch_s": round(import_torch_s, 2)}))
