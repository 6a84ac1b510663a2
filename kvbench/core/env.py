"""Every KVBENCH_* environment variable kvbench reads, so a misspelt one can be reported.

A selector variable that names no row is refused by dispatch; a variable that is not a kvbench
setting at all (``KVBENCH_KV_GATHER_FP8`` for ``KVBENCH_KV_GATHER``) used to change nothing,
silently: the run measured ``auto`` while its author believed it measured a forced row. The
kernel selectors are listed where dispatch owns them (kvbench.dispatch.selectors.SELECTOR_VARS);
the other settings are listed here, each with what it does. tests/test_env.py keeps the two
lists equal to the KVBENCH_* names used anywhere in the tree.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping

PREFIX = "KVBENCH_"

#: kvbench's settings other than the kernel selectors: name -> what it does.
SETTINGS: dict[str, str] = {
    "KVBENCH_CACHE_DIR": "moves the cache root (perf tables, ceilings, CUDA builds, ...)",
    "KVBENCH_CHECK": "1: the public ops' safe mode (index values validated; kvbench.ops)",
    "KVBENCH_COMMIT": "the commit a run records when the tree has no .git (harness.meta)",
    "KVBENCH_NVCC": "the nvcc that builds kvbench/kernels/cuda/*.cu",
    "KVBENCH_FLASHINFER_SITE": "import root of a carried FlashInfer (the peer rows)",
    "KVBENCH_FLASHINFER_ALLOW_JIT": "1: FlashInfer may compile a module the carry lacks",
    "KVBENCH_NPM_CACHE": "where `kvbench publish` keeps npm tarballs (default: cache root)",
    "KVBENCH_SKIP_BROWSER": "1: the dashboard test skips its headless-browser render",
    "KVBENCH_ASV_SELECT": "the one case an asv measuring process measures, as "
                          "Class(params) (set by `kvbench bisect`; benchmarks/_common.py)",
    "KVBENCH_TORCH_CPU_INDEX": "scripts/setup.sh: the package index tried first for a CPU "
                               "torch build",
    "KVBENCH_TORCH_CPU_VERSION": "scripts/setup.sh: the CPU torch release pinned when that "
                                 "index is unreachable",
}


def unknown_settings(
    selectors: Iterable[str], environ: Mapping[str, str] | None = None
) -> list[tuple[str, str | None]]:
    """(name, the closest known name or None) of every KVBENCH_* variable set in `environ`
    (default os.environ) that is neither one of `selectors` nor in SETTINGS, sorted."""
    environ = os.environ if environ is None else environ
    known = {*selectors, *SETTINGS}
    return [
        (name, next(iter(difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)), None))
        for name in sorted(environ)
        if name.startswith(PREFIX) and name not in known
    ]
