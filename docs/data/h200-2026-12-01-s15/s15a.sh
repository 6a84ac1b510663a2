#!/usr/bin/env bash
# Session 15, call A: the host's speed (timeline + host_noise ablations) and one real asv run
# of HEAD's tree (sidecar: Triton + CUDA resources, host canary per group).
set -uo pipefail
ROOT=$(pwd)
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
python3 -c "import pynvml; print('pynvml', pynvml.__file__)" 2>&1 | tail -1
lscpu | grep -E "Model name|Thread|Core|Socket|NUMA node[0-9]|MHz" ; nproc; cat /proc/loadavg
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv
mkdir -p $OUT/a
echo "=== timeline $(date -u +%T)"
python3 docs/data/h200-2026-12-01-s15/host_timeline.py 15 $OUT/a/host_timeline.json
for cfg in "last|auto" "fastest|auto" "last|cpu"; do
  pin=${cfg%%|*}; dev=${cfg##*|}
  echo "=== host_noise pin=$pin device=$dev $(date -u +%T)"
  python3 scripts/host_noise.py --processes 12 --repeats 5 --pin $pin --device $dev --json $OUT/a/hn_${pin}_${dev}.json 2>&1 | tail -6
done
echo "=== asv $(date -u +%T)"
W=/tmp/kvb-s15; rm -rf $W; mkdir -p $W; git clone -q --branch main .device/s15.bundle $W/repo; cd $W/repo
python3 -m kvbench.cli machine >/dev/null 2>&1 || echo "machine record failed"
git rev-parse HEAD > $W/hash.txt
t0=$(date +%s)
timeout 300 python3 -m asv run --machine h200 --record-samples --launch-method forkserver "HASHFILE:$W/hash.txt" > $OUT/a/asv.log 2>&1
echo "asv exit $? in $(( $(date +%s) - t0 )) s"; tail -3 $OUT/a/asv.log
ls results/*/kvbench/ 2>&1 | head
tar czf $OUT/a/results.tgz results
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
