"""Env-var kernel selectors, and the one list of variables that change which kernel runs.

asv sets a selector in a benchmark's `setup`, after kvbench has been imported, so the value
is read when an op is called (`read_selector`), never at import time. `harness.metadata()`
reports `kernel_env_vars()`; keeping the list here (the dispatch side owns it) means a new
selector shows up in every result's metadata without a second copy to forget.
"""

from __future__ import annotations

import os
import warnings

from kvbench.core.env import SETTINGS, unknown_settings

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


def unknown_setting_messages() -> dict[str, str]:
    """{name: warning} for each KVBENCH_* variable set that kvbench does not read (a misspelt
    selector changes nothing: the run measures `auto`), naming the closest known variable and
    the selector variables."""
    selectors = ", ".join(SELECTOR_VARS.values())
    return {
        name: f"{name} is set but is not a kvbench variable, so it changes nothing"
        + (f" (did you mean {close}?)" if close else "")
        + f"; the kernel selectors are {selectors}; other settings: {', '.join(SETTINGS)}"
        for name, close in unknown_settings(SELECTOR_VARS.values())
    }


_WARNED: set[str] = set()


def warn_unknown_settings() -> None:
    """warnings.warn each unknown KVBENCH_* variable once per process (dispatch calls this
    when it makes a decision, not on the cached path)."""
    for name, message in unknown_setting_messages().items():
        if name not in _WARNED:
            _WARNED.add(name)
            warnings.warn(message, stacklevel=4)
