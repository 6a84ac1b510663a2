"""Ablation: why does the first alloc after a reset cost more than a warm one on the GPU host?

docs/allocator.md's "single" column (bench_host of one alloc per sample, reset outside the
window) read 12-19 µs above the host floor on the H200's host while the same call inside a
batch read ~4.5 µs. Candidate causes, each switched off in one row here:

  flush     the GPU L2 flush bench_host runs before every sample (a kernel, then a sync that
            waits for it: the host thread sleeps/spins through it)
  reset     prepare_state's host work (frees half the pool: MBs of numpy memory walked,
            evicting the CPU caches the next call needs)
  torch     any torch call on a device tensor after a sync, allocator or not (a bare slice)

Rows are bench_host medians (the one host timer); "no flush" rows replace the timer's flush
with a no-op for this script only (timers.flusher is patched, then restored). Prints a table
and, with --json, writes the rows.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator

import numpy as np
import torch

from kvbench.core.jsonfile import output_path, write_json_atomic
from kvbench.harness import bench_host, metadata, timers
from kvbench.ops.kv_alloc import KVCacheManager, prepare_state

NUM_ROWS = 32768
#: Host memory a "cache-evicting" reset walks: above the per-core L2 of common server CPUs.
EVICT_BYTES = 8 << 20


@contextlib.contextmanager
def flush_enabled(enabled: bool) -> Iterator[None]:
    """bench_host as shipped (True) or with its L2 flush replaced by a no-op (False)."""
    saved = timers.flusher
    if not enabled:
        timers.flusher = lambda *_a, **_k: timers._noop
    try:
        yield
    finally:
        timers.flusher = saved


def rows(device: torch.device) -> list[dict]:
    out: list[dict] = []
    evict = np.ones(EVICT_BYTES // 8, dtype=np.int64)
    table = torch.arange(NUM_ROWS, dtype=torch.int64, device=device)

    def add(name: str, fn: Callable[[], object], reset: Callable[[], object] | None) -> None:
        for flush in (True, False):
            with flush_enabled(flush):
                r = bench_host(fn, reset, device=device)
            out.append({"case": name, "flush": flush, "median_us": r.median_us,
                        "samples": len(r.samples_us)})

    add("no-op (host floor)", timers._noop, None)
    add("torch slice of a device tensor", lambda: table[5:6], None)
    add("torch slice after an 8 MiB host walk", lambda: table[5:6], lambda: int(evict.sum()))
    for state in ("bump", "fragmented"):
        m = KVCacheManager(NUM_ROWS, device=device, impl="host/freelist")
        held: list[torch.Tensor] = []
        add(f"alloc(1) {state}, reset=prepare_state", lambda m=m: m.alloc(1),
            lambda m=m, s=state: prepare_state(m, s, n=1))

        def alloc_keep(m: KVCacheManager = m, held: list = held) -> None:
            held.append(m.alloc(1))

        def free_last(m: KVCacheManager = m, held: list = held) -> None:
            if held:
                m.free(held.pop())

        prepare_state(m, state, n=1)
        if state == "fragmented":  # free(last) keeps it fragmented; in bump it would not
            add(f"alloc(1) {state}, reset=free(previous row)", alloc_keep, free_last)
        prepare_state(m, state, n=1)
        add(f"alloc(1) {state}, reset=8 MiB host walk", lambda m=m: m.alloc(1),
            lambda m=m, s=state: (prepare_state(m, s, n=1), int(evict.sum())))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", type=output_path, help="write the rows and metadata here")
    args = p.parse_args(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    result = rows(device)
    meta = metadata()
    if args.json:
        write_json_atomic(args.json, {"metadata": meta, "rows": result}, indent=1)
    print(f"# {meta['gpu'] or meta['cpu']} torch {torch.__version__}; bench_host medians, µs")
    print(f"{'case':48s} {'flush':>8s} {'no flush':>9s}")
    by_case: dict[str, dict[bool, float]] = {}
    for r in result:
        by_case.setdefault(r["case"], {})[r["flush"]] = r["median_us"]
    for case, v in by_case.items():
        print(f"{case:48s} {v[True]:8.2f} {v[False]:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
