#!/usr/bin/env bash
# Install kvbench and everything it needs on a fresh machine.
#
# On a machine without torch (the CPU developer / CI machines) torch is pinned to 2.13.0 first:
# that release is the CPU build on local disk, while a bare `torch` requirement would pull a
# multi-GB CUDA build. A machine that already has torch (the GPU image: torch 2.11 + triton 3.6)
# keeps its own. Then kvbench itself, editable, with the dev extra (pytest, ruff).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    "$PY" -m pip install --quiet "torch==2.13.0"
fi
"$PY" -m pip install --quiet -e ".[dev]"
"$PY" -c "import torch, triton, kvbench; print(f'kvbench {kvbench.__version__}: torch {torch.__version__}, triton {triton.__version__}, cuda={torch.cuda.is_available()}')"
