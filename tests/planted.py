"""Planted wrong kernels (tests only): each is correct on its first call, or correct up to a
systematic error, and must get no number from the harness, the table, tune or the asv suite.

Each plant wraps a real torch row with the same signature, so dispatch-free callers (the
timers, the checks) and the asv e2e history (which patches the row a selector loads) can use
it. The plants:

- memoizing:   returns the SAME output object for the same input tensors (no work after the
               first call); a variant returns a clone of it (a fresh object, stale values).
- skip_after_first: first call real, later calls return an unwritten torch.empty of the
               right shape (the caching allocator often hands back the last result's block).
- scaled:      the real output x 1.005 (inside every elementwise tolerance at bf16/fp8).
- biased:      the real output + 0.005 x mean |output| (a zero-mean output's scale hides it).
- one_page_less: decode that attends to one page (16 tokens) less of every sequence longer
               than a page.
"""

from __future__ import annotations

import functools

import torch


def memoizing(fn, *, clone: bool = False):
    cache: dict = {}

    @functools.wraps(fn)
    def planted(*args, **kwargs):
        key = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
        if key not in cache:
            cache[key] = fn(*args, **kwargs)
        return cache[key].clone() if clone else cache[key]

    return planted


def skip_after_first(fn):
    calls = []

    @functools.wraps(fn)
    def planted(*args, **kwargs):
        if not calls:
            calls.append(1)
            return fn(*args, **kwargs)
        first = args[0]
        # decode: [B, Hq, D] like q; gather: [L + extra, 576] fp8
        if "extra_rows" in kwargs:
            n = int(args[1].shape[0]) + int(kwargs["extra_rows"])
            return torch.empty((n, 576), dtype=torch.float8_e4m3fn, device=first.device)
        return torch.empty_like(first)

    return planted


def write_skip_after_first(fn):
    """kv_write: writes on the first call only (the rows are 'already there' afterwards)."""
    calls = []

    @functools.wraps(fn)
    def planted(*args, **kwargs):
        if not calls:
            calls.append(1)
            return fn(*args, **kwargs)
        return None

    return planted


def scaled(fn, factor: float = 1.005):
    @functools.wraps(fn)
    def planted(*args, **kwargs):
        out = fn(*args, **kwargs)
        return (out.float() * factor).to(out.dtype)

    return planted


def biased(fn, share: float = 0.005):
    @functools.wraps(fn)
    def planted(*args, **kwargs):
        out = fn(*args, **kwargs)
        return (out.float() + share * out.float().abs().mean()).to(out.dtype)

    return planted


def one_page_less(fn, page_size: int = 16):
    @functools.wraps(fn)
    def planted(q, k_cache, v_cache, block_table, seq_lens, **kwargs):
        shorter = torch.where(seq_lens > page_size, seq_lens - page_size, seq_lens)
        return fn(q, k_cache, v_cache, block_table, shorter, **kwargs)

    return planted
