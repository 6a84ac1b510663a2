"""`kvbench regressions --confirm`: a fresh A/B measurement of every suspect.

A suspect is one point at an end of the history (regressions.py): a step or an outlier,
which the history cannot tell apart. For each suspect commit the suite is measured again,
parent against commit, in interleaved process runs (compare.run_compare: only the suspect
series' benchmarks, and per class only their one case or the class: selection.py),
and each suspect series is judged by compare.judge: a regression (or improvement) in the
fresh runs becomes a reported finding with the A/B evidence attached; no change dismisses
it; anything else leaves it a suspect, with the evidence (a series the fresh runs could not
measure, with why: NOT_MEASURED_AFRESH).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from kvbench.history.bisect import abtest
from kvbench.history.gate.compare import SCHEMA, Comparison
from kvbench.history.verdict.regressions import NOT_MEASURED_AFRESH


def confirm(verdicts, measure: Callable[[str, str, list], Comparison]):
    """Verdicts with every suspect confirmed, dismissed or left suspect.

    measure(parent, commit, findings) runs the fresh A/B of those findings' series (the
    command passes compare.run_compare over an asv measurer)."""
    suspects: dict[tuple[str, str], list] = {}
    for f in verdicts.suspects:
        suspects.setdefault((f.parent, f.commit), []).append(f)
    replaced: dict[int, object] = {}
    dismissed = []
    for (parent, commit), findings in suspects.items():
        result = measure(parent, commit, findings)
        by_name = {s.series: s for s in result.series}
        for f in findings:
            fresh = by_name.get(f.series.name)
            if fresh is None:
                name = f.series.name
                why = (f"broken at {commit[:8]}: {result.broken[name]}" if name in result.broken
                       else result.unmatched.get(name, "no value at either commit"))
                replaced[id(f)] = dataclasses.replace(f, confirmation={
                    "schema": SCHEMA, "base": parent, "head": commit,
                    "outcome": NOT_MEASURED_AFRESH, "reason": why})
                continue
            evidence = {"schema": SCHEMA, "base": parent, "head": commit,
                        "outcome": fresh.outcome, "reason": fresh.reason, **fresh.to_json()}
            if fresh.outcome == f.verdict:
                replaced[id(f)] = dataclasses.replace(f, kind="step", confirmation=evidence)
            elif fresh.outcome in (abtest.NO_CHANGE, abtest.REGRESSION, abtest.IMPROVEMENT):
                dismissed.append(dataclasses.replace(f, confirmation=evidence))
                replaced[id(f)] = None
            else:
                replaced[id(f)] = dataclasses.replace(f, confirmation=evidence)
    for v in verdicts.verdicts:
        v.findings = [replaced.get(id(f), f) for f in v.findings if replaced.get(id(f), f)]
    verdicts.dismissed = dismissed
    return verdicts
