"""Build a CUDA source of kvbench/kernels/cuda/ into a shared library, once, and load it.

Why not torch.utils.cpp_extension: the kernels here export a plain C interface (a struct of
pointers and strides), so they need no pybind11 / libtorch ABI match between the machine that
builds and the torch that runs; ctypes loads the library into any torch process. Why not a
wheel build step: CI machines and the CPU developers' machines have no GPU, and an asv build of
an old commit must not need nvcc; the library is built on first use, where a GPU is.

The library is cached in the cache root's cuda/ folder (kvbench.core.paths: private, moved by
KVBENCH_CACHE_DIR), keyed by the source's bytes, the nvcc version and the flags, so an edited
kernel or a different compiler rebuilds, and two processes building at once each write a
temporary file and rename it into place (no torn library). Beside each library a build record
(``<library>.build.json``) holds the library's SHA-256 and what it was built from (source
name and hash, nvcc version, flags); a cached library is used only when the record matches
it and the build, otherwise it is rebuilt: a truncated, corrupt or replaced file is never
loaded into the process. The record is only as good as where it lives: the folder must pass
the cache root's owner and mode checks (kvbench.core.paths.check_private, also for an explicit
out_dir), and a record or library that another user owns or could write is rebuilt.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from kvbench.core import paths
from kvbench.core.jsonfile import write_json_atomic

SOURCE_DIR = Path(__file__).resolve().parent / "cuda"

#: sm_90a: the kernels use thread-block clusters and distributed shared memory (sm_90).
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", *ARCH_FLAGS)


#: Observers of kvbench's CUDA kernel launches: each is called at a launch with a function that
#: returns the launched kernel's resources as the CUDA runtime describes them (registers, local
#: and shared memory, warps). The asv suite's sidecar adds one while it runs a case once, the
#: way it hooks Triton's launches; empty otherwise, so a launch pays one truth test.
LAUNCH_HOOKS: list[Callable[[Callable[[], dict]], None]] = []


class BuildError(RuntimeError):
    """nvcc is missing or failed; the message says which and carries nvcc's output."""


def find_nvcc() -> str | None:
    """nvcc from $KVBENCH_NVCC, $CUDA_HOME/bin, then PATH (None when none exists)."""
    candidates = [os.environ.get("KVBENCH_NVCC")]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates.append(str(Path(os.environ[var]) / "bin" / "nvcc"))
    candidates.append(shutil.which("nvcc"))
    for c in candidates:
        if c and Path(c).is_file() and os.access(c, os.X_OK):
            return c
    return None


def unavailable_reason(device: torch.device) -> str | None:
    """None when a kernel of cuda/ can run on `device`, else why not: it needs a CUDA device
    of sm_90+ (thread-block clusters and distributed shared memory) and nvcc to build its
    library on first use."""
    if device.type != "cuda" or not torch.cuda.is_available():
        return f"needs a CUDA device, problem is on {device}"
    if torch.cuda.get_device_capability(device) < (9, 0):
        return "needs sm_90+ (thread-block clusters and distributed shared memory)"
    if find_nvcc() is None:
        return "needs nvcc to build its CUDA source on first use (none on PATH or in $CUDA_HOME)"
    return None


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _record_path(lib: Path) -> Path:
    return lib.with_name(lib.name + ".build.json")


def _build_inputs(src: Path, nvcc_version: str, flags: tuple[str, ...]) -> dict:
    """What a library is built from, as its record stores it."""
    return {
        "source": src.name,
        "source_sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
        "nvcc_version": nvcc_version,
        "flags": list(flags),
    }


def _writable_by_others(path: Path) -> str | None:
    """Why `path` cannot vouch for a library (another user owns it, or group or others can
    write it); None when only this user can have written it, or it does not exist."""
    import stat

    try:
        st = path.lstat()
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid != os.geteuid():
        return f"{path} is owned by uid {st.st_uid}, not by this user"
    if st.st_mode & 0o022:
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _verified(lib: Path, inputs: dict) -> str | None:
    """None when `lib` exists and its record holds its SHA-256 and these build inputs; else
    why it cannot be used (the caller rebuilds)."""
    if not lib.is_file():
        return "not built yet"
    for path in (lib, _record_path(lib)):
        why = _writable_by_others(path)
        if why:
            return why
    try:
        record = json.loads(_record_path(lib).read_text())
    except (OSError, ValueError) as exc:
        return f"its build record {_record_path(lib)} is unreadable ({exc})"
    if not isinstance(record, dict):
        return f"its build record {_record_path(lib)} is not a JSON object"
    changed = [k for k, v in inputs.items() if record.get(k) != v]
    if changed:
        return f"its build record names other build inputs ({', '.join(changed)})"
    actual = _sha256(lib)
    if record.get("sha256") != actual:
        return (f"its SHA-256 {actual} is not the recorded {record.get('sha256')!r} (the file "
                "changed after it was built)")
    return None


def _run_nvcc(nvcc: str, flags: tuple[str, ...], src: Path, out: Path) -> str:
    """Compile `src` into `out`; nvcc's stderr (the ptxas log), or BuildError."""
    proc = subprocess.run(
        [nvcc, *flags, "-o", str(out), str(src)], check=False, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise BuildError(f"nvcc failed on {src.name} (exit {proc.returncode}):\n{proc.stderr}")
    return proc.stderr


def compile_source(
    name: str, out_dir: Path | None = None, extra: tuple[str, ...] = ()
) -> tuple[Path, str]:
    """``cuda/<name>.cu`` built (if its cached library is missing or fails its recorded hash):
    (library path, ptxas log).

    ``extra`` flags join the cache key (tests pass ``-Xptxas -v`` to read registers and spills).
    ``out_dir`` defaults to the cache root's cuda/ folder.
    """
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError(
            f"building kvbench/kernels/cuda/{name}.cu needs nvcc: none found in $KVBENCH_NVCC, "
            "$CUDA_HOME/bin, $CUDA_PATH/bin or PATH"
        )
    src = SOURCE_DIR / f"{name}.cu"
    flags = (*NVCC_FLAGS, *extra)
    nvcc_version = _nvcc_version(nvcc)
    key = hashlib.sha256(
        src.read_bytes() + nvcc_version.encode() + " ".join(flags).encode()
    ).hexdigest()[:16]
    if out_dir is None:
        out_dir = paths.cuda_build_dir()
    else:
        out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        paths.check_private(out_dir, "cuda build folder")
    lib = out_dir / f"{name}-{key}.so"
    log_path = lib.with_suffix(".log")
    inputs = _build_inputs(src, nvcc_version, flags)
    why = _verified(lib, inputs)
    if why is None:
        return lib, log_path.read_text() if log_path.is_file() else ""
    if lib.exists():
        warnings.warn(f"not loading the cached library {lib}: {why}; rebuilding it", stacklevel=2)
    out_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}-", suffix=".so")
    os.close(fd)
    try:
        log = _run_nvcc(nvcc, flags, src, Path(tmp))
        os.chmod(tmp, 0o700)  # nvcc's umask may leave it group-writable: _verified refuses that
        log_path.write_text(log)
        # The record names the bytes about to be renamed into place; a reader that sees the
        # new record before the new library finds a mismatch and rebuilds, never loads.
        write_json_atomic(_record_path(lib), {"sha256": _sha256(Path(tmp)), **inputs}, indent=2)
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib, log


@functools.cache
def load(name: str) -> ctypes.CDLL:
    """The built library of ``cuda/<name>.cu``, compiled on first use (cached per process),
    loaded only after its bytes matched the SHA-256 recorded when it was built."""
    lib, _ = compile_source(name)
    return ctypes.CDLL(str(lib))
