#!/usr/bin/env bash
# One batched GPU session on the device machine (the device tool gives minutes, not hours):
# install the carried wheels (.whl/) and kvbench, then run the requested stages in order,
# writing logs and JSON under $OUT (default ./gpu-out).
#
#   bash scripts/gpu_session.sh tests harness tables
#
# Stages: env (nvidia-smi + kvbench env), tests (pytest -m gpu), alloc (allocator GPU tests +
# alloc_table), profile (where the asv suite's per-commit time goes, scripts/profile_suite.py),
# harness (gpu_selftest + calibrate), tables (kvbench table for every op), grid (the decode
# table over its whole case grid), geometry (the decode table at every model geometry of
# kvbench.ops.decode_geometry), tune (kvbench tune for every op). An unknown stage is named
# and skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 KVBENCH_CACHE_DIR="$OUT/cache"
# The device copy has no .git: name the commit it was made from (written before the call).
[ -f .device/commit ] && export KVBENCH_COMMIT="$(cat .device/commit)"
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
kv() { python3 -m kvbench.cli "$@"; }

for stage in "$@"; do
    echo "=== stage $stage ($(date -u +%H:%M:%S))"
    case "$stage" in
    env)
        nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
        kv env
        ;;
    tests)
        python3 -m pytest -m gpu -q -p no:cacheprovider 2>&1 | tee "$OUT/pytest_gpu.log" | tail -25
        ;;
    alloc)
        python3 -m pytest -m gpu -q -p no:cacheprovider tests/ops/test_kv_alloc.py 2>&1 | tee "$OUT/pytest_alloc.log" | tail -8
        python3 -m kvbench.measure.alloc_table --json "$OUT/alloc_table.json" 2>&1 | tee "$OUT/alloc_table.log"
        ;;
    profile)
        python3 scripts/profile_suite.py 2>&1 | tee "$OUT/profile.log" | tail -9
        ;;
    harness)
        python3 -m kvbench.harness.gpu_selftest --json "$OUT/harness.json" 2>&1 | tee "$OUT/harness.log"
        ;;
    tables)
        for op in paged_decode kv_write kv_gather_fp8 kv_alloc; do
            kv table "$op" --json "$OUT/table_$op.json" 2>&1 | tee "$OUT/table_$op.log"
        done
        ;;
    grid)
        kv table paged_decode --grid --no-ablations --json "$OUT/grid.json" 2>&1 | tee "$OUT/grid.log"
        ;;
    geometry)
        kv table paged_decode --geometry all --json "$OUT/geometry.json" 2>&1 | tee "$OUT/geometry.log"
        ;;
    tune)
        for op in paged_decode kv_write kv_gather_fp8 kv_alloc; do
            kv tune "$op" 2>&1 | tee -a "$OUT/tune.log" | tail -24
        done
        ;;
    *) echo "unknown stage $stage" ;;
    esac
done
