#!/usr/bin/env bash
# Session 15, call B: one real asv run of HEAD's tree (sidecar), per-sample host pairs
# (random and fixed hash seed), then the GPU tests until the time runs out.
set -uo pipefail
ROOT=$(pwd)
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
mkdir -p $OUT/b
echo "=== asv $(date -u +%T)"
W=/tmp/kvb-s15; rm -rf $W; mkdir -p $W; git clone -q --branch main .device/s15.bundle $W/repo; cd $W/repo
python3 -m kvbench.cli machine >/dev/null 2>&1 || echo "machine record failed"
git rev-parse HEAD > $W/hash.txt
t0=$(date +%s)
timeout 240 python3 -m asv run --machine h200 --record-samples --launch-method forkserver "HASHFILE:$W/hash.txt" > $OUT/b/asv.log 2>&1
echo "asv exit $? in $(( $(date +%s) - t0 )) s"; tail -2 $OUT/b/asv.log
tar czf $OUT/b/results.tgz results
cd $ROOT
python3 - <<'PY'
import json, glob
for f in sorted(glob.glob("/tmp/kvb-s15/repo/results/*/kvbench/*.kvjson")):
    d = json.load(open(f))
    print(f.split("/")[-1], "states", len(d["states"]))
    for st in d["states"][:2]:
        print("  host", st.get("host_before"), st.get("host_after"))
    n = 0
    for cls, cases in d["classes"].items():
        for k, r in cases.items():
            res = r.get("resources")
            if isinstance(res, list) and res and n < 6:
                print(" ", cls, k, r.get("selected"), res); n += 1
PY
echo "=== host samples $(date -u +%T)"
python3 docs/data/h200-2026-12-01-s15/host_samples.py 12 60 5 $OUT/b/hs_random.json && python3 docs/data/h200-2026-12-01-s15/host_eval.py $OUT/b/hs_random.json
PYTHONHASHSEED=0 python3 docs/data/h200-2026-12-01-s15/host_samples.py 12 60 5 $OUT/b/hs_seed0.json && python3 docs/data/h200-2026-12-01-s15/host_eval.py $OUT/b/hs_seed0.json | tail -16
echo "=== gpu tests $(date -u +%T)"
timeout 200 python3 -m pytest -m gpu -q -p no:cacheprovider -x tests/test_paged_decode_cluster.py tests/test_sidecar_resources.py 2>&1 | tail -4
left=$(( 560 - SECONDS ))
echo "=== full gpu suite with ${left}s $(date -u +%T)"
[ $left -gt 30 ] && timeout $left python3 -m pytest -m gpu -q -p no:cacheprovider 2>&1 > $OUT/b/pytest_gpu.log; echo "pytest exit $?"; tail -5 $OUT/b/pytest_gpu.log
