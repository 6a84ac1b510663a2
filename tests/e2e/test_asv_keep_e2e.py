"""End to end: re-running a commit that has stored numbers never writes NaN over them (issue 37).

The real asv, offline, on a one-commit history built from this checkout (tests/e2e/test_asv_e2e.py).
`asv run` of the KVAlloc class stores a number for every case it measures; a second `asv run`
of the same commit with KVBENCH_ASV_SELECT naming one case records every other case as a skip
"not selected" (NaN to asv). asv 0.6.6 would store those NaNs over the numbers; kvbench's plugin
(kvbench/history/asv/asv_env.py) keeps the stored values, says so on asv's console, and keeps
the sidecar's records of those cases with them, so the result file and the sidecar still agree.
Marked e2e (CI runs it).
"""

from __future__ import annotations

import ast
import itertools
import json
import math

import pytest
from test_asv_e2e import MACHINE, make_history

from benchmarks.runner.sidecar import SUBDIR, SUFFIX

BENCH = "kv_alloc.KVAlloc.track_us"
ONE = "KVAlloc('host/freelist', 'fragmented', 64)"


def _stored(repo, commit: str) -> tuple[list, list, dict]:
    """(param combinations, stored values, the sidecar's records) of BENCH at `commit`."""
    (result,) = (repo / "results" / MACHINE).glob(f"{commit[:8]}-*.json")
    data = json.loads(result.read_text())
    row = data["results"][BENCH]
    values = row[data["result_columns"].index("result")]
    combos = list(itertools.product(*row[data["result_columns"].index("params")]))
    (side,) = (repo / "results" / MACHINE / SUBDIR).glob(f"{commit[:8]}-*{SUFFIX}")
    records = json.loads(side.read_text())["classes"]["KVAlloc"]
    return combos, values, records


def _has_number(value) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


@pytest.mark.e2e
def test_a_rerun_that_skips_cases_keeps_their_stored_numbers(tmp_path):
    hist = make_history(tmp_path, [])
    c0 = hist.commits["c0"]
    common = ["run", "--machine", MACHINE, "--launch-method", "forkserver", "--bench",
              r"kv_alloc\.KVAlloc\.track_us", f"{c0}^!"]
    hist.asv(*common, timeout=900)
    combos, before, _ = _stored(hist.repo, c0)
    measured = [i for i, v in enumerate(before) if _has_number(v)]
    assert len(measured) >= 2, before

    hist.env["KVBENCH_ASV_SELECT"] = ONE
    out = hist.asv(*common, timeout=900)
    combos_after, after, records = _stored(hist.repo, c0)
    assert combos_after == combos
    one = next(i for i, p in enumerate(combos) if f"KVAlloc({', '.join(p)})" == ONE)
    assert _has_number(after[one])
    others = [i for i in measured if i != one]
    assert [after[i] for i in others] == [before[i] for i in others], \
        "a re-run's skips replaced stored numbers"
    assert f"{BENCH}: kept the stored numbers of {len(others)} of {len(combos)} params" in out, \
        out[-3000:]

    # the sidecar agrees with the result file: every stored number has its measured record
    for i in measured:
        record = records[repr(tuple(ast.literal_eval(p) for p in combos[i]))]
        assert record["status"] == "measured", (combos[i], record)
    assert not list((hist.repo / "results" / MACHINE / SUBDIR).glob("*.pending"))
