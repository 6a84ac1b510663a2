#!/usr/bin/env bash
# Session 15, call D: the suite's host series (core choice + canary gate) over 10 fresh
# processes, then the GPU tests call B did not finish.
set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
mkdir -p $OUT/d
echo "=== suite host series $(date -u +%T)"
timeout 330 python3 scripts/host_noise.py --suite --processes 10 --runs $OUT/d/host_suite_runs.jsonl > $OUT/d/host_suite.log 2>&1
echo "exit $? $(wc -l < $OUT/d/host_suite_runs.jsonl) processes"
python3 scripts/host_noise.py --suite --runs $OUT/d/host_suite_runs.jsonl --json $OUT/d/host_suite.json 2>&1 | tail -30
echo "=== gpu tests $(date -u +%T)"
timeout $(( 545 - SECONDS )) python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_paged_decode_cluster.py tests/test_sidecar_resources.py tests/test_pool.py tests/test_proof_gpu.py tests/test_safety.py tests/test_table.py > $OUT/d/pytest_gpu.log 2>&1; echo "pytest exit $?"; tail -4 $OUT/d/pytest_gpu.log
echo "=== end $(date -u +%T)"
