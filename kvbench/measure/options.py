"""The command lines of `kvbench table` and `kvbench tune`, declared once.

kvbench.cli builds its subcommands' parsers from here so `kvbench table --help` answers without
importing torch or a kernel; kvbench.measure.table and kvbench.measure.tune parse their argv
with the same declarations. Nothing here may import torch (tests/test_cli.py checks).
"""

from __future__ import annotations

import argparse

from kvbench.core.jsonfile import output_path
from kvbench.ops.decode_geometry import GEOMETRIES
from kvbench.ops.keys import BUCKETS

#: The ops a table or a tune run measures, in the registry's order.
OPS = tuple(BUCKETS)


def add_table_arguments(p: argparse.ArgumentParser) -> None:
    """`kvbench table OP [--json PATH] [--grid] [--no-ablations] [--geometry NAME] [--plot
    PATH] [--kernel-time]`."""
    p.add_argument("op", choices=OPS)
    p.add_argument("--json", dest="json_path", type=output_path, default=None, metavar="PATH",
                   help="also write the rows (and skipped rows, checks, floors) as JSON (the "
                        "path is checked before measuring)")
    p.add_argument("--grid", action="store_true",
                   help="paged_decode: the full batch x context grid")
    p.add_argument("--no-ablations", action="store_true",
                   help="paged_decode: skip the layout/storage/L2 ablation rows")
    p.add_argument("--geometry", metavar="NAME", default=None,
                   help="paged_decode: every row, auto and the peers at a model geometry "
                        f"instead (one of {', '.join(GEOMETRIES)}; or all)")
    p.add_argument("--plot", metavar="PATH", type=output_path, default=None,
                   help="also draw the rows' GB/s against the spec peak and the measured "
                        "ceiling, per case (PNG/SVG/PDF by suffix; not kv_alloc)")
    p.add_argument("--kernel-time", action="store_true",
                   help="beside every GPU row, its CUPTI kernel time (the time its "
                        "kernels ran, no launch gaps); needs a CUDA device")


def add_tune_arguments(p: argparse.ArgumentParser) -> None:
    """`kvbench tune OP [--device D] [--dtype T] [--storage S]`."""
    p.add_argument("op", choices=OPS)
    p.add_argument("--device", default=None, help="torch device (default: cuda if present)")
    p.add_argument("--dtype", default=None,
                   help="KV dtype to measure at (default: the op's; any its rows serve)")
    p.add_argument("--storage", default=None,
                   help="paged pool storage for paged_decode / kv_write (default: combined)")
