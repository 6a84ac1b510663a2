"""What to measure for a fresh A/B of a few named series, and no more.

`kvbench regressions --confirm` (its suspects) and `kvbench compare`'s recheck (the series its
first A/B called changed) measure a handful of series again. asv's --bench regex picks their
benchmarks, and the suite's selection (KVBENCH_ASV_SELECT) narrows each measuring process to
their case or their class, per class, so a recheck costs those cases' processes and not the
suite's.
Series are named as asv names them: `module.Class.method(param, ...)`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping

#: Between the names of a selection: a case's params hold commas, never this. The suite's
#: worker (benchmarks/runner/worker.py) keeps its own copy, since it runs under old commits'
#: kvbench, which lack this module; tests/benchmarks/test_bench_select.py keeps them equal.
SELECT_SEPARATOR = ";"


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
    """The suite's selection that measures every named series and least else: per class,
    their one case ("Class('row', 'fp16', 'b1_c4k')", its latency and GB/s series alike) when
    that class's series share one, else the class; several classes' selections joined by
    SELECT_SEPARATOR. None (the whole suite) when there is no name or a name has no class."""
    cases = [split_name(n) for n in names]
    if not cases or any(b.count(".") < 2 for b, _ in cases):
        return None
    params: dict[str, set[str]] = {}
    for benchmark, text in cases:
        params.setdefault(benchmark.split(".")[-2], set()).add(text)
    selections = []
    for cls, texts in sorted(params.items()):
        text = next(iter(texts)) if len(texts) == 1 else ""
        selections.append(f"{cls}({text})" if text else cls)
    return f"{SELECT_SEPARATOR} ".join(selections)


def suite_cases(benchmarks: Mapping) -> dict[str, set[str]]:
    """{class: its cases as a selection names them, "Class('a', 1)"} from asv's discovery
    (benchmarks.json: each benchmark's params as reprs)."""
    cases: dict[str, set[str]] = {}
    for name, desc in benchmarks.items():
        if not isinstance(desc, Mapping) or name.count(".") < 2:
            continue
        cls = name.split(".")[-2]
        combos = itertools.product(*desc.get("params") or [])
        cases.setdefault(cls, set()).update(f"{cls}({', '.join(c)})" for c in combos)
    return cases


def check_selection(select: str, benchmarks: Mapping) -> None:
    """ValueError unless every name of a selection (SELECT_SEPARATOR between names) is a
    class of the suite asv discovered, or one of a class's cases written as asv writes its
    params: a typo would otherwise measure nothing and a gate would pass on no series."""
    cases = suite_cases(benchmarks)
    names = [n.strip() for n in select.split(SELECT_SEPARATOR) if n.strip()]
    if not names:
        raise ValueError(f"--select {select!r} names no class")
    for name in names:
        cls = name.partition("(")[0].strip()
        if cls not in cases:
            raise ValueError(f"--select {name!r}: the suite has no class {cls!r}; its classes: "
                             f"{', '.join(sorted(cases))}")
        if "(" in name and name not in cases[cls]:
            example = min(cases[cls], default=f"{cls}()")
            raise ValueError(f"--select {name!r}: not a case of {cls} (a case is written as asv "
                             f"writes its params, e.g. {example})")


def bench_pattern(regex: str) -> re.Pattern:
    """`regex` compiled; ValueError naming it when it is not a regular expression (asv would
    stop with a traceback once the run has started)."""
    try:
        return re.compile(regex)
    except re.error as exc:
        raise ValueError(f"--bench {regex!r}: not a regular expression ({exc})") from None


def check_bench(regex: str, benchmarks: Mapping) -> None:
    """ValueError unless `regex` (asv --bench: re.search on a benchmark's name, or on its name
    with one param combination) matches something in the suite asv discovered."""
    pattern = bench_pattern(regex)
    for name, desc in benchmarks.items():
        if not isinstance(desc, Mapping):
            continue
        if pattern.search(name) or any(
                pattern.search(f"{name}({', '.join(c)})")
                for c in itertools.product(*desc.get("params") or [])):
            return
    raise ValueError(f"--bench {regex!r} matches no benchmark of the suite (e.g. "
                     f"{min(n for n, d in benchmarks.items() if isinstance(d, Mapping))})")
