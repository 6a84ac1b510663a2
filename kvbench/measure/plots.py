"""Pictures of a `kvbench table`: the roofline of its rows (`kvbench table OP --plot PATH`).

One horizontal bar per row, grouped by case, of the row's achieved GB/s (theoretical bytes
over the median time), against two vertical lines: the device's spec memory peak and the
ceiling `kvbench calibrate` measured (the kind the op is scored on: read for decode, copy for
the scatter and gather). A bar's distance to the measured ceiling is what is left to win; a
bar past the spec peak is a measurement bug (report() prints it as a VIOLATION). Rows marked
noisy in the report are hatched.

Input is the table's JSON form (Table.as_json, the file `kvbench table --json` writes), so a
stored table can be drawn again later (`kvbench plot TABLE.json PATH`). matplotlib is
imported lazily, with the Agg backend: no display needed, and the GPU image, which has no
matplotlib, never imports it unless asked to draw.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from kvbench.dispatch.registry import OPS
from kvbench.harness.report import NOISY_IQR
from kvbench.ops import op_module

#: The measured ceiling each op's %ceil divides by (report.CEILING_KINDS), as its op module
#: states it (kvbench.ops.<op>.CEILING).
CEILING_FOR_OP: dict[str, str] = {op: op_module(op).CEILING for op in OPS}

#: Bar colour per impl family (the prefix before '/').
FAMILY_COLOURS = {"triton": "#1f77b4", "cuda": "#2ca02c", "torch": "#9467bd",
                  "peer:flashinfer": "#ff7f0e", "peer:torch": "#8c564b",
                  "bound:page_read": "#7f7f7f"}
_OTHER_COLOUR = "#17becf"


def _family(impl: str) -> str:
    if impl.startswith("bound:"):
        return impl
    return impl.rsplit("/", 1)[0]


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_table(table: object) -> None:
    """ValueError naming the first part of `table` that is not shaped as `kvbench table --json`
    writes it (the fields plot_roofline reads): a file from elsewhere is one error line, not
    a traceback from deep inside the drawing."""
    if not isinstance(table, dict):
        raise ValueError(f"a table JSON object was expected, got {type(table).__name__}")  # noqa: TRY004
    if not isinstance(table.get("op", "?"), str) or not isinstance(table.get("rows", []), list):
        raise ValueError('"op" must be a string and "rows" a list')  # noqa: TRY004
    meta = table.get("metadata") or {}
    if not isinstance(meta, dict):
        raise ValueError('"metadata" must be an object')  # noqa: TRY004
    for key in ("peaks", "ceilings"):
        part = meta.get(key) or {}
        if not isinstance(part, dict) or not all(v is None or _number(v) or isinstance(v, str)
                                                 for v in part.values()):
            raise ValueError(f'"metadata.{key}" must be an object of numbers')
    for i, row in enumerate(table.get("rows", [])):
        work = row.get("work", {}) if isinstance(row, dict) else None
        if not isinstance(work, dict) or not _number(work.get("moved", 0)):
            raise ValueError(f"rows[{i}] must be an object whose work.moved is a number")
        if work.get("moved", 0) <= 0:
            continue
        if not (isinstance(row.get("case"), str) and isinstance(row.get("impl"), str)
                and _number(row.get("gbps")) and isinstance(row.get("note") or "", str)
                and (row.get("iqr_rel") is None or _number(row.get("iqr_rel")))):
            raise ValueError(f"rows[{i}] needs case and impl strings, gbps a number, note a "
                             "string and iqr_rel a number or null")


def plotting_missing() -> str | None:
    """None when matplotlib can be imported, else what to install (the GPU image runs
    without it: a --plot is refused before anything is measured)."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return ("drawing a plot needs matplotlib, which this Python lacks "
                "(pip install matplotlib, or leave out the plot)")
    return None


def plot_roofline(table: dict[str, Any], path: str | os.PathLike, *,
                  ceiling: str | None = None) -> Path:
    """Draw `table` (Table.as_json's dict) to `path` (format from its suffix: .png, .svg,
    .pdf); return the path. `ceiling`: which measured ceiling to draw (copy/read/write;
    default: the op's, CEILING_FOR_OP). ValueError when no row moves bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt


    check_table(table)
    op = table.get("op", "?")
    rows = [r for r in table.get("rows", []) if r.get("work", {}).get("moved", 0) > 0]
    if not rows:
        raise ValueError(f"no row of {op} moves bytes: a roofline has nothing to draw "
                         "(the allocator's rows are host bookkeeping; read its table)")
    meta = table.get("metadata") or {}
    peak = (meta.get("peaks") or {}).get("mem_gbps")
    kind = ceiling or CEILING_FOR_OP.get(op, "copy")
    ceil = (meta.get("ceilings") or {}).get(f"{kind}_gbps")

    cases: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        cases.setdefault(row["case"], []).append(row)
    labels, values, colours, hatches, ticks = [], [], [], [], []
    y = 0.0
    group_edges = []
    for case, members in cases.items():
        start = y
        for row in members:
            label = row["impl"] + (" (warm L2)" if row.get("l2") == "warm" else "")
            if row.get("note"):
                label += f" [{row['note'][:28]}]"
            labels.append(label)
            values.append(row["gbps"])
            colours.append(FAMILY_COLOURS.get(_family(row["impl"]), _OTHER_COLOUR))
            spread = row.get("iqr_rel")
            hatches.append("///" if spread is not None and spread > NOISY_IQR else "")
            ticks.append(y)
            y += 1.0
        group_edges.append((start, y - 1.0, case))
        y += 0.8  # gap between cases

    height = max(3.0, 0.28 * len(values) + 0.35 * len(cases) + 1.6)
    fig, ax = plt.subplots(figsize=(11, height))
    bars = ax.barh(ticks, values, color=colours, height=0.8)
    for bar, hatch in zip(bars, hatches, strict=True):
        if hatch:
            bar.set_hatch(hatch)
            bar.set_edgecolor("black")
    for bar, value in zip(bars, values, strict=True):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {value:.0f}" if value >= 100 else f" {value:.3g}",
                va="center", fontsize=7)
    # Row, case and device names come from the table's JSON: "$...$" in them is not math text.
    ax.set_yticks(ticks, labels, fontsize=7, parse_math=False)
    ax.set_ylim(ticks[-1] + 0.7, -0.7)  # first case on top, no empty band at either end
    for first, last, case in group_edges:
        ax.axhspan(first - 0.5, last + 0.5, color="#f2f2f2", zorder=0)
        ax.text(1.005, (first + last) / 2, case, transform=ax.get_yaxis_transform(),
                va="center", fontsize=8, fontweight="bold", parse_math=False)
    top = max(values)
    if peak:
        ax.axvline(peak, color="#d62728", linestyle="--", linewidth=1.5,
                   label=f"spec peak {peak:.0f} GB/s")
        top = max(top, peak)
    if ceil:
        ax.axvline(ceil, color="#ff7f0e", linestyle="-", linewidth=1.5,
                   label=f"measured {kind} ceiling {ceil:.0f} GB/s")
        top = max(top, ceil)
    ax.set_xlim(0, top * 1.08)
    ax.set_xlabel("achieved GB/s (theoretical bytes / median time)")
    device = meta.get("gpu") or "CPU"
    commit = meta.get("kvbench_commit") or meta.get("commit") or ""
    title = f"kvbench table {op} on {device}" + (f" at {commit}" if commit else "")
    if not peak:
        title += "\n(no spec peak known on this device: a CPU run proves the suite runs)"
    ax.set_title(title, fontsize=10, loc="left", parse_math=False)
    handles, _ = ax.get_legend_handles_labels()
    if any(hatches):
        from matplotlib.patches import Patch

        handles.append(Patch(facecolor="white", edgecolor="black", hatch="///",
                             label=f"noisy: iqr > {NOISY_IQR:.0%} of the median"))
    if handles:  # above the axes, right: never over a bar
        ax.legend(handles=handles, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=3,
                  fontsize=8, frameon=False)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
