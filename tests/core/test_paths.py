"""kvbench.core.paths: one private cache root that KVBENCH_CACHE_DIR moves, for every cache."""

from __future__ import annotations

import importlib
import os
import stat
import warnings

import pytest

from kvbench.core import paths


@pytest.fixture
def root(monkeypatch, tmp_path):
    path = tmp_path / "cache"
    monkeypatch.setenv(paths.CACHE_DIR_VAR, str(path))
    return path


def _mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_root_is_created_private(root):
    assert paths.cache_root() == root
    assert _mode(root) == 0o700
    assert paths.cache_subdir("perf") == root / "perf" and _mode(root / "perf") == 0o700


def test_without_the_variable_the_root_is_platformdirs_user_cache(monkeypatch, tmp_path):
    import platformdirs

    monkeypatch.delenv(paths.CACHE_DIR_VAR, raising=False)
    monkeypatch.setattr(platformdirs, "user_cache_dir", lambda app: str(tmp_path / "u" / app))
    assert paths.cache_root() == tmp_path / "u" / "kvbench"


def test_every_cache_lives_under_the_root(root, monkeypatch):
    """Perf tables, ceilings, the built CUDA libraries, FlashInfer's workspace and the npm
    tarballs: all moved by KVBENCH_CACHE_DIR (the CUDA library and FlashInfer's workspace
    were not)."""
    from kvbench.dispatch import perf_tables
    from kvbench.history.dashboard import publish
    calibrate = importlib.import_module("kvbench.harness.calibrate")  # the module

    monkeypatch.delenv("KVBENCH_NPM_CACHE", raising=False)
    assert perf_tables.table_path("GPU A", "kv_write").parent == root / "perf"
    assert calibrate._cache_file() == root / "ceilings.json"
    assert paths.cuda_build_dir() == root / "cuda"
    assert paths.flashinfer_workspace_dir() == root / "flashinfer"
    assert publish.cache_dir() == root / "npm"


def test_calibrate_cache_dir_stays_importable_and_delegates(root):
    """Old asv commits' benchmarks import it from kvbench.harness.calibrate."""
    from kvbench.harness.calibrate import cache_dir

    assert cache_dir() == paths.cache_root() == root


def test_a_root_of_ours_writable_by_others_is_made_private(root):
    root.mkdir()
    os.chmod(root, 0o777)
    with pytest.warns(UserWarning, match=r"writable by group or others \(mode 777\); made it"):
        assert paths.cache_root() == root
    assert _mode(root) == 0o700


def test_a_shared_sticky_directory_is_refused(root):
    root.mkdir()
    os.chmod(root, 0o1777)
    with pytest.raises(paths.CacheRootError, match="shared directory .* set KVBENCH_CACHE_DIR"):
        paths.cache_root()
    assert _mode(root) == 0o1777  # left as it is


def test_a_root_owned_by_another_user_is_refused(root, monkeypatch):
    root.mkdir(mode=0o700)
    owner = root.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)
    with pytest.raises(paths.CacheRootError, match=f"owned by uid {owner}, not by this user"):
        paths.cache_root()


def test_a_root_that_is_a_file_is_refused(root):
    root.write_text("")
    with pytest.raises(paths.CacheRootError, match="not a directory|cannot create"):
        paths.cache_root()


def test_readers_create_nothing(root):
    """Looking a table or a ceiling up must not create folders (a read-only home)."""
    from kvbench.dispatch import perf_tables
    calibrate = importlib.import_module("kvbench.harness.calibrate")  # the module

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert perf_tables.load_perf_table("GPU A")("kv_write", "any", "x/y", "GPU A", "fp16",
                                             frozenset()) is None
        assert calibrate.load_ceilings("GPU A") is None
    assert not root.exists()


def test_readers_warn_and_go_on_over_an_unsafe_root(root, monkeypatch):
    """Dispatch keeps working (preference rules) when the root cannot be trusted."""
    from kvbench.dispatch import perf_tables
    calibrate = importlib.import_module("kvbench.harness.calibrate")  # the module

    root.mkdir(mode=0o700)
    monkeypatch.setattr(os, "geteuid", lambda: root.stat().st_uid + 1)
    with pytest.warns(UserWarning, match="ignoring perf tables: .*owned by uid"):
        perf_tables.load_perf_table("GPU A")
    with pytest.warns(UserWarning, match="ignoring cached ceilings: .*owned by uid"):
        assert calibrate.load_ceilings("GPU A") is None


@pytest.mark.parametrize("name", ["", "a/b", "..", "."])
def test_a_subfolder_is_one_plain_name(root, name):
    with pytest.raises(ValueError, match="one plain name"):
        paths.cache_subdir(name)


def test_the_module_prints_the_root_or_a_subfolder_for_shell_scripts(root, capsys):
    assert paths.main([]) == 0 and capsys.readouterr().out.strip() == str(root)
    assert paths.main(["asv-clones"]) == 0
    assert capsys.readouterr().out.strip() == str(root / "asv-clones")
    assert _mode(root / "asv-clones") == 0o700
    assert paths.main(["a/b"]) == 2 and "one plain name" in capsys.readouterr().err
