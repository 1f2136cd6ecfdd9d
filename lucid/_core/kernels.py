"""Fused device kernels: one launch where a chain of array calls would make many.

NOTE [Fused device kernels]
On a GPU a Lucid training step is bound by host time per kernel launch, not by the GPU (README
"GPU": about 10 us of host time per CuPy launch, measured), so the hot chains of a step —
cross-entropy's forward and backward, ReLU's backward, the optimizer update — are one kernel
each on a device. A :class:`Kernel` is written once, as the body of a CUDA C++ function run by
one logical thread per index ``i`` (no shared memory, no synchronisation between threads), so
that the very same text runs

- on a GPU: compiled by NVRTC through CuPy's ``RawModule``, with a bounds check on ``i``
  (target ``"cuda"``);
- on the CPU: compiled by the host's C++ compiler as a loop over ``i`` (target ``"cpu"``). The
  strict stand-in device (``lucid.testing.strict_device``) launches kernels this way, so CI runs
  the source the GPU runs, through the same calls, and checks it against NumPy.

The NumPy (CPU) backend never uses them: NumPy's calls are one vectorised pass each, and a
kernel's serial loop would be slower. An op asks :func:`kernel_for` and runs its generic array
code where the answer is None (no compiler for the stand-in, a dtype or layout the kernel does
not take): the same values with more launches. Operands must be C-contiguous, of the types the
kernel was instantiated with; the op checks that before launching.
"""
from __future__ import annotations

import os

import numpy as np

from . import backend as _backend

_SCALAR_TYPES = {"long long": np.int64, "int": np.int32, "float": np.float32, "double": np.float64}
_C_TYPE_OF = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
              np.dtype(np.int32): "int", np.dtype(np.int64): "long long"}

_CUDA_TEMPLATE = """#define LUCID_NAN __int_as_float(0x7fc00000)
{typedefs}
extern "C" __global__ void {name}(const long long lucid_n, {params}) {{
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= lucid_n) return;
{body}
}}
"""

# The same body as a loop; the lambda makes the body's ``return`` end one index, as on a GPU.
_CPU_TEMPLATE = """#include <cmath>
using std::exp; using std::log; using std::sqrt; using std::fmax; using std::fmin; using std::isnan;
#define LUCID_NAN NAN
// CUDA's atomicAdd, for bodies that scatter: the loop runs one index at a time
template <class A> static inline A atomicAdd(A* p, A v) {{ A old = *p; *p += v; return old; }}
{typedefs}
extern "C" void {name}(const long long lucid_n, {params}) {{
    for (long long i = 0; i < lucid_n; ++i) [&]() {{
{body}
    }}();
}}
"""


class Kernel:
    """One fused kernel, written once for a GPU and the CPU stand-in. See NOTE [Fused device kernels].

    Parameters
    ----------
    name : str
        The C name of the kernel.
    params : str
        Its C parameter list after the implicit ``const long long lucid_n`` (the number of
        indices), e.g. ``"const T* x, T* out, long long n"``. Type names listed in ``types``
        are placeholders bound per launch (``T`` the float type ...).
    body : str
        C++ statements run for each index ``i`` in ``[0, lucid_n)``; ``return`` ends that index.
    types : tuple of str
        The placeholder type names, bound in this order by :func:`kernel_for`.

    Examples
    --------
    >>> import numpy as np
    >>> from lucid._core.kernels import Kernel
    >>> k = Kernel("scale", "const T* x, T f, T* out", "out[i] = f * x[i];")
    >>> "typedef float T;" in k.source("cuda", (np.float32,))
    True
    """

    def __init__(self, name, params, body, types=("T",)):
        self.name, self.params, self.body, self.types = name, params, body, tuple(types)
        self.param_types = [_param_type(p) for p in params.split(",")]

    def source(self, target, dtypes):
        """The C source for ``target`` ("cuda" or "cpu") with the placeholders bound to ``dtypes``."""
        typedefs = "\n".join(f"typedef {_C_TYPE_OF[np.dtype(d)]} {t};" for t, d in zip(self.types, dtypes))
        template = _CUDA_TEMPLATE if target == "cuda" else _CPU_TEMPLATE
        return template.format(typedefs=typedefs, name=self.name, params=self.params, body=self.body)

    def scalar_types(self, dtypes):
        """Per parameter: None for a pointer, else the NumPy scalar type its value is passed as."""
        bound = {t: np.dtype(d).type for t, d in zip(self.types, dtypes)}
        return [None if pointer else bound.get(base) or _SCALAR_TYPES[base] for base, pointer in self.param_types]

    def __repr__(self):
        return f"<lucid kernel {self.name}>"


def _param_type(param):
    """``(base type, is pointer)`` of one C parameter such as ``const T* x``."""
    words = param.replace("*", " * ").split()[:-1]
    pointer = "*" in words
    base = " ".join(w for w in words if w not in ("const", "*"))
    return base, pointer


def kernel_for(arr, kernel, *dtypes):
    """A launcher ``launch(n, *args)`` of ``kernel`` on ``arr``'s device, or None.

    None on the CPU (NumPy) backend and wherever the device has no way to run the kernel
    (see NOTE [Fused device kernels]); ``dtypes`` bind the kernel's placeholder types.
    """
    b = _backend._BY_TYPE.get(arr.__class__)
    if b is None or b.kernels is None:
        return None
    key = (kernel, dtypes)
    cache = b.kernel_cache
    launch = cache.get(key, False)
    if launch is False:
        try:
            launch = cache[key] = b.kernels(kernel, dtypes)
        except Exception:  # a compiler or driver that cannot build it: the generic code runs
            launch = cache[key] = None
    return launch


# ----------------------------------------------------------------------- CuPy (a GPU)


def cupy_factory(cupy):
    """``make(kernel, dtypes) -> launch`` running kernels on CuPy's GPUs (NVRTC, one module per GPU)."""
    def make(kernel, dtypes):
        source = kernel.source("cuda", dtypes)
        scalars = kernel.scalar_types(dtypes)
        first = scalars.index(None)  # the first array operand says which GPU runs it
        functions = {}
        block = 256

        def function(gpu):
            with cupy.cuda.Device(gpu):
                fn = functions[gpu] = cupy.RawModule(code=source).get_function(kernel.name)
            return fn

        # compiled now, not at the first launch inside an op: a failure here means the op's
        # generic code runs (kernel_for), never a half-run op
        function(cupy.cuda.runtime.getDevice())

        def launch(n, *args):
            if n <= 0:
                return
            values = (np.int64(n),) + tuple(a if s is None else s(a) for s, a in zip(scalars, args))
            grid = ((n + block - 1) // block,)
            gpu = args[first].device.id
            fn = functions.get(gpu) or function(gpu)
            if gpu == cupy.cuda.runtime.getDevice():
                fn(grid, (block,), values)
            else:  # a launch runs on the current device: make it the operands' (cuda:N)
                with cupy.cuda.Device(gpu):
                    fn(grid, (block,), values)

        return launch

    return make


# ------------------------------------------------------------------ the CPU stand-in


# The stand-in's machinery imports ctypes, hashlib, shutil, subprocess and tempfile when first
# used: ``import lucid`` pays nothing for it.


def host_compiler():
    """The host C++ compiler the stand-in builds kernels with (``$CXX``, g++, clang++), or None."""
    import shutil

    for name in (os.environ.get("CXX"), "g++", "clang++", "c++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _cache_dir():
    root = os.environ.get("LUCID_KERNEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "lucid", "kernels")
    os.makedirs(root, exist_ok=True)
    return root


def compile_cpu(source):
    """``source`` built by the host compiler into a shared library (cached by its hash), loaded."""
    import ctypes
    import hashlib
    import subprocess
    import tempfile

    cxx = host_compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler for the stand-in's kernels")
    digest = hashlib.sha256((cxx + "\0" + source).encode()).hexdigest()[:24]
    root = _cache_dir()
    path = os.path.join(root, f"k{digest}.so")
    if not os.path.exists(path):
        with tempfile.TemporaryDirectory(dir=root) as tmp:  # built aside, then renamed: never half a file
            src, lib = os.path.join(tmp, "k.cpp"), os.path.join(tmp, "k.so")
            with open(src, "w") as f:
                f.write(source)
            done = subprocess.run([cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-o", lib, src],
                                  capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"compiling a kernel failed:\n{done.stderr}")
            os.replace(lib, path)
    return ctypes.CDLL(path)


def cpu_factory(pointer_of):
    """``make(kernel, dtypes) -> launch`` running kernels on the CPU, for the strict stand-in.

    ``pointer_of(array)`` gives an operand's address; operands must be C-contiguous and of the
    bound dtype (checked: this is the test device, where a wrong operand must fail loudly, not
    read astray as it would on a GPU).
    """
    import ctypes

    c_types = {"long long": ctypes.c_longlong, "int": ctypes.c_int, "float": ctypes.c_float,
               "double": ctypes.c_double}

    def make(kernel, dtypes):
        fn = getattr(compile_cpu(kernel.source("cpu", dtypes)), kernel.name)
        scalars = kernel.scalar_types(dtypes)
        bound = {t: _C_TYPE_OF[np.dtype(d)] for t, d in zip(kernel.types, dtypes)}
        fn.argtypes = [ctypes.c_longlong] + [
            ctypes.c_void_p if s is None else c_types[bound.get(base, base)]
            for s, (base, _) in zip(scalars, kernel.param_types)]
        fn.restype = None
        by_name = {**{t: np.dtype(d) for t, d in zip(kernel.types, dtypes)},
                   **{c: np.dtype(t) for c, t in _SCALAR_TYPES.items()}}
        expected = [by_name[base] if s is None else None for s, (base, _) in zip(scalars, kernel.param_types)]

        def launch(n, *args):
            if len(args) != len(scalars):
                raise TypeError(f"kernel {kernel.name}: expected {len(scalars)} arguments, got {len(args)}")
            values = []
            for s, want, a in zip(scalars, expected, args):
                if s is None:
                    if not a.flags["C_CONTIGUOUS"] or a.dtype != want:
                        raise ValueError(f"kernel {kernel.name}: expected a C-contiguous {want} operand, got "
                                         f"{a.dtype} of shape {a.shape} (strides {a.strides})")
                    values.append(pointer_of(a))
                else:
                    values.append(s(a).item())
            if n > 0:
                fn(n, *values)

        return launch

    return make
