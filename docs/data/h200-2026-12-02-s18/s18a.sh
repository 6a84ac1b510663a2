#!/usr/bin/env bash
# Session 18 (one lease, several device calls): the suite's host group (five processes, three
# repeats) measured as identical commits would be, one fresh interpreter per commit, now
# recording each process's canaries (reference and around each case) beside its number, so
# that a per-process correction can be judged. The runs file is carried between calls; each
# call measures only the commits still missing; boot_id tells whether the calls shared a machine.
set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
D=docs/data/h200-2026-12-02-s18
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
grep -n '^HOST_REPEATS\|^HOST_PROCESSES' benchmarks/_common.py benchmarks/_host.py
RUNS=$D/host_suite_runs.jsonl
touch $RUNS $D/calls.log
echo "call $(date -u +%FT%T) boot_id $(cat /proc/sys/kernel/random/boot_id) $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2) nproc $(nproc)" | tee -a $D/calls.log
while [ $(wc -l < $RUNS) -lt ${TARGET:-12} ] && [ $SECONDS -lt 440 ]; do
  t0=$SECONDS
  timeout $(( 585 - SECONDS )) python3 scripts/host_noise.py --worker --suite > /tmp/commit.out 2>$OUT/last_err.log
  rc=$?
  [ $rc -eq 0 ] && tail -1 /tmp/commit.out >> $RUNS
  echo "  commit $(wc -l < $RUNS): exit $rc, $(( SECONDS - t0 )) s, at ${SECONDS}s" | tee -a $D/calls.log
done
cp $RUNS $D/calls.log $OUT/
python3 -c "import torch, triton, sys; print(torch.__version__, triton.__version__, sys.version.split()[0])"
echo "=== end $(date -u +%T), $(wc -l < $RUNS) commits"
