"""Peer rows of the decode table: what a user would run instead, on the same inputs.

Each peer is built outside the timed region and returns the same output the kvbench rows
return, so the table gates and times it through the same pipeline.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import torch


def decode_peers(pool: Any, q: torch.Tensor, *, window: int | None = None,
                 softcap: float | None = None) -> dict[str, Callable[[], torch.Tensor]]:
    """Peers a user would pick instead, on the same inputs, built outside the timed region.

    - torch/sdpa_contiguous: SDPA on a contiguous copy of the same KV (the unpaged upper
      bound; timing the copy would measure a copy, not the attention, so it is made
      here, untimed, and only when every sequence has the same length).
    - torch/sdpa_cudnn: the same SDPA held to cuDNN's attention kernel (GPU only).
    - torch/flex_attention: torch.compile'd flex_attention on that contiguous copy (GPU only).
    - flashinfer/decode, flashinfer/decode_tc: FlashInfer's paged decode (CUDA-core and
      tensor-core kernels) on the pool's own combined buffer (GPU, fp16/bf16; see
      kvbench.measure.flashinfer_peer for where FlashInfer comes from). Planned here, untimed.

    Decode options (a model geometry's, kvbench.ops.decode_geometry): with ``window`` the
    contiguous copy holds the window's tokens only (what a user would hand SDPA); ``softcap``
    is flex_attention's score_mod, and SDPA and the FlashInfer peers as planned here have
    none, so they carry that reason and the table lists them as not measured.
    """
    peers: dict[str, Callable[[], torch.Tensor]] = {}
    if q.is_cuda and pool.kv_dtype_name != "fp8":
        if window is None and softcap is None:
            peers.update(flashinfer_peers(pool, q))
        else:
            why = RuntimeError("the FlashInfer peer is planned without a window or soft-cap")
            for name in ("decode", "decode_tc"):
                peers[f"peer:flashinfer/{name}"] = partial(_raise, why)
    lens = pool.seq_lens_list
    if pool.kv_dtype_name == "fp8" or len(set(lens)) != 1:
        return peers
    length = lens[0]
    keep = length if window is None else min(length, window)
    pages = -(-length // pool.page_size)
    idx = pool.block_table[:, :pages].long()

    def contiguous(cache: torch.Tensor) -> torch.Tensor:
        rows = cache[idx]  # [B, pages, page, Hkv, D]
        rows = rows.reshape(q.shape[0], pages * pool.page_size, pool.kv_heads, pool.head_dim)
        return rows[:, length - keep:length].transpose(1, 2).contiguous()  # [B, Hkv, L, D]

    k, v = contiguous(pool.k_cache), contiguous(pool.v_cache)
    q4 = q.unsqueeze(2)  # [B, Hq, 1, D]
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa_contiguous(*_: Any, **__: Any) -> torch.Tensor:
        return sdpa(q4, k, v, enable_gqa=True).squeeze(2)

    if softcap is None:
        peers["peer:torch/sdpa_contiguous"] = sdpa_contiguous
        if q.is_cuda:
            peers["peer:torch/sdpa_cudnn"] = cudnn_sdpa(q4, k, v)
    else:
        no_cap = RuntimeError("torch SDPA has no logit soft-cap "
                              "(peer:torch/flex_attention applies it)")
        peers["peer:torch/sdpa_contiguous"] = partial(_raise, no_cap)
        if q.is_cuda:
            peers["peer:torch/sdpa_cudnn"] = partial(_raise, no_cap)
    if q.is_cuda:
        try:
            from torch.nn.attention.flex_attention import flex_attention

            flex = compile_for_one_case(flex_attention)
            mod = None if softcap is None else softcap_score_mod(float(softcap))

            def flex_contiguous(*_: Any, **__: Any) -> torch.Tensor:
                return flex(q4, k, v, score_mod=mod, enable_gqa=True).squeeze(2)

            peers["peer:torch/flex_attention"] = flex_contiguous
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
            peers["peer:torch/flex_attention"] = partial(_raise, exc)
    return peers


def cudnn_sdpa(q4: torch.Tensor, k: torch.Tensor,
               v: torch.Tensor) -> Callable[..., torch.Tensor]:
    """SDPA held to cuDNN's attention kernel on the contiguous copy: the vendor's decode a
    kernel engineer compares against (SDPA's own choice may be flash or cuDNN per shape).
    Tried once here, untimed: where cuDNN cannot run the shape the peer carries torch's
    reason instead of timing another backend."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention

    def sdpa_cudnn(*_: Any, **__: Any) -> torch.Tensor:
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return sdpa(q4, k, v, enable_gqa=True).squeeze(2)

    try:
        sdpa_cudnn()
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run is reported, not fatal
        return partial(_raise, exc)
    return sdpa_cudnn


def compile_for_one_case(fn: Callable[..., Any], **compile_kwargs: Any) -> Callable[..., Any]:
    """``torch.compile(fn)`` for one case's shapes, never dynamo's eager fallback.

    Dynamo keys compiled graphs on ``fn``'s code object, which every case of a table shares:
    past ``torch._dynamo.config.recompile_limit`` distinct shapes or score_mods it runs ``fn``
    uncompiled with only a logged warning, and flex_attention run that way is orders of
    magnitude slower, so a table of more cases than the limit would time the fallback as the
    peer. Resetting dynamo first gives each case its own compile, made on the peer's first
    call, which the pipeline leaves untimed.
    """
    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False, **compile_kwargs)


def softcap_score_mod(cap: float) -> Callable[..., torch.Tensor]:
    """flex_attention's score_mod for a logit soft-cap: cap * tanh(score / cap), on the score
    after the softmax scale (as the kernels and the reference apply it)."""

    def capped(score: torch.Tensor, b: Any, h: Any, q_idx: Any, kv_idx: Any) -> torch.Tensor:
        return cap * torch.tanh(score / cap)

    return capped


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
