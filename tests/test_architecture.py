"""The architecture holds: the import contracts of pyproject.toml ([tool.importlinter]) pass,
and every op the registry knows is its files under one name.

The contracts: the layers (core <- harness | fixtures | kernels <- dispatch <- ops <- measure
<- history <- cli; imports inside functions count) and no import cycle between sibling
modules or packages at any depth. import-linter decides; this test runs it the way CI does.
"""

from __future__ import annotations

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


#: An op's files, each named after it: its kernels, its op module, its asv benchmark, its test.
OP_FILES = ("kvbench/kernels/{op}.py", "kvbench/ops/{op}.py", "benchmarks/{op}.py",
            "tests/**/test_{op}.py")


def missing_op_files(root: Path, ops) -> list[str]:
    """`op: pattern` for every file of OP_FILES an op of `ops` lacks under `root`."""
    return [f"{op}: {pattern.format(op=op)}" for op in ops for pattern in OP_FILES
            if not any(root.glob(pattern.format(op=op)))]


def test_every_op_is_its_files_under_one_name():
    from kvbench.dispatch.registry import OPS

    assert OPS, "the registry knows no op"
    assert missing_op_files(ROOT, OPS) == []


def test_an_op_without_its_benchmark_is_reported(tmp_path):
    """The check can fail: a tree whose op lacks a file is reported, by op and file."""
    for pattern in OP_FILES:
        path = tmp_path / pattern.format(op="toy").replace("**/", "")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert missing_op_files(tmp_path, ["toy"]) == []
    (tmp_path / "benchmarks" / "toy.py").unlink()
    assert missing_op_files(tmp_path, ["toy", "other"]) == [
        "toy: benchmarks/toy.py", *(f"other: {p.format(op='other')}" for p in OP_FILES)]
