"""kvbench.ops.decode_geometry: the named model geometries the asv suite, `kvbench table
paged_decode --geometry` and these tests read, and the oracle's inputs at each (CPU: the
Triton rows through the interpreter, conftest sets TRITON_INTERPRET)."""

from __future__ import annotations

import dataclasses
import functools

import pytest

from kvbench.dispatch.registry import REGISTRY
from kvbench.harness.verify import VerificationError
from kvbench.kernels import paged_decode as pd
from kvbench.ops import paged_decode as op
from kvbench.ops.decode_geometry import ALL, GEOMETRIES, Geometry, select_geometries

SPLIT2 = functools.partial(pd.paged_decode_split_kv, num_splits=2)
SPLIT2.__name__ = "paged_decode_split_kv[2 splits]"
ROWS = (pd.paged_decode_single_pass, SPLIT2, pd.paged_decode_gather_sdpa)
#: Interpreter-sized case: 2 sequences of CONTEXT tokens, two 32-token tiles and a tail.
CONTEXT = 40
#: The window the CPU cases shrink a geometry's window to, so that it drops tokens at CONTEXT
#: (a page and a half of 16): Gemma-2's own 4096 covers any interpreter-sized context.
CPU_WINDOW = 24


@pytest.fixture
def short_tiles(monkeypatch):
    for key in ("single_pass", "single_pass_fp8", "split_kv", "split_kv_fp8"):
        monkeypatch.setitem(pd.CONFIG, key, {**pd.CONFIG[key], "BLOCK_N": 32})


def _cpu_sized(geometry: Geometry) -> Geometry:
    if geometry.window is None:
        return geometry
    return dataclasses.replace(geometry, window=CPU_WINDOW)


def test_llama3_is_the_default_geometry_of_every_other_case():
    """The axis's baseline is the geometry the rest of the suite measures."""
    g = GEOMETRIES["llama3-8b"]
    assert (g.q_heads, g.kv_heads, g.head_dim, g.page_size, g.options) == (
        op.Q_HEADS, op.KV_HEADS, op.HEAD_DIM, op.PAGE_SIZE, {})


def test_the_table_covers_what_the_default_geometry_does_not():
    """Padded head dims (96, 192), the largest tile (256), MHA, a GQA group that is not a
    power of two, and a model with both decode options (Gemma-2's published figures)."""
    geometries = GEOMETRIES.values()
    assert {96, 128, 192, 256} <= {g.head_dim for g in geometries}
    groups = {g.group for g in geometries}
    assert 1 in groups and any(n & (n - 1) for n in groups), groups
    gemma = GEOMETRIES["gemma-2-9b"]
    assert (gemma.q_heads, gemma.kv_heads, gemma.head_dim) == (16, 8, 256)
    assert gemma.options == {"window": 4096, "softcap": 50.0}
    assert gemma.summary() == ("gemma-2-9b: 16 q / 8 kv heads, head_dim 256, page 16, "
                               "window 4096, softcap 50")


def test_select_geometries_by_name_all_or_a_clear_refusal():
    assert select_geometries("qwen2.5-7b") == (GEOMETRIES["qwen2.5-7b"],)
    assert select_geometries(ALL) == tuple(GEOMETRIES.values())
    with pytest.raises(ValueError) as exc:
        select_geometries("llama-9000")
    assert str(exc.value) == ("unknown geometry 'llama-9000'; accepted: all, "
                              + ", ".join(GEOMETRIES))


def test_a_geometry_whose_heads_do_not_group_is_refused():
    with pytest.raises(ValueError, match="q_heads 30 is not a multiple of kv_heads 8"):
        Geometry("odd", "odd", q_heads=30, kv_heads=8, head_dim=128)


def test_geometry_inputs_carry_the_options_into_problem_call_and_work():
    """The problem names the options (dispatch routes on them), the rows are called with
    them, and the Work counts the window's tokens and pages only."""
    g = _cpu_sized(GEOMETRIES["gemma-2-9b"])
    pool = op.geometry_pool(g, 2, CONTEXT, "fp16", "cpu")
    inputs = op.geometry_inputs(g, pool)
    shape = inputs.problem.shape
    assert (shape["q_heads"], shape["kv_heads"], shape["head_dim"]) == (16, 8, 256)
    assert shape["options"] == ("window", "softcap")
    assert {k: inputs.kwargs[k] for k in ("window", "softcap")} == {"window": 24,
                                                                   "softcap": 50.0}
    assert inputs.work == op.paged_decode_work([CONTEXT] * 2, q_heads=16, kv_heads=8,
                                               head_dim=256, kv_dtype="fp16", window=24)
    full = op.paged_decode_work([CONTEXT] * 2, q_heads=16, kv_heads=8, head_dim=256,
                                kv_dtype="fp16")
    assert inputs.work.moved < full.moved and inputs.work.flops == full.flops * 24 / CONTEXT


def test_work_with_a_window_counts_the_pages_it_touches():
    """Tokens min(length, window); pages from the window's first token's page to the last."""
    kw = {"q_heads": 1, "kv_heads": 1, "head_dim": 16, "kv_dtype": "fp16", "page_size": 16}
    per_token = 2 * 16 * 2  # K and V rows, fp16
    q_out = 2 * 16 * 2
    for lens, window, tokens, pages in (([40], 24, 24, 2),  # tokens 16..39: pages 1, 2
                                        ([40], 25, 25, 3),  # token 15 is on page 0
                                        ([40, 5], 100, 45, 4)):  # longer than every sequence
        work = op.paged_decode_work(lens, window=window, **kw)
        want = tokens * per_token + len(lens) * q_out + 4 * pages + 4 * len(lens)
        assert work.moved == want, (lens, window)
    assert op.paged_decode_work([40, 5], window=100, **kw) == op.paged_decode_work([40, 5], **kw)


def test_the_cluster_rows_gate_serves_the_llama_geometry_only():
    """cuda/cluster_decode serves head_dim 128 with groups 1-8 and no options: of the
    geometries, Llama-3's alone; auto routes every other one to a row that serves it."""
    gate = next(s.shape_gate for s in REGISTRY.specs("paged_decode")
                if s.name == "cuda/cluster_decode")
    served = set()
    for name, g in GEOMETRIES.items():
        pool = op.geometry_pool(g, 1, 16, "fp16", "cpu")
        if gate(op.geometry_inputs(g, pool).problem.shape) is None:
            served.add(name)
    assert served == {"llama3-8b"}


@pytest.mark.parametrize("name", list(GEOMETRIES))
def test_every_row_serves_every_geometry_with_its_options(short_tiles, name):
    """Each geometry's heads, head_dim and options (a window shrunk to drop tokens at this
    size) through every CPU row, against the fp64 reference through the op's gate."""
    g = _cpu_sized(GEOMETRIES[name])
    pool = op.geometry_pool(g, 2, CONTEXT, "fp16", "cpu", seed=3)
    inputs = op.geometry_inputs(g, pool, seed=1)
    if g.softcap is not None:
        inputs.extra["q"].mul_(g.softcap / 4)  # scores the cap bends (unit q: |s| ~ 1)
    for fn in ROWS:
        assert inputs.check(fn) >= 0.0


@pytest.mark.parametrize("dropped", ["window", "softcap"])
def test_the_geometry_check_fails_a_row_that_ignores_an_option(dropped):
    """The gate compares with a reference that applies the window and the cap: a row that
    drops either gets no number."""
    g = _cpu_sized(GEOMETRIES["gemma-2-9b"])
    pool = op.geometry_pool(g, 2, CONTEXT, "fp16", "cpu", seed=3)
    inputs = op.geometry_inputs(g, pool, seed=1)
    inputs.extra["q"].mul_(g.softcap / 4)

    def ignores(*args, **kw):
        kw.pop(dropped)
        return pd.paged_decode_gather_sdpa(*args, **kw)

    assert inputs.check(pd.paged_decode_gather_sdpa) >= 0.0
    with pytest.raises(VerificationError):
        inputs.check(ignores)
