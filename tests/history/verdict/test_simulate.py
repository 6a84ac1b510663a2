"""kvbench.history.verdict.simulate, the verdict engine on synthetic histories: its command line
(`python -m kvbench.history.verdict.simulate`) answers --help and refuses an unusable --json
path before it simulates anything."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvbench.history.verdict import simulate


def test_module_answers_help():
    """`--help` is the first thing a user types; argparse expands '%' in help texts, so a
    literal percent sign there would crash it instead of printing the usage."""
    res = subprocess.run([sys.executable, "-m", "kvbench.history.verdict.simulate", "--help"],
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.startswith("usage: python -m kvbench.history.verdict.simulate")
    for option in ("--seed", "--series", "--json", "--plant-on", "--replay", "--lease-ends",
                   "--first", "--processes", "--no-canaries"):
        assert option in res.stdout, option


def test_json_path_is_refused_before_simulating(monkeypatch, capsys, unwritable_dir):
    def measured(*args, **kwargs):
        raise AssertionError("simulated although the --json path was unusable")

    monkeypatch.setattr(simulate, "simulate", measured)
    with pytest.raises(SystemExit) as exc:
        simulate.main(["--json", str(unwritable_dir / "out.json")])
    assert exc.value.code == 2
    assert "is not writable" in capsys.readouterr().err


def test_counts_must_be_whole_numbers_of_at_least_one(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        simulate.main(["--replay", str(tmp_path / "runs.jsonl"), "--first", "0"])
    assert exc.value.code == 2
    assert "expected a whole number >= 1" in capsys.readouterr().err
