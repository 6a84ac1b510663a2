#!/usr/bin/env bash
# Session 20 (one lease, several device calls): the shipped suite's host group, as identical
# commits measure it (scripts/host_noise.py --worker --suite: one fresh interpreter per commit,
# benchmarks/_common.measure_group("host") with the code's defaults). The runs file is carried
# between calls; each call measures only the commits still missing and starts one only while
# the last one's duration still fits the call; boot_id tells whether the calls shared a machine.
set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
D=docs/data/h200-2026-12-02-s20
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
grep -n '^HOST_REPEATS\|^HOST_PROCESSES\|^HOST_ATTEMPTS' benchmarks/_common.py benchmarks/_host.py
env | grep '^KVBENCH_' || echo "no KVBENCH_ variables set"
RUNS=$D/runs.jsonl
touch $RUNS $D/calls.log
echo "call $(date -u +%FT%T) boot_id $(cat /proc/sys/kernel/random/boot_id) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) nproc $(nproc)" | tee -a $D/calls.log
last=${FIRST_GUESS:-160}
while [ $(wc -l < $RUNS) -lt ${TARGET:-12} ] && [ $(( SECONDS + last * ${FIT:-125} / 100 )) -lt ${STOP:-590} ]; do
  t0=$SECONDS
  timeout $(( 595 - SECONDS )) python3 scripts/host_noise.py --worker --suite > /tmp/commit.out 2>$OUT/last_err.log
  rc=$?
  [ $rc -eq 0 ] && tail -1 /tmp/commit.out >> $RUNS
  last=$(( SECONDS - t0 ))
  echo "  commit $(wc -l < $RUNS): exit $rc, $last s, at ${SECONDS}s" | tee -a $D/calls.log
done
cp $RUNS $D/calls.log $OUT/
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])"
echo "=== end $(date -u +%T), $(wc -l < $RUNS) commits"
