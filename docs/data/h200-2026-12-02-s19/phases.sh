#!/usr/bin/env bash
# Session 19, call 1: where a host-group measuring process's wall time goes on the H200, in the
# suite's own structure (forked children), with torch imported by each child (as shipped) and
# by the parent before forking.
set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
D=docs/data/h200-2026-12-02-s19
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
echo "call $(date -u +%FT%T) boot_id $(cat /proc/sys/kernel/random/boot_id) nproc $(nproc)"
for mode in "" --preimport "" --preimport; do
  python3 $D/phases_fork.py --processes 3 $mode 2>>$OUT/err.log | grep -E '^(CHILD|PARENT)' | tee -a $OUT/phases.txt
done
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])"
