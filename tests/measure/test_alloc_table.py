"""alloc_table: every cell measured in interleaved rounds, medians over the rounds."""

from __future__ import annotations

import json
import statistics

import pytest

from kvbench.measure import alloc_table


def test_report_keeps_every_round_and_reports_their_median(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(alloc_table, "DISPATCH_LOOP", 50)  # a short loop: this checks logic
    out = tmp_path / "report.json"
    assert alloc_table.main(["--num-rows", "16384", "--rounds", "2", "--json", str(out)]) == 0
    data = json.loads(out.read_text())
    assert len(data["alloc"]) == len(alloc_table.IMPLS) * len(alloc_table.SIZES) * 3
    for row in data["alloc"]:
        rounds = row["rounds"]
        assert all(len(v) == 2 for v in rounds.values())
        for key in ("single_us", "reset_floor_us", "batched_us", "single_minus_reset_floor_us"):
            assert row[key] == statistics.median(rounds[key])
        net = [a - b for a, b in zip(rounds["single_us"], rounds["reset_floor_us"], strict=True)]
        assert rounds["single_minus_reset_floor_us"] == net
    assert len(data["dispatch"]["rounds"]["overhead_us"]) == 2
    text = capsys.readouterr().out
    assert "median over 2 interleaved rounds" in text and "per round" in text


def test_rounds_must_be_positive(capsys):
    with pytest.raises(SystemExit) as exc:
        alloc_table.main(["--rounds", "0"])
    assert exc.value.code == 2
    assert "--rounds must be >= 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "message"), [
    (["--num-rows", "8192"], "--num-rows must be >= 16384"),  # failed after measuring
    (["--num-rows", "0"], "--num-rows must be >= 16384"),
    (["--device", "foo"], "--device: "),
    (["--device", "cuda:99"], "--device: "),
])
def test_bad_arguments_are_usage_errors_before_measuring(argv, message, capsys, monkeypatch):
    monkeypatch.setattr(alloc_table, "measure_alloc",
                        lambda *a: pytest.fail("measured before checking the arguments"))
    with pytest.raises(SystemExit) as exc:
        alloc_table.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err
