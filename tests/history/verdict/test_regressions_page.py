"""`kvbench publish` must not contradict `kvbench regressions`.

asv's regressions page judges every series bigger-is-worse: over the committed results most
of the regressions it lists are GB/s gains. The project's asv.conf.json leaves
regression detection to kvbench, `kvbench publish` refuses a config that hands a GB/s series
to asv's detection, and writes kvbench's verdicts into the dashboard. The end-to-end test
runs the real `asv publish` on a synthetic history with a GB/s drop and a GB/s gain.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from kvbench.history.dashboard import publish
from kvbench.history.verdict import page as regressions_page

ROOT = Path(__file__).resolve().parents[3]
GBPS = {"name": "m.C.track_gbps", "unit": "GB/s", "params": [["'a'", "'b'"], ["'x'"]]}
US = {"name": "m.C.track_us", "unit": "seconds", "params": [["'a'", "'b'"], ["'x'"]]}
BENCHMARKS = {"m.C.track_gbps": GBPS, "m.C.track_us": US, "version": 2}


def _conf(first_commits):
    return SimpleNamespace(regressions_first_commits=first_commits)


def test_entry_names_are_asvs():
    assert regressions_page.asv_entry_names(GBPS) == ["m.C.track_gbps('a', 'x')",
                                                      "m.C.track_gbps('b', 'x')"]
    assert regressions_page.asv_entry_names({"name": "m.f"}) == ["m.f"]


@pytest.mark.parametrize("first_commits", [{}, {".*track_us": None},
                                           {r"m\.C\.track_gbps$": None},  # never matches name(
                                           {r".*\.track_gbps": "abc123"}])
def test_config_leaving_gbps_to_asv_is_refused(first_commits):
    with pytest.raises(ValueError, match="lower-is-worse series backwards"):
        regressions_page.check_asv_config(_conf(first_commits), BENCHMARKS)


@pytest.mark.parametrize("first_commits", [{".*": None}, {r".*\.track_gbps": None},
                                           {r"m\.C\.track_gbps\('a'": None,
                                            r"m\.C\.track_gbps\('b'": None}])
def test_config_excluding_gbps_passes(first_commits):
    regressions_page.check_asv_config(_conf(first_commits), BENCHMARKS)


def test_the_projects_config_passes_with_the_committed_benchmarks():
    publish.check_regressions_config(ROOT / "asv.conf.json")


def test_index_tab_points_at_kvbench():
    import asv

    index = (Path(asv.__file__).parent / "www" / "index.html").read_text(encoding="utf-8")
    linked = regressions_page.link_from_index(index)
    assert regressions_page.REGRESSIONS_NAV in linked and regressions_page.ASV_NAV not in linked
    assert regressions_page.link_from_index(linked) == linked
    with pytest.raises(RuntimeError, match="new asv release"):
        regressions_page.link_from_index("<html></html>")


def test_published_dashboard_calls_a_gbps_drop_a_regression(tmp_path):
    from kvbench.history.verdict import simulate as sim

    rng = np.random.default_rng(11)
    n = 24
    commits = sim.git_history(tmp_path, n)
    series = {"drop": 0.85, "gain": 1.15}
    truths = []
    for name, factor in series.items():
        truth = sim.Truth(name, "gpu", "given", sim.THROUGHPUT)
        truth.values = 2000.0 * np.exp(0.004 * rng.standard_normal(n))
        truth.values[12:] *= factor
        truths.append(truth)
    results = sim.write_results(tmp_path, commits, [0] * n, truths, rng)
    benchmarks = json.loads((results / "benchmarks.json").read_text())
    benchmarks[sim.THROUGHPUT].update(code="", timeout=60, pretty_name=sim.THROUGHPUT)
    (results / "benchmarks.json").write_text(json.dumps(benchmarks))
    conf = json.loads(subprocess.run(
        [sys.executable, "-c", "import json,json5,sys; print(json.dumps(json5.load(sys.stdin)))"],
        stdin=(ROOT / "asv.conf.json").open(), capture_output=True, text=True,
        check=True).stdout)
    conf = {k: conf[k] for k in ("version", "project", "dvcs", "branches", "results_dir",
                                 "html_dir", "regressions_first_commits") if k in conf}
    conf.update(repo=".", project_url="#")
    (tmp_path / "asv.conf.json").write_text(json.dumps(conf))

    subprocess.run([sys.executable, "-m", "asv", "publish", "--config",
                    str(tmp_path / "asv.conf.json")], check=True, capture_output=True,
                   cwd=tmp_path)
    html = tmp_path / "html"
    assert json.loads((html / "regressions.json").read_text())["regressions"] == []
    page = publish.add_regressions_page(tmp_path / "asv.conf.json")
    text = page.read_text(encoding="utf-8")
    data = json.loads((page.parent / "regressions.json").read_text())
    findings = {f["series"]: f for f in data[sim.MACHINE]["findings"]}
    drop = findings[f"{sim.THROUGHPUT}('drop')"]
    gain = findings[f"{sim.THROUGHPUT}('gain')"]
    assert drop["verdict"] == "regression" and drop["commit"] == commits[12]
    assert gain["verdict"] == "improvement"
    assert text.index("track_gbps(&#x27;drop&#x27;)") < text.index("track_gbps(&#x27;gain&#x27;)")
    assert '<tr class="reg">' in text and "plot</a>" in text
    # one line per culprit commit above the per-series table, as the terminal table has it
    assert text.index("By commit") < text.index(f"<code>{commits[12][:8]}</code>") \
        < text.index("By series")
    assert data[sim.MACHINE]["culprits"][0]["commit"] == commits[12]
    plot = next((page.parent / "plots" / sim.MACHINE).iterdir())
    assert plot.stat().st_size > 10_000
    assert regressions_page.REGRESSIONS_NAV in (html / "index.html").read_text(encoding="utf-8")
