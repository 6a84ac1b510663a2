"""`kvbench publish` builds beside html/ and swaps the result in under a lock: a failed
publish keeps the previous dashboard and leaves nothing in the repository, two at once run
one after the other. asv itself is replaced by a fake that writes what publish() reads."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from kvbench.history.asv import suite
from kvbench.history.dashboard import publish, swap

OLD_INDEX = "<html>the previous dashboard</html>"


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A repository with an asv config, one machine's results and a published html/."""
    root = tmp_path / "repo"
    (root / "results" / "h200").mkdir(parents=True)
    (root / "results" / "h200" / "machine.json").write_text(
        json.dumps({"machine": "h200", "gpu": "NVIDIA H200", "version": 1}))
    (root / "results" / "benchmarks.json").write_text(json.dumps({"version": 2}))
    (root / "asv.conf.json").write_text(json.dumps({
        "version": 1, "repo": ".", "results_dir": "results", "html_dir": "html",
        "env_dir": ".asv/env", "benchmark_dir": "benchmarks",
        "regressions_first_commits": {".*": None}}))
    (root / "html").mkdir()
    (root / "html" / "index.html").write_text(OLD_INDEX)
    monkeypatch.chdir(root)
    monkeypatch.setattr(suite, "write", lambda config: None)
    monkeypatch.setattr(publish, "vendor_dashboard", lambda html_dir, cache=None: [])
    return root


def _staged_html_dir(cmd: list[str]) -> Path:
    config = json.loads(Path(cmd[cmd.index("--config") + 1]).read_text())
    return Path(config["html_dir"])


def fake_asv(fail: bool = False, hold_s: float = 0.0, log: list | None = None,
             tags: dict | None = None):
    """A stand-in for subprocess.run(asv publish ...): wipes and rewrites the staged
    html_dir like asv does (asv's template + an index.json), or raises half way."""
    import asv

    def run(cmd, **kwargs):
        html = _staged_html_dir(cmd)
        if log is not None:
            log.append(("start", time.monotonic()))
        shutil.rmtree(html, ignore_errors=True)
        shutil.copytree(Path(asv.__file__).parent / "www", html)
        if fail:
            raise subprocess.CalledProcessError(1, cmd)
        (html / "index.json").write_text(json.dumps({"params": {"machine": ["h200"]},
                                                     "tags": tags or {}}))
        time.sleep(hold_s)
        if log is not None:
            log.append(("end", time.monotonic()))
        return subprocess.CompletedProcess(cmd, 0)

    return run


def test_a_failed_publish_keeps_the_previous_dashboard_and_leaves_no_file(repo, monkeypatch):
    before = sorted(p.name for p in repo.iterdir())
    monkeypatch.setattr(publish.subprocess, "run", fake_asv(fail=True))
    with pytest.raises(subprocess.CalledProcessError):
        publish.publish(repo / "asv.conf.json")
    assert (repo / "html" / "index.html").read_text() == OLD_INDEX
    assert sorted(p.name for p in (repo / "html").iterdir()) == ["index.html"]
    after = sorted(p.name for p in repo.iterdir())
    assert [n for n in after if n not in before] in ([], [".asv"])  # the lock lives in .asv/
    assert not list(repo.glob(".kvbench-publish-*")) and not list(repo.glob(".html*"))


def test_a_publish_replaces_the_dashboard_when_every_step_succeeded(repo, monkeypatch):
    monkeypatch.setattr(publish.subprocess, "run", fake_asv())
    assert publish.publish(repo / "asv.conf.json") == repo / "html"
    assert (repo / "html" / "index.html").read_text() != OLD_INDEX
    assert (repo / "html" / "kvbench" / "regressions.html").is_file()
    assert not list(repo.glob(".html*"))


def test_html_dir_is_kvbenchs_and_a_folder_of_other_files_is_refused(repo, monkeypatch, capsys):
    """`kvbench publish --html-dir DIR` went to asv, which emptied DIR in place (outside the
    swap); kvbench then failed on its missing build folder. Now it is the swap's target, and
    a folder holding anything but a dashboard is refused before anything runs."""
    from kvbench.history.dashboard import publish_cmd

    monkeypatch.setattr(publish.subprocess, "run", fake_asv())
    other = repo.parent / "othersite"
    other.mkdir()
    (other / "important.txt").write_text("keep")
    with pytest.raises(SystemExit) as exc:
        publish_cmd.main(["--html-dir", str(other)])
    assert exc.value.code == 2
    assert "holds files but no dashboard" in capsys.readouterr().err
    assert [p.name for p in other.iterdir()] == ["important.txt"]
    site = repo.parent / "site"
    assert publish_cmd.main(["-o", str(site)]) == 0
    assert (site / "index.json").is_file() and (site / "kvbench" / "regressions.html").is_file()
    assert (repo / "html" / "index.html").read_text() == OLD_INDEX  # the config's untouched
    assert publish_cmd.main(["-o", str(site)]) == 0  # an earlier dashboard is replaced


@pytest.mark.parametrize(("conf", "message"), [
    ({"version": 1}, "asv refuses it (No repo specified"),
    ({"version": 1, "repo": ".", "html_dir": 5}, "html_dir must be a path (a string), got 5"),
])
def test_a_config_asv_refuses_is_a_usage_error(repo, capsys, conf, message):
    from kvbench.history.dashboard import preview_cmd, publish_cmd

    (repo / "bad.json").write_text(json.dumps(conf))
    for cmd in (publish_cmd, preview_cmd):
        with pytest.raises(SystemExit) as exc:
            cmd.main(["--config", "bad.json"])
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_a_config_naming_no_results_leaves_the_dashboard(repo, monkeypatch, capsys):
    """A results_dir typo published an empty dashboard over the real one (exit 0)."""
    from kvbench.history.dashboard import publish_cmd

    monkeypatch.setattr(publish.subprocess, "run", fake_asv())
    conf = json.loads((repo / "asv.conf.json").read_text())
    (repo / "typo.json").write_text(json.dumps({**conf, "results_dir": "resluts"}))
    with pytest.raises(SystemExit) as exc:
        publish_cmd.main(["--config", "typo.json"])
    assert exc.value.code == 2 and "holds no machine's results" in capsys.readouterr().err
    assert (repo / "html" / "index.html").read_text() == OLD_INDEX
    assert not (repo / "resluts").exists()


def test_asv_or_asset_failures_are_one_line_errors(repo, monkeypatch, capsys):
    from kvbench.history.dashboard import publish_cmd

    monkeypatch.setattr(publish.subprocess, "run", fake_asv(fail=True))
    assert publish_cmd.main(["--no-such-asv-option"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("kvbench publish: asv publish failed (exit 1")
    assert "Traceback" not in err

    def no_npm(html_dir, cache=None):
        raise RuntimeError("blueimp-md5@2.19.0 is not in the cache and npm is not installed")

    monkeypatch.setattr(publish.subprocess, "run", fake_asv())
    monkeypatch.setattr(publish, "vendor_dashboard", no_npm)
    assert publish_cmd.main([]) == 1
    assert "npm is not installed (the previous dashboard is as it was)" in capsys.readouterr().err
    assert (repo / "html" / "index.html").read_text() == OLD_INDEX


def test_the_page_reads_the_results_the_graphs_were_built_from(repo, monkeypatch):
    """The regressions page read the live results after asv publish: a `kvbench record`
    writing meanwhile put on the page a commit the graphs did not show."""
    graphs = fake_asv()
    late = repo / "results" / "h200" / "deadbeef-env.json"

    def asv_while_record_writes(cmd, **kwargs):
        done = graphs(cmd, **kwargs)
        late.write_text("{}")  # a result stored during asv publish
        return done

    read = []

    def page(config, build, results=None):
        read.append((results, results is not None and (results / "h200" / late.name).exists()))
        (build / "kvbench").mkdir()
        (build / "kvbench" / "regressions.html").write_text("page")

    monkeypatch.setattr(publish.subprocess, "run", asv_while_record_writes)
    monkeypatch.setattr(publish, "add_regressions_page", page)
    publish.publish(repo / "asv.conf.json")
    ((snapshot, saw_late),) = read
    assert snapshot is not None and snapshot != repo / "results"
    assert late.exists() and not saw_late


def test_two_publishes_at_once_run_one_after_the_other(repo, monkeypatch):
    log: list = []
    monkeypatch.setattr(publish.subprocess, "run", fake_asv(hold_s=0.3, log=log))
    errors: list = []

    def one():
        try:
            publish.publish(repo / "asv.conf.json")
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    assert [kind for kind, _ in sorted(log, key=lambda e: e[1])] == ["start", "end"] * 2
    assert (repo / "html" / "index.json").is_file()


def test_a_killed_swap_is_undone_by_the_next_build(tmp_path):
    """Killed between its two renames, a build leaves the previous folder in its work
    folder; the next build puts it back before it sweeps."""
    target = tmp_path / "html"
    work = tmp_path / f".html{swap.WORK_TAG}killed"
    (work / swap.OLD).mkdir(parents=True)
    (work / swap.OLD / "index.html").write_text(OLD_INDEX)
    with pytest.raises(RuntimeError), swap.building(target):
        raise RuntimeError("this build fails too")
    assert (target / "index.html").read_text() == OLD_INDEX
    assert sorted(p.name for p in tmp_path.iterdir()) == ["html"]


EVIL_TAG = "<img/src='x'/onerror=document.title='PWNED'>"  # a legal git tag name


def test_a_git_tag_name_is_shown_as_text_never_as_markup(repo, monkeypatch):
    """asv's graphdisplay.js appended `"<div ...>" + tag + "</div>"`; the published copy
    puts the name in with .text(), and the name is nowhere in the pages or scripts."""
    import re

    monkeypatch.setattr(publish.subprocess, "run", fake_asv(tags={EVIL_TAG: 1}))
    html = publish.publish(repo / "asv.conf.json")
    script = (html / "graphdisplay.js").read_text()
    assert ".text(tag)" in script
    assert not re.search(r"\+\s*tag\s*\+", script), "a tag name concatenated into HTML"
    for path in html.rglob("*"):
        if path.suffix in (".html", ".js"):
            assert "onerror=document.title" not in path.read_text(errors="replace"), path
    assert EVIL_TAG in json.loads((html / "index.json").read_text())["tags"]  # data only


def test_escape_tag_names_refuses_a_changed_asv_script(tmp_path):
    (tmp_path / "graphdisplay.js").write_text("changed by a new asv")
    with pytest.raises(RuntimeError, match="tag-drawing code changed"):
        publish.escape_tag_names(tmp_path)
