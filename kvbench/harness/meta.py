"""Everything needed to reproduce a number: device, software, commit, command, kernel env vars.

A latency without its GPU, driver, torch/triton versions, commit and the env vars that chose
the kernel cannot be compared with anything. The env-var list comes from
kvbench.core.env.kernel_env_vars(), which the dispatch side owns, so a new selector
appears here without a second list to keep in sync.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch

from kvbench.core.device import cpu_name
from kvbench.core.versions import triton_version
from kvbench.harness.calibrate import load_ceilings
from kvbench.harness.peaks import device_peaks

_SUBPROCESS_TIMEOUT_S = 5


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    """stdout of a best-effort command, or None if it is missing, fails or hangs."""
    if shutil.which(cmd[0]) is None:
        return None
    try:
        proc = subprocess.run(
            cmd, cwd=cwd, capture_output=True, text=True, timeout=_SUBPROCESS_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    out = proc.stdout.strip()
    return out if proc.returncode == 0 and out else None


def commit() -> str:
    """The measured commit: $ASV_COMMIT, else $KVBENCH_COMMIT, else `git describe --always
    --dirty` of the checkout, else "unknown".

    ASV_COMMIT is set by asv for the commit it is measuring (the package is then installed in
    .asv/env/... inside the repository, where git would name the working tree's commit).
    KVBENCH_COMMIT comes before git: whoever copies the tree to another machine (the GPU device
    sessions) names the commit explicitly, and such a copy may carry a stale .git (a device
    copy's git has named, dirty, a commit several commits older than the code it held).
    Only a checkout whose top level is the directory holding the kvbench package counts.
    """
    explicit = os.environ.get("ASV_COMMIT") or os.environ.get("KVBENCH_COMMIT")
    if explicit:
        return explicit
    repo_root = Path(__file__).resolve().parents[2]
    toplevel = _run(["git", "rev-parse", "--show-toplevel"], cwd=repo_root)
    if toplevel is not None and Path(toplevel).resolve() == repo_root:
        described = _run(["git", "describe", "--always", "--dirty"], cwd=repo_root)
        if described:
            return described
    return "unknown"


def driver_version() -> str | None:
    """NVIDIA driver version from nvidia-ml-py (optional) or nvidia-smi; None if neither answers."""
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            try:
                version = pynvml.nvmlSystemGetDriverVersion()
            finally:
                pynvml.nvmlShutdown()
            return version.decode() if isinstance(version, bytes) else str(version)
        except pynvml.NVMLError:
            pass
    out = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return out.splitlines()[0].strip() if out else None



def metadata(command: str | None = None) -> dict:
    """A JSON-serialisable description of this machine, software and run.

    Keys: gpu (None on CPU), cpu, sm_count, l2_bytes, peaks {mem_gbps, tc_tflops}, ceilings
    (cached calibrate() result or None), driver, cuda, torch, triton, numpy, python, platform,
    hostname, commit, command (default: this process's argv), timestamp (UTC ISO), env.
    """
    # Imported here, not at module top: importing kvbench.dispatch runs its package __init__
    # (registry, golden -> checks -> harness.verify), and the harness must stay importable
    # from those modules without an import cycle.
    from kvbench.core.env import kernel_env_vars

    if command is not None and not isinstance(command, str):
        raise ValueError(f"command must be None or a string, got {type(command).__name__}")
    peaks = device_peaks()
    ceilings = load_ceilings(peaks.name)
    return {
        "gpu": peaks.name if peaks.is_cuda else None,
        "cpu": cpu_name(),
        "sm_count": peaks.sm_count,
        "l2_bytes": peaks.l2_bytes,
        "peaks": {"mem_gbps": peaks.mem_gbps, "tc_tflops": peaks.tc_tflops},
        "ceilings": asdict(ceilings) if ceilings is not None else None,
        "driver": driver_version() if peaks.is_cuda else None,
        "cuda": torch.version.cuda,
        "torch": str(torch.__version__),
        "triton": triton_version(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "commit": commit(),
        "command": command if command is not None else " ".join(sys.argv),
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "env": kernel_env_vars(),
    }


def format_metadata(meta: dict) -> str:
    """A short '# '-prefixed header block for the top of a report."""
    if not isinstance(meta, dict):
        got = type(meta).__name__
        raise ValueError(f"meta must be the dict metadata() returns, got {got}")  # noqa: TRY004

    def get(key: str) -> object:
        value = meta.get(key)
        return "-" if value is None else value

    peaks = meta.get("peaks") or {}
    mem, tc = peaks.get("mem_gbps"), peaks.get("tc_tflops")
    if meta.get("gpu"):
        l2 = meta.get("l2_bytes")
        l2_text = f"{l2 / 2**20:.0f} MiB L2" if l2 else "L2 ?"
        device = (
            f"gpu {meta['gpu']} ({get('sm_count')} SMs, {l2_text}), "
            f"driver {get('driver')}, cuda {get('cuda')}"
        )
    else:
        device = "gpu none (CPU run: no peaks, timings are host timings)"
    mem_text = f"{mem:.0f} GB/s" if mem else "? GB/s"
    tc_text = f"{tc:g} TFLOP/s" if tc else "? TFLOP/s"
    peak_text = f"spec peaks {mem_text}, {tc_text}"
    env = meta.get("env") or {}
    set_vars = [f"{k}={v}" for k, v in env.items() if v is not None]
    unset = [k for k, v in env.items() if v is None]
    lines = [
        f"# kvbench {get('commit')}  {get('timestamp')}  host {get('hostname')}",
        f"# {device}; {peak_text}",
        (
            f"# cpu {get('cpu')}; torch {get('torch')} triton {get('triton')} numpy {get('numpy')} "
            f"python {get('python')}; {get('platform')}"
        ),
        f"# command: {get('command')}",
        f"# env: {' '.join(set_vars) if set_vars else '(no kernel env var set)'}"
        + (f"; unset (auto/default): {' '.join(unset)}" if unset else ""),
    ]
    ceilings = meta.get("ceilings")
    if ceilings:
        lines.insert(
            2,
            f"# measured ceilings ({ceilings.get('measured_at')}): "
            f"copy {ceilings.get('copy_gbps'):.0f}"
            f" read {ceilings.get('read_gbps'):.0f} write {ceilings.get('write_gbps'):.0f} GB/s",
        )
    return "\n".join(lines) + "\n"
