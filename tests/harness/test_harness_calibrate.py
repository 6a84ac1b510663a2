"""calibrate(): measured ceilings written to and read back from the JSON cache."""

import json
from pathlib import Path

import pytest
import torch

from kvbench.harness import Ceilings, calibrate, load_ceilings
from kvbench.harness.calibrate import cache_dir


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_calibrate_writes_and_load_reads(cache):
    c = calibrate("cpu", size_bytes=1 << 20)
    assert isinstance(c, Ceilings)
    assert c.copy_gbps > 0 and c.read_gbps > 0 and c.write_gbps > 0
    assert cache_dir() == cache
    data = json.loads((cache / "ceilings.json").read_text())
    assert data[c.device_name]["copy_gbps"] == c.copy_gbps
    assert load_ceilings(c.device_name) == c


def test_store_false_leaves_no_file(cache):
    calibrate("cpu", size_bytes=1 << 20, store=False)
    assert not (cache / "ceilings.json").exists()


def test_other_devices_are_kept(cache):
    (cache / "ceilings.json").write_text(
        json.dumps(
            {
                "NVIDIA H200": {
                    "device_name": "NVIDIA H200",
                    "copy_gbps": 4270.0,
                    "read_gbps": 4190.0,
                    "write_gbps": 3370.0,
                    "measured_at": "2026-11-29T00:00:00+00:00",
                    "torch": "2.11",
                    "triton": "3.6",
                }
            }
        )
    )
    c = calibrate("cpu", size_bytes=1 << 20)
    assert load_ceilings("NVIDIA H200").copy_gbps == 4270.0
    assert load_ceilings(c.device_name) == c


def test_unknown_device_is_none(cache):
    assert load_ceilings("NVIDIA Z9000") is None


def test_unreadable_cache_warns_and_is_ignored(cache):
    (cache / "ceilings.json").write_text("{not json")
    with pytest.warns(UserWarning, match="unreadable.*moved to .*ceilings.json.corrupt-"):
        assert load_ceilings("anything") is None
    # Kept aside, so a later calibrate cannot overwrite what may be other devices' entries.
    (aside,) = cache.glob("ceilings.json.corrupt-*")
    assert aside.read_text() == "{not json" and not (cache / "ceilings.json").exists()


def test_stale_schema_is_ignored(cache):
    (cache / "ceilings.json").write_text(json.dumps({"gpu": {"device_name": "gpu", "gbps": 1}}))
    with pytest.warns(UserWarning, match="ignoring cached ceilings"):
        assert load_ceilings("gpu") is None


@pytest.mark.parametrize(("field", "value"), [("copy_gbps", "fast"), ("read_gbps", None),
                                              ("write_gbps", True), ("copy_gbps", -1.0),
                                              ("torch", 2.11)])
def test_a_wrong_typed_cached_value_is_ignored_with_a_warning(cache, field, value):
    """Not a crash after a whole table was measured (the header formats these numbers)."""
    entry = {"device_name": "gpu", "copy_gbps": 4270.0, "read_gbps": 4190.0,
             "write_gbps": 3370.0, "measured_at": "2026-11-29T00:00:00+00:00", "torch": "2.11",
             "triton": "3.6", field: value}
    (cache / "ceilings.json").write_text(json.dumps({"gpu": entry}))
    with pytest.warns(UserWarning, match=f"'{field}'.*re-run `kvbench calibrate`"):
        assert load_ceilings("gpu") is None


@pytest.mark.parametrize("size", [0, 1024, 2.5, True])
def test_bad_size_is_a_value_error(cache, size):
    with pytest.raises(ValueError, match="size_bytes"):
        calibrate("cpu", size_bytes=size)


def test_bad_device_name_is_a_value_error(cache):
    with pytest.raises(ValueError, match="device_name"):
        load_ceilings("")


def test_stream_read_visits_every_word_once():
    """The read-ceiling kernel's per-program XORs fold to the XOR of the whole buffer: every
    word read exactly once, including a ragged tail (interpreter on CPU, compiled on CUDA)."""
    import numpy as np

    from kvbench.harness.stream_read import stream_read_fn

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (4 * 10_007,), dtype=torch.uint8, generator=gen).to(dev)
    want = np.bitwise_xor.reduce(x.view(torch.int32).cpu().numpy())
    for cfg in ({"BLOCK": 64, "num_warps": 4, "num_stages": 1, "programs_per_sm": 2},
                {"BLOCK": 256, "num_warps": 4, "num_stages": 3, "programs_per_sm": 1}):
        out = stream_read_fn(x, 4, cfg)().cpu().numpy()
        assert np.bitwise_xor.reduce(out) == want


def test_check_stream_read_passes_a_whole_read_and_fails_a_short_one():
    from kvbench.harness.stream_read import check_stream_read, stream_read_fn
    from kvbench.harness.verify import VerificationError

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, 256, (4 * 1000,), dtype=torch.uint8, generator=gen).to(dev)
    cfg = {"BLOCK": 64, "num_warps": 4, "num_stages": 1, "programs_per_sm": 2}
    assert check_stream_read(stream_read_fn(x, 4, cfg), x) == 0.0
    short = stream_read_fn(x[: 4 * 999], 4, cfg)  # the last word never read
    with pytest.raises(VerificationError, match="stream_read"):
        check_stream_read(short, x)


def test_stream_read_rejects_what_it_cannot_read_as_words():
    from kvbench.harness.stream_read import stream_read_fn

    with pytest.raises(ValueError, match="contiguous buffer of whole 4-byte words"):
        stream_read_fn(torch.zeros(6, dtype=torch.uint8), 4)
    with pytest.raises(ValueError, match="contiguous buffer of whole 4-byte words"):
        stream_read_fn(torch.zeros(8, 8, dtype=torch.int32)[:, ::2], 4)


def test_every_table_op_names_its_ceiling():
    from kvbench.harness.report import CEILING_KINDS
    from kvbench.measure.table import BUILDERS, CEILING_FOR_OP

    assert set(CEILING_FOR_OP) == set(BUILDERS)
    assert set(CEILING_FOR_OP.values()) <= set(CEILING_KINDS)
    assert CEILING_FOR_OP["paged_decode"] == "read"


def test_a_cache_that_is_not_an_object_is_moved_aside_not_overwritten(cache):
    """A JSON list was read as 'nothing cached', and the next calibrate replaced it."""
    (cache / "ceilings.json").write_text("[1, 2]")
    with pytest.warns(UserWarning, match="a JSON object was expected.*moved to"):
        calibrate("cpu", size_bytes=1 << 20)
    (aside,) = cache.glob("ceilings.json.corrupt-*")
    assert aside.read_text() == "[1, 2]"


def test_calibrate_never_overwrites_a_corrupt_cache_it_cannot_move_aside(cache, monkeypatch):
    (cache / "ceilings.json").write_text("{not json")

    def refuse(self, target):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "rename", refuse)
    with pytest.raises(RuntimeError, match="could not be moved aside"):
        calibrate("cpu", size_bytes=1 << 20)
    assert (cache / "ceilings.json").read_text() == "{not json"
