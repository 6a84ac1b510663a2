"""The setup_cache side: one Manager per asv setup_cache call, supervising the measuring.

The manager never imports torch or kvbench (fork after a CUDA context is unsafe): it forks a
child that builds a Worker and measures the group (isolate.run_isolated), carries every case
a crashed child finished over to the next child, numbers the machine states of all children,
and writes the group's sidecar beside the results (sidecar.write_sidecar).
"""

from __future__ import annotations

from . import sidecar as _sidecar
from .isolate import Reporter, run_isolated
from .worker import Group, Worker


class Manager:
    """Measures groups of a suite's classes in isolated workers; `groups` and `package` as
    Worker takes them. `states` collects the machine state around each measurement group of
    every child, in the order the cases' "state" indices count."""

    def __init__(self, groups: dict[str, Group], package: str) -> None:
        self.groups = groups
        self.package = package
        self.states: list[dict] = []

    def worker(self, reporter: Reporter | None = None) -> Worker:
        """A Worker of this manager's suite (in a child: with its line to this manager)."""
        return Worker(self.groups, self.package, reporter)

    def measure_group(self, group: str) -> dict[str, dict]:
        """{class name: that class's results} for every class of `group`, measured in a forked
        child of this process (a case that crashes its process loses only itself), then the
        sidecar written."""
        out = run_isolated(lambda reporter: self.worker(reporter).measure_group(group),
                           self.states)
        _sidecar.write_sidecar(group, out, self.states)
        return out
