"""Every repository path and relative link README.md and docs/*.md cite exists.

A path is cited when a page names it under one of the repository's top folders (`docs/`,
`scripts/`, `kvbench/`, `benchmarks/`, `tests/`, `results/`, `.ci/`), or links to it with a
relative markdown link. Globs `*` and brace lists `{a,b}` are expanded; a dotted name under a
Python module (`benchmarks/_common.pin_host_process`) is checked as that module. Not checked:
`REV:path` (a git object, e.g. `git show d60e21f:scripts/NAME` for a removed file), paths with
placeholders (`<...>`, `$VAR`, `...`). docs/data paths get their own, stricter checks in
tests/test_docs_data.py.
"""

from __future__ import annotations

import glob
import re
from pathlib import Path

from test_docs_data import ROOT, expand_braces, pages

#: A repository path in prose: not preceded by a path character or by `:` (a git object).
REPO_PATH = re.compile(
    r"(?<![\w./:-])((?:docs|scripts|kvbench|benchmarks|tests|results|\.ci)/[\w./*{},+-]*)")
#: The target of a markdown link or image, up to an anchor.
LINK = re.compile(r"\]\(([^)#\s]+)")


def exists(path: str) -> bool:
    for alt in expand_braces(path):
        if glob.glob(str(ROOT / alt.rstrip("/"))):
            return True
        module = re.fullmatch(r"(.+)\.([A-Za-z_]\w*)", alt)
        if module and (ROOT / f"{module.group(1)}.py").is_file():
            return True
    return False


def cited_paths(page: Path) -> set[str]:
    text = page.read_text()
    found = {m.rstrip(".,;:") for m in REPO_PATH.findall(text)}
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        found.add((page.parent / target).resolve().relative_to(ROOT).as_posix())
    return {p for p in found if not re.search(r"<|\$|\.\.\.", p)}


def test_exists_understands_globs_braces_and_module_attributes():
    assert exists("docs/{perf,decisions}.md") and exists("scripts/*.sh")
    assert exists("benchmarks/_common.GROUPS")
    assert not exists("docs/perf-notes.md") and not exists("scripts/{setup,nope}_x.sh")


def test_every_cited_path_and_link_exists():
    dead = [f"{page.name}: {path}" for page in pages() for path in sorted(cited_paths(page))
            if not exists(path)]
    assert not dead, f"{len(dead)} cited paths do not exist:\n" + "\n".join(dead)
