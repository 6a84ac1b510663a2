#!/usr/bin/env bash
# Side by side on the H200: the asv suite of the last pre-refactor commit (its own suite) and
# of the refactored one (its own suite), into one results dir. Part A: asv. Part B: tables.
set -uo pipefail
ROOT=$(pwd)
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$ROOT"/.whl/*.whl 2>&1 | grep -v WARNING
W=/tmp/kvb-sbs
if [ ! -d "$W/repo/.git" ]; then rm -rf "$W"; mkdir -p "$W"; git clone -q "$ROOT/.device/sbs.bundle" "$W/repo"; fi
cd "$W/repo"
OLD=$(git rev-list --reverse main | sed -n 1p); NEW=$(git rev-list --reverse main | sed -n 2p)
echo "old=$OLD new=$NEW"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw,clocks_event_reasons.active --format=csv
part=${1:-A}
if [ "$part" = A ]; then
  for c in $OLD $NEW; do
    git checkout -q "$c"
    python3 -m kvbench.cli machine >/dev/null 2>&1 || echo "machine record failed at $c"
    echo "$c" > "$W/hash.txt"
    t0=$(date +%s)
    timeout 290 python3 -m asv run --machine h200 --record-samples --launch-method forkserver "HASHFILE:$W/hash.txt" > "$OUT/asv_$c.log" 2>&1
    echo "asv $c exit $? in $(( $(date +%s) - t0 )) s"; tail -2 "$OUT/asv_$c.log"
  done
  tar czf "$OUT/sbs_results.tgz" results
fi
if [ "$part" = B ]; then
  i=0
  for c in $OLD $NEW $OLD $NEW; do
    i=$((i + 1))
    git checkout -q "$c"
    t0=$(date +%s)
    timeout 200 python3 -m kvbench.cli table paged_decode --no-ablations --json "$OUT/table_${i}_${c:0:7}.json" > "$OUT/table_${i}_${c:0:7}.log" 2>&1
    echo "table $c exit $? in $(( $(date +%s) - t0 )) s"
  done
fi
