"""`kvbench publish [--config asv.conf.json] [--html-dir DIR] [--vendor-only] [--prefetch]
[asv publish args...]`: asv publish, the offline assets and kvbench's regressions page
(kvbench.history.dashboard.publish).

Options it does not know go to `asv publish` (a range, --no-pull, --verbose). `--html-dir`
(asv's `-o`) is kvbench's: the dashboard is built aside and swapped in there, and a folder
holding anything but a dashboard is refused (asv publish would empty it).
"""

from __future__ import annotations

import subprocess
import sys

from kvbench.history import command

NAME = "publish"
HELP = "asv publish + local dashboard assets (renders offline)"
DESCRIPTION = "asv publish, then vendor jQuery/flot/bootstrap so html/ renders offline."
FORWARDS_UNKNOWN = True


def add_arguments(parser) -> None:
    command.add_config_argument(parser)
    parser.add_argument("--html-dir", "-o", default=None, metavar="DIR",
                        help="the folder the dashboard replaces (default: the config's "
                             "html_dir); absent, empty or an earlier dashboard")
    parser.add_argument("--vendor-only", action="store_true",
                        help="skip `asv publish`; only vendor an already published html/")
    parser.add_argument("--prefetch", action="store_true",
                        help="only fill the npm tarball cache (needs npm once), then exit")


def run(args) -> int:
    """Publish (or only vendor, or only prefetch); print where the dashboard is."""
    from kvbench.history.dashboard.publish import (
        VENDOR_DIR,
        cache_dir,
        prefetch,
        publish,
        vendor_only,
    )

    try:
        if args.prefetch:
            tarballs = prefetch()
            print(f"dashboard assets cached: {len(tarballs)} npm tarballs in {cache_dir()}")
            return 0
        command.check_config(args)
        if args.vendor_only:
            if args.html_dir:
                raise ValueError("--vendor-only works on the config's html_dir; drop "
                                 "--html-dir")
            html_dir = vendor_only(args.config)
        else:
            html_dir = publish(args.config, args.rest, html_dir=args.html_dir)
    except ValueError as exc:
        args.parser.error(str(exc))
    except subprocess.CalledProcessError as exc:
        print(f"kvbench publish: asv publish failed (exit {exc.returncode}; its output is "
              "above); the previous dashboard is as it was", file=sys.stderr)
        return 1
    except (RuntimeError, OSError) as exc:
        print(f"kvbench publish: {exc} (the previous dashboard is as it was)", file=sys.stderr)
        return 1
    print(f"dashboard: {html_dir}/index.html (offline assets in {html_dir / VENDOR_DIR}; "
          f"regressions: {html_dir}/kvbench/regressions.html); serve it with `kvbench preview` "
          "(opened from disk it shows \"Error fetching content\")")
    return 0


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
