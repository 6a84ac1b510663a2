"""The `kvbench` command line: every documented invocation parses, bad values are named."""

import json
import re
import subprocess
import sys

import pytest

from kvbench.cli import main


def test_machine_takes_its_own_flags(tmp_path, capsys):
    """`kvbench machine --name NAME --file PATH` (docs/history.md): the flags reach its parser."""
    target = tmp_path / "machines.json"
    assert main(["machine", "--name", "e2e-cli", "--file", str(target)]) == 0
    data = json.loads(target.read_text())
    assert "e2e-cli" in data
    assert json.loads(capsys.readouterr().out)["machine"] == "e2e-cli"


def test_machine_and_publish_help_are_their_own(capsys):
    for sub, flag in (("machine", "--file"), ("publish", "--vendor-only"),
                      ("regressions", "--fail-on")):
        with pytest.raises(SystemExit) as exc:
            main([sub, "--help"])
        assert exc.value.code == 0
        assert flag in capsys.readouterr().out


def test_machine_name_error_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["machine", "--name", "bad name!", "--file", str(tmp_path / "m.json")])
    assert exc.value.code == 2
    assert "name" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "-5", "big"])
def test_calibrate_size_must_be_a_positive_count(value, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["calibrate", "--size-mib", value])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--size-mib" in err and "expected an integer >= 1" in err


def test_top_level_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for sub in ("env", "calibrate", "machine", "publish", "regressions", "tune", "table", "main"):
        assert sub in out


def test_unknown_op_is_refused_with_the_choices(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["table", "paged_attention"])
    assert exc.value.code == 2
    assert "invalid choice: 'paged_attention'" in capsys.readouterr().err


def test_table_geometry_refuses_an_unknown_name_with_the_accepted_ones(capsys):
    """`kvbench table paged_decode --geometry NAME`: a name the geometry table lacks is an
    error before anything is measured, listing what is accepted; --help lists the names."""
    from kvbench.ops.decode_geometry import GEOMETRIES

    with pytest.raises(SystemExit) as exc:
        main(["table", "paged_decode", "--geometry", "llama-9000"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown geometry 'llama-9000'; accepted: all, " + ", ".join(GEOMETRIES) in err
    with pytest.raises(SystemExit):
        main(["table", "--help"])
    helped = "".join(capsys.readouterr().out.split())  # argparse wraps (at hyphens too)
    assert all(name in helped for name in GEOMETRIES), helped


def test_machine_file_problems_are_named_and_other_entries_survive(tmp_path, capsys):
    target = tmp_path / "machines.json"
    assert main(["machine", "--name", "first", "--file", str(target)]) == 0
    assert main(["machine", "--name", "second", "--file", str(target)]) == 0
    data = json.loads(target.read_text())
    assert {"first", "second"} <= set(data)  # the second write kept the first entry
    assert sorted(p.name for p in tmp_path.iterdir()) == ["machines.json"]  # no temporaries
    for bad, why in ((tmp_path, "is a directory"),
                     (target / "x.json", "cannot create its directory")):
        with pytest.raises(SystemExit) as exc:
            main(["machine", "--name", "third", "--file", str(bad)])
        assert exc.value.code == 2
        assert why in capsys.readouterr().err
    assert json.loads(target.read_text()) == data  # untouched by the failed calls


def test_env_names_a_selector_that_names_no_row(monkeypatch, capsys):
    """Every dispatch of that op would raise; `kvbench env` says so first, with the values
    accepted, and exits 2. A valid selector is quiet."""
    monkeypatch.setenv("KVBENCH_PAGED_DECODE", "triton/fastest")
    monkeypatch.setenv("KVBENCH_KV_WRITE", "torch/index_copy")
    assert main(["env"]) == 2
    out = capsys.readouterr().out
    assert ("invalid selector: KVBENCH_PAGED_DECODE='triton/fastest' is not a row of paged_decode"
            in out)
    assert "triton/split_kv" in out  # the accepted values
    assert sum(line.startswith("invalid selector") for line in out.splitlines()) == 1
    assert main(["env", "--json"]) == 2
    assert len(json.loads(capsys.readouterr().out)["selector_problems"]) == 1
    monkeypatch.delenv("KVBENCH_PAGED_DECODE")
    assert main(["env"]) == 0
    assert "invalid selector" not in capsys.readouterr().out


def test_env_names_a_safe_mode_value_every_cuda_op_call_would_refuse(monkeypatch, capsys):
    """KVBENCH_CHECK=true passed `kvbench env` (exit 0, nothing said) while every CUDA op
    call would raise on it."""
    monkeypatch.setenv("KVBENCH_CHECK", "true")
    assert main(["env"]) == 2
    assert ("invalid setting: KVBENCH_CHECK='true' is not accepted; accepted: 0 or 1"
            in capsys.readouterr().out)
    assert main(["env", "--json"]) == 2
    assert len(json.loads(capsys.readouterr().out)["setting_problems"]) == 1
    monkeypatch.setenv("KVBENCH_CHECK", "1")
    assert main(["env"]) == 0
    assert "invalid setting" not in capsys.readouterr().out


def test_env_lists_a_kvbench_variable_that_kvbench_does_not_read(monkeypatch, capsys):
    """A misspelt selector changes nothing (the run measures auto): `kvbench env` says so, as a
    warning (exit 0), with the closest known name; --json carries it as unknown_variables."""
    misspelt = "KVBENCH_KV_GATHER_FP8"
    monkeypatch.setenv(misspelt, "triton/legacy")
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert f"warning: {misspelt} is set but is not a kvbench variable" in out
    assert "did you mean KVBENCH_KV_GATHER?" in out
    assert main(["env", "--json"]) == 0
    unknown = json.loads(capsys.readouterr().out)["unknown_variables"]
    assert list(unknown) == [misspelt] and "KVBENCH_PAGED_DECODE" in unknown[misspelt]


def _options(help_text: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", help_text))


@pytest.mark.parametrize("sub", ["table", "tune"])
def test_help_lists_the_real_options_fast_and_in_step(sub, capsys):
    """`kvbench table --help` lists the options a user types (not a positional `rest`),
    without importing torch, and the same options as the module's own parser."""
    code = (f"import sys; from kvbench.cli import main\ntry: main([{sub!r}, '--help'])\n"
            "except SystemExit: pass\nprint(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('torch', 'triton', 'kvbench')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, timeout=60)
    fast = proc.stdout
    assert "rest" not in fast
    assert "'torch'" not in fast and "triton" not in fast, "help imported torch/triton"
    from kvbench.measure.table import main as table_main
    from kvbench.measure.tune import main as tune_main

    with pytest.raises(SystemExit):
        {"table": table_main, "tune": tune_main}[sub](["--help"])
    own = capsys.readouterr().out
    assert _options(fast) == _options(own)
    assert len(_options(own)) >= 4


def test_the_ops_a_table_or_tune_accepts_are_the_ones_they_build():
    from kvbench.dispatch.registry import OPS as REGISTERED
    from kvbench.measure.options import OPS
    from kvbench.measure.table import BUILDERS
    from kvbench.measure.tune import CASES

    assert OPS == tuple(BUILDERS) == tuple(CASES) and set(OPS) == set(REGISTERED)


def test_main_prints_the_environment_before_measuring(monkeypatch, capsys):
    """README promises the environment report first: it is out before any table starts."""
    import kvbench.measure.table

    def tables(json_dir=None):
        assert "# gpu " in capsys.readouterr().out, "no environment report before the tables"
        return 0

    monkeypatch.setattr(kvbench.measure.table, "run_all", tables)
    assert main(["main"]) == 0


@pytest.mark.parametrize("table", [[1, 2], {"rows": "x"}, {"rows": [{"work": {"moved": 1}}]},
                                   {"rows": [], "metadata": []}])
def test_plot_of_a_wrong_shaped_json_is_one_line(table, tmp_path, capsys):
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    assert main(["plot", str(path), str(tmp_path / "out.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err


def test_calibrate_refuses_a_size_the_device_cannot_hold_before_allocating(monkeypatch,
                                                                          tmp_path, capsys):
    import importlib

    calibrate = importlib.import_module("kvbench.harness.calibrate")
    monkeypatch.setenv("KVBENCH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(calibrate, "_measure", lambda *a: pytest.fail("allocated"))
    assert main(["calibrate", "--size-mib", str(10**12)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "more than the" in err, err
