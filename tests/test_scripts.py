"""scripts/ holds the tools a user or maintainer runs again, each documented.

Checked here, on the scripts' text (no test imports or runs a script): each script's header
says how to run it, and no script or module works under a fixed name in the shared temp
directory. That every script is named by README.md or a docs page is .ci/check_docs.py's.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from kvbench.kernels import paged_decode as pd

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


def _scripts() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in SCRIPTS.rglob("*")
                  if p.is_file() and p.suffix in (".py", ".sh") and "__pycache__" not in p.parts)


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


def test_register_cap_only_reaches_compiled_launches(monkeypatch):
    cfg = {"BLOCK_N": 128, "num_warps": 4, "num_stages": 2, "maxnreg": 128}
    monkeypatch.setattr(pd, "_INTERPRET", False)
    assert pd._register_cap(cfg) == {"maxnreg": 128}
    assert pd._register_cap({k: v for k, v in cfg.items() if k != "maxnreg"}) == {}
    monkeypatch.setattr(pd, "_INTERPRET", True)  # the interpreter has no registers to cap
    assert pd._register_cap(cfg) == {}


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
