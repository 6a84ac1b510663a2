"""The device-session scripts' pure-Python parts (their GPU parts run on the device only).

scripts/ is not a package: each script is loaded from its path. What is checked here is
what a wrong edit would silently break on the device, where a failed call costs minutes:
that a register cap reaches only compiled launches, and that the suite profiler refuses an
unknown class by name.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.kernels import paged_decode as pd
from kvbench.ops.paged_decode import check_page_read, page_read_xor

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

def test_register_cap_only_reaches_compiled_launches(monkeypatch):
    cfg = {"BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "maxnreg": 128}
    monkeypatch.setattr(pd, "_INTERPRET", False)
    assert pd._register_cap(cfg) == {"maxnreg": 128}
    assert pd._register_cap({k: v for k, v in cfg.items() if k != "maxnreg"}) == {}
    monkeypatch.setattr(pd, "_INTERPRET", True)  # the interpreter has no registers to cap
    assert pd._register_cap(cfg) == {}


def test_profile_suite_names_an_unknown_class():
    res = subprocess.run([sys.executable, str(SCRIPTS / "profile_suite.py"), "NoSuchClass"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2
    assert "NoSuchClass" in res.stderr and "PagedDecode" in res.stderr


def test_profile_suite_knows_every_suite_class():
    from benchmarks import _common

    profile = _load("profile_suite")
    grouped = {(m, f, c) for entries in _common.GROUPS.values() for m, f, c in entries}
    assert {(m, f, c) for c, (m, f) in profile.CLASSES.items()} == grouped


def test_page_read_sweep_points_all_run_on_decode_pages(monkeypatch):
    """Every point of sweep_page_read's grid (and the shipped config) is accepted by
    page_read_fn on fp16 and fp8 pages of the decode geometry (a refused point would end the
    device run it was part of); one point per chunk size also runs and is checked in the
    interpreter, which ignores warps and stages."""
    from kvbench.fixtures.pool import paged_pool
    from kvbench.harness.stream_read import PAGE_READ_CONFIG, page_read_fn

    monkeypatch.syspath_prepend(str(SCRIPTS))  # it imports sweep_paged_decode's CASES
    mod = _load("sweep_page_read")
    assert PAGE_READ_CONFIG in mod.GRID, "the shipped config must be one of the swept points"
    for dtype in ("fp16", "fp8"):
        pool = paged_pool(1, 20, kv_heads=8, head_dim=128, page_size=16, dtype=dtype,
                          num_pages=6, min_l2_multiple=0, device="cpu")
        want = page_read_xor(pool)
        ids = pool.attended_page_ids()
        for cfg in mod.GRID:
            read = page_read_fn(pool.k_cache, pool.v_cache, ids, 1, cfg)
            if cfg["num_warps"] == 4 and cfg["num_stages"] == 1 and cfg["programs_per_sm"] == 4:
                check_page_read(read, pool, want)  # one run per chunk size: interpreter time
    rounds = [{"bytes": 16_781_312, "decode": 15.5, "shipped": 9.0, "empty": 4.7,
               "page_read": [{"us": 10.0 + i} for i in range(len(mod.GRID))],
               "contiguous": [{"us": 8.0}, {"us": 7.5}]}]
    line = mod.summary_line("b1_c4k:fp16", rounds)
    assert line.split()[:7] == ["b1_c4k:fp16", "16.8", "15.50", "9.00", "10.00", "7.50", "4.70"]


@pytest.mark.parametrize("script", ["ablate_split_decode", "sweep_page_read",
                                    "bench_cluster_decode", "bench_fp8_v_lines",
                                    "trace_cluster_decode"])
def test_gpu_experiments_name_bad_arguments_before_needing_a_gpu(script, monkeypatch, capsys):
    """A bad --rounds or --case is named at once (on a device call it would otherwise cost the
    machine's start); without CUDA the script says it needs one and exits 2, measuring nothing."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    mod = _load(script)
    with pytest.raises(SystemExit) as exc:
        mod.main(["--rounds", "0"])
    assert exc.value.code == 2 and "--rounds must be >= 1, got 0" in capsys.readouterr().err
    if script == "sweep_page_read":
        with pytest.raises(SystemExit):
            mod.main(["--case", "b3_c5k:fp16"])
        assert "accepted cases are b1_c32k:fp16" in capsys.readouterr().err
    if script == "bench_cluster_decode":
        for bad in ("4", "4,8k", "4,8192,fp32", "4,8192,fp16,paged", "0,8192"):
            with pytest.raises(SystemExit):
                mod.main(["--case", bad])
            err = capsys.readouterr().err
            assert repr(bad) in err and "--case" in err, err
        assert mod.parse_case("4,32768") == ("b4_c32768", 4, 32768, "fp16", "combined")
        assert mod.parse_case("2,8192,fp8") == ("b2_c8192", 2, 8192, "fp8", "v_dim_major")
    if script == "trace_cluster_decode":
        for bad, what in ((["--reps", "0"], "--reps must be >= 1, got 0"),
                          (["--splits", "8,x"], "--splits wants comma-separated split counts"),
                          (["--case", "4"], "--case wants BATCH,CONTEXT")):
            with pytest.raises(SystemExit):
                mod.main(bad)
            assert what in capsys.readouterr().err
    if script.startswith("bench_"):
        with pytest.raises(SystemExit):
            mod.main(["--cluster-lib", "no-label-here"])
        assert "--cluster-lib wants LABEL=PATH, got 'no-label-here'" in capsys.readouterr().err
    monkeypatch.setattr("torch.cuda.is_available", lambda: False)
    assert mod.main([]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err


def test_experiment_rounds_and_mean_table(monkeypatch, tmp_path, capsys):
    """gpu_experiment.run_rounds: every case once per round, in order, the JSON rewritten after
    each case; mean_table: the mean over rounds per column, '-' where a case lacks one."""
    import json

    monkeypatch.syspath_prepend(str(SCRIPTS))
    mod = _load("gpu_experiment")
    calls = []

    def run(case):
        calls.append(case[0])
        return {"a": 1.0 + len(calls), **({"b": 5.0} if case[0] == "x" else {})}

    path = tmp_path / "r.json"
    results = mod.run_rounds(2, [("x",), ("y",)], lambda c: c[0], run, str(path), {"m": 1})
    assert calls == ["x", "y", "x", "y"]
    assert results == {"x": [{"a": 2.0, "b": 5.0}, {"a": 4.0, "b": 5.0}],
                       "y": [{"a": 3.0}, {"a": 5.0}]}
    assert json.loads(path.read_text()) == {"metadata": {"m": 1}, "results": results}
    table = mod.mean_table(results, ["a", "b"], 8, lambda rounds: f" n={len(rounds)}")
    assert [line.split() for line in table.splitlines()] == [
        ["case", "(mean", "us)", "a", "b"], ["x", "3.00", "5.00", "n=2"], ["y", "4.00", "-", "n=2"]]


def test_trace_summary_spans_phases_and_resolution(monkeypatch):
    """trace_cluster_decode.summarize: the span runs from the first CTA's entry to the last
    CTA's end; each phase is a difference of consecutive marks, median and max over CTAs, then
    the median over launches; tick is the smallest step between marks."""
    monkeypatch.syspath_prepend(str(SCRIPTS))
    mod = _load("trace_cluster_decode")
    import torch

    one = torch.tensor([[0, 1000, 2000, 5000, 5100, 5200, 5300, 6000],
                        [500, 1600, 2600, 5500, 5600, 5700, 5800, 7000]])
    two = one + torch.tensor([[0, 0, 0, 0, 0, 0, 0, 2000], [0] * 8])  # CTA 0 ends 2 us later
    s = mod.summarize([one, two, one])
    assert s["span"] == 7.0 and s["entry_skew"] == 0.5
    # torch's median of an even count is the lower middle value
    assert s["entry->issued med"] == 1.0 and s["entry->issued max"] == pytest.approx(1.1)
    assert s["received->stored max"] == pytest.approx(1.2)  # the median launch, not the slow one
    assert s["tick"] == pytest.approx(0.1)
    text = mod.table({"b1_c4096:fp16": [{"s8 cold": s}]})
    assert "b1_c4096:fp16 s8 cold" in text and "p6 received->stored" in text


def test_no_fixed_names_in_the_shared_temp_directory():
    """A fixed path under /tmp (a clone, a list of hashes, a venv whose pip is then run, a JIT
    workspace) can be created first by another user of the machine, who then supplies what is
    read, run or loaded. Work goes to mktemp -d / tempfile.mkdtemp, or the private cache root
    (`python -m kvbench.core.paths NAME`)."""
    import re

    root = SCRIPTS.parent
    fixed = re.compile(r"/tmp/[\w$.{-]|gettempdir\(\)\)?\s*/\s*[\"']")
    found = []
    for folder in ("scripts", "kvbench", "benchmarks", ".ci"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".py", ".sh", "") or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if fixed.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not found, "fixed /tmp paths:\n" + "\n".join(found)
