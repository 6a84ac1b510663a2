"""Whether a commit range changed anything a measurement reads: a step at a commit that
touched only documentation, tests or stored results is the machine's level moving, not the
code's.

What asv measures at a commit is the package it builds and installs there, run by the
benchmark suite of the working tree that runs asv (asv never checks out a commit's own
benchmarks/, and reads the asv.conf.json of that tree too). So of a commit's diff only the
files its build reads can move a number. The rule is written as the paths that can NOT, and
every other path counts as measured: a file this list does not know (a new source folder, a
build script) is assumed to matter, so a real change is never labelled harmless by omission.
A culprit the rule clears is still reported as found; the label says where to look
(`kvbench compare PARENT COMMIT` measures both commits on one machine).
"""

from __future__ import annotations

from fnmatch import fnmatchcase

#: Path patterns (fnmatch, matched against the whole repository-relative path) no measured
#: number depends on: prose, the test suite, stored results and dashboards, CI files, and the
#: benchmark suite and asv's configuration (asv runs the current ones at every commit), and
#: the developer scripts (the package asv builds holds kvbench/ only: pyproject.toml's
#: packages.find). A pattern ending in "/" names a folder and everything under it.
UNMEASURED: tuple[str, ...] = (
    "docs/", "tests/", "results/", "html/", ".ci/", ".github/", "benchmarks/", "asv.conf.json",
    "scripts/",
    "*.md", "*.rst", "*.png", "*.svg", ".gitignore", "LICENSE*",
)


def unmeasured(path: str) -> bool:
    """True when `path` matches UNMEASURED (a folder pattern, or a file pattern anywhere)."""
    for pattern in UNMEASURED:
        if pattern.endswith("/"):
            if path.startswith(pattern):
                return True
        elif fnmatchcase(path, pattern) or fnmatchcase(path.rsplit("/", 1)[-1], pattern):
            return True
    return False


def measured_paths(paths: list[str] | tuple[str, ...]) -> list[str]:
    """The paths of a diff a measurement can depend on (those UNMEASURED does not match)."""
    return [p for p in paths if not unmeasured(p)]
