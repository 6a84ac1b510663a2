"""`kvbench machine`: write the asv machine record from code, never from a prompt.

asv reads machine descriptions from ~/.asv-machine.json (asv.machine.MachineCollection; the
`--machine NAME` flag of `asv run/find/continuous` picks the entry). `asv machine --yes`
stores only what the `platform` module sees, and the interactive prompt invites typos, so
kvbench writes the entry itself: asv's own keys (arch, cpu, machine, num_cpu, os, ram, from
asv.machine.Machine.get_defaults()) plus the keys that change every number of a GPU kernel
(gpu, sm_count, l2_bytes, mem_peak_gbps, driver, cuda, torch, triton). asv copies them into
each result file, and the dashboard offers every key as a filter.

The name comes from the hardware ("h200" for "NVIDIA H200", "cpu-amd-epyc" on a CPU box),
not the hostname: two hosts with the same accelerator produce one comparable series, and
results/<name>/ says what ran them. Pass `name` to split them deliberately.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from importlib import metadata as importlib_metadata
from pathlib import Path

from kvbench.core.jsonfile import check_writable, replacement_mode

#: asv's own keys, then kvbench's. All values are strings, as asv's own are.
EXTRA_KEYS = ("gpu", "sm_count", "l2_bytes", "mem_peak_gbps", "driver", "cuda", "torch", "triton")
#: asv's keys that describe the host a run happened to get (its share of cores and memory,
#: its kernel build), not the machine kind: `kvbench publish` folds them onto the machine's
#: stored record so the dashboard draws one line per machine kind
#: (kvbench.history.dashboard.publish).
HOST_KEYS = ("num_cpu", "ram", "os")
UNKNOWN = "unknown"
NOT_APPLICABLE = "n/a"


def machine_file_path() -> Path:
    """Where asv looks for machine records: ~/.asv-machine.json (HOME decides, as in asv)."""
    from asv.machine import MachineCollection

    return Path(MachineCollection.get_machine_file_path())


def slug(text: str) -> str:
    """Lower-case, non-alphanumerics collapsed to '-': 'NVIDIA H200' -> 'nvidia-h200'."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def default_name(gpu: str | None, cpu: str) -> str:
    """'h200' from 'NVIDIA H200'; 'cpu-<model>' when there is no GPU."""
    if gpu:
        return slug(re.sub(r"^\s*nvidia\s+", "", gpu, flags=re.IGNORECASE)) or slug(gpu)
    return "cpu-" + (slug(cpu)[:40].strip("-") or "unknown")


def _package_version(name: str) -> str:
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return UNKNOWN


def _driver_version() -> str:
    """NVIDIA driver version via nvidia-ml-py when installed, else nvidia-smi, else unknown."""
    with contextlib.suppress(Exception):  # nvidia-ml-py is optional; any failure -> next source
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    smi = shutil.which("nvidia-smi")
    if smi:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout.strip().splitlines()
            if out:
                return out[0].strip()
    return UNKNOWN


def _device_keys() -> dict[str, str]:
    """The GPU keys, from kvbench.harness.device_peaks when present, else torch directly."""
    import torch

    keys = {"torch": torch.__version__, "triton": _package_version("triton")}
    if not torch.cuda.is_available():
        keys.update(gpu=NOT_APPLICABLE, sm_count=NOT_APPLICABLE, l2_bytes=NOT_APPLICABLE,
                    mem_peak_gbps=NOT_APPLICABLE, driver=NOT_APPLICABLE, cuda=NOT_APPLICABLE)
        return keys
    try:
        from kvbench.harness import device_peaks

        peaks = device_peaks()
        name, sms, l2, mem = peaks.name, peaks.sm_count, peaks.l2_bytes, peaks.mem_gbps
    except ImportError as exc:
        print(f"kvbench machine: kvbench.harness unavailable ({exc}); reading torch device "
              "properties directly, mem_peak_gbps unknown", file=sys.stderr)
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        name, sms = props.name, props.multi_processor_count
        l2, mem = getattr(props, "L2_cache_size", None), None
    keys.update(
        gpu=name,
        sm_count=str(sms) if sms else UNKNOWN,
        l2_bytes=str(l2) if l2 else UNKNOWN,
        mem_peak_gbps=f"{mem:.0f}" if mem else UNKNOWN,
        driver=_driver_version(),
        cuda=str(torch.version.cuda or UNKNOWN),
    )
    return keys


def machine_record(name: str | None = None) -> dict[str, str]:
    """The machine entry: asv's defaults, kvbench's device keys, and `machine` = the name."""
    from asv.machine import Machine

    record = {k: str(v) for k, v in Machine.get_defaults().items()}
    record.update(_device_keys())
    gpu = record["gpu"] if record["gpu"] != NOT_APPLICABLE else None
    if name is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ValueError(
            f"name must be letters, digits, '.', '_' or '-' (a folder name), got {name!r}")
    record["machine"] = name or default_name(gpu, record["cpu"])
    return record


def default_machine() -> str:
    """The machine name `kvbench machine` would write for this host (h200, cpu-...)."""
    return machine_record()["machine"]


def check_machine(machine: str) -> None:
    """ValueError unless asv's machine file has a record named `machine`."""
    from asv import util as asv_util
    from asv.machine import MachineCollection

    try:
        MachineCollection.load(machine)
    except asv_util.UserError as exc:
        raise ValueError(f"--machine {machine}: {exc} Write it with `kvbench machine` (or "
                         "`kvbench machine --name NAME`).") from None


def write_machine_record(name: str | None = None, path: str | os.PathLike | None = None) -> dict:
    """Add (or replace) this machine's entry in the asv machine file; return the entry.

    Other machines' entries in the file are kept. `path` defaults to ~/.asv-machine.json,
    the only file asv reads; then run asv with `--machine <entry["machine"]>`.
    """
    from asv.machine import MachineCollection

    record = machine_record(name)
    target = Path(path) if path is not None else machine_file_path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"{target}: cannot create its directory {target.parent} "
                         f"({exc.strerror})") from None
    check_writable(target)
    # asv rewrites the file in place; it holds every machine's entry, so asv writes a copy
    # next to it and the copy replaces it atomically (an interrupted write loses nothing).
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}-", suffix=".tmp")
    os.close(fd)
    try:
        if target.exists():
            shutil.copyfile(target, tmp)
        else:
            Path(tmp).unlink()
        MachineCollection.save(record["machine"], record, _path=tmp)
        os.chmod(tmp, replacement_mode(target))
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return record
