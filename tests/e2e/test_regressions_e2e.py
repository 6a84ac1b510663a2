"""End to end: a real `asv run` writes sidecars, and `kvbench regressions` reads a real fact.

The history (tests/test_asv_e2e.py builds it from this checkout):

    c0 base   b0, b1, c1 harmless   c2 PREFER   c3, c4, c5 harmless

PREFER lowers the registry priority of the allocator's host/freelist row below torch/legacy:
with no measured perf table (a fresh HOME), `auto` then runs torch/legacy from c2 on, a slower
allocator on the run_search state. `asv run` of the KVAlloc class over every commit; then the
regressions engine over those results must find the auto run_search series' step at c2 (four
measured commits on each side: one measuring process per commit reads a host series well
apart between identical commits on the 2-core runner under load, and the engine counts a side
of three commits or fewer as one commit) and
say why from the sidecars the suite wrote: "auto switched host/freelist -> torch/legacy".
The series selected by name keep their row (no switch fact there), and every measured case's
sidecar record carries what the host gate saw. Marked e2e (CI runs it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_asv_e2e import MACHINE, harmless, make_history

from benchmarks.runner.sidecar import SUBDIR, SUFFIX

FREELIST = '''        priority=20,
        doc="host bump cursor + free list, rows copied to the device without a sync",'''


def prefer_legacy(repo: Path) -> None:
    path = repo / "kvbench" / "dispatch" / "registry.py"
    text = path.read_text()
    assert FREELIST in text, "the registry's host/freelist row moved: update the plant"
    path.write_text(text.replace(FREELIST, FREELIST.replace("priority=20", "priority=5")))


@pytest.mark.e2e
def test_a_real_auto_switch_is_named_beside_its_step(tmp_path):
    steps = [("b0", harmless(10)), ("b1", harmless(11)), ("c1", harmless(1)),
             ("c2", prefer_legacy), ("c3", harmless(3)),
             ("c4", harmless(4)), ("c5", harmless(5))]
    hist = make_history(tmp_path, steps)
    c = hist.commits
    hist.asv("run", "--machine", MACHINE, "--launch-method", "forkserver", "--bench",
             r"kv_alloc\.KVAlloc\.track_us", "ALL", timeout=1500)

    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import load_history

    report = analyze(load_history(hist.repo / "results", MACHINE, repo=hist.repo))
    assert report.sidecar_problems == []
    by_series = {(f.series.params, f.settled): f for f in report.findings}
    for n in ("1", "64"):
        found = by_series.get((("'auto'", "'run_search'", n), c["c2"]))
        assert found is not None, (n, [(f.series.name, f.settled[:8]) for f in report.findings])
        assert found.verdict == "regression"
        # c1 is b1's code; a slow spell of the 2-core runner at c1 can lift it off the old level,
        # and the engine then names it as part of the step's transition
        assert found.parent == c["c1"] or (found.parent == c["b1"]
                                           and found.transition == (c["c1"],)), found
        texts = [fact.text for fact in found.context]
        assert "auto switched host/freelist -> torch/legacy" in texts, texts
    sidecars = sorted((hist.repo / "results" / MACHINE / SUBDIR).glob(f"*.suite{SUFFIX}"))
    assert len(sidecars) == 8, sidecars
    for path in sidecars:  # one measuring process per commit, every case through the gate
        cases = json.loads(path.read_text())["classes"]["KVAlloc"].values()
        measured = [r for r in cases if r["status"] == "measured"]
        assert len(measured) == 18, path.name
        for record in measured:
            assert record["host"]["reference_us"] > 0 and record["host"]["attempts"] >= 1
            assert "processes" not in record["host"]
    for f in report.findings:  # a row named by its selector never switches
        if f.series.params[0] != "'auto'":
            assert all(fact.kind != "auto_switch" for fact in f.context), f.series.name
