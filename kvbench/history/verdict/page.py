"""The dashboard's regressions view: kvbench's verdicts, not asv's bigger-is-worse step detection.

asv's own regressions page runs its step detection on every series with bigger = worse, so it
flags a GB/s *gain* as a regression and a GB/s loss not at all (docs/history.md, "The dashboard").
`kvbench publish` therefore
- refuses a config whose asv regression detection still covers a series whose unit is
  lower-is-worse (`check_asv_config`: `regressions_first_commits` must map it to null), and
- writes html/kvbench/regressions.html and regressions.json from `kvbench regressions` for
  every machine in results/, with a plot per regressed series, and points asv's
  "Regressions" tab at that page (`link_from_index`).
"""

from __future__ import annotations

import html
import itertools
import math
import re
import sys
from pathlib import Path

from kvbench.history.verdict.regressions import SCHEMA, WORSE_SIGN, Verdicts
from kvbench.history.verdict.text import (
    COMMIT_HEADERS,
    HEADERS,
    commit_row,
    format_value,
    no_code_change_lines,
    plot_findings,
    plot_name,
    run_boundary_lines,
    summary_line,
)

PAGE_DIR = "kvbench"
ASV_NAV = '<li id="nav-li-regressions"><a href="#/regressions">Regressions</a></li>'
REGRESSIONS_NAV = ('<li id="nav-li-kvbench-regressions"><a href="kvbench/regressions.html">'
               'Regressions (kvbench)</a></li>')


def asv_entry_names(benchmark: dict) -> list[str]:
    """The names asv's regressions plugin matches its regexes against: `name(p1, p2)`."""
    params = benchmark.get("params") or []
    if not params:
        return [benchmark["name"]]
    return [f"{benchmark['name']}({', '.join(combo)})" for combo in itertools.product(*params)]


def asv_flags_backwards(regressions_first_commits: dict, benchmarks: dict) -> list[str]:
    """Entries of lower-is-worse series that asv's regression detection would still judge.

    asv skips an entry when any regex of `regressions_first_commits` that matches it (with
    re.match, as asv's plugin does) maps to None."""
    wrong = []
    for name, info in benchmarks.items():
        if not isinstance(info, dict) or WORSE_SIGN.get(info.get("unit"), 1) > 0:
            continue
        for entry in asv_entry_names({"name": name, **info}):
            disabled = any(start is None and re.match(regex, entry)
                           for regex, start in regressions_first_commits.items())
            if not disabled:
                wrong.append(entry)
    return wrong


def check_asv_config(conf, benchmarks: dict) -> None:
    """ValueError when asv's regressions page would judge a GB/s series as bigger-is-worse."""
    wrong = asv_flags_backwards(dict(conf.regressions_first_commits or {}), benchmarks)
    if wrong:
        raise ValueError(
            f"asv's regressions page would flag {len(wrong)} lower-is-worse series backwards "
            f"(e.g. {wrong[0]}): asv treats bigger as worse. Add to asv.conf.json "
            '"regressions_first_commits": {".*": null} (kvbench regressions decides) or at '
            'least {".*\\\\.track_gbps": null}')


def _row(f, plot: str | None) -> str:
    lo, hi = f.ci95_pct
    cells = [
        f.verdict + ("" if f.kind == "step" else f" ({f.kind})")
        + (f" ({f.confirmation_label})" if f.confirmation_label else ""),
        f"<code>{html.escape(f.series.name)}</code>"
        + "".join(f'<br><small class="context">{html.escape(fact.text)}</small>'
                  for fact in f.context),
        f"<code>{f.parent[:8]}..{f.settled[:8]}</code> ({f.commits_in_range})",
        html.escape(f"{format_value(f.before, f.series.unit)} -> "
                    f"{format_value(f.after, f.series.unit)}"),
        f"{f.effect_pct:+.1f}% [{lo:+.1f}, {hi:+.1f}]",
        f"{100 * math.expm1(f.noise.within):.2g}%/{100 * math.expm1(f.noise.runs):.2g}%",
        f"{f.mde_pct:.2g}%",
        f'<a href="{html.escape(plot)}">plot</a>' if plot else "",
    ]
    cls = "reg" if f.verdict == "regression" else "imp"
    return f'<tr class="{cls}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _culprit_row(c) -> str:
    """One culprit commit (text.commit_row's cells, escaped: subjects come from git)."""
    cells = [html.escape(cell) for cell in commit_row(c)]
    cells[1] = f"<code>{cells[1]}</code>"
    cells[-1] = f"<code>{cells[-1]}</code>"
    cls = "sus" if c.suspect else ("reg" if c.slower else "imp")
    return f'<tr class="{cls}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def render_page(by_machine: dict[str, Verdicts | str], plots: dict[str, dict[str, str]]) -> str:
    """The HTML page: one section per machine (its Verdicts, or the error that stopped it)."""
    style = ("body{font-family:sans-serif;margin:1em}table{border-collapse:collapse;"
             "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}"
             "tr.reg td{background:#fde8e8}tr.imp td{background:#e8f6e8}"
             "tr.sus td{background:#fdf6e0}")
    intro = ("Steps kvbench confirms in each machine's recorded history: latency (seconds) "
             "regresses up, throughput (GB/s) down; the noise of each series comes from its "
             "own history; its MDE is the smallest step the run would report were it the only "
             "one (with several, Benjamini-Hochberg admits smaller ones) (docs/verdicts.md). "
             f'Raw data: <a href="regressions.json">regressions.json</a> ({SCHEMA} per '
             'machine). <a href="../index.html">Back to the graphs</a>.')
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
             f"<title>kvbench regressions</title><style>{style}</style></head><body>",
             "<h1>kvbench regressions</h1>", f"<p>{intro}</p>"]
    for machine, verdicts in by_machine.items():
        parts.append(f"<h2>{html.escape(machine)}</h2>")
        if isinstance(verdicts, str):
            parts.append(f"<p>not analyzed: {html.escape(verdicts)}</p>")
            continue
        parts.append(f"<p>{html.escape(summary_line(verdicts))}</p>")
        if verdicts.findings:
            parts.append("<h3>By commit</h3><table><tr>" + "".join(
                f"<th>{html.escape(h)}</th>" for h in COMMIT_HEADERS) + "</tr>")
            culprits = verdicts.culprits()
            parts += [_culprit_row(c) for c in culprits]
            parts.append("</table>")
            boundary = run_boundary_lines(culprits) + no_code_change_lines(culprits)
            if boundary:
                parts.append("<p>" + "<br>".join(html.escape(line) for line in boundary)
                             + "</p>")
            parts.append("<h3>By series</h3>")
            parts.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>"
                                                  for h in (*HEADERS, "")) + "</tr>")
            machine_plots = plots.get(machine, {})
            parts += [_row(f, machine_plots.get(f.series.name)) for f in verdicts.findings]
            parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_page(html_dir: str | Path, results_dir: str | Path,
               repo: str | Path | None = None) -> Path:
    """html_dir/kvbench/regressions.{html,json} (+ plots) for every machine in results_dir,
    placed on the history of `repo` (a folder inside the repository; default: the
    repository holding results_dir)."""
    from kvbench.core.jsonfile import write_json_atomic
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import load_history, machines

    out = Path(html_dir) / PAGE_DIR
    out.mkdir(parents=True, exist_ok=True)
    by_machine: dict[str, Verdicts | str] = {}
    plots: dict[str, dict[str, str]] = {}
    for machine in machines(Path(results_dir)):
        try:
            by_machine[machine] = analyze(load_history(results_dir, machine, repo=repo))
        except ValueError as exc:
            print(f"kvbench publish: regressions of {machine} not analyzed: {exc}",
                  file=sys.stderr)
            by_machine[machine] = str(exc)
            continue
        written = plot_findings(by_machine[machine], out / "plots" / machine)
        by_file = {p.name: f"plots/{machine}/{p.name}" for p in written}
        plots[machine] = {f.series.name: by_file[plot_name(f.series.name)]
                          for f in by_machine[machine].findings
                          if plot_name(f.series.name) in by_file}
    write_json_atomic(out / "regressions.json",
                      {m: (r.to_json() if isinstance(r, Verdicts) else {"error": r})
                       for m, r in by_machine.items()}, indent=1)
    page = out / "regressions.html"
    page.write_text(render_page(by_machine, plots), encoding="utf-8")
    return page


def link_from_index(index_html: str) -> str:
    """asv's index.html with its Regressions tab pointing at kvbench's page."""
    if REGRESSIONS_NAV in index_html:
        return index_html
    if ASV_NAV not in index_html:
        raise RuntimeError("asv's index.html has no Regressions tab where kvbench expects it "
                           f"({ASV_NAV!r}): a new asv release; update kvbench.history."
                           "verdict.page.ASV_NAV")
    return index_html.replace(ASV_NAV, REGRESSIONS_NAV)
