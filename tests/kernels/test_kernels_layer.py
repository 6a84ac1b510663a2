"""The kernels layer imports only torch / triton / numpy / the standard library, kvbench.core
and other kvbench.kernels modules (docs/architecture.md's dependency rules), and no kernel
module reaches for another kernel module's private (_underscore) names.

Lazy imports inside functions count: a cycle or an upward arrow is one whether it runs at
import time or on first call.
"""

from __future__ import annotations

import ast
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[2] / "kvbench" / "kernels"
#: Imports outside kernels/core that are still there, each with why (none).
PENDING: set[tuple[str, str]] = set()


def _kvbench_imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, imported names) for every import of a kvbench module in `path`, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] == "kvbench":
                found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names if a.name.split(".")[0] == "kvbench"]
    return found


def test_kernels_import_only_kernels_and_core():
    bad = []
    for path in sorted(KERNELS.glob("*.py")):
        for module, _ in _kvbench_imports(path):
            inside = module.startswith(("kvbench.kernels", "kvbench.core")) or module == "kvbench"
            if not inside and (path.name, module) not in PENDING:
                bad.append(f"{path.name}: {module}")
    assert not bad, "kernels/ imports from above its layer:\n" + "\n".join(bad)


def test_no_kernel_module_imports_private_names_of_another():
    bad = []
    for path in sorted(KERNELS.glob("*.py")):
        for module, names in _kvbench_imports(path):
            last = module.rsplit(".", 1)[-1]
            if not module.startswith("kvbench.kernels.") or last.startswith("_"):
                continue  # kernels' own _helper modules are the shared internals
            private = [n for n in names if n.startswith("_")]
            if private:
                bad.append(f"{path.name}: {module} {private}")
    assert not bad, "private names imported across kernel modules:\n" + "\n".join(bad)
