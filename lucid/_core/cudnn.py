"""cuDNN's convolutions, called through ctypes: the conv primitives' impls on a GPU.

NOTE [cuDNN convolutions]
CuPy 14 dropped its cuDNN bindings, and an im2col + cuBLAS convolution costs a GPU several
times cuDNN's work (README "GPU": the columns of W5's second conv are 231 MB at batch 512) and
a handful of launches where cuDNN makes one. So a device conv (forward, input gradient,
weight gradient: the three bilinear primitives of NOTE [Conv as three bilinear primitives])
calls cuDNN's convolution API directly, the way PyTorch's ``cudnn_convolution`` does:

- the library is ``libcudnn.so.9`` (or 8) from the ``nvidia-cudnn-cu12``/``-cu13`` wheel that
  ``lucid[gpu]`` installs, or ``LUCID_CUDNN_LIBRARY``, or the system's; it is loaded when a
  device conv first runs (``import lucid`` loads nothing), and where it is missing or fails,
  :func:`for_array` answers None and the op runs its im2col path: the same values, slower;
- descriptors and the algorithm are chosen once per geometry (shapes, dtype, stride, padding,
  dilation, groups and the flags below) and cached (:class:`Cudnn`); each call after that is
  one C call (plus one workspace allocation from the array module's pool where the algorithm
  needs one);
- ``lucid.backends.cudnn`` holds PyTorch's flags, with PyTorch's meaning: ``enabled`` (False:
  the im2col path), ``benchmark`` (time the algorithms once per geometry, cuDNN's ``Find``;
  else its heuristics, ``Get..._v7``), ``deterministic`` (also ``lucid.use_deterministic_
  algorithms``: only algorithms cuDNN reports as reproducible) and ``allow_tf32`` (float32
  convolutions may use TF32 tensor cores, PyTorch's default; False forces FMA math);
- cuDNN computes on the handle's stream, set to the array module's current stream before each
  call, so kernels stay ordered with CuPy's;
- applicability (else None, the im2col path): float16/32/64 operands of one dtype, 1-3 spatial
  dims, symmetric padding (an asymmetric pair is taken where the extra padding is never read,
  the same output size), a non-empty batch.

The strict stand-in device (CI has no GPU) runs this very module against an emulation of the
library's C functions (``lucid/testing/strict_cudnn.py``): it reads the arrays through the
pointers and descriptors it is given and computes with Lucid's CPU convolution, so the
descriptors, pointers, alpha/beta scaling, workspaces and the choice of algorithm are checked
in CI; only cuDNN's own kernels are not.
"""
from __future__ import annotations

import collections
import ctypes
import os

import numpy as np

# cudnnDataType_t, per NumPy dtype; cudnnConvolutionMode_t; cudnnMathType_t; cudnnDeterminism_t
DATA_TYPE = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2}
CROSS_CORRELATION = 1
DEFAULT_MATH, TENSOR_OP_MATH, TENSOR_OP_MATH_ALLOW_CONVERSION, FMA_MATH = 0, 1, 2, 3
DETERMINISTIC = 1
NCHW = 0
# how many algorithms each kind has (cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t's COUNT)
ALGO_COUNT = {"forward": 8, "backward_data": 6, "backward_filter": 7}
WORKSPACE_LIMIT = 1 << 30  # the most workspace an algorithm may ask for (larger ones are skipped)


class AlgoPerf(ctypes.Structure):
    """cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t (one layout for the three)."""

    _fields_ = [("algo", ctypes.c_int), ("status", ctypes.c_int), ("time", ctypes.c_float),
                ("memory", ctypes.c_size_t), ("determinism", ctypes.c_int), ("mathType", ctypes.c_int),
                ("reserved", ctypes.c_int * 3)]


_P, _I, _S = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t
_IP, _SP = ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_size_t)
_PERF = ctypes.POINTER(AlgoPerf)
# The C functions used, with their argument types (restype cudnnStatus_t unless listed).
SIGNATURES = {
    "cudnnCreate": [ctypes.POINTER(_P)],
    "cudnnSetStream": [_P, _P],
    "cudnnCreateTensorDescriptor": [ctypes.POINTER(_P)],
    "cudnnSetTensorNdDescriptor": [_P, _I, _I, _IP, _IP],
    "cudnnDestroyTensorDescriptor": [_P],
    "cudnnCreateFilterDescriptor": [ctypes.POINTER(_P)],
    "cudnnSetFilterNdDescriptor": [_P, _I, _I, _I, _IP],
    "cudnnDestroyFilterDescriptor": [_P],
    "cudnnCreateConvolutionDescriptor": [ctypes.POINTER(_P)],
    "cudnnSetConvolutionNdDescriptor": [_P, _I, _IP, _IP, _IP, _I, _I],
    "cudnnSetConvolutionGroupCount": [_P, _I],
    "cudnnSetConvolutionMathType": [_P, _I],
    "cudnnDestroyConvolutionDescriptor": [_P],
    "cudnnGetConvolutionNdForwardOutputDim": [_P, _P, _P, _I, _IP],
    "cudnnGetConvolutionForwardAlgorithm_v7": [_P, _P, _P, _P, _P, _I, _IP, _PERF],
    "cudnnGetConvolutionBackwardDataAlgorithm_v7": [_P, _P, _P, _P, _P, _I, _IP, _PERF],
    "cudnnGetConvolutionBackwardFilterAlgorithm_v7": [_P, _P, _P, _P, _P, _I, _IP, _PERF],
    "cudnnFindConvolutionForwardAlgorithmEx": [_P, _P, _P, _P, _P, _P, _P, _P, _I, _IP, _PERF, _P, _S],
    "cudnnFindConvolutionBackwardDataAlgorithmEx": [_P, _P, _P, _P, _P, _P, _P, _P, _I, _IP, _PERF, _P, _S],
    "cudnnFindConvolutionBackwardFilterAlgorithmEx": [_P, _P, _P, _P, _P, _P, _P, _P, _I, _IP, _PERF, _P, _S],
    "cudnnGetConvolutionForwardWorkspaceSize": [_P, _P, _P, _P, _P, _I, _SP],
    "cudnnGetConvolutionBackwardDataWorkspaceSize": [_P, _P, _P, _P, _P, _I, _SP],
    "cudnnGetConvolutionBackwardFilterWorkspaceSize": [_P, _P, _P, _P, _P, _I, _SP],
    "cudnnConvolutionForward": [_P, _P, _P, _P, _P, _P, _P, _I, _P, _S, _P, _P, _P],
    "cudnnConvolutionBackwardData": [_P, _P, _P, _P, _P, _P, _P, _I, _P, _S, _P, _P, _P],
    "cudnnConvolutionBackwardFilter": [_P, _P, _P, _P, _P, _P, _P, _I, _P, _S, _P, _P, _P],
    "cudnnAddTensor": [_P, _P, _P, _P, _P, _P, _P],
}
_RESTYPES = {"cudnnGetVersion": ctypes.c_size_t, "cudnnGetErrorString": ctypes.c_char_p}


class CudnnError(RuntimeError):
    """A cuDNN call that returned an error status."""


class CudnnUnusable(CudnnError):
    """cuDNN loaded but cannot run here (no handle: a driver or CUDA version it does not take)."""


def _candidates():
    """Where libcudnn may be: LUCID_CUDNN_LIBRARY, the nvidia-cudnn wheels, the loader's path."""
    explicit = os.environ.get("LUCID_CUDNN_LIBRARY")
    if explicit:
        return [explicit]
    found = []
    try:
        import nvidia  # the namespace package of NVIDIA's pip wheels (nvidia-cudnn-cu12/-cu13)
    except ImportError:
        nvidia = None
    import glob

    for root in getattr(nvidia, "__path__", ()):
        for version in ("9", "8"):  # nvidia/cudnn/lib/ (cu12 wheels), or one level deeper
            for pattern in ("cudnn/lib", "*/cudnn/lib", "*/lib"):
                found += sorted(glob.glob(os.path.join(root, pattern, f"libcudnn.so.{version}")))
    # by name last: the loader's path, or the copy a process already loaded (PyTorch's)
    return list(dict.fromkeys(found)) + ["libcudnn.so.9", "libcudnn.so.8"]


def load_library():
    """``(library, None)`` with the signatures of :data:`SIGNATURES` set, or ``(None, reason)``."""
    reasons = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            reasons.append(f"{path}: {e}")
            continue
        try:
            for name, argtypes in SIGNATURES.items():
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = argtypes, ctypes.c_int
            for name, restype in _RESTYPES.items():
                getattr(lib, name).restype = restype
        except AttributeError as e:  # a cuDNN without the legacy convolution API
            reasons.append(f"{path}: {e}")
            continue
        return lib, None
    return None, "no usable cuDNN library (" + "; ".join(reasons) + ")"


def _ints(values):
    values = [int(v) for v in values]
    return (ctypes.c_int * len(values))(*values)


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(int(n), 1)
    return tuple(reversed(strides))


class _Geometry:
    """The descriptors of one convolution geometry and, per direction, its algorithm and
    workspace size (chosen on first use)."""

    __slots__ = ("x", "w", "y", "bias", "conv", "algos")

    def __init__(self):
        self.x = self.w = self.y = self.bias = self.conv = None
        self.algos = {}


class Cudnn:
    """cuDNN's convolution API over a library object with cuDNN's C functions.

    Parameters
    ----------
    lib : object
        The library: ``ctypes.CDLL`` from :func:`load_library`, or the strict stand-in's
        emulation (``lucid.testing.strict_cudnn``).
    xp : module
        The array module of the device (CuPy), for outputs and workspaces.
    pointer_of : callable
        ``pointer_of(array) -> int``, the device address of an array's first element.
    stream_of : callable
        ``stream_of() -> int``, the array module's current stream (0: the default one).

    See NOTE [cuDNN convolutions].

    Examples
    --------
    >>> from lucid._core.cudnn import Cudnn, conv_geometry_ok
    >>> conv_geometry_ok((8, 8), (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1))
    True
    """

    def __init__(self, lib, xp, pointer_of, stream_of, cache_size=512):
        self.lib, self.xp, self.pointer_of, self.stream_of = lib, xp, pointer_of, stream_of
        self._handles = {}  # device index -> [handle, stream last set]
        self._workspaces = {}  # (device index, stream) -> a uint8 array, grown as needed
        self._geometries = collections.OrderedDict()
        self._cache_size = cache_size
        self.counts = collections.Counter()  # convolution calls made, per direction (for tests and scripts)
        # alpha = 1 and beta = 0/1, as host scalars of the compute type (double for float64)
        self._scalars = {}
        for code, ctype in ((0, ctypes.c_float), (1, ctypes.c_double), (2, ctypes.c_float)):
            keep = (ctype(1.0), ctype(0.0))
            self._scalars[code] = keep + (ctypes.addressof(keep[0]), ctypes.addressof(keep[1]))

    # ----------------------------------------------------------------- plumbing
    def check(self, status, what):
        if status != 0:
            text = self.lib.cudnnGetErrorString(status)
            text = text.decode() if isinstance(text, bytes) else str(text)
            raise CudnnError(f"cuDNN: {what} failed with status {status} ({text})")

    def version(self):
        return int(self.lib.cudnnGetVersion())

    def handle(self, index):
        """The handle of device ``index`` (current), its stream set to the current stream."""
        entry = self._handles.get(index)
        if entry is None:
            handle = ctypes.c_void_p()
            try:
                self.check(self.lib.cudnnCreate(ctypes.byref(handle)), "cudnnCreate")
            except CudnnError as e:
                raise CudnnUnusable(str(e)) from None
            entry = self._handles[index] = [handle, None]
        stream = self.stream_of()
        if stream != entry[1]:
            self.check(self.lib.cudnnSetStream(entry[0], stream), "cudnnSetStream")
            entry[1] = stream
        return entry[0]

    def workspace(self, index, size):
        """The address of at least ``size`` bytes of workspace on device ``index``. One buffer per
        device and stream, kept: calls on one stream run in order, so they can share it (a pool
        allocation per call costs host time a GPU step is bound by, README "GPU")."""
        key = (index, self._handles[index][1])
        buf = self._workspaces.get(key)
        if buf is None or buf.size < size:
            buf = self._workspaces[key] = self.xp.empty((size,), dtype=np.uint8)
        return self.pointer_of(buf)

    def _tensor(self, code, shape):
        desc = ctypes.c_void_p()
        self.check(self.lib.cudnnCreateTensorDescriptor(ctypes.byref(desc)), "cudnnCreateTensorDescriptor")
        self.check(self.lib.cudnnSetTensorNdDescriptor(desc, code, len(shape), _ints(shape),
                                                       _ints(_contiguous_strides(shape))),
                   f"cudnnSetTensorNdDescriptor{tuple(shape)}")
        return desc

    def _filter(self, code, shape):
        desc = ctypes.c_void_p()
        self.check(self.lib.cudnnCreateFilterDescriptor(ctypes.byref(desc)), "cudnnCreateFilterDescriptor")
        self.check(self.lib.cudnnSetFilterNdDescriptor(desc, code, NCHW, len(shape), _ints(shape)),
                   f"cudnnSetFilterNdDescriptor{tuple(shape)}")
        return desc

    def _destroy(self, geom):
        for name, desc in (("Tensor", geom.x), ("Filter", geom.w), ("Tensor", geom.y), ("Tensor", geom.bias),
                           ("Convolution", geom.conv)):
            if desc is not None:
                getattr(self.lib, f"cudnnDestroy{name}Descriptor")(desc)

    def geometry(self, index, dtype, x_shape, w_shape, y_shape, stride, pad, dilation, groups, tf32):
        """The cached descriptors of a convolution (shapes as cuDNN sees them: >= 4 dims),
        or None where cuDNN's output size would differ from ``y_shape``."""
        key = (index, dtype, x_shape, w_shape, y_shape, stride, pad, dilation, groups, tf32)
        geom = self._geometries.get(key)
        if geom is not None:
            self._geometries.move_to_end(key)
            return geom
        code = DATA_TYPE[dtype]
        geom = _Geometry()
        try:
            geom.x = self._tensor(code, x_shape)
            geom.w = self._filter(code, w_shape)
            geom.y = self._tensor(code, y_shape)
            geom.bias = self._tensor(code, (1, y_shape[1]) + (1,) * (len(y_shape) - 2))
            conv = geom.conv = ctypes.c_void_p()
            self.check(self.lib.cudnnCreateConvolutionDescriptor(ctypes.byref(conv)),
                       "cudnnCreateConvolutionDescriptor")
            compute = 1 if code == 1 else 0  # float64 in double, float16/32 accumulate in float
            self.check(self.lib.cudnnSetConvolutionNdDescriptor(conv, len(stride), _ints(pad), _ints(stride),
                                                                _ints(dilation), CROSS_CORRELATION, compute),
                       f"cudnnSetConvolutionNdDescriptor(pad={pad}, stride={stride}, dilation={dilation})")
            self.check(self.lib.cudnnSetConvolutionGroupCount(conv, groups), "cudnnSetConvolutionGroupCount")
            math = TENSOR_OP_MATH if code == 2 else DEFAULT_MATH if (code == 1 or tf32) else FMA_MATH
            self.check(self.lib.cudnnSetConvolutionMathType(conv, math), "cudnnSetConvolutionMathType")
            out = (ctypes.c_int * len(x_shape))()
            self.check(self.lib.cudnnGetConvolutionNdForwardOutputDim(conv, geom.x, geom.w, len(x_shape), out),
                       "cudnnGetConvolutionNdForwardOutputDim")
        except CudnnError:
            self._destroy(geom)
            raise
        if tuple(out) != tuple(y_shape):  # a geometry cuDNN reads differently: not ours to run
            self._destroy(geom)
            return None
        self._geometries[key] = geom
        if len(self._geometries) > self._cache_size:
            self._destroy(self._geometries.popitem(last=False)[1])
        return geom

    # ------------------------------------------------------------ algorithms
    def _pick(self, perfs, count, deterministic, tf32, code):
        """The first usable result, in cuDNN's order (fastest first)."""
        for perf in perfs[:count]:
            if perf.status != 0 or perf.memory > WORKSPACE_LIMIT:
                continue
            if deterministic and perf.determinism != DETERMINISTIC:
                continue
            if code == 0 and not tf32 and perf.mathType in (TENSOR_OP_MATH, TENSOR_OP_MATH_ALLOW_CONVERSION):
                continue  # TF32 tensor cores where allow_tf32 is off
            return perf
        return None

    _HEURISTIC = {"forward": "cudnnGetConvolutionForwardAlgorithm_v7",
                  "backward_data": "cudnnGetConvolutionBackwardDataAlgorithm_v7",
                  "backward_filter": "cudnnGetConvolutionBackwardFilterAlgorithm_v7"}
    _FIND = {"forward": "cudnnFindConvolutionForwardAlgorithmEx",
             "backward_data": "cudnnFindConvolutionBackwardDataAlgorithmEx",
             "backward_filter": "cudnnFindConvolutionBackwardFilterAlgorithmEx"}
    _WORKSPACE = {"forward": "cudnnGetConvolutionForwardWorkspaceSize",
                  "backward_data": "cudnnGetConvolutionBackwardDataWorkspaceSize",
                  "backward_filter": "cudnnGetConvolutionBackwardFilterWorkspaceSize"}

    def _descs(self, geom, kind):
        """The descriptors in the order a ``kind`` call takes them (its data operands, its result)."""
        if kind == "forward":
            return geom.x, geom.w, geom.y
        if kind == "backward_data":
            return geom.w, geom.y, geom.x
        return geom.x, geom.y, geom.w

    def algorithm(self, handle, geom, kind, code, flags, operands=None):
        """``(algo, workspace bytes)`` for ``kind``, chosen once per geometry and flags.
        ``flags`` is ``(benchmark, deterministic, tf32)``; with benchmark, ``operands`` (the
        call's data pointers, its result's last) are what cuDNN's Find times the algorithms on."""
        key = (kind, flags)
        chosen = geom.algos.get(key)
        if chosen is not None:
            return chosen
        benchmark, deterministic, tf32 = flags
        a, b, c = self._descs(geom, kind)
        n = ALGO_COUNT[kind]
        perfs = (AlgoPerf * n)()
        returned = ctypes.c_int()
        self.check(getattr(self.lib, self._HEURISTIC[kind])(handle, a, b, geom.conv, c, n, ctypes.byref(returned),
                                                            perfs), self._HEURISTIC[kind])
        if benchmark and operands is not None:
            heuristic = list(perfs[:returned.value])
            limit = max([p.memory for p in heuristic if p.status == 0 and p.memory <= WORKSPACE_LIMIT] or [0])
            workspace = self.xp.empty((max(limit, 1),), dtype=np.uint8)
            pa, pb, pc = operands
            self.check(getattr(self.lib, self._FIND[kind])(
                handle, a, pa, b, pb, geom.conv, c, pc, n, ctypes.byref(returned), perfs,
                self.pointer_of(workspace), limit), self._FIND[kind])
        perf = self._pick(perfs, returned.value, deterministic, tf32, code)
        if perf is None:
            raise CudnnError(f"cuDNN: no {kind.replace('_', ' ')} algorithm for this convolution "
                             f"({'deterministic, ' if deterministic else ''}{returned.value} candidates)")
        size = ctypes.c_size_t()
        self.check(getattr(self.lib, self._WORKSPACE[kind])(handle, a, b, geom.conv, c, perf.algo,
                                                            ctypes.byref(size)), self._WORKSPACE[kind])
        chosen = geom.algos[key] = (perf.algo, size.value)
        return chosen

    # ------------------------------------------------------------------ calls
    def run(self, kind, index, geom, code, flags, first, second, out):
        """One convolution call: ``out = op(first, second)`` (beta 0). ``first``/``second``
        are x, w (forward), w, dy (backward data) or x, dy (backward filter)."""
        handle = self.handle(index)
        pf, ps, po = self.pointer_of(first), self.pointer_of(second), self.pointer_of(out)
        algo, size = self.algorithm(handle, geom, kind, code, flags, (pf, ps, po))
        wp = self.workspace(index, size) if size else None
        one, zero = self._scalars[code][2:]
        a, b, c = self._descs(geom, kind)
        name = {"forward": "cudnnConvolutionForward", "backward_data": "cudnnConvolutionBackwardData",
                "backward_filter": "cudnnConvolutionBackwardFilter"}[kind]
        self.check(getattr(self.lib, name)(handle, one, a, pf, b, ps, geom.conv, algo, wp, size, zero, c, po), name)
        self.counts[kind] += 1
        return out

    def add_bias(self, index, geom, code, bias, out):
        """``out += bias`` broadcast over (N, C, *S) (cudnnAddTensor, in place)."""
        one = self._scalars[code][2]
        self.check(self.lib.cudnnAddTensor(self.handle(index), one, geom.bias, self.pointer_of(bias), one, geom.y,
                                           self.pointer_of(out)), "cudnnAddTensor")
        return out


def conv_geometry_ok(in_sp, ksize, stride, padding, dilation):
    """Whether a conv with ``(lo, hi)`` padding pairs is cuDNN's conv with symmetric padding
    ``lo``: the same output size (an extra ``hi`` that no window reads is fine)."""
    for n, k, s, (lo, hi), d in zip(in_sp, ksize, stride, padding, dilation):
        if lo < 0 or hi < 0:
            return False
        if (n + lo + hi - d * (k - 1) - 1) // s != (n + 2 * lo - d * (k - 1) - 1) // s:
            return False
    return True
