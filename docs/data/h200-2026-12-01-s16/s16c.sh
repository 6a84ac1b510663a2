#!/usr/bin/env bash
# Session 16, call C: calls A and B's measurement (s16a.sh) continued to 15 identical commits
# (one fresh interpreter each; inside, HOST_PROCESSES forked measuring processes and the least
# each case's gate accepted). The runs file of calls A and B is carried; this call measures
# only the commits still missing.
set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
RUNS=docs/data/h200-2026-12-01-s16/host_suite_runs.jsonl
touch $RUNS
echo "=== host group, $(wc -l < $RUNS) commits carried, $(date -u +%T)"
# one commit at a time, each bounded, so the call ends before its limit with whole commits kept
while [ $(wc -l < $RUNS) -lt 15 ] && [ $SECONDS -lt 430 ]; do
  timeout $(( 580 - SECONDS )) python3 scripts/host_noise.py --worker --suite > /tmp/commit.out 2>$OUT/last_err.log
  rc=$?
  [ $rc -eq 0 ] && tail -1 /tmp/commit.out >> $RUNS
  echo "  commit $(wc -l < $RUNS): exit $rc at ${SECONDS}s"
done
cp $RUNS $OUT/
python3 scripts/host_noise.py --suite --processes 2 --runs $RUNS --json $OUT/host_suite.json 2>&1 | tail -32
nproc; python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])"
echo "=== end $(date -u +%T)"
