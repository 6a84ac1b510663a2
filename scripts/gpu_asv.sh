#!/usr/bin/env bash
# asv on the GPU machine, offline: the device copy has no .git, so the history travels as a
# git bundle (.device/repo.bundle, made by `git bundle create .device/repo.bundle --all`).
#   bash scripts/gpu_asv.sh plant             plant a GPU slowdown on top of HEAD, asv run +
#                                             asv find over it (docs/history.md)
#   bash scripts/gpu_asv.sh gpus RANGE|FILE [PART/PARTS]
#                                             asv run over RANGE (or the hashes listed in FILE,
#                                             a path under the repo root) spread across the
#                                             GPUs in $ASV_GPUS (default: all): one clone, one
#                                             env and one asv process per GPU
#                                             (CUDA_VISIBLE_DEVICES), commits dealt
#                                             round-robin; PART/PARTS (e.g. 1/2) takes every
#                                             PARTS-th commit starting at PART-1, so a range
#                                             larger than one call's time splits over calls.
#                                             Each clone's results for ITS commits are merged.
# Through the device tool (64 MiB may travel): the tracked results/h200 alone is most of it, so move
# it out of the working tree for the call (the tool copies the files present; the bundle's
# clone holds the committed results), carry .device and .whl, put it back after, and copy the
# measured commits' files out of $OUT/asv_results.tgz (docs/history.md).
# The clones live in the private kvbench cache root (python -m kvbench.core.paths asv-clones;
# KVBENCH_CACHE_DIR moves it, keep it outside $OUT), not under a fixed /tmp name another user
# could create first: a warm machine reuses them between calls.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$ROOT"/.whl/*.whl 2>&1 | grep -v WARNING
WORK=$(cd "$ROOT" && python3 -m kvbench.core.paths asv-clones) || exit 1
# A clone of the bundle at DIR, made again when a warm machine kept one of an older bundle
# (its history would miss the new commits; its results were tarred out by that call).
clone_bundle() {
    local want
    want=$(git ls-remote "$ROOT/.device/repo.bundle" refs/heads/main | cut -f1)
    if [ "$(git -C "$1" rev-parse -q --verify main 2>/dev/null)" != "$want" ]; then
        rm -rf "$1"
        git clone -q --branch main "$ROOT/.device/repo.bundle" "$1"
    fi
}
REPO=$WORK/history
clone_bundle "$REPO"
cd "$REPO" || exit 1
# results of earlier runs (committed) are the starting point; new ones add to them
python3 -m kvbench.cli machine >/dev/null && echo "machine: $(python3 -c 'import json,os;print(list(json.load(open(os.path.expanduser("~/.asv-machine.json"))).keys()))')"
MACHINE=h200
case "$1" in
gpus)
    t0=$(date +%s)
    PART=${3:-1/1}
    read -r -a GPUS <<<"${ASV_GPUS:-$(seq -s ' ' 0 $(($(nvidia-smi -L | wc -l) - 1)))}"
    # the commits (oldest first), then this call's share of them
    if [ -f "$ROOT/$2" ]; then cat "$ROOT/$2"; else git rev-list --reverse "$2"; fi |
        awk -v p="${PART%/*}" -v n="${PART#*/}" '(NR - p) % n == 0' >"$WORK/part.txt"
    echo "$(wc -l <"$WORK/part.txt") commits of $2 (part $PART) over GPUs ${GPUS[*]}"
    pids=()
    for i in "${!GPUS[@]}"; do
        gpu=${GPUS[$i]}
        clone=$WORK/history-gpu$gpu
        clone_bundle "$clone"
        awk -v g="$i" -v n="${#GPUS[@]}" '(NR - 1) % n == g' "$WORK/part.txt" >"$clone/.hashes"
        echo "GPU $gpu: $(wc -l <"$clone/.hashes") commits"
        (cd "$clone" && CUDA_VISIBLE_DEVICES=$gpu timeout "${ASV_TIMEOUT:-480}" python3 -m asv run \
            --machine $MACHINE --record-samples --launch-method forkserver "HASHFILE:$clone/.hashes" \
            >"$OUT/asv_gpu$gpu.log" 2>&1; echo "GPU $gpu asv exit $? after $(( $(date +%s) - t0 )) s" >>"$OUT/asv_gpu$gpu.log") &
        pids+=($!)
    done
    wait "${pids[@]}"
    for gpu in "${GPUS[@]}"; do
        tail -3 "$OUT/asv_gpu$gpu.log"
        # Only this clone's own commits: every clone also holds the committed results (from
        # the bundle), which must not overwrite what another clone just measured.
        while read -r hash; do
            cp "$WORK/history-gpu$gpu/results/$MACHINE/${hash:0:8}"-*.json "$REPO/results/$MACHINE/" 2>/dev/null ||
                echo "GPU $gpu: no result for $hash"
        done <"$WORK/history-gpu$gpu/.hashes"
        cp "$WORK/history-gpu$gpu/results/benchmarks.json" "$REPO/results/"
        cp "$WORK/history-gpu$gpu/results/$MACHINE/machine.json" "$REPO/results/$MACHINE/"
    done
    echo "gpus: $(( $(date +%s) - t0 )) s for part $PART of $2"
    ;;
plant)
    git -c user.name=plant -c user.email=plant@kvbench.local commit -q --allow-empty -m "harmless: empty commit before the plant"
    # The plant: fp16 decode back to BLOCK_N 64, about a quarter slower at batch 32 x 4k
    # (docs/decisions.md, "Launch config and split policy").
    python3 - <<'PY'
import re, pathlib
p = pathlib.Path("kvbench/kernels/paged_decode.py"); s = p.read_text()
s = s.replace('"single_pass": {"BLOCK_N": 128', '"single_pass": {"BLOCK_N": 64', 1)
p.write_text(s)
PY
    git -c user.name=plant -c user.email=plant@kvbench.local commit -q -am "PLANTED: fp16 single-pass decode BLOCK_N 128 -> 64"
    git -c user.name=plant -c user.email=plant@kvbench.local commit -q --allow-empty -m "harmless: empty commit after the plant"
    t0=$(date +%s)
    python3 -m asv run --machine $MACHINE --record-samples --launch-method forkserver \
        --bench 'paged_decode.PagedDecodeAblation.track_us' HEAD~3..HEAD 2>&1 | tail -8
    echo "plant run: $(( $(date +%s) - t0 )) s"
    git log --oneline -4
    python3 -m asv find --machine $MACHINE --launch-method forkserver HEAD~3..HEAD \
        "paged_decode\.PagedDecodeAblation\.track_us\('triton/single_pass', 'frag_combined'" 2>&1 | tail -6
    python3 -m asv compare --machine $MACHINE --factor 1.05 --split HEAD~2 HEAD~1 2>&1 | head -40
    ;;
esac
cd "$REPO" && tar czf "$OUT/asv_results.tgz" results
