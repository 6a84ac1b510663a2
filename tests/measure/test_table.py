"""`kvbench table`: correctness-checked rows, the dispatch explain(), JSON for tools (CPU)."""

import json

import pytest

from kvbench.dispatch.core import clear_decisions
from kvbench.fixtures.gather_pool import gather_pool_tokens
from kvbench.measure.table import main


def test_kv_alloc_table_checks_every_state_and_writes_json(tmp_path, capsys):
    out = tmp_path / "alloc.json"
    assert main(["kv_alloc", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    rows = {(r["impl"], r["case"]) for r in data["rows"]}
    for impl in ("torch/legacy", "host/freelist"):
        for state in ("bump", "run_search", "fragmented"):
            for n in (1, 64):
                assert (impl, f"{state} n={n}") in rows
                assert f"{impl} @ {state} n={n}" in data["max_abs_diff"]
    assert ("dispatch/cached", "kv_alloc n=1") in rows
    assert data["host_floor_us"] > 0
    assert data["event_floor_us"] is None  # no event-timed row, no event floor measured
    assert data["violations"] == []
    assert all(r["timer"] == "bench_host" for r in data["rows"])
    printed = capsys.readouterr().out
    assert "# command: kvbench table kv_alloc" in printed and "dispatch/cached" in printed
    assert "CPU run of GPU kernels" not in printed  # host rows are real host costs


def test_cpu_run_of_gpu_kernels_says_what_it_is(capsys):
    assert main(["kv_gather_fp8"]) == 0
    assert "# note: CPU run of GPU kernels" in capsys.readouterr().out


@pytest.mark.parametrize("interpret", [False, True], ids=["plain", "TRITON_INTERPRET=1"])
def test_gather_table_names_the_dispatched_row_and_says_why_rows_are_missing(
    tmp_path, monkeypatch, interpret
):
    # On a CPU the Triton rows get no number, interpreter or not (timing interpreted kernels
    # takes minutes and measures the interpreter); the table must say so.
    if interpret:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    else:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    clear_decisions()  # decisions cached by earlier tests were made with the interpreter on
    out = tmp_path / "gather.json"
    assert main(["kv_gather_fp8", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert {r["impl"] for r in data["rows"]} == {"torch/gather"}  # no CUDA: torch row only
    assert all(r["gbps"] > 0 for r in data["rows"])
    # Triton rows are listed with the reason they did not run, not silently dropped.
    assert any("triton/vectorized" in k and "interpreter's timings mean nothing" in v
               for k, v in data["skipped"].items())
    assert "selected:" in next(iter(data["explain"].values()))
    assert all(r["iqr_rel"] is not None for r in data["rows"])  # every row carries its spread


def test_gather_pool_tokens_cpu_is_twice_kv_len_in_whole_pages():
    assert gather_pool_tokens(8192, "cpu") == 16384
    assert gather_pool_tokens(100, "cpu") == 256
    assert gather_pool_tokens(0, "cpu") == 64
    with pytest.raises(ValueError, match="kv_len"):
        gather_pool_tokens(-1, "cpu")


def _filled(impl: str, case: str, us: float, moved: float, *, then: BaseException | None = None):
    """A stand-in table builder: one event-timed row into the Table main passes (its floor
    preset, so nothing is measured), then `then` raised if given."""
    from kvbench.harness import Row, Work

    def build(*, table, **_):
        table.rows.append(Row(impl, case, us, Work(moved=moved)))
        table.event_floor_us = 1.0
        if then is not None:
            raise then
        return table

    return build


def test_a_row_above_the_spec_peak_is_in_the_json_and_the_exit_status(
        tmp_path, monkeypatch, capsys):
    """A number above a spec peak is a measurement bug: printed, written, and the run fails."""
    from kvbench.harness.peaks import DevicePeaks
    from kvbench.measure import table as table_mod

    peaks = DevicePeaks("NVIDIA H200", 4800.0, 989.5, 60 << 20, 132, True)
    monkeypatch.setattr(table_mod, "device_peaks", lambda *a, **k: peaks)
    impossible = _filled("triton/scatter", "c", 1.0, 6e6)  # 6000 GB/s
    monkeypatch.setitem(table_mod.BUILDERS, "kv_write", impossible)
    out = tmp_path / "w.json"
    assert main(["kv_write", "--json", str(out)]) == 2
    data = json.loads(out.read_text())
    assert data["violations"] == [
        "VIOLATION triton/scatter | c: 6000 GB/s is 125.0% of the 4800 GB/s spec peak"]
    assert data["event_floor_us"] == 1.0
    assert "VIOLATION triton/scatter | c" in capsys.readouterr().out


def test_a_bad_json_path_is_refused_before_anything_is_measured(
    tmp_path, monkeypatch, capsys, unwritable_dir
):
    from kvbench.measure import table as table_mod

    def never(**_):
        raise AssertionError("measured although the output path was unusable")

    monkeypatch.setitem(table_mod.BUILDERS, "kv_alloc", never)
    for bad, why in ((tmp_path, "is a directory"), (tmp_path / "no" / "t.json", "does not exist"),
                     (tmp_path / "t.json" / "x.json", "does not exist"),
                     (unwritable_dir / "t.json", "is not writable")):
        (tmp_path / "t.json").write_text("a file, not a directory")
        with pytest.raises(SystemExit) as exc:
            main(["kv_alloc", "--json", str(bad)])
        assert exc.value.code == 2
        err = capsys.readouterr().err
        assert f"--json: {bad}: " in err and why in err


def test_main_job_reports_a_failing_op_and_runs_the_others(tmp_path, monkeypatch, capsys):
    from kvbench.harness import Row, Work
    from kvbench.measure import table as table_mod

    ran = []

    def fine(op):
        def build(**_):
            ran.append(op)
            t = table_mod.Table(op)
            t.rows.append(Row("x/y", "c", 100.0, Work(moved=1e6)))
            t.event_floor_us = 1.0
            return t
        return build

    def broken(**_):
        raise RuntimeError("kernel exploded")

    for op in table_mod.BUILDERS:
        monkeypatch.setitem(table_mod.BUILDERS, op, fine(op))
    monkeypatch.setitem(table_mod.BUILDERS, "kv_write", broken)
    assert table_mod.run_all(json_dir=str(tmp_path / "out")) == 1
    assert ran == [op for op in table_mod.BUILDERS if op != "kv_write"]
    assert "kvbench table kv_write failed: RuntimeError: kernel exploded" in capsys.readouterr().err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(
        f"{op}.json" for op in table_mod.BUILDERS if op != "kv_write")


def test_an_interrupted_table_keeps_and_marks_what_it_measured(tmp_path, monkeypatch, capsys):
    """Ctrl-C in the middle of a table: the rows measured so far are printed and written
    (marked interrupted), the status is 130, and the main job stops there."""
    from kvbench.measure import table as table_mod

    interrupted = _filled("torch/gather", "kv2k", 50.0, 1e6, then=KeyboardInterrupt())
    monkeypatch.setitem(table_mod.BUILDERS, "kv_gather_fp8", interrupted)
    out = tmp_path / "g.json"
    assert main(["kv_gather_fp8", "--json", str(out)]) == 130
    data = json.loads(out.read_text())
    assert data["interrupted"] is True and [r["impl"] for r in data["rows"]] == ["torch/gather"]
    assert "INTERRUPTED: the rows above" in capsys.readouterr().out

    after = []
    monkeypatch.setitem(table_mod.BUILDERS, "kv_alloc", lambda **_: after.append(1))
    monkeypatch.setitem(table_mod.BUILDERS, "paged_decode", lambda **kw: kw["table"])
    monkeypatch.setitem(table_mod.BUILDERS, "kv_write", lambda **kw: kw["table"])
    assert table_mod.run_all() == 130
    assert after == []  # kv_alloc comes after the interrupted op: not started


def _bare_call(device: str, moved: int = 4096):
    """One bare call as the op (no gate, no proof): what the table's row plumbing sees."""
    import torch

    from kvbench.harness import Work
    from kvbench.ops.common import OpInputs, Problem

    problem = Problem("kv_write", "fp16", frozenset(), {"n": 1}, torch.device(device))
    return OpInputs(problem, (), {}, Work(moved=moved), check=lambda fn: 0.0,
                    calls=lambda fn, row: [(fn, None)])


@pytest.mark.gpu
def test_a_row_that_syncs_the_host_gets_a_bench_host_row_beside_it():
    """The event timer's samples of a call that waits for the GPU hold host gaps (the torch
    kv_write row's nonzero): the table prints the caller's wall time beside it. A clean call
    this small sits within KERNEL_TIMER_FLOOR_FACTOR of the event floor, so its CUPTI kernel
    time is printed beside it."""
    import torch

    from kvbench.measure.table import Table, _measured_rows

    def inputs():
        return _bare_call("cuda:0")

    x = torch.ones(1 << 10, device="cuda")
    table = Table("kv_write")
    clean = _measured_rows(table, inputs(), "k", "c", lambda: x.mul_(1.0))
    assert [r.timer for r in clean] == ["bench", "bench_kernel"]
    syncing = _measured_rows(table, inputs(), "k", "c", lambda: torch.nonzero(x))
    assert [(r.timer, r.host_syncs) for r in syncing] == [("bench", True), ("bench_host", False)]
    warm = _measured_rows(table, inputs(), "k", "c", lambda: torch.nonzero(x), l2="warm")
    assert warm[0].l2 == "warm"


@pytest.mark.gpu
def test_kernel_time_row_beside_a_row_far_above_the_floor():
    """A call of ~a millisecond: its event row alone, and with --kernel-time a CUPTI row
    beside it that reads no more than the events (kernels without the launch gaps)."""
    import torch

    from kvbench.measure.table import Table, _measured_rows

    inputs = _bare_call("cuda:0", moved=1 << 30)
    x = torch.ones(1 << 28, device="cuda")
    plain = _measured_rows(Table("kv_write"), inputs, "k", "c", lambda: x.mul_(1.0))
    assert [r.timer for r in plain] == ["bench"]
    both = _measured_rows(Table("kv_write", kernel_time=True), inputs, "k", "c",
                          lambda: x.mul_(1.0))
    assert [r.timer for r in both] == ["bench", "bench_kernel"]
    assert both[1].us <= both[0].us * 1.05


def test_kernel_time_asks_for_the_cupti_row_beside_every_gpu_row(monkeypatch):
    """Without --kernel-time only a row near the event floor gets its kernel time; with it,
    every GPU row does (a row far above the floor here), and a host-timed row never does."""
    from kvbench.harness.timers import TimingResult
    from kvbench.measure import pipeline

    kernel_calls = []
    monkeypatch.setattr(pipeline, "_event_floor_us", lambda device: 5.0)
    monkeypatch.setattr(pipeline, "bench_kernel",
                        lambda call, **kw: kernel_calls.append(kw) or "cupti")
    inputs = _bare_call("cpu")

    def timing(median_us: float, timer: str = "bench") -> TimingResult:
        return TimingResult(median_us, (median_us,), timer, "cold", "cuda:0")

    far = timing(500.0)
    assert pipeline.companion_timings(inputs, lambda: None, far) == []
    assert pipeline.companion_timings(inputs, lambda: None, far, kernel_time=True) == [
        ("cupti", "CUPTI kernel time")]
    assert pipeline.companion_timings(inputs, lambda: None, timing(12.0)) == [
        ("cupti", "CUPTI kernel time")]
    assert pipeline.companion_timings(inputs, lambda: None, timing(500.0, "bench_host"),
                                      kernel_time=True) == []
    assert kernel_calls == [{"l2": "cold", "device": inputs.problem.device}] * 2


def test_kernel_time_without_cuda_is_refused_by_name(monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main(["paged_decode", "--kernel-time"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--kernel-time" in err and "CUDA device" in err


def test_grid_without_cuda_is_refused_by_name(monkeypatch, capsys):
    """--grid on a CPU measured the small CPU cases and said nothing of the grid asked for."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exc:
        main(["paged_decode", "--grid", "--no-ablations"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--grid is the GPU's batch x context grid" in err and "no CUDA device" in err


@pytest.mark.parametrize("flag", [["--grid"], ["--no-ablations"], ["--geometry", "llama3-8b"]])
def test_decode_only_flags_are_refused_for_other_ops(flag, capsys):
    """A flag that would be ignored is named instead: the user asked for rows that would
    silently not be there."""
    with pytest.raises(SystemExit) as exc:
        main(["kv_write", *flag])
    assert exc.value.code == 2
    assert f"{flag[0]} applies to paged_decode only, not kv_write" in capsys.readouterr().err


# ---- paged_decode --geometry --------------------------------------------------------------

#: An interpreter-free CPU case small enough for a table test (the CPU table's own cases
#: take longer at these geometries).
TINY_CASE = ("b2_c48", 2, 48)


@pytest.fixture
def tiny_cpu_table(monkeypatch):
    """The decode table on this CPU as a user runs it (no TRITON_INTERPRET: torch rows and
    peers only, auto picks a torch row), at TINY_CASE."""
    from kvbench.measure import table as table_mod

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(table_mod, "DECODE_CASES_CPU", (TINY_CASE,))
    clear_decisions()  # decisions cached by earlier tests were made with the interpreter on
    yield
    clear_decisions()


def test_geometry_table_has_every_row_auto_and_sdpa_at_the_geometry(tmp_path, tiny_cpu_table):
    """`--geometry llama3-8b` on a CPU: the torch row, the SDPA peer and auto (the torch row's
    timing, its pick named) at the geometry's case; the rows a CPU cannot time listed with
    their reasons; the geometry's figures in the JSON."""
    from kvbench.ops.decode_geometry import GEOMETRIES

    out = tmp_path / "geo.json"
    assert main(["paged_decode", "--geometry", "llama3-8b", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    case = "b2_c48 fp16 llama3-8b"
    rows = {r["impl"]: r for r in data["rows"]}
    assert set(rows) == {"torch/gather_sdpa", "peer:torch/sdpa_contiguous", "auto"}
    assert all(r["case"] == case and r["gbps"] > 0 for r in data["rows"])
    assert rows["auto"]["note"] == "ran torch/gather_sdpa"
    assert rows["auto"]["us"] == rows["torch/gather_sdpa"]["us"]
    assert data["max_abs_diff"][f"auto @ {case}"] == data["max_abs_diff"][
        f"torch/gather_sdpa @ {case}"]
    assert "Triton rows are not timed" in data["skipped"][f"triton/split_kv @ {case}"]
    assert "CUDA rows need a GPU" in data["skipped"][f"cuda/cluster_decode @ {case}"]
    assert data["geometries"] == {"llama3-8b": GEOMETRIES["llama3-8b"].as_dict()}
    assert "options=()" in data["explain"][case] and "head_dim=128" in data["explain"][case]


def test_geometry_table_applies_the_geometrys_options(tmp_path, tiny_cpu_table):
    """gemma-2-9b: its window and soft-cap reach the rows, the reference and dispatch; torch
    SDPA, which has no soft-cap, is listed as not measured with that reason."""
    out = tmp_path / "gemma.json"
    assert main(["paged_decode", "--geometry", "gemma-2-9b", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    case = "b2_c48 fp16 gemma-2-9b"
    assert {r["impl"] for r in data["rows"]} == {"torch/gather_sdpa", "auto"}
    assert "torch SDPA has no logit soft-cap" in data["skipped"][
        f"peer:torch/sdpa_contiguous @ {case}"]
    assert "options=('window', 'softcap')" in data["explain"][case]


def test_geometry_table_says_when_auto_picks_a_row_without_a_number(tiny_cpu_table):
    """auto's row is the number of the row it picks; where that row has none here (not asked
    for, as below, or not timed on a CPU) the auto row is listed as not measured, naming its
    pick and why."""
    from kvbench.measure.table import Table, decode_case
    from kvbench.ops.decode_geometry import GEOMETRIES

    table = Table("paged_decode")
    decode_case(table, "b1_c16", 1, 16, geometry=GEOMETRIES["qwen2.5-7b"],
                rows=("cuda/cluster_decode",), with_peers=False)
    assert table.rows == []
    assert table.skipped["auto @ b1_c16 fp16 qwen2.5-7b"] == (
        "auto picks torch/gather_sdpa, which has no number here: not measured")


def test_geometry_all_measures_every_geometry_at_every_case_and_nothing_else(monkeypatch):
    """`--geometry all`: each geometry at each of the table's cases (fp16), in the table's
    order; none of the default geometry's dtype or layout rows."""
    from kvbench.measure import table as table_mod
    from kvbench.ops.decode_geometry import GEOMETRIES, select_geometries

    calls = []
    monkeypatch.setattr(table_mod, "decode_case", lambda table, label, b, c, **kw: calls.append(
        (label, kw["geometry"].name, sorted(kw))))
    table_mod.table_paged_decode(geometries=select_geometries("all"))
    cases = [label for label, _, _ in table_mod.DECODE_CASES_CPU]
    assert calls == [(label, name, ["geometry"]) for name in GEOMETRIES for label in cases]


def test_a_bad_geometry_is_refused_with_the_accepted_names(capsys):
    from kvbench.ops.decode_geometry import GEOMETRIES

    with pytest.raises(SystemExit) as exc:
        main(["paged_decode", "--geometry", "llama-9000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"--geometry: unknown geometry 'llama-9000'; accepted: all, {', '.join(GEOMETRIES)}" \
        in err


def test_the_sdpa_peer_attends_to_the_window_only():
    """With a window the SDPA peer's contiguous copy holds the window's tokens: it passes the
    gate of a windowed case (and would fail it reading every token)."""
    from kvbench.measure.peers import decode_peers
    from kvbench.ops.paged_decode import decode_inputs, decode_pool

    pool = decode_pool(2, 40, "fp16", "cpu", kv_heads=2, head_dim=32)
    inputs = decode_inputs(pool, 4, window=24)
    q = inputs.extra["q"]
    assert inputs.check(decode_peers(pool, q, window=24)["peer:torch/sdpa_contiguous"]) >= 0
    with pytest.raises(Exception, match="paged_decode"):
        inputs.check(decode_peers(pool, q)["peer:torch/sdpa_contiguous"])


def test_each_row_is_scored_against_its_case_bytes_only_bound_like_with_like():
    from kvbench.harness import Row, Work
    from kvbench.measure.table import PAGE_READ_BOUND, bound_ratios

    w = Work(moved=1e6)
    rows = [
        Row(PAGE_READ_BOUND, "b1 fp16", 8.0, w),
        Row("triton/split_kv", "b1 fp16", 16.0, w),
        Row("peer:x", "b1 fp16", 12.0, w),
        Row("triton/split_kv", "b1 fp16 warm", 9.0, w, l2="warm"),  # no warm bound: not scored
        Row(PAGE_READ_BOUND, "b64 fp16", 400.0, w, l2="warm"),
        Row("triton/split_kv", "b64 fp16", 420.0, w, l2="warm"),
        Row("triton/split_kv", "b64 fp16", 440.0, w),  # cold row, warm bound only: not scored
        Row("triton/split_kv", "no bound", 5.0, w),
    ]
    assert bound_ratios(rows) == {
        "b1 fp16": {"triton/split_kv": 2.0, "peer:x": 1.5},
        "b64 fp16": {"triton/split_kv": 1.05},
    }
