#!/usr/bin/env bash
# Set up (a local .venv with the test and distributed (mpi4py + mpich) extras) and run the whole test suite, in parallel,
# then the device-seam suites again on the strict stand-in device, the op database with device inputs, and the
# device-seam suites on the stand-in's second device while the first is current.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test,distributed]'
targets=(tests)
# The seed acceptance tests live beside the checkout when it sits in the workspace.
if [ -d ../shared/acceptance ]; then targets+=(../shared/acceptance); fi
# One BLAS thread per test worker: two workers on two cores, no oversubscription.
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
.venv/bin/python -m pytest -n 2 -p no:cacheprovider "${targets[@]}" "$@"
# Second pass: the op database, the autograd and func suites, the training stack (nn, optim,
# data), distributions, linalg, fft, signal, complex, the regressions, the API surface, serialization,
# error messages and the GPU suite on the strict
# stand-in device, which behaves like CuPy on the CPU (README "GPU"; NOTE [Strict stand-in
# device]).
.venv/bin/python -m pytest -n 2 -p no:cacheprovider --lucid-device=strict \
  tests/ops/test_opdb.py tests/ops/test_linalg.py tests/ops/test_linalg_solvers.py tests/fuzz tests/autograd tests/func tests/nn tests/optim tests/data tests/distributions \
  tests/linalg tests/fft tests/complex tests/regressions tests/test_dtypes.py tests/test_indexing.py \
  tests/test_random.py tests/special tests/signal tests/surface tests/test_serialization.py tests/test_serialization_torch.py tests/test_errors_api.py tests/gpu \
  tests/fx tests/export tests/test_library.py tests/sparse tests/nested tests/test_subclass_dispatch.py tests/test_core2_subclasses.py "$@"
# Third pass: the op database with its samples on the stand-in's second device while the
# default device stays the CPU and the current one strict:0, as a user's x.to("cuda:1") (NOTE
# [Device inputs, CPU default] in tests/conftest.py, NOTE [Several devices]).
.venv/bin/python -m pytest -n 2 -p no:cacheprovider --lucid-inputs=strict:1 tests/ops/test_opdb.py "$@"
# Fourth pass: the training stack, autograd, transforms, the API surface and the regressions with the
# __torch_function__ dispatchers on from the start, as in a program that defines a Tensor subclass
# (NOTE [Torch function]; the other passes switch them off after each test that turns them on).
.venv/bin/python -m pytest -n 2 -p no:cacheprovider --lucid-torch-function \
  tests/nn tests/autograd tests/func tests/surface tests/regressions tests/fx tests/export tests/sparse tests/nested \
  tests/test_overrides.py tests/test_serialization.py "$@"
# Fifth pass: everything on the stand-in's second device while the first stays current, as a
# tensor on cuda:1 of a process whose current GPU is cuda:0 (NOTE [Several devices]), and with no
# cuDNN, as a GPU machine without it: convolutions take the im2col path (NOTE [cuDNN convolutions];
# the other strict passes run them through the emulated cuDNN). The regressions (whole programs,
# half this pass's time) run on the device in the second pass; here the suites that test ops,
# rules, layers and their state one by one.
LUCID_STRICT_CUDNN=0 exec .venv/bin/python -m pytest -n 2 -p no:cacheprovider --lucid-device=strict:1 \
  tests/ops/test_opdb.py tests/ops/test_linalg.py tests/ops/test_linalg_solvers.py tests/fuzz tests/autograd tests/func tests/nn tests/optim tests/data tests/distributions \
  tests/linalg tests/fft tests/complex tests/test_dtypes.py tests/test_indexing.py \
  tests/test_random.py tests/special tests/signal tests/surface tests/test_serialization.py tests/test_serialization_torch.py tests/test_errors_api.py tests/gpu \
  tests/fx tests/export tests/test_library.py tests/sparse tests/nested tests/test_subclass_dispatch.py tests/test_core2_subclasses.py "$@"
