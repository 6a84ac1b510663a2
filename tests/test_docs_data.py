"""docs/data holds the raw runs the docs cite, and nothing else.

A file under docs/data is cited when README.md or a docs/*.md page names it by path
(globs `*` and brace lists `{json,log}` are expanded), or when a page cites its folder
(`docs/data/FOLDER/`) and that folder's README.md lists the file by name (backticked, the
same expansions). A folder's README.md, which says what machine and code made its files,
counts as cited when any file of its folder is. Three checks:

- every docs/data path a page cites exists (a typo, or a file pruned while still cited, is
  a dead reference);
- every file under docs/data is cited (an uncited run log is noise the next engineer has to
  read to learn it is noise; git history keeps pruned runs);
- every file name a folder's README.md lists exists in that folder (a README describing
  pruned files misleads).
"""

from __future__ import annotations

import fnmatch
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "docs" / "data"

#: A docs/data path as the pages write it: up to whitespace, a backtick, a quote or a bracket.
CITED = re.compile(r"docs/data/[^\s`'\"()\[\]<>|]*")
BACKTICKED = re.compile(r"`([^`]+)`")


def pages() -> list[Path]:
    """The documents that may cite docs/data: README.md and docs/*.md (not the data READMEs)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def expand_braces(pattern: str) -> list[str]:
    """`a_{x,y}.json` -> [`a_x.json`, `a_y.json`]; nested and repeated lists expand in turn."""
    match = re.search(r"\{([^{}]*)\}", pattern)
    if match is None:
        return [pattern]
    head, tail = pattern[: match.start()], pattern[match.end():]
    return [out for alt in match.group(1).split(",") for out in expand_braces(head + alt + tail)]


def data_files() -> set[str]:
    """Every file under docs/data, as a path relative to the repository root."""
    return {p.relative_to(ROOT).as_posix() for p in DATA.rglob("*") if p.is_file()}


def matches(pattern: str, files: set[str]) -> set[str]:
    return {f for alt in expand_braces(pattern) for f in files if fnmatch.fnmatchcase(f, alt)}


def citations() -> list[tuple[str, str]]:
    """(page, cited path) for every docs/data path in the pages, trailing punctuation cut."""
    found = []
    for page in pages():
        for raw in CITED.findall(page.read_text()):
            found.append((page.name, raw.rstrip(".,;:")))
    return found


def folder_listing(folder: Path, files: set[str]) -> set[str]:
    """The files a data folder's README.md lists by name (backticked names or patterns)."""
    readme = folder / "README.md"
    if not readme.is_file():
        return set()
    prefix = folder.relative_to(ROOT).as_posix() + "/"
    listed = {prefix + "README.md"}
    for token in BACKTICKED.findall(readme.read_text()):
        for word in token.replace(",", " , ").split():
            if "/" in word or not re.search(r"[\w*}]\.?[\w*}]*$", word):
                continue
            listed |= matches(prefix + word, files)
    # names written as `a.{json,log}` hold commas inside braces: try each token whole, too
    for token in BACKTICKED.findall(readme.read_text()):
        if "/" not in token and " " not in token:
            listed |= matches(prefix + token, files)
    return listed


def listed_names(readme: Path) -> list[str]:
    """The backticked file names and patterns of a data folder's README (no paths, no
    commands): a token with no slash or space that ends in a file extension."""
    names = []
    for token in BACKTICKED.findall(readme.read_text()):
        if "/" in token or " " in token:
            continue
        if re.search(r"\.(json|jsonl|log|csv|txt|patch|py|cu|png|tgz|md)(\}|$)|\.\{[\w,]+\}$", token):
            names.append(token)
    return names


def cited_and_dead() -> tuple[set[str], list[str]]:
    files = data_files()
    cited: set[str] = set()
    dead = []
    for page, path in citations():
        if path.endswith("/") or (ROOT / path).is_dir():
            folder = ROOT / path
            if not (folder / "README.md").is_file():
                dead.append(f"{page}: {path} (a cited folder needs a README.md listing its files)")
                continue
            cited |= folder_listing(folder, files)
            continue
        hit = matches(path, files)
        if not hit:
            dead.append(f"{page}: {path}")
        cited |= hit
    for path in list(cited):
        cited.add(path.rsplit("/", 1)[0] + "/README.md")
    return cited & files, dead


def test_expand_braces_and_matches():
    assert expand_braces("a_{x,y}.{json,log}") == ["a_x.json", "a_x.log", "a_y.json", "a_y.log"]
    assert matches("docs/data/f/t_*.json", {"docs/data/f/t_1.json", "docs/data/f/t_1.log"}) == {
        "docs/data/f/t_1.json"}
    assert matches("docs/data/f/t_1.{json,csv}", {"docs/data/f/t_1.json", "docs/data/f/t_1.log"}) == {
        "docs/data/f/t_1.json"}


def test_every_file_a_data_readme_lists_exists():
    files = data_files()
    missing = []
    for readme in sorted(DATA.rglob("README.md")):
        prefix = readme.parent.relative_to(ROOT).as_posix() + "/"
        for name in listed_names(readme):
            if not matches(prefix + name, files):
                missing.append(f"{prefix}README.md lists {name}")
    assert not missing, f"{len(missing)} names listed by data READMEs match no file:\n" + "\n".join(missing)


def test_every_cited_docs_data_path_exists():
    _, dead = cited_and_dead()
    assert not dead, f"{len(dead)} cited docs/data paths match no file:\n" + "\n".join(dead)


def test_every_docs_data_file_is_cited():
    cited, _ = cited_and_dead()
    uncited = sorted(data_files() - cited)
    assert not uncited, (
        f"{len(uncited)} of {len(data_files())} files under docs/data are cited by no page "
        "(README.md, docs/*.md) nor listed by a cited folder's README.md; cite them or delete "
        "them (git keeps them):\n" + "\n".join(uncited))
