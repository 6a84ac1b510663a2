"""Work/Row unit math: the conversions every GB/s and TFLOP/s in kvbench goes through."""

import math

import pytest

from kvbench.harness import Row, Work


def test_one_gigabyte_in_one_millisecond_is_1000_gbps():
    row = Row("torch/copy_", "1 GB", 1000.0, Work(moved=1e9))
    assert row.gbps == pytest.approx(1000.0)


def test_one_teraflop_in_one_millisecond_is_1000_tflops():
    row = Row("x", "1 TFLOP", 1000.0, Work(flops=1e12))
    assert row.tflops == pytest.approx(1000.0)


def test_units_are_decimal_not_binary():
    # 1 GiB in 1 s is 1.073741824 GB/s: GB is 1e9, never 2**30.
    row = Row("x", "1 GiB", 1e6, Work(moved=2**30))
    assert row.gbps == pytest.approx(2**30 / 1e9)


def test_work_adds_componentwise():
    total = Work(flops=1.0, moved=2.0) + Work(flops=3.0, moved=4.0)
    assert (total.flops, total.moved) == (4.0, 6.0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"flops": -1.0},
        {"moved": -1},
        {"moved": math.nan},
        {"flops": math.inf},
        {"moved": "1e9"},
        {"flops": True},
    ],
)
def test_bad_work_is_a_value_error_naming_the_field(kwargs):
    field = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"Work.{field}"):
        Work(**kwargs)


@pytest.mark.parametrize("us", [0.0, -1.0, math.nan, math.inf])
def test_row_rejects_non_positive_or_non_finite_time(us):
    with pytest.raises(ValueError, match="Row.us"):
        Row("x", "c", us, Work(moved=1.0))


def test_row_rejects_unknown_labels():
    with pytest.raises(ValueError, match="Row.l2"):
        Row("x", "c", 1.0, Work(), l2="lukewarm")
    with pytest.raises(ValueError, match="Row.timer"):
        Row("x", "c", 1.0, Work(), timer="do_bench")
    with pytest.raises(ValueError, match="Row.work"):
        Row("x", "c", 1.0, 1e9)
    with pytest.raises(ValueError, match="Row.impl"):
        Row("", "c", 1.0, Work())
    with pytest.raises(ValueError, match="Row.host_syncs"):
        Row("x", "c", 1.0, Work(), host_syncs="yes")


def test_row_from_timing_copies_median_and_labels():
    from kvbench.harness import TimingResult

    t = TimingResult(
        median_us=4.0, samples_us=(3.0, 4.0, 5.0), timer="bench_host", l2="warm", device="cpu"
    )
    row = Row.from_timing("host/freelist", "bump", t, Work(moved=4e3))
    assert (row.us, row.timer, row.l2, row.host_syncs) == (4.0, "bench_host", "warm", False)
    assert row.gbps == pytest.approx(1.0)
    syncing = TimingResult(300.0, (300.0,), "bench", "cold", "cuda:0", host_us=20.0,
                           host_syncs=True)
    assert Row.from_timing("torch/index_copy", "c", syncing, Work()).host_syncs
    with pytest.raises(ValueError, match="timing"):
        Row.from_timing("x", "c", 4.0, Work())
