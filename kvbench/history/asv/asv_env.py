"""asv environment plugin: one virtualenv per Python over the interpreter that runs asv.

Why a plugin. kvbench is benchmarked on machines with no route to PyPI (the H200 box, CI
runners behind a proxy) and its heavy dependencies (torch, triton, numpy, CUDA wheels) are
already installed in the interpreter that runs asv. asv 0.6.6's own environment types cannot
use them: `virtualenv` builds an isolated env and pip-installs the matrix from an index,
`existing` refuses commit ranges and never reinstalls the project, and asv strips
PYTHONPATH from every command it runs. This plugin (environment_type "kvbench-offline")
keeps asv's virtualenv machinery (one env, the project's wheel rebuilt and
force-reinstalled per commit) and changes two things:

1. After creating the venv it writes `zz-kvbench-parent.pth` into the env's site-packages,
   listing the parent interpreter's site-packages directories. Path lines in a .pth are
   *appended* to sys.path, so the env's own site-packages stays first: the kvbench wheel of
   the measured commit wins over any kvbench (editable or not) in the parent, while
   torch/triton/numpy/asv_runner/pympler/build resolve from the parent. Plain path lines do
   not execute the parent's own .pth files, so a parent's editable-install hook for kvbench
   never activates inside the env.
2. It installs only the requirements asv asks for (wheel, pip, build, asv_runner, pympler,
   the [build-system].requires) that the env cannot already import, so with
   PIP_NO_INDEX=1 nothing is downloaded. `wheel` is skipped when absent: setuptools >= 70.1
   builds wheels itself, and asv.conf.json builds with
   `pip wheel --no-deps --no-build-isolation --no-index`, which never needs the `wheel`
   package. Anything else missing is installed with pip as asv would (which works offline
   only through PIP_FIND_LINKS) and fails with a message naming the package.

Usage (asv.conf.json): "plugins": [".kvbench.history.asv.asv_env"], "environment_type":
"kvbench-offline". The leading dot matters: asv 0.6.6 imports a dotted plugin name from the
directory holding asv.conf.json and looks a plain name up only inside asv.plugins, where
"kvbench.history.asv.asv_env" would be silently ignored (asv/plugin_manager.py, import_plugin).
"""

from __future__ import annotations

import json
import os
import re
import sys

from asv import environment, util
from asv.console import log
from asv.plugins.virtualenv import Virtualenv

TOOL_NAME = "kvbench-offline"
PTH_NAME = "zz-kvbench-parent.pth"

#: Requirements asv adds that the offline build does not need when they are absent.
_OPTIONAL = {"wheel"}

# Runs inside an interpreter and prints the directories a .pth should append: the
# site-packages/dist-packages entries of its sys.path, in order (venv, system, user).
_SITE_DIRS_SCRIPT = (
    "import json, os, sys;"
    "print(json.dumps([p for p in sys.path if os.path.basename(p.rstrip(os.sep))"
    " in ('site-packages', 'dist-packages') and os.path.isdir(p)]))"
)

# Runs inside the env: which of the given requirement strings are already satisfied.
# pip's vendored `packaging` parses the specifiers, so the check needs nothing the
# bare venv lacks.
_SATISFIED_SCRIPT = """
import json, sys
from importlib import metadata
from pip._vendor.packaging.requirements import Requirement
out = {}
for text in json.loads(sys.argv[1]):
    req = Requirement(text)
    try:
        out[text] = req.specifier.contains(metadata.version(req.name), prereleases=True)
    except metadata.PackageNotFoundError:
        out[text] = False
print(json.dumps(out))
"""


def asv_machine_name(argv: list[str] | None = None) -> str:
    """The machine this asv command records results for: its --machine argument, else asv's
    own default (the host name, asv.machine.Machine.get_unique_machine_name)."""
    args = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(args):
        if arg == "--machine" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--machine="):
            return arg.split("=", 1)[1]
    from asv.machine import Machine

    return Machine.get_unique_machine_name()


class OfflineVirtualenv(Virtualenv):
    """A virtualenv whose third-party packages come from the interpreter running asv."""

    tool_name = TOOL_NAME

    def __init__(self, conf, python, requirements, tagged_env_vars):
        super().__init__(conf, python, requirements, tagged_env_vars)
        # asv picks `pythonX.Y` from PATH first; the packages we lean on live in the
        # interpreter that runs asv, so prefer it whenever its version is the one asked for.
        if python == f"{sys.version_info[0]}.{sys.version_info[1]}":
            self._executable = sys.executable
        # Where the suite writes its sidecar (benchmarks/_sidecar.py): asv tells a benchmark
        # process the commit and env but not the machine or the results directory.
        self._global_env_vars["ASV_KVBENCH_MACHINE"] = asv_machine_name()
        self._global_env_vars["ASV_KVBENCH_RESULTS_DIR"] = os.path.abspath(conf.results_dir)

    def _setup(self) -> None:
        env = dict(os.environ)
        env.update(self.build_env_vars)
        log.info(f"Creating offline virtualenv for {self.name} over {self._executable}")
        util.check_call(
            [sys.executable, "-m", "virtualenv", "--no-periodic-update",
             "--setuptools=bundle", "-p", self._executable, self._path],
            env=env,
        )
        self._write_parent_pth()
        self._install_requirements()

    def _write_parent_pth(self) -> None:
        parent_dirs = json.loads(util.check_output([self._executable, "-c", _SITE_DIRS_SCRIPT]))
        env_site = self.run(["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
        env_site = env_site.strip()
        dirs = [d for d in parent_dirs if os.path.realpath(d) != os.path.realpath(env_site)]
        if not dirs:
            raise environment.EnvironmentUnavailable(
                f"{self._executable} reports no site-packages directory to share")
        with open(os.path.join(env_site, PTH_NAME), "w") as f:
            f.write("\n".join(dirs) + "\n")

    def _install_requirements(self) -> None:
        wanted = ["wheel", "pip>=8"]
        paths = []
        for key, val in {**self._requirements, **self._base_requirements}.items():
            name = key.removeprefix("pip+")
            if os.sep in val:  # ASV_RUNNER_PATH-style local checkout: hand it to pip
                paths.append(val)
            elif not val or val[0] in "<>=!~":
                wanted.append(f"{name}{val}")
            else:
                wanted.append(f"{name}=={val}")
        satisfied = json.loads(self.run(["-c", _SATISFIED_SCRIPT, json.dumps(wanted)]))
        missing = [text for text in wanted if not satisfied[text]]
        for text in missing + paths:
            name = re.match(r"[A-Za-z0-9._-]+", text).group(0)
            if name in _OPTIONAL:
                log.info(f"{name} not importable; the offline wheel build does not need it")
                continue
            try:
                self._run_pip(["install", "-v", text])
            except util.ProcessError as exc:
                raise environment.EnvironmentUnavailable(
                    f"{text!r} is neither in {self._executable} nor installable here: "
                    f"pip install it into the interpreter that runs asv ({exc})"
                ) from exc
