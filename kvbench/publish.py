"""`kvbench publish`: `asv publish`, then make the dashboard render with no internet.

asv 0.6.6's index.html loads jQuery, flot (+ plugins), stupidtable, blueimp-md5 and bootstrap
from public CDNs, so on the machines that hold kvbench results (an air-gapped GPU box, a CI
runner) the published page renders blank. After asv writes html/, this module fetches the
same libraries at the same versions from the npm registry with the ordinary client
(`npm pack <pkg>@<version>`), unpacks the files asv references into html/vendor/<pkg>/ and
rewrites the <script>/<link> tags to point there. Nothing is committed: the tarballs are
cached per user (platformdirs cache dir, or KVBENCH_NPM_CACHE), so one fetch serves every
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
dashboard's Regressions tab there (kvbench.history.regressions_page).
"""

from __future__ import annotations

import argparse
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
    """Where npm tarballs are kept between publishes: KVBENCH_NPM_CACHE or the user cache."""
    override = os.environ.get("KVBENCH_NPM_CACHE")
    if override:
        return Path(override)
    import platformdirs

    return Path(platformdirs.user_cache_dir("kvbench")) / "npm"


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


def fetch_assets(html_dir: str | os.PathLike, *, cache: Path | None = None) -> list[Path]:
    """Unpack every asset (and the files they reference) into html_dir/vendor/; return them."""
    cache = cache_dir() if cache is None else Path(cache)
    wanted: dict[tuple[str, str], set[str]] = {}
    for asset in ASSETS:
        wanted.setdefault((asset.package, asset.version), set()).add(asset.member)
    for key, extra in EXTRA_MEMBERS.items():
        wanted.setdefault(key, set()).update(extra)
    written = []
    for (package, version), members in sorted(wanted.items()):
        path = _tarball(package, version, cache)
        try:
            written += _unpack(path, package, version, sorted(members), Path(html_dir))
        except (tarfile.TarError, EOFError, zlib.error) as exc:
            # A cached file counts as cached: say which one, or every later run fails alike.
            raise RuntimeError(
                f"corrupt cached tarball {path} ({type(exc).__name__}: {exc}); delete it and "
                "run again (it is fetched anew with npm)") from exc
    return written


def _unpack(path: Path, package: str, version: str, members: list[str], html_dir: Path) -> list[Path]:
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
                f"asv's HTML loads {url}, which kvbench.publish does not vendor: add it to ASSETS")
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
    import json

    from asv.config import Config

    from kvbench.history.regressions_page import check_asv_config

    conf = Config.load(str(Path(config).resolve()))
    benchmarks_file = results_dir_of(config) / "benchmarks.json"
    benchmarks = json.loads(benchmarks_file.read_text(encoding="utf-8")) \
        if benchmarks_file.is_file() else {}
    check_asv_config(conf, benchmarks)


def add_regressions_page(config: str | os.PathLike) -> Path:
    """kvbench's regressions page into html_dir/kvbench/, linked from the index; its path."""
    from kvbench.history.regressions_page import link_from_index, write_page

    html_dir = html_dir_of(config)
    page = write_page(html_dir, results_dir_of(config))
    index = html_dir / "index.html"
    index.write_text(link_from_index(index.read_text(encoding="utf-8")), encoding="utf-8")
    return page


def publish(config: str | os.PathLike = "asv.conf.json", asv_args: list[str] | None = None) -> Path:
    """`asv publish` for `config`, the vendored assets, kvbench's regressions page; html_dir."""
    check_regressions_config(config)
    cmd = [sys.executable, "-m", "asv", "publish", "--config", str(config), *(asv_args or [])]
    subprocess.run(cmd, check=True)
    html_dir = html_dir_of(config)
    vendor_dashboard(html_dir)
    add_regressions_page(config)
    return html_dir


def main(argv: list[str] | None = None) -> int:
    """CLI: `kvbench publish [--config asv.conf.json] [--vendor-only] [asv publish args...]`."""
    parser = argparse.ArgumentParser(
        prog="kvbench publish",
        description="asv publish, then vendor jQuery/flot/bootstrap so html/ renders offline.",
    )
    parser.add_argument("--config", default="asv.conf.json",
                        help="asv config (default: %(default)s)")
    parser.add_argument("--vendor-only", action="store_true",
                        help="skip `asv publish`; only vendor an already published html/")
    args, rest = parser.parse_known_args(argv)
    try:
        if args.vendor_only:
            html_dir = html_dir_of(args.config)
            vendor_dashboard(html_dir)
            add_regressions_page(args.config)
        else:
            html_dir = publish(args.config, rest)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"dashboard: {html_dir}/index.html (offline assets in {html_dir / VENDOR_DIR}; "
          f"regressions: {html_dir}/kvbench/regressions.html); "
          f"serve it with `asv preview` or `python -m http.server -d {html_dir}`")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
