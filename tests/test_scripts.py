"""scripts/ holds the tools a user or maintainer runs again, each documented.

scripts/ is not a package: a script is loaded from its path. Checked here: every script is
listed in README.md's "Tools" section and every listed one exists (a one-off experiment that
lands in scripts/ fails here: git history keeps those, docs/decisions.md names them); each
script's header says how to run it; and what a wrong edit would silently break on the device,
where a failed call costs minutes (the suite profiler refuses an unknown class by name).
"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvbench.kernels import paged_decode as pd

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scripts() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in SCRIPTS.rglob("*")
                  if p.is_file() and p.suffix in (".py", ".sh") and "__pycache__" not in p.parts)


def _tools_section() -> str:
    text = (ROOT / "README.md").read_text()
    match = re.search(r"^## Tools\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.MULTILINE)
    assert match, "README.md has no '## Tools' section"
    return match.group(1)


def test_every_script_is_a_listed_tool_and_every_listed_tool_exists():
    listed = set(re.findall(r"`(scripts/[\w./-]+\.(?:py|sh))", _tools_section()))
    present = set(_scripts())
    assert present - listed == set(), (
        f"scripts not in README.md's Tools section: {sorted(present - listed)} (a tool gets a "
        "line there; a one-off experiment is not committed to scripts/)")
    assert listed - present == set(), f"README.md's Tools lists missing scripts: {sorted(listed - present)}"


def _header(path: Path) -> str:
    text = path.read_text()
    if path.suffix == ".py":
        return ast.get_docstring(ast.parse(text)) or ""
    lines = text.splitlines()[1:]  # after the shebang: the leading comment block
    block = []
    for line in lines:
        if not line.startswith("#"):
            break
        block.append(line)
    return "\n".join(block)


@pytest.mark.parametrize("script", _scripts())
def test_every_script_header_says_what_it_is_for_and_how_to_run_it(script):
    header = _header(ROOT / script)
    runner = "bash" if script.endswith(".sh") else "python3?"
    assert re.search(rf"{runner} {re.escape(script)}", header), (
        f"{script}: its header (module docstring, or the comment block after the shebang) "
        f"must show how to run it ('{runner.rstrip('3?')} {script} ...')")
    assert len(header.split()) >= 15, f"{script}: its header must say what it is for"


@pytest.mark.parametrize("script", [s for s in _scripts() if s.endswith(".py") and
                                    "argparse" in (ROOT / s).read_text()])
def test_every_python_script_answers_help(script):
    """`--help` is the first thing a user types; argparse expands '%' in help texts, so a
    literal percent sign there crashes it instead of printing the usage."""
    res = subprocess.run([sys.executable, str(ROOT / script), "--help"], capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, f"{script} --help: exit {res.returncode}\n{res.stderr[-2000:]}"
    assert res.stdout.startswith("usage:"), res.stdout[:500]


def test_register_cap_only_reaches_compiled_launches(monkeypatch):
    cfg = {"BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "maxnreg": 128}
    monkeypatch.setattr(pd, "_INTERPRET", False)
    assert pd._register_cap(cfg) == {"maxnreg": 128}
    assert pd._register_cap({k: v for k, v in cfg.items() if k != "maxnreg"}) == {}
    monkeypatch.setattr(pd, "_INTERPRET", True)  # the interpreter has no registers to cap
    assert pd._register_cap(cfg) == {}


def test_profile_suite_names_an_unknown_class():
    res = subprocess.run([sys.executable, str(SCRIPTS / "profile_suite.py"), "NoSuchClass"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 2
    assert "NoSuchClass" in res.stderr and "PagedDecode" in res.stderr


def test_profile_suite_knows_every_suite_class():
    from benchmarks import _common

    profile = _load("profile_suite")
    grouped = {(m, f, c) for entries in _common.GROUPS.values() for m, f, c in entries}
    assert {(m, f, c) for c, (m, f) in profile.CLASSES.items()} == grouped


def test_no_fixed_names_in_the_shared_temp_directory():
    """A fixed path under /tmp (a clone, a list of hashes, a venv whose pip is then run, a JIT
    workspace) can be created first by another user of the machine, who then supplies what is
    read, run or loaded. Work goes to mktemp -d / tempfile.mkdtemp, or the private cache root
    (`python -m kvbench.core.paths NAME`)."""
    import re

    root = SCRIPTS.parent
    fixed = re.compile(r"/tmp/[\w$.{-]|gettempdir\(\)\)?\s*/\s*[\"']")
    found = []
    for folder in ("scripts", "kvbench", "benchmarks", ".ci"):
        for path in sorted((root / folder).rglob("*")):
            if path.suffix not in (".py", ".sh", "") or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if fixed.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not found, "fixed /tmp paths:\n" + "\n".join(found)
