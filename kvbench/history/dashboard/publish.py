"""`kvbench publish`: `asv publish`, then make the dashboard render with no internet.

asv 0.6.6's index.html loads jQuery, flot (+ plugins), stupidtable, blueimp-md5 and bootstrap
from public CDNs, so on the machines that hold kvbench results (an air-gapped GPU box, a CI
runner) the published page renders blank. After asv writes html/, this module fetches the
same libraries at the same versions from the npm registry with the ordinary client
(`npm pack <pkg>@<version>`), unpacks the files asv references into html/vendor/<pkg>/ and
rewrites the <script>/<link> tags to point there. Nothing is committed: the tarballs are
cached per user (the cache root's npm/ folder, or KVBENCH_NPM_CACHE), so one fetch serves every
later publish offline.

Two deliberate substitutions, both API-compatible for asv's use:
- flot 0.8.3 ships unminified files on npm (jquery.flot.js for cdnjs' jquery.flot.min.js).
- cdnjs' stupidtable 1.0.1 was never on npm; its package stupid-table-plugin starts at 1.1.3
  (same `$(table).stupidtable()` call asv makes).
The CDN tags' integrity/crossorigin attributes are dropped: the local files are not the
byte-identical CDN builds, and a same-origin copy needs no CORS.

An unknown CDN URL in asv's HTML (a new asv release) raises instead of leaving a tag that
silently fails offline.

Regressions: asv's own regressions page treats bigger as worse, so it would call every GB/s
gain a regression. `publish` refuses a config that leaves a GB/s series to it, writes
kvbench's verdicts (`kvbench regressions` for every machine) to html/kvbench/ and points the
dashboard's Regressions tab there (kvbench.history.verdict.page).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

VENDOR_DIR = "vendor"


@dataclass(frozen=True)
class Asset:
    """One CDN URL in asv's index.html and the npm package file that replaces it."""

    url: str
    package: str  # npm name
    version: str
    member: str  # path inside the npm tarball's package/ folder

    @property
    def local(self) -> str:
        """Path relative to html/: vendor/<package>/<member>."""
        return f"{VENDOR_DIR}/{self.package}/{self.member}"


_CDNJS = "https://cdnjs.cloudflare.com/ajax/libs"
_JSDELIVR = "https://cdn.jsdelivr.net/npm"

ASSETS: tuple[Asset, ...] = (
    Asset("https://code.jquery.com/jquery-3.3.1.min.js", "jquery", "3.3.1", "dist/jquery.min.js"),
    Asset(f"{_CDNJS}/flot/0.8.3/jquery.flot.min.js", "flot", "0.8.3", "jquery.flot.js"),
    Asset(f"{_CDNJS}/flot/0.8.3/jquery.flot.time.min.js", "flot", "0.8.3", "jquery.flot.time.js"),
    Asset(f"{_CDNJS}/flot/0.8.3/jquery.flot.selection.min.js", "flot", "0.8.3",
          "jquery.flot.selection.js"),
    Asset(f"{_CDNJS}/flot/0.8.3/jquery.flot.categories.min.js", "flot", "0.8.3",
          "jquery.flot.categories.js"),
    Asset(f"{_JSDELIVR}/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js", "flot-orderbars",
          "1.0.0", "js/jquery.flot.orderBars.js"),
    Asset(f"{_CDNJS}/stupidtable/1.0.1/stupidtable.min.js", "stupid-table-plugin", "1.1.3",
          "stupidtable.min.js"),
    Asset(f"{_CDNJS}/blueimp-md5/2.19.0/js/md5.min.js", "blueimp-md5", "2.19.0", "js/md5.min.js"),
    Asset(f"{_JSDELIVR}/bootstrap@3.1.1/dist/js/bootstrap.min.js", "bootstrap", "3.1.1",
          "dist/js/bootstrap.min.js"),
    Asset(f"{_JSDELIVR}/bootstrap@3.1.1/dist/css/bootstrap.min.css", "bootstrap", "3.1.1",
          "dist/css/bootstrap.min.css"),
)

#: Files referenced from inside a vendored file (bootstrap.min.css -> ../fonts/...).
EXTRA_MEMBERS: dict[tuple[str, str], tuple[str, ...]] = {
    ("bootstrap", "3.1.1"): tuple(
        f"dist/fonts/glyphicons-halflings-regular.{ext}" for ext in ("eot", "svg", "ttf", "woff")
    ),
}

_TAG = re.compile(r"<(script|link)\b[^>]*>", re.IGNORECASE)
_URL_ATTR = re.compile(r"""\b(src|href)\s*=\s*(["'])(https?://[^"']+)\2""", re.IGNORECASE)
_DROP_ATTRS = re.compile(
    r"""\s+(integrity|crossorigin|referrerpolicy)(\s*=\s*(["'])[^"']*\3)?""", re.IGNORECASE)


def cache_dir() -> Path:
    """Where npm tarballs are kept between publishes: KVBENCH_NPM_CACHE, else the cache root's
    npm/ folder (kvbench.core.paths)."""
    override = os.environ.get("KVBENCH_NPM_CACHE")
    if override:
        return Path(override)
    from kvbench.core import paths

    return paths.npm_cache_dir()


def _tarball(package: str, version: str, cache: Path) -> Path:
    """The npm tarball of package@version, from the cache or fetched with `npm pack`."""
    path = cache / f"{package}-{version}.tgz"
    if path.is_file():
        return path
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            f"{package}@{version} is not in {cache} and npm is not installed: install npm "
            "(Debian: apt-get install npm) or copy the tarball there from a machine that has it"
        )
    cache.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [npm, "pack", f"{package}@{version}", "--pack-destination", str(cache), "--silent"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    if proc.returncode != 0 or not path.is_file():
        raise RuntimeError(f"npm pack {package}@{version} failed: {proc.stderr.strip()[-2000:]}")
    return path


def _wanted() -> dict[tuple[str, str], set[str]]:
    """(npm package, version) -> the files of its tarball the dashboard uses."""
    wanted: dict[tuple[str, str], set[str]] = {}
    for asset in ASSETS:
        wanted.setdefault((asset.package, asset.version), set()).add(asset.member)
    for key, extra in EXTRA_MEMBERS.items():
        wanted.setdefault(key, set()).update(extra)
    return wanted


def prefetch(*, cache: Path | None = None) -> list[Path]:
    """Fill the tarball cache (npm pack once per package) so later publishes run offline;
    return the cached tarballs. scripts/setup.sh calls it on a fresh machine."""
    cache = cache_dir() if cache is None else Path(cache)
    return [_tarball(package, version, cache) for package, version in sorted(_wanted())]


def fetch_assets(html_dir: str | os.PathLike, *, cache: Path | None = None) -> list[Path]:
    """Unpack every asset (and the files they reference) into html_dir/vendor/; return them."""
    cache = cache_dir() if cache is None else Path(cache)
    written = []
    for (package, version), members in sorted(_wanted().items()):
        path = _tarball(package, version, cache)
        try:
            written += _unpack(path, package, version, sorted(members), Path(html_dir))
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            # A cached file counts as cached: say which one, or every later run fails alike.
            raise RuntimeError(
                f"corrupt cached tarball {path} ({type(exc).__name__}: {exc}); delete it and "
                "run again (it is fetched anew with npm)") from exc
    return written


def _unpack(path: Path, package: str, version: str, members: list[str],
            html_dir: Path) -> list[Path]:
    """Write `members` of the npm tarball at `path` under html_dir/vendor/package/."""
    written = []
    with tarfile.open(path, "r:gz") as tar:
        for member in members:
            try:
                data = tar.extractfile(f"package/{member}")
            except KeyError:
                data = None
            if data is None:
                raise RuntimeError(f"{package}@{version} has no file {member}")
            target = html_dir / VENDOR_DIR / package / member
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data.read())
            written.append(target)
    return written


def rewrite_html(text: str) -> str:
    """Point every CDN <script>/<link> at its vendor/ copy; raise on a URL not in ASSETS."""
    by_url = {asset.url: asset.local for asset in ASSETS}

    def fix_tag(match: re.Match) -> str:
        tag = match.group(0)
        url_match = _URL_ATTR.search(tag)
        if url_match is None:
            return tag
        url = url_match.group(3)
        if url not in by_url:
            if tag.lower().startswith("<link") and "stylesheet" not in tag.lower():
                return tag  # e.g. rel="alternate" feeds: not loaded by the page
            raise RuntimeError(
                f"asv's HTML loads {url}, which kvbench.history.dashboard.publish "
                "does not vendor: add it to ASSETS")
        tag = tag.replace(url_match.group(0), f'{url_match.group(1)}="{by_url[url]}"')
        return _DROP_ATTRS.sub("", tag)

    return _TAG.sub(fix_tag, text)


def vendor_dashboard(html_dir: str | os.PathLike, *, cache: Path | None = None) -> list[Path]:
    """Fetch the assets into html_dir/vendor and rewrite every .html file; return those files."""
    html_dir = Path(html_dir)
    if not (html_dir / "index.html").is_file():
        raise ValueError(f"html_dir must hold an asv-published index.html; {html_dir} does not")
    fetch_assets(html_dir, cache=cache)
    changed = []
    for page in sorted(html_dir.glob("*.html")):
        text = page.read_text(encoding="utf-8")
        new = rewrite_html(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(page)
    return changed


def html_dir_of(config: str | os.PathLike) -> Path:
    """html_dir from asv.conf.json, resolved against the config's folder as asv does."""
    from asv.config import Config

    conf_path = Path(config).resolve()
    conf = Config.load(str(conf_path))
    return (conf_path.parent / conf.html_dir).resolve()


def results_dir_of(config: str | os.PathLike) -> Path:
    """results_dir from asv.conf.json, resolved against the config's folder as asv does."""
    from asv.config import Config

    conf_path = Path(config).resolve()
    conf = Config.load(str(conf_path))
    return (conf_path.parent / conf.results_dir).resolve()


def check_regressions_config(config: str | os.PathLike) -> None:
    """ValueError when asv's regressions page would judge a GB/s series bigger-is-worse."""
    from asv.config import Config

    from kvbench.history.verdict.page import check_asv_config
    from kvbench.history.verdict.results import load_benchmarks

    conf = Config.load(str(Path(config).resolve()))
    check_asv_config(conf, load_benchmarks(results_dir_of(config)))


def add_regressions_page(config: str | os.PathLike, html_dir: Path | None = None,
                         results: Path | None = None) -> Path:
    """kvbench's regressions page into html_dir/kvbench/ (default: the config's html_dir),
    linked from the index; its path. `results`: a copy of the config's results_dir to read
    (publish's snapshot, the one its graphs are built from), placed on the repository's
    history all the same."""
    from kvbench.history.verdict.page import link_from_index, write_page

    html_dir = html_dir_of(config) if html_dir is None else Path(html_dir)
    live = results_dir_of(config)
    # git runs in the live results folder (inside the repository), the copy being elsewhere
    page = write_page(html_dir, live if results is None else results, repo=live)
    index = html_dir / "index.html"
    index.write_text(link_from_index(index.read_text(encoding="utf-8")), encoding="utf-8")
    return page


#: Path keys of asv.conf.json, resolved against the config's folder in the staging config.
_PATH_KEYS = ("repo", "benchmark_dir", "results_dir", "html_dir", "env_dir")


def fold_host_keys(result: dict, record: dict) -> bool:
    """Give one result's params the machine record's values for HOST_KEYS (in place); True
    when anything changed. Hosts of one machine kind (one GPU or two of the same model) differ
    in num_cpu and ram, and every boot in its kernel build: asv draws one line per distinct params,
    so unfolded they split one machine kind into several lines."""
    from kvbench.history.asv.machine import HOST_KEYS

    params = result.get("params")
    if not isinstance(params, dict):
        return False
    changed = False
    for key in HOST_KEYS:
        if key in params and key in record and params[key] != record[key]:
            params[key] = record[key]
            changed = True
    return changed


def stage_results(results_dir: Path, staging: Path) -> list[str]:
    """Copy results_dir to staging with each machine's results folded onto its record
    (results/<machine>/machine.json); the stored files are never touched. Returns the
    machines whose record has a GPU (the dashboard's default selection; all if none)."""
    import json

    if staging.exists():
        shutil.rmtree(staging)
    shutil.copytree(results_dir, staging)
    gpu_machines, machines = [], []
    for record_path in sorted(staging.glob("*/machine.json")):
        record = json.loads(record_path.read_text(encoding="utf-8"))
        machines.append(record.get("machine", record_path.parent.name))
        if record.get("gpu") not in (None, "", "n/a", "unknown"):
            gpu_machines.append(machines[-1])
        for path in record_path.parent.glob("*.json"):
            if path.name == "machine.json":
                continue
            try:
                result = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                continue  # asv publish reports a broken result file itself
            if fold_host_keys(result, record):
                path.write_text(json.dumps(result), encoding="utf-8")
    return gpu_machines or machines


#: asv's default machine selection (every machine) and kvbench's replacement: the machines
#: publish() lists in index.json's kvbench_default_machines (GPU machines first: a CPU run
#: of GPU kernels only proves the suite runs). A URL that names machines still wins.
_ALL_MACHINES_JS = """            state = {};
            state.machine = index.params.machine;

            $.each(index.params, function(param, values) {
                state[param] = values;"""
_DEFAULT_MACHINES_JS = """            state = {};
            state.machine = index.params.machine;

            $.each(index.params, function(param, values) {
                state[param] = values;
                if (param == 'machine' && index.kvbench_default_machines) {
                    state[param] = index.kvbench_default_machines.slice();
                }"""


def set_default_machines(html_dir: Path, machines: list[str]) -> None:
    """Make the published dashboard open with `machines` selected (index.json + the one
    line of graphdisplay.js that picks the default); raise if asv's script changed."""
    import json

    index_path = html_dir / "index.json"
    index = json.loads(index_path.read_text(encoding="utf-8"))
    known = index.get("params", {}).get("machine", [])
    index["kvbench_default_machines"] = [m for m in machines if m in known] or known
    index_path.write_text(json.dumps(index), encoding="utf-8")
    script = html_dir / "graphdisplay.js"
    text = script.read_text(encoding="utf-8")
    if _DEFAULT_MACHINES_JS in text:
        return
    if _ALL_MACHINES_JS not in text:
        raise RuntimeError(f"{script}: asv's default-selection code changed; update "
                           "kvbench.history.dashboard.publish._ALL_MACHINES_JS")
    script.write_text(text.replace(_ALL_MACHINES_JS, _DEFAULT_MACHINES_JS), encoding="utf-8")


#: asv 0.6.6's graphdisplay.js writes each git tag's name into the graph as HTML, so a tag
#: named like an <img onerror=...> element runs script in the dashboard. kvbench's copy puts
#: the name in as a text node instead (jQuery's .text()).
_TAG_AS_HTML_JS = ("""                    graph_div.append(
                        "<div style='position:absolute;" +
                            "left:" + p.left + "px;" +
                            "top: -2ex;" +
                            "color:#666;background:white;padding-left:0.25em;"""
                   """font-size:smaller;'>" + tag + "</div>");""")
_TAG_AS_TEXT_JS = """                    graph_div.append(
                        $("<div style='position:absolute;" +
                            "left:" + p.left + "px;" +
                            "top: -2ex;" +
                            "color:#666;background:white;padding-left:0.25em;font-size:smaller;'></div>").text(tag));"""


def escape_tag_names(html_dir: Path) -> None:
    """Make graphdisplay.js show git tag names as text, never as markup; raise if asv's
    tag-drawing code changed (an unpatched copy would stay injectable)."""
    script = Path(html_dir) / "graphdisplay.js"
    text = script.read_text(encoding="utf-8")
    if _TAG_AS_TEXT_JS in text and _TAG_AS_HTML_JS not in text:
        return
    if text.count(_TAG_AS_HTML_JS) != 1:
        raise RuntimeError(f"{script}: asv's tag-drawing code changed; update "
                           "kvbench.history.dashboard.publish._TAG_AS_HTML_JS")
    script.write_text(text.replace(_TAG_AS_HTML_JS, _TAG_AS_TEXT_JS), encoding="utf-8")


def lock_file_of(config: str | os.PathLike) -> Path:
    """The lock every publish of `config` holds: kvbench-publish.lock beside asv's env_dir
    (.asv/, ignored by git), so it never lands in the repository's tree."""
    from asv.config import Config

    conf_path = Path(config).resolve()
    env_dir = (conf_path.parent / Config.load(str(conf_path)).env_dir).resolve()
    return env_dir.parent / "kvbench-publish.lock"


def staged_config(config: str | os.PathLike, results_dir: Path, html_dir: Path) -> dict:
    """asv.conf.json of `config` with its path keys absolute (asv reads them relative to its
    working directory, and the staged copy lives in a temporary folder) and results_dir /
    html_dir replaced by the staged results and the build folder."""
    from asv import util

    conf_path = Path(config).resolve()
    raw = util.load_json(str(conf_path), js_comments=True)
    for key in _PATH_KEYS:
        if key in raw:
            raw[key] = str((conf_path.parent / raw[key]).resolve())
    raw["results_dir"] = str(results_dir)
    raw["html_dir"] = str(html_dir)
    return raw


def run_asv_publish(staged_conf: Path, cwd: Path, asv_args: list[str] | None) -> None:
    """`asv publish --config staged_conf`, run from the real config's folder (asv imports a
    plugin named with a leading dot from its working directory)."""
    cmd = [sys.executable, "-m", "asv", "publish", "--config", str(staged_conf), *(asv_args or [])]
    subprocess.run(cmd, check=True, cwd=cwd)


def check_replaceable(html_dir: Path) -> None:
    """ValueError unless `html_dir` is absent, empty, or a dashboard (its index.html): a
    publish replaces the folder whole, so any other folder's files would be lost (asv's own
    publish empties it too)."""
    if html_dir.exists() and not html_dir.is_dir():
        raise ValueError(f"{html_dir} is a file, not a folder for the dashboard")
    if html_dir.is_dir() and any(html_dir.iterdir()) and not (html_dir / "index.html").is_file():
        raise ValueError(f"{html_dir} holds files but no dashboard (index.html): a publish "
                         "replaces the folder whole; move them or name another folder")


def publish(config: str | os.PathLike = "asv.conf.json", asv_args: list[str] | None = None,
            html_dir: str | os.PathLike | None = None) -> Path:
    """Rewrite results/benchmarks.json from the suite (kvbench.history.asv.suite: asv publish
    shows only the series it lists), run `asv publish` for `config` on a staged copy of the
    results with host keys folded (one line per machine kind; stage_results), then open it
    on the GPU machines, show git tag names as text (escape_tag_names) and vendor the
    dashboard's assets; return html_dir (the config's, or `html_dir`; check_replaceable).

    The dashboard is built in a work folder and renamed over html_dir only when every step
    succeeded (kvbench.history.dashboard.swap), under the config's publish lock: a failed or
    interrupted publish leaves the previous dashboard as it was, the staged config and
    results live in a temporary folder outside the repository, and two publishes at once
    run one after the other."""
    import json
    import tempfile

    from kvbench.history.asv import suite
    from kvbench.history.dashboard import swap

    conf_path = Path(config).resolve()
    html_dir = Path(html_dir).resolve() if html_dir is not None else html_dir_of(config)
    check_replaceable(html_dir)
    results = results_dir_of(config)
    if not any(results.glob("*/machine.json")):
        raise ValueError(f"{results} holds no machine's results (no <machine>/machine.json): "
                         "nothing to publish; the dashboard is left as it was")
    with swap.locked(lock_file_of(config)):
        suite.write(config)  # first: the check reads the suite's units from it
        check_regressions_config(config)
        with tempfile.TemporaryDirectory(prefix="kvbench-publish-") as tmp, \
                swap.building(html_dir) as build:
            # One snapshot of the results for the graphs and the regressions page alike: a
            # `kvbench record` writing during asv publish must not put on the page a commit
            # the graphs do not show.
            snapshot = Path(tmp) / "snapshot"
            shutil.copytree(results, snapshot)
            staging = Path(tmp) / "results"
            default_machines = stage_results(snapshot, staging)
            staged_conf = Path(tmp) / "asv.conf.json"
            staged_conf.write_text(json.dumps(staged_config(config, staging, build)),
                                   encoding="utf-8")
            run_asv_publish(staged_conf, conf_path.parent, asv_args)
            set_default_machines(build, default_machines)
            escape_tag_names(build)
            vendor_dashboard(build)
            add_regressions_page(config, build, results=snapshot)
    return html_dir


def vendor_only(config: str | os.PathLike = "asv.conf.json") -> Path:
    """Vendor the assets of an already published html_dir and add kvbench's regressions page,
    on a copy swapped in like publish()'s build; return html_dir."""
    from kvbench.history.dashboard import swap

    html_dir = html_dir_of(config)
    if not (html_dir / "index.html").is_file():
        raise ValueError(f"html_dir must hold an asv-published index.html; {html_dir} does not")
    with swap.locked(lock_file_of(config)), swap.building(html_dir) as build:
        shutil.copytree(html_dir, build, symlinks=True)
        escape_tag_names(build)
        vendor_dashboard(build)
        add_regressions_page(config, build)
    return html_dir


def serve(html_dir: Path, port: int = 8080, host: str = "127.0.0.1") -> None:
    """Serve html_dir on host:port until Ctrl-C (the dashboard loads its JSON over HTTP; from
    a file:// URL the browser refuses it and asv shows "Error fetching content")."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    if not (html_dir / "index.html").is_file():
        raise ValueError(f"{html_dir} holds no published dashboard: run `kvbench publish` first")
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(html_dir))
    with ThreadingHTTPServer((host, port), handler) as server:
        print(f"dashboard: http://{host}:{server.server_address[1]}/  (serving {html_dir}; "
              "Ctrl-C stops)", flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
