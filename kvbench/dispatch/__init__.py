"""Kernel registry and dispatch: which row serves a problem, and why.

Importing this package imports no kernel code: registry rows name their targets as
"module:function" strings, loaded when a row is first selected or checked. It imports the op
oracle (kvbench.ops) directly: the problem keys and each row's golden check.

    sel = dispatch("paged_decode", dtype="fp16", tags=("kv:paged",), shape={...})
    sel = select(problem)      # a kvbench.ops Problem (describe_<op>, OpInputs.problem)
    sel.spec.name, sel.target, sel.bucket, print(sel.explain())

set_perf_provider(fn) installs measured latencies (fn returns milliseconds); `kvbench tune`
stores per-device tables that the default provider reads.
"""

from kvbench.core.env import read_selector
from kvbench.dispatch.core import (
    DispatchError,
    Selection,
    active_registry,
    clear_decisions,
    clear_golden,
    device_name,
    dispatch,
    get_perf_provider,
    record_golden,
    reset_perf_provider,
    select,
    set_perf_provider,
    spec_names,
    using_registry,
    verified_rows,
)
from kvbench.dispatch.registry import BUCKETS, REGISTRY, Registry, bucket
from kvbench.dispatch.spec import GoldenRecord, KernelSpec, LayoutRequirement, Preference

__all__ = [
    "BUCKETS",
    "REGISTRY",
    "DispatchError",
    "GoldenRecord",
    "KernelSpec",
    "LayoutRequirement",
    "Preference",
    "Registry",
    "Selection",
    "active_registry",
    "bucket",
    "clear_decisions",
    "clear_golden",
    "device_name",
    "dispatch",
    "get_perf_provider",
    "read_selector",
    "record_golden",
    "reset_perf_provider",
    "select",
    "set_perf_provider",
    "spec_names",
    "using_registry",
    "verified_rows",
]
