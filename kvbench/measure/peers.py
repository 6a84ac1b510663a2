"""Peer rows of the decode table: what a user would run instead, on the same inputs.

Each peer is built outside the timed region and returns the same output the kvbench rows
return, so the table gates and times it through the same pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch


def decode_peers(pool: Any, q: torch.Tensor) -> dict[str, Callable[[], torch.Tensor]]:
    """Peers a user would pick instead, on the same inputs, built outside the timed region.

    - torch/sdpa_contiguous: SDPA on a contiguous copy of the same KV (the unpaged upper
      bound; timing the copy would measure a copy, not the attention, so it is made
      here, untimed, and only when every sequence has the same length).
    - torch/flex_attention: torch.compile'd flex_attention on that contiguous copy (GPU only).
    - flashinfer/decode, flashinfer/decode_tc: FlashInfer's paged decode (CUDA-core and
      tensor-core kernels) on the pool's own combined buffer (GPU, fp16/bf16; see
      kvbench.measure.flashinfer_peer for where FlashInfer comes from). Planned here, untimed.
    """
    peers: dict[str, Callable[[], torch.Tensor]] = {}
    if q.is_cuda and pool.kv_dtype_name != "fp8":
        peers.update(flashinfer_peers(pool, q))
    lens = pool.seq_lens_list
    if pool.kv_dtype_name == "fp8" or len(set(lens)) != 1:
        return peers
    length = lens[0]
    pages = -(-length // pool.page_size)
    idx = pool.block_table[:, :pages].long()

    def contiguous(cache: torch.Tensor) -> torch.Tensor:
        rows = cache[idx]  # [B, pages, page, Hkv, D]
        rows = rows.reshape(q.shape[0], pages * pool.page_size, pool.kv_heads, pool.head_dim)
        return rows[:, :length].transpose(1, 2).contiguous()  # [B, Hkv, L, D]

    k, v = contiguous(pool.k_cache), contiguous(pool.v_cache)
    q4 = q.unsqueeze(2)  # [B, Hq, 1, D]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa_contiguous(*_: Any, **__: Any) -> torch.Tensor:
        return sdpa(q4, k, v, enable_gqa=True).squeeze(2)

    peers["peer:torch/sdpa_contiguous"] = sdpa_contiguous
    if q.is_cuda:
        try:
            from torch.nn.attention.flex_attention import flex_attention

            flex = torch.compile(flex_attention, dynamic=False)

            def flex_contiguous(*_: Any, **__: Any) -> torch.Tensor:
                return flex(q4, k, v, enable_gqa=True).squeeze(2)

            peers["peer:torch/flex_attention"] = flex_contiguous
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            peers["peer:torch/flex_attention"] = partial(_raise, exc)
    return peers


def flashinfer_peers(pool: Any, q: torch.Tensor) -> dict[str, Callable[..., torch.Tensor]]:
    """FlashInfer's two decode kernels as peers; a row that cannot run carries its reason."""
    from kvbench.measure.flashinfer_peer import make_flashinfer_decode

    peers: dict[str, Callable[..., torch.Tensor]] = {}
    for name, tensor_cores in (("decode", False), ("decode_tc", True)):
        try:
            run = make_flashinfer_decode(
                # FlashInfer's NHD layout is the combined token-major buffer only.
                pool.buffer if pool.storage == "combined" else None,
                pool.block_table, pool.seq_lens, q_heads=q.shape[1],
                use_tensor_cores=tensor_cores,
            )
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            peers[f"peer:flashinfer/{name}"] = partial(_raise, exc)
            continue

        def flashinfer_decode(q: torch.Tensor, *_: Any, _run: Any = run, **__: Any) -> Any:
            return _run(q)  # the KV arguments were bound at plan time

        peers[f"peer:flashinfer/{name}"] = flashinfer_decode
    return peers


def _raise(exc: BaseException, *_: Any, **__: Any) -> Any:
    raise exc
