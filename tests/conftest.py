"""Test configuration shared by the CPU suite and the GPU (`-m gpu`) suite.

Triton decides between compiled and interpreted kernels when a kernel is decorated, so
TRITON_INTERPRET must be set before anything imports kvbench.kernels. On a machine without
CUDA the Triton kernels run through the interpreter on CPU tensors at small shapes.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest

#: The largest last-level cache the CPU tests flush: each cold call writes twice this at most.
TEST_CPU_LLC_CAP = 64 << 20


@pytest.fixture(autouse=True, scope="session")
def _cpu_flush_at_test_size():
    """The CPU cold-cache flush of the tests' own process streams at most 2 x TEST_CPU_LLC_CAP.

    The CPU tests check what the timers, tables and the runner record and refuse, not a
    cold-cache figure of the runner; a virtual machine can report its host's whole L3 in sysfs
    (480 MiB on the 2-vCPU runner), and every cold call then writes ~1 GB: a sixth of the
    suite's CPU time. The sizing rule itself (FLUSH_MULTIPLE x the LLC sysfs reports, the
    fallback, the buffer) is tested in tests/harness/test_harness_flush.py with its own sysfs
    files, and the end-to-end tests' asv processes flush at the machine's real size."""
    import inspect

    from kvbench.harness import flush

    real = flush.cpu_llc_bytes
    default = inspect.signature(real).parameters["sysfs_glob"].default

    def capped(sysfs_glob: str = default) -> int:
        size = real(sysfs_glob)
        return min(size, TEST_CPU_LLC_CAP) if sysfs_glob == default else size

    flush.cpu_llc_bytes = capped
    flush._cpu_buffer.cache_clear()
    yield
    flush.cpu_llc_bytes = real
    flush._cpu_buffer.cache_clear()


@pytest.fixture
def device() -> str:
    """The device the kernels under test run on: cuda when present, else cpu (interpreter)."""
    return "cuda" if HAS_CUDA else "cpu"


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """On a CPU machine, with pytest-xdist installed, the suite runs on every core (`-n auto`):
    the end-to-end tests spend minutes in asv's subprocesses, and on a 2-core runner two of
    them at a time halve the suite's wall time. Not on a GPU machine (timing tests there must
    not share the device or its host), not in an xdist worker, and not where the command line
    already says how many processes (`-n 0` runs serially). One test at a time to each idle
    worker (maxschedchunk 1): xdist otherwise hands out runs of consecutive tests, and the
    end-to-end tests, collected first, would all land on one worker."""
    if HAS_CUDA or os.environ.get("PYTEST_XDIST_WORKER") is not None:
        return
    if not config.pluginmanager.hasplugin("xdist") or config.option.numprocesses is not None:
        return
    config.option.numprocesses = "auto"
    if config.option.maxschedchunk is None:
        config.option.maxschedchunk = 1


def pytest_collection_modifyitems(config, items):
    """End-to-end tests first (stable otherwise): with one test at a time to each idle worker,
    the long asv runs start at once, spread over the workers, and the short tests fill in
    behind them. GPU-marked tests on a machine without CUDA fail loudly instead of passing
    silently."""
    items.sort(key=lambda item: "e2e" not in item.keywords)
    if HAS_CUDA:
        return
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(
                pytest.mark.skip(reason="needs CUDA: run `pytest -m gpu` on the device"))


@pytest.fixture
def sm90_compile():
    """Compile (not run) kernels for sm_90 on a machine without a GPU: ``run(script)`` runs
    ``script`` in a fresh interpreter (no TRITON_INTERPRET, this checkout importable) with the
    path of triton's bundled cuobjdump as argv[1]; the script must print "ok" last. Catches
    what the interpreter cannot: type errors, layouts, spills, the loads the code becomes.
    Skips on a GPU machine (the gpu tests compile and run the kernels there) and where the
    triton wheel ships no ptxas / cuobjdump. Returns the script's stdout (`pytest -s` shows it).
    """
    if HAS_CUDA:
        pytest.skip("on a GPU the gpu tests compile and run the kernels for real")
    import triton

    bindir = Path(triton.__file__).parent / "backends" / "nvidia" / "bin"
    cuobjdump = shutil.which("cuobjdump", path=str(bindir))
    if not (bindir / "ptxas").exists() or cuobjdump is None:
        pytest.skip("triton's bundled ptxas/cuobjdump not present")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # silence triton 3.9's default-change warning
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])

    def run(script: str) -> str:
        res = subprocess.run([sys.executable, "-c", script, cuobjdump], check=False,
                             capture_output=True, text=True, env=env, timeout=300)
        assert res.returncode == 0, res.stdout + res.stderr
        print(res.stdout)
        assert res.stdout.strip().endswith("ok"), res.stdout
        return res.stdout

    return run



@pytest.fixture
def unwritable_dir(tmp_path) -> Path:
    """A directory in which this process cannot create a file: a 0500 directory for a normal
    user; for root (who writes through any mode bits) /proc, where no file can be created."""
    if os.geteuid() != 0:
        d = tmp_path / "read-only"
        d.mkdir(mode=0o500)
        return d
    if not Path("/proc").is_dir():
        pytest.skip("running as root without /proc: no directory refuses a new file")
    return Path("/proc")
