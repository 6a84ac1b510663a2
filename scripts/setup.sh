#!/usr/bin/env bash
# Install kvbench and everything README's test command (`python3 -m pytest -q`) needs on a
# fresh machine that has only Python: torch, kvbench itself with the dev extra, Chromium for
# the dashboard test, and the dashboard's JavaScript assets (npm tarballs, cached per user).
# Run it again at any time: every step is skipped when its result is already there.
#
#   bash scripts/setup.sh          (then: python3 -m pytest -q)
#
# Which torch. A machine that already has torch (the GPU image: torch 2.11 + triton 3.6)
# keeps its own. Otherwise:
#   - with an NVIDIA GPU (`nvidia-smi` answers): plain `torch`, PyPI's CUDA build, the one
#     that runs the kernels.
#   - without one: a CPU build (a few hundred MB instead of PyPI's multi-GB CUDA build, whose
#     CUDA libraries would sit unused). pip is asked, with --dry-run, which torch it would
#     install, and a candidate is taken only when its version carries the `+cpu` local tag:
#       1. from the PyTorch CPU index (the ordinary place for CPU wheels; pip's configured
#          find-links/extra indexes are consulted too), then
#       2. `torch==$KVBENCH_TORCH_CPU_VERSION` (default 2.13.0) from the sources pip is
#          configured with: machines that carry that CPU wheel on local disk, without
#          access to the PyTorch index, resolve it there.
#     Where neither resolves to a CPU build, plain `torch` is installed with a warning (it
#     works on a CPU; it is only large). PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CPU_INDEX=${KVBENCH_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
CPU_PIN=${KVBENCH_TORCH_CPU_VERSION:-2.13.0}

say() { echo "setup: $*" >&2; }

# The torch version pip would install for the given arguments, or nothing if it resolves none.
resolved_torch() {
    local report
    report=$(mktemp)
    if "$PY" -m pip install --quiet --dry-run --ignore-installed --report "$report" "$@" \
        >/dev/null 2>&1; then
        "$PY" - "$report" <<'EOF'
import json, sys
for item in json.load(open(sys.argv[1]))["install"]:
    if item["metadata"]["name"].lower() == "torch":
        print(item["metadata"]["version"])
EOF
    fi
    rm -f "$report"
}

install_torch() {
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
        say "NVIDIA GPU found: installing torch (CUDA build)"
        "$PY" -m pip install --quiet torch
        return
    fi
    local index_args=(--index-url "$CPU_INDEX" --retries 0 --timeout 15) version
    version=$(resolved_torch "${index_args[@]}" torch)
    if [[ $version == *+cpu ]]; then
        say "no GPU: torch $version (CPU build) from $CPU_INDEX"
        "$PY" -m pip install --quiet "${index_args[@]}" "torch==$version"
        return
    fi
    version=$(resolved_torch "torch==$CPU_PIN")
    if [[ $version == *+cpu ]]; then
        say "no GPU: torch $version (CPU build) from pip's configured sources"
        "$PY" -m pip install --quiet "torch==$version"
        return
    fi
    say "WARNING: no CPU build of torch found (neither $CPU_INDEX nor torch==$CPU_PIN"
    say "  resolves to a +cpu wheel); installing plain torch: a CUDA build of several GB"
    "$PY" -m pip install --quiet torch
}

# apt-get install for a Debian package, as root or through passwordless sudo; otherwise say
# what to run. Never fails the setup: only the test that needs the package does.
apt_install() {
    local package=$1 why=$2 sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            say "$package is missing ($why) and this user cannot apt-get (not root, no"
            say "  passwordless sudo): run \`sudo apt-get install -y $package\` yourself"
            return 0
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        say "$package is missing ($why) and this is not a Debian-like system: install it"
        say "  with your package manager"
        return 0
    fi
    say "installing $package ($why) with apt-get"
    if ! { "${sudo[@]}" apt-get update -qq \
           && DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "$package" \
              >/dev/null; }; then
        say "apt-get install $package failed: install it by hand ($why)"
    fi
}

# A distribution's Python outside a virtual environment may be marked externally managed
# (PEP 668), and pip then refuses every install. README's promise is that this script sets
# up a machine that has only Python, so it installs into that Python anyway, and says so.
if "$PY" -c 'import os, sys, sysconfig
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if managed and sys.prefix == sys.base_prefix else 1)'; then
    say "$PY is marked externally managed (PEP 668): installing into it anyway"
    say "  (PIP_BREAK_SYSTEM_PACKAGES=1); a virtual environment keeps it clean instead"
    export PIP_BREAK_SYSTEM_PACKAGES=1
fi

# pip itself: a distribution's Python may come without it (Debian's python3 does). First the
# pip wheel bundled with its ensurepip, installed by running pip from that wheel (ensurepip
# itself drops PIP_* settings, so it cannot install into an externally managed Python), then
# the distribution's package; otherwise say what is missing.
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    wheel=$("$PY" -c 'import ensurepip, glob, os
found = glob.glob(os.path.join(os.path.dirname(ensurepip.__file__), "_bundled", "pip-*.whl"))
print(found[0] if found else "")' 2>/dev/null || true)
    if [ -n "$wheel" ]; then
        say "$PY has no pip: installing the one its ensurepip bundles"
        "$PY" "$wheel/pip" install --quiet --no-index "$wheel" || true
    fi
fi
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    apt_install python3-pip "installs torch and kvbench"
fi
if ! "$PY" -m pip --version >/dev/null 2>&1; then
    say "$PY has no pip and none could be installed: install pip for it (or run this script"
    say "  with a virtual environment's python: PYTHON=.venv/bin/python bash scripts/setup.sh)"
    exit 1
fi
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    install_torch
fi
"$PY" -m pip install --quiet -e ".[dev]"

# The dashboard test renders the published asv page in headless Chromium.
if ! command -v chromium >/dev/null 2>&1 && ! command -v chromium-browser >/dev/null 2>&1 \
    && ! command -v google-chrome >/dev/null 2>&1; then
    apt_install chromium "the dashboard test's headless browser"
fi
# `kvbench publish` vendors jQuery/flot/bootstrap from npm tarballs: fetch them once now, so
# publishing (and the dashboard test) later works offline.
if ! command -v npm >/dev/null 2>&1; then
    apt_install npm "fetches the dashboard's JavaScript assets"
fi
if command -v npm >/dev/null 2>&1; then
    "$PY" -m kvbench.history.dashboard.publish_cmd --prefetch || say "prefetching the dashboard assets failed"
fi

# The fleet test runs a one-node Slurm cluster (tests/e2e/test_fleet_e2e.py: munged, slurmctld
# and slurmd on localhost). slurmd starts jobs as their users, so it runs as root: the
# packages are installed only where this script runs as root with apt-get (CI); elsewhere
# that test skips and says why.
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    if ! command -v slurmctld >/dev/null 2>&1 || ! command -v slurmd >/dev/null 2>&1; then
        apt_install slurm-wlm "the fleet test's one-node Slurm cluster"
    fi
    if ! command -v munged >/dev/null 2>&1; then
        apt_install munge "Slurm's authentication daemon, for the fleet test"
    fi
fi

"$PY" -c "import torch, triton, kvbench; print(f'kvbench {kvbench.__version__}: torch {torch.__version__}, triton {triton.__version__}, cuda={torch.cuda.is_available()}')"
