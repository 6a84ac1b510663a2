"""Install a commit's wheel into an asv environment from asv's own process.

Why: asv installs each commit with `pip install --force-reinstall {wheel_file}`, so
`kvbench record` pays a pip start per commit (pip imports itself and reads the installed
distributions, which through kvbench-offline's .pth include the parent's whole
site-packages: on the GPU image, torch, CUDA and the NVIDIA wheels). A pure-Python wheel
needs none of that: its files are unpacked into the environment's scheme directories.
pypa's `installer` does that (the wheel spec's unpacking, RECORD, entry-point scripts); what
pip's --force-reinstall adds, removing the previous install's files, is done here from the
old distribution's RECORD, as pip does.
"""

from __future__ import annotations

import contextlib
import csv
import glob
import os
import re
import shutil
import sys

#: The scheme keys installer's destination needs (sysconfig.get_paths() names).
SCHEME_KEYS = ("purelib", "platlib", "headers", "scripts", "data")


def normalized(project: str) -> str:
    """A distribution name as wheels spell it in their .dist-info directory (PEP 427/503)."""
    return re.sub(r"[-_.]+", "_", project).lower()


def installed_dist_infos(site_dir: str, project: str) -> list[str]:
    """The .dist-info directories of `project` in `site_dir` (normally none or one)."""
    want = normalized(project)
    return sorted(path for path in glob.glob(os.path.join(site_dir, "*.dist-info"))
                  if normalized(os.path.basename(path).split("-")[0]) == want)


def remove_installed(site_dir: str, project: str) -> int:
    """Remove every file an installed `project` in `site_dir` lists in its RECORD, then the
    directories that became empty and the .dist-info itself; return the files removed.

    Only paths that resolve inside `site_dir` or its environment (RECORD's scripts live in
    ../../../bin) are removed: a RECORD is data, and a bad one must not delete elsewhere."""
    site_dir = os.path.realpath(site_dir)
    env_root = os.path.realpath(os.path.join(site_dir, os.pardir, os.pardir, os.pardir))
    removed = 0
    for info in installed_dist_infos(site_dir, project):
        dirs: set[str] = set()
        record = os.path.join(info, "RECORD")
        if os.path.isfile(record):
            with open(record, newline="") as f:
                for row in csv.reader(f):
                    if not row:
                        continue
                    path = os.path.realpath(os.path.join(site_dir, row[0]))
                    if os.path.commonpath([path, env_root]) != env_root:
                        continue
                    with contextlib.suppress(FileNotFoundError):
                        os.remove(path)
                        removed += 1
                    dirs.add(os.path.dirname(path))
                    if path.endswith(".py"):  # the bytecode Python wrote on import (not in RECORD)
                        stem = os.path.splitext(os.path.basename(path))[0]
                        cache = os.path.join(os.path.dirname(path), "__pycache__")
                        for pyc in glob.glob(os.path.join(glob.escape(cache), f"{stem}.*.pyc")):
                            with contextlib.suppress(FileNotFoundError):
                                os.remove(pyc)
                        dirs.add(cache)
        shutil.rmtree(info, ignore_errors=True)
        for d in sorted(dirs, key=len, reverse=True):  # deepest first
            while d.startswith(site_dir + os.sep):
                try:
                    os.rmdir(d)
                except OSError:  # not empty, or gone
                    break
                d = os.path.dirname(d)
    return removed


def install_wheel(wheel: str, scheme: dict[str, str], project: str,
                  interpreter: str = sys.executable) -> None:
    """Replace any installed `project` in scheme["purelib"] by `wheel` (pip's
    --force-reinstall --no-deps, without pip). No bytecode is compiled here: Python writes it
    on the first import, and remove_installed deletes it with its source."""
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    missing = [k for k in SCHEME_KEYS if k not in scheme]
    if missing:
        raise ValueError(f"scheme lacks {missing}; needs {', '.join(SCHEME_KEYS)}")
    if not os.path.isfile(wheel) or not wheel.endswith(".whl"):
        raise ValueError(f"{wheel!r} is not a wheel file")
    remove_installed(scheme["purelib"], project)
    destination = SchemeDictionaryDestination(
        {k: scheme[k] for k in SCHEME_KEYS}, interpreter=interpreter, script_kind="posix",
        bytecode_optimization_levels=())
    with WheelFile.open(wheel) as source:
        install(source, destination, {"INSTALLER": b"kvbench-asv\n"})
