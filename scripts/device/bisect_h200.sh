#!/usr/bin/env bash
# kvbench bisect on the H200: a planted ~4% GPU slowdown among harmless commits.
#
#   bash scripts/device/bisect_h200.sh PHASE...      (outputs under $OUT, default ./gpu-out)
#
# Phases (each fits one device call of <= 10 min; run them in this order, one per call or
# several per call):
#   bisect   kvbench bisect over the whole scratch range (N commits, default 32) on SERIES;
#            must name the planted commit with verdict regression
#   flat     kvbench bisect over the N_FLAT commits after the plant (same code): must say
#            "no regression in RANGE"
#   asv      asv run --record-samples of the PagedDecode benchmark over the ASV_SPAN commits
#            around the plant into the scratch results/, then `kvbench regressions` on them
#            when this checkout has that command (it must report the planted step and only
#            real steps); results tarred to $OUT/asv_results.tgz
#   table    the summary table of whatever phases wrote JSON under $OUT (always printed last)
#
# The scratch history is built from this checkout's files (the device copy has no .git:
# tracked files travel, results/ and the carried folders are left out) with fixed dates and
# author, so every call rebuilds the same commit hashes: base, then N commits, all harmless
# (a comment line in kvbench/__init__.py, or docs/), except commit PLANT_AT which appends to
# kvbench/kernels/paged_decode.py a wrapper around paged_decode_split_kv (the triton/split_kv
# row) that launches torch.cuda._sleep after the decode kernels: a GPU-side delay of PLANT_US
# (default 20 us, ~4% of triton/split_kv fp16 b64_c8k, its largest case; _sleep counts cycles,
# sized at the H200's 1980 MHz, so a lower clock makes it a little longer). Every split_kv
# series gets the same 20 us (a larger share of the small cases): all real steps.
#
# Needs: the asv wheels and scipy's (cp312 manylinux) in .whl/, carried with the call, e.g.
#   pip download asv==0.6.6 wheel scipy --only-binary=:all: --python-version 3.12 \
#       --implementation cp --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
#       --platform manylinux_2_28_x86_64 -d .whl
# Environment: N (32), PLANT_AT (21), PLANT_US (20), N_FLAT (10), ASV_SPAN (8),
# SERIES (the planted series below), BISECT_ARGS (extra kvbench bisect options), MACHINE (h200).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$ROOT/gpu-out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
N=${N:-32}
PLANT_AT=${PLANT_AT:-21}
PLANT_US=${PLANT_US:-20}
N_FLAT=${N_FLAT:-10}
ASV_SPAN=${ASV_SPAN:-8}
SERIES=${SERIES:-"paged_decode.PagedDecode.track_us('triton/split_kv', 'fp16', 'b64_c8k')"}
# The scratch history lives in the private kvbench cache root (not a fixed /tmp name another
# user could create first); KVBENCH_CACHE_DIR moves it (keep it outside $OUT).
MACHINE=${MACHINE:-h200}
if ! python3 -c "import asv, scipy" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir "$ROOT"/.whl/*.whl 2>&1 | grep -v WARNING
fi

WORK=$(cd "$ROOT" && python3 -m kvbench.core.paths bisect-scratch) || exit 1
REPO=$WORK/history
# What the scratch history is made of: rebuilt when the checkout or the plant changes.
FINGERPRINT="$(cd "$ROOT" && find kvbench benchmarks asv.conf.json pyproject.toml -type f \
    -not -path '*__pycache__*' | sort | xargs sha256sum | sha256sum | cut -c1-16) N=$N PLANT_AT=$PLANT_AT PLANT_US=$PLANT_US"

build_history() {
    # The same files, dates and author on every call -> the same hashes.
    [ "$(cat "$REPO/.scratch-done" 2>/dev/null)" = "$FINGERPRINT" ] && return 0
    rm -rf "$REPO"
    mkdir -p "$REPO"
    tar -C "$ROOT" --exclude=./.git --exclude=./results --exclude=./html --exclude=./.whl \
        --exclude=./.device --exclude=./gpu-out --exclude=./.asv --exclude=./.device_out \
        --exclude=__pycache__ --exclude=./.flashinfer --exclude=./.pytest_cache -cf - . |
        tar -C "$REPO" -xf -
    cd "$REPO" || exit 1
    git init -q -b main
    local i when
    commit() {
        when="2026-01-01T00:00:00Z"
        [ -n "${1:-}" ] && when=$(date -u -d "2026-01-01 + $1 minutes" +%Y-%m-%dT%H:%M:%SZ)
        git add -A
        GIT_AUTHOR_DATE=$when GIT_COMMITTER_DATE=$when git -c user.name=scratch \
            -c user.email=scratch@kvbench.invalid commit -q -m "$2"
    }
    commit 0 "base: this checkout"
    for i in $(seq 1 "$N"); do
        if [ "$i" = "$PLANT_AT" ]; then
            cat >>kvbench/kernels/paged_decode.py <<EOF


# ---- PLANTED by scripts/device/bisect_h200.sh: a GPU-side slowdown of triton/split_kv ----
_planted_split_kv = paged_decode_split_kv


def paged_decode_split_kv(*args, **kwargs):
    out = _planted_split_kv(*args, **kwargs)
    if out.is_cuda:
        torch.cuda._sleep(int($PLANT_US * 1980))  # ~${PLANT_US} us at 1980 MHz
    return out
EOF
            commit "$i" "PLANTED: triton/split_kv launches a ${PLANT_US} us GPU spin after its kernels"
        elif [ $((i % 3)) = 0 ]; then
            echo "Harmless scratch edit $i." >>docs/kernels.md
            commit "$i" "harmless $i: docs"
        else
            echo "# harmless scratch commit $i: no behaviour change" >>kvbench/__init__.py
            commit "$i" "harmless $i: comment"
        fi
    done
    echo "$FINGERPRINT" >.scratch-done
    echo "scratch history: $(git rev-list --count HEAD) commits, planted $(git rev-parse --short "HEAD~$((N - PLANT_AT))")"
}

build_history
cd "$REPO" || exit 1
python3 -m kvbench.cli machine --name "$MACHINE" >/dev/null
PLANTED=$(git rev-parse "HEAD~$((N - PLANT_AT))")
echo "planted commit: $PLANTED"
echo "$PLANTED" >"$OUT/planted_commit.txt"

bisect() {  # NAME RANGE
    local t0=$(date +%s)
    # shellcheck disable=SC2086
    python3 -m kvbench.cli bisect "$2" "$SERIES" --machine "$MACHINE" --json "$OUT/bisect_$1.json" \
        --log-dir "$OUT/logs_$1" ${BISECT_ARGS:-} 2>&1 | tee "$OUT/bisect_$1.log" | tail -30
    echo "$1: exit ${PIPESTATUS[0]} after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/bisect_$1.log"
    echo "$(( $(date +%s) - t0 ))" >"$OUT/wall_$1.txt"
}

for phase in "$@"; do
    echo "=== phase $phase ($(date -u +%H:%M:%S))"
    case "$phase" in
    bisect) bisect planted "HEAD~$N..HEAD" ;;
    flat) bisect flat "HEAD~$N_FLAT..HEAD" ;;
    asv)
        t0=$(date +%s)
        lo=$((N - PLANT_AT + ASV_SPAN / 2)); hi=$((N - PLANT_AT - ASV_SPAN / 2))
        [ "$hi" -lt 0 ] && hi=0
        python3 -m asv run --machine "$MACHINE" --record-samples --launch-method forkserver \
            --bench 'paged_decode\.PagedDecode\.track_' "HEAD~$lo..HEAD~$hi" >"$OUT/asv_run.log" 2>&1
        echo "asv run exit $? after $(( $(date +%s) - t0 )) s" | tee -a "$OUT/asv_run.log"
        echo "$(( $(date +%s) - t0 ))" >"$OUT/wall_asv.txt"
        if python3 -m kvbench.cli regressions --help >/dev/null 2>&1; then
            python3 -m kvbench.cli regressions --machine "$MACHINE" --json "$OUT/regressions.json" \
                2>&1 | tee "$OUT/regressions.log" | head -40
        else
            echo "this checkout has no 'kvbench regressions': results kept for a later check"
        fi
        tar czf "$OUT/asv_results.tgz" results
        ;;
    table) ;;
    *) echo "unknown phase $phase (bisect, flat, asv, table)"; exit 2 ;;
    esac
done

python3 - "$OUT" "$PLANTED" <<'PY'
import json, os, sys
out, planted = sys.argv[1], sys.argv[2]
print(f"\n{'phase':8} {'verdict':14} {'named':9} {'planted?':8} {'effect':>22} {'runs':>5} "
      f"{'measure s':>9} {'wall s':>6}")
for name in ("planted", "flat"):
    path = os.path.join(out, f"bisect_{name}.json")
    if not os.path.exists(path):
        continue
    r = json.load(open(path))
    ab = r.get("confirmation") or r.get("endpoints") or {}
    effect = (f"{ab['effect']:+.2%} [{ab['ci_low']:+.2%},{ab['ci_high']:+.2%}]" if ab else "-")
    named = (r["culprit"] or "-")[:8]
    ok = "yes" if r["culprit"] == planted else ("n/a" if name == "flat" else "NO")
    print(f"{name:8} {r['verdict']:14} {named:9} {ok:8} {effect:>22} {r['cost']['runs']:>5} "
          f"{r['cost']['process_s']:>9.0f} {r['cost']['wall_s']:>6.0f}")
    print(f"         {r['summary'][:160]}")
wall = os.path.join(out, "wall_asv.txt")
if os.path.exists(wall):
    print(f"asv      run over the span around the plant: {open(wall).read().strip()} s wall")
PY
