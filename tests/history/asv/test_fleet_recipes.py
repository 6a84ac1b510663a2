"""The fleet recipes of docs/fleet/ are the ones the code reads: the GitHub Actions matrix and
the Kubernetes Indexed Job name their shards the way `kvbench record --shard` resolves them,
and their commands are ones `kvbench record` / `kvbench merge` parse. (The Slurm script is run
for real by tests/e2e/test_fleet_e2e.py.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import yaml

from kvbench.history import command
from kvbench.history.asv import fleet, merge_cmd, record_cmd

FLEET = Path(__file__).resolve().parents[3] / "docs" / "fleet"


def _parse(module, argv):
    return command.build_parser(module).parse_args(argv)


def test_the_github_workflow_shards_and_merges():
    flow = yaml.safe_load((FLEET / "github-actions.yml").read_text())
    record, merge = flow["jobs"]["record"], flow["jobs"]["merge"]
    shards = record["strategy"]["matrix"]["shard"]
    assert merge["needs"] == "record"
    runs = [s["run"] for s in record["steps"] if "run" in s]
    line = next(r for r in runs if r.startswith("kvbench record"))
    count = int(re.search(r"--shard \$\{\{ matrix\.shard \}\}/(\d+)", line).group(1))
    assert shards == list(range(count))
    for shard in shards:  # each matrix job as GitHub expands it
        argv = shlex.split(line.replace("${{ matrix.shard }}", str(shard))
                           .replace("${{ inputs.range }}", "HEAD~200..HEAD"))[2:]
        args = _parse(record_cmd, argv)
        assert fleet.resolve_shard(args.shard, {}) == fleet.Shard(shard, count, "--shard")
    upload = next(s for s in record["steps"] if s.get("uses", "").startswith(
        "actions/upload-artifact"))
    assert upload["with"]["path"] == f"results-shard-${{{{ matrix.shard }}}}-of-{count}"
    assert fleet.shard_results_dir(Path("results"), fleet.Shard(3, count, "t")).name == \
        upload["with"]["path"].replace("${{ matrix.shard }}", "3")
    download = next(s for s in merge["steps"] if s.get("uses", "").startswith(
        "actions/download-artifact"))
    assert download["with"]["pattern"] == "results-shard-*"
    merge_line = next(s["run"] for s in merge["steps"] if s.get("run", "").startswith(
        "kvbench merge"))
    args = _parse(merge_cmd, shlex.split(merge_line)[2:])
    assert args.sources == [f"{download['with']['path']}/*"] and args.into == "results"


def test_the_kubernetes_indexed_job_takes_its_index_from_the_job():
    job = yaml.safe_load((FLEET / "k8s-indexed-job.yaml").read_text())
    spec = job["spec"]
    assert job["kind"] == "Job" and spec["completionMode"] == "Indexed"
    container = spec["template"]["spec"]["containers"][0]
    argv = container["command"]
    assert argv[:4] == ["python3", "-m", "kvbench.cli", "record"]
    args = _parse(record_cmd, argv[4:])
    assert int(args.shard) == spec["completions"] >= spec["parallelism"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    for index in range(spec["completions"]):  # what each pod resolves
        env = {"JOB_COMPLETION_INDEX": str(index)}
        shard = fleet.resolve_shard(args.shard, env)
        assert (shard.index, shard.count) == (index, spec["completions"])
        folder = args.results_dir.replace("$(JOB_COMPLETION_INDEX)", str(index))
        assert Path(folder).name == fleet.shard_results_dir(Path("results"), shard).name
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert any(args.results_dir.startswith(m + "/") for m in mounts)
