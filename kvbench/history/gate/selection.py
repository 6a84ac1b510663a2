"""What to measure for a fresh A/B of a few named series, and no more.

`kvbench regressions --confirm` (its suspects) and `kvbench compare`'s recheck (the series its
first A/B called changed) measure a handful of series again. asv's --bench regex picks their
benchmarks, and the suite's selection (KVBENCH_ASV_SELECT) narrows each measuring process to
their one case, or their one class, so a recheck costs a case's processes and not the suite's.
Series are named as asv names them: `module.Class.method(param, ...)`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable


def split_name(name: str) -> tuple[str, str]:
    """asv's series name as (benchmark, its params' text): `m.C.track_us('a', 64)` gives
    ('m.C.track_us', "'a', 64"); a benchmark without params gives (name, '')."""
    benchmark, paren, params = name.partition("(")
    return benchmark, params[:-1] if paren else ""


def bench_regex(names: Iterable[str]) -> str:
    """asv --bench regex matching exactly the series' benchmarks (asv matches a
    parameterized benchmark by its name with the params: `name(...)`)."""
    benchmarks = sorted({split_name(n)[0] for n in names})
    return "^(" + "|".join(re.escape(b) for b in benchmarks) + r")(\(|$)"


def narrowest_selection(names: Iterable[str]) -> str | None:
    """The suite's selection that measures every named series and least else: their one
    case ("Class('row', 'fp16', 'b1_c4k')", its latency and GB/s series alike) when they
    share one, else their one class, else None (the whole suite)."""
    cases = [split_name(n) for n in names]
    if not cases or any(b.count(".") < 2 for b, _ in cases):
        return None
    classes = {b.split(".")[-2] for b, _ in cases}
    params = {p for _, p in cases}
    if len(classes) != 1:
        return None
    (cls,) = classes
    if len(params) == 1:
        (text,) = params
        if text:
            return f"{cls}({text})"
    return cls
