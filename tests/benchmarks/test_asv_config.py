"""The asv side, short of a full asv run: config, offline env plugin, machine record, suite.

test_asv_e2e.py drives the real asv over a git history; these tests pin the pieces it
relies on, quickly, so a broken piece fails here with a precise message first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the asv suite package `benchmarks` lives at the repo root

from benchmarks import _common, dispatch_overhead, kv_alloc, kv_gather_fp8, kv_write
from benchmarks import paged_decode as bench_decode
from kvbench.measure import pipeline

SUITE = {
    "paged_decode": bench_decode.SELECTORS,
    "kv_write": kv_write.SELECTORS,
    "kv_gather_fp8": kv_gather_fp8.SELECTORS,
    "kv_alloc": kv_alloc.SELECTORS,
}
CLASSES = [bench_decode.PagedDecode, bench_decode.PagedDecodeAblation,
           bench_decode.PagedDecodeGeometry, kv_write.KVWrite, kv_gather_fp8.KVGatherFp8,
           kv_alloc.KVAlloc, dispatch_overhead.DispatchOverhead]


def _conf():
    from asv.config import Config

    return Config.load(str(ROOT / "asv.conf.json"))


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "PYTHONPATH")}
    env.update(extra)
    return env


# ---- asv.conf.json ---------------------------------------------------------------------------


def test_conf_uses_the_offline_plugin_and_offline_build():
    from kvbench.history.asv.asv_env import TOOL_NAME

    conf = _conf()
    # leading dot: imported from the repo root
    assert conf.plugins == [".kvbench.history.asv.asv_env"]
    assert conf.environment_type == TOOL_NAME
    assert conf.repo == "." and conf.branches == ["main"]
    assert (conf.benchmark_dir, conf.results_dir, conf.html_dir) == ("benchmarks", "results",
                                                                     "html")
    assert conf.env_dir == ".asv/env"
    assert conf.launch_method == "forkserver"
    build = " ".join(conf.build_command)
    for flag in ("--wheel", "--no-isolation", "--skip-dependency-check", "{build_cache_dir}"):
        assert flag in build, f"build_command lacks {flag}"
    # empty: the plugin installs the built wheel in asv's process (wheel_install.py)
    assert conf.install_command == [] and conf.uninstall_command == []
    # pythons left out: asv uses the interpreter that runs it.
    assert conf.pythons == [f"{sys.version_info[0]}.{sys.version_info[1]}"]


def test_plugin_registers_through_asv_plugin_manager():
    """asv imports ".kvbench.history.asv.asv_env" from the config's folder and finds the env
    type."""
    code = (
        "from asv.config import Config; from asv.plugin_manager import plugin_manager;"
        "from asv import environment as e; c = Config.load('asv.conf.json');"
        "[plugin_manager.import_plugin(p) for p in c.plugins];"
        "cls = e.get_environment_class_by_name(c.environment_type);"
        "print(cls.__module__, cls.__name__)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_clean_env(),
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["kvbench.history.asv.asv_env", "OfflineVirtualenv"]


def test_asv_check_passes():
    proc = subprocess.run([sys.executable, "-m", "asv", "check", "--python=same"], cwd=ROOT,
                          check=False,
                          env=_clean_env(), capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "No problems found" in out, out


# ---- the offline environment ------------------------------------------------------------------


def test_offline_env_reaches_parent_packages_and_keeps_its_own_first(tmp_path, monkeypatch):
    """A real env built with PIP_NO_INDEX=1: torch/asv_runner from the parent, own site first,
    and the parent's kvbench (editable or not) invisible until a wheel is installed."""
    from kvbench.history.asv.asv_env import PTH_NAME, OfflineVirtualenv

    monkeypatch.chdir(ROOT)  # asv reads [build-system].requires from ./pyproject.toml
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    conf = _conf()
    conf.env_dir = str(tmp_path / "env")
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    env = OfflineVirtualenv(conf, python, {}, {})
    env.create()

    probe = (
        "import json, sys, sysconfig, importlib.util as u, torch, asv_runner, pympler;"
        "own = sysconfig.get_paths()['purelib'];"
        "print(json.dumps({'own': own, 'path': sys.path, 'torch': torch.__file__,"
        " 'kvbench': u.find_spec('kvbench') is not None}))"
    )
    out = subprocess.run([str(Path(env._path) / "bin" / "python"), "-c", probe],
                         cwd=tmp_path, env=_clean_env(), capture_output=True, text=True,
                         check=True).stdout
    info = json.loads(out)
    pth = (Path(info["own"]) / PTH_NAME).read_text().split()
    assert pth, "the .pth lists no parent directory"
    own_at = info["path"].index(info["own"])
    assert all(info["path"].index(p) > own_at for p in pth), "parent dirs must follow the env's"
    assert not info["torch"].startswith(env._path), "torch must come from the parent"
    assert info["kvbench"] is False, "the parent's kvbench leaked into the env"


# ---- machine record ---------------------------------------------------------------------------


def test_default_machine_names():
    from kvbench.history.asv.machine import default_name

    assert default_name("NVIDIA H200", "x") == "h200"
    assert default_name("NVIDIA H100 80GB HBM3", "x") == "h100-80gb-hbm3"
    assert default_name(None, "AMD EPYC 7B13 64-Core Processor") == (
        "cpu-amd-epyc-7b13-64-core-processor")
    assert default_name(None, "") == "cpu-unknown"


def test_write_machine_record_is_what_asv_reads(tmp_path):
    from asv.machine import MachineCollection

    from kvbench.history.asv.machine import EXTRA_KEYS, write_machine_record

    path = tmp_path / ".asv-machine.json"
    MachineCollection.save("other", {"machine": "other", "cpu": "z"}, _path=str(path))
    record = write_machine_record("ci-box", path)
    stored = MachineCollection.load("ci-box", _path=str(path))
    assert stored == record
    assert record["machine"] == "ci-box"
    for key in ("arch", "cpu", "machine", "num_cpu", "os", "ram", *EXTRA_KEYS):
        assert isinstance(record[key], str) and record[key], key
    assert MachineCollection.load("other", _path=str(path))["cpu"] == "z"  # others kept
    import torch

    assert record["torch"] == torch.__version__
    if not torch.cuda.is_available():
        assert record["gpu"] == "n/a" and record["machine"] == "ci-box"


def test_machine_cli_defaults_to_home(tmp_path, monkeypatch):
    from kvbench.history.asv.machine_cmd import main

    monkeypatch.setenv("HOME", str(tmp_path))
    assert main([]) == 0
    data = json.loads((tmp_path / ".asv-machine.json").read_text())
    names = [k for k in data if k != "version"]
    assert len(names) == 1 and data[names[0]]["machine"] == names[0]


def test_machine_name_is_validated():
    from kvbench.history.asv.machine import write_machine_record

    with pytest.raises(ValueError, match="name must be"):
        write_machine_record("bad/name", "/nonexistent/never-written.json")


# ---- the suite's static shape ------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(SUITE))
def test_suite_selectors_are_the_registry_rows(op):
    """asv needs static params; they must stay the registry's names (plus auto)."""
    from kvbench.dispatch import spec_names

    assert SUITE[op][0] == "auto"
    assert sorted(SUITE[op][1:]) == sorted(spec_names(op))


def test_suite_geometries_are_the_oracle_table():
    """asv needs static params; the geometry axis must stay the oracle's table, in its order
    (its names are series keys: a rename there must be one here too)."""
    from kvbench.ops.decode_geometry import GEOMETRIES

    assert bench_decode.GEOMETRIES == list(GEOMETRIES)
    assert bench_decode.PagedDecodeGeometry.params == [list(GEOMETRIES)]


def test_suite_selector_vars_match_dispatch():
    from kvbench.core.env import SELECTOR_VARS

    assert SELECTOR_VARS == _common.SELECTOR_VARS


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_suite_classes_declare_version_unit_and_own_setup_cache(cls):
    assert cls.version == _common.VERSION
    assert cls.unit == "seconds"
    assert len(cls.params) == len(cls.param_names)
    assert "setup_cache" in vars(cls), "each class names its group's setup_cache"
    assert cls.setup_cache.timeout >= 60
    if hasattr(cls, "track_gbps"):
        assert cls.track_gbps.unit == "GB/s"


def test_setup_cache_groups_cover_every_class_once():
    """asv shares one process per setup_cache function: each class is in exactly one group,
    and its setup_cache is that group's function (else it would measure nothing of its own)."""
    from asv_runner.benchmarks._base import get_setup_cache_key

    members = [(g, cls) for g, entries in _common.GROUPS.items() for _, _, cls in entries]
    assert sorted(cls for _, cls in members) == sorted(c.__name__ for c in CLASSES)
    keys = {}
    for group, name in members:
        cls = next(c for c in CLASSES if c.__name__ == name)
        assert vars(cls)["setup_cache"] is getattr(_common, f"setup_cache_{group}")
        keys.setdefault(group, set()).add(get_setup_cache_key(cls().setup_cache))
    assert all(len(k) == 1 for k in keys.values()), keys  # one cache per group
    assert len({next(iter(k)) for k in keys.values()}) == len(keys)  # distinct per group


def test_measure_group_keeps_the_other_class_when_one_raises(monkeypatch):
    def boom():
        raise RuntimeError("suite bug")

    monkeypatch.setitem(_common.GROUPS, "t", (("kv_alloc", "measure", "A"),
                                             ("dispatch_overhead", "measure", "B")))
    monkeypatch.setattr(kv_alloc, "measure", lambda w: boom())
    monkeypatch.setattr(dispatch_overhead, "measure", lambda w: {("x",): {"skip": "fine"}})
    out = _common.measure_group("t")
    with pytest.raises(RuntimeError, match="suite bug"):
        _common.class_results(out, "A")
    assert _common.class_results(out, "B") == {("x",): {"skip": "fine"}}


def test_entry_turns_skips_and_errors_into_asv_outcomes():
    cache = {("a",): {"skip": "no CUDA"}, ("b",): {"error": "Traceback: boom"},
             ("c",): {"samples_s": [1e-6], "gbps": None, "median_us": 1.0, "selected": "x",
                      "max_abs_diff": 0.0, "timer": "bench/cold", "explain": ""}}
    with pytest.raises(NotImplementedError, match="no CUDA"):
        _common.entry(cache, ("a",))
    with pytest.raises(RuntimeError, match="boom"):
        _common.entry(cache, ("b",))
    with pytest.raises(NotImplementedError, match="not measured"):
        _common.entry(cache, ("zz",))
    suite = kv_alloc.KVAlloc()
    shared = {"KVAlloc": cache}  # what the host group's setup_cache returns
    suite.setup(shared, "c")
    assert suite.track_us(shared, "c") == {"samples": [1e-6], "number": 1}


# ---- the suite measures on this machine -------------------------------------------------------

MEASURES = {
    "paged_decode": bench_decode.measure_decode,
    "paged_decode_ablation": bench_decode.measure_ablation,
    "paged_decode_geometry": bench_decode.measure_geometry,
    "kv_write": kv_write.measure,
    "kv_gather_fp8": kv_gather_fp8.measure,
    "kv_alloc": kv_alloc.measure,
    "dispatch_overhead": dispatch_overhead.measure,
}
#: Skip reasons a CPU machine may give; anything else is a bug.
CPU_SKIPS = (pipeline.CPU_TRITON_SKIP, pipeline.CPU_CUDA_SKIP, "GPU-size case")
#: Skips any machine may give: rows of a cross product left out of the suite on purpose, and
#: rows whose registry row does not read the case's input.
ALWAYS_SKIPS = (_common.TRIMMED, pipeline.UNSERVED)


def _check_results(results: dict, cls, on_cuda: bool) -> int:
    import itertools

    keys = set(itertools.product(*cls.params))
    assert set(results) == keys, "setup_cache must record every param combination"
    pinned = cls.param_names[0] == "selector"
    measured = 0
    for key, found in results.items():
        assert "error" not in found, f"{key} failed:\n{found['error']}"
        if "skip" in found:
            if found["skip"].startswith(ALWAYS_SKIPS):
                continue
            assert not on_cuda, f"{key} skipped on a GPU: {found['skip']}"
            assert any(s in found["skip"] for s in CPU_SKIPS), f"{key}: {found['skip']}"
            continue
        measured += 1
        assert found["samples_s"] and all(s > 0 for s in found["samples_s"])
        if pinned and key[0] != "auto":
            assert found["selected"] == key[0], f"{key} ran {found['selected']}"
    return measured


@pytest.fixture
def fresh_process_state(monkeypatch):
    """What a fresh asv process has: no cached dispatch decisions (another test may have made
    them with TRITON_INTERPRET=1), and torch's thread count restored afterwards."""
    import torch

    from kvbench.dispatch.core import clear_decisions

    threads = torch.get_num_threads()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    clear_decisions()
    yield
    clear_decisions()
    torch.set_num_threads(threads)


_CLASS_OF = {
    "paged_decode": bench_decode.PagedDecode,
    "paged_decode_ablation": bench_decode.PagedDecodeAblation,
    "paged_decode_geometry": bench_decode.PagedDecodeGeometry,
    "kv_write": kv_write.KVWrite,
    "kv_gather_fp8": kv_gather_fp8.KVGatherFp8,
    "kv_alloc": kv_alloc.KVAlloc,
    "dispatch_overhead": dispatch_overhead.DispatchOverhead,
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(MEASURES))
def test_suite_measures_on_cpu(name, fresh_process_state):
    """Each class's setup_cache on this machine: no case errors, skips only for CPU reasons,
    pinned rows run the row they name. (On a CPU the ablation and the geometries have
    nothing to run: their cases are GPU-size.)"""
    import torch

    if torch.cuda.is_available():
        pytest.skip("the GPU variant below covers CUDA machines")
    results = MEASURES[name](_common.worker())
    measured = _check_results(results, _CLASS_OF[name], on_cuda=False)
    if name not in ("paged_decode_ablation", "paged_decode_geometry"):
        assert measured > 0, "a CPU must measure at least the torch/host rows"


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(MEASURES))
def test_suite_measures_everything_on_gpu(name, fresh_process_state):
    """On a GPU: every case of every class is measured (no skip, no error)."""
    results = MEASURES[name](_common.worker())
    _check_results(results, _CLASS_OF[name], on_cuda=True)


@pytest.mark.parametrize(
    ("storage", "dtype", "unserved"),
    [
        ("combined", "fp16", False),
        ("v_dim_major", "fp16", True),  # 16-bit from token-major V only
        ("combined", "fp8", True),  # fp8 from dim-major V only
        ("v_dim_major", "fp8", False),
    ],
)
def test_decode_suite_skips_what_the_registry_row_does_not_read(storage, dtype, unserved):
    """The suite's layout skips come from the registry of the commit under test (its per-dtype
    layout requirement), not from a rule of the suite's own; auto and the Triton rows read
    every pool."""
    from kvbench.fixtures.pool import paged_pool
    from kvbench.ops.paged_decode import decode_inputs

    pool = paged_pool(2, 64, kv_heads=2, head_dim=128, page_size=16, dtype=dtype,
                      storage=storage, min_l2_multiple=0, device="cpu", seed=0)
    inputs = decode_inputs(pool, 4, seed=0)
    why = pipeline.unserved(inputs, "cuda/cluster_decode")
    assert (why is not None) == unserved, why
    if unserved:
        assert why.startswith(pipeline.UNSERVED) and "kv:v-dim-major" in why
    for selector in ("auto", "triton/split_kv", "triton/single_pass", "torch/gather_sdpa"):
        assert pipeline.unserved(inputs, selector) is None
    pool.free()
