"""The plugin's in-process wheel install (kvbench/history/asv/wheel_install.py): what pip's
--force-reinstall did per commit, without pip.

- the wheel's files land in the scheme (package data, the console script), with a RECORD;
- a second commit's wheel replaces the first: a file only the old commit had is gone;
- a RECORD is data: a line pointing outside the environment deletes nothing there;
- bad input (no wheel, an incomplete scheme) is refused by name.

Wheels are built here as zip files the way the wheel spec lays them out (PEP 427).
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from kvbench.history.asv import wheel_install

PROJECT = "kvbench"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def make_wheel(folder: Path, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of PROJECT holding `files` (path -> text) and a console script."""
    info = f"{PROJECT}-{version}.dist-info"
    contents = {name: text.encode() for name, text in files.items()}
    contents[f"{info}/METADATA"] = (f"Metadata-Version: 2.1\nName: {PROJECT}\n"
                                    f"Version: {version}\n").encode()
    contents[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                 b"Tag: py3-none-any\n")
    contents[f"{info}/entry_points.txt"] = b"[console_scripts]\nkvbench = kvbench.cli:main\n"
    record = [_record_line(n, d) for n, d in contents.items()] + [f"{info}/RECORD,,"]
    contents[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    path = folder / f"{PROJECT}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in contents.items():
            zf.writestr(name, data)
    return path


@pytest.fixture
def scheme(tmp_path: Path) -> dict[str, str]:
    env = tmp_path / "env"
    site = env / "lib" / "python3.11" / "site-packages"
    paths = {"purelib": site, "platlib": site, "headers": env / "include", "scripts": env / "bin",
             "data": env}
    for p in paths.values():
        p.mkdir(parents=True, exist_ok=True)
    return {k: str(v) for k, v in paths.items()}


def test_installs_files_data_and_script(tmp_path: Path, scheme: dict[str, str]) -> None:
    wheel = make_wheel(tmp_path, "0.1.0", {"kvbench/__init__.py": "X = 1\n",
                                           "kvbench/kernels/k.cu": "// cuda\n"})
    wheel_install.install_wheel(str(wheel), scheme, PROJECT, interpreter="/env/bin/python")
    site = Path(scheme["purelib"])
    assert (site / "kvbench/__init__.py").read_text() == "X = 1\n"
    assert (site / "kvbench/kernels/k.cu").read_text() == "// cuda\n"
    script = (Path(scheme["scripts"]) / "kvbench").read_text()
    assert script.startswith("#!/env/bin/python") and "kvbench.cli" in script
    assert wheel_install.installed_dist_infos(str(site), PROJECT) == [
        str(site / "kvbench-0.1.0.dist-info")]
    assert (site / "kvbench-0.1.0.dist-info" / "INSTALLER").read_bytes() == b"kvbench-asv\n"


def test_next_commit_replaces_the_previous(tmp_path: Path, scheme: dict[str, str]) -> None:
    old = make_wheel(tmp_path, "0.1.0", {"kvbench/__init__.py": "OLD = 1\n",
                                         "kvbench/only_old/mod.py": "gone = True\n"})
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new = make_wheel(new_dir, "0.2.0", {"kvbench/__init__.py": "NEW = 1\n"})
    site = Path(scheme["purelib"])
    (site / "other_pkg").mkdir()
    (site / "other_pkg" / "keep.py").write_text("")
    wheel_install.install_wheel(str(old), scheme, PROJECT)
    for folder in ("kvbench", "kvbench/only_old"):  # bytecode Python wrote on import
        (site / folder / "__pycache__").mkdir()
    (site / "kvbench/__pycache__/__init__.cpython-311.pyc").write_bytes(b"old")
    (site / "kvbench/only_old/__pycache__/mod.cpython-311.pyc").write_bytes(b"old")
    wheel_install.install_wheel(str(new), scheme, PROJECT)
    assert not (site / "kvbench/__pycache__/__init__.cpython-311.pyc").exists()
    assert (site / "kvbench/__init__.py").read_text() == "NEW = 1\n"
    assert not (site / "kvbench/only_old").exists()  # file removed, then its empty folder
    assert wheel_install.installed_dist_infos(str(site), PROJECT) == [
        str(site / "kvbench-0.2.0.dist-info")]
    assert (site / "other_pkg" / "keep.py").exists()  # another distribution is untouched


def test_a_record_pointing_outside_the_env_removes_nothing_there(
        tmp_path: Path, scheme: dict[str, str]) -> None:
    outside = tmp_path / "precious.txt"
    outside.write_text("user data")
    wheel_install.install_wheel(str(make_wheel(tmp_path, "0.1.0", {"kvbench/a.py": ""})),
                                scheme, PROJECT)
    record = Path(scheme["purelib"]) / "kvbench-0.1.0.dist-info" / "RECORD"
    with record.open("a") as f:
        f.write("../../../../precious.txt,,\n")
    assert wheel_install.remove_installed(scheme["purelib"], PROJECT) >= 1
    assert outside.read_text() == "user data"
    assert not (Path(scheme["purelib"]) / "kvbench").exists()


def test_bad_input_is_refused_by_name(tmp_path: Path, scheme: dict[str, str]) -> None:
    wheel = make_wheel(tmp_path, "0.1.0", {"kvbench/a.py": ""})
    with pytest.raises(ValueError, match="not a wheel"):
        wheel_install.install_wheel(str(tmp_path / "missing.whl"), scheme, PROJECT)
    partial = {k: v for k, v in scheme.items() if k != "scripts"}
    with pytest.raises(ValueError, match=r"scheme lacks \['scripts'\]"):
        wheel_install.install_wheel(str(wheel), partial, PROJECT)


def test_names_are_normalized_as_wheels_spell_them() -> None:
    assert wheel_install.normalized("KV-Bench.x") == "kv_bench_x"
