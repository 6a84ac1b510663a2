"""report(): column order, percentages only where a peak is known, violations, floor, warm."""

import io

import pytest

from kvbench.harness import Row, Work, report
from kvbench.harness.calibrate import Ceilings
from kvbench.harness.peaks import DevicePeaks
from kvbench.harness.report import VIOLATION_CHECKS

H200 = DevicePeaks(
    "NVIDIA H200", mem_gbps=4800.0, tc_tflops=989.5, l2_bytes=60 << 20, sm_count=132, is_cuda=True
)
CPU = DevicePeaks("some cpu", None, None, None, None, False)


def _header(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("impl"))


def _row_line(text: str, impl: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(impl))


def test_throughput_columns_come_before_latency_and_labels():
    text = report([Row("a", "c", 10.0, Work(flops=1e6, moved=1e6))], peaks=H200, file=None)
    cols = _header(text).split()
    order = ["TFLOP/s", "%tc", "GB/s", "%bw", "%ceil", "us", "l2", "timer"]
    assert [cols.index(c) for c in order] == sorted(cols.index(c) for c in order)


def test_percentages_of_spec_peak():
    # 2.4 GB in 1000 us = 2400 GB/s = 50% of 4800.
    text = report([Row("triton/split_kv", "c", 1000.0, Work(moved=2.4e9))], peaks=H200, file=None)
    line = _row_line(text, "triton/split_kv")
    assert "2400" in line and "50%" in line
    assert "VIOLATION" not in text


def test_impossible_row_is_a_violation_with_the_check_order():
    # 6 GB in 1000 us = 6000 GB/s > 4800 GB/s spec peak.
    text = report([Row("fast", "too good", 1000.0, Work(moved=6e9))], peaks=H200, file=None)
    assert "VIOLATION" in _row_line(text, "fast")
    assert "VIOLATION fast | too good" in text
    positions = [text.index(check) for check in VIOLATION_CHECKS]
    assert positions == sorted(positions)
    assert VIOLATION_CHECKS[0].startswith("unit factors")
    assert VIOLATION_CHECKS[-1].startswith("a baseline doing a different operation")


def test_tensor_core_violation_is_flagged_too():
    text = report([Row("mm", "c", 1.0, Work(flops=2e9))], peaks=H200, file=None)  # 2000 TFLOP/s
    assert "TFLOP/s is" in text and "tensor-core spec peak" in text


def test_cpu_peaks_print_no_percentages():
    text = report([Row("a", "c", 10.0, Work(flops=1e9, moved=1e9))], peaks=CPU, file=None)
    line = _row_line(text, "a ")
    assert "%" not in line
    assert "VIOLATION" not in text  # no peak, nothing to violate, nothing guessed


def test_default_peaks_come_from_this_device(device):
    text = report([Row("a", "c", 10.0, Work(moved=1e6))], file=None)
    if device == "cpu":
        assert "%" not in _row_line(text, "a ")


def test_warm_rows_are_labelled_as_the_optimistic_bound():
    text = report([Row("a", "c", 10.0, Work(moved=1e6), l2="warm")], peaks=H200, file=None)
    assert "warm*" in _row_line(text, "a ")
    assert "optimistic bound" in text
    cold = report([Row("a", "c", 10.0, Work(moved=1e6))], peaks=H200, file=None)
    assert "optimistic bound" not in cold
    host = report([Row("alloc", "c", 4.0, Work(), l2="warm", timer="bench_host")], peaks=CPU,
                  file=None)
    assert "caches not flushed on purpose" in host and "optimistic bound" not in host


def test_floor_row_only_when_a_row_is_near_the_floor():
    rows = [Row("slow", "c", 1000.0, Work(), timer="bench_host"),
            Row("fast", "c", 25.0, Work(), timer="bench_host")]
    text = report(rows, peaks=CPU, floor_us=10.0, file=None)
    assert "host floor 10.0 us: bench_host rows near it measure the floor" in text
    assert "~floor" in _row_line(text, "fast") and "~floor" not in _row_line(text, "slow")
    far = report(rows[:1], peaks=CPU, floor_us=10.0, file=None)
    assert "host floor" not in far


def test_each_floor_marks_only_rows_of_its_own_timer():
    """A 15 us event-timed kernel is not at the host floor (10 us, a synchronize and a clock
    read), and a 12 us host-timed call is not at the event floor: each timer has its own."""
    rows = [Row("kernel", "c", 15.0, Work()),  # timer "bench"
            Row("stateful", "c", 9.0, Work(), timer="bench_stateful"),
            Row("host", "c", 12.0, Work(), timer="bench_host")]
    text = report(rows, peaks=CPU, floor_us=10.0, event_floor_us=4.7, file=None)
    assert "~floor" not in _row_line(text, "kernel")
    assert "~floor" in _row_line(text, "stateful") and "~floor" in _row_line(text, "host")
    assert "event-timer floor 4.70 us" in text and "host floor 10.0 us" in text
    only_kernel = report(rows[:1], peaks=CPU, floor_us=10.0, event_floor_us=4.7, file=None)
    assert "~floor" not in only_kernel and "floor 4.70" not in only_kernel
    at_event_floor = report(rows[:1], peaks=CPU, floor_us=10.0, event_floor_us=6.0, file=None)
    assert "~floor" in _row_line(at_event_floor, "kernel") and "host floor" not in at_event_floor
    # CUPTI kernel time excludes launch and timer overhead: no floor applies (it was compared
    # with the host floor, which a table measures when any row syncs the host)
    cupti = [Row("cupti", "c", 12.0, Work(), timer="bench_kernel"), rows[2]]
    text = report(cupti, peaks=CPU, floor_us=10.0, event_floor_us=6.0, file=None)
    assert "~floor" not in _row_line(text, "cupti") and "~floor" in _row_line(text, "host")


def test_violation_lines_do_not_round_an_excess_away():
    from kvbench.harness import violations

    just_over = Row("k", "c", 1000.0, Work(moved=4.8048e9))  # 4804.8 GB/s: 100.1% of 4800
    assert violations([just_over], H200) == [
        "VIOLATION k | c: 4805 GB/s is 100.1% of the 4800 GB/s spec peak"]
    assert violations([Row("k", "c", 1000.0, Work(moved=4.8e9))], H200) == []
    assert violations([just_over], CPU) == []


def test_ceiling_column_uses_the_chosen_measured_ceiling():
    ceilings = Ceilings(
        "NVIDIA H200",
        copy_gbps=4000.0,
        read_gbps=4200.0,
        write_gbps=3400.0,
        measured_at="2026-11-29T00:00:00+00:00",
        torch="2.11",
        triton="3.6",
    )
    row = Row("a", "c", 1000.0, Work(moved=2.1e9))  # 2100 GB/s
    text = report([row], peaks=H200, ceilings=ceilings, file=None)
    assert "52%" in _row_line(text, "a ")  # of copy 4000 (default)
    assert "copy ceiling 4000" in text
    text = report([row], peaks=H200, ceilings=ceilings, ceiling="read", file=None)
    assert "50%" in _row_line(text, "a ")  # of read 4200


def test_a_row_above_the_measured_ceiling_is_flagged_but_not_a_violation():
    ceilings = Ceilings("NVIDIA H200", copy_gbps=4000.0, read_gbps=4200.0, write_gbps=3400.0,
                        measured_at="2026-11-29T00:00:00+00:00", torch="2.11", triton="3.6")
    over = Row("over", "c", 1000.0, Work(moved=4.3e9))  # 4300 GB/s: 102.4% of read 4200
    under = Row("under", "c", 1000.0, Work(moved=4.1e9))
    text = report([over, under], peaks=H200, ceilings=ceilings, ceiling="read", file=None)
    assert ">ceil" in _row_line(text, "over")
    assert ">ceil" not in _row_line(text, "under")
    assert "over | c (102.4%)" in text and "under | c" not in text
    assert "VIOLATION" not in text
    assert ">ceil" not in report([under], peaks=H200, ceilings=ceilings, ceiling="read", file=None)


def test_zero_work_columns_show_dash_not_zero():
    text = report([Row("alloc", "bump", 5.0, Work(), timer="bench_host")], peaks=H200, file=None)
    cells = _row_line(text, "alloc").split()
    assert cells[2:7] == ["-"] * 5  # TFLOP/s %tc GB/s %bw %ceil: no work, nothing to score
    assert cells[7] == "5.00"


def test_prints_to_file_and_returns_the_same_text():
    buf = io.StringIO()
    text = report([Row("a", "c", 1.0, Work(moved=1.0))], peaks=CPU, title="t", file=buf)
    assert buf.getvalue() == text and text.startswith("== t ==")


def test_prints_to_stdout_by_default(capsys):
    text = report([Row("a", "c", 1.0, Work(moved=1.0))], peaks=CPU)
    assert capsys.readouterr().out == text


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"rows\[0\]"):
        report([1.0], peaks=CPU, file=None)
    with pytest.raises(ValueError, match="ceiling"):
        report([], peaks=CPU, ceiling="l2", file=None)
    with pytest.raises(ValueError, match="floor_us"):
        report([], peaks=CPU, floor_us=0, file=None)
    with pytest.raises(ValueError, match="event_floor_us must be None or a positive number"):
        report([], peaks=CPU, event_floor_us=-1.0, file=None)


def test_an_event_timed_row_that_syncs_the_host_is_flagged_with_why():
    rows = [
        Row("torch/index_copy", "c", 300.0, Work(moved=1e6), host_syncs=True),
        Row("torch/index_copy", "c", 320.0, Work(moved=1e6), timer="bench_host", host_syncs=True),
        Row("triton", "c", 5.0, Work(moved=1e6)),
    ]
    text = report(rows, peaks=H200, file=None)
    lines = [line for line in text.splitlines() if line.startswith(("torch", "triton"))]
    assert "host-sync" in lines[0]
    assert "host-sync" not in lines[1]  # bench_host is the timer such a row should have
    assert "host-sync" not in lines[2]
    assert "bench_host is its honest timer" in text


def test_no_host_sync_note_without_such_a_row():
    assert "host-sync" not in report([Row("a", "c", 10.0, Work(moved=1e6))], peaks=H200, file=None)


def test_every_row_carries_its_spread_and_a_noisy_flag_past_the_limit():
    """A row can read tens of times slower in one CPU run than in the next, and a median alone
    does not say so: the iqr column and the `noisy` flag do."""
    from kvbench.harness.report import NOISY_IQR

    rows = [Row("steady", "c", 100.0, Work(moved=1e6), iqr_rel=0.05),
            Row("shaky", "c", 100.0, Work(moved=1e6), iqr_rel=NOISY_IQR * 2),
            Row("unknown", "c", 100.0, Work(moved=1e6))]
    text = report(rows, peaks=CPU, file=None)
    assert "iqr" in _header(text).split()
    assert "5.0%" in _row_line(text, "steady") and "noisy" not in _row_line(text, "steady")
    assert "20%" in _row_line(text, "shaky") and "noisy" in _row_line(text, "shaky")
    assert "noisy" not in _row_line(text, "unknown")
    assert "noisy: 1 row(s)" in text


def test_row_spread_comes_from_the_samples():
    from kvbench.harness.timers import TimingResult
    from kvbench.harness.work import relative_iqr

    # quartiles of 1..9 (inclusive method): 3 and 7, median 5: (7 - 3) / 5.
    timing = TimingResult(5.0, tuple(float(x) for x in range(1, 10)), "bench", "cold", "cpu")
    assert Row.from_timing("a", "c", timing, Work()).iqr_rel == pytest.approx(0.8)
    assert relative_iqr((1.0, 2.0, 3.0), 2.0) is None  # too few samples for quartiles
    with pytest.raises(ValueError, match="iqr_rel"):
        Row("a", "c", 1.0, Work(), iqr_rel=-0.1)
