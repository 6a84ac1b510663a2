"""kvbench.jsonfile: output paths checked before a run, results written atomically."""

import json
import os

import pytest

from kvbench.jsonfile import check_writable, write_json_atomic


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
