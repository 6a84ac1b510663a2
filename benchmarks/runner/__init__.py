"""The suite's runner: measures the declarations of benchmarks/ against the commit asv installed.

Shaped like pyperf's Manager/Worker, with its state in objects:

- manager.py: Manager, the setup_cache side. It forks a measuring child per group, carries
  the cases a crashed child finished over to a fresh one (isolate.py) and writes the group's
  sidecar (sidecar.py).
- worker.py: Worker, the measuring process. It holds the class being measured, the
  selection (KVBENCH_ASV_SELECT), the host cores and canary gate (host.py: HostGate), the
  machine state around each measurement group and the plausibility ceilings; a declaration's
  measure function gets the worker and calls run_group / run_cases / measure_case on it.
- compat.py: `need` / `need_first`, the only way the runner and the declarations reach kvbench.
- compact.py: the samples asv stores per case, and the rewrite of older result files.

Running against older commits of kvbench. asv installs each measured commit's kvbench
package into its environment and runs THIS tree's benchmarks/ against it, so:

1. The runner lives in benchmarks/, never in kvbench/: it is the same code for every commit,
   and a commit from before the runner existed is measured by it too.
2. Nothing here imports kvbench (or torch) at module level. asv imports the suite to discover
   it and to look results up in per-case processes; those imports must work whatever kvbench
   the environment holds, and create no CUDA state before the manager forks.
3. Every kvbench module or name is looked up inside a function, when a case needs it, through
   compat.need (or need_first, for a name that moved: newest place first). A missing module
   or name raises compat.Skip, a NotImplementedError: the case (or the group, when its input
   cannot be built) is recorded as skipped with the missing name as reason, and the worker
   goes on to the next case; asv shows it as skipped, not failed.
4. Knobs the runner sets on the commit's harness (worker.SUITE_KNOBS: budgets, repeat range,
   adaptive stopping) are set only where the commit's kvbench.harness.timers has them; an
   older harness keeps its own defaults. Optional helpers behave the same way: no
   kvbench.harness.calibrate means no ceilings (Worker.suite_ceilings), no CUDA launch hooks
   means no CUDA kernel resources in the sidecar.
5. Commits before kvbench.measure.pipeline skip every case (measure_case needs it); they are
   measured with the suite of their own tree (docs/history.md).

tests/benchmarks/test_runner_old_kvbench.py runs the runner against stubs of an older
kvbench (a pipeline without measure_row, a harness without the newer knobs, no calibrate)
and shows each case skipped or measured, never crashed.
"""

from .compat import Skip, need, need_first

__all__ = ["Skip", "need", "need_first"]
