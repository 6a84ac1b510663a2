"""The architecture holds: the import contracts of pyproject.toml ([tool.importlinter]) pass,
and docs/architecture.md's op table matches the tree.

The contracts: the layers (core <- harness | fixtures | kernels <- dispatch <- ops <- measure
<- history <- cli; imports inside functions count) and no import cycle between sibling
modules or packages at any depth. import-linter decides; this test runs it the way CI does.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports() -> subprocess.CompletedProcess:
    exe = shutil.which("lint-imports")
    cmd = [exe] if exe else [sys.executable, "-m", "importlinter.cli"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)


def test_import_contracts_pass():
    result = _lint_imports()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert f"{len(contracts['contracts'])} kept, 0 broken" in result.stdout


def test_a_planted_upward_import_breaks_the_layer_contract(tmp_path):
    """The contract can fail: a harness module importing dispatch is reported."""
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "kvbench", copy / "kvbench",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    work = copy / "kvbench" / "harness" / "work.py"
    work.write_text(work.read_text() + "\nfrom kvbench.dispatch import core  # planted\n")
    exe = shutil.which("lint-imports")
    cmd = [exe] if exe else [sys.executable, "-m", "importlinter.cli"]
    env = {"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(cmd, cwd=copy, capture_output=True, text=True, check=False, env=env)
    assert result.returncode != 0
    assert "kvbench.harness is not allowed to import kvbench.dispatch" in result.stdout


def _documented_ops() -> dict[str, set[str]]:
    """docs/architecture.md's "One name per op" table: op -> the files it names."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## One name per op", 1)[1].split("\n## ", 1)[0]
    ops: dict[str, set[str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`") or cells[0].startswith("`op"):
            continue
        op = cells[0].strip("`")
        ops[op] = set(re.findall(r"`([\w/.]+\.py)`", " ".join(cells[1:])))
    return ops


def test_every_op_is_its_files_under_one_name():
    from kvbench.dispatch.registry import OPS

    documented = _documented_ops()
    assert set(documented) == set(OPS), "docs/architecture.md lists another set of ops"
    for op, files in documented.items():
        assert files, f"{op}: no files listed"
        for f in files:
            assert (ROOT / f).is_file(), f"{op}: {f} is listed but does not exist"
            assert op in Path(f).name, f"{op}: {f} is not named after the op"
        for must in (f"kvbench/ops/{op}.py", f"tests/test_{op}.py"):
            assert must in files, f"{op}: {must} missing from its row"
