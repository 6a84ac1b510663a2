"""The harness's selftest on a GPU: its timers against measurements it does not make itself.

    python -m kvbench.harness.gpu_selftest [--json PATH] [--size-gib 2]

1. metadata header and calibrate() ceilings;
2. bench() of a 2 GiB device copy next to two independent constructions of the same number:
   triton.testing.do_bench_cudagraph (graph replay, median) and the CUPTI kernel duration
   from torch.profiler; the % difference says whether bench()'s events add anything;
3. warm vs cold L2 on a working set that fits in L2 (8 MiB copy = 16 MiB moved): the
   ablation that shows the flush is doing its job (and a warm row that beats the spec peak);
4. the host floor, and an event timer vs bench_host on a host stall hidden behind GPU work;
5. a closing report() table.

The functions below are also what tests/test_harness_gpu.py checks against.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import sys
import time
from dataclasses import asdict

import torch

from kvbench.core.device import resolve_device
from kvbench.core.jsonfile import output_path, write_json_atomic
from kvbench.harness.calibrate import calibrate
from kvbench.harness.flush import flush_bytes
from kvbench.harness.meta import format_metadata, metadata
from kvbench.harness.peaks import device_peaks
from kvbench.harness.report import report
from kvbench.harness.timers import bench, bench_host, bench_stateful, host_floor
from kvbench.harness.work import Row, Work

#: Bytes per buffer of the L2-resident ablation: src + dst = 16 MiB, a quarter of an H200's
#: 60 MiB L2. Kept well under half of L2 because Hopper splits L2 into two partitions and a
#: line read by SMs on both sides can occupy both.
SMALL_COPY_BYTES = 8 << 20


def cudagraph_us(fn, *, rep_ms: int = 200) -> float:
    """Median µs of `fn` by triton.testing.do_bench_cudagraph (CUDA-graph replay, no flush)."""
    import triton.testing

    return float(triton.testing.do_bench_cudagraph(fn, rep=rep_ms, return_mode="median")) * 1e3


def profiler_us(fn, *, iters: int = 20) -> float:
    """Median device duration (µs) of the most frequent GPU activity of `fn`, from torch.profiler.

    For a one-kernel fn (a copy) that is the kernel's own duration as CUPTI records it, with
    no CUDA-event or launch overhead in it. The median over same-named activities is immune to
    a profiler version listing an activity twice.
    """
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not device_events:
        raise RuntimeError("torch.profiler recorded no CUDA activity (is CUPTI available?)")
    name, _ = collections.Counter(e.name for e in device_events).most_common(1)[0]
    return float(
        statistics.median(e.time_range.elapsed_us() for e in device_events if e.name == name)
    )


def copy_buffers(size_bytes: int, device: object = None) -> tuple[torch.Tensor, torch.Tensor]:
    dev = resolve_device(device)
    src = torch.empty(size_bytes, dtype=torch.uint8, device=dev).random_(0, 256)
    return src, torch.empty_like(src)


def sleep_cycles_for_us(target_us: float, device: object = None) -> int:
    """torch.cuda._sleep cycles that keep the GPU busy for about `target_us` (measured here)."""
    dev = resolve_device(device)
    probe = 1_000_000
    with torch.cuda.device(dev):
        torch.cuda._sleep(probe)  # warm-up
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(probe)
        end.record()
        torch.cuda.synchronize()
        us_per_cycle = start.elapsed_time(end) * 1e3 / probe
    return max(1, int(target_us / us_per_cycle))


def host_stall_demo(
    device: object = None, *, stall_us: float = 300.0, backlog_us: float = 2000.0, repeat: int = 50
) -> dict[str, float]:
    """A host-blocking call timed by a CUDA-event timer and by bench_host.

    fn spins the host for `stall_us` (host-side work: a search, Python overhead), then does a
    tiny device op and `.item()` (the host waits for the device). The event timer runs it
    behind `backlog_us` of queued GPU work (reset enqueues torch.cuda._sleep, standing in for
    the previous decode step's kernels): the host stall overlaps that work, the start event is
    only processed when the backlog finishes, and the events report the call as nearly free.
    bench_host reports what the caller waits for.
    """
    dev = resolve_device(device)
    cycles = sleep_cycles_for_us(backlog_us, dev)
    flag = torch.zeros(1, device=dev)
    stall_s = stall_us * 1e-6

    def host_blocking() -> None:
        deadline = time.perf_counter() + stall_s
        while time.perf_counter() < deadline:
            pass
        flag.add_(1)
        flag.item()

    events = bench_stateful(
        host_blocking, lambda: torch.cuda._sleep(cycles), repeat=repeat, device=dev
    )
    host = bench_host(host_blocking, repeat=repeat, device=dev)
    return {"stall_us": stall_us, "event_us": events.median_us, "host_us": host.median_us}


def compare_copy(size_bytes: int, device: object = None):
    """bench() of a `size_bytes` device copy, with do_bench_cudagraph and profiler µs of it.

    Returns (TimingResult, cudagraph_us, profiler_us or None, profiler error or None).
    """
    src, dst = copy_buffers(size_bytes, device)

    def copy() -> None:
        dst.copy_(src)

    ours = bench(copy, device=device)
    graph = cudagraph_us(copy)
    try:
        prof = profiler_us(copy)
    except Exception as exc:  # noqa: BLE001 - the profiler is a second opinion; report why not
        return ours, graph, None, f"{type(exc).__name__}: {exc}"
    return ours, graph, prof, None


def l2_ablation(device: object = None, size_bytes: int = SMALL_COPY_BYTES):
    """(cold, warm) bench() of a copy, and of a read (sum), whose working sets fit in L2.

    Both kept: on the H200 the copy has timed warm slower than cold (cause not established),
    so the read is the row that tests "warm is the optimistic bound".
    """
    src, dst = copy_buffers(size_bytes, device)
    total = torch.zeros((), dtype=src.dtype, device=src.device)

    def copy() -> None:
        dst.copy_(src)

    def read() -> None:
        torch.sum(src.view(-1), dim=0, out=total)

    return {
        "copy": (bench(copy, l2="cold", device=device), bench(copy, l2="warm", device=device)),
        "read": (bench(read, l2="cold", device=device), bench(read, l2="warm", device=device)),
    }


def timer_ablation(device: object = None) -> list[tuple[str, str, object]]:
    """bench() with the head start off and on, on two small cases.

    Cases: the L2-sized 8 MiB copy, and a tiny kernel behind ~50 us of host work (a Python
    launcher's validation). Tests the hypothesis (docs/decisions.md, "Timer head start and
    read flush") that without a head start a host-bound launcher's gap lands in the event
    interval. Returns (case, setting, TimingResult) triples.
    """
    from kvbench.harness import timers

    src, dst = copy_buffers(SMALL_COPY_BYTES, device)
    tiny = torch.empty(1 << 16, device=resolve_device(device))

    def copy() -> None:
        dst.copy_(src)

    def host_heavy() -> None:
        t_end = time.perf_counter() + 50e-6
        while time.perf_counter() < t_end:
            pass
        tiny.add_(1)

    saved = (timers.HEAD_START_FACTOR, timers.HEAD_START_PAD_US, timers.BACKLOG_FACTOR)
    out = []
    try:
        for head in (False, True):
            # "off" takes away both spins: the per-call head start and the backlog.
            (timers.HEAD_START_FACTOR, timers.HEAD_START_PAD_US, timers.BACKLOG_FACTOR) = (
                saved if head else (0.0, 0.0, 0.0)
            )
            setting = f"head_start={'on' if head else 'off'}"
            out.append(("8 MiB copy", setting, bench(copy, device=device)))
            out.append(("tiny kernel + 50us host", setting, bench(host_heavy, device=device)))
    finally:
        (timers.HEAD_START_FACTOR, timers.HEAD_START_PAD_US, timers.BACKLOG_FACTOR) = saved
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", metavar="PATH", type=output_path,
                        help="also write every number to this JSON file")
    parser.add_argument("--size-gib", type=float, default=2.0, help="copy size for step 2 (GiB)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_selftest needs a CUDA device", file=sys.stderr)
        return 2
    dev = resolve_device(None)
    peaks = device_peaks(dev)
    meta = metadata(
        command="python -m kvbench.harness.gpu_selftest " + " ".join(argv or sys.argv[1:])
    )
    print(format_metadata(meta))
    print(f"L2 {peaks.l2_bytes} B, flush buffer {flush_bytes(dev)} B")

    ceilings = calibrate(dev)
    print(
        f"ceilings: copy {ceilings.copy_gbps:.0f}  read {ceilings.read_gbps:.0f}  "
        f"write {ceilings.write_gbps:.0f} GB/s\n"
    )

    size = int(args.size_gib * 2**30)
    ours, graph, prof, prof_error = compare_copy(size, dev)
    print(
        f"{args.size_gib:g} GiB copy: bench() {ours.median_us:.1f} us | do_bench_cudagraph "
        f"{graph:.1f} us ({100 * (ours.median_us - graph) / graph:+.2f}%) | profiler "
        + (
            f"{prof:.1f} us ({100 * (ours.median_us - prof) / prof:+.2f}%)"
            if prof
            else f"n/a ({prof_error})"
        )
    )
    torch.cuda.empty_cache()

    l2_rows = l2_ablation(dev)
    cold, warm = l2_rows["copy"]
    cold_read, warm_read = l2_rows["read"]
    for what, (c, w) in l2_rows.items():
        print(
            f"8 MiB {what}: cold {c.median_us:.2f} us, warm {w.median_us:.2f} us "
            f"(warm/cold {w.median_us / c.median_us:.2f})"
        )

    ablation = timer_ablation(dev)
    print("timer ablation (median us):")
    for case, setting, timing in ablation:
        print(f"  {case:26s} {setting:30s} {timing.median_us:9.2f}")

    floor = host_floor(dev)
    stall = host_stall_demo(dev)
    print(
        f"host floor {floor.median_us:.1f} us; "
        f"host stall {stall['stall_us']:.0f} us behind GPU work: "
        f"event timer {stall['event_us']:.1f} us, bench_host {stall['host_us']:.1f} us\n"
    )

    big_work = Work(moved=2 * size)
    small_work = Work(moved=2 * SMALL_COPY_BYTES)
    rows = [
        Row.from_timing("torch/copy_", f"{args.size_gib:g} GiB copy", ours, big_work),
        Row(
            "torch/copy_", f"{args.size_gib:g} GiB copy", graph, big_work, note="do_bench_cudagraph"
        ),
        Row.from_timing("torch/copy_", "8 MiB copy (L2-resident)", cold, small_work),
        Row.from_timing(
            "torch/copy_", "8 MiB copy (L2-resident)", warm, small_work, note="ablation: no flush"
        ),
        Row.from_timing(
            "torch/sum", "8 MiB read (L2-resident)", cold_read, Work(moved=SMALL_COPY_BYTES)
        ),
        Row.from_timing(
            "torch/sum", "8 MiB read (L2-resident)", warm_read, Work(moved=SMALL_COPY_BYTES),
            note="ablation: no flush",
        ),
        Row(
            "host",
            "host-blocking call (300 us stall)",
            stall["host_us"],
            Work(),
            timer="bench_host",
        ),
        Row(
            "host",
            "same call, event timer behind GPU work",
            stall["event_us"],
            Work(),
            timer="bench_stateful",
            note="misses the stall",
        ),
    ]
    rows += [
        Row.from_timing("timer-ablation", case, timing, small_work if "copy" in case else Work(),
                        note=setting)
        for case, setting, timing in ablation
    ]
    if prof:
        rows.insert(
            2,
            Row(
                "torch/copy_",
                f"{args.size_gib:g} GiB copy",
                prof,
                big_work,
                note="torch.profiler kernel time",
            ),
        )
    report(
        rows,
        peaks=peaks,
        ceilings=ceilings,
        floor_us=floor.median_us,
        title="harness selftest",
        ceiling="copy",
    )

    if args.json:
        dump = {
            "metadata": meta,
            "ceilings": asdict(ceilings),
            "flush_bytes": flush_bytes(dev),
            "timer_ablation": [
                {"case": c, "setting": st, "median_us": t.median_us, "host_us": t.host_us}
                for c, st, t in ablation
            ],
            "copy": {
                "size_bytes": size,
                "bench_us": ours.median_us,
                "cudagraph_us": graph,
                "profiler_us": prof,
                "profiler_error": prof_error,
                "bench_samples_us": list(ours.samples_us),
            },
            "l2_ablation": {
                "size_bytes": SMALL_COPY_BYTES,
                "cold_us": cold.median_us,
                "warm_us": warm.median_us,
                "read_cold_us": cold_read.median_us,
                "read_warm_us": warm_read.median_us,
            },
            "host_floor_us": floor.median_us,
            "host_stall": stall,
        }
        write_json_atomic(args.json, dump, indent=2, default=str)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
