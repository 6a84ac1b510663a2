"""Presenting one machine's Verdicts: the table (rich on a terminal, plain text otherwise)
and plots.

Two views. By commit (the default, what a CI gate reads): one line per culprit commit, with
its subject line, how many series it made slower and faster (a µs series and its GB/s twin
count once), its worst and median effect, and whether it is only a suspect (one point at an
end of the history, not yet confirmed); worst commit first. By series (`--by series`): one
line per finding, as below.

The per-series table is sorted worst first: regressions by how much worse they made the series, then
improvements. Values are shown in the series' unit (seconds scaled to µs/ms, GB/s as is);
effects as after/before - 1 with their 95% interval, beside the series' noise (between
processes of one run / between runs) and the minimum detectable effect the step was held to
(3 x the within-run noise when a run has commits on both sides of it, else 3 x the total),
so a reader sees at once how far above the noise a step is. Where the sidecars of the step's
two sides say what else differed (kvbench/history/verdict/context.py: auto's row, kernel resources,
GPU clocks, measured error), a "context" column (rich) or a line under the finding (plain)
shows it; without sidecars the table is exactly as before.
"""

from __future__ import annotations

import math
import re
import statistics
import sys
from pathlib import Path
from typing import TextIO

from kvbench.history.verdict.regressions import Culprit, Finding, Verdicts

HEADERS = ("verdict", "series", "commits", "before -> after", "effect [95% CI]",
           "noise in/across runs", "MDE")
COMMIT_HEADERS = ("verdict", "commit", "subject", "slower", "faster", "worst", "median",
                  "worst series")
VIEWS = ("commit", "series")


def format_value(value: float | None, unit: str) -> str:
    """A value in its unit, seconds scaled to a readable prefix (µs, ms, s); "n/a" for None.
    The one spelling of a value in kvbench's history output: the table, the page, bisect."""
    if value is None:
        return "n/a"
    if unit == "seconds":
        for scale, prefix in ((1e-6, "µs"), (1e-3, "ms")):
            if value < scale * 1000:
                return f"{value / scale:.4g} {prefix}"
        return f"{value:.4g} s"
    return f"{value:.4g} {unit}"


def commit_range(f: Finding) -> str:
    """`parent..settled` with the commit count, and the measured commits in between."""
    text = f"{f.parent[:8]}..{f.settled[:8]} ({f.commits_in_range} commit" \
           f"{'s' if f.commits_in_range != 1 else ''})"
    if len(f.transition) > 2:
        text += f" via {len(f.transition)} measured commits"
    elif f.transition:
        text += " via " + ",".join(c[:8] for c in f.transition)
    return text


def row(f: Finding) -> tuple[str, ...]:
    unit = f.series.unit
    lo, hi = f.ci95_pct
    verdict = f.verdict if f.kind == "step" else f"{f.verdict} ({f.kind})"
    if f.confirmation_label:
        verdict += f" ({f.confirmation_label})"
    return (verdict, f.series.name, commit_range(f),
            f"{format_value(f.before, unit)} -> {format_value(f.after, unit)}",
            f"{f.effect_pct:+.1f}% [{lo:+.1f}, {hi:+.1f}]",
            f"{_pct(f.noise.within)}/{_pct(f.noise.runs)}", f"{f.mde_pct:.2g}%")


def context_text(f: Finding) -> str:
    """The finding's sidecar facts in one line ("" when there are none)."""
    return "; ".join(fact.text for fact in f.context)


def _pct(log_sigma: float) -> str:
    return f"{100 * math.expm1(log_sigma):.2g}%"


def commit_row(c: Culprit) -> tuple[str, ...]:
    worst = max(c.findings, key=lambda f: f.worse_pct)
    verdict = "regression" if c.slower else "improvement"
    if c.suspect:
        verdict = f"suspect {verdict}"
    labels = sorted({f.confirmation_label for f in c.findings if f.confirmation_label})
    if labels:
        verdict += f" ({', '.join(labels)})"
    if c.changed_measured_code is False:
        verdict += " (no code changed)"
    return (verdict, c.commit[:8], c.subject[:60], str(len(c.slower)), str(len(c.faster)),
            f"{c.worst_pct:+.1f}%", f"{c.median_pct:+.1f}%", worst.series.name)


def not_judged_lines(verdicts: Verdicts) -> list[str]:
    """Why series were not judged, one line per reason with its count (largest first)."""
    reasons: dict[str, int] = {}
    for v in verdicts.verdicts:
        if v.noise is None:
            reasons[v.why_not or "not judged"] = reasons.get(v.why_not or "not judged", 0) + 1
    return [f"  {n} series not judged: {why}" for why, n in
            sorted(reasons.items(), key=lambda kv: -kv[1])]


def set_aside_lines(verdicts: Verdicts, *, top: int = 5) -> list[str]:
    """The stretches of commits whose points were set aside as slow processes, the most
    series first: many series at one stretch, and only the rows one change touches, is more
    likely a change undone a few commits later than a slow process, which a fresh A/B of the
    parent and the stretch's first commit tells."""
    by_stretch: dict[tuple[str, str, str, int], list[float]] = {}
    for v in verdicts.verdicts:
        for e in v.set_aside:
            if not verdicts.after_since(e.last):  # before --since: not this report's span
                continue
            key = (e.commit, e.last, e.parent, e.points)
            by_stretch.setdefault(key, []).append(e.slower_pct)
    if not by_stretch:
        return []
    ranked = sorted(by_stretch.items(), key=lambda kv: (-len(kv[1]), kv[0]))
    points = sum(len(v) * key[3] for key, v in by_stretch.items())
    lines = [(f"{points} point(s) set aside as slow processes (one to a few consecutive "
              "commits slower than the agreeing points either side); to tell them from a "
              "change undone a few commits later: kvbench compare PARENT COMMIT")]
    for (commit, last, parent, n), pcts in ranked[:top]:
        where = commit[:8] if n == 1 else f"{commit[:8]}..{last[:8]} ({n} commits)"
        lines.append(f"  {where} (parent {parent[:8]}): {len(pcts)} series, median "
                     f"{statistics.median(pcts):+.1f}%")
    if len(ranked) > top:
        lines.append(f"  ... and {len(ranked) - top} more (the JSON's series[].set_aside)")
    return lines


def run_boundary_lines(culprits: list[Culprit]) -> list[str]:
    """The culprit commits (Verdicts.culprits) that start a new measurement run, with the
    command that tells a run's level from a change of the code there ([] when none do)."""
    found = [c for c in culprits if c.at_run_boundary]
    if not found:
        return []
    lines = [(f"{len(found)} culprit commit(s) start a new measurement run: a new run's level "
              "(another lease or host) reads like a step there; to tell: kvbench compare "
              "PARENT COMMIT")]
    lines += [f"  {c.commit[:8]} (parent {c.parent[:8]}): {len(c.slower)} slower, "
              f"{len(c.faster)} faster" for c in found]
    return lines


def no_code_change_lines(culprits: list[Culprit], *, shown: int = 3) -> list[str]:
    """The culprit commits whose range changed no file a measurement reads
    (Culprit.changed_measured_code is False), with what they did change ([] when none)."""
    found = [c for c in culprits if c.changed_measured_code is False]
    if not found:
        return []
    lines = [(f"{len(found)} culprit commit(s) changed no file a measurement reads (docs, "
              "tests, results, scripts, the suite or asv's config only): the machine's level "
              "moved there, not the code; kvbench compare PARENT COMMIT measures both on one "
              "machine")]
    for c in found:
        more = f" and {len(c.changed) - shown} more" if len(c.changed) > shown else ""
        lines.append(f"  {c.commit[:8]} (parent {c.parent[:8]}): {len(c.slower)} slower, "
                     f"{len(c.faster)} faster; "
                     f"changed {', '.join(c.changed[:shown]) or 'nothing'}{more}")
    return lines


def summary_line(verdicts: Verdicts) -> str:
    h = verdicts.history
    judged = sum(v.noise is not None for v in verdicts.verdicts)
    since = f" since {verdicts.since[:8]}" if verdicts.since else ""
    problems = (f"; {len(h.skipped)} result file(s) skipped or trimmed (listed below)"
                if h.skipped else "")
    unjudged = len(verdicts.verdicts) - judged
    if unjudged:
        problems += (f"; {unjudged} series NOT judged (reasons below: record more commits, or "
                     "keep a noise model of this machine)")
    improvements = sum(f.verdict == "improvement" and f.kind != "suspect"
                       for f in verdicts.findings)
    suspects = f", {_counted(len(verdicts.suspects), 'suspect')}" if verdicts.suspects else ""
    return (f"{h.machine}: {len(h.commits)} measured commits up to {h.head[:8]}, "
            f"{judged} of {len(verdicts.verdicts)} series judged{since}: "
            f"{_counted(len(verdicts.regressions), 'regression')}, "
            f"{_counted(improvements, 'improvement')}{suspects}{problems}")


def _counted(n: int, noun: str) -> str:
    """'1 regression', '0 regressions', '2 regressions'."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def host_mde_lines(verdicts: Verdicts) -> list[str]:
    """The smallest step each host-side series can show: its minimum detectable effect, one
    line per series, largest first ([] when no series was judged at the host's speed).

    Host-side series (those whose sidecars carry the host gate's canary, so the engine judges
    them at the host's typical speed) are measured by one process per commit and move between
    commits far more than a GPU kernel's series: a reader of a quiet table needs to know how
    large a host step would have had to be to appear in it."""
    host = sorted((v for v in verdicts.verdicts if v.host_speed_scaled and v.mde_pct is not None),
                  key=lambda v: -v.mde_pct)
    if not host:
        return []
    lines = [(f"minimum detectable effect at the newest commit of the {len(host)} host-side series "
              "(judged at the host's typical speed):")]
    lines += [f"  {v.mde_pct:6.3g}%  {v.series.name}" for v in host]
    return lines


def print_table(verdicts: Verdicts, out: TextIO | None = None, *, rich: bool | None = None,
                by: str = "commit") -> None:
    """The findings, worst first, on `out` (default: sys.stdout at the time of the call), one
    line per culprit commit (`by="commit"`) or per finding (`by="series"`); `rich` defaults
    to whether `out` is a terminal."""
    if by not in VIEWS:
        raise ValueError(f"by must be one of {', '.join(VIEWS)}, got {by!r}")
    out = sys.stdout if out is None else out
    culprits = verdicts.culprits() if verdicts.findings else []
    if by == "commit":
        headers = COMMIT_HEADERS
        rows = [commit_row(c) for c in culprits]
        contexts = [""] * len(rows)
    else:
        headers = HEADERS
        rows = [row(f) for f in verdicts.findings]
        contexts = [context_text(f) for f in verdicts.findings]
    use_rich = out.isatty() if rich is None else rich
    if use_rich:
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # Every cell a plain Text: series and param names come from result files, and rich
        # would read "[/red]" or "[link=...]" in them as its own markup.
        table = Table(title=Text(summary_line(verdicts)), title_justify="left")
        for header in headers + (("context",) if any(contexts) else ()):
            table.add_column(header, overflow="fold")
        for r, context in zip(rows, contexts):
            style = ("yellow" if r[0].startswith("suspect")
                     else "red" if r[0].startswith("regression") else "green")
            cells = (*r, *((context,) if any(contexts) else ()))
            table.add_row(*(Text(cell) for cell in cells), style=style)
        Console(file=out).print(table)
    else:
        print(summary_line(verdicts), file=out)
        if rows:
            widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
            for r, context in zip((headers, *rows), ("", *contexts)):
                print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
                if context:
                    print(f"            context: {context}", file=out)
    for line in not_judged_lines(verdicts):
        print(line, file=out)
    for f in verdicts.dismissed:
        print(f"dismissed suspect {f.series.name} at {f.commit[:8]}: a fresh A/B found "
              f"{f.confirmation.get('outcome') if f.confirmation else 'nothing'}", file=out)
    for line in run_boundary_lines(culprits) + no_code_change_lines(culprits):
        print(line, file=out)
    for line in host_mde_lines(verdicts):
        print(line, file=out)
    for line in set_aside_lines(verdicts):
        print(line, file=out)
    for skipped in verdicts.history.skipped:
        print(f"skipped {skipped['file']}: {skipped['reason']}", file=out)
    for problem in verdicts.sidecar_problems:
        print(f"sidecar of {problem['commit'][:8]} not read: {problem['reason']}", file=out)


def plot_name(series_name: str) -> str:
    """A file name for a series: its asv name with every run of other characters as '_'."""
    return re.sub(r"[^A-Za-z0-9.=-]+", "_", series_name).strip("_")[:180] + ".png"


def plot_findings(verdicts: Verdicts, out_dir: str | Path, *,
                  verdict: str = "regression") -> list[Path]:
    """One PNG per series with a `verdict` finding: its history, its runs, its steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    by_series: dict[str, list[Finding]] = {}
    for f in verdicts.findings:
        by_series.setdefault(f.series.name, []).append(f)
    written = []
    for name, findings in by_series.items():
        if not any(f.verdict == verdict for f in findings):
            continue
        series = findings[0].series
        scale, label = (1e-6, "µs") if series.unit == "seconds" else (1.0, series.unit)
        commits = [p.commit for p in series.points]
        values = [p.value / scale for p in series.points]
        runs = [verdicts.history.runs.get(c, 0) for c in commits]
        fig, ax = plt.subplots(figsize=(max(6.0, 0.25 * len(commits)), 4.0))
        ax.scatter(range(len(values)), values, c=runs, cmap="tab10", s=18, zorder=3,
                   label="measured commit (colour: run)")
        ax.plot(range(len(values)), values, color="0.75", lw=0.8, zorder=2)
        for f in findings:
            i_parent, i_settled = commits.index(f.parent), commits.index(f.settled)
            color = "tab:red" if f.verdict == "regression" else "tab:green"
            ax.hlines(f.before / scale, max(0, i_parent - f.points_before + 1), i_parent,
                      colors=color, linestyles="dashed")
            ax.hlines(f.after / scale, i_settled,
                      min(len(values) - 1, i_settled + f.points_after - 1), colors=color)
            ax.axvspan(i_parent, i_settled, color=color, alpha=0.15)
            note = f"{f.verdict} {f.effect_pct:+.1f}%\n{f.parent[:8]}..{f.settled[:8]}"
            note += "".join(f"\n{fact.text}" for fact in f.context)
            ax.annotate(note,  # names from result files: "$...$" is not math text here
                        (i_settled, f.after / scale), textcoords="offset points",
                        xytext=(4, 6), fontsize=7, color=color, parse_math=False)
        ax.set_xticks(range(len(commits)), [c[:7] for c in commits], rotation=90, fontsize=6)
        ax.set_ylabel(label)
        facts = [fact.text for f in findings for fact in f.context]
        title = f"{verdicts.history.machine}: {name}"
        if facts:
            title += "\n" + "; ".join(dict.fromkeys(facts))
        ax.set_title(title, fontsize=8, parse_math=False)
        ax.legend(fontsize=6, loc="best")
        fig.tight_layout()
        path = out_dir / plot_name(name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
