"""Every KVBENCH_* environment variable kvbench reads, so a misspelt one can be reported.

A selector variable that names no row is refused by dispatch; a variable that is not a kvbench
setting at all (``KVBENCH_KV_GATHER_FP8`` for ``KVBENCH_KV_GATHER``) used to change nothing,
silently: the run measured ``auto`` while its author believed it measured a forced row. The
kernel selectors (SELECTOR_VARS) and the other settings (SETTINGS) are both listed here, each
setting with what it does; tests/test_env.py keeps the two lists equal to the KVBENCH_* names
used anywhere in the tree.

Selectors are read when an op is called (`read_selector`), never at import time: asv sets a
selector in a benchmark's `setup`, after kvbench has been imported. `harness.metadata()`
reports `kernel_env_vars()`, so a new selector shows up in every result's metadata.
"""

from __future__ import annotations

import difflib
import os
import warnings
from collections.abc import Mapping

PREFIX = "KVBENCH_"

#: kvbench's settings other than the kernel selectors: name -> what it does.
SETTINGS: dict[str, str] = {
    "KVBENCH_CACHE_DIR": "moves the cache root (perf tables, ceilings, CUDA builds, ...)",
    "KVBENCH_CHECK": "1: the public ops' safe mode (index values validated; kvbench.api)",
    "KVBENCH_COMMIT": "the commit a run records when the tree has no .git (harness.meta)",
    "KVBENCH_NVCC": "the nvcc that builds kvbench/kernels/cuda/*.cu",
    "KVBENCH_FLASHINFER_SITE": "import root of a carried FlashInfer (the peer rows)",
    "KVBENCH_FLASHINFER_ALLOW_JIT": "1: FlashInfer may compile a module the carry lacks",
    "KVBENCH_NPM_CACHE": "where `kvbench publish` keeps npm tarballs (default: cache root)",
    "KVBENCH_SKIP_BROWSER": "1: the dashboard test skips its headless-browser render",
    "KVBENCH_ASV_SELECT": "the classes or Class(params) cases an asv measuring process "
                          "measures, ';' between names (set by `kvbench bisect`, compare's "
                          "recheck, --confirm; benchmarks/_common.py)",
    "KVBENCH_TORCH_CPU_INDEX": "scripts/setup.sh: the package index tried first for a CPU "
                               "torch build",
    "KVBENCH_TORCH_CPU_VERSION": "scripts/setup.sh: the CPU torch release pinned when that "
                                 "index is unreachable",
}

#: The selector value that lets dispatch choose.
AUTO = "auto"

#: op name -> the environment variable that selects its kernel row.
SELECTOR_VARS: dict[str, str] = {
    "paged_decode": "KVBENCH_PAGED_DECODE",
    "kv_write": "KVBENCH_KV_WRITE",
    "kv_gather_fp8": "KVBENCH_KV_GATHER",
    "kv_alloc": "KVBENCH_KV_ALLOC",
}

#: Variables outside kvbench that change which kernel runs or how it is compiled.
OTHER_KERNEL_ENV_VARS: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "TRITON_INTERPRET",
    "TRITON_CACHE_DIR",
    "TRITON_PRINT_AUTOTUNING",
    "TORCH_CUDA_ARCH_LIST",
    "CUDA_LAUNCH_BLOCKING",
    "PYTORCH_CUDA_ALLOC_CONF",
)


def selector_var(op: str) -> str:
    """The selector variable of `op`; ValueError naming the known ops otherwise."""
    try:
        return SELECTOR_VARS[op]
    except KeyError:
        known = ", ".join(sorted(SELECTOR_VARS))
        raise ValueError(f"unknown op {op!r}: kernel selectors exist for {known}") from None


def read_selector(op: str) -> str:
    """The current selector value for `op`: "auto" (default, also when empty) or a spec name.

    Validation of the spec name against the registry happens in dispatch, which knows the rows.
    """
    value = os.environ.get(selector_var(op), "").strip()
    return value or AUTO


def kernel_env_vars() -> dict[str, str | None]:
    """Every variable that changes which kernel runs, with its value now (None when unset)."""
    names = list(SELECTOR_VARS.values()) + list(OTHER_KERNEL_ENV_VARS)
    return {name: os.environ.get(name) for name in names}


def unknown_settings(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """(name, the closest known name or None) of every KVBENCH_* variable set in `environ`
    (default os.environ) that is neither a selector (SELECTOR_VARS) nor in SETTINGS, sorted."""
    environ = os.environ if environ is None else environ
    known = {*SELECTOR_VARS.values(), *SETTINGS}
    return [
        (name, next(iter(difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)), None))
        for name in sorted(environ)
        if name.startswith(PREFIX) and name not in known
    ]


def unknown_setting_messages() -> dict[str, str]:
    """{name: warning} for each KVBENCH_* variable set that kvbench does not read (a misspelt
    selector changes nothing: the run measures `auto`), naming the closest known variable and
    the selector variables."""
    selectors = ", ".join(SELECTOR_VARS.values())
    return {
        name: f"{name} is set but is not a kvbench variable, so it changes nothing"
        + (f" (did you mean {close}?)" if close else "")
        + f"; the kernel selectors are {selectors}; other settings: {', '.join(SETTINGS)}"
        for name, close in unknown_settings()
    }


_WARNED: set[str] = set()


def warn_unknown_settings() -> None:
    """warnings.warn each unknown KVBENCH_* variable once per process (dispatch calls this
    when it makes a decision, not on the cached path)."""
    for name, message in unknown_setting_messages().items():
        if name not in _WARNED:
            _WARNED.add(name)
            warnings.warn(message, stacklevel=4)
