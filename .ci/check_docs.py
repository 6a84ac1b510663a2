"""The documents hold up against the tree: CI runs this before the tests (.ci/run).

    python3 .ci/check_docs.py

Checked over README.md and docs/*.md (the pages):

- every repository path and relative link a page cites exists. A path is cited when a page
  names it under one of the repository's top folders (`docs/`, `scripts/`, `kvbench/`,
  `benchmarks/`, `tests/`, `results/`, `.ci/`), or links to it with a relative markdown link.
  Globs `*` and brace lists `{a,b}` are expanded; a dotted name under a Python module
  (`benchmarks/_common.GROUPS`) is checked as that module. Not checked: `REV:path`
  (a git object, e.g. `git show d60e21f:scripts/NAME` for a removed file), paths with
  placeholders (`<...>`, `$VAR`, `...`);
- every script under scripts/ is named by a page (a tool a user or maintainer runs again is
  documented; a one-off experiment is not committed to scripts/, git history keeps those);
- every KVBENCH_* variable a page names is one kvbench reads (kvbench.core.env), so a page
  cannot teach a misspelling that kvbench would ignore.

Exit 0 when all hold, 1 with one line per failure otherwise. The path matcher checks itself on
a scratch tree first, so a matcher that accepts everything fails here too.
"""

from __future__ import annotations

import glob
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: A repository path in prose: not preceded by a path character or by `:` (a git object).
REPO_PATH = re.compile(
    r"(?<![\w./:-])((?:docs|scripts|kvbench|benchmarks|tests|results|\.ci)/[\w./*{},+-]*)")
#: The target of a markdown link or image, up to an anchor.
LINK = re.compile(r"\]\(([^)#\s]+)")
#: A kvbench environment variable as a page writes it.
VARIABLE = re.compile(r"\bKVBENCH_[A-Z0-9_]*[A-Z0-9]\b")
#: The misspelling pages give as the example of what kvbench warns about (issue 22).
MISSPELT_EXAMPLE = "KVBENCH_KV_GATHER_FP8"


def pages(root: Path = ROOT) -> list[Path]:
    """README.md and docs/*.md, those that exist."""
    return [p for p in (root / "README.md", *sorted((root / "docs").glob("*.md"))) if p.is_file()]


def expand_braces(pattern: str) -> list[str]:
    """`a_{x,y}.json` -> [`a_x.json`, `a_y.json`]; nested and repeated lists expand in turn."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end():]
    return [out for alt in match.group(1).split(",") for out in expand_braces(head + alt + tail)]


def exists(path: str, root: Path = ROOT) -> bool:
    for alt in expand_braces(path):
        if glob.glob(str(root / alt.rstrip("/"))):
            return True
        module = re.fullmatch(r"(.+)\.([A-Za-z_]\w*)", alt)
        if module and (root / f"{module.group(1)}.py").is_file():
            return True
    return False


def cited_paths(page: Path, root: Path = ROOT) -> set[str]:
    """Repository paths and relative link targets a page cites (placeholders left out). A link
    that leaves the repository is kept as written, so it is reported."""
    text = page.read_text()
    found = {m.rstrip(".,;:") for m in REPO_PATH.findall(text)}
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        resolved = (page.parent / target).resolve()
        try:
            found.add(resolved.relative_to(root.resolve()).as_posix())
        except ValueError:
            found.add(target)
    return {p for p in found if not re.search(r"<|\$|\.\.\.", p)}


def dead_paths(root: Path = ROOT) -> list[str]:
    return [f"{page.relative_to(root)}: {path} does not exist" for page in pages(root)
            for path in sorted(cited_paths(page, root)) if not exists(path, root)]


def unnamed_scripts(root: Path = ROOT) -> list[str]:
    scripts = sorted(p.relative_to(root).as_posix() for p in (root / "scripts").rglob("*")
                     if p.is_file() and p.suffix in (".py", ".sh")
                     and "__pycache__" not in p.parts)
    text = "\n".join(page.read_text() for page in pages(root))
    return [f"{s}: named by no page (README.md, docs/*.md)" for s in scripts if s not in text]


def unknown_variables(root: Path = ROOT) -> list[str]:
    sys.path.insert(0, str(root))
    from kvbench.core.env import SELECTOR_VARS, SETTINGS

    known = {*SETTINGS, *SELECTOR_VARS.values(), MISSPELT_EXAMPLE}
    return [f"{page.relative_to(root)}: {name} is no kvbench variable"
            for page in pages(root) for name in sorted(set(VARIABLE.findall(page.read_text())))
            if name not in known]


def self_test() -> None:
    """The matcher on a scratch tree: what exists is found, what does not is reported."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel in ("docs/perf.md", "docs/decisions.md", "scripts/setup.sh",
                    "benchmarks/_common.py"):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("")
        assert exists("docs/{perf,decisions}.md", root) and exists("scripts/*.sh", root)
        assert exists("benchmarks/_common.GROUPS", root)
        assert not exists("docs/perf-notes.md", root)
        assert not exists("scripts/{setup,nope}_x.sh", root)
        (root / "README.md").write_text(
            "Run `bash scripts/setup.sh`, see [perf](docs/perf.md), `scripts/gone.sh`, "
            "[x](docs/nope.md#a), `git show abc1234:scripts/old.sh`, `docs/<page>.md`.\n")
        assert dead_paths(root) == ["README.md: docs/nope.md does not exist",
                                    "README.md: scripts/gone.sh does not exist"], dead_paths(root)


def main() -> int:
    self_test()
    failures = dead_paths() + unnamed_scripts() + unknown_variables()
    for line in failures:
        print(line)
    checked = sum(len(cited_paths(page)) for page in pages())
    if failures:
        print(f"check_docs: {len(failures)} failures over {len(pages())} pages", file=sys.stderr)
        return 1
    print(f"check_docs: {len(pages())} pages, {checked} cited paths: all exist")
    return 0


if __name__ == "__main__":
    sys.exit(main())
