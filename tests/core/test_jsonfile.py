"""kvbench.core.jsonfile: output paths checked before a run, results written atomically."""

import argparse
import json
import os
from pathlib import Path

import pytest

from kvbench.core import jsonfile
from kvbench.core.jsonfile import check_writable, move_aside, write_json_atomic


def test_check_writable_names_what_is_wrong(tmp_path):
    assert check_writable(tmp_path / "a.json") == tmp_path / "a.json"
    with pytest.raises(ValueError, match="is a directory"):
        check_writable(tmp_path)
    with pytest.raises(ValueError, match="does not exist"):
        check_writable(tmp_path / "missing" / "a.json")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="does not exist"):
        check_writable(tmp_path / "file" / "a.json")
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(ValueError, match="not writable"):
            check_writable(ro / "a.json")


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path):
    target = tmp_path / "t.json"
    write_json_atomic(target, {"rows": [1, 2]})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"rows": [object()]})  # fails half way through the dump
    assert json.loads(target.read_text()) == {"rows": [1, 2]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json"]


def test_check_writable_creates_a_file_to_know(unwritable_dir):
    """os.access says yes to root everywhere and on /proc: the pre-check passed, and the
    write failed after the measurement. Creating (and removing) a probe file answers."""
    with pytest.raises(ValueError, match="is not writable"):
        check_writable(unwritable_dir / "a.json")
    assert not list(Path(unwritable_dir).glob(".a.json-*"))


def test_check_writable_refuses_a_target_that_is_not_a_regular_file(tmp_path):
    """The atomic rename would replace a device node or a FIFO with a regular file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        check_writable(fifo)
    if Path("/dev/null").exists():
        with pytest.raises(ValueError, match="not a regular file"):
            check_writable("/dev/null")


def test_check_writable_leaves_no_probe_behind(tmp_path):
    (tmp_path / "old.json").write_text("{}")
    assert check_writable(tmp_path / "old.json") == tmp_path / "old.json"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json"]


def test_output_path_is_an_argparse_usage_error(tmp_path, unwritable_dir, capsys):
    parser = argparse.ArgumentParser(prog="x")
    parser.add_argument("--json", type=jsonfile.output_path)
    assert parser.parse_args(["--json", str(tmp_path / "a.json")]).json == tmp_path / "a.json"
    for bad in (tmp_path, tmp_path / "missing" / "a.json", unwritable_dir / "a.json"):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(["--json", str(bad)])
        assert exc.value.code == 2 and f"argument --json: {bad}: " in capsys.readouterr().err


def test_move_aside_keeps_the_bytes_under_a_timestamped_name(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b"{torn")
    aside = move_aside(path)
    assert aside.name.startswith("t.json.corrupt-") and aside.read_bytes() == b"{torn"
    assert not path.exists()


def _commands_with_json(monkeypatch):
    """(name, call(argv)) of every command that takes --json PATH, its measuring replaced by a
    failure: the path must be refused before it is reached."""
    from kvbench.harness import gpu_selftest
    from kvbench.history.verdict import simulate
    from kvbench.measure import alloc_table
    from kvbench.measure import table as table_mod

    def measured(*args, **kwargs):
        raise AssertionError("measured although the --json path was unusable")

    monkeypatch.setattr(alloc_table, "measure_alloc", measured)
    monkeypatch.setattr(alloc_table, "host_floor", measured, raising=False)
    monkeypatch.setitem(table_mod.BUILDERS, "kv_alloc", measured)
    monkeypatch.setattr(gpu_selftest, "calibrate", measured)
    monkeypatch.setattr(simulate, "simulate", measured)
    return [
        ("kvbench table", lambda argv: table_mod.main(["kv_alloc", *argv])),
        ("alloc_table", alloc_table.main),
        ("gpu_selftest", gpu_selftest.main),
        ("python -m kvbench.history.verdict.simulate", simulate.main),
    ]


def test_every_json_option_refuses_an_unwritable_path_before_measuring(
    monkeypatch, capsys, unwritable_dir
):
    for name, call in _commands_with_json(monkeypatch):
        with pytest.raises(SystemExit) as exc:
            call(["--json", str(unwritable_dir / "out.json")])
        assert exc.value.code == 2, name
        assert "is not writable" in capsys.readouterr().err, name


def test_main_json_dir_is_probed_before_measuring(monkeypatch, unwritable_dir):
    from kvbench.measure import table as table_mod

    monkeypatch.setattr(table_mod, "main", lambda argv: pytest.fail("measured"))
    with pytest.raises(SystemExit, match="is not writable"):
        table_mod.run_all(json_dir=str(unwritable_dir))


def test_an_atomic_write_gives_a_new_file_the_usual_mode_and_keeps_an_old_ones(tmp_path):
    """mkstemp's temporary file is 0600: renamed into place, results/benchmarks.json and
    noise models became unreadable to everyone but their writer."""
    import stat

    umask = os.umask(0o022)
    try:
        new = write_json_atomic(tmp_path / "new.json", {"a": 1})
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        old = tmp_path / "old.json"
        old.write_text("{}")
        old.chmod(0o640)
        write_json_atomic(old, {"a": 2})
        assert stat.S_IMODE(old.stat().st_mode) == 0o640
    finally:
        os.umask(umask)
