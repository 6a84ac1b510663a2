"""One cache root for everything kvbench keeps between runs, and its subfolders.

The root is ``$KVBENCH_CACHE_DIR``, else platformdirs' user cache directory for "kvbench"
(``~/.cache/kvbench`` on Linux). Under it:

    perf/          the perf tables `kvbench tune` writes and dispatch ranks rows by
    ceilings.json  the bandwidth ceilings `kvbench calibrate` measured, per device name
    cuda/          the shared libraries built from kvbench/kernels/cuda/*.cu, with their hashes
    flashinfer/    FlashInfer's JIT workspace (generated sources, lock, log; tvm-ffi's cache)
    npm/           the npm tarballs `kvbench publish` vendors into the dashboard

Why one root that is private: the cache holds a shared library that kvbench loads into the
process and numbers that decide which kernel runs, so another user able to write there could
run code as this user or steer dispatch. The root is created with mode 0700. An existing root
owned by another user is refused; one writable by group or others is made 0700 with a
warning when it is this user's own (refused when it is a shared sticky directory such as
/tmp). Either refusal is a CacheRootError (a ValueError) naming the directory, what is wrong
and what to do. Every subfolder passes the same checks each time it is used (a private root
does not make a subfolder private: one created before the root was fixed, or a symlink to a
shared folder, would still let others write the library's hash record or the perf tables).
"""

from __future__ import annotations

import os
import stat
import warnings
from pathlib import Path

#: The variable that moves the cache root.
CACHE_DIR_VAR = "KVBENCH_CACHE_DIR"

PERF_TABLES = "perf"
CEILINGS_FILE = "ceilings.json"
CUDA_BUILDS = "cuda"
FLASHINFER_WORKSPACE = "flashinfer"
NPM_TARBALLS = "npm"


class CacheRootError(ValueError):
    """The cache root cannot be used safely; the message says why and what to do."""


def default_cache_root() -> Path:
    """platformdirs' user cache directory for kvbench (where the root is without the variable)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("kvbench"))


def cache_root(*, create: bool = True) -> Path:
    """The cache root, checked on every call (one stat) and created private (0700) if missing.

    create=False is for readers: a missing root is returned as it is (there is nothing in it
    to read), so looking something up never creates folders or fails on a read-only home.
    CacheRootError when the root is not a directory, is owned by another user, or is a shared
    sticky directory; a root of this user's that group or others can write is made 0700."""
    override = os.environ.get(CACHE_DIR_VAR)
    root = Path(override).expanduser() if override else default_cache_root()
    root = root.absolute()
    where = f"{CACHE_DIR_VAR}={override}" if override else "the default cache root"
    if not create and not root.exists():
        return root
    try:
        root.mkdir(parents=True, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise CacheRootError(f"{where}: cannot create {root} ({exc.strerror}); set "
                             f"{CACHE_DIR_VAR} to a directory of yours") from None
    check_private(root, where)
    return root


def check_private(root: Path, where: str) -> None:
    """CacheRootError unless `root` is a directory of this user's that no one else can write
    (one of this user's that group or others can write is made 0700, with a warning)."""
    st = root.stat()  # follows a symlink: what matters is the directory written into
    if not stat.S_ISDIR(st.st_mode):
        raise CacheRootError(f"{where}: {root} is not a directory")
    if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
        raise CacheRootError(
            f"{where}: {root} is owned by uid {st.st_uid}, not by this user (uid "
            f"{os.geteuid()}): another user could replace what kvbench loads from it. Set "
            f"{CACHE_DIR_VAR} to a directory of yours"
        )
    mode = stat.S_IMODE(st.st_mode)
    if not mode & 0o022:
        return
    if mode & stat.S_ISVTX:
        raise CacheRootError(
            f"{where}: {root} is a shared directory (mode {mode:o}) that others can write: "
            f"set {CACHE_DIR_VAR} to a folder of yours (kvbench creates it private)"
        )
    os.chmod(root, 0o700)
    warnings.warn(f"kvbench cache root {root} was writable by group or others (mode {mode:o}); "
                  "made it private (0700)", stacklevel=3)


def cache_subdir(name: str, *, create: bool = True) -> Path:
    """``<cache root>/<name>``, created 0700 if missing (create=False: as cache_root), and
    checked like the root when it exists (CacheRootError: not a directory, another user's,
    or a shared sticky one; made 0700 with a warning when only its mode was wrong)."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"a cache subfolder is one plain name, got {name!r}")
    path = cache_root(create=create) / name
    if create:
        try:
            path.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:  # FileExistsError included: a file where the folder goes
            raise CacheRootError(f"cache subfolder {path}: cannot create it ({exc.strerror}); "
                                 "move it aside or remove it") from None
    if path.exists():
        check_private(path, f"cache subfolder {name}/")
    return path


def perf_tables_dir(*, create: bool = True) -> Path:
    """Where `kvbench tune` stores one perf table per (device name, op)."""
    return cache_subdir(PERF_TABLES, create=create)


def ceilings_file(*, create: bool = True) -> Path:
    """The measured ceilings of every device this user calibrated (create: its folder)."""
    return cache_root(create=create) / CEILINGS_FILE


def cuda_build_dir() -> Path:
    """Where kvbench/kernels/cuda_build.py keeps built libraries and their hashes."""
    return cache_subdir(CUDA_BUILDS)


def flashinfer_workspace_dir() -> Path:
    """FlashInfer's JIT workspace (FLASHINFER_WORKSPACE_BASE unless the caller set one)."""
    return cache_subdir(FLASHINFER_WORKSPACE)


def npm_cache_dir() -> Path:
    """Where `kvbench publish` keeps the dashboard's npm tarballs."""
    return cache_subdir(NPM_TARBALLS)


def main(argv: list[str] | None = None) -> int:
    """``python -m kvbench.core.paths [NAME]``: print the cache root, or its subfolder NAME
    (created private), so shell scripts keep their work there instead of a fixed /tmp name."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("usage: python -m kvbench.core.paths [SUBFOLDER]", file=sys.stderr)
        return 2
    try:
        print(cache_subdir(args[0]) if args else cache_root())
    except ValueError as exc:  # CacheRootError included: say why, exit as a usage error
        print(f"kvbench cache: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
