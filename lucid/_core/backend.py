"""Array backends: one per device type, and the only place that knows which exist.

NOTE [Backends]
A tensor's device is the type of its array: ``numpy.ndarray`` is "cpu", ``cupy.ndarray`` is
"cuda:N" (``lucid.cuda``; CuPy is imported on first use only), and tests register a strict CPU
stand-in (``lucid.testing.strict_device``) that behaves like CuPy without a GPU. A
:class:`Backend` names its device type, its array module (``xp``), its array type, and the
explicit host transfers (``to_numpy``/``from_numpy``).

Op impls call NumPy's functions (``xp.exp``, ``np.sum`` ...) on their operands. Those calls
dispatch on the operand's type (NEP 13 ``__array_ufunc__``, NEP 18 ``__array_function__``), so an
impl runs on its operands' device through that device's namespace with no lookup at all: the
CPU eager path pays nothing, and the device is chosen once per call, by the arrays. Only
arrays made from nothing (``zeros(shape)``) need the namespace itself: :func:`namespace_of`
gives it, from an operand. Host transfers are explicit (``Tensor.cpu()``, ``.numpy()``,
``.item()``, ``.tolist()``, printing); inside ops and the engine none happens, and the strict
stand-in refuses every implicit one (``__array__``), which the test suite checks.

NOTE [Devices]
``lucid.device`` parses every device string PyTorch knows (``"cuda:1"``, ``"mps"``,
``"metal"`` ...), so code that only *names* a device runs; :func:`check_device` is where a
device must actually exist, and it raises one clear error for any device this machine lacks.
"""
from __future__ import annotations

import functools
import types

import numpy as np

from .grad_mode import ACTIVE_TRACES

# NumPy's namespace as op impls see it (NOTE [Backends]): ``xp.f(operand)`` dispatches to the
# operand's device, and the conversions ``asarray``/``array``/``ascontiguousarray`` keep a
# device array on its device (NumPy's would pull it to the host, or raise).
xp = types.ModuleType("lucid.xp", "NumPy, with device-preserving conversions (NOTE [Backends]).")
xp.__dict__.update({k: v for k, v in np.__dict__.items() if not k.startswith("__")})
xp.__getattr__ = lambda name: getattr(np, name)  # NumPy's lazily imported submodules
# Array type -> array module, for every backend but the CPU's: membership tells a device array
# (NOTE [Backends]); the module serves NOTE [Device ufuncs] in ops/_family.py.
DEVICE_NAMESPACES: dict = {}
_np_asarray, _np_array, _np_ascontiguousarray = np.asarray, np.array, np.ascontiguousarray


def _xp_asarray(a, dtype=None, order=None, **kwargs):
    if a.__class__ in DEVICE_NAMESPACES:
        if dtype is None:
            return a
        with on_device(a):
            return a.astype(dtype, copy=False)
    return _np_asarray(a, dtype, order, **kwargs)


def _xp_array(a, dtype=None, *, copy=True, order="K", **kwargs):
    if a.__class__ in DEVICE_NAMESPACES:
        with on_device(a):
            return a.astype(a.dtype if dtype is None else dtype, copy=bool(copy))
    return _np_array(a, dtype, copy=copy, order=order, **kwargs)


def _xp_ascontiguousarray(a, dtype=None, **kwargs):
    if a.__class__ in DEVICE_NAMESPACES:
        return namespace_of(a).ascontiguousarray(a, dtype)
    return _np_ascontiguousarray(a, dtype, **kwargs)


xp.asarray, xp.array, xp.ascontiguousarray = _xp_asarray, _xp_array, _xp_ascontiguousarray

AVAILABLE_DEVICES = ["cpu"]
# Device types PyTorch code names (plus Apple's "metal"); which exist is decided at run time.
KNOWN_DEVICE_TYPES = ["cpu", "cuda", "mps", "metal", "meta", "xpu", "xla", "hip", "ipu",
                      "vulkan", "mkldnn", "opengl", "opencl", "ideep", "ort", "hpu", "mtia",
                      "privateuseone"]


def _unavailable(name: str) -> RuntimeError:
    kind = name.split(":")[0]
    if kind in ("cuda", "hip"):
        why = _cuda_missing_reason()
        probe = f"lucid.cuda.is_available() is False: {why}"
    elif kind in ("mps", "metal"):
        probe = "lucid.backends.mps.is_available() is False"
    else:
        probe = f"the available device types are {AVAILABLE_DEVICES}"
    return RuntimeError(
        f"device {name!r} is not available ({probe}); run on 'cpu', e.g. "
        "device = 'cuda' if lucid.cuda.is_available() else 'cpu'"
    )


class device:
    """A device handle: ``lucid.device("cpu")``, ``lucid.device("cuda", 0)``.

    Any device PyTorch names can be *described*; only available ones (``"cpu"``, and
    ``"cuda"`` with CuPy and a GPU) can hold tensors (see NOTE [Devices]).

    Examples
    --------
    >>> import lucid
    >>> lucid.device("cpu"), str(lucid.device("cuda:1")), lucid.device("cuda", 1).index
    (device(type='cpu'), 'cuda:1', 1)
    """

    __slots__ = ("type", "index")

    def __init__(self, type="cpu", index=None):  # noqa: A002  (PyTorch's argument name)
        if isinstance(type, device):
            type, index = type.type, type.index if index is None else index
        elif isinstance(type, int) and not isinstance(type, bool):
            type, index = "cuda", type  # PyTorch: a bare ordinal means a CUDA device
        elif not isinstance(type, str):
            raise TypeError(f"device: expected a string, int or device, got {type!r}")
        name, _, idx = type.partition(":")
        if name not in KNOWN_DEVICE_TYPES:
            raise RuntimeError(
                f"device: expected one of {', '.join(KNOWN_DEVICE_TYPES)} device type at start "
                f"of device string: {type!r}"
            )
        if idx:
            if index is not None:
                raise RuntimeError(f"device: type {type!r} already has an index; don't also pass index={index}")
            if not idx.isdigit():
                raise RuntimeError(f"device: invalid device string {type!r}")
            index = int(idx)
        if index is not None and (not isinstance(index, int) or index < 0):
            raise RuntimeError(f"device: index must be a non-negative int, got {index!r}")
        self.type, self.index = name, index

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        idx = "" if self.index is None else f", index={self.index}"
        return f"device(type={self.type!r}{idx})"

    def __eq__(self, other):
        if isinstance(other, str):
            try:
                other = device(other)
            except RuntimeError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.type == other.type and self.index == other.index

    def __hash__(self):
        return hash((self.type, self.index))

    def __reduce__(self):
        return (device, (self.type, self.index))

    # ``with lucid.device("meta"):`` makes it the default device of the block, as PyTorch's
    # device context (the previous default comes back on exit, also after an exception).
    def __enter__(self):
        try:
            dev = check_device(self)
        except RuntimeError as e:
            raise RuntimeError(f"device.__enter__: {e}") from None
        _DEVICE_BLOCKS.append(_DEFAULT[0])
        _DEFAULT[0] = dev
        return self

    def __exit__(self, *exc):
        _DEFAULT[0] = _DEVICE_BLOCKS.pop()
        return False


CPU = device("cpu")


class Backend:
    """One device type's arrays: its array module, array type and explicit host transfers.

    Parameters
    ----------
    type : str
        The device type it serves (``"cpu"``, ``"cuda"`` ...).
    xp : module
        Its array module (NumPy's API: ``zeros``, ``arange`` ...), for arrays made from nothing.
    array_type : type
        The class of its arrays; a tensor's device is found from it.
    device_of : callable
        ``device_of(array) -> device``.
    to_numpy : callable
        ``to_numpy(array) -> numpy.ndarray``: the explicit device-to-host copy.
    from_numpy : callable
        ``from_numpy(ndarray, index) -> array``: the explicit host-to-device copy.
    numpy_view : bool
        Whether ``Tensor.numpy()`` may hand out host memory (False on a GPU, as in PyTorch).
    special : callable, optional
        Returns the module of special functions (scipy.special or cupyx.scipy.special).
    kernels : callable, optional
        ``kernels(kernel, dtypes) -> launch`` builds a fused kernel for this device
        (:mod:`lucid._core.kernels`); None where fused kernels are not used.
    device_count, current_index : callable, optional
        How many devices of this type there are (1), and the index of the current one (0):
        the one its array module computes on and allocates on (CuPy's current device).
    use_device : callable, optional
        ``use_device(index)`` -> a context manager making device ``index`` current
        (NOTE [Several devices]).
    move : callable, optional
        ``move(array, index) -> array``: a copy on device ``index`` of the same type, device to
        device (None: through the host).
    index_of : callable, optional
        ``index_of(array) -> int``, the index of ``device_of(array)``, faster.
    host_copy : callable, optional
        ``host_copy(array) -> numpy.ndarray`` sharing no memory with ``array`` (``to_numpy``
        where that already copies, as CuPy's ``asnumpy``): ``Tensor.numpy(force=True)``.
    cudnn : callable, optional
        ``cudnn() -> (Cudnn or None, reason)``, called once, on the first device convolution:
        this device's cuDNN (NOTE [cuDNN convolutions] in ``lucid/_core/cudnn.py``).

    Examples
    --------
    >>> from lucid._core import backend
    >>> backend.backend_of(backend.np.zeros(2)).type
    'cpu'
    """

    def __init__(self, type, xp, array_type, *, device_of, to_numpy, from_numpy,  # noqa: A002
                 numpy_view=True, special=None, scipy_linalg=None, implicit_numpy=None,
                 synchronize=None, kernels=None, device_count=None, current_index=None,
                 use_device=None, move=None, index_of=None, host_copy=None, cudnn=None):
        self.type, self.xp, self.array_type = type, xp, array_type
        self.device_of, self.to_numpy, self.from_numpy = device_of, to_numpy, from_numpy
        self.numpy_view = numpy_view
        self._special = special
        self._scipy_linalg = scipy_linalg
        self.implicit_numpy = implicit_numpy or to_numpy
        self.synchronize = synchronize or (lambda: None)
        # ``kernels(kernel, dtypes) -> launch``: how this device runs fused kernels (NOTE
        # [Fused device kernels] in kernels.py); None where it runs none (NumPy's CPU).
        self.kernels, self.kernel_cache = kernels, {}
        self.device_count = device_count or (lambda: 1)
        self.current_index = current_index or (lambda: 0)
        self.use_device, self.move = use_device, move
        self.index_of = index_of or (lambda a: device_of(a).index)
        self.host_copy = host_copy or to_numpy
        self._cudnn_loader, self._cudnn = cudnn, None
        self.cudnn_reason = "no cuDNN on this device type" if cudnn is None else None

    def cudnn(self):
        """This device's :class:`~lucid._core.cudnn.Cudnn`, loaded on first use; None without one."""
        if self._cudnn is None:
            if self._cudnn_loader is None:
                return None
            self._cudnn, self.cudnn_reason = self._cudnn_loader()
            self._cudnn_loader = None
            if self._cudnn is None:
                self._cudnn = False
        return self._cudnn or None

    def special(self):
        if self._special is None:
            import scipy.special

            return scipy.special
        return self._special()

    def scipy_linalg(self):
        if self._scipy_linalg is None:
            import scipy.linalg

            return scipy.linalg
        return self._scipy_linalg()

    def __repr__(self):
        return f"<lucid backend {self.type!r} ({self.xp.__name__})>"


CPU_BACKEND = Backend("cpu", np, np.ndarray, device_of=lambda a: CPU, to_numpy=lambda a: a,
                      from_numpy=lambda a, index=None: a)
_BACKENDS = {"cpu": CPU_BACKEND}
_BY_TYPE = {np.ndarray: CPU_BACKEND}
_DEFAULT = [CPU]
_DEVICE_BLOCKS = []  # the defaults that `with device(...)` blocks replaced, innermost last


def register_backend(b: Backend) -> None:
    """Make ``b``'s device type available (a GPU backend, or the tests' strict stand-in)."""
    _BACKENDS[b.type] = b
    _BY_TYPE[b.array_type] = b
    DEVICE_NAMESPACES[b.array_type] = b.xp
    if b.type not in KNOWN_DEVICE_TYPES:
        KNOWN_DEVICE_TYPES.append(b.type)
    if b.type not in AVAILABLE_DEVICES:
        AVAILABLE_DEVICES.append(b.type)


def unregister_backend(type_name: str) -> None:  # noqa: A002
    """Remove a backend registered with :func:`register_backend` (tests)."""
    b = _BACKENDS.pop(type_name, None)
    if b is None or b is CPU_BACKEND:
        return
    if type_name in _GUARDED_BY:
        _GUARDED_BY.discard(type_name)
        if not _GUARDED_BY:
            DEVICE_GUARD[0] = False
            ACTIVE_TRACES[0] -= 1
    _BY_TYPE.pop(b.array_type, None)
    DEVICE_NAMESPACES.pop(b.array_type, None)
    if type_name in AVAILABLE_DEVICES:
        AVAILABLE_DEVICES.remove(type_name)
    if _DEFAULT[0].type == type_name:
        _DEFAULT[0] = CPU


# NOTE [Several devices]
# CuPy computes on, and allocates on, its *current* device: an operand on another GPU is read
# through peer access, the result landing on the current GPU (silently on the wrong device),
# or refused. PyTorch runs an op on its operands' device whatever the current one is. Lucid
# bridges the two with a device guard that costs nothing until a process uses a device other
# than the current one (:func:`note_device`: a transfer to it, or a change of the current
# device). From then on ``DEVICE_GUARD[0]`` is set and ACTIVE_TRACES holds one permanent
# count, so ``bind`` takes its slow branch, where :func:`guard_for` makes the device of the
# first device operand current for the call and everything it calls. The same guard wraps
# what computes on arrays outside ``bind``: each node of the backward engine (on its
# gradients' device), the sum of two gradients, a leaf's accumulation, each parameter's
# optimizer update, in-place writes. A one-device program, and every CPU program, never sets
# it. Tests prove it on the strict stand-in, which has two devices and refuses an operand
# that is not on its current one (``--lucid-device=strict:1``).
DEVICE_GUARD = [False]
_GUARDED_BY = set()  # device types whose use turned the guard on


def note_device(b, index) -> None:
    """Turn the device guard on when ``b``'s device ``index`` is not its current one
    (NOTE [Several devices]); called where arrays are placed and where the current device
    changes."""
    if not DEVICE_GUARD[0] and index is not None and b.use_device is not None \
            and index != b.current_index():
        _GUARDED_BY.add(b.type)
        DEVICE_GUARD[0] = True
        ACTIVE_TRACES[0] += 1


class _NoGuard:
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NO_GUARD = _NoGuard()


def on_device(*values):
    """``with on_device(t):`` runs array code (writes, arithmetic on arrays) outside ``bind``
    on the device of ``t`` (Tensors or arrays), as ``bind`` runs an op (NOTE [Several devices]).
    A no-op unless the process has used a device other than the current one.

    Examples
    --------
    >>> import lucid
    >>> from lucid._core.backend import on_device
    >>> t = lucid.zeros(2)
    >>> with on_device(t):
    ...     t._data[...] = 1
    """
    if not DEVICE_GUARD[0]:
        return _NO_GUARD
    return guard_for(values) or _NO_GUARD


def runs_on_operands_device(fn):
    """Decorator: ``fn``'s array code runs on the device of its first device operand, as
    ``bind`` runs an op (NOTE [Several devices]); for functions that work on ``._data``."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if DEVICE_GUARD[0]:
            guard = guard_for(args)
            if guard is not None:
                with guard:
                    return fn(*args, **kwargs)
        return fn(*args, **kwargs)

    return wrapper


def reset_device_guard() -> None:
    """Turn the device guard off again (tests: a one-device program's state)."""
    if DEVICE_GUARD[0]:
        DEVICE_GUARD[0] = False
        _GUARDED_BY.clear()
        ACTIVE_TRACES[0] -= 1


def _array_in(v):
    """The array behind a Tensor, tracer or array (None for anything else)."""
    cls = v.__class__
    if cls is np.ndarray or cls in DEVICE_NAMESPACES:
        return v
    if cls is list or cls is tuple:
        for item in v:
            a = _array_in(item)
            if a is not None and a.__class__ is not np.ndarray:
                return a
        return None
    while getattr(cls, "_inner_value", None) is not None:
        v = v._inner_value()
        cls = v.__class__
    d = getattr(v, "__dict__", None)
    return d.get("_data") if d is not None else None


def guard_for(values, op=None):
    """A context manager making the device of the first device array among ``values``
    (arrays, Tensors, tracers) the current one; None where it already is, or none is on a
    device. See NOTE [Several devices].

    With ``op`` (an op's name, from ``bind``), operands on two devices of one type raise
    PyTorch's error: CuPy with peer access would compute on them silently.
    """
    found = None
    for v in values:
        arr = _array_in(v) if v is not None else None
        cls = arr.__class__
        if cls is np.ndarray:
            continue
        if cls in DEVICE_NAMESPACES:
            b = _BY_TYPE[cls]
            index = b.index_of(arr)
        else:  # a wrapper subclass's stand-in names its device (NOTE [Devices of wrapper subclasses])
            dev = _stand_in_device(arr)
            if dev is None or dev.index is None:
                continue
            b, index = _BACKENDS[dev.type], dev.index
        if found is None:
            found = b, index
            if op is None:
                break
        elif found[0] is b and found[1] != index:
            raise RuntimeError(
                f"{op}: Expected all tensors to be on the same device, but found at least two devices, "
                f"{b.type}:{found[1]} and {b.type}:{index}! (move one with .to(device))")
    if found is None:
        return None
    b, index = found
    return None if index == b.current_index() else b.use_device(index)


def backend_of(arr) -> Backend:
    """The backend an array belongs to (NumPy scalars and anything unknown: the CPU's)."""
    return _BY_TYPE.get(arr.__class__, CPU_BACKEND)


def namespace_of(*arrays):
    """The array module for making new arrays beside ``arrays`` (NumPy unless one is on a device).

    Accepts arrays, Tensors and :class:`~lucid._core.primitive.Meta` records.

    Examples
    --------
    >>> from lucid._core.backend import namespace_of
    >>> import numpy as np
    >>> namespace_of(np.ones(2)) is np
    True
    """
    for a in arrays:
        cls = a.__class__
        if cls is np.ndarray:
            continue
        if cls not in _BY_TYPE:  # a Meta remembers its array's class; a Tensor or tracer has one
            cls = getattr(a, "array_cls", None) or array_cls_of(a)
        b = _BY_TYPE.get(cls)
        if b is not None and b is not CPU_BACKEND:
            return _namespace_on_device(b, a) if DEVICE_GUARD[0] else b.xp
    return np


def _namespace_on_device(b, a):
    """``b``'s array module, made to run on ``a``'s device where that is not the current one
    (NOTE [Several devices]): arrays made from nothing land beside ``a``."""
    arr = _array_in(a) if a.__class__ is not b.array_type else a
    if arr is None or arr.__class__ is not b.array_type:
        dev = _stand_in_device(arr)  # a wrapper subclass names its device; a Meta has no index
        index = None if dev is None else dev.index
    else:
        index = b.index_of(arr)
    if index is None or index == b.current_index():
        return b.xp
    return _OnDevice(b.xp, b.use_device, index)


class _OnDevice:
    """A function or module of an array module whose calls run with device ``index`` current."""

    __slots__ = ("_obj", "_use", "_index")

    def __init__(self, obj, use, index):
        self._obj, self._use, self._index = obj, use, index

    def __call__(self, *args, **kwargs):
        with self._use(self._index):
            return self._obj(*args, **kwargs)

    def __getattr__(self, name):
        attr = getattr(self._obj, name)
        if isinstance(attr, (type, np.dtype)) or not (callable(attr) or isinstance(attr, types.ModuleType)):
            return attr  # dtypes, array types, constants: as they are
        return _OnDevice(attr, self._use, self._index)


def array_cls_of(t):
    """The class of the array behind a Tensor or tracer (``numpy.ndarray`` for anything else).

    A wrapper subclass (``Tensor._make_wrapper_subclass``) holds no array: the class of its
    device's arrays stands for it, also seen through a transform's tracer (NOTE [Devices of
    wrapper subclasses])."""
    cls = t.__class__
    while getattr(cls, "_inner_value", None) is not None:
        t = t._inner_value()
        cls = t.__class__
    d = getattr(t, "__dict__", None)
    data = d.get("_data") if d is not None else None
    if data is None:
        return np.ndarray
    cls = data.__class__
    if cls is not WRAPPER_VALUES:
        return cls
    dev = _stand_in_device(data)
    return cls if dev is None else _BACKENDS[dev.type].array_type


# NOTE [Devices of wrapper subclasses]
# A wrapper subclass's ``_data`` is a ``WrapperValues`` (``_core/tensor.py``): no array, but the
# device its inner tensors live on. ``namespace_of`` and ``array_cls_of`` answer for it from
# that device, directly or through a transform's tracer (``vmap(grad(f))`` seeds beside the
# wrapper), and on a device that is not the current one ``namespace_of`` runs there, as for an
# array (NOTE [Several devices]): the helper arrays a rule makes (``pow``'s zeros, ``tril``'s
# mask) then meet the wrapper's inner tensors on their own device. A plain tensor pays one
# identity test against ``WRAPPER_VALUES`` (a module global, set by
# lucid/utils/_python_dispatch.py when it loads: every wrapper is made there, and this module
# loads before the Tensor class exists).
WRAPPER_VALUES = None


def _stand_in_device(data):
    """The device a wrapper subclass's values stand-in names (None for anything else)."""
    if data is None or data.__class__ is not WRAPPER_VALUES:
        return None
    dev = data.device
    return None if dev.type == "cpu" or dev.type not in _BACKENDS else dev


def _backend_among(arrays):
    for a in arrays:
        cls = a.__class__
        if cls is not np.ndarray and cls in DEVICE_NAMESPACES:
            return _BY_TYPE[cls]
    return CPU_BACKEND


def special_of(*arrays):
    """scipy.special, or its counterpart on the arrays' device (cupyx.scipy.special on CUDA)."""
    return _backend_among(arrays).special()


def scipy_linalg_of(*arrays):
    """scipy.linalg, or its counterpart on the arrays' device (cupyx.scipy.linalg on CUDA)."""
    return _backend_among(arrays).scipy_linalg()


# NOTE [Host fallback]
# A few ops have no kernel in CuPy (LDL, Schur, some special functions ...). Their impls are
# wrapped in ``host_fallback``: on a device, the operands are copied to the host explicitly,
# the NumPy/SciPy impl runs there, and the results are copied back: correct, synchronous, and
# listed in the README (PyTorch's MPS fallback works the same way). On the CPU the wrapper
# costs one type check.
def host_fallback(impl):
    """Run ``impl`` on host copies of device operands, returning results on their device."""

    def run(*args, **params):
        b = _backend_among(args)
        if b is CPU_BACKEND:
            return impl(*args, **params)
        dev = next(b.device_of(a) for a in args if a.__class__ is b.array_type)
        host_args = [b.to_numpy(a) if a.__class__ is b.array_type else a for a in args]
        out = impl(*host_args, **params)
        if isinstance(out, tuple):
            return tuple(b.from_numpy(np.asarray(o), dev.index) for o in out)
        return b.from_numpy(np.asarray(out), dev.index)

    run.__name__ = getattr(impl, "__name__", "impl")
    run.host_fallback = True
    return run


# The dtypes CuPy's ``add.at`` scatters (its atomicAdd kernels).
DEVICE_SCATTER_DTYPES = frozenset(("int32", "int64", "float16", "float32", "float64", "uint32", "uint64"))


def add_at(target, index, values) -> None:
    """``np.add.at(target, index, values)`` on any backend: add ``values`` into ``target`` at
    ``index`` in place, repeated positions accumulating.

    CuPy's ``add.at`` is reached only through its own namespace: NumPy's dispatch hands the
    index tuple to ``__array_ufunc__`` as an operand, and CuPy refuses it.
    """
    if target.__class__ is np.ndarray:
        np.add.at(target, index, values)
        return
    add = namespace_of(target).add
    kind = target.dtype.kind
    if kind == "c":  # CuPy scatters real types only: the real and imaginary parts (views) apart
        add.at(target.real, index, getattr(values, "real", values))
        if getattr(values, "dtype", np.dtype(type(values))).kind == "c":
            add.at(target.imag, index, values.imag)
    elif target.dtype.name in DEVICE_SCATTER_DTYPES:
        add.at(target, index, values)
    else:  # bool and small integers: accumulate in int64, then cast back
        wide = target.astype(np.int64)
        add.at(wide, index, values)
        target[...] = wide.astype(target.dtype)


def running_extreme(x, axis, largest):
    """``np.maximum.accumulate`` (``largest``) or ``np.minimum.accumulate`` along ``axis``, on
    any backend. NaN propagates forward, as NumPy's.

    CuPy has neither accumulation: on a device a log-step (Hillis-Steele) scan does it in
    ceil(log2 n) whole-array steps, each reading the previous step's values.
    """
    op = np.maximum if largest else np.minimum
    if x.__class__ is np.ndarray:
        return op.accumulate(x, axis=axis)
    out = x.copy()
    n, shift = x.shape[axis], 1
    lead = (slice(None),) * (axis % x.ndim)
    while shift < n:
        later, earlier = lead + (slice(shift, None),), lead + (slice(None, n - shift),)
        out[later] = op(out[later], out[earlier])  # the right side is a new array: no aliasing
        shift *= 2
    return out


def on_device_of(arr, like):
    """``arr`` (e.g. a host index array) on ``like``'s device; itself when both are on the CPU."""
    cls = like.__class__
    if cls is np.ndarray or cls not in DEVICE_NAMESPACES or arr.__class__ is cls:
        return arr
    if isinstance(arr, (list, tuple)):
        return type(arr)(on_device_of(a, like) for a in arr)
    if isinstance(arr, np.ndarray):
        b = _BY_TYPE[cls]
        return b.from_numpy(arr, b.device_of(like).index)
    return arr


def is_array(a) -> bool:
    """Whether ``a`` is an array of some backend (NumPy's or a device's)."""
    return isinstance(a, np.ndarray) or a.__class__ in DEVICE_NAMESPACES


def writeable(arr) -> bool:
    """NumPy's writeable flag. Device arrays (CuPy) have none: there a view whose elements
    share memory (a stride of 0 over 2 or more elements, as expand makes) counts as read-only,
    as NumPy marks it, since a write to it would race."""
    flag = getattr(arr.flags, "writeable", None)
    if flag is not None:
        return flag
    # an empty array has no elements to share (NumPy may give it strides of 0)
    return arr.size == 0 or all(s or n < 2 for s, n in zip(arr.strides, arr.shape))


def as_strided(x, shape, strides, writeable=True):
    """``numpy.lib.stride_tricks.as_strided`` on any backend (NumPy's is not dispatched)."""
    if x.__class__ is np.ndarray or x.__class__ not in DEVICE_NAMESPACES:
        if x.dtype.kind == "f" and x.dtype.itemsize == 1:  # float8_e5m2: NumPy can't read back its
            # array-interface typestr ("<f1"); strided as its bytes (NOTE [float8] in dtypes.py)
            raw = np.lib.stride_tricks.as_strided(x.view(np.uint8), shape=shape, strides=strides, writeable=writeable)
            return raw.view(x.dtype)
        return np.lib.stride_tricks.as_strided(x, shape=shape, strides=strides, writeable=writeable)
    return namespace_of(x).lib.stride_tricks.as_strided(x, shape=shape, strides=strides)


def sliding_window_view(x, size, axis):
    """NumPy's ``sliding_window_view`` along one axis, on any backend (CuPy has none)."""
    if x.__class__ is np.ndarray or x.__class__ not in DEVICE_NAMESPACES:
        if x.dtype.kind == "f" and x.dtype.itemsize == 1:  # float8_e5m2: as in as_strided
            return np.lib.stride_tricks.sliding_window_view(x.view(np.uint8), size, axis=axis,
                                                            writeable=writeable(x)).view(x.dtype)
        return np.lib.stride_tricks.sliding_window_view(x, size, axis=axis, writeable=writeable(x))
    n = x.shape[axis] - size + 1
    shape = x.shape[:axis] + (n,) + x.shape[axis + 1:] + (size,)
    return as_strided(x, shape, x.strides + (x.strides[axis],))


def data_pointer(arr) -> int:
    """The address of ``arr``'s first element, host or device (0 on the meta device, as PyTorch)."""
    if not has_values(arr):
        return 0
    iface = getattr(arr, "__cuda_array_interface__", None) or arr.__array_interface__
    return iface["data"][0]


class OutOfMemoryError(RuntimeError):
    """CUDA ran out of memory (``torch.cuda.OutOfMemoryError``, also ``lucid.OutOfMemoryError``;
    a RuntimeError, as PyTorch's). An op or factory that CuPy could not allocate for raises it,
    naming the op, with CuPy's message (:func:`cuda_oom`).
    """


def cuda_oom(op, err):
    """``err`` as :class:`OutOfMemoryError` when it is CuPy's out-of-memory error, else None."""
    cls = type(err)
    if cls.__name__ == "OutOfMemoryError" and cls.__module__.startswith("cupy"):
        return OutOfMemoryError(f"{op}: CUDA out of memory. {err} (free memory with del and "
                                "lucid.cuda.empty_cache(), or use smaller batches)")
    return None


def has_values(arr) -> bool:
    """Whether ``arr`` holds values: every array but the meta device's (NOTE [Meta device]) and
    a wrapper subclass's stand-in (NOTE [Devices of wrapper subclasses])."""
    cls = arr.__class__
    return cls is np.ndarray or (cls is not WRAPPER_VALUES and _BY_TYPE.get(cls, CPU_BACKEND).type != "meta")


def device_of_array(arr) -> device:
    if arr.__class__ is np.ndarray:
        return CPU
    return backend_of(arr).device_of(arr)


def as_array(out):
    """``out`` as an array of its own backend (NumPy scalars and sequences become ndarrays)."""
    if out.__class__ in _BY_TYPE:
        return out
    return np.asarray(out)


def to_device(arr, dev):
    """``arr`` on device ``dev`` (a checked :class:`device`): the one explicit transfer."""
    src = backend_of(arr)
    dst = _BACKENDS[dev.type]
    if dst is not CPU_BACKEND:
        note_device(dst, dev.index)
    if src is dst:
        if dst is CPU_BACKEND or src.device_of(arr) == dev:
            return arr
        if dst.move is not None:  # GPU to GPU, no stop on the host
            return dst.move(arr, dev.index)
    if dst.type == "meta":  # a shape and a dtype: nothing to copy (NOTE [Meta device])
        return dst.from_numpy(arr, None)
    host = src.to_numpy(arr)
    return dst.from_numpy(host, dev.index)


def host(arr) -> np.ndarray:
    """An explicit host (NumPy) copy of ``arr`` (``arr`` itself on the CPU)."""
    if arr.__class__ is np.ndarray:
        return arr
    return backend_of(arr).to_numpy(arr)


def check_device(dev) -> device:
    """Validate a ``device`` argument: the :class:`device` it names (None: the default device).

    Raises a clear RuntimeError for a device this machine lacks.
    """
    if dev is None:
        return _DEFAULT[0]
    if dev is CPU or dev == "cpu":
        return CPU
    try:
        d = device(dev)
    except (RuntimeError, TypeError) as e:
        raise RuntimeError(str(e)) from None
    if d.type not in _BACKENDS and not (d.type == "cuda" and _load_cuda()) \
            and not (d.type == "meta" and _load_meta()):
        raise _unavailable(str(d))
    if d.type == "cpu":
        return CPU
    if d.type == "meta":  # one device, no index, as in PyTorch (NOTE [Meta device])
        return META
    if d.type == "cuda":
        import lucid.cuda as lc

        n = lc.device_count()
        index = lc.current_device() if d.index is None else d.index
        if index >= n:
            raise RuntimeError(f"device {str(d)!r} is not available: CUDA error: invalid device "
                               f"ordinal (there are {n} CUDA device(s))")
        return device("cuda", index)
    b = _BACKENDS[d.type]
    if d.index is None:
        return device(d.type, b.current_index())
    n = b.device_count()
    if d.index >= n:
        raise RuntimeError(f"device {str(d)!r} is not available: invalid device ordinal (there are "
                           f"{n} {d.type} device(s))")
    return d


def set_default_device(dev) -> None:
    """Set the device factory functions (``zeros``, ``tensor`` ...) use when given none.

    Examples
    --------
    >>> import lucid
    >>> lucid.set_default_device("cpu"); lucid.get_default_device()
    device(type='cpu')
    """
    try:
        _DEFAULT[0] = CPU if dev is None else check_device(dev)
    except RuntimeError as e:
        raise RuntimeError(f"set_default_device: {e}") from None


def get_default_device() -> device:
    """The device new tensors are made on (``device(type='cpu')`` unless set)."""
    return _DEFAULT[0]


# ----------------------------------------------------------------------------- meta

META = None  # device("meta"), once registered


def _load_meta():
    """Register the shape-only ``"meta"`` device on first use (NOTE [Meta device] in meta_backend.py)."""
    global META
    if "meta" not in _BACKENDS:
        import sys

        from . import meta_backend

        register_backend(meta_backend.make_backend(sys.modules[__name__]))
        META = device("meta")
    return True


# ------------------------------------------------------------------------- CUDA (CuPy)

_CUDA_STATE = {"loaded": False, "reason": None}


def _cuda_missing_reason():
    _load_cuda()
    return _CUDA_STATE["reason"] or "no CUDA device"


def _load_cuda():
    """Register the CuPy backend on first use; False (with a reason) when it can't be had.

    CuPy is never imported by ``import lucid``: only when a CUDA device is first named.
    """
    if _CUDA_STATE["loaded"]:
        return "cuda" in _BACKENDS
    _CUDA_STATE["loaded"] = True
    try:
        import cupy
    except Exception as e:  # not installed (pip install 'lucid[gpu]'), or a broken install
        _CUDA_STATE["reason"] = f"CuPy is not importable ({type(e).__name__}: {e}); install lucid[gpu]"
        return False
    try:
        if not cupy.is_available():
            _CUDA_STATE["reason"] = "CuPy sees no CUDA device"
            return False
    except Exception as e:
        _CUDA_STATE["reason"] = f"CUDA is not usable ({e})"
        return False
    from . import cuda_backend

    register_backend(cuda_backend.make_backend(cupy))
    return True
