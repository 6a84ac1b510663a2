"""kvbench.kernels.cuda_build's cache on a CPU machine: nvcc is faked, the hashing is real.

A cached library is loaded into the process with ctypes, so a file that changed after it was
built (truncated, corrupted, replaced) must be rebuilt, never loaded. nvcc's process is
replaced by a function writing known bytes to its -o path; everything else (the key, the
record, the check) is the code that runs on the GPU machine.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess

import pytest

from kvbench.kernels import cuda_build


@pytest.fixture
def fake_nvcc(monkeypatch, tmp_path):
    """nvcc 'found', its build writes b'ELF-<n>' (n counts builds); returns the builds list."""
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    (src_dir / "k.cu").write_text("__global__ void k() {}\n")
    monkeypatch.setattr(cuda_build, "SOURCE_DIR", src_dir)
    monkeypatch.setattr(cuda_build, "find_nvcc", lambda: "/fake/nvcc")
    monkeypatch.setattr(cuda_build, "_nvcc_version", lambda nvcc: "Cuda compilation tools 13.0")
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    builds: list[bytes] = []

    def nvcc(argv, **kwargs):
        """subprocess.run of `nvcc <flags> -o OUT SRC`: writes OUT, ptxas log on stderr."""
        assert argv[0] == "/fake/nvcc"
        data = f"ELF-{len(builds)}".encode()
        with open(argv[argv.index("-o") + 1], "wb") as f:
            f.write(data)
        builds.append(data)
        return subprocess.CompletedProcess(argv, 0, "", "ptxas info: 0 bytes spill")

    monkeypatch.setattr(cuda_build.subprocess, "run", nvcc)
    return builds


def test_a_built_library_is_recorded_and_reused(fake_nvcc, tmp_path):
    lib, log = cuda_build.compile_source("k")
    assert lib.parent == tmp_path / "cache" / "cuda" and lib.read_bytes() == b"ELF-0"
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    record = json.loads((lib.parent / (lib.name + ".build.json")).read_text())
    assert record["sha256"] == hashlib.sha256(b"ELF-0").hexdigest()
    assert record["source"] == "k.cu" and record["nvcc_version"].startswith("Cuda")
    assert record["flags"] == list(cuda_build.NVCC_FLAGS) and log.startswith("ptxas")
    again, log_again = cuda_build.compile_source("k")
    assert again == lib and len(fake_nvcc) == 1 and log_again == log  # cached, verified


@pytest.mark.parametrize("tamper", ["replace", "truncate", "no_record", "bad_record",
                                    "other_inputs"])
def test_a_library_that_fails_its_recorded_hash_is_rebuilt_not_loaded(fake_nvcc, tamper,
                                                                      monkeypatch):
    lib, _ = cuda_build.compile_source("k")
    record = lib.parent / (lib.name + ".build.json")
    if tamper == "replace":
        lib.write_bytes(b"ELF-evil")
    elif tamper == "truncate":
        lib.write_bytes(b"")
    elif tamper == "no_record":
        record.unlink()
    elif tamper == "bad_record":
        record.write_text("{torn")
    else:
        data = json.loads(record.read_text())
        record.write_text(json.dumps({**data, "nvcc_version": "another nvcc"}))
    loaded = []
    monkeypatch.setattr(cuda_build.ctypes, "CDLL", lambda path: loaded.append(path) or path)
    cuda_build.load.cache_clear()
    try:
        with pytest.warns(UserWarning, match=f"not loading the cached library {lib}"):
            cuda_build.load("k")
    finally:
        cuda_build.load.cache_clear()
    assert loaded == [str(lib)] and lib.read_bytes() == b"ELF-1" and len(fake_nvcc) == 2
    assert json.loads(record.read_text())["sha256"] == hashlib.sha256(b"ELF-1").hexdigest()


def test_a_failed_build_leaves_no_library_and_no_record(fake_nvcc, monkeypatch, tmp_path):
    def fail(argv, **kwargs):
        with open(argv[argv.index("-o") + 1], "wb") as f:
            f.write(b"half")
        return subprocess.CompletedProcess(argv, 1, "", "error: k.cu")

    monkeypatch.setattr(cuda_build.subprocess, "run", fail)
    with pytest.raises(cuda_build.BuildError, match="exit 1"):
        cuda_build.compile_source("k")
    assert [p.name for p in (tmp_path / "cache" / "cuda").iterdir()] == []


@pytest.mark.skipif(cuda_build.find_nvcc() is None, reason="no nvcc on this machine")
def test_with_the_real_nvcc_a_tampered_library_is_rebuilt_and_the_rebuilt_one_loads(
    tmp_path, monkeypatch
):
    """The same path with nvcc itself (a one-function source: seconds, no GPU needed to build
    or to dlopen the result)."""
    src_dir = tmp_path / "src"
    src_dir.mkdir()
    (src_dir / "tiny.cu").write_text('extern "C" int kvbench_tiny(void) { return 42; }\n')
    monkeypatch.setattr(cuda_build, "SOURCE_DIR", src_dir)
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    lib, _ = cuda_build.compile_source("tiny")
    assert cuda_build.ctypes.CDLL(str(lib)).kvbench_tiny() == 42
    built = lib.read_bytes()
    # A torn copy, put in place by rename: the library loaded above stays mapped from its own
    # inode (truncating a mapped library in place makes this process die of SIGBUS at exit).
    torn = lib.with_name(lib.name + ".torn")
    torn.write_bytes(built[: len(built) // 2])
    os.replace(torn, lib)  # must not be dlopen'ed
    with pytest.warns(UserWarning, match="is not the recorded"):
        again, _ = cuda_build.compile_source("tiny")
    assert again == lib and hashlib.sha256(lib.read_bytes()).hexdigest() == json.loads(
        (lib.parent / (lib.name + ".build.json")).read_text())["sha256"]


@pytest.mark.parametrize("which", ["library", "record"])
def test_a_library_or_record_others_could_write_is_rebuilt(fake_nvcc, which):
    """The record vouches for the library only where no one else could have written it."""
    lib, _ = cuda_build.compile_source("k")
    os.chmod(lib if which == "library" else lib.parent / (lib.name + ".build.json"), 0o666)
    with pytest.warns(UserWarning, match="writable by group or others"):
        again, _ = cuda_build.compile_source("k")
    assert again == lib and len(fake_nvcc) == 2
    assert stat.S_IMODE(lib.stat().st_mode) & 0o022 == 0


def test_the_cuda_folder_is_checked_like_the_cache_root(fake_nvcc, tmp_path):
    """cuda/ (where the hash records live) made group-writable is made private again;
    an explicit out_dir that others can write into (a sticky shared folder) is refused."""
    from kvbench.core import paths

    lib, _ = cuda_build.compile_source("k")
    os.chmod(lib.parent, 0o777)
    with pytest.warns(UserWarning, match="made it private"):
        cuda_build.compile_source("k")
    assert stat.S_IMODE(lib.parent.stat().st_mode) == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(paths.CacheRootError, match="shared directory"):
        cuda_build.compile_source("k", shared)
