"""calibrate(): measured ceilings written to and read back from the JSON cache."""

import json

import pytest

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
    with pytest.warns(UserWarning, match="unreadable"):
        assert load_ceilings("anything") is None


def test_stale_schema_is_ignored(cache):
    (cache / "ceilings.json").write_text(json.dumps({"gpu": {"device_name": "gpu", "gbps": 1}}))
    with pytest.warns(UserWarning, match="ignoring cached ceilings"):
        assert load_ceilings("gpu") is None


@pytest.mark.parametrize("size", [0, 1024, 2.5, True])
def test_bad_size_is_a_value_error(cache, size):
    with pytest.raises(ValueError, match="size_bytes"):
        calibrate("cpu", size_bytes=size)


def test_bad_device_name_is_a_value_error(cache):
    with pytest.raises(ValueError, match="device_name"):
        load_ceilings("")
