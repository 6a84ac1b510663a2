"""`kvbench preview [--config asv.conf.json] [--port 8080]`: serve the published dashboard on
127.0.0.1 (kvbench.history.dashboard.publish.serve)."""

from __future__ import annotations

import sys

from kvbench.history import command

NAME = "preview"
HELP = "serve the published dashboard on 127.0.0.1 and print its URL"
DESCRIPTION = "Serve the published dashboard on 127.0.0.1 and print its URL."


def add_arguments(parser) -> None:
    command.add_config_argument(parser, " whose html_dir to serve")
    parser.add_argument("--port", type=int, default=8080,
                        help="port on 127.0.0.1 (default: %(default)s; 0 picks a free one)")


def run(args) -> int:
    """Serve until Ctrl-C; exit 2 on a bad port or no published dashboard."""
    if not 0 <= args.port <= 65535:
        args.parser.error(f"--port must be 0-65535, got {args.port}")
    command.check_config(args)
    from kvbench.history.dashboard.publish import html_dir_of, serve

    try:
        serve(html_dir_of(args.config), args.port)
    except (ValueError, OSError) as exc:
        args.parser.error(str(exc))
    return 0


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
