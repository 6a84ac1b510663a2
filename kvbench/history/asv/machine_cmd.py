"""`kvbench machine [--name NAME] [--file PATH]`: write this machine's asv record and print it
(kvbench.history.asv.machine says what the record holds and how it is named)."""

from __future__ import annotations

import sys

from kvbench.history import command

NAME = "machine"
HELP = "write the asv machine record from code ([--name NAME] [--file PATH])"
DESCRIPTION = "Write this machine's asv record (asv's keys + GPU, driver, torch, triton)."


def add_arguments(parser) -> None:
    parser.add_argument("--name", default=None, type=command.machine_name,
                        help="entry name (default: from the GPU, e.g. h200, or cpu-<model>)")
    parser.add_argument("--file", default=None,
                        help="machine file (default: ~/.asv-machine.json, the one asv reads)")


def run(args) -> int:
    """Write the entry; print it, and the file on stderr. Exit 2 on a bad name or file."""
    import json

    from kvbench.history.asv.machine import machine_file_path, write_machine_record

    try:
        record = write_machine_record(args.name, args.file)
    except (ValueError, OSError) as exc:
        args.parser.error(str(exc))
    except Exception as exc:  # noqa: BLE001 - asv's own errors on a malformed machine file
        args.parser.error(f"{args.file or machine_file_path()}: {type(exc).__name__}: {exc}")
    target = args.file or machine_file_path()
    print(json.dumps(record, indent=2, sort_keys=True))
    print(f"wrote {target}; use: asv run --machine {record['machine']} ...", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
