#!/usr/bin/env bash
# The timing proof's evidence on the H200: does the event timer agree with CUPTI where kernels
# are short, and what do the stored sidecars record? Run on the device machine from the repo
# root; outputs under $OUT (default ./gpu-out), the short tables last:
#
#   bash scripts/device/proof_h200.sh
#
#   1. GPU tests of the proof, the criterion and bench_kernel (pytest -m gpu)
#   2. CUPTI vs event table for the small decode and write cases, the compiled decode rows'
#      error figures and Triton resources, NVML state (scripts/device/proof_h200.py)
#   3. a clock-reduced run if the device allows `nvidia-smi -lgc` (else the normal run's
#      recorded clocks and clock-event reasons stand)
#   4. a real `asv run` of HEAD (asv from carried wheels in .whl/): the sidecar with NVML
#      state, the result file's size
# Carry: .whl (asv wheels) and nvidia-ml-py's wheel in .whl/ too if NVML state is wanted.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
cd "$ROOT" || exit 1
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1 PYTHONPATH=$ROOT
[ -d .whl ] && python3 -m pip install -q --no-index --no-deps --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
nvidia-smi -q -d CLOCK,PERFORMANCE >"$OUT/nvidia_smi_before.txt" 2>&1

python3 -m pytest -q -m gpu -s tests/measure/test_proof_gpu.py tests/harness/test_harness_gpu.py >"$OUT/pytest_gpu.log" 2>&1
echo "pytest -m gpu exit $?" >>"$OUT/pytest_gpu.log"

python3 scripts/device/proof_h200.py "$OUT/proof_h200.json" >"$OUT/proof_h200.log" 2>&1

# A clock-reduced run: lock the SM clock low if allowed; the sidecar state must show it.
if nvidia-smi -lgc 900,900 >"$OUT/lgc.log" 2>&1; then
    python3 scripts/device/proof_h200.py "$OUT/proof_h200_lgc900.json" >"$OUT/proof_h200_lgc900.log" 2>&1
    nvidia-smi -rgc >>"$OUT/lgc.log" 2>&1
else
    echo "nvidia-smi -lgc refused: see the normal run's recorded clocks/reasons" >>"$OUT/lgc.log"
fi

# A real asv run of HEAD on a clone (the device copy has no .git: a git bundle of the
# history, .device/repo.bundle, when present), then the sidecar and the result file's size.
if [ -f .device/repo.bundle ]; then
    REPO=$(mktemp -d -t kvbench-proof.XXXXXX)/repo && git clone -q --branch main .device/repo.bundle "$REPO"
    (cd $REPO && python3 -m kvbench.cli machine >/dev/null 2>&1
     timeout 540 python3 -m asv run --machine h200 --record-samples --launch-method forkserver HEAD^! \
        >"$OUT/asv_run.log" 2>&1; echo "asv exit $?" >>"$OUT/asv_run.log"
     ls -la results/h200/ results/h200/kvbench/ >"$OUT/asv_sizes.txt" 2>&1
     tar czf "$OUT/sidecar.tgz" results/h200/kvbench 2>/dev/null)
fi

nvidia-smi -q -d CLOCK,PERFORMANCE >"$OUT/nvidia_smi_after.txt" 2>&1
echo "== asv result sizes"; cat "$OUT/asv_sizes.txt" 2>/dev/null | tail -8
echo "== pytest -m gpu"; tail -3 "$OUT/pytest_gpu.log"
echo "== clock lock"; cat "$OUT/lgc.log"
echo "== CUPTI vs events (and error figures)"; tail -30 "$OUT/proof_h200.log"
