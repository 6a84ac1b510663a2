#!/usr/bin/env bash
# Session 19 (one lease, several device calls): identical commits of the host group measured
# by commit.py: ten processes x two repeats, torch imported before the children fork, each
# repeat's median recorded. The runs file is carried between calls; each call measures only the
# commits still missing and starts one only when the last one's duration still fits.
set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
D=docs/data/h200-2026-12-02-s19
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
RUNS=$D/runs.jsonl
touch $RUNS $D/calls.log
echo "call $(date -u +%FT%T) boot_id $(cat /proc/sys/kernel/random/boot_id) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) nproc $(nproc)" | tee -a $D/calls.log
last=120
while [ $(wc -l < $RUNS) -lt ${TARGET:-12} ] && [ $(( SECONDS + last * 115 / 100 )) -lt ${STOP:-585} ]; do
  t0=$SECONDS
  timeout $(( 590 - SECONDS )) python3 $D/commit.py ${PROCS:-10} ${REPS:-2} > /tmp/commit.out 2>$OUT/last_err.log
  rc=$?
  if [ $rc -eq 0 ]; then
    python3 - <<'PY' >> $RUNS
import json
lines = open("/tmp/commit.out").read().splitlines()
out = json.loads(next(l for l in lines if l.startswith("RESULT "))[7:])
out["repeats"] = [json.loads(l[8:]) for l in lines if l.startswith("REPEATS ")]
print(json.dumps(out, separators=(",", ":")))
PY
  fi
  last=$(( SECONDS - t0 ))
  echo "  commit $(wc -l < $RUNS): exit $rc, $last s, at ${SECONDS}s" | tee -a $D/calls.log
done
cp $RUNS $D/calls.log $OUT/
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])"
echo "=== end $(date -u +%T), $(wc -l < $RUNS) commits"
