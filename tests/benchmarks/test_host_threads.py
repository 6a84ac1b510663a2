"""A host-side class runs torch's CPU ops on one thread while it has the process pinned to one
core (benchmarks/runner/worker.py: pin_host_process), and the next class gets the threads and
cores back: an intra-op pool sharing one core makes each parallel CPU op of the class's setup
wait on threads spinning for that core."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.runner.worker import Worker

PACKAGE = "kvbench_test_host_threads_suite"


@pytest.fixture
def suite(tmp_path, monkeypatch):
    """A two-class suite: a host-side class that pins, then a class that does not; each
    records torch's threads and the process's cores as it saw them."""
    pkg = tmp_path / PACKAGE
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "classes.py").write_text(textwrap.dedent("""
        import os
        import torch

        def host_side(w):
            w.pin_host_process()
            return {("seen",): {"threads": torch.get_num_threads(),
                                "cores": sorted(os.sched_getaffinity(0))}}

        def device_side(w):
            return {("seen",): {"threads": torch.get_num_threads(),
                                "cores": sorted(os.sched_getaffinity(0))}}
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    threads = torch.get_num_threads()
    yield {"suite": (("classes", "host_side", "HostSide"), ("classes", "device_side", "Next"))}
    torch.set_num_threads(threads)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity calls on this OS")
def test_a_pinned_class_runs_torch_on_one_thread_and_the_next_class_gets_them_back(suite):
    torch.set_num_threads(2)
    cores = sorted(os.sched_getaffinity(0))
    out = Worker(suite, PACKAGE).measure_group("suite")
    seen_pinned = out["HostSide"][("seen",)]
    assert seen_pinned["threads"] == 1
    assert len(seen_pinned["cores"]) == 1
    assert out["Next"][("seen",)] == {"threads": 2, "cores": cores}
    assert torch.get_num_threads() == 2 and sorted(os.sched_getaffinity(0)) == cores
