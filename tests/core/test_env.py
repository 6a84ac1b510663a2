"""KVBENCH_* variables: every one kvbench reads is known, and any other one is reported."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

from kvbench.core import env as selectors
from kvbench.core.env import PREFIX, SETTINGS, unknown_settings
from kvbench.dispatch import core

ROOT = Path(__file__).resolve().parents[2]
#: The misspelling of issue 22, the example the docs and these tests give (the tree scan
#: below lets it through as an example, nothing else).
MISSPELT = "KVBENCH_KV_GATHER_FP8"


def test_every_kvbench_variable_in_the_tree_is_known():
    """The known list is the tree's: a new KVBENCH_* setting added anywhere without being
    listed (kvbench.core.env.SETTINGS or a selector) would be reported as a misspelling. The
    code and config are scanned here; README.md and docs/*.md by .ci/check_docs.py."""
    known = {*SETTINGS, *selectors.SELECTOR_VARS.values()}
    used: dict[str, str] = {}
    for folder in ("kvbench", "scripts", "tests", "benchmarks", ".ci"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in (".py", ".sh", ".md", "") and path.is_file():
                for name in re.findall(r"\bKVBENCH_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(
                        errors="replace")):
                    used.setdefault(name, str(path.relative_to(ROOT)))
    for name in ("asv.conf.json", "pyproject.toml"):
        for found in re.findall(r"\bKVBENCH_[A-Z0-9_]*[A-Z0-9]\b", (ROOT / name).read_text()):
            used.setdefault(found, name)
    assert {n: p for n, p in used.items() if n not in known and n != MISSPELT} == {}
    assert set(SETTINGS) <= set(used) | {"KVBENCH_CHECK"}  # none listed that nothing reads


def test_unknown_settings_names_the_closest_known_variable():
    env = {MISSPELT: "triton/legacy", "KVBENCH_CACHE_DIR": "/x", "KVBENCH_PAGED_DECODE": "auto",
           f"{PREFIX}ZZZZZZZZZZ": "1", "PATH": "/bin"}
    assert unknown_settings(env) == [
        (MISSPELT, "KVBENCH_KV_GATHER"), (f"{PREFIX}ZZZZZZZZZZ", None)]


def test_dispatch_warns_once_per_process_about_a_misspelt_selector(monkeypatch):
    monkeypatch.setattr(selectors, "_WARNED", set())
    monkeypatch.setenv(MISSPELT, "triton/legacy")
    core.clear_decisions()
    with pytest.warns(UserWarning, match=rf"{MISSPELT} is set but is not a kvbench variable, "
                      r"so it changes nothing \(did you mean KVBENCH_KV_GATHER\?\); the kernel "
                      r"selectors are KVBENCH_PAGED_DECODE, KVBENCH_KV_WRITE, KVBENCH_KV_GATHER"):
        core.dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second decision in this process: silent
        core.dispatch("kv_alloc", dtype="int64", shape={"n": 64}, device="cpu")
    core.clear_decisions()
