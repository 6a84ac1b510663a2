"""The one KV dtype table: names, storage dtypes, bytes per element.

One spelling everywhere (registry, selectors, asv params, tolerances, tables): ``"fp16"``,
``"bf16"``, ``"fp8"``. fp8 is e4m3 bytes with caller-side fp32 scales, stored in a uint8
container (or viewed as float8_e4m3fn: both are accepted wherever a cache is read).
"""

from __future__ import annotations

import torch

#: The KV dtype names, in the order tables and suites list them.
KV_DTYPES: tuple[str, ...] = ("fp16", "bf16", "fp8")
#: Dtype names a registry row may serve: the KV dtypes and the allocator's row indices.
ROW_DTYPES: tuple[str, ...] = (*KV_DTYPES, "int64")
#: KV dtype name -> the torch dtype a fixture stores it in.
STORAGE: dict[str, torch.dtype] = {"fp16": torch.float16, "bf16": torch.bfloat16,
                                   "fp8": torch.uint8}
#: KV dtype name -> bytes per element.
BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp8": 1}
#: torch dtype of a cache tensor -> its KV dtype name (fp8 in either container).
FROM_TORCH: dict[torch.dtype, str] = {
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.uint8: "fp8",
    torch.float8_e4m3fn: "fp8",
}
#: fp8 caches' accepted containers.
FP8_CONTAINERS: tuple[torch.dtype, ...] = (torch.uint8, torch.float8_e4m3fn)


def kv_dtype_name(dtype: object) -> str:
    """A KV dtype name from a name or a torch dtype; ValueError naming the accepted ones."""
    if isinstance(dtype, str) and dtype in BYTES:
        return dtype
    if isinstance(dtype, torch.dtype) and dtype in FROM_TORCH:
        return FROM_TORCH[dtype]
    accepted = ", ".join([*map(str, FROM_TORCH), *map(repr, KV_DTYPES)])
    raise ValueError(f"dtype={dtype!r} is not accepted; accepted: {accepted}")
