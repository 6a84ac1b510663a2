"""The cache root's subfolders pass the root's checks; an unusable cache is a one-line CLI
error; calibrate and tune check where they will write before they measure."""

from __future__ import annotations

import importlib
import os
import stat
from pathlib import Path

import pytest

from kvbench.core import paths

calibrate_mod = importlib.import_module("kvbench.harness.calibrate")


@pytest.fixture
def root(monkeypatch, tmp_path):
    path = tmp_path / "cache"
    monkeypatch.setenv(paths.CACHE_DIR_VAR, str(path))
    return path


def test_a_subfolder_others_can_write_is_made_private(root):
    paths.cache_root()
    (root / "perf").mkdir(mode=0o700)
    os.chmod(root / "perf", 0o777)
    with pytest.warns(UserWarning, match="made it private"):
        assert paths.perf_tables_dir(create=False) == root / "perf"
    assert stat.S_IMODE((root / "perf").stat().st_mode) == 0o700


def test_a_subfolder_linked_to_a_shared_directory_is_refused(root, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    paths.cache_root()
    (root / "cuda").symlink_to(shared)
    with pytest.raises(paths.CacheRootError, match="cache subfolder cuda/.*shared directory"):
        paths.cuda_build_dir()


def test_a_subfolder_that_is_a_file_is_refused(root):
    paths.cache_root()
    (root / "npm").write_text("")
    with pytest.raises(paths.CacheRootError, match="npm"):
        paths.npm_cache_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another user needs root")
def test_a_subfolder_owned_by_another_user_is_refused(root):
    paths.cache_root()
    (root / "perf").mkdir(mode=0o700)
    os.chown(root / "perf", 12345, -1)
    with pytest.raises(paths.CacheRootError, match="owned by uid 12345"):
        paths.perf_tables_dir()


def _no_measuring(monkeypatch):
    from kvbench.measure import tune

    def refuse(*args, **kwargs):
        raise AssertionError("measured before checking where the result goes")

    monkeypatch.setattr(calibrate_mod, "_measure", refuse)
    monkeypatch.setattr(tune, "_inputs", refuse)


@pytest.mark.parametrize("where", ["tmp", "file", "other_user"])
@pytest.mark.parametrize("command", [["calibrate", "--size-mib", "1"],
                                     ["tune", "kv_alloc", "--device", "cpu"]])
def test_an_unusable_cache_root_is_a_one_line_cli_error(where, command, tmp_path, monkeypatch,
                                                        capsys):
    from kvbench import cli

    if where == "tmp":
        target = "/tmp"
    elif where == "file":
        target = str(tmp_path / "file")
        (tmp_path / "file").write_text("")
    else:
        target = str(tmp_path / "theirs")
        os.mkdir(target, 0o700)
        owner = os.stat(target).st_uid
        monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    monkeypatch.setenv(paths.CACHE_DIR_VAR, target)
    _no_measuring(monkeypatch)
    assert cli.main(command) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "KVBENCH_CACHE_DIR" in err, err


@pytest.mark.parametrize("command", [["calibrate", "--size-mib", "1"],
                                     ["tune", "kv_alloc", "--device", "cpu"]])
def test_an_unwritable_target_is_refused_before_measuring(command, root, monkeypatch, capsys):
    """perf/ and the root are private but cannot take a file. A read-only folder does not
    stop root, so the folder here is /proc/self (this user's, mode 0555, no new files)."""
    from kvbench import cli

    paths.cache_root()
    if command[0] == "tune":
        (root / "perf").symlink_to("/proc/self")
    else:
        monkeypatch.setattr(calibrate_mod, "_cache_file",
                            lambda create=True: Path("/proc/self/ceilings.json"))
    _no_measuring(monkeypatch)
    assert cli.main(command) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "cannot store" in err, err
