"""The one flush routine: sized from the cache it evicts, and really writing its buffer."""

import pytest
import torch

from kvbench.harness import flush as flush_mod
from kvbench.harness import flush_bytes, l2_flush


def test_cpu_flush_covers_twice_the_last_level_cache():
    assert flush_bytes("cpu") == flush_mod.FLUSH_MULTIPLE * flush_mod.cpu_llc_bytes()
    assert flush_bytes("cpu") >= 2 * flush_mod.cpu_llc_bytes()


def test_llc_is_the_largest_sysfs_cache(tmp_path):
    for i, size in enumerate(["32K", "512K", "32768K", "64K"]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "size").write_text(size + "\n")
    assert flush_mod.cpu_llc_bytes(str(tmp_path / "index*" / "size")) == 32 << 20


def test_llc_falls_back_when_sysfs_is_missing(tmp_path):
    assert flush_mod.cpu_llc_bytes(str(tmp_path / "nothing*" / "size")) == (
        flush_mod.CPU_LLC_FALLBACK_BYTES
    )


@pytest.mark.parametrize(
    "text,expected",
    [("32K", 32 << 10), ("16M", 16 << 20), ("1G", 1 << 30), ("4096", 4096), ("junk", None)],
)
def test_cache_size_parsing(text, expected):
    assert flush_mod._parse_cache_size(text) == expected


def test_cpu_flush_writes_the_whole_buffer():
    l2_flush("cpu")
    buf = flush_mod._cpu_buffer()
    first = int(buf[0])
    l2_flush("cpu")
    assert buf.nbytes >= flush_bytes("cpu") - 8
    assert int(buf[0]) == int(buf[-1]) == first + 1  # a new value everywhere, every call


def test_read_flush_reads_the_buffer_without_writing_it():
    from kvbench.harness.flush import read_flush

    buf = torch.arange(1000, dtype=torch.int32)
    before = buf.clone()
    read_flush(buf)()
    assert torch.equal(buf, before)


def test_the_read_flush_does_not_make_torch_cast_the_buffer():
    """An int64 sum of the int32 buffer would make torch cast the whole buffer first (a 2x
    temporary written and re-read); the int32 accumulation reads the buffer as it is. The
    profiler names the cast (aten::_to_copy) on CPU as on CUDA."""
    from torch.profiler import profile

    from kvbench.harness.flush import read_flush

    buf = torch.zeros(1 << 12, dtype=torch.int32)
    flush = read_flush(buf)
    with profile() as prof:
        flush()
    names = {e.name for e in prof.events()}
    assert "aten::sum" in names and "aten::_to_copy" not in names, names


def test_a_device_without_an_l2_size_is_flushed_with_a_warning(monkeypatch):
    """The fallback flush size is an assumption every cold number rests on: said aloud."""
    from types import SimpleNamespace

    from kvbench.harness import flush as flush_mod

    monkeypatch.setattr(flush_mod.torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(L2_cache_size=0))
    flush_mod._cuda_flush_bytes.cache_clear()
    try:
        with pytest.warns(UserWarning,
                          match="reports no L2 size; the cold-L2 flush assumes 128 MiB"):
            assert flush_mod._cuda_flush_bytes(7) == flush_mod.FLUSH_MULTIPLE * (128 << 20)
    finally:
        flush_mod._cuda_flush_bytes.cache_clear()
