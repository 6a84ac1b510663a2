#!/usr/bin/env bash
# Build the FlashInfer that kvbench's peer rows use on the device machine (kvbench/
# flashinfer_peer.py), on a machine WITH network and nvcc 13.0, no GPU needed. Result:
# .flashinfer/site/{flashinfer,tvm_ffi,...} (git-ignored) with the decode modules pre-compiled
# for sm_90a under site/flashinfer/data/aot/ (FlashInfer's own AOT location), and
# .device/flashinfer.tar.xz (~5 MB): the form that fits the device tool's 64 MiB carry beside
# the working tree (`tar -xJf .device/flashinfer.tar.xz` there, from the repo root).
#
#   bash scripts/build_flashinfer_carry.sh            # CUDA-core decode modules: ~2 min, 2 cores
#   WITH_TC=1 bash scripts/build_flashinfer_carry.sh  # + tensor-core decode (FA2 prefill)
#                                                     # modules: ~7 min (the table uses both)
#
# Env: PY (python3.12 interpreter, default pyenv 3.12.1), VENV (default: the kvbench cache
# root's flashinfer-build-venv folder, private; torch 2.11.0 (cu130 build from PyPI, matches the
# device) is installed there to generate sources and read the C++ ABI flag), CUDA_HOME (default
# /usr/local/cuda). Scratch folders are made with mktemp -d (fresh, 0700), never fixed names.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CARRY=$ROOT/.flashinfer
SITE=$CARRY/site
FI_VER=0.6.6
TVM_FFI_VER=0.1.15.post2
PY=${PY:-/root/.pyenv/versions/3.12.1/bin/python3.12}
VENV=${VENV:-$(cd "$ROOT" && python3 -m kvbench.core.paths flashinfer-build-venv)}
export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
DL=$(mktemp -d -t fi_carry_dl.XXXXXX)

if [ ! -x "$VENV/bin/python" ]; then "$PY" -m venv "$VENV"; fi
"$VENV/bin/pip" install -q torch==2.11.0 numpy jinja2 filelock packaging einops click requests \
  tabulate tqdm nvidia-ml-py cuda-bindings ninja
"$VENV/bin/pip" download -q --no-deps -d "$DL" "flashinfer-python==$FI_VER"
"$VENV/bin/pip" download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 -d "$DL" "apache-tvm-ffi==$TVM_FFI_VER"

rm -rf "$SITE" && mkdir -p "$SITE"
for w in "$DL"/*.whl; do (cd "$SITE" && "$VENV/bin/python" -m zipfile -e "$w" .); done
# Not needed by the decode path, neither at run time nor to JIT it: CUTLASS headers (33 MiB)
# and the wheel's build-backend helpers.
rm -rf "$SITE/flashinfer/data/cutlass" "$SITE/build_backend.py" "$SITE/build_utils.py"
chmod +x "$SITE"/tvm_ffi/lib/*.so "$SITE"/tvm_ffi/*.so

# A libcuda.so stub for the link line (-lcuda); the modules end up not needing it
# (--as-needed drops it; only libcudart.so.13 remains in DT_NEEDED).
STUB=$(mktemp -d -t fi_cuda_stub.XXXXXX)
echo "" | gcc -shared -Wl,-soname,libcuda.so.1 -o "$STUB/libcuda.so" -x c -

export PYTHONPATH=$SITE
export FLASHINFER_WORKSPACE_BASE=$(mktemp -d -t fi_carry_ws.XXXXXX)
export FLASHINFER_CUDA_ARCH_LIST="9.0a"   # what FlashInfer itself picks on an H100/H200
export FLASHINFER_EXTRA_LDFLAGS="-L$STUB"
export MAX_JOBS=${MAX_JOBS:-$(nproc)}
WITH_TC=${WITH_TC:-0} "$VENV/bin/python" - <<'EOF'
import os, shutil, time
from pathlib import Path
import torch
from flashinfer.jit import env as jit_env
from flashinfer.jit.attention.modules import gen_batch_decode_module, gen_batch_prefill_module

specs = []
for dt in (torch.float16, torch.bfloat16):
    # BatchDecodeWithPagedKVCacheWrapper.plan(use_tensor_cores=False) asks for exactly this
    specs.append(gen_batch_decode_module(dt, dt, dt, torch.int32, 128, 128, 0, False, False))
    if os.environ["WITH_TC"] == "1":
        # ... and use_tensor_cores=True with backend="fa2" for this one
        specs.append(gen_batch_prefill_module("fa2", dt, dt, dt, torch.int32, 128, 128, 0,
                                              False, False, False))
for spec in specs:
    t = time.time()
    spec.build(verbose=False)
    dst = jit_env.FLASHINFER_AOT_DIR / spec.name / f"{spec.name}.so"
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(spec.jit_library_path, dst)
    print(f"{time.time() - t:6.1f}s {dst.relative_to(jit_env._package_root.parent)}")
EOF
find "$SITE" -name __pycache__ -type d -prune -exec rm -rf {} +
rm -rf "$DL" "$STUB" "$FLASHINFER_WORKSPACE_BASE"
mkdir -p "$ROOT/.device"
tar -C "$ROOT" -cJf "$ROOT/.device/flashinfer.tar.xz" .flashinfer/site
du -sh "$CARRY" "$ROOT/.device/flashinfer.tar.xz"
