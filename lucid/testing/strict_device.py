"""A strict CPU stand-in for a GPU backend: device ``"strict"``, for tests only.

NOTE [Strict stand-in device]
CI has no GPU, yet every op and rule must run on CuPy. This device proves it on the CPU: its
arrays (:class:`StrictArray`) wrap NumPy arrays and follow CuPy's rules, strictly:

* no implicit conversion to NumPy (``np.asarray(a)`` raises, as CuPy's ``__array__`` does), so
  an impl or rule that escapes to host NumPy fails loudly;
* NumPy ufuncs and functions dispatch to it (NEP 13/18) only where CuPy 14 has the same
  function: ``scipy.special`` ufuncs and the NumPy functions CuPy lacks (``_NO_CUPY_FUNCTIONS``,
  listed from CuPy 14.2's namespaces) raise, so code must use the backend's ``special()``;
* operands may be its own arrays, Python or NumPy scalars, never host arrays (CuPy refuses
  them too): mixing devices fails inside the op, and ``bind`` names both devices;
* reductions return 0-d arrays, not NumPy scalars; ``flags`` has no ``writeable``;
* it has two devices, ``strict:0`` and ``strict:1``, and a current one (:func:`set_current`,
  :func:`current`): as on CuPy, arrays are made on the current device and an op computes
  there, but where CuPy would read an operand on another device through peer access (the
  result landing on the wrong device) the stand-in refuses it. Views keep their array's
  device. ``--lucid-device=strict:1`` runs a suite on the device that is not current,
  proving NOTE [Several devices] in lucid/_core/backend.py;
* every device-to-host read (``item``, ``tolist``, ``bool``, ``float``, ``get``) is counted in
  :data:`HOST_READS`, so a test can assert that a training step makes none.

Explicit transfers stay allowed: ``Tensor.numpy()`` returns the wrapped host memory (shared,
so existing tests that write through it keep working) and ``np.asarray(tensor)`` from test code
works, but from inside the ``lucid`` package it raises (a hidden copy). Those two are the test
suites' allowance; a user of CUDA sees PyTorch's TypeError for both, and so does the stand-in
inside :func:`user_host_rules` ``("strict")``. ``Tensor.numpy(force=True)`` is an explicit copy
to the host everywhere: a new array, as CuPy's ``asnumpy`` gives (``host_copy``), never the
wrapped memory.

Examples
--------
>>> import lucid
>>> from lucid.testing import strict_device
>>> strict_device.enable()
>>> x = lucid.ones(2, device="strict")
>>> (x * 2).device, type(x._data).__name__
(device(type='strict', index=0), 'StrictArray')

(``disable()`` unregisters it again; not called here, as doctests share a test worker with
tests that enabled it at import.)
"""
from __future__ import annotations

import contextlib
import os
import sys

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from .._core import backend as _backend
from .._core import dtypes as _dtypes

HOST_READS = [0]
DEVICE_COUNT = 2
_CURRENT = [0]  # the current device's index, as CuPy's cudaGetDevice
# Peer access, as between NVLink-connected GPUs: an operand on the other device is then read,
# the op running on the current one, as CuPy does (tests switch it on to check that results
# still land on their operands' device and that mixing devices still raises).
PEER_ACCESS = [False]

# NumPy functions (NEP 18) CuPy 14.2 has no counterpart of (read off cupy-cuda12x 14.2.0 by
# comparing numpy.testing.overrides.get_overridable_numpy_array_functions() with CuPy's
# namespaces; string and datetime functions left out: no tensor op uses them).
_NO_CUPY_FUNCTIONS = frozenset("""
numpy.block numpy.einsum_path numpy.geomspace numpy.histogram_bin_edges numpy.insert
numpy.lib.stride_tricks.sliding_window_view numpy.linalg.diagonal numpy.linalg.matrix_norm
numpy.linalg.multi_dot numpy.linalg.outer numpy.linalg.svdvals numpy.linalg.tensordot
numpy.linalg.trace numpy.linalg.vecdot numpy.linalg.vector_norm numpy.nanpercentile
numpy.nanquantile numpy.polyder numpy.polydiv numpy.polyint numpy.unstack
numpy.lib.scimath.sqrt numpy.lib.scimath.log numpy.lib.scimath.power
""".split())
_NO_CUPY_UFUNCS = frozenset(("matvec", "vecmat", "vecdot", "spacing", "isnat"))
_LIKE_FUNCTIONS = frozenset(("zeros_like", "ones_like", "empty_like", "full_like"))
# Functions CuPy answers on the host from an array's metadata, launching nothing: an operand on
# any device is fine (NOTE [Several devices]).
_HOST_SIDE_FUNCTIONS = frozenset(("may_share_memory", "shares_memory", "shape", "ndim", "size"))
# CuPy 14's ufunc methods (cupy/_core/_kernel.pyx): reduce and accumulate exist for add and
# multiply only, reduceat for add only (others raise NotImplementedError), and ``at`` is not
# reachable through NumPy's dispatch (CuPy returns NotImplemented for the index tuple): only
# as ``cupy.add.at``, for the ufuncs with a scatter kernel (backend.add_at).
_CUPY_UFUNC_METHODS = {"reduce": {"add", "multiply"}, "accumulate": {"add", "multiply"},
                       "reduceat": {"add"}}
_CUPY_SCATTER_UFUNCS = frozenset(("add", "subtract", "maximum", "minimum", "bitwise_and",
                                  "bitwise_or", "bitwise_xor"))


def _strict_error(what):
    return TypeError(f"strict device: {what}")


def _foreign_error(arr):
    return ValueError(
        f"strict device: an operand on strict:{arr._dev} met an op running on the current device "
        f"strict:{_CURRENT[0]} (CuPy computes on the current device; an op must run on its "
        "operands' device, see NOTE [Several devices])")


def _unwrap(x, allow_host=False, foreign=None):
    """The NumPy arrays inside ``x``; an array on a device that is not current raises, or is
    appended to ``foreign`` when given."""
    cls = x.__class__
    if cls is StrictArray:
        if x._dev != _CURRENT[0] and not PEER_ACCESS[0]:
            if foreign is None:
                raise _foreign_error(x)
            foreign.append(x)
        return x._a
    if cls is np.ndarray:
        if allow_host:
            return x
        raise _strict_error(
            f"a host NumPy array of shape {x.shape} met a device array (CuPy refuses implicit "
            "host-to-device copies; mixed devices or an array made with NumPy instead of the "
            "operand's namespace, see NOTE [Backends])")
    if cls is list or cls is tuple:
        return cls(_unwrap(v, allow_host, foreign) for v in x)
    if cls is dict:
        return {k: _unwrap(v, allow_host, foreign) for k, v in x.items()}
    return x


def _wrap(x):
    cls = x.__class__
    if cls is np.ndarray:
        return StrictArray(x)
    if isinstance(x, np.generic):  # CuPy reductions return 0-d arrays, never scalars
        return StrictArray(np.asarray(x))
    if cls is tuple or cls is list:
        return cls(_wrap(v) for v in x)
    if isinstance(x, tuple):  # NumPy's named results (EighResult, SVDResult ...): CuPy's are plain
        return tuple(_wrap(v) for v in x)
    return x


def _has_array(key):
    return any(isinstance(k, (np.ndarray, list)) for k in (key if isinstance(key, tuple) else (key,)))


class _Flags:
    """CuPy's flags: contiguity and ownership only (no ``writeable``)."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, f):
        self.c_contiguous, self.f_contiguous, self.owndata = f.c_contiguous, f.f_contiguous, f.owndata

    def __getitem__(self, key):
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous,
                "OWNDATA": self.owndata}[key]


class StrictArray(NDArrayOperatorsMixin):
    """A NumPy array behind CuPy's rules (see NOTE [Strict stand-in device])."""

    __slots__ = ("_a", "_dev", "__weakref__")  # CuPy arrays take weak references too

    def __init__(self, a, dev=None):
        if a.dtype in _dtypes.ML_FLOATS:  # bfloat16, float8: CuPy has neither, so neither has its
            # stand-in (NOTE [bfloat16], NOTE [float8])
            raise TypeError(f"a {a.dtype.name} tensor can't be placed on a strict device: CuPy has no "
                            f"{a.dtype.name} type (cupy/cupy#7527); keep it on the CPU, or use float16 on the GPU")
        self._a = a
        self._dev = _CURRENT[0] if dev is None else dev

    def _result(self, r):
        """A method's result: a view stays on this array's device; anything computed was
        computed on the current device, which must be this array's."""
        if isinstance(r, np.ndarray) and np.may_share_memory(r, self._a):
            return StrictArray(r, self._dev)
        if self._dev != _CURRENT[0] and not PEER_ACCESS[0]:
            raise _foreign_error(self)
        return _wrap(r)

    # -- what CuPy refuses
    def __array__(self, dtype=None, copy=None):
        raise _strict_error(
            "implicit conversion to a NumPy array is not allowed (a hidden device-to-host copy); "
            "use Tensor.cpu() / .numpy() explicitly")

    @property
    def ctypes(self):
        raise _strict_error("device memory has no ctypes interface")

    # -- dispatch
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        name = ufunc.__name__
        if getattr(np, name, None) is not ufunc or name in _NO_CUPY_UFUNCS:
            raise _strict_error(
                f"ufunc {getattr(ufunc, '__module__', '?')}.{name} has no CuPy counterpart that "
                "NumPy dispatch can reach; use the backend's namespace (e.g. backend.special())")
        if method == "at":
            raise _strict_error(f"{name}.at through NumPy's dispatch (CuPy refuses the index tuple); "
                                "use backend.add_at")
        if method in _CUPY_UFUNC_METHODS and name not in _CUPY_UFUNC_METHODS[method]:
            raise NotImplementedError(f"strict device: `cupy_{name}.{method}` is not supported by CuPy")
        out = kwargs.get("out")
        args = _unwrap(inputs)
        if out is not None:
            kwargs["out"] = _unwrap(out)
        if "where" in kwargs:
            kwargs["where"] = _unwrap(kwargs["where"])
        res = getattr(ufunc, method)(*args, **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrap(res)

    def __array_function__(self, func, types, args, kwargs):
        mod = func.__module__ or "numpy"
        qual = f"{mod}.{func.__name__}"
        if qual in _NO_CUPY_FUNCTIONS:
            raise _strict_error(f"{qual} has no CuPy counterpart")
        if func.__name__ in _LIKE_FUNCTIONS and kwargs.get("shape", None) == ():
            raise _strict_error(f"{qual}(..., shape=()) is the operand's own shape in CuPy (an empty "
                                "shape counts as none); make the array with the namespace's zeros/full")
        foreign = []
        res = func(*_unwrap(args, foreign=foreign), **_unwrap(kwargs, foreign=foreign))
        if foreign and func.__name__ not in _HOST_SIDE_FUNCTIONS:
            # an operand on another device: fine for a view (moveaxis, broadcast_to ...), which
            # launches nothing on CuPy either; anything computed would run on the current one
            owner = next((a for a in foreign if isinstance(res, np.ndarray) and np.may_share_memory(res, a._a)), None)
            if owner is None:
                raise _foreign_error(foreign[0])
            return StrictArray(res, owner._dev)
        return _wrap(res)

    # -- attributes and methods: forwarded, unwrapping and wrapping arrays
    @property
    def flags(self):
        return _Flags(self._a.flags)

    @property
    def shape(self):
        return self._a.shape

    @property
    def dtype(self):
        return self._a.dtype

    @property
    def ndim(self):
        return self._a.ndim

    @property
    def size(self):
        return self._a.size

    @property
    def strides(self):
        return self._a.strides

    @property
    def itemsize(self):
        return self._a.itemsize

    @property
    def nbytes(self):
        return self._a.nbytes

    @property
    def base(self):
        # CuPy's .base is the device array owning the memory; NumPy may put a holder object
        # (as_strided's) in between: walk through it, never handing out host memory.
        b = self._a.base
        while b is not None and not isinstance(b, np.ndarray):
            b = getattr(b, "base", None)
        return None if b is None else StrictArray(b, self._dev)

    @property
    def T(self):  # noqa: N802
        return StrictArray(self._a.T, self._dev)

    @property
    def real(self):
        return self._result(self._a.real)

    @real.setter
    def real(self, v):
        _unwrap(self)
        self._a.real = _unwrap(v)

    @property
    def imag(self):
        return self._result(self._a.imag)

    @imag.setter
    def imag(self, v):
        _unwrap(self)
        self._a.imag = _unwrap(v)

    @property
    def device(self):
        return _DEVICE_IDS[self._dev]

    @property
    def __cuda_array_interface__(self):  # CuPy's: the device pointer, shape and strides
        iface = dict(self._a.__array_interface__)
        iface["version"] = 3
        return iface

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if not callable(attr):
            return self._result(attr)

        def method(*args, **kwargs):
            r = attr(*_unwrap(args), **_unwrap(kwargs))
            return tuple(map(self._result, r)) if isinstance(r, tuple) else self._result(r)

        method.__name__ = name
        return method

    def __getitem__(self, key):
        key = _unwrap(key, allow_host=True)
        r = self._a[key]
        if isinstance(r, np.generic) and not _has_array(key):  # CuPy: a 0-d view, no kernel
            return StrictArray(self._a[key + (...,) if isinstance(key, tuple) else (key, ...)], self._dev)
        return self._result(r)

    def __setitem__(self, key, value):
        _unwrap(self)  # a write is a kernel on the current device
        self._a[_unwrap(key, allow_host=True)] = _unwrap(value)

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (StrictArray(v, self._dev) for v in self._a)

    def __copy__(self):  # CuPy's lands on the current device: made strict, it must be this one
        return StrictArray(_unwrap(self).copy())

    def __deepcopy__(self, memo):  # CuPy's copies on the array's own device
        return StrictArray(self._a.copy(), self._dev)

    def __reduce__(self):
        return (StrictArray, (self._a, self._dev))

    def __repr__(self):
        return f"StrictArray({self._a!r}, dev={self._dev})"

    # -- counted device-to-host reads (CuPy syncs on each)
    def _read(self):
        HOST_READS[0] += 1
        return self._a

    def get(self, stream=None, order="C", out=None):
        return np.array(self._read(), order=order)

    def item(self, *args):
        return self._read().item(*args)

    def tolist(self):
        return self._read().tolist()

    def __bool__(self):
        return bool(self._read())

    def __float__(self):
        return float(self._read())

    def __int__(self):
        return int(self._read())

    def __complex__(self):
        return complex(self._read())

    def __index__(self):
        return self._read().__index__()


class _StrictDeviceId:
    """``array.device`` (CuPy's ``cupy.cuda.Device``: its ``id``)."""

    __slots__ = ("id",)

    def __init__(self, index):
        self.id = index


_DEVICE_IDS = [_StrictDeviceId(i) for i in range(DEVICE_COUNT)]


class _UseDevice:
    """``with _UseDevice(i):`` makes strict:i current inside the block, as ``cupy.cuda.Device``."""

    __slots__ = ("index", "saved")

    def __init__(self, index):
        self.index = index

    def __enter__(self):
        self.saved = _CURRENT[0]
        _CURRENT[0] = self.index
        return self

    def __exit__(self, *exc):
        _CURRENT[0] = self.saved


def current() -> int:
    """The index of the stand-in's current device (CuPy: ``cudaGetDevice``)."""
    return _CURRENT[0]


def set_current(index: int) -> None:
    """Make strict:``index`` the current device (as ``lucid.cuda.set_device`` for CUDA)."""
    if not 0 <= index < DEVICE_COUNT:
        raise ValueError(f"strict device: no device {index} (there are {DEVICE_COUNT})")
    previous, _CURRENT[0] = _CURRENT[0], index
    b = _backend._BACKENDS.get("strict")
    if b is not None:
        _backend.note_device(b, previous)


class _Namespace:
    """The stand-in's array module: NumPy's creation functions returning StrictArrays.

    Everything that takes an array dispatches anyway (NEP 13/18); only functions that make
    arrays from Python values need wrapping, plus the submodules CuPy has (linalg, fft, random).
    """

    __name__ = "lucid.testing.strict_device.xp"

    def __init__(self, module):
        self._m = module

    def __getattr__(self, name):
        attr = getattr(self._m, name)
        if isinstance(attr, type(np)):
            return _Namespace(attr)
        if isinstance(attr, np.ufunc):
            return _Ufunc(attr)
        if not callable(attr) or isinstance(attr, type):
            return attr

        def fn(*args, **kwargs):
            return _wrap(attr(*_unwrap(args, allow_host=True), **_unwrap(kwargs, allow_host=True)))

        fn.__name__ = name
        return fn


class _Ufunc:
    """A ufunc of the stand-in's namespace (``cupy.add``): called, or ``at`` as CuPy has it."""

    def __init__(self, ufunc):
        self._u = ufunc
        self.__name__ = ufunc.__name__

    def __call__(self, *args, **kwargs):  # CuPy's ufuncs take device arrays and scalars only
        if self.__name__ in _NO_CUPY_UFUNCS:
            raise _strict_error(f"cupy has no ufunc {self.__name__}")
        with np.errstate(all="ignore"):  # device kernels raise no floating-point warnings
            return _wrap(self._u(*_unwrap(args), **_unwrap(kwargs)))

    def at(self, a, indices, b=None):
        if self.__name__ not in _CUPY_SCATTER_UFUNCS:
            raise NotImplementedError(f"strict device: `cupy_{self.__name__}.at` is not supported by CuPy")
        if a.dtype.name not in _backend.DEVICE_SCATTER_DTYPES:
            raise TypeError(f"strict device: cupy.{self.__name__}.at only supports "
                            f"{', '.join(sorted(_backend.DEVICE_SCATTER_DTYPES))} as data type, not {a.dtype}")
        self._u.at(_unwrap(a), _unwrap(indices), _unwrap(b))

    def __getattr__(self, name):  # reduce, accumulate ...: NumPy's, dispatching to StrictArray
        return getattr(self._u, name)


xp = _Namespace(np)


class _Restricted:
    """A SciPy module restricted to what its CuPy counterpart has, on StrictArrays."""

    def __init__(self, module, names, counterpart):
        self._m, self._names, self._cp = module, names, counterpart

    def __getattr__(self, name):
        if name not in self._names:
            raise _strict_error(f"{self._m.__name__}.{name} has no {self._cp} counterpart")
        fn = getattr(self._m, name)

        def call(*args, **kwargs):
            if name in _ARRAY_ARGUMENTS and not isinstance(args[_ARRAY_ARGUMENTS[name]], StrictArray):
                raise _strict_error(f"{self._cp}.{name} takes argument {_ARRAY_ARGUMENTS[name]} as "
                                    "a device array only (it broadcasts it with CuPy)")
            return _wrap(fn(*_unwrap(args), **_unwrap(kwargs)))

        call.__name__ = name
        return call


def _special():
    import scipy.special

    return _Restricted(scipy.special, _CUPYX_SPECIAL, "cupyx.scipy.special")


def _scipy_linalg():
    import scipy.linalg

    return _Restricted(scipy.linalg, _CUPYX_LINALG, "cupyx.scipy.linalg")


# cupyx.scipy.special functions that broadcast an argument with CuPy, so it must be a device
# array there (cupyx's polygamma(n, x) runs cupy.broadcast_arrays(n, x)): name -> position.
_ARRAY_ARGUMENTS = {"polygamma": 0}


# cupyx.scipy.linalg's functions in CuPy 14.2.
_CUPYX_LINALG = frozenset("""
solve_triangular lu lu_factor lu_solve expm khatri_rao bandwidth block_diag circulant companion
convolution_matrix dft fiedler fiedler_companion hadamard hankel helmert hilbert kron
leslie toeplitz
""".split())


# cupyx.scipy.special's functions in CuPy 14.2 (read off its namespace).
_CUPYX_SPECIAL = frozenset("""
bdtr bdtrc bdtri beta betainc betaincinv betaln binom boxcox boxcox1p btdtr btdtri cbrt chdtr
chdtrc chdtri cosdg cosm1 cotdg digamma ellipeinc ellipj ellipk ellipkinc ellipkm1 entr erf erfc
erfcinv erfcx erfinv exp1 exp10 exp2 expi expit expm1 expn exprel fdtr fdtrc fdtri gamma
gammainc gammaincc gammainccinv gammaincinv gammaln gammasgn gdtr gdtrc huber i0 i0e i1 i1e
inv_boxcox inv_boxcox1p j0 j1 k0 k0e k1 k1e kl_div lambertw log1p log_expit log_ndtr log_softmax
loggamma logit logsumexp lpmv multigammaln nbdtr nbdtrc nbdtri ndtr ndtri pdtr pdtrc pdtri poch
polygamma pseudo_huber psi radian rel_entr rgamma round shichi sici sinc sindg softmax sph_harm
sph_harm_y spherical_yn tandg wright_bessel xlog1py xlogy y0 y1 yn zeta zetac
""".split())


def _refuse_from_lucid(depth):
    """Raise when the caller ``depth`` frames up (past NumPy's own) is lucid, not a test."""
    frame = sys._getframe(depth + 1)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("numpy"):
        frame = frame.f_back
    mod = frame.f_globals.get("__name__", "") if frame is not None else ""
    if mod.startswith("lucid.") and not mod.startswith("lucid.testing"):
        raise _strict_error(f"{mod} converted a device tensor to NumPy implicitly (a hidden "
                            "device-to-host copy)")


def _implicit_numpy(arr):
    """``np.asarray(tensor)``: allowed from test code, refused from inside lucid (a hidden copy)."""
    _refuse_from_lucid(2)  # Tensor.__array__ -> here; frame 2 called np.asarray
    return arr._a


def allow_test_host_reads(type_name):
    """Let test code read a real device's tensors as NumPy, as the strict device does.

    ``pytest --lucid-device=cuda`` runs suites written for the CPU, which check values with
    ``Tensor.numpy()`` and ``np.asarray(tensor)``. With this, both copy to the host when test
    code asks, and ``np.asarray`` still raises when lucid itself asks (a hidden copy). Users
    keep PyTorch's error: only the test run calls this. :func:`user_host_rules` undoes it for
    a test of that error.
    """
    b = _backend._BACKENDS[type_name]
    if getattr(b, "_user_host_rules", None) is None:
        b._user_host_rules = (b.numpy_view, b.implicit_numpy)

    def implicit(arr):
        _refuse_from_lucid(2)
        return b.to_numpy(arr)

    b.numpy_view, b.implicit_numpy = True, implicit


@contextlib.contextmanager
def user_host_rules(type_name):
    """Within the block, ``type_name``'s backend refuses implicit host copies as users see it."""
    b = _backend._BACKENDS[type_name]
    saved = (b.numpy_view, b.implicit_numpy)
    b.numpy_view, b.implicit_numpy = getattr(b, "_user_host_rules", None) or saved
    try:
        yield
    finally:
        b.numpy_view, b.implicit_numpy = saved


def _to_numpy(arr):
    return arr._a


def _host_copy(arr):
    """``cupy.asnumpy``: a host array sharing nothing with the device one."""
    return arr._a.copy()


def _user_numpy_error(arr):
    """What CUDA users see for an implicit conversion (``lucid/_core/cuda_backend.py``)."""
    raise TypeError(f"can't convert strict:{arr._dev} device type tensor to numpy. Use Tensor.cpu() to copy the "
                    "tensor to host memory first.")


def _from_numpy(arr, index=None):
    return StrictArray(np.array(arr, copy=True) if arr.__class__ is np.ndarray else np.asarray(arr), index)


def _move(arr, index):
    return StrictArray(arr._a.copy(), index)


DEVICE = _backend.device  # set in enable()


def _kernels():
    """Fused kernels run as compiled CPU loops (NOTE [Fused device kernels]); with no C++
    compiler, or LUCID_STRICT_KERNELS=0, the stand-in runs none and ops take their generic path."""
    from .._core import kernels

    if os.environ.get("LUCID_STRICT_KERNELS", "1") == "0" or kernels.host_compiler() is None:
        return None
    return kernels.cpu_factory(lambda a: a._a.ctypes.data)


def _cudnn():
    """The stand-in's cuDNN: the emulated library (``lucid.testing.strict_cudnn``); with
    LUCID_STRICT_CUDNN=0 it has none and convolutions take the im2col path (NOTE [cuDNN convolutions])."""
    if os.environ.get("LUCID_STRICT_CUDNN", "1") == "0":
        return None
    from .strict_cudnn import make_cudnn

    return make_cudnn


def make_backend():
    b = _backend.Backend(
        "strict", xp, StrictArray,
        device_of=lambda a: _backend.device("strict", a._dev),
        to_numpy=_to_numpy, from_numpy=_from_numpy, host_copy=_host_copy,
        numpy_view=True, special=_special, scipy_linalg=_scipy_linalg, implicit_numpy=_implicit_numpy,
        kernels=_kernels(),
        device_count=lambda: DEVICE_COUNT,
        current_index=current,
        use_device=_UseDevice,
        move=_move,
        index_of=lambda a: a._dev,
        cudnn=_cudnn(),
    )
    b._user_host_rules = (False, _user_numpy_error)  # CuPy's, for user_host_rules("strict")
    return b


def enable():
    """Register the ``"strict"`` device (idempotent)."""
    if "strict" not in _backend._BACKENDS:
        _backend.register_backend(make_backend())


def disable():
    """Unregister it (tensors made on it stay valid as values, but name no device)."""
    _backend.unregister_backend("strict")
    _CURRENT[0] = 0
