"""Build .device/var/<name>.cu (a variant of cluster_decode.cu) as kvbench/kernels/cuda/<name>.cu; print the library path."""
import shutil
import sys
from pathlib import Path

from kvbench.kernels import cuda_build

name = sys.argv[1]
shutil.copy(f".device/var/{name}.cu", f"kvbench/kernels/cuda/{name}.cu")
out = Path(f".device/var/{name}_lib")
out.mkdir(exist_ok=True)
lib, _ = cuda_build.compile_source(name, out)
print(lib)
