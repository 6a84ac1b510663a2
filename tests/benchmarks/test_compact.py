"""Stored result files rewritten compactly keep every value (benchmarks/runner/compact.py)."""

from __future__ import annotations

import json
import random
import shutil

import pytest
from asv.results import Results
from asv.util import write_json

from benchmarks.runner import compact as _compact
from benchmarks.runner.compact import STORED_SAMPLES

PARAMS = [["'a'", "'b'"], ["1", "64"]]
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples", "profile"]


def _row(rng: random.Random, sizes: list[int]) -> list:
    samples = [sorted(rng.lognormvariate(-11, 0.05) for _ in range(n)) if n else None
               for n in sizes]
    med = [s[len(s) // 2] if s else None for s in samples]
    return [med, PARAMS, "1", 1795973306000, 12.5, [m * 0.99 if m else None for m in med],
            [m * 1.01 if m else None for m in med], [m * 0.98 if m else None for m in med],
            [m * 1.02 if m else None for m in med], [1] * 4, [len(s or ()) for s in samples],
            samples]


def _write(folder, name: str, rows: dict) -> None:
    data = {"commit_hash": "ab" * 20, "env_name": "kvbench-offline-py3.12",
            "date": 1795973306000, "params": {"machine": "box"}, "python": "3.12",
            "requirements": {}, "env_vars": {}, "result_columns": COLUMNS, "results": rows,
            "durations": {"<build>": 4.6}}
    write_json(folder / name, data, api_version=2, compact=True)


@pytest.fixture
def stored(tmp_path):
    rng = random.Random(3)
    folder = tmp_path / "box"
    folder.mkdir()
    _write(folder, "abababab-kvbench-offline-py3.12.json", {
        "m.C.track_us": _row(rng, [1000, 400, 31, 0]),
        "m.C.track_gbps": [[1.0, 2.0, None, 3.0], PARAMS, "1", 0, 1.0],
    })
    (folder / "machine.json").write_text('{"machine": "box", "version": 1}')
    return folder


def _values(path):
    """Everything of a result file but the samples, as asv reads it."""
    res = Results.load(str(path))
    out = {}
    for name in res.get_result_keys({"m.C.track_us": {}, "m.C.track_gbps": {}}):
        params = res.get_result_params(name)
        out[name] = (res.get_result_value(name, params), res.get_result_stats(name, params),
                     res.benchmark_version[name])
    return out


def test_samples_are_summarised_and_every_value_kept(stored):
    (path,) = _compact.result_files(stored)
    before = json.loads(path.read_text())
    values = _values(path)
    assert _compact.compact_file(path) == 2  # the 1000- and 400-sample cases
    after = json.loads(path.read_text())
    assert _values(path) == values
    at = COLUMNS.index("samples")
    old, new = before["results"]["m.C.track_us"][at], after["results"]["m.C.track_us"][at]
    assert [len(s) if s else s for s in new] == [STORED_SAMPLES, STORED_SAMPLES, 31, None]
    assert new[2] == old[2] and new[0][STORED_SAMPLES // 2] == pytest.approx(
        sorted(old[0])[500], rel=1e-3)
    for key in before:  # nothing else in the file changed
        if key != "results":
            assert after[key] == before[key], key
    assert after["results"]["m.C.track_gbps"] == before["results"]["m.C.track_gbps"]
    assert _compact.compact_file(path) == 0  # a compact file is left as it is


def test_a_whole_folder_is_rewritten_and_reported(stored, capsys):
    copy = stored.parent / "copy"
    shutil.copytree(stored, copy)
    assert _compact.main([str(stored)]) == 0
    assert "1 files, 2 cases summarised" in capsys.readouterr().out
    assert (stored / "machine.json").read_bytes() == (copy / "machine.json").read_bytes()
    assert stored.joinpath("abababab-kvbench-offline-py3.12.json").stat().st_size < \
        copy.joinpath("abababab-kvbench-offline-py3.12.json").stat().st_size / 10
    with pytest.raises(SystemExit) as exc:
        _compact.main([str(stored / "nope")])
    assert exc.value.code == 2 and "is not a directory" in capsys.readouterr().err
