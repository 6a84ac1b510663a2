"""Build a CUDA source of kvbench/kernels/cuda/ into a shared library, once, and load it.

Why not torch.utils.cpp_extension: the kernels here export a plain C interface (a struct of
pointers and strides), so they need no pybind11 / libtorch ABI match between the machine that
builds and the torch that runs; ctypes loads the library into any torch process. Why not a
wheel build step: CI machines and the CPU developers' machines have no GPU, and an asv build of
an old commit must not need nvcc; the library is built on first use, where a GPU is.

The library is cached under the user cache directory, keyed by the source's bytes, the nvcc
version and the flags, so an edited kernel or a different compiler rebuilds, and two processes
building at once each write a temporary file and rename it into place (no torn library).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import platformdirs

SOURCE_DIR = Path(__file__).resolve().parent / "cuda"

#: sm_90a: the kernels use thread-block clusters and distributed shared memory (sm_90).
ARCH_FLAGS = ("-gencode=arch=compute_90a,code=sm_90a",)
NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo", *ARCH_FLAGS)


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


@functools.cache
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout


def compile_source(
    name: str, out_dir: Path | None = None, extra: tuple[str, ...] = ()
) -> tuple[Path, str]:
    """Compile ``cuda/<name>.cu`` (if its cached library is missing): (library path, ptxas log).

    ``extra`` flags join the cache key (tests pass ``-Xptxas -v`` to read registers and spills).
    """
    nvcc = find_nvcc()
    if nvcc is None:
        raise BuildError(
            f"building kvbench/kernels/cuda/{name}.cu needs nvcc: none found in $KVBENCH_NVCC, "
            "$CUDA_HOME/bin, $CUDA_PATH/bin or PATH"
        )
    src = SOURCE_DIR / f"{name}.cu"
    flags = (*NVCC_FLAGS, *extra)
    key = hashlib.sha256(
        src.read_bytes() + _nvcc_version(nvcc).encode() + " ".join(flags).encode()
    ).hexdigest()[:16]
    out_dir = out_dir or Path(platformdirs.user_cache_dir("kvbench")) / "cuda"
    lib = out_dir / f"{name}-{key}.so"
    log_path = lib.with_suffix(".log")
    if lib.is_file():
        return lib, log_path.read_text() if log_path.is_file() else ""
    out_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{name}-", suffix=".so")
    os.close(fd)
    try:
        proc = subprocess.run(
            [nvcc, *flags, "-o", tmp, str(src)], check=False, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise BuildError(f"nvcc failed on {src.name} (exit {proc.returncode}):\n{proc.stderr}")
        log_path.write_text(proc.stderr)
        os.replace(tmp, lib)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return lib, proc.stderr


@functools.cache
def load(name: str) -> ctypes.CDLL:
    """The built library of ``cuda/<name>.cu``, compiled on first use (cached per process)."""
    lib, _ = compile_source(name)
    return ctypes.CDLL(str(lib))
