"""~/.asv-machine.json is replaced whole while the kvbench-offline plugin is loaded
(kvbench/history/asv/asv_env.py: whole_machine_file): asv rewrites it on every `asv run
--machine`, and concurrent workers sharing one HOME (`kvbench record --gpus`, array tasks)
must never read a half-written one."""

from __future__ import annotations

import json
import threading

from asv import util
from asv.machine import MachineCollection

import kvbench.history.asv.asv_env  # noqa: F401  (installs the guards, as asv's plugin load does)


def test_the_machine_file_is_replaced_whole_and_keeps_other_machines(tmp_path):
    path = tmp_path / "asv-machine.json"
    MachineCollection.save("a", {"machine": "a", "num_cpu": "1"}, _path=str(path))
    MachineCollection.save("b", {"machine": "b", "num_cpu": "2"}, _path=str(path))
    data = json.loads(path.read_text())
    assert data["a"]["num_cpu"] == "1" and data["b"]["num_cpu"] == "2"
    assert [p.name for p in tmp_path.iterdir()] == ["asv-machine.json"]  # no temp file left
    assert getattr(MachineCollection.save, "_kvbench_guard", False)


def test_readers_never_see_a_half_written_file_while_others_save(tmp_path):
    path = str(tmp_path / "asv-machine.json")
    big = {"machine": "m", "padding": "x" * 200_000}  # long enough to be written in pieces
    MachineCollection.save("m", big, _path=path)
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer() -> None:
        try:
            while not stop.is_set():
                MachineCollection.save("m", big, _path=path)  # reads the file first, too
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def reader() -> None:
        try:
            for _ in range(300):
                assert util.load_json(path, api_version=MachineCollection.api_version)["m"]
        except BaseException as exc:  # noqa: BLE001  (any failure is the finding)
            errors.append(exc)

    writers = [threading.Thread(target=writer) for _ in range(2)]
    for t in writers:
        t.start()
    try:
        reader()
    finally:
        stop.set()
        for t in writers:
            t.join()
    assert errors == []
