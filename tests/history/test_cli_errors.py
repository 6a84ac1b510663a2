"""History commands: an unusable path or a wrong machine name is one usage error (exit 2)
before any work, and bisect leaves no temporary folder behind."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from kvbench.history import command
from kvbench.history.asv import discover_cmd
from kvbench.history.bisect import bisect_cmd
from kvbench.history.dashboard import preview_cmd, publish_cmd
from kvbench.history.verdict import regressions_cmd
from kvbench.history.verdict.results import load_history

REPO = Path(__file__).resolve().parents[2]
SERIES = "paged_decode.PagedDecode.track_us('triton/split_kv', 'fp16', 'b64_c8k')"


def _usage_error(module, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        command.main(module, argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err.strip().splitlines()[-1]


@pytest.mark.parametrize("name", ["../results/h200", "", "..", "a/b", "a\\b", "version"])
def test_a_machine_name_that_is_not_one_folder_is_refused(name, tmp_path, capsys):
    line = _usage_error(regressions_cmd, ["--results", str(tmp_path), "--machine", name], capsys)
    assert "--machine" in line
    with pytest.raises(ValueError, match="machine name"):
        load_history(tmp_path, name)


def test_kvbench_machine_refuses_the_name_asv_keeps_its_format_version_under(tmp_path, capsys):
    """`kvbench machine --name version` said it wrote the entry, which asv's own "version"
    key then overwrote: `record --machine version` found no such machine."""
    from kvbench.history.asv import machine_cmd

    line = _usage_error(machine_cmd, ["--name", "version", "--file",
                                      str(tmp_path / "machines.json")], capsys)
    assert "'version' is the key asv's machine file keeps" in line
    assert not (tmp_path / "machines.json").exists()


@pytest.mark.parametrize("body", ["{bad", "[]"])
def test_a_config_that_is_not_asvs_is_a_usage_error_for_record(body, tmp_path, capsys):
    from kvbench.history.asv import record_cmd

    config = tmp_path / "asv.conf.json"
    config.write_text(body)
    line = _usage_error(record_cmd, ["--config", str(config), "--dry-run"], capsys)
    assert line.startswith("kvbench record: error: --config") and "not an asv config" in line


@pytest.mark.parametrize("module", [publish_cmd, preview_cmd, discover_cmd])
@pytest.mark.parametrize("where", ["missing", "directory"])
def test_an_unusable_config_is_a_usage_error(module, where, tmp_path, capsys):
    config = tmp_path / "nothing.json" if where == "missing" else tmp_path
    assert "--config" in _usage_error(module, ["--config", str(config)], capsys)


def test_an_unusable_plot_folder_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    line = _usage_error(regressions_cmd, ["--results", str(tmp_path), "--plot",
                                          str(tmp_path / "file" / "plots")], capsys)
    assert "--plot" in line


def test_bisect_rounds_are_bounded_by_name():
    with pytest.raises(ValueError, match="<= 1000"):
        bisect_cmd.run_command("HEAD~1..HEAD", SERIES, rounds=10**30, max_rounds=10**30,
                               repo=REPO)


def test_an_unusable_log_dir_is_refused_and_no_temporary_folder_is_left(tmp_path,
                                                                        monkeypatch):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="--log-dir"):
        bisect_cmd.run_command("HEAD~1..HEAD", SERIES, log_dir=str(tmp_path / "file"),
                               machine="any", repo=REPO)
    with pytest.raises(ValueError, match="--config"):
        bisect_cmd.run_command("HEAD~1..HEAD", SERIES, config=str(tmp_path / "none.json"),
                               machine="any", repo=REPO)
    assert list(scratch.iterdir()) == []


def test_a_command_stopped_by_sigterm_cleans_up_and_says_so_in_one_line(capsys):
    """SIGTERM (timeout, kill, a preempting scheduler) ended a command with no cleanup: its
    asv children and temporary folders stayed. Now it is an interruption, as a Ctrl-C is:
    the command's own cleanup runs, then one line and the shell's status 130."""
    import os
    import signal
    import time
    import types

    cleaned = []

    def run(args):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler raises at the latest here
            raise AssertionError("SIGTERM did not interrupt the command")
        finally:
            cleaned.append(True)

    fake = types.SimpleNamespace(NAME="fake", HELP="", DESCRIPTION="",
                                 add_arguments=lambda parser: None, run=run)
    assert command.main(fake, []) == 130
    assert cleaned == [True]
    err = capsys.readouterr().err
    assert err.strip().endswith("interrupted by signal SIGTERM") and "Traceback" not in err
