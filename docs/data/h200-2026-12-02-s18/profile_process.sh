set -uo pipefail
export PYTHONUNBUFFERED=1 PIP_NO_INDEX=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir .whl/*.whl 2>&1 | grep -v WARNING
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . 2>&1 | grep -v WARNING
python3 - <<'PY'
import cProfile, io, os, pstats, time
t = time.time(); import torch; t1 = time.time(); torch.zeros(1, device="cuda"); t2 = time.time()
print(f"import torch {t1 - t:.2f} s, CUDA context {t2 - t1:.2f} s")
from benchmarks import _common
t = time.time(); _common.measure_group_here("host"); print(f"host group in one process, unprofiled: {time.time() - t:.1f} s")
pr = cProfile.Profile(); t = time.time(); pr.enable(); _common.measure_group_here("host"); pr.disable()
print(f"again, profiled: {time.time() - t:.1f} s")
pr.dump_stats(os.environ["OUT"] + "/host_group.prof")
s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40); print(s.getvalue()[-9000:])
PY
