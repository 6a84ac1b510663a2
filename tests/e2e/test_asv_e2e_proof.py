"""End to end: planted wrong kernels in a real git history get no number from a real asv run,
with the reason in kvbench's sidecar, while every honest row keeps its number.

The history (tests/test_asv_e2e.py builds it): c0 this checkout, c1 the plants, appended to
the torch rows (the rows a CPU measures; Triton needs CUDA there):

- kv_gather_fp8 torch/gather MEMOIZES: the same output object for the same input tensors;
- paged_decode torch/gather_sdpa is SCALED by 1.005 at fp16 and reads ONE PAGE LESS at bf16
  (fp8 stays honest);
- kv_write torch/index_copy SKIPS WORK after its first call into an fp16 cache (bf16, fp8
  honest).

`asv run` of c1 (the whole suite) must store no value for the planted cases (their `auto`
rows included: auto runs the torch rows on a CPU) and a value for every honest measured case
(decode fp8, write bf16/fp8, the allocator, dispatch overhead); the sidecar must hold the
reason of each planted case and the error figures of each honest kernel case. Marked e2e.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_asv_e2e import MACHINE, make_history

PLANT_GATHER = textwrap.dedent(
    """

    # ---- e2e test: PLANTED memoizing torch row (tests/test_asv_e2e_proof.py) ----
    _plant_gather_torch = gather_fp8_torch
    _plant_memo = {}


    def gather_fp8_torch(kv_cache, page_table_flat, *, extra_rows, out=None):
        key = (kv_cache.data_ptr(), page_table_flat.data_ptr(), extra_rows)
        if key not in _plant_memo:
            _plant_memo[key] = _plant_gather_torch(kv_cache, page_table_flat, extra_rows=extra_rows)
        return _plant_memo[key]
    """
)
PLANT_DECODE = textwrap.dedent(
    """

    # ---- e2e test: PLANTED scaled (fp16) / one page less (bf16) torch row ----
    _plant_decode_torch = paged_decode_gather_sdpa


    def paged_decode_gather_sdpa(q, k_cache, v_cache, block_table, seq_lens, **kwargs):
        if q.dtype == torch.bfloat16:
            page = k_cache.shape[1]
            seq_lens = torch.where(seq_lens > page, seq_lens - page, seq_lens)
        out = _plant_decode_torch(q, k_cache, v_cache, block_table, seq_lens, **kwargs)
        if q.dtype == torch.float16 and k_cache.dtype == torch.float16:
            out = (out.float() * 1.005).to(out.dtype)
        return out
    """
)
PLANT_WRITE = textwrap.dedent(
    """

    # ---- e2e test: PLANTED torch row that skips work after its first call (fp16) ----
    _plant_write_torch = kv_write_torch
    _plant_written = set()


    def kv_write_torch(k, v, k_cache, v_cache, slot_mapping, *, k_scale=None, v_scale=None):
        key = (k_cache.data_ptr(), slot_mapping.data_ptr())
        if k_cache.dtype == torch.float16 and key in _plant_written:
            return None
        _plant_written.add(key)
        return _plant_write_torch(k, v, k_cache, v_cache, slot_mapping, k_scale=k_scale,
                                  v_scale=v_scale)
    """
)

PLANTED = [
    ("kv_gather_fp8.KVGatherFp8.track_us", ("'auto'", "'kv8k'")),
    ("kv_gather_fp8.KVGatherFp8.track_us", ("'torch/gather'", "'kv8k'")),
    ("paged_decode.PagedDecode.track_us", ("'auto'", "'fp16'", "'b4_c1k'")),
    ("paged_decode.PagedDecode.track_us", ("'torch/gather_sdpa'", "'fp16'", "'b4_c1k'")),
    ("paged_decode.PagedDecode.track_us", ("'auto'", "'bf16'", "'b4_c1k'")),
    ("kv_write.KVWrite.track_us", ("'auto'", "'fp16'", "'decode_64'")),
    ("kv_write.KVWrite.track_us", ("'torch/index_copy'", "'fp16'", "'decode_64'")),
]
HONEST = [
    ("paged_decode.PagedDecode.track_us", ("'auto'", "'fp8'", "'b4_c1k'")),
    ("paged_decode.PagedDecode.track_us", ("'torch/gather_sdpa'", "'fp8'", "'b4_c1k'")),
    ("kv_write.KVWrite.track_us", ("'auto'", "'bf16'", "'decode_64'")),
    ("kv_write.KVWrite.track_us", ("'torch/index_copy'", "'fp8'", "'decode_64'")),
]


def plant(repo: Path) -> None:
    for rel, text in (("kvbench/kernels/kv_gather_fp8.py", PLANT_GATHER),
                      ("kvbench/kernels/paged_decode.py", PLANT_DECODE),
                      ("kvbench/kernels/kv_write.py", PLANT_WRITE)):
        with open(repo / rel, "a") as f:
            f.write(text)


def values(result_file: Path) -> dict[tuple[str, tuple[str, ...]], float | None]:
    """(benchmark, params) -> stored value (None: no number) of one asv result file."""
    import itertools

    data = json.loads(result_file.read_text())
    cols = data["result_columns"]
    out = {}
    for bench, row in data["results"].items():
        rec = dict(zip(cols, row))
        combos = list(itertools.product(*rec["params"])) if rec["params"] else [()]
        for combo, value in zip(combos, rec["result"] or [None] * len(combos)):
            out[(bench, tuple(combo))] = value
    return out


@pytest.mark.e2e
def test_planted_wrong_kernels_get_no_number_and_a_recorded_reason(tmp_path):
    hist = make_history(tmp_path, [("c1", plant)])
    hist.env.pop("KVBENCH_ASV_SELECT")  # the whole suite: the plants are in three classes
    c1 = hist.commits["c1"]
    common = ["--machine", MACHINE, "--launch-method", "forkserver"]
    # asv exits 2 when a benchmark failed, which the planted cases must: check the files.
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "run", *common, "--record-samples", "--show-stderr",
         f"{c1}^!"], cwd=hist.repo, env=hist.env, capture_output=True, text=True, timeout=1500,
        check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode in (0, 2), out[-6000:]

    machine_dir = hist.repo / "results" / MACHINE
    (result_file,) = machine_dir.glob(f"{c1[:8]}-*.json")
    stored = values(result_file)
    for key in PLANTED:
        assert key in stored and stored[key] is None, f"planted {key} got a number"
    for key in HONEST:
        assert stored.get(key) is not None, f"honest {key} lost its number:\n{out[-4000:]}"
    # The allocator's rows never touch a planted kernel. (DispatchOverhead's rows of an op
    # whose torch row is planted lose their number: dispatch's golden self-check refuses the
    # planted row, so on a CPU no row is left to dispatch to.)
    host = [v for (b, _), v in stored.items() if b == "kv_alloc.KVAlloc.track_us"]
    assert len(host) == 18 and all(v is not None for v in host), "the allocator keeps its numbers"

    from kvbench.history.verdict.sidecar import read_commit

    side = read_commit(hist.repo / "results", MACHINE, c1)
    assert side is not None, f"no sidecar under {machine_dir}"
    for bench, params in PLANTED:
        cls = bench.split(".")[1]
        record = side.case(cls, tuple(p.strip("'") for p in params))
        assert record["status"] == "failed", record
        assert re.search(r"VerificationError|timed call|systematic", record["traceback"]), record
    for bench, params in HONEST:
        record = side.case(bench.split(".")[1], tuple(p.strip("'") for p in params))
        assert record["status"] == "measured" and record["error"]["n"] > 0, record
        assert record["selected"].startswith("torch/")
        assert record["state"] is not None and side.state_of(
            bench.split(".")[1], tuple(p.strip("'") for p in params))["before"] == "n/a"
    # asv reads the results directory with the sidecars in it without a complaint
    shown = hist.asv("show", "--machine", MACHINE, c1)
    assert "Skipping results" not in shown and "malformed" not in shown
