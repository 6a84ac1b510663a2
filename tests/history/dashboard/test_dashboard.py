"""`kvbench publish`: the asv dashboard must render with no internet.

Unit tests pin the HTML rewrite (no network). The browser test makes a real results folder
(a two-commit history, allocator benchmark only), publishes it with
kvbench.history.dashboard.publish (which fetches jQuery/flot/bootstrap with `npm pack`), serves
html/ on 127.0.0.1, and loads a benchmark's graph page in headless Chromium with every other host
unresolvable: the DOM must hold flot's canvas and the screenshot must not be blank.

Needs Chromium (Debian: apt-get install chromium) and npm with the registry reachable (or a
filled KVBENCH_NPM_CACHE). A missing Chromium FAILS the test with that message; set
KVBENCH_SKIP_BROWSER=1 to skip it deliberately.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Self

import pytest

from kvbench.history.dashboard import publish


def _asv_index() -> str:
    import asv

    return (Path(asv.__file__).parent / "www" / "index.html").read_text(encoding="utf-8")


# ---- the rewrite (no network) -----------------------------------------------------------------


def test_rewrite_points_every_cdn_tag_at_vendor():
    html = publish.rewrite_html(_asv_index())
    scripts = re.findall(r"""<script\b[^>]*src=["']https?://[^>]*>""", html)
    styles = [t for t in re.findall(r"""<link\b[^>]*href=["']https?://[^>]*>""", html)
              if "stylesheet" in t]
    assert scripts == [] and styles == [], scripts + styles
    for asset in publish.ASSETS:
        assert f'"{asset.local}"' in html, f"{asset.url} was not rewritten"
    assert "integrity=" not in html and "crossorigin" not in html


def test_rewrite_refuses_an_unknown_cdn():
    page = '<script src="https://cdn.example.org/new-lib.js"></script>'
    with pytest.raises(RuntimeError, match="does not vendor"):
        publish.rewrite_html(page)


def test_rewrite_leaves_feeds_and_local_files():
    page = ('<link rel="alternate" type="application/atom+xml" href="https://x.org/feed.xml">'
            '<script src="asv.js"></script>')
    assert publish.rewrite_html(page) == page


def test_vendor_dashboard_needs_a_published_dir(tmp_path):
    with pytest.raises(ValueError, match="index.html"):
        publish.vendor_dashboard(tmp_path)


@pytest.mark.parametrize("content", [b"", b"\x1f\x8b\x08\x00truncated"])
def test_a_corrupt_cached_tarball_is_named(tmp_path, content):
    """A cached file counts as cached, so a torn one (an interrupted npm pack) would fail
    every later run: the error names the file and what to do."""
    asset = publish.ASSETS[0]
    bad = tmp_path / f"{asset.package}-{asset.version}.tgz"
    bad.write_bytes(content)
    with pytest.raises(RuntimeError,
                       match=rf"corrupt cached tarball {re.escape(str(bad))}.*delete it"):
        publish.fetch_assets(tmp_path / "html", cache=tmp_path)


def test_prefetch_fills_the_cache_once(tmp_path, monkeypatch):
    """setup.sh's prefetch: one tarball per package; a filled cache needs no npm at all."""
    packages = sorted({(a.package, a.version) for a in publish.ASSETS})
    for package, version in packages:
        (tmp_path / f"{package}-{version}.tgz").write_bytes(b"cached")
    monkeypatch.setattr(publish.shutil, "which", lambda name: None)
    got = publish.prefetch(cache=tmp_path)
    assert got == [tmp_path / f"{p}-{v}.tgz" for p, v in packages]
    (tmp_path / f"{packages[0][0]}-{packages[0][1]}.tgz").unlink()
    with pytest.raises(RuntimeError, match="npm is not installed"):
        publish.prefetch(cache=tmp_path)


def test_assets_match_the_installed_asv():
    """Every CDN URL in this asv's index.html is one ASSETS replaces (asv upgrade guard)."""
    urls = set(re.findall(r"""<(?:script|link)\b[^>]*?(?:src|href)=["'](https?://[^"']+)""",
                          _asv_index()))
    urls = {u for u in urls if not u.startswith("https://github.com")}
    assert urls == {a.url for a in publish.ASSETS}


# ---- the browser ------------------------------------------------------------------------------


def _chromium() -> str:
    if os.environ.get("KVBENCH_SKIP_BROWSER") == "1":
        pytest.skip("KVBENCH_SKIP_BROWSER=1: browser test skipped on request")
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("Chromium is not installed (Debian: apt-get install -y chromium); set "
                "KVBENCH_SKIP_BROWSER=1 to skip the dashboard test deliberately")


def chromium_args(binary: str, profile: Path) -> list[str]:
    """Headless flags for a machine with no network: nothing but 127.0.0.1 resolves."""
    return [
        binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", f"--user-data-dir={profile}",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
        "--virtual-time-budget=15000", "--window-size=1400,900",
    ]


class Served:
    """html/ served on 127.0.0.1 (asv's pages load JSON with XHR, which file:// refuses)."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


GRAPH = "#kv_alloc.KVAlloc.track_us?p-selector=%27host%2Ffreelist%27"


def render(binary: str, profile: Path, url: str, screenshot: Path | None = None) -> str:
    """The DOM after scripts ran (and optionally a screenshot) of `url`."""
    args = chromium_args(binary, profile)
    if screenshot is not None:
        subprocess.run([*args, f"--screenshot={screenshot}", url], check=True,
                       capture_output=True, timeout=180)
    proc = subprocess.run([*args, "--dump-dom", url], check=True, capture_output=True,
                          text=True, timeout=180)
    return proc.stdout


@pytest.mark.e2e
def test_published_dashboard_renders_offline(tmp_path):
    binary = _chromium()
    from test_asv_e2e import MACHINE, harmless, make_history

    hist = make_history(tmp_path, [("c1", harmless(1))])
    hist.asv("run", "--machine", MACHINE, "--launch-method", "forkserver",
             "--bench", r"kv_alloc\.KVAlloc\.track_us", "ALL")
    proc = subprocess.run(
        [sys.executable, "-m", "kvbench.history.dashboard.publish_cmd",
         "--config", str(hist.repo / "asv.conf.json")],
        env=hist.env, capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    html = hist.repo / "html"
    index = (html / "index.html").read_text(encoding="utf-8")
    assert not re.search(r"""<script\b[^>]*src=["']https?://""", index)
    for asset in publish.ASSETS:
        assert (html / asset.local).is_file(), asset.local

    with Served(html) as site:
        dom = render(binary, tmp_path / "profile", site.url)
        assert "kv_alloc.KVAlloc.track_us" in dom, "the index lists no benchmark"
        shot = tmp_path / "graph.png"
        dom = render(binary, tmp_path / "profile", site.url + GRAPH, screenshot=shot)
    assert 'class="flot-base"' in dom, "the graph page drew no flot canvas"
    assert "continental origin of swallow" not in dom, "asv's error page: a script failed"
    assert shot.stat().st_size > 20_000, "the screenshot is (nearly) blank"


# ---- one line per machine kind, default selection, preview -----------------------------------


def _write(path: Path, data: dict) -> None:
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_host_keys_fold_onto_the_machine_record(tmp_path):
    """The 1-GPU and 2-GPU H200 hosts' results differ in num_cpu/ram (two dashboard lines for
    one GPU model); staged for publishing they carry the record's values, stored ones don't."""
    import json

    results = tmp_path / "results"
    record = {"machine": "h200", "gpu": "NVIDIA H200", "num_cpu": "32", "ram": "270",
              "os": "Linux a", "version": 1}
    _write(results / "h200" / "machine.json", record)
    _write(results / "cpu-x" / "machine.json", {"machine": "cpu-x", "gpu": "n/a",
                                                "num_cpu": "2", "version": 1})
    small = {"params": {"machine": "h200", "num_cpu": "16", "ram": "135", "os": "Linux b",
                        "torch": "2.11"}}
    _write(results / "h200" / "aaaa-env.json", small)
    _write(results / "h200" / "bbbb-env.json", {"params": {**small["params"], "num_cpu": "32",
                                                           "ram": "270", "os": "Linux a"}})
    staged = tmp_path / "staged"
    assert publish.stage_results(results, staged) == ["h200"]  # GPU machines by default
    params = [json.loads((staged / "h200" / f).read_text())["params"]
              for f in ("aaaa-env.json", "bbbb-env.json")]
    assert params[0] == params[1] and params[0]["num_cpu"] == "32"
    assert params[0]["torch"] == "2.11"  # software keys still split lines
    assert json.loads((results / "h200" / "aaaa-env.json").read_text()) == small  # untouched


def test_dashboard_opens_on_the_default_machines(tmp_path):
    import json

    import asv

    www = Path(asv.__file__).parent / "www"
    shutil.copy(www / "graphdisplay.js", tmp_path / "graphdisplay.js")
    _write(tmp_path / "index.json", {"params": {"machine": ["cpu-x", "h200"]}})
    publish.set_default_machines(tmp_path, ["h200"])
    publish.set_default_machines(tmp_path, ["h200"])  # idempotent
    script = (tmp_path / "graphdisplay.js").read_text()
    assert script.count("index.kvbench_default_machines.slice()") == 1
    assert json.loads((tmp_path / "index.json").read_text())["kvbench_default_machines"] == ["h200"]
    (tmp_path / "graphdisplay.js").write_text("changed by a new asv")
    with pytest.raises(RuntimeError, match="default-selection code changed"):
        publish.set_default_machines(tmp_path, ["h200"])


def test_preview_serves_the_dashboard_and_prints_its_url(tmp_path):
    import urllib.request

    html = tmp_path / "html"
    html.mkdir()
    (html / "index.html").write_text("<html>kvbench dashboard</html>")
    config = tmp_path / "asv.conf.json"
    config.write_text('{"version": 1, "repo": ".", "html_dir": "html"}')
    proc = subprocess.Popen([sys.executable, "-m", "kvbench.cli", "preview", "--config",
                             str(config), "--port", "0"], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line).group(0)
        with urllib.request.urlopen(url, timeout=30) as response:
            assert b"kvbench dashboard" in response.read()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    empty = tmp_path / "empty.conf.json"
    empty.write_text('{"version": 1, "repo": ".", "html_dir": "nothing"}')
    done = subprocess.run([sys.executable, "-m", "kvbench.cli", "preview", "--config", str(empty)],
                          check=False, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "kvbench publish" in done.stderr
