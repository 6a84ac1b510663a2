"""Registry and dispatch: ranking, caching, explain(), selectors, golden gating, perf tables.

Most tests run against a test-scoped Registry of fake rows (callable targets and checks), so
they exercise dispatch itself and never depend on kernel code; the real registry is checked
for its names, its lazy imports and its buckets.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from kvbench.dispatch import (
    DispatchError,
    KernelSpec,
    LayoutRequirement,
    Preference,
    Registry,
    bucket,
    clear_golden,
    core,
    dispatch,
    golden,
    perf_tables,
    record_golden,
    registry,
    reset_perf_provider,
    set_perf_provider,
    spec_names,
    using_registry,
)
from kvbench.dispatch.spec import any_device, triton_device
from kvbench.measure import tune

OP = "paged_decode"  # fake rows use a real op name so its selector variable applies
VAR = "KVBENCH_PAGED_DECODE"
SHAPE = {"batch": 4, "max_context": 2048}  # bucket batch=2-8,ctx<=4k
PAGED_TAGS = frozenset({"kv:paged"})  # a problem's layout tags, as the perf provider gets them
CPU = torch.device("cpu")


class Checks:
    """Counts golden-check runs per row name."""

    def __init__(self) -> None:
        self.calls: list[str] = []


def fake(
    name: str,
    checks: Checks,
    *,
    dtypes=("fp16",),
    required=("kv:paged",),
    forbidden=(),
    priority=0,
    preferences=(),
    gate=None,
    available=any_device,
    check_ok=True,
) -> KernelSpec:
    def target(*args, **kwargs):
        return name

    def golden_check(fn, dtype, device):
        checks.calls.append(name)
        assert fn() == name
        if not check_ok:
            raise AssertionError("max_abs_diff 0.5 > atol 0.004")
        return 0.001

    return KernelSpec(
        name=name,
        op=OP,
        dtypes=dtypes,
        target=target,
        golden_check=golden_check,
        layout=LayoutRequirement(required=required, forbidden=forbidden),
        available=available,
        priority=priority,
        preferences=preferences,
        shape_gate=gate,
    )


@pytest.fixture(autouse=True)
def clean_dispatch(monkeypatch, tmp_path):
    """No provider, no golden records, no selector, a private cache dir; restored after."""
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    for var in (
        "KVBENCH_PAGED_DECODE",
        "KVBENCH_KV_WRITE",
        "KVBENCH_KV_GATHER",
        "KVBENCH_KV_ALLOC",
    ):
        monkeypatch.delenv(var, raising=False)
    clear_golden()
    core.reload_perf_tables()
    set_perf_provider(None)
    yield
    reset_perf_provider()
    core.reload_perf_tables()
    clear_golden()


@pytest.fixture
def checks() -> Checks:
    return Checks()


def provider_from(table_ms: dict[str, float | None], calls: list | None = None):
    def provider(op, bucket_name, spec_name, device_name, dtype, tags):
        if calls is not None:
            calls.append((op, bucket_name, spec_name, device_name))
        return table_ms.get(spec_name)

    return provider


def pick(*specs, tags=("kv:paged",), shape=SHAPE, dtype="fp16"):
    with using_registry(Registry(list(specs))):
        return dispatch(OP, dtype=dtype, tags=tags, shape=shape, device="cpu")


# ---- ranking ---------------------------------------------------------------------------------


def test_measured_perf_ranks_first(checks):
    set_perf_provider(provider_from({"a/fast": 0.002, "a/slow": 0.004}))
    sel = pick(fake("a/slow", checks, priority=100), fake("a/fast", checks, priority=0))
    assert sel.spec.name == "a/fast"
    assert [v.spec.name for v in sel.ranked] == ["a/fast", "a/slow"]
    assert sel.ranked[0].perf_us == pytest.approx(2.0)


def test_measured_row_beats_unmeasured_row(checks):
    set_perf_provider(provider_from({"a/measured": 5.0}))  # 5 ms, slow but measured
    sel = pick(fake("a/unmeasured", checks, priority=100), fake("a/measured", checks))
    assert sel.spec.name == "a/measured"
    assert math.isinf(sel.ranked[1].perf_us)


def test_preference_breaks_perf_tie(checks):
    always = Preference("always", lambda shape: 1.0, "test rule")
    sel = pick(
        fake("a/high_prio", checks, priority=50), fake("a/preferred", checks, preferences=(always,))
    )
    assert sel.spec.name == "a/preferred"
    assert "always+1" in sel.explain()


def test_priority_breaks_preference_tie(checks):
    sel = pick(fake("a/low", checks, priority=1), fake("a/high", checks, priority=2))
    assert sel.spec.name == "a/high"


def test_name_breaks_full_tie(checks):
    sel = pick(fake("b/z", checks), fake("b/a", checks))
    assert sel.spec.name == "b/a"
    assert [v.spec.name for v in sel.ranked] == ["b/a", "b/z"]


def test_preference_rules_see_the_shape(checks):
    def long_context(shape):
        return 1.0 if shape["max_context"] > 4096 else 0.0

    rows = (
        fake("a/plain", checks, priority=1),
        fake("a/long", checks, preferences=(Preference("long", long_context),)),
    )
    assert pick(*rows, shape={"batch": 1, "max_context": 1024}).spec.name == "a/plain"
    assert pick(*rows, shape={"batch": 1, "max_context": 32768}).spec.name == "a/long"


# ---- units -----------------------------------------------------------------------------------


def test_provider_ms_converted_to_us_once(checks):
    set_perf_provider(provider_from({"a/x": 0.0125}))
    assert core._provider_us(OP, "any", "a/x", "dev", "fp16", PAGED_TAGS) == pytest.approx(12.5)
    sel = pick(fake("a/x", checks))
    assert sel.ranked[0].perf_us == pytest.approx(12.5)
    assert "12.50 µs" in sel.explain()


@pytest.mark.parametrize("bad", [-1.0, 0.0, float("nan"), float("inf")])
def test_provider_bad_value_raises(checks, bad):
    set_perf_provider(provider_from({"a/x": bad}))
    with pytest.raises(ValueError, match="milliseconds"):
        pick(fake("a/x", checks))


def test_set_perf_provider_rejects_non_callable():
    with pytest.raises(ValueError, match="callable"):
        set_perf_provider(42)


# ---- decision cache ----------------------------------------------------------------------------


def test_decision_cached_per_shape(checks):
    """The same problem hits the cache (however its tags are spelled); another shape of the
    same bucket is decided for itself (core.DECISION_KEYS holds batch and context exactly),
    and asks the perf table for the same bucket."""
    calls: list = []
    set_perf_provider(provider_from({"a/x": 0.01}, calls))
    with using_registry(Registry([fake("a/x", checks)])):
        first = dispatch(OP, dtype="fp16", tags=("kv:paged",), shape=SHAPE, device="cpu")
        again = dispatch(OP, dtype="fp16", tags=["kv:paged"], shape=dict(SHAPE), device=CPU)
        assert again is first
        assert len(calls) == 1
        same_bucket = dispatch(
            OP, dtype="fp16", tags=["kv:paged"], shape={"batch": 8, "max_context": 4096}, device=CPU
        )
        assert same_bucket is not first and same_bucket.bucket == first.bucket
        assert [c[1] for c in calls] == [first.bucket, first.bucket]
        other = dispatch(
            OP,
            dtype="fp16",
            tags=("kv:paged",),
            shape={"batch": 64, "max_context": 4096},
            device="cpu",
        )
        assert other.bucket == "batch=33+,ctx<=4k"
        assert len(calls) == 3
    assert checks.calls == ["a/x"]  # golden ran once for (row, dtype, device kind)


def test_a_rule_threshold_inside_a_bucket_decides_per_shape_in_any_order(checks):
    """Batch x kv heads against the SM count falls inside the 9-32 batch bucket (batch 16 and
    32 at 8 kv heads, 132 SMs): each shape gets the rule's pick whichever came first; with one
    decision per bucket the first shape seen used to decide for both."""
    few = Preference("few", lambda shape: 1.0 if shape["batch"] * shape["kv_heads"] < 132
                     else 0.0, "pairs < SMs")
    rows = [fake("a/split", checks, preferences=(few,)), fake("a/single", checks, priority=1)]
    small = {"batch": 16, "max_context": 1024, "kv_heads": 8}
    large = {"batch": 32, "max_context": 1024, "kv_heads": 8}
    assert bucket(OP, small) == bucket(OP, large)
    for order in ((small, large), (large, small)):
        with using_registry(Registry(rows)):
            picks = {shape["batch"]: dispatch(OP, dtype="fp16", tags=PAGED_TAGS, shape=shape,
                                              device="cpu").spec.name for shape in order}
        assert picks == {16: "a/split", 32: "a/single"}, order


def test_cache_invalidated_by_provider_change(checks):
    rows = (fake("a/one", checks), fake("a/two", checks))
    with using_registry(Registry(list(rows))):
        set_perf_provider(provider_from({"a/one": 1.0, "a/two": 2.0}))
        assert dispatch(OP, dtype="fp16", tags=("kv:paged",), shape=SHAPE).spec.name == "a/one"
        set_perf_provider(provider_from({"a/one": 3.0, "a/two": 2.0}))
        assert dispatch(OP, dtype="fp16", tags=("kv:paged",), shape=SHAPE).spec.name == "a/two"


def test_cache_invalidated_by_selector_change(checks, monkeypatch):
    rows = (fake("a/one", checks, priority=2), fake("a/two", checks))
    with using_registry(Registry(list(rows))):
        args = {"dtype": "fp16", "tags": ("kv:paged",), "shape": SHAPE, "device": "cpu"}
        assert dispatch(OP, **args).spec.name == "a/one"
        monkeypatch.setenv(VAR, "a/two")
        sel = dispatch(OP, **args)
        assert sel.spec.name == "a/two" and sel.forced
        assert "selected: a/two (forced by KVBENCH_PAGED_DECODE)" in sel.explain()
        monkeypatch.setenv(VAR, "auto")
        assert dispatch(OP, **args).spec.name == "a/one"
        monkeypatch.delenv(VAR)
        assert dispatch(OP, **args).spec.name == "a/one"


def test_cached_selection_is_the_dispatch_entry(checks):
    with using_registry(Registry([fake("a/x", checks)])):
        tags = frozenset({"kv:paged"})
        assert core.cached_selection(OP, "fp16", tags, bucket(OP, SHAPE), CPU) is None
        sel = dispatch(OP, dtype="fp16", tags=tags, shape=SHAPE, device="cpu")
        features = core.decision_features(OP, SHAPE)
        assert core.cached_selection(OP, "fp16", tags, bucket(OP, SHAPE), CPU, features) is sel


def test_a_gate_on_geometry_decides_per_geometry_not_per_bucket(checks):
    """A row built for one head_dim (cuda/cluster_decode: 128) must not serve a problem of the
    same bucket with another: geometry is part of the decision key, so the second problem is
    decided for itself, and the first one's decision still answers the first."""
    only_128 = fake("a/d128", checks, priority=9,
                    gate=lambda shape: None if shape.get("head_dim") == 128 else "needs d 128")
    rows = [only_128, fake("a/any", checks, priority=1)]
    shape_128 = {**SHAPE, "q_heads": 32, "kv_heads": 8, "head_dim": 128, "page_size": 16}
    shape_64 = {**shape_128, "head_dim": 64}
    assert bucket(OP, shape_128) == bucket(OP, shape_64)
    with using_registry(Registry(rows)):
        for shape, chosen in ((shape_128, "a/d128"), (shape_64, "a/any"), (shape_128, "a/d128")):
            assert dispatch(OP, dtype="fp16", tags=PAGED_TAGS, shape=shape,
                            device="cpu").spec.name == chosen
    # a shape without an "options" key (a caller's own dispatch()) has None there
    assert core.decision_features(OP, shape_64) == (4, 2048, 32, 8, 64, 16, None)
    assert core.decision_features(OP, None) == ()
    assert core.decision_features("kv_write", {"n": 4}) == ()


# ---- explain and exclusions --------------------------------------------------------------------


def test_explain_names_every_exclusion_reason(checks):
    def gate(shape):
        return "needs batch >= 16" if shape["batch"] < 16 else None

    def nowhere(device):
        return "no such hardware here"

    rows = [
        fake("x/dtype", checks, dtypes=("bf16",)),
        fake("x/missing", checks, required=("kv:paged", "kv:contiguous")),
        fake("x/forbidden", checks, forbidden=("kv:strided",)),
        fake("x/unavailable", checks, available=nowhere),
        fake("x/gated", checks, gate=gate),
        fake("x/broken", checks, check_ok=False, priority=99),
        fake("x/good", checks),
    ]
    sel = pick(*rows, tags=("kv:paged", "kv:strided"))
    assert sel.spec.name == "x/good"
    text = sel.explain()
    assert "dtype=fp16" in text and "kv:paged, kv:strided" in text
    assert "bucket=batch=2-8,ctx<=4k" in text and "KVBENCH_PAGED_DECODE=auto" in text
    assert "batch=4" in text and "max_context=2048" in text
    expected = {
        "x/dtype": "dtype fp16 not served (serves bf16)",
        "x/missing": "layout tag missing: kv:contiguous",
        "x/forbidden": "layout tag forbidden: kv:strided",
        "x/unavailable": "unavailable: no such hardware here",
        "x/gated": "shape gate: needs batch >= 16",
        "x/broken":
            "unverified: golden check failed (AssertionError: max_abs_diff 0.5 > atol 0.004)",
    }
    for name, reason in expected.items():
        line = next(ln for ln in text.splitlines() if f" {name} " in ln and "excluded" in ln)
        assert reason in line, (name, line)
    assert "1. x/good" in text and "<- selected" in text
    assert "selected: x/good (auto)" in text
    # The check of a row filtered by the cheap filters never ran.
    assert checks.calls == ["x/broken", "x/good"]


def test_no_survivor_raises_with_explain(checks):
    with pytest.raises(DispatchError) as err:
        pick(fake("x/bf16", checks, dtypes=("bf16",)))
    assert isinstance(err.value, ValueError)
    assert "no registry row can serve" in str(err.value)
    assert re.search(r"x/bf16 +excluded: dtype fp16 not served", str(err.value))
    assert "(no row survives)" in err.value.explain


@pytest.mark.parametrize("on", ["1", "true", "True", "yes", "on"])
def test_triton_availability_follows_interpret_flag(monkeypatch, on):
    """Every spelling Triton's own knob takes as on (it decorates the kernels accordingly)."""
    monkeypatch.setenv("TRITON_INTERPRET", on)
    assert triton_device(CPU) is None
    for off in ("0", "false", ""):
        monkeypatch.setenv("TRITON_INTERPRET", off)
        assert "TRITON_INTERPRET=1" in triton_device(CPU)
    if not torch.cuda.is_available():
        assert "is_available() is False" in triton_device(torch.device("cuda"))


# ---- selectors ---------------------------------------------------------------------------------


def test_unknown_selector_lists_valid_names(checks, monkeypatch):
    monkeypatch.setenv(VAR, "triton/does_not_exist")
    with pytest.raises(ValueError) as err:
        pick(fake("a/one", checks), fake("a/two", checks))
    msg = str(err.value)
    assert "triton/does_not_exist" in msg and "auto, a/one, a/two" in msg
    assert not isinstance(err.value, DispatchError)


def test_unknown_selector_real_registry_lists_every_row(monkeypatch):
    monkeypatch.setenv("KVBENCH_KV_WRITE", "nope")
    with pytest.raises(ValueError) as err:
        dispatch("kv_write", dtype="fp16", tags=("kv:paged",), shape={"n": 4}, device="cpu")
    for name in spec_names("kv_write"):
        assert name in str(err.value)


def test_forced_filtered_row_raises_never_runs_another(checks, monkeypatch):
    monkeypatch.setenv(VAR, "a/bf16_only")
    with pytest.raises(DispatchError) as err:
        pick(fake("a/fine", checks), fake("a/bf16_only", checks, dtypes=("bf16",)))
    msg = str(err.value)
    assert "forced row a/bf16_only cannot serve" in msg
    assert err.value.explain in msg
    assert re.search(r"a/fine +excluded: not considered: selector forces a/bf16_only", msg)
    assert "KVBENCH_PAGED_DECODE=a/bf16_only" in msg
    assert checks.calls == []  # nothing was checked, nothing ran


def test_forced_missing_tag_raises(checks, monkeypatch):
    monkeypatch.setenv(VAR, "a/needs_contig")
    with pytest.raises(DispatchError, match="layout tag missing: kv:contiguous"):
        pick(fake("a/needs_contig", checks, required=("kv:contiguous",)))


def test_forced_unverified_row_raises(checks, monkeypatch):
    monkeypatch.setenv(VAR, "a/broken")
    with pytest.raises(DispatchError, match="unverified: golden check failed"):
        pick(fake("a/broken", checks, check_ok=False), fake("a/fine", checks))
    assert checks.calls == ["a/broken"]


def test_forced_row_runs_its_check_once(checks, monkeypatch):
    monkeypatch.setenv(VAR, "a/two")
    with using_registry(Registry([fake("a/one", checks), fake("a/two", checks)])):
        for batch in (1, 4, 64):
            sel = dispatch(
                OP,
                dtype="fp16",
                tags=("kv:paged",),
                shape={"batch": batch, "max_context": 100},
                device="cpu",
            )
            assert sel.spec.name == "a/two"
    assert checks.calls == ["a/two"]


# ---- golden ------------------------------------------------------------------------------------


def test_unverified_row_never_chosen_by_auto(checks):
    set_perf_provider(provider_from({"a/broken": 0.001, "a/slow": 9.0}))
    rows = (fake("a/broken", checks, check_ok=False, priority=100), fake("a/slow", checks))
    for _ in range(3):
        core.clear_decisions()
        assert pick(*rows).spec.name == "a/slow"
    assert checks.calls.count("a/broken") == 1  # cached per (dtype, device kind)
    rec = golden.lookup(OP, "a/broken", "fp16", "cpu")
    assert rec is not None and rec.verified is False and rec.max_abs_diff is None


def test_golden_is_per_dtype(checks):
    row = fake("a/x", checks, dtypes=("fp16", "bf16"))
    pick(row, dtype="fp16")
    pick(row, dtype="bf16")
    assert checks.calls == ["a/x", "a/x"]


def test_target_import_error_leaves_row_unverified():
    from kvbench.ops.paged_decode import golden_check_paged_decode

    spec = KernelSpec(
        name="a/ghost",
        op=OP,
        dtypes=("fp16",),
        target="kvbench.kernels.no_such_module:fn",
        golden_check=golden_check_paged_decode,
        layout=LayoutRequirement(required=("kv:paged",)),
    )
    with pytest.raises(DispatchError, match="ModuleNotFoundError"):
        pick(spec)


def test_record_golden_installs_a_full_size_result(checks):
    with using_registry(Registry([fake("a/one", checks, priority=5), fake("a/two", checks)])):
        args = {"dtype": "fp16", "tags": ("kv:paged",), "shape": SHAPE, "device": "cpu"}
        assert dispatch(OP, **args).spec.name == "a/one"
        rec = record_golden(
            OP,
            "a/one",
            "fp16",
            "cpu",
            max_abs_diff=None,
            verified=False,
            detail="full-size check failed",
        )
        assert rec.verified is False and rec.device_kind == "cpu"
        sel = dispatch(OP, **args)  # record_golden dropped the cached decision
        assert sel.spec.name == "a/two"
        assert "full-size check failed" in sel.explain()
        with pytest.raises(ValueError, match="valid names"):
            record_golden(OP, "a/missing", "fp16", "cpu", max_abs_diff=0.0)
        with pytest.raises(ValueError, match="serves dtypes"):
            record_golden(OP, "a/two", "fp8", "cpu", max_abs_diff=0.0)
        with pytest.raises(ValueError, match="finite max_abs_diff"):
            record_golden(OP, "a/two", "fp16", "cpu", max_abs_diff=float("nan"))


# ---- input validation --------------------------------------------------------------------------


def test_bad_problem_inputs(checks):
    with using_registry(Registry([fake("a/x", checks)])):
        with pytest.raises(ValueError, match="accepted dtype names"):
            dispatch(OP, dtype="float16", tags=("kv:paged",), shape=SHAPE)
        with pytest.raises(ValueError, match="unknown op"):
            dispatch("attention", dtype="fp16")
        with pytest.raises(ValueError, match="iterable of tag strings"):
            dispatch(OP, dtype="fp16", tags="kv:paged", shape=SHAPE)
        with pytest.raises(ValueError, match="lacks"):
            dispatch(OP, dtype="fp16", tags=("kv:paged",), shape={"batch": 1})
        with pytest.raises(ValueError, match="device"):
            dispatch(OP, dtype="fp16", tags=("kv:paged",), shape=SHAPE, device="gpu0")
        # values the decision key holds: a TypeError (unhashable, or str <= int) before
        with pytest.raises(ValueError, match="every tag must be a string"):
            dispatch(OP, dtype="fp16", tags=[["kv:paged"]], shape=SHAPE)
        with pytest.raises(ValueError, match=r"shape\['options'\] for paged_decode must be a tup"):
            dispatch(OP, dtype="fp16", tags=("kv:paged",), shape={**SHAPE, "options": ["window"]})
        for key, bad in (("head_dim", "64"), ("page_size", -16), ("kv_heads", 2.0)):
            with pytest.raises(ValueError, match=rf"shape\['{key}'\] for paged_decode must be a"):
                dispatch(OP, dtype="fp16", tags=("kv:paged",), shape={**SHAPE, key: bad})


def no_check(fn, dtype, device):
    return 0.0

def test_spec_and_layout_validation():
    req = LayoutRequirement(required=("kv:paged",), forbidden=("kv:strided",))
    assert req.serves({"kv:paged"}) and req.serves({"kv:paged", "kv:fp8-scaled"})
    assert not req.serves({"kv:paged", "kv:strided"}) and not req.serves(set())
    with pytest.raises(ValueError, match="both required and forbidden"):
        LayoutRequirement(required=("a",), forbidden=("a",))
    with pytest.raises(ValueError, match="tuple of tag strings"):
        LayoutRequirement(required="kv:paged")
    with pytest.raises(ValueError, match="<backend>/<impl>"):
        KernelSpec(name="single_pass", op=OP, dtypes=("fp16",), target="m:f", golden_check=no_check)
    with pytest.raises(ValueError, match="unknown dtype names"):
        KernelSpec(name="a/b", op=OP, dtypes=("float16",), target="m:f", golden_check=no_check)
    reg = Registry()
    row = {"name": "a/b", "op": OP, "dtypes": ("fp16",), "target": "m:f", "golden_check": no_check}
    reg.register(KernelSpec(**row))
    with pytest.raises(ValueError, match="already has a row"):
        reg.register(KernelSpec(**row))
    with pytest.raises(ValueError, match="unknown op"):
        reg.register(
            KernelSpec(name="a/c", op="attn", dtypes=("fp16",), target="m:f", golden_check=no_check)
        )
    with pytest.raises(ValueError, match="golden_check must be a callable"):
        KernelSpec(name="a/d", op=OP, dtypes=("fp16",), target="m:f", golden_check="m:g")


# ---- the real registry -------------------------------------------------------------------------


def test_real_rows_match_architecture_table():
    assert spec_names("paged_decode") == (
        "triton/single_pass",
        "triton/split_kv",
        "cuda/cluster_decode",
        "torch/gather_sdpa",
    )
    assert spec_names("kv_write") == ("triton/scatter", "torch/index_copy")
    assert spec_names("kv_gather_fp8") == (
        "triton/legacy",
        "triton/vectorized",
        "triton/cached",
        "torch/gather",
    )
    assert spec_names("kv_alloc") == ("torch/legacy", "host/freelist")
    for op in registry.OPS:
        for spec in registry.REGISTRY.specs(op):
            assert isinstance(spec.target, str) and ":" in spec.target
            # The golden check is the op oracle's own function, imported (not a string):
            # dispatch sits above kvbench.ops and the import contract sees the edge.
            assert spec.golden_check.__module__ == f"kvbench.ops.{op}"
            assert spec.golden_check.__name__.startswith(f"golden_check_{op}")


def test_importing_dispatch_imports_no_kernel_code():
    code = (
        "import sys, kvbench.dispatch, kvbench.api, kvbench.ops.common, kvbench.ops.kv_alloc,"
        " kvbench.ops.paged_decode, kvbench.ops.kv_write, kvbench.ops.kv_gather_fp8\n"
        "kernels = ('paged_decode', 'paged_decode_cluster', 'kv_write', 'kv_gather_fp8')\n"
        "bad = [m for m in sys.modules if m.startswith('triton')"
        " or m in {f'kvbench.kernels.{k}' for k in kernels}]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_buckets():
    assert bucket("paged_decode", None) == "any"
    assert bucket("paged_decode", {"batch": 1, "max_context": 1024}) == "batch=1,ctx<=1k"
    assert bucket("paged_decode", {"batch": 2, "max_context": 1025}) == "batch=2-8,ctx<=4k"
    assert bucket("paged_decode", {"batch": 32, "max_context": 16384}) == "batch=9-32,ctx<=16k"
    assert bucket("paged_decode", {"batch": 33, "max_context": 16385}) == "batch=33+,ctx>16k"
    assert bucket("kv_write", {"n": 64}) == "decode" and bucket("kv_write", {"n": 65}) == "prefill"
    assert bucket("kv_gather_fp8", {"kv_len": 8192}) == "kv_len<=8k"
    assert bucket("kv_gather_fp8", {"kv_len": 65536}) == "kv_len>32k"
    assert bucket("kv_alloc", {"n": 1}) == "n=1" and bucket("kv_alloc", {"n": 64}) == "n=2-64"
    for op, names in registry.BUCKETS.items():
        assert len(set(names)) == len(names) == len(tune.CASES[op])
    with pytest.raises(ValueError, match="non-negative int"):
        bucket("kv_write", {"n": -1})


def test_split_preference_rules():
    split, single = registry.PREFER_SPLIT.score, registry.PREFER_SINGLE.score
    long_small = {"batch": 1, "kv_heads": 8, "max_context": 32768, "sm_count": 132}
    big = {"batch": 64, "kv_heads": 8, "max_context": 8192, "sm_count": 132}
    short = {"batch": 1, "kv_heads": 8, "max_context": 1024, "sm_count": 132}
    assert (split(long_small), single(long_small)) == (1.0, 0.0)
    assert (split(big), single(big)) == (0.0, 1.0)
    # split_kv with one split is the single-pass kernel, so a short context is no reason not
    # to split (docs/decisions.md, "Split-KV at short contexts")
    assert (split(short), single(short)) == (1.0, 0.0)
    no_sms = dict(long_small, sm_count=None)  # CPU: no occupancy opinion
    assert (split(no_sms), single(no_sms)) == (0.0, 0.0)


#: What `kvbench tune paged_decode` found at fp16 (docs/decisions.md, "Auto picks the CUDA row
#: at 16-bit"): the tune case (batch, context) of each bucket -> whether cuda/cluster_decode
#: measured ahead of the Triton rows. The untuned rule must pick the same winners.
_CLUSTER_MEASURED_AHEAD = {
    (1, 1024): True, (1, 4096): True, (1, 8192): True, (1, 32768): True,
    (8, 1024): True, (8, 4096): True, (8, 8192): True, (8, 32768): True,
    (32, 1024): False, (32, 4096): True, (32, 8192): True, (32, 32768): True,
    (64, 1024): False, (64, 4096): True, (64, 8192): True, (64, 32768): True,
}


@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_cluster_preference_follows_the_measured_buckets(dtype):
    rule = registry.PREFER_CLUSTER.score
    for (batch, context), ahead in _CLUSTER_MEASURED_AHEAD.items():
        shape = {"batch": batch, "kv_heads": 8, "max_context": context, "sm_count": 132,
                 "dtype": dtype}
        # above the Triton rows' own rule (+1) where it fires
        assert rule(shape) == (2.0 if ahead else 0.0), (batch, context)


def test_cluster_preference_stops_at_few_pairs_beyond_32k():
    """Batch 1 (8 pairs) trails triton/split_kv past 32k tokens and leads up to it; 16 pairs
    lead at 32k and beyond. So the rule stops at batch 1 beyond 32k, not at batch 2
    (docs/decisions.md, "Auto picks the CUDA row at 16-bit")."""
    rule = registry.PREFER_CLUSTER.score
    shape = {"kv_heads": 8, "sm_count": 132, "dtype": "fp16"}
    assert rule(dict(shape, batch=1, max_context=16384)) == 2.0
    assert rule(dict(shape, batch=1, max_context=32768)) == 2.0
    assert rule(dict(shape, batch=1, max_context=32769)) == 0.0
    assert rule(dict(shape, batch=1, max_context=65536)) == 0.0
    assert rule(dict(shape, batch=2, max_context=65536)) == 2.0


def test_cluster_preference_between_the_tune_cases():
    """Batch 2-8 (16-64 pairs) at any context: preferred. Between the tune cases the cluster
    row leads at most shapes and trails by a few percent at batch 5 (2 splits fit there), a
    cost the one rule accepts (docs/decisions.md, "Auto picks the CUDA row at 16-bit")."""
    rule = registry.PREFER_CLUSTER.score
    for batch in range(2, 9):
        for context in (1024, 8192, 32768):
            shape = {"batch": batch, "kv_heads": 8, "max_context": context, "sm_count": 132,
                     "dtype": "fp16"}
            assert rule(shape) == 2.0, (batch, context)


def test_cluster_preference_has_no_opinion_at_fp8_or_without_a_device():
    rule = registry.PREFER_CLUSTER.score
    shape = {"batch": 8, "kv_heads": 8, "max_context": 4096, "sm_count": 132}
    assert rule(dict(shape, dtype="fp8")) == 0.0  # its fp8 path trails Triton's everywhere
    assert rule(dict(shape, dtype="fp16", sm_count=None)) == 0.0


def test_preference_rules_see_the_problem_dtype():
    """dispatch passes the dtype to the rules: the same shape ranks differently per dtype."""
    seen = []
    rule = Preference("p", lambda shape: seen.append(shape["dtype"]) or 0.0)
    spec = fake("a/x", Checks(), dtypes=("fp16", "fp8"), preferences=(rule,))
    with using_registry(Registry([spec])):
        for dtype in ("fp16", "fp8"):
            dispatch(OP, dtype=dtype, tags=("kv:paged",), shape=SHAPE, device=CPU)
    assert seen == ["fp16", "fp8"]


# ---- perf tables -------------------------------------------------------------------------------


def _write_table(device_name: str, op: str, entries: list[dict], file_device: str | None = None):
    path = perf_tables.table_path(file_device or device_name, op)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {"schema": perf_tables.SCHEMA, "device_name": device_name, "op": op, "entries": entries}
        )
    )
    return path


def test_perf_table_for_another_device_is_ignored():
    _write_table("GPU A", OP, [{"bucket": "any", "spec": "a/x", "us": 250.0}])
    table_a = perf_tables.load_perf_table("GPU A")
    assert table_a(OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) == pytest.approx(0.25)
    assert table_a(OP, "any", "a/x", "GPU B", "fp16", PAGED_TAGS) is None
    assert perf_tables.load_perf_table("GPU B")(
        OP, "any", "a/x", "GPU B", "fp16", PAGED_TAGS) is None
    # Same file name (slug) but a different recorded device name: not used, and said so.
    _write_table("GPU_A", OP, [{"bucket": "any", "spec": "a/x", "us": 1.0}], file_device="GPU A")
    with pytest.warns(UserWarning, match="measured on 'GPU_A', not 'GPU A'"):
        assert perf_tables.load_perf_table("GPU A")(
            OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) is None


def test_a_perf_table_ranks_only_the_dtype_it_was_measured_at():
    """A row's rank can change with the dtype (cuda/cluster_decode leads Triton at fp16 and
    trails it at fp8), so fp16 numbers answer fp16 problems only; the entry's own dtype wins
    over the table's, and a table without either is read at the dtype tune measures the op at
    (fp16 for decode)."""
    _write_table("GPU A", OP, [{"bucket": "any", "spec": "a/x", "us": 250.0},
                               {"bucket": "any", "spec": "a/y", "us": 100.0, "dtype": "fp8"}])
    provider = perf_tables.load_perf_table("GPU A")
    assert provider(OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) == pytest.approx(0.25)
    assert provider(OP, "any", "a/x", "GPU A", "fp8", PAGED_TAGS) is None
    assert provider(OP, "any", "a/y", "GPU A", "fp8", PAGED_TAGS) == pytest.approx(0.1)
    assert provider(OP, "any", "a/y", "GPU A", "fp16", PAGED_TAGS) is None
    _write_table("GPU A", OP, [{"bucket": "any", "spec": "a/x", "us": 1.0, "dtype": "fp4"}])
    with pytest.warns(UserWarning, match="dtype 'fp4'; accepted"):
        assert perf_tables.load_perf_table("GPU A")(
            OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) is None


def test_measured_rows_rank_the_problems_of_their_dtype_only(checks):
    """Through dispatch: the measured row wins an fp16 problem; an fp8 problem of the same
    bucket falls back to priority."""
    rows = [fake("a/measured", checks, dtypes=("fp16", "fp8"), priority=1),
            fake("a/favoured", checks, dtypes=("fp16", "fp8"), priority=9)]
    name = core.device_name("cpu")
    _write_table(name, OP, [{"bucket": bucket(OP, SHAPE), "spec": "a/measured", "us": 5.0,
                             "dtype": "fp16"}])
    core.reload_perf_tables()
    reset_perf_provider()
    assert pick(*rows, dtype="fp16").spec.name == "a/measured"
    assert pick(*rows, dtype="fp8").spec.name == "a/favoured"


@pytest.mark.parametrize(
    ("content", "why"),
    [
        ("[1, 2]", "a JSON object was expected, got list"),
        ('{"schema": 1, "device_name": "GPU A", "entries": null}', "'entries' must be a list"),
        ('{"schema": 1, "device_name": "GPU A", "entries": [{"spec": "a/x", "us": 2.0}]}',
         r"entries\[0\] must be an object with string 'bucket'"),
        ('{"schema": 1, "device_name": "GPU A", "entries": ["a/x"]}', r"entries\[0\]"),
        (('{"schema": 1, "device_name": "GPU A", "entries": '
          '[{"bucket": "any", "spec": "a/x", "us": true}]}'), r"entries\[0\]"),
        ('{"schema": 99, "device_name": "GPU A", "entries": []}', "schema 99"),
        ('{"schema": 1, "device_name": "GPU A", "op": "kv_write", "entries": []}',
         "holds op 'kv_write'"),
        ('{"schema": 1, "device_', "Unterminated string"),
    ],
)
def test_a_malformed_perf_table_is_skipped_with_a_warning_not_a_crash(content, why):
    """One bad file must not break dispatch of every op; the warning names the file, the
    problem and the command that rewrites it. The other ops' tables still load."""
    _write_table("GPU A", "kv_write", [{"bucket": "decode", "spec": "w/x", "us": 5.0}])
    bad = perf_tables.table_path("GPU A", OP)
    bad.write_text(content)
    with pytest.warns(UserWarning, match=why) as record:
        provider = perf_tables.load_perf_table("GPU A")
    assert str(bad) in str(record[0].message) and f"kvbench tune {OP}" in str(record[0].message)
    assert provider(OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) is None
    assert (provider("kv_write", "decode", "w/x", "GPU A", "fp16", PAGED_TAGS)
            == pytest.approx(0.005))


def test_a_perf_table_from_another_torch_or_triton_is_used_with_a_warning():
    """Rankings from older software are likely still right, but the user is told they are
    not this software's numbers, with the versions and the command that re-measures."""
    import torch

    from kvbench.core.versions import triton_version

    path = _write_table("GPU A", OP, [{"bucket": "any", "spec": "a/x", "us": 250.0}])
    data = json.loads(path.read_text())
    data["metadata"] = {"torch": "1.0.0", "triton": triton_version()}
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning,
                      match=rf"torch 1\.0\.0 \(now {re.escape(torch.__version__)}\)") as rec:
        provider = perf_tables.load_perf_table("GPU A")
    assert "triton" not in str(rec[0].message) and f"kvbench tune {OP}" in str(rec[0].message)
    assert provider(OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) == pytest.approx(0.25)
    data["metadata"] = {"torch": torch.__version__, "triton": triton_version()}
    path.write_text(json.dumps(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same versions: silent
        table_a = perf_tables.load_perf_table("GPU A")
        assert table_a(OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) == pytest.approx(0.25)


def test_default_provider_reads_stored_table(checks):
    name = core.device_name("cpu")
    _write_table(
        name,
        OP,
        [
            {"bucket": bucket(OP, SHAPE), "spec": "a/low", "us": 3.0},
            {"bucket": bucket(OP, SHAPE), "spec": "a/high", "us": 9.0},
        ],
    )
    _write_table("Some Other GPU", OP, [{"bucket": bucket(OP, SHAPE), "spec": "a/high", "us": 1.0}])
    reset_perf_provider()
    sel = pick(fake("a/high", checks, priority=9), fake("a/low", checks))
    assert sel.spec.name == "a/low"
    assert "3.00 µs" in sel.explain() and "9.00 µs" in sel.explain()


def test_tune_kv_alloc_writes_table_and_installs_it(tmp_path):
    cases = [
        tune.TuneCase("kv_alloc", "n=1", "int64", {"n": 1, "num_rows": 512}),
        tune.TuneCase("kv_alloc", "n=64", "int64", {"n": 64, "num_rows": 512}),
    ]
    table = tune.tune("kv_alloc", device="cpu", cases=cases)
    path = perf_tables.table_path(table["device_name"], "kv_alloc")
    stored = json.loads(path.read_text())
    assert stored["device_name"] == core.device_name("cpu") and stored["op"] == "kv_alloc"
    assert stored["kvbench_commit"] and stored["date"] and stored["metadata"]["command"]
    measured_entries = [e for e in stored["entries"] if e["bucket"] != "any"]
    got = {(e["bucket"], e["spec"]) for e in measured_entries}
    assert got == {(b, s) for b in ("n=1", "n=2-64") for s in spec_names("kv_alloc")}
    assert all(e["us"] > 0 and e["timer"] == "bench_host" for e in measured_entries)
    worst = {e["spec"]: e["us"] for e in stored["entries"] if e["bucket"] == "any"}
    for spec in spec_names("kv_alloc"):
        assert worst[spec] == max(e["us"] for e in measured_entries if e["spec"] == spec)
    # A manager choosing its backend (no shape: bucket "any") now ranks on the table too.
    manager_sel = dispatch("kv_alloc", dtype="int64", device="cpu")
    assert manager_sel.spec.name == min(worst, key=worst.get)
    assert not math.isinf(manager_sel.ranked[0].perf_us)
    sel = dispatch("kv_alloc", dtype="int64", shape={"n": 1}, device="cpu")
    assert not math.isinf(sel.ranked[0].perf_us)
    measured = {e["spec"]: e["us"] for e in stored["entries"] if e["bucket"] == "n=1"}
    assert sel.spec.name == min(measured, key=measured.get)
    # The record of the last case checked is the one kept.
    assert golden.lookup("kv_alloc", "host/freelist", "int64", "cpu").detail == "tune n=64"


def test_tune_rejects_foreign_cases():
    with pytest.raises(ValueError, match="TuneCase entries for kv_alloc"):
        tune.tune("kv_alloc", device="cpu", cases=[tune.CPU_CASES["kv_write"][0]])


# ---- per-dtype layout (cuda/cluster_decode: 16-bit from token-major V, fp8 from dim-major) ----


def test_cluster_row_layout_depends_on_the_dtype():
    """The CUDA decode reads 16-bit caches from token-major V pages and fp8 from dim-major
    ones: a problem in the other layout excludes the row by its tag (visible in explain())
    instead of reaching the kernel and failing there."""
    spec = next(s for s in registry.REGISTRY.specs("paged_decode")
                if s.name == "cuda/cluster_decode")
    token_major = frozenset({"kv:paged", "kv:strided"})
    dim_major = token_major | {"kv:v-dim-major"}
    cpu = torch.device("cpu")
    assert core._exclusion(spec, "fp16", dim_major, None, cpu) == (
        "layout tag forbidden: kv:v-dim-major")
    assert core._exclusion(spec, "bf16", dim_major, None, cpu) == (
        "layout tag forbidden: kv:v-dim-major")
    assert core._exclusion(spec, "fp8", token_major, None, cpu) == (
        "layout tag missing: kv:v-dim-major")
    # Past the layout filter, this CPU machine's own reason.
    for dtype, tags in (("fp16", token_major), ("fp8", dim_major)):
        assert core._exclusion(spec, dtype, tags, None, cpu).startswith("unavailable: ")


def test_layout_by_dtype_names_only_served_dtypes():
    with pytest.raises(ValueError,
                       match=r"layout_by_dtype names dtypes it does not serve: \['fp8'\]"):
        KernelSpec(name="x/y", op="paged_decode", dtypes=("fp16",), target=lambda: None,
                   golden_check=lambda *a: 0.0,
                   layout_by_dtype={"fp8": LayoutRequirement(required=("kv:paged",))})


# ---- perf tables per dtype and layout (kvbench tune --dtype / --storage) ------------------------


def test_a_perf_table_entry_answers_its_layout_tags_only():
    """fp8 decode runs different rows at different speeds from token-major and dim-major V
    pages, so an entry measured with tags answers problems with exactly those tags; an entry
    without tags (a table written before tags were recorded) answers any, and the exact one
    wins where both exist."""
    dim_major = ["kv:fp8-scaled", "kv:paged", "kv:v-dim-major"]
    _write_table("GPU A", OP, [
        {"bucket": "any", "spec": "a/x", "us": 300.0, "dtype": "fp8", "tags": dim_major},
        {"bucket": "any", "spec": "a/x", "us": 500.0, "dtype": "fp8"},
        {"bucket": "any", "spec": "a/y", "us": 200.0, "dtype": "fp8", "tags": dim_major},
    ])
    provider = perf_tables.load_perf_table("GPU A")
    token_major = frozenset({"kv:fp8-scaled", "kv:paged"})
    assert provider(OP, "any", "a/x", "GPU A", "fp8", frozenset(dim_major)) == pytest.approx(0.3)
    assert provider(OP, "any", "a/x", "GPU A", "fp8", token_major) == pytest.approx(0.5)
    assert provider(OP, "any", "a/y", "GPU A", "fp8", frozenset(dim_major)) == pytest.approx(0.2)
    assert provider(OP, "any", "a/y", "GPU A", "fp8", token_major) is None
    _write_table("GPU A", OP, [{"bucket": "any", "spec": "a/x", "us": 1.0, "tags": "kv:paged"}])
    with pytest.warns(UserWarning, match="tags 'kv:paged'; a list of strings"):
        assert perf_tables.load_perf_table("GPU A")(
            OP, "any", "a/x", "GPU A", "fp16", PAGED_TAGS) is None


def test_tune_at_another_dtype_keeps_the_other_dtypes_entries():
    """One file per (device, op) holds every tuned dtype: a run replaces the entries of its
    own (dtype, tags), and the tagless ones of its dtype, and keeps the rest."""
    name = core.device_name("cpu")
    path = perf_tables.table_path(name, "kv_write")
    _write_table(name, "kv_write", [{"bucket": "decode", "spec": "torch/index_copy", "us": 9.0,
                                     "dtype": "fp16"},
                                    {"bucket": "decode", "spec": "torch/index_copy", "us": 7.0,
                                     "dtype": "fp8", "tags": ["kv:fp8-scaled", "kv:paged"]}])
    cases = tune.default_cases("kv_write", "cpu", dtype="bf16")[:1]
    tune.tune("kv_write", device="cpu", cases=cases)
    first = json.loads(path.read_text())["entries"]
    by_dtype = {d: [e for e in first if e["dtype"] == d] for d in ("fp16", "bf16", "fp8")}
    assert by_dtype["fp16"] == [{"bucket": "decode", "spec": "torch/index_copy", "us": 9.0,
                                 "dtype": "fp16"}]  # kept as it was, its dtype explicit
    assert [e["us"] for e in by_dtype["fp8"]] == [7.0]
    inputs, release = tune._inputs(cases[0], torch.device("cpu"))
    write_tags = sorted(inputs.problem.tags)  # the problem's layout tags, as tune records them
    release()
    assert by_dtype["bf16"] and all(e["tags"] == write_tags for e in by_dtype["bf16"])
    tune.tune("kv_write", device="cpu", cases=cases)  # bf16 again: replaces bf16 only
    second = json.loads(path.read_text())["entries"]
    assert len(second) == len(first)
    tune.tune("kv_write", device="cpu", cases=tune.default_cases("kv_write", "cpu")[:1])
    third = json.loads(path.read_text())["entries"]
    fp16 = [e for e in third if e["dtype"] == "fp16"]
    assert fp16 and all(e["tags"] == write_tags for e in fp16)  # the tagless one replaced
    assert {e["dtype"] for e in third} == {"fp16", "bf16", "fp8"}
    provider = perf_tables.load_perf_table(name)
    bucket_name = fp16[0]["bucket"]
    for dtype in ("fp16", "bf16"):
        assert provider("kv_write", bucket_name, "triton/scatter", name, dtype,
                        frozenset(write_tags))
    assert "bf16" in tune.format_table(json.loads(path.read_text()))


def test_a_tune_of_another_storage_keeps_the_tagless_engine_entries():
    """A tagless entry stands for the engine's storage; `tune --storage split` (an ablation
    storage, its own tags) dropped it, leaving the engine's problems without perf data."""
    name = core.device_name("cpu")
    path = perf_tables.table_path(name, "kv_write")
    tagless = {"bucket": "decode", "spec": "torch/index_copy", "us": 9.0, "dtype": "fp16"}
    _write_table(name, "kv_write", [tagless])
    split = tune.default_cases("kv_write", "cpu", storage="split")[:1]
    assert tune.layout_tags("kv_write", "fp16", "split") != tune.layout_tags(
        "kv_write", "fp16", tune.ENGINE_STORAGE)
    tune.tune("kv_write", device="cpu", cases=split)
    entries = json.loads(path.read_text())["entries"]
    assert [e for e in entries if "tags" not in e] == [tagless]
    provider = perf_tables.load_perf_table(name)
    engine = tune.layout_tags("kv_write", "fp16", tune.ENGINE_STORAGE)
    assert provider("kv_write", "decode", "torch/index_copy", name, "fp16", engine) == 0.009


def test_entries_carried_over_by_a_retune_keep_what_they_were_measured_under():
    """The table's header describes its newest run only: a bf16 tune rewrote it (commit,
    torch, command) and so relabelled the fp16 entries measured under an older torch, and
    the stale-version warning went quiet. Each entry now carries its own provenance, an old
    table's entries inherit its header's, and the warning reads them."""
    name = core.device_name("cpu")
    path = perf_tables.table_path(name, "kv_write")
    tune.tune("kv_write", device="cpu", cases=tune.default_cases("kv_write", "cpu")[:1])
    data = json.loads(path.read_text())
    for entry in data["entries"]:
        entry.pop("measured_under")  # a table written before entries carried provenance
    data["metadata"]["torch"], data["kvbench_commit"] = "2.9.0", "0ldc0mm1t"
    data["metadata"]["commit"] = "0ldc0mm1t"
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match=r"measured under torch 2\.9\.0"):
        perf_tables.load_perf_table(name)
    with pytest.warns(UserWarning, match=r"measured under torch 2\.9\.0"):  # auto's picks
        tune.tune("kv_write", device="cpu", cases=tune.default_cases("kv_write", "cpu",
                                                                       dtype="bf16")[:1])
    table = json.loads(path.read_text())
    assert table["metadata"]["command"] == "kvbench tune kv_write --dtype bf16"
    by_dtype = {e["dtype"]: e["measured_under"] for e in table["entries"]}
    assert by_dtype["fp16"]["torch"] == "2.9.0" and by_dtype["fp16"]["commit"] == "0ldc0mm1t"
    assert by_dtype["bf16"]["torch"] == str(torch.__version__)
    with pytest.warns(UserWarning, match=r"measured under torch 2\.9\.0"):
        perf_tables.load_perf_table(name)


def _corrupt_entry_table(name: str) -> tuple[Path, list[dict]]:
    """A kv_write table with an fp16 and an fp8 entry (kept by a bf16 tune) and one entry
    without its 'us' (unreadable)."""
    good = [{"bucket": "decode", "spec": "torch/index_copy", "us": 9.0, "dtype": "fp16"},
            {"bucket": "decode", "spec": "torch/index_copy", "us": 7.0, "dtype": "fp8",
             "tags": ["kv:fp8-scaled", "kv:paged"]}]
    path = _write_table(name, "kv_write", [*good, {"bucket": "decode", "spec": "x/broken"}])
    return path, good


def test_tune_after_a_corrupt_entry_keeps_the_other_entries_and_moves_the_file_aside():
    """The reported loss: one unreadable entry made `kvbench tune OP --dtype D` rewrite the
    file with dtype D only. Now the file is moved aside whole (nothing in it is lost), the
    warning names both paths, and the valid entries of other dtypes stay in the table."""
    name = core.device_name("cpu")
    path, good = _corrupt_entry_table(name)
    original = path.read_text()
    cases = tune.default_cases("kv_write", "cpu", dtype="bf16")[:1]
    with pytest.warns(UserWarning, match=r"entries\[2\]") as record:
        tune.tune("kv_write", device="cpu", cases=cases)
    (aside,) = path.parent.glob(f"{path.name}.corrupt-*")
    assert aside.read_text() == original
    message = "\n".join(str(w.message) for w in record)
    assert str(path) in message and str(aside) in message
    entries = json.loads(path.read_text())["entries"]
    assert [e for e in entries if e["dtype"] in ("fp16", "fp8")] == good
    assert {e["dtype"] for e in entries} == {"fp16", "bf16", "fp8"}
    assert not [e for e in entries if e["spec"] == "x/broken"]


@pytest.mark.parametrize("content", ['{"schema": 1, "device_', "[1, 2]",
                                     '{"schema": 99, "device_name": "x", "entries": []}'])
def test_tune_over_an_unreadable_table_moves_it_aside_before_measuring(content, monkeypatch):
    """A file tune cannot read at all is renamed <name>.corrupt-<time> (bytes unchanged)
    before any measurement, with a warning naming both paths; the new table starts empty."""
    name = core.device_name("cpu")
    path = perf_tables.table_path(name, "kv_alloc")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)

    def no_measuring(*args, **kwargs):
        assert not path.exists(), "moved aside before the first measurement"
        raise RuntimeError("stop here")

    monkeypatch.setattr(tune, "_inputs", no_measuring)
    with pytest.warns(UserWarning, match="moved it to") as record, \
            pytest.raises(RuntimeError, match="stop here"):
        tune.tune("kv_alloc", device="cpu")
    (aside,) = path.parent.glob(f"{path.name}.corrupt-*")
    assert aside.read_text() == content
    assert str(path) in str(record[0].message) and str(aside) in str(record[0].message)


def test_tune_refuses_to_measure_when_a_corrupt_table_cannot_be_moved_aside(monkeypatch):
    """Rather than overwrite what it could not keep, tune stops before measuring."""
    name = core.device_name("cpu")
    path = perf_tables.table_path(name, "kv_alloc")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{broken")

    def refuse(self, target):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "rename", refuse)
    monkeypatch.setattr(tune, "_inputs", lambda *a: pytest.fail("measured"))
    with pytest.raises(RuntimeError, match="could not be moved aside"):
        tune.tune("kv_alloc", device="cpu")
    assert path.read_text() == "{broken"


@pytest.mark.parametrize(("op", "kw", "match"), [
    ("kv_alloc", {"dtype": "fp16"}, "kv_alloc is tuned at dtype int64; got 'fp16'"),
    ("paged_decode", {"dtype": "fp32"}, "tuned at dtype fp16, bf16, fp8; got 'fp32'"),
    ("kv_gather_fp8", {"storage": "split"}, "--storage applies to paged_decode, kv_write"),
    ("paged_decode", {"storage": "paged"}, "storage 'paged' is not accepted; accepted: "),
    # the reported loss: head_major's calls carry combined's tags, so its entries replaced
    # combined's and auto ranked the engine's layout by an ablation layout's timings
    ("paged_decode", {"storage": "head_major"},
     "head_major: paged_decode calls on it carry the layout tags of the engine's combined"),
    ("kv_write", {"storage": "v_dim_major"}, "so dispatch cannot tell them apart"),
])
def test_tune_names_a_dtype_or_storage_it_cannot_measure(op, kw, match, capsys):
    with pytest.raises(ValueError, match=match):
        tune.default_cases(op, "cpu", **kw)
    argv = [op, "--device", "cpu", *[a for k, v in kw.items() for a in (f"--{k}", v)]]
    with pytest.raises(SystemExit) as exc:
        tune.main(argv)
    assert exc.value.code == 2 and match.split(";")[0] in capsys.readouterr().err


def test_tune_accepts_the_storages_dispatch_tells_apart():
    for op, storage in (("paged_decode", "split"), ("paged_decode", "v_dim_major"),
                        ("kv_write", "split"), ("paged_decode", "combined")):
        assert tune.default_cases(op, "cpu", storage=storage)


def test_tune_cases_at_fp8_dim_major_build_that_layout():
    """--dtype fp8 --storage v_dim_major: the decode cases' problems carry the dim-major tag,
    so their entries answer dim-major problems."""
    case = tune.default_cases("paged_decode", "cpu", dtype="fp8", storage="v_dim_major")[0]
    inputs, release = tune._inputs(case, torch.device("cpu"))
    try:
        assert inputs.problem.dtype == "fp8"
        assert {"kv:paged", "kv:fp8-scaled", "kv:v-dim-major"} <= inputs.problem.tags
    finally:
        release()


def _tune_with_torch_write(monkeypatch, broken) -> dict:
    """`kvbench tune kv_write` at n = 96 with the torch row replaced by broken(real, *args)."""
    from kvbench.kernels import kv_write as kernels

    real = kernels.kv_write_torch
    monkeypatch.setattr(kernels, "kv_write_torch", lambda *a, **kw: broken(real, *a, **kw))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cases = tune.default_cases("kv_write", "cpu")[1:]  # n = 96
    with pytest.warns(UserWarning, match="gets no entry"):
        return tune.tune("kv_write", device="cpu", cases=cases)


def test_a_row_that_fails_its_gate_gets_no_entry_and_the_tune_goes_on(monkeypatch):
    """A verified row whose full-size gate fails (here: its output scaled by 1.005) is skipped
    with the reason, recorded unverified, and the other rows of the case are still measured."""

    def scaled(real, k, v, k_cache, v_cache, *args, **kwargs):
        real(k, v, k_cache, v_cache, *args, **kwargs)
        if k.shape[0] >= 64:  # wrong at the tuned size only: the tiny golden check still passes
            k_cache.mul_(1.005)

    table = _tune_with_torch_write(monkeypatch, scaled)
    assert [s["spec"] for s in table["skipped"]] == ["torch/index_copy"]
    assert "VerificationError" in table["skipped"][0]["reason"]
    specs = {e["spec"] for e in table["entries"] if e["bucket"] != "any"}
    assert specs == {"triton/scatter"}


def test_a_row_that_raises_gets_no_entry_and_the_tune_goes_on(monkeypatch):
    """A row raising at the tuned size (Triton out of resources, CUDA out of memory) ended
    the whole tune with a traceback, and the cases measured before it were never written."""

    def raising(real, k, v, *args, **kwargs):
        if k.shape[0] >= 64:  # the tiny golden check still passes
            raise RuntimeError("out of resources at this shape")
        return real(k, v, *args, **kwargs)

    table = _tune_with_torch_write(monkeypatch, raising)
    assert [s["spec"] for s in table["skipped"]] == ["torch/index_copy"]
    assert table["skipped"][0]["reason"] == "RuntimeError: out of resources at this shape"
    assert {e["spec"] for e in table["entries"] if e["bucket"] != "any"} == {"triton/scatter"}
    path = perf_tables.table_path(table["device_name"], "kv_write")
    assert json.loads(path.read_text())["entries"] == table["entries"]


def test_cluster_row_gate_refuses_fp8_pages_shorter_than_16():
    """The CUDA decode copies 16 tokens of an fp8 d row at once: its gate (and its launcher,
    through the same rule) refuses fp8 pages of 8, so a tuned table that ranks it first at fp8
    cannot route such a pool to a launch that raises; 16-bit pages of 8 stay served."""
    spec = next(s for s in registry.REGISTRY.specs("paged_decode")
                if s.name == "cuda/cluster_decode")
    llama = {"batch": 8, "max_context": 1024, "q_heads": 32, "kv_heads": 8, "head_dim": 128}
    assert "page_size >= 16 for fp8" in spec.shape_gate({**llama, "dtype": "fp8", "page_size": 8})
    assert spec.shape_gate({**llama, "dtype": "fp8", "page_size": 16}) is None
    assert spec.shape_gate({**llama, "dtype": "fp16", "page_size": 8}) is None
