"""The command line every GPU experiment script shares (ablate_flush, ablate_split_decode,
sweep_page_read): ``--json PATH`` and ``--rounds N``, checked, then the run's metadata and
the CUDA device. One place, so each script's ``main`` is only its experiment."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence

import torch

from kvbench.core.jsonfile import output_path, write_json_atomic
from kvbench.harness import metadata


def experiment_parser(doc: str | None, *, rounds: int) -> argparse.ArgumentParser:
    """A parser with --json (the results, written atomically as they come) and --rounds."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--json", default=None, metavar="PATH", type=output_path,
                        help="write the results here (atomically, after each step)")
    parser.add_argument("--rounds", type=int, default=rounds)
    return parser


def start_experiment(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None,
    check: Callable[[argparse.Namespace], None] | None = None,
) -> tuple[argparse.Namespace, dict, torch.device] | None:
    """Parse and validate (--rounds >= 1, then `check`, which calls parser.error), then the
    metadata and the current CUDA device; None (after saying why) without a CUDA device."""
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if check is not None:
        check(args)
    if not torch.cuda.is_available():
        print(f"{parser.prog} needs a CUDA device", file=sys.stderr)
        return None
    meta = metadata()  # device, versions, commit, command: the JSON stands on its own
    return args, meta, torch.device("cuda", torch.cuda.current_device())


@contextlib.contextmanager
def cluster_library(path: str | None) -> Iterator[None]:
    """cuda/cluster_decode launched through the build at ``path`` (None: this tree's), e.g. an
    older commit's, so two versions of the kernel are timed in one call."""
    from kvbench.kernels import paged_decode_cluster as pdc

    if path is None:
        yield
        return
    saved = pdc._library
    # Older builds predate kvb_constant (the mirrored-constants check).
    pdc._library = functools.cache(
        lambda: pdc.configure_library(ctypes.CDLL(path), check_constants=False))
    try:
        yield
    finally:
        pdc._library = saved


def called_under(context: Callable[[], contextlib.AbstractContextManager], fn: Callable):
    """``fn`` with each call made inside a fresh ``context()``."""

    def call(*args, **kw):
        with context():
            return fn(*args, **kw)

    return call


def add_cluster_lib_option(parser: argparse.ArgumentParser) -> None:
    """--cluster-lib LABEL=PATH (repeatable): another build of cluster_decode.cu to time."""
    parser.add_argument("--cluster-lib", action="append", default=[], metavar="LABEL=PATH",
                        help="another build of cluster_decode.cu to time beside this tree's")


def parse_cluster_libs(parser: argparse.ArgumentParser, specs: Sequence[str]) -> dict[str, str]:
    """--cluster-lib LABEL=PATH values as {label: path} (parser.error on a malformed one)."""
    for spec in specs:
        if "=" not in spec:
            parser.error(f"--cluster-lib wants LABEL=PATH, got {spec!r}")
    return dict(spec.split("=", 1) for spec in specs)


def run_rounds(
    rounds: int, cases: Sequence[tuple], key: Callable[[tuple], str],
    run: Callable[[tuple], dict], json_path: str | None, meta: dict,
) -> dict[str, list[dict]]:
    """Every case once per round, in order (so drift hits every case alike): {key(case): [one
    dict per round]}. With json_path the results so far are written after each case (atomic:
    an interrupted run keeps what it measured)."""
    results: dict[str, list[dict]] = {}
    for rnd in range(rounds):
        for case in cases:
            results.setdefault(key(case), []).append(run(case))
            if json_path:
                write_json_atomic(json_path, {"metadata": meta, "results": results}, indent=1)
        print(f"round {rnd} done", flush=True)
    return results


def mean_table(results: dict[str, list[dict]], cols: Sequence[str], width: int,
               extra: Callable[[list[dict]], str] | None = None) -> str:
    """One line per case: the mean over rounds of each column ('-' where the case has none),
    then ``extra(rounds)`` if given."""
    lines = [f"{'case (mean us)':{width}s}" + "".join(f"{c:>{width}s}" for c in cols)]
    for key, rounds in results.items():
        cells = "".join(f"{statistics.mean(r[c] for r in rounds):{width}.2f}"
                        if c in rounds[0] else f"{'-':>{width}s}" for c in cols)
        lines.append(f"{key:{width}s}{cells}{extra(rounds) if extra else ''}")
    return "\n".join(lines)
