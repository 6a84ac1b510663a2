"""`kvbench table OP --plot PATH`: a real picture (size and pixel variance), not an empty file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbench.cli import main as cli_main
from kvbench.measure.plots import plot_roofline

DATA = Path(__file__).resolve().parents[2] / "tests" / "data"


def _pixels_vary(path: Path) -> float:
    import matplotlib.image

    image = matplotlib.image.imread(str(path))
    return float(image[..., :3].std())


def _table(rows, peak=4814.0, read=4609.0):
    return {"op": "paged_decode",
            "metadata": {"gpu": "NVIDIA H200", "commit": "abc1234",
                         "peaks": {"mem_gbps": peak, "tc_tflops": 989.5},
                         "ceilings": {"read_gbps": read, "copy_gbps": 4263.0}},
            "rows": rows}


def _row(impl, case, gbps, **extra):
    return {"impl": impl, "case": case, "gbps": gbps, "work": {"moved": 1e9, "flops": 0},
            "l2": "cold", "note": "", **extra}


def test_roofline_png_is_a_real_picture(tmp_path):
    rows = [_row(impl, case, gbps) for case in ("b1_c4k fp16", "b64_c8k fp16")
            for impl, gbps in (("triton/split_kv", 3000.0), ("torch/gather_sdpa", 900.0),
                               ("bound:page_read", 4400.0))]
    rows.append(_row("triton/single_pass", "b64_c8k fp16", 4300.0, iqr_rel=0.4))
    out = plot_roofline(_table(rows), tmp_path / "roof.png")
    assert out.stat().st_size > 20_000
    assert _pixels_vary(out) > 0.05, "the picture is (nearly) one colour"


def test_a_table_without_bytes_is_refused(tmp_path):
    alloc = {"op": "kv_alloc", "metadata": {}, "rows": [
        {"impl": "host/freelist", "case": "bump n=1", "gbps": 0.0, "work": {"moved": 0.0}}]}
    with pytest.raises(ValueError, match="moves bytes"):
        plot_roofline(alloc, tmp_path / "x.png")
    with pytest.raises(SystemExit) as exc:
        cli_main(["table", "kv_alloc", "--plot", str(tmp_path / "x.png")])
    assert exc.value.code == 2


def test_table_plot_on_this_machine(tmp_path, capsys):
    """The CLI end to end on a CPU (the gather table is seconds): the PNG exists and varies."""
    out = tmp_path / "gather.png"
    assert cli_main(["table", "kv_gather_fp8", "--plot", str(out)]) == 0
    assert f"roofline plot: {out}" in capsys.readouterr().out
    assert out.stat().st_size > 10_000 and _pixels_vary(out) > 0.05


def test_plot_of_a_stored_h200_table(tmp_path):
    stored = sorted(DATA.glob("h200-*/table_kv_gather_fp8_*.json"))
    assert stored, "no stored H200 gather table under tests/data"
    out = tmp_path / "h200.png"
    assert cli_main(["plot", str(stored[-1]), str(out)]) == 0
    assert out.stat().st_size > 20_000 and _pixels_vary(out) > 0.05
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"op": "kv_write", "rows": []}))
    assert cli_main(["plot", str(bad), str(tmp_path / "b.png")]) == 2


def test_a_plot_without_matplotlib_is_refused_before_measuring(tmp_path, capsys, monkeypatch):
    """The GPU image runs without matplotlib: `table --plot` measured the whole table, then
    ended in a ModuleNotFoundError traceback; `kvbench plot` let it through too."""
    import importlib.util

    from kvbench.measure import table

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "matplotlib" else real(name, *a))
    monkeypatch.setattr(table, "Table", lambda *a, **k: pytest.fail("measured"))
    with pytest.raises(SystemExit) as exc:
        cli_main(["table", "kv_gather_fp8", "--plot", str(tmp_path / "g.png")])
    assert exc.value.code == 2 and "needs matplotlib" in capsys.readouterr().err
    stored = max(DATA.glob("h200-*/table_kv_gather_fp8_*.json"))
    assert cli_main(["plot", str(stored), str(tmp_path / "p.png")]) == 2
    assert "kvbench plot: drawing a plot needs matplotlib" in capsys.readouterr().err
