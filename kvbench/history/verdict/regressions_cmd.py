"""`kvbench regressions`: which steps in a machine's recorded asv history are real.

    kvbench regressions [--machine M] [--results DIR] [--since REV] [--json PATH]
                        [--fail-on regression|suspect|never] [--plot DIR] [--by commit|series]
                        [--noise-model PATH] [--save-noise-model]

Reads results/<machine>/ (default machine: the name `kvbench machine` gives this host),
orders its commits by the repository's first-parent history, judges every series
(kvbench.history.verdict.regressions) with the machine's stored noise model
(results/<machine>/kvbench/noise-model.json, when there is one) and prints the findings, one
line per culprit commit (or per series). Exit status: 0; 1 with `--fail-on regression` when a
regression is reported (after --since), with `--fail-on suspect` when a regression or a
suspected one is; 2 on bad input. The `kvbench regressions` the CLI runs is
kvbench.history.gate.regressions_cmd: these arguments and parts plus --confirm (a fresh A/B
of each suspect), which needs the measuring room above this one.
"""

from __future__ import annotations

import sys

from kvbench.history import command

NAME = "regressions"
HELP = "real steps in a machine's asv history, direction-aware (CI gate)"
DESCRIPTION = ("Real steps in a machine's asv history: direction-aware, with the noise "
               "estimated from the history itself (docs/verdicts.md).")
FAIL_ON = ("regression", "suspect", "never")


def add_arguments(parser) -> None:
    parser.add_argument("--machine", type=command.machine_name, default=None,
                        help="results/<machine> to read "
                             "(default: this host's `kvbench machine` name)")
    parser.add_argument("--results", default="results",
                        help="asv results directory (default: %(default)s)")
    parser.add_argument("--since", default=None, metavar="REV",
                        help="report only steps after REV (a commit on the first-parent line)")
    parser.add_argument("--json", default=None, metavar="PATH",
                        help="also write the report as JSON (schema kvbench.regressions/3)")
    parser.add_argument("--fail-on", default="never", choices=FAIL_ON,
                        help="exit 1 when a regression (or, with 'suspect', a regression or a "
                             "suspected one at an end of the history) is reported "
                             "(default: %(default)s)")
    parser.add_argument("--by", default="commit", choices=("commit", "series"),
                        help="one line per culprit commit or per series (default: %(default)s)")
    parser.add_argument("--noise-model", default=None, metavar="PATH",
                        help="the machine's noise model to judge short spans with (default: "
                             "results/<machine>/kvbench/noise-model.json when present)")
    parser.add_argument("--save-noise-model", action="store_true",
                        help="store the noise model learned from this history (with the one "
                             "read) for later short spans")
    parser.add_argument("--plot", default=None, metavar="DIR",
                        help="draw each series with a regression into DIR as PNG")


def judge(args):
    """The Verdicts the arguments ask for (ValueError on bad input), the model saved when
    --save-noise-model asks for it."""
    from pathlib import Path

    from kvbench.core import progress
    from kvbench.history.asv.machine import default_machine
    from kvbench.history.asv.repo import repository_of, resolve
    from kvbench.history.verdict import noise_model
    from kvbench.history.verdict.regressions import analyze
    from kvbench.history.verdict.results import load_history

    results = Path(args.results)
    if not results.is_dir():
        raise ValueError(f"--results {results}: not a directory (give the asv results_dir)")
    machine = args.machine or default_machine()
    model_path = Path(args.noise_model) if args.noise_model else \
        noise_model.path_for(results, machine)
    if args.noise_model and not model_path.is_file():
        raise ValueError(f"--noise-model {model_path}: no such file")
    model = noise_model.load(model_path)
    if model is not None and model.machine and model.machine != machine:
        raise ValueError(f"{model_path}: the noise model of machine {model.machine!r}, not "
                         f"{machine!r}: a machine's noise judges only its own history (its "
                         f"model: {noise_model.path_for(results, machine)})")
    with progress.status(f"kvbench regressions {machine}"):
        progress.report(f"loading {results / machine}")
        history = load_history(results, machine)
        since = resolve(repository_of(results), args.since) if args.since else None
        verdicts = analyze(history, since=since, model=model)
    if args.save_noise_model:
        saved = noise_model.save(verdicts.model, noise_model.path_for(results, machine))
        print(f"wrote the noise model of {len(verdicts.model.series)} series to {saved}",
              file=sys.stderr)
    return verdicts


def exit_status(verdicts, fail_on: str) -> int:
    """1 when --fail-on's condition holds, else 0."""
    if fail_on == "regression" and verdicts.regressions:
        return 1
    if fail_on == "suspect" and (verdicts.regressions or
                                 any(f.verdict == "regression" for f in verdicts.suspects)):
        return 1
    return 0


def report(args, verdicts) -> int:
    """Files first (JSON, plots), then the table on stdout; the exit status."""
    from kvbench.core.jsonfile import write_json_atomic
    from kvbench.history.verdict.text import plot_findings, print_table

    # files first: a reader of the table that stops early (| head) must not cost the JSON
    if args.json_path is not None:
        write_json_atomic(args.json_path, verdicts.to_json(), indent=1)
        print(f"wrote {args.json_path}", file=sys.stderr)
    if args.plot:
        written = plot_findings(verdicts, args.plot)
        print(f"wrote {len(written)} plots to {args.plot}", file=sys.stderr)
    print_table(verdicts, by=args.by)
    return exit_status(verdicts, args.fail_on)


def check_outputs(args) -> None:
    """Check --json and --plot before any work (ValueError naming the argument)."""
    from pathlib import Path

    from kvbench.core.jsonfile import check_writable

    args.json_path = check_writable(args.json) if args.json else None
    if args.plot:
        _check_plot_dir(Path(args.plot))


def run(args) -> int:
    """Judge the history; files first (JSON, plots), then the table on stdout."""
    try:
        check_outputs(args)
        verdicts = judge(args)
    except ValueError as exc:
        args.parser.error(str(exc))
    return report(args, verdicts)


def _check_plot_dir(path) -> None:
    """ValueError unless --plot names a folder that exists or can be made, and takes files."""
    from kvbench.core.jsonfile import check_writable

    if path.exists() and not path.is_dir():
        raise ValueError(f"--plot {path}: exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"--plot {path}: cannot create it ({exc.strerror})") from None
    check_writable(path / "plot.png")


def main(argv: list[str] | None = None) -> int:
    return command.main(sys.modules[__name__], argv)


if __name__ == "__main__":
    raise SystemExit(main())
