#!/usr/bin/env bash
# The CUDA proof of issue 13, for a lent GPU machine (the device tool) with CuPy, PyTorch and
# pytest preinstalled and no network: every step is time-boxed and logs under $OUT, so a run
# cut short still reports. Usage: [T_CUDA=s T_BENCH=s T_PROFILE=s T_OPDB=s T_AUTOGRAD=s T_NN=s
# T_SWEEP=s T_INPUTS=s] bash scripts/gpu_check.sh [quick]   (each T_* bounds one step, T_RERUN
# the quick rerun; 0 skips it)
#   (default) environment, the CUDA and fused-kernel tests, bench_gpu.py, gpu_profile.py, the op
#             database and the autograd/func/nn/optim/data suites on --lucid-device=cuda, the
#             device sweep and the op database with CUDA inputs and the CPU as default device
#   quick     environment, the CUDA tests, bench_gpu.py, and the tests listed in $RERUN (a file)
set -u
OUT=${OUT:-/tmp/gpu_out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 LUCID_FAILURE_LOG=$OUT/failures.tsv
export CUPY_CACHE_DIR=$PWD/.cupy_cache
mkdir -p "$CUPY_CACHE_DIR"
PY=${PYTHON:-python3}
step() { echo "== $1 ($(date +%T))"; }
# A step whose time limit is 0 is skipped.
timeout() { [ "$1" = 0 ] && { echo "(skipped)"; return 0; }; command timeout "$@"; }
step env
{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  $PY -c "import sys, cupy, numpy, scipy; print(sys.version.split()[0], 'cupy', cupy.__version__, 'cuda rt', cupy.cuda.runtime.runtimeGetVersion(), 'numpy', numpy.__version__, 'scipy', scipy.__version__)"
  $PY -c "import torch; print('torch', torch.__version__, torch.cuda.is_available(), 'cudnn', torch.backends.cudnn.version())"
  $PY -c "import lucid; print('lucid cudnn', lucid.backends.cudnn.version())"
} 2>&1 | tee "$OUT/env.txt"
PT="$PY -m pytest -q -p no:cacheprovider --tb=short -o addopts="
step cuda-tests
timeout ${T_CUDA:-100} $PT tests/gpu/test_cuda.py tests/gpu/test_fused_kernels.py tests/gpu/test_cudnn.py -rfE 2>&1 | tail -60 | tee "$OUT/cuda_tests.log"
step bench
timeout ${T_BENCH:-100} $PY benchmarks/bench_gpu.py 2>&1 | tee "$OUT/bench.txt"
if [ "${1:-}" = quick ]; then
  if [ -n "${RERUN:-}" ] && [ -s "$RERUN" ]; then
    step rerun
    timeout ${T_RERUN:-200} $PT -n 8 --lucid-device=cuda --timeout 60 $(cat "$RERUN") 2>&1 | tail -40 | tee "$OUT/rerun.log"
  fi
else
  step profile
  timeout ${T_PROFILE:-45} $PY benchmarks/gpu_profile.py --steps 10 > "$OUT/profile.txt" 2>&1; tail -5 "$OUT/profile.txt"
  step opdb
  timeout ${T_OPDB:-150} $PT -n 15 --tb=line --lucid-device=cuda --timeout 60 tests/ops/test_opdb.py 2>&1 | tail -8 | tee "$OUT/opdb.log"
  step autograd-func
  timeout ${T_AUTOGRAD:-60} $PT -n 15 --lucid-device=cuda --timeout 60 tests/autograd tests/func tests/gpu 2>&1 | tail -8 | tee "$OUT/autograd_func.log"
  step training-stack  # nn/optim/data on the GPU; then device inputs with the CPU as default device
  timeout ${T_NN:-90} $PT -n 15 --lucid-device=cuda --timeout 60 tests/nn tests/optim tests/data 2>&1 | tail -8 | tee "$OUT/nn.log"
  LUCID_SWEEP_DEVICE=cuda timeout ${T_SWEEP:-40} $PT tests/gpu/test_device_sweep.py 2>&1 | tail -8 | tee "$OUT/sweep.log"
  timeout ${T_INPUTS:-150} $PT -n 15 --tb=line --lucid-inputs=cuda --timeout 60 tests/ops/test_opdb.py 2>&1 | tail -8 | tee "$OUT/opdb_inputs.log"
fi
step done
# The compiled-kernel cache travels back (at most 16 MiB) so a next call can carry it.
tar czf "$OUT/cupy_cache.tgz" -C "$PWD" .cupy_cache 2>/dev/null
ls -la "$OUT"
[ -s "$OUT/failures.tsv" ] && cut -f1 "$OUT/failures.tsv" | sed 's/\[.*//' | sort | uniq -c | sort -rn | head -20
[ -s "$OUT/failures.tsv" ] && cut -f3 "$OUT/failures.tsv" | sort | uniq -c | sort -rn | head -25
exit 0
