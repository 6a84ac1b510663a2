"""Live status of long commands: drawn only on a terminal, never in captured output."""

from __future__ import annotations

import io

from kvbench.core import progress
from kvbench.measure import pipeline
from kvbench.measure.table import skipped_summary


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_no_status_line_when_output_is_not_a_terminal(capsys):
    with progress.status("kvbench table x") as st:
        progress.report("row @ case", rows=3)
        assert not st.shown
        assert (st.what, st.rows) == ("row @ case", 3)
    assert capsys.readouterr() == ("", "")
    progress.report("outside any command")  # no-op, no error


def test_status_line_drawn_on_a_terminal_and_quiet_on_request(monkeypatch):
    monkeypatch.setattr("sys.stdout", _Tty())
    monkeypatch.setattr("sys.stderr", _Tty())
    with progress.status("kvbench table x") as st:
        assert st.shown
        with progress.status("inner") as inner:
            assert inner is st and st.title == "inner"
        assert st.title == "kvbench table x"
    with progress.status("kvbench table x", quiet=True) as st:
        assert not st.shown


def test_skipped_rows_are_one_line_per_reason():
    """27 skipped rows of paged_decode on a CPU were 27 lines; one line per reason now."""
    triton = pipeline.CPU_TRITON_SKIP
    cuda = "RuntimeError: cuda/cluster_decode needs a CUDA device"
    skipped = {f"triton/{k} @ b{b} fp16": triton for k in ("single_pass", "split_kv")
               for b in range(12)}
    skipped.update({f"cuda/cluster_decode @ b{b} fp16": cuda for b in range(3)})
    lines = skipped_summary(skipped)
    assert lines == [
        f"24 rows (triton/single_pass, triton/split_kv) at 12 cases: {triton}",
        f"3 rows (cuda/cluster_decode) at 3 cases: {cuda}",
    ]
    assert skipped_summary({"dispatch/cached": "ValueError: x"}) == [
        "1 row (dispatch/cached): ValueError: x"]
