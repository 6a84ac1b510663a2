#!/usr/bin/env bash
# One batched GPU session (the device tool gives minutes, not hours): install the carried
# wheels, then run the requested stages, writing logs and JSON under $OUT (default ./gpu-out).
#   bash scripts/gpu_session.sh tests harness tables
# Stages: env, tests (pytest -m gpu), alloc (allocator GPU tests + alloc_report), harness
# (validate_gpu + calibrate), tables (kvbench table for every op), grid (issue-3 decode grid),
# sweep (decode config x splits), sweep-fp8, sweep-page-read (the read bound of each decode
# case, docs/perf-notes.md experiment 15), ablate-flush (every CUDA flush mode on the cases a
# flush could change, docs/harness.md), ablate-split (a split-KV decode's kernels timed apart,
# experiment 15), profile (where
# the asv suite's per-commit time goes), tune (kvbench tune + table after).
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
        python3 -m pytest -m gpu -q -p no:cacheprovider tests/test_alloc.py 2>&1 | tee "$OUT/pytest_alloc.log" | tail -8
        python3 -m kvbench.measure.alloc_report --json "$OUT/alloc_report.json" 2>&1 | tee "$OUT/alloc_report.log"
        ;;
    profile)
        python3 scripts/profile_suite.py 2>&1 | tee "$OUT/profile.log" | tail -9
        ;;
    harness)
        python3 -m kvbench.harness.validate_gpu --json "$OUT/harness.json" 2>&1 | tee "$OUT/harness.log"
        ;;
    tables)
        for op in paged_decode kv_write kv_gather_fp8 kv_alloc; do
            kv table "$op" --json "$OUT/table_$op.json" 2>&1 | tee "$OUT/table_$op.log"
        done
        ;;
    grid)
        kv table paged_decode --grid --no-ablations --json "$OUT/grid.json" 2>&1 | tee "$OUT/grid.log"
        ;;
    sweep)
        python3 scripts/sweep_paged_decode.py --quick --json "$OUT/sweep.json" 2>&1 | tee "$OUT/sweep.log" | tail -12
        ;;
    ablate-flush)
        python3 scripts/ablate_flush.py --json "$OUT/ablate_flush.json" 2>&1 | tee "$OUT/ablate_flush.log" | tail -10
        ;;
    ablate-split)
        python3 scripts/ablate_split_decode.py --json "$OUT/ablate_split_decode.json" 2>&1 | tee "$OUT/ablate_split_decode.log" | tail -6
        ;;
    sweep-page-read)
        python3 scripts/sweep_page_read.py --json "$OUT/sweep_page_read.json" 2>&1 | tee "$OUT/sweep_page_read.log" | tail -9
        ;;
    sweep-fp8)
        python3 scripts/sweep_paged_decode.py --focus --json "$OUT/sweep_fp8.json" 2>&1 | tee "$OUT/sweep_fp8.log" | tail -6
        ;;
    tune)
        for op in paged_decode kv_write kv_gather_fp8 kv_alloc; do
            kv tune "$op" 2>&1 | tee -a "$OUT/tune.log" | tail -24
        done
        ;;
    *) echo "unknown stage $stage" ;;
    esac
done
