"""The sidecar: what kvbench keeps beside each asv result and asv's tools ignore.

asv stores one number series per case. kvbench also needs, per commit and case, the registry
row `auto` actually ran, the measured error of the verified timed call, the compiled kernel's
resources, why a case got no number, and the GPU's state around each measurement group. The
suite's setup_cache process writes them here, one JSON file per (commit, env, group):

    <results_dir>/<machine>/kvbench/<commit[:8]>-<env name>.<group>.kvjson

In a sub-folder and not named *.json on purpose: asv 0.6.6 walks results/ recursively and
loads every *.json as a result file (warning on each one it cannot read). The format is in
docs/harness.md ("The sidecar"); kvbench/history/verdict/sidecar.py reads it.

Written together with the result file. The suite measures in setup_cache, long before asv
saves the commit's result file; a run killed in between must not leave a new sidecar beside
the old numbers. Inside a kvbench asv run (ASV_KVBENCH_RUN set by the plugin) the sidecar is
written to a pending name, `<name>.kvjson.<run>.pending`, which no reader globs; the plugin
promotes it into place right after asv saved the result file (kvbench/history/asv/asv_env.py,
promote_sidecars). Without ASV_KVBENCH_RUN (a replayed history, a test) it is written in place.

Where: asv gives a benchmark process ASV_CONF_DIR, ASV_COMMIT and ASV_ENV_NAME but not the
machine; kvbench's environment plugin (kvbench/history/asv/asv_env.py) adds ASV_KVBENCH_MACHINE and
ASV_KVBENCH_RESULTS_DIR. Without them (another env type, a plain import) nothing is written.
This module is part of the working-tree runner: it imports nothing from the kvbench of the
commit under test, and NVML (nvidia-ml-py) and Triton only lazily.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from datetime import UTC, datetime
from typing import Any

SCHEMA = 1
SUBDIR = "kvbench"
SUFFIX = ".kvjson"
#: Ends the name of a sidecar that waits for asv to save its result file (module docstring).
PENDING = ".pending"
#: Set by kvbench's asv plugin to a token of the asv command writing results.
RUN_VAR = "ASV_KVBENCH_RUN"
NA = "n/a"


def pending_path(path: str, run: str) -> str:
    """The pending name of the sidecar `path` written by the asv command `run`."""
    return f"{path}.{run}{PENDING}"


def sidecar_path(group: str) -> str | None:
    """Where this process's sidecar for `group` goes, or None outside a kvbench asv run."""
    env = os.environ
    needed = ("ASV_COMMIT", "ASV_ENV_NAME", "ASV_KVBENCH_MACHINE", "ASV_KVBENCH_RESULTS_DIR")
    if not all(env.get(k) for k in needed):
        return None
    name = f"{env['ASV_COMMIT'][:8]}-{env['ASV_ENV_NAME']}.{group}{SUFFIX}"
    return os.path.join(env["ASV_KVBENCH_RESULTS_DIR"], env["ASV_KVBENCH_MACHINE"], SUBDIR, name)


# ---- GPU state through NVML -------------------------------------------------------------------


def _nvml_handle(pynvml: Any) -> Any:
    """The NVML handle of torch's current CUDA device (by UUID, so CUDA_VISIBLE_DEVICES
    renumbering cannot pick another GPU), or None."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    uuid = str(getattr(props, "uuid", "") or "")
    for candidate in (uuid, f"GPU-{uuid}") if uuid else ():
        with contextlib.suppress(pynvml.NVMLError):
            return pynvml.nvmlDeviceGetHandleByUUID(candidate)
    if not os.environ.get("CUDA_VISIBLE_DEVICES"):
        return pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    return None


def _reason_names(pynvml: Any, mask: int) -> list[str]:
    """Names of the set bits of a clock-event (throttle) reason mask, from pynvml's constants."""
    names = []
    for attr in dir(pynvml):
        for prefix in ("nvmlClocksEventReason", "nvmlClocksThrottleReason"):
            if attr.startswith(prefix) and attr[len(prefix):] not in ("All", "None", "Unknown"):
                bit = getattr(pynvml, attr)
                if isinstance(bit, int) and bit and mask & bit and bit & (bit - 1) == 0:
                    names.append(attr[len(prefix):])
    return sorted(set(names))


def gpu_state() -> dict | str:
    """SM and memory clocks (MHz), temperature (C), power (W) and the clock-event reasons now;
    "n/a" on a machine without CUDA or without nvidia-ml-py, "n/a: <why>" on an NVML error."""
    try:
        import pynvml  # nvidia-ml-py, optional
    except ImportError:
        return NA
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError or a missing library
        return f"{NA}: {exc}"
    try:
        handle = _nvml_handle(pynvml)
        if handle is None:
            return NA
        get_reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = int(get_reasons(handle))
        return {
            "sm_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "temp_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "clock_event_mask": mask,
            "clock_event_reasons": _reason_names(pynvml, mask),
            "at": datetime.now(UTC).isoformat(timespec="milliseconds"),
        }
    except Exception as exc:  # noqa: BLE001 - recorded, never fatal to a measurement
        return f"{NA}: {type(exc).__name__}: {exc}"
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def device_identity() -> dict:
    """Which device measured this process's cases: a CUDA device's UUID and PCI bus id where
    torch reports them, else this host. `id` is what the verdict engine groups points by
    (kvbench/history/verdict/devices.py): `GPU-<uuid>`, `pci:<bus id>@<host>` or
    `host:<host>`. CUDA_VISIBLE_DEVICES is kept as the worker saw it. Never raises."""
    import platform

    host = platform.node()
    out: dict[str, Any] = {"kind": "cpu", "id": f"host:{host}", "host": host,
                           "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")}
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            uuid = str(getattr(props, "uuid", "") or "")
            pci = None
            if hasattr(props, "pci_bus_id"):
                pci = (f"{getattr(props, 'pci_domain_id', 0):04x}:{props.pci_bus_id:02x}:"
                       f"{getattr(props, 'pci_device_id', 0):02x}.0")
            out.update(kind="cuda", name=props.name, uuid=uuid or None, pci_bus_id=pci,
                       id=f"GPU-{uuid}" if uuid else f"pci:{pci}@{host}" if pci
                       else f"cuda:{torch.cuda.current_device()}@{host}")
    except Exception as exc:  # noqa: BLE001 - recorded, never fatal to a measurement
        out["error"] = f"{type(exc).__name__}: {exc}"
    return out


def _measuring_device(states) -> dict | None:
    """The device the measuring child named in its group states (device_identity, called
    there: the supervising process never touches CUDA), None when no group recorded one."""
    for state in states or ():
        if isinstance(state, dict) and isinstance(state.get("device"), dict):
            return state["device"]
    return None


# ---- compiled kernels' resources ----------------------------------------------------------------


def _compiled_kernels() -> dict[int, Any]:
    """CUfunction handle -> CompiledKernel for every compiled variant of every Triton kernel
    in the loaded kvbench modules (the JIT caches hold them after their first launch)."""
    try:
        from triton.runtime.jit import JITFunction
    except ImportError:
        return {}
    found: dict[int, Any] = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("kvbench") or module is None:
            continue
        for value in list(vars(module).values()):
            # A JITFunction's own .fn is the Python function it wraps: test the value first,
            # then follow .fn through autotune / heuristics wrappers.
            fn = value
            while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
                fn = fn.fn
            if not isinstance(fn, JITFunction):
                continue
            for caches in getattr(fn, "device_caches", {}).values():
                cache = caches[0] if isinstance(caches, tuple) else caches
                for kernel in list(cache.values()):
                    with contextlib.suppress(Exception):
                        if hasattr(kernel, "result"):  # a kernel compiled asynchronously
                            kernel = kernel.result()
                        kernel._init_handles()
                        found[int(kernel.function)] = kernel
    return found


def _describe(kernel: Any) -> dict:
    meta = kernel.metadata
    get = meta.get if isinstance(meta, dict) else lambda k, d=None: getattr(meta, k, d)
    return {
        "name": getattr(kernel, "name", get("name")),
        "registers": getattr(kernel, "n_regs", None),
        "spills": getattr(kernel, "n_spills", None),
        "shared_bytes": get("shared"),
        "num_warps": get("num_warps"),
        "num_stages": get("num_stages"),
        "maxnreg": get("maxnreg"),
    }


def kernel_resources(call: Any) -> list[dict] | str:
    """Run `call` once with launch hooks and return the resources of every compiled kernel it
    launched: Triton kernels from the compiled kernel object (registers, spills, shared memory,
    warps, stages), kvbench's CUDA kernels from the CUDA runtime (registers, local and shared
    memory, warps; kvbench.kernels.cuda_build.LAUNCH_HOOKS). "n/a" without CUDA or under the
    Triton interpreter, [] when it launched neither. Reading resources never fails the case:
    an error is recorded as "n/a: <why>"."""
    try:
        import torch
    except ImportError:
        return NA
    if not torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1":
        return NA
    launched: list[int] = []
    described: list[Any] = []

    def triton_hook(metadata: Any) -> None:
        data = metadata.data if hasattr(metadata, "data") else metadata
        with contextlib.suppress(Exception):
            launched.append(int(data["function"]))

    with contextlib.ExitStack() as hooks:
        hooks.enter_context(_triton_launch_hook(triton_hook))
        hooks.enter_context(_cuda_launch_hook(described.append))
        call()
        torch.cuda.synchronize()
    try:
        out, names = [], set()
        if launched:
            kernels = _compiled_kernels()
            for handle in dict.fromkeys(launched):
                kernel = kernels.get(handle)
                out.append(_describe(kernel) if kernel is not None else {"function": handle})
        for describe in described:
            entry = describe()
            if entry.get("name") not in names:
                names.add(entry.get("name"))
                out.append(entry)
    except Exception as exc:  # noqa: BLE001 - recorded in the sidecar instead
        return f"{NA}: {type(exc).__name__}: {exc}"
    return out


@contextlib.contextmanager
def _triton_launch_hook(hook: Any):
    """Triton's launch-enter hook set to `hook` for the block (chained where this Triton keeps
    a list of hooks); nothing without Triton."""
    try:
        from triton import knobs
    except ImportError:
        yield
        return
    chain = knobs.runtime.launch_enter_hook
    chained = hasattr(chain, "add")
    if chained:
        chain.add(hook)
    else:
        knobs.runtime.launch_enter_hook = hook
    try:
        yield
    finally:
        if chained:
            chain.remove(hook)
        else:
            knobs.runtime.launch_enter_hook = chain


@contextlib.contextmanager
def _cuda_launch_hook(hook: Any):
    """`hook` among kvbench's CUDA launch hooks for the block; nothing for a commit whose
    kvbench has none (the suite measures older commits too)."""
    module = sys.modules.get("kvbench.kernels.cuda_build")
    hooks = getattr(module, "LAUNCH_HOOKS", None)
    if not isinstance(hooks, list):
        yield
        return
    hooks.append(hook)
    try:
        yield
    finally:
        hooks.remove(hook)


# ---- writing ----------------------------------------------------------------------------------


def _case_record(entry: dict) -> dict:
    """The sidecar's record of one case entry of the suite (benchmarks/runner/worker.measured)."""
    if "skip" in entry:
        return {"status": "skipped", "reason": entry["skip"]}
    if "error" in entry and "samples_s" not in entry:
        text = str(entry["error"]).rstrip()
        return {"status": "failed", "reason": text.splitlines()[-1] if text else "",
                "traceback": text[-4000:]}
    return {
        "status": "measured",
        "selected": entry.get("selected"),
        "explain": entry.get("explain") or "",
        "timer": entry.get("timer"),
        "median_us": entry.get("median_us"),
        "n_samples": len(entry.get("samples_s") or ()),
        "max_abs_diff": entry.get("max_abs_diff"),
        "error": entry.get("measured_error"),
        "resources": entry.get("resources", NA),
        "host": entry.get("host"),
        "state": entry.get("state"),
    }


def write_sidecar(group: str, classes: dict[str, dict], states: list[dict] | None = None,
                  ) -> str | None:
    """Write this process's sidecar for `group` atomically; return its path (None when not in
    a kvbench asv run). `states` is the machine state around each measurement group, in the
    order the cases' "state" indices count (the manager collects them from its workers). Inside an
    asv command of kvbench's plugin (RUN_VAR set) the path is the pending name the plugin promotes
    once asv saved the result file (module docstring).
    Never raises: a failed write is reported on stderr, the numbers stay.
    Compact JSON, no indentation: a commit's sidecars are most of what kvbench adds to its
    results (docs/harness.md, "Result size"); `python -m json.tool FILE` reads one."""
    path = sidecar_path(group)
    if path is None:
        return None
    if os.environ.get(RUN_VAR):
        path = pending_path(path, os.environ[RUN_VAR])
    body = {
        "schema": SCHEMA,
        "commit": os.environ["ASV_COMMIT"],
        "env": os.environ["ASV_ENV_NAME"],
        "machine": os.environ["ASV_KVBENCH_MACHINE"],
        "group": group,
        "written_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "device": _measuring_device(states),
        "states": list(states or ()),
        "classes": {
            cls: {repr(tuple(key)): _case_record(entry) for key, entry in results.items()
                  if isinstance(key, tuple)}
            | ({"__class_error__": {"status": "failed", "reason": results["__class_error__"]}}
               if "__class_error__" in results else {})
            for cls, results in classes.items()
        },
    }
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(body, f, separators=(",", ":"), default=str)
        umask = os.umask(0)  # a new file's mode, not mkstemp's 0600 (the suite runs under old
        os.umask(umask)  # commits' kvbench, so not kvbench.core.jsonfile.replacement_mode)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except OSError as exc:
        print(f"kvbench sidecar {path} not written: {exc}", file=sys.stderr)
        return None
    return path
