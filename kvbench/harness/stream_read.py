"""A streaming read kernel for the read ceiling: every byte of a buffer read once, nothing written.

Why not only ``torch.sum``: on the H200 a bf16 ``torch.sum`` read 2 GiB at 4257-4315 GB/s while
decode kernels read their KV at 4340-4540 GB/s in the same tables (docs/perf.md), so %ceil of
decode came out above 100% and the "read ceiling" was a property of torch's reduction, not of
the memory system. This kernel does nothing but load: 16-byte vectors, a grid-stride loop
over ``programs`` persistent programs, an XOR fold in registers (integer, so no arithmetic can
be slower than the loads), one int32 written per program. ``calibrate()`` measures it beside
torch's reduction and keeps the faster of the two.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import triton
import triton.language as tl

#: Launch configuration: int32 words per program per iteration, warps, loop pipelining stages,
#: persistent programs per SM. H200 sweep (docs/perf-notes.md, experiment 13): 4508-4519 GB/s,
#: within 0.3% of the best point, against 4257-4263 GB/s for a bf16 torch.sum.
CONFIG = {"BLOCK": 4096, "num_warps": 8, "num_stages": 1, "programs_per_sm": 8}


@triton.jit
def _stream_read_kernel(x_ptr, out_ptr, n_words, BLOCK: tl.constexpr):
    """XOR of every int32 word this program visits: a grid-stride walk over the buffer."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    acc = tl.zeros([BLOCK], tl.int32)
    for start in range(pid * BLOCK, n_words, step):
        offs = start + tl.arange(0, BLOCK)
        acc ^= tl.load(x_ptr + offs, mask=offs < n_words, other=0)
    tl.store(out_ptr + pid, tl.xor_sum(acc, 0))


def stream_read_fn(
    x: torch.Tensor, sm_count: int, config: dict[str, int] | None = None
) -> Callable[[], torch.Tensor]:
    """A no-argument callable that reads all of ``x`` (a contiguous buffer of whole int32
    words) once per call with the streaming kernel; its output is a per-program XOR."""
    cfg = CONFIG if config is None else config
    if not x.is_contiguous() or x.numel() * x.element_size() % 4:
        raise ValueError(
            f"stream_read_fn needs a contiguous buffer of whole 4-byte words, got "
            f"{tuple(x.shape)} {x.dtype} (contiguous={x.is_contiguous()})"
        )
    words = x.view(torch.int32)
    n_words = words.numel()
    programs = max(1, min(sm_count * cfg["programs_per_sm"], triton.cdiv(n_words, cfg["BLOCK"])))
    out = torch.empty(programs, dtype=torch.int32, device=x.device)

    def read() -> torch.Tensor:
        _stream_read_kernel[(programs,)](
            words, out, n_words, BLOCK=cfg["BLOCK"],
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
        return out

    return read
