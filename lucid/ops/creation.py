"""Tensor creation and dtype conversion (no gradients flow into these)."""
from __future__ import annotations

import numpy as np

from .._core import backend, dtypes
from .._core.backend import xp
from .._core.grad_mode import ACTIVE_TRACES, STATE
from .._core.primitive import bind, defprim
from .._core.tensor import Tensor, _to_array, _wrap, tensor_method
from .elementwise import cast
from .shape.views import _kw_shape


def device_arg(device, op):
    """``backend.check_device`` with errors that name ``op``: the :class:`lucid.device` meant."""
    try:
        return backend.check_device(device)
    except RuntimeError as e:
        raise RuntimeError(f"{op}: {e}") from None


def _finish(arr, requires_grad, device, op):
    dev = device_arg(device, op)
    if dev is not backend.CPU:  # made on the host, then one explicit copy to the device
        arr = backend.to_device(arr, dev)
    t = _wrap(arr)
    if ACTIVE_TRACES[0] and STATE.traces:  # made inside a transform: it may join it (NOTE [Lifting a plain tensor])
        t._born = STATE.traces[-1]
    if requires_grad:
        t.requires_grad = True
    return t


def _made(make, size, dtype, requires_grad, device, op, *fill):
    """``make`` (``"zeros"``, ``"ones"``, ``"full"``) of ``size`` made by its device's own array
    module: no host array and no host-to-device copy (a meta tensor of any size costs nothing)."""
    dev = device_arg(device, op)
    if dev is backend.CPU:
        arr = getattr(xp, make)(size, *fill, dtype=dtype)
    else:
        b = backend._BACKENDS[dev.type]
        backend.note_device(b, dev.index)
        elsewhere = b.use_device is not None and dev.index is not None and dev.index != b.current_index()
        try:
            with b.use_device(dev.index) if elsewhere else backend._NO_GUARD:
                arr = getattr(b.xp, make)(size, *fill, dtype=dtype)
        except MemoryError as e:  # CuPy's is one: PyTorch's OutOfMemoryError, naming the op
            raise backend.cuda_oom(op, e) or e from e
    return _finish(arr, requires_grad, dev, op)  # already there: _finish moves nothing


def sizes_or_keyword(size_args, size, op):
    """The sizes a factory was given: positionally (``zeros(2, 3)``, ``zeros((2, 3))``) or as
    PyTorch's ``size=`` keyword (``zeros(size=(2, 3))``), not both."""
    if size is None:
        return size_args
    if size_args:
        raise TypeError(f"{op}: got sizes both positionally {size_args} and as size={size!r}")
    return (size,)


def size_arg(size, op):
    """``(2, 3)``, ``((2, 3),)`` or ``([2, 3],)`` -> ``(2, 3)``, checked (shared by the random ops)."""
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    try:
        size = tuple(int(s) for s in size)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: size must be a sequence of ints, got {size!r}") from None
    if any(s < 0 for s in size):
        raise RuntimeError(f"{op}: negative dimension in size {size}")
    return size


def layout_arg(layout, op):
    """PyTorch's ``layout=`` of a factory: ``None`` or ``lucid.strided`` (Lucid's dense tensors)
    pass; a sparse layout raises as PyTorch's sparse backend does for ``op`` (``zeros`` and
    ``empty`` take one: :func:`in_layout`)."""
    from .tensor_surface_more import layout as layout_type, strided

    if layout is None or layout is strided:
        return None
    if not isinstance(layout, layout_type):
        raise TypeError(f"{op}(): argument 'layout' must be lucid.layout, not {type(layout).__name__}")
    raise NotImplementedError(f"{op}(): layout={layout} is not supported (only lucid.strided"
                              f"{', or a sparse layout' if op in ('zeros', 'empty') else ''})")


def in_layout(out, layout, requires_grad, op):
    """``out`` (zeros) in ``layout``: as it is for ``lucid.strided``, else the sparse tensor of that
    layout with no elements, as PyTorch's ``zeros``/``empty`` with ``layout=lucid.sparse_*``."""
    from ..sparse._base import _SparseLayout

    if not isinstance(layout, _SparseLayout):
        layout_arg(layout, op)  # strided passes, anything else raises
        return out
    out = out.detach().to_sparse(layout=layout)
    return out.requires_grad_() if requires_grad else out


def dtype_arg(dtype, op):
    """``dtypes.to_dtype`` with errors that name ``op``."""
    try:
        return dtypes.to_dtype(dtype)
    except TypeError as e:
        raise TypeError(f"{op}: {e}") from None


def _float_dtype(dtype, op="creation"):
    return dtype_arg(dtype, op) if dtype is not None else dtypes.get_default_dtype()


def tensor(data, dtype=None, device=None, requires_grad=False):
    """Make a tensor that copies ``data`` (Python floats become float32).

    Parameters
    ----------
    data : array_like
        Nested lists, numbers, NumPy arrays or Tensors.
    dtype : dtype, optional
        Default: inferred (Python floats become the default dtype, ints int64).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1.0, 2.0], requires_grad=True)
    tensor([1., 2.], requires_grad=True)
    """
    if isinstance(data, Tensor):
        import warnings

        warnings.warn("To copy construct from a tensor, it is recommended to use sourceTensor.detach().clone() or "
                      "sourceTensor.detach().clone().requires_grad_(True), rather than lucid.tensor(sourceTensor).",
                      UserWarning, stacklevel=2)
        if device is None:
            device = data.device
        data = data._data
    try:
        arr = _to_array(data, dtype_arg(dtype, "tensor"))
    except ValueError as e:  # ragged nesting, strings ...
        if str(e).startswith("tensor: "):  # already says what is wrong (an int overflow)
            raise
        raise ValueError(f"tensor: can't make a tensor from this data ({e})") from None
    return _finish(arr, requires_grad, device, "tensor")


def as_tensor(data, dtype=None, device=None):
    """Like :func:`tensor` but shares memory with a NumPy array or Tensor when it can.

    Parameters
    ----------
    data : array_like
        The data.
    dtype : dtype, optional
        Convert to this dtype.
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).

    Examples
    --------
    >>> import lucid, numpy as np
    >>> a = np.zeros(2)
    >>> t = lucid.as_tensor(a); a[0] = 5.0
    >>> t.tolist()
    [5.0, 0.0]
    """
    dev = device_arg(device, "as_tensor") if device is not None else None
    dtype = dtype_arg(dtype, "as_tensor")
    if isinstance(data, Tensor):
        out = data if dtype is None or data.dtype == dtype else cast(data, dtype)
        return out if dev is None else to_device(out, dev)
    if isinstance(data, np.ndarray):
        out = _wrap(data if dtype is None or data.dtype == dtype else data.astype(dtype))
    else:
        out = _wrap(_to_array(data, dtype))
    dev = dev or backend.get_default_device()
    return out if dev is backend.CPU else to_device(out, dev)


def from_numpy(array):
    """A tensor sharing memory with ``array``.

    Parameters
    ----------
    array : numpy.ndarray
        Shared, not copied.

    Examples
    --------
    >>> import lucid, numpy as np
    >>> lucid.from_numpy(np.array([1, 2])).tolist()
    [1, 2]
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy: expected np.ndarray, got {type(array).__name__}")
    return _wrap(array)


def zeros(*size_args, size=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor of zeros.

    Parameters
    ----------
    *size : int or tuple of int
        The shape (or ``size=`` as a keyword, as PyTorch's).
    dtype : dtype, optional
        The dtype (default: the default dtype).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.
    layout : lucid.layout, optional
        ``lucid.strided`` (default) or a sparse layout: the sparse tensor with no
        elements, as PyTorch's.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3).shape
    (2, 3)
    """
    out = _made("zeros", size_arg(sizes_or_keyword(size_args, size, "zeros"), "zeros"), _float_dtype(dtype, "zeros"), requires_grad, device, "zeros")
    return out if layout is None else in_layout(out, layout, requires_grad, "zeros")


def ones(*size_args, size=None, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor of ones.

    Parameters
    ----------
    *size : int or tuple of int
        The shape (or ``size=`` as a keyword, as PyTorch's).
    dtype : dtype, optional
        The dtype (default: the default dtype).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.ones((2,), dtype=lucid.int64).tolist()
    [1, 1]
    """
    if layout is not None:
        layout_arg(layout, "ones")
    return _made("ones", size_arg(sizes_or_keyword(size_args, size, "ones"), "ones"), _float_dtype(dtype, "ones"), requires_grad, device, "ones")


def empty(*size_args, size=None, dtype=None, device=None, requires_grad=False, memory_format=None, layout=None):
    """An uninitialised tensor (zeros in practice).

    Parameters
    ----------
    *size : int or tuple of int
        The shape (or ``size=`` as a keyword, as PyTorch's).
    dtype : dtype, optional
        The dtype (default: the default dtype).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.
    layout : lucid.layout, optional
        ``lucid.strided`` (default) or a sparse layout: the sparse tensor with no
        elements, as PyTorch's.
    memory_format : lucid.memory_format, optional
        ``contiguous_format`` (default), ``channels_last`` (4-d), ``channels_last_3d`` (5-d).

    Examples
    --------
    >>> import lucid
    >>> lucid.empty(2, 3).shape
    (2, 3)
    >>> lucid.empty(2, 3, 4, 5, memory_format=lucid.channels_last).stride()
    (60, 1, 15, 3)
    """
    out = _made("zeros", size_arg(sizes_or_keyword(size_args, size, "empty"), "empty"), _float_dtype(dtype, "empty"), requires_grad, device, "empty")
    if layout is not None:
        out = in_layout(out, layout, requires_grad, "empty")
    if memory_format is None:
        return out
    from .memory_format import empty_in_format

    return empty_in_format(out, memory_format, "empty")


def full(size, fill_value, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor filled with ``fill_value`` (dtype inferred from it like PyTorch).

    Parameters
    ----------
    size : int or tuple of int
        The shape.
    fill_value : number
        The value.
    dtype : dtype, optional
        Default: bool, int64 or the default float, from ``fill_value``.
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.full((2,), 7).tolist()
    [7, 7]
    """
    if layout is not None:
        layout_arg(layout, "full")
    if dtype is None:
        dtype = (dtypes.bool_ if isinstance(fill_value, bool) else dtypes.int64
                 if isinstance(fill_value, int) else dtypes.default_complex()
                 if isinstance(fill_value, complex) else dtypes.get_default_dtype())
    if isinstance(fill_value, Tensor):
        fill_value = fill_value.item()
    if not isinstance(fill_value, (bool, int, float, complex, np.number, np.bool_)):
        raise TypeError(f"full: fill_value must be a number, got {type(fill_value).__name__}")
    size = size_arg((size,) if isinstance(size, int) else (tuple(size),), "full")
    dt = dtype_arg(dtype, "full")
    if isinstance(fill_value, (int, np.integer)) and not isinstance(fill_value, (bool, np.bool_)) \
            and np.dtype(dt).kind in "iu":
        fill_value = _int_fill_value(int(fill_value), dt, "full")
    elif isinstance(fill_value, (float, np.floating)) and np.dtype(dt).kind in "iu":
        fill_value = _float_fill_value(fill_value, dt, "full")
    elif np.dtype(dt).kind in "fc":
        _check_float_fits(fill_value, dt, "full")
    return _made("full", size, dt, requires_grad, device, "full", fill_value)


class _FillOverflowError(RuntimeError, OverflowError):
    """PyTorch raises RuntimeError; NumPy's OverflowError was Lucid's before."""


def _check_float_fits(v, dt, op):
    """PyTorch refuses a finite value beyond the dtype's range (NumPy would make it inf)."""
    if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_)):
        a = abs(int(v)) if isinstance(v, (int, np.integer)) else abs(float(v))  # a big int stays exact
        if a != float("inf") and a > float(dtypes.np_finfo(dt).max):
            raise _FillOverflowError(f"{op}: value cannot be converted to type {np.dtype(dt).name} without overflow")


def _int_fill_value(v, dt, op):
    """The Python int ``v`` as a value of the integer dtype ``dt``, by PyTorch's check: a signed
    dtype takes its own range; an unsigned one also takes negatives down to ``-max``, wrapped
    (``full((1,), -9, dtype=uint8)`` is 247)."""
    info = np.iinfo(dt)
    ok = -info.max <= v <= info.max if info.min == 0 else info.min <= v <= info.max
    if not ok:
        raise _FillOverflowError(f"{op}: value cannot be converted to type {np.dtype(dt).name} without overflow")
    return v % (info.max + 1) if v < 0 and info.min == 0 else v


def _float_fill_value(v, dt, op):
    """The float ``v`` as a value of the integer dtype ``dt``, by PyTorch's check: finite and inside
    the dtype's range (a negative never wraps into an unsigned dtype), then truncated toward zero
    (NumPy's cast would make ``inf``, ``nan`` or ``300.0`` for int8 a wrapped, meaningless number)."""
    info = np.iinfo(dt)
    v = float(v)
    if not info.min <= v <= info.max:  # False for NaN too
        raise _FillOverflowError(f"{op}: value {v} cannot be converted to type {np.dtype(dt).name} without "
                                 "overflow")
    return int(v)


def _device_of(t):
    """The device of ``t`` (PyTorch's ``*_like`` default); None for a value that names none."""
    return getattr(t, "device", None)


def _laid_out_like(out, input, memory_format, op):
    """``out`` with the layout PyTorch's ``op(input, memory_format=...)`` gives (NOTE [Memory formats])."""
    if memory_format is None and (input.__class__ is not Tensor or input._data.strides == out._data.strides):
        return out  # the common case: a row-major input of the same dtype (or a tracer: no strides)
    from .memory_format import like_layout

    return like_layout(out, input, memory_format, op)


_LAYOUT_DOC = ("    memory_format : lucid.memory_format, optional\n        Default (None, PyTorch's "
               "``preserve_format``): ``input``'s layout.\n    layout : lucid.layout, optional\n        Default: "
               "``input``'s (a sparse input gives a sparse result, as PyTorch's).\n")
_DENSE = (Tensor,)  # the classes with nothing to check for a sparse layout (tracers are checked)


def _sparse_like(op, input, layout, fill, dtype, device, requires_grad):
    """PyTorch's ``op`` (zeros/ones/empty/full_like) where ``input`` or ``layout`` is sparse; None
    for a strided result. COO keeps no elements (``fill`` must be 0: PyTorch cannot fill one);
    a compressed input keeps its structure (no elements for zeros_like), its values ``fill``."""
    from ..sparse._base import _SparseLayout, sparse_coo

    src = getattr(input, "layout", None)
    src = src if isinstance(src, _SparseLayout) else None
    want = layout if layout is not None else src
    if src not in (None, sparse_coo) and want is not src:
        raise RuntimeError(f"{op}: empty_like with different sparse layout is not supported (self is {src} but "
                           f"you requested {want})")
    if not isinstance(want, _SparseLayout):
        return None
    dtype, device = dtype or input.dtype, device or _device_of(input)
    if want is sparse_coo:
        if fill != 0:
            raise NotImplementedError(f"{op}: a sparse COO tensor cannot be filled with {fill!r} (PyTorch's fill_ "
                                      "has no sparse kernel)")
        from ..sparse import _coo

        k = input.sparse_dim() if src is sparse_coo else input.ndim
        out = _coo.make_coo(zeros(k, 0, dtype=dtypes.int64, device=device),
                            zeros((0,) + tuple(input.shape[k:]), dtype=dtype, device=device),
                            tuple(input.shape), True)
    elif fill == 0 and op == "zeros_like":
        from ..sparse._compressed import make_compressed

        vals, nnz_axis = input.values(), input._pidx.ndim - 1
        out = make_compressed(want, input._cidx.to(device) * 0, input._pidx.to(device)[..., :0],
                              zeros(vals.shape[:nnz_axis] + (0,) + vals.shape[nnz_axis + 1:], dtype=dtype,
                                    device=device), tuple(input.shape))
    else:
        out = input._replace(full(tuple(input.values().shape), fill, dtype=dtype, device=device), device)
    return out.requires_grad_() if requires_grad else out


def _like(fn):
    fill = {"zeros": 0, "ones": 1, "empty": 0}[fn.__name__]

    def like(input, dtype=None, device=None, requires_grad=False, memory_format=None, *, layout=None, **kw):
        if layout is not None or input.__class__ not in _DENSE:
            out = _sparse_like(like.__name__, input, layout, fill, dtype, device, requires_grad)
            if out is not None:
                return out
        out = fn(*input.shape, dtype=dtype or input.dtype, device=device or _device_of(input),
                 requires_grad=requires_grad)
        return _laid_out_like(out, input, memory_format, like.__name__)

    like.__name__ = fn.__name__ + "_like"
    like.__doc__ = (f"``{fn.__name__}`` with the shape (and by default dtype) of ``input``.\n\n"
                    "    Parameters\n    ----------\n    input : Tensor\n        Gives the shape.\n"
                    "    dtype : dtype, optional\n        Default: ``input.dtype``.\n"
                    "    device : str, optional\n        Default: ``input``'s device.\n"
                    "    requires_grad : bool\n        Make the result a leaf that requires grad.\n"
                    + _LAYOUT_DOC + "\n"
                    "    Examples\n    --------\n    >>> import lucid\n"
                    f"    >>> lucid.{fn.__name__}_like(lucid.zeros(2, 3)).shape\n    (2, 3)\n    ")
    return like


zeros_like, ones_like, empty_like = _like(zeros), _like(ones), _like(empty)


def full_like(input, fill_value, dtype=None, device=None, requires_grad=False, memory_format=None, *, layout=None):
    """A tensor of ``fill_value`` with the shape (and by default dtype) of ``input``.

    Parameters
    ----------
    input : Tensor
        Gives the shape.
    fill_value : number
        The value.
    dtype : dtype, optional
        Default: ``input.dtype``.
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.
    memory_format : lucid.memory_format, optional
        Default (None, PyTorch's ``preserve_format``): ``input``'s layout.
    layout : lucid.layout, optional
        Default: ``input``'s (a sparse input gives a sparse result, as PyTorch's).

    Examples
    --------
    >>> import lucid
    >>> lucid.full_like(lucid.zeros(2), 3.0).tolist()
    [3.0, 3.0]
    >>> lucid.full_like(lucid.zeros(2, 3).t(), 1.0).stride()
    (1, 3)
    """
    if layout is not None or input.__class__ not in _DENSE:
        out = _sparse_like("full_like", input, layout, fill_value, dtype, device, requires_grad)
        if out is not None:
            return out
    out = full(input.shape, fill_value, dtype=dtype or input.dtype, device=device or _device_of(input),
               requires_grad=requires_grad)
    return _laid_out_like(out, input, memory_format, "full_like")


def arange(start=None, end=None, step=1, dtype=None, device=None, requires_grad=False, layout=None):
    """Values from ``start`` to ``end`` (exclusive) by ``step``; ints stay int64.

    Parameters
    ----------
    start : number, optional
        First value (or, alone, the end with start 0); 0 when only ``end=`` is given.
    end : number, optional
        End (exclusive).
    step : number
        Spacing (nonzero).
    dtype : dtype, optional
        Default int64 for int arguments, else the default float.
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(1, 7, 2).tolist()
    [1, 3, 5]
    """
    if layout is not None:
        layout_arg(layout, "arange")
    if end is None:
        if start is None:
            raise TypeError("arange() missing required argument 'end'")
        start, end = 0, start
    elif start is None:
        start = 0  # arange(end=n), as PyTorch's signature arange(start=0, end, step=1) allows
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if dtype is None:
        dtype = dtypes.int64 if all(isinstance(v, int) for v in vals) else dtypes.get_default_dtype()
    dt = np.dtype(dtype_arg(dtype, "arange"))
    if dt.kind in "bc":
        return _finish(xp.arange(*vals, dtype=dt), requires_grad, device, "arange")
    return _finish(_arange_values(vals, dt), requires_grad, device, "arange")


# NOTE [Arange as PyTorch computes it]
# PyTorch casts start, end and step to the dtype's accumulation type (int64 for integer dtypes,
# so arange(1, 2.5, 0.5, dtype=int8) is [1, 1, 1]; float32 for float16, float64 otherwise) and
# writes start + i * step in that type. The length (and the step checks) use those cast values
# for int64 (arange(1, 5.5, dtype=int64) has 4 values) and the double arguments for the other
# dtypes. NumPy steps in the target dtype (float16 drifts: 0.2998 for 0.3) and takes the length
# from the uncast arguments.
def _arange_values(vals, dt):
    from .._core.primitive import OpError

    acc = np.int64 if dt.kind in "iu" else np.float32 if dt == np.float16 else np.float64
    start, end, step = (int(v) if acc is np.int64 else float(v) for v in vals)
    lo, hi, by = (start, end, step) if dt == np.int64 else (float(v) for v in vals)
    if by == 0:
        raise OpError(f"arange: step must be nonzero (start {vals[0]}, end {vals[1]})")
    if not (np.isfinite(float(lo)) and np.isfinite(float(hi))):
        raise RuntimeError(f"arange: unsupported range: {vals[0]} -> {vals[1]}")
    if (by > 0 and hi < lo) or (by < 0 and hi > lo):
        raise RuntimeError(f"arange: upper bound and lower bound inconsistent with step sign "
                           f"(start {vals[0]}, end {vals[1]}, step {vals[2]})")
    n = (hi - lo + by - (1 if by > 0 else -1)) // by if dt == np.int64 else int(np.ceil((hi - lo) / by))
    return (acc(start) + np.arange(n, dtype=acc) * acc(step)).astype(dt, copy=False)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False, layout=None):
    """``steps`` evenly spaced values from ``start`` to ``end`` inclusive.

    Parameters
    ----------
    start, end : float
        The end points (both included).
    steps : int
        Number of values.
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.linspace(0, 1, 3).tolist()
    [0.0, 0.5, 1.0]
    """
    if layout is not None:
        layout_arg(layout, "linspace")
    dt, n = _ends_dtype(start, end, dtype, "linspace"), _steps(steps, "linspace")
    if _traced(start, end):
        return _traced_space(start, end, n, dt, device, None)
    if np.dtype(dt).kind in "iub":
        # PyTorch's integer linspace: integer ends, each value truncated toward zero (NumPy's
        # floors the float values: linspace(-2.5, 1, 6, dtype=int64) gave -3 first)
        s, e = (_int_end(v, dt, "linspace") for v in (start, end))
        step = (e - s) / (n - 1) if n > 1 else 0.0  # in double, as PyTorch's kernel
        i = np.arange(n, dtype=np.float64)
        vals = np.where(i < n // 2, s + step * i, e - step * (n - 1 - i))  # its symmetric form
        vals[:1] = s
        return _finish(np.trunc(vals).astype(np.int64).astype(dt), requires_grad, device, "linspace")
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))  # as PyTorch: read once
    if np.dtype(dt).kind == "f":
        _check_float_fits(start, dt, "linspace"), _check_float_fits(end, dt, "linspace")
    return _finish(xp.linspace(start, end, n, dtype=dt), requires_grad, device, "linspace")


def logspace(start, end, steps, base=10.0, dtype=None, device=None, requires_grad=False, layout=None):
    """``steps`` values ``base ** x`` for ``x`` evenly spaced from ``start`` to ``end``.

    Parameters
    ----------
    start, end : float
        The exponents of the end points.
    steps : int
        Number of values.
    base : float
        The base.
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.logspace(0, 2, 3).tolist()
    [1.0, 10.0, 100.0]
    """
    if layout is not None:
        layout_arg(layout, "logspace")
    dt = _ends_dtype(start, end, dtype, "logspace")
    if _traced(start, end):
        return _traced_space(start, end, _steps(steps, "logspace"), dt, device, base)
    start, end = (v.item() if isinstance(v, Tensor) else v for v in (start, end))
    return _finish(xp.logspace(start, end, _steps(steps, "logspace"), base=base, dtype=dt),
                   requires_grad, device, "logspace")


def _traced(*ends):
    return any(isinstance(v, Tensor) and v.__class__ is not Tensor for v in ends)


def _traced_space(start, end, n, dt, device, base):
    """linspace (``base`` None) or logspace with an end that a transform traces (vmap: one range
    per example), composed from ops with PyTorch's kernel formula (from both ends, meeting
    halfway) in double; as PyTorch's, the result takes no gradient from the ends."""
    import lucid

    kind = np.dtype(dt).kind
    work = dtypes.complex128 if kind == "c" else dtypes.float64
    s, e = (v.detach().to(work) if isinstance(v, Tensor) else float(v) if kind != "c" else complex(v)
            for v in (start, end))
    if kind in "iub":  # integer ends truncate toward zero first, as _int_end
        s, e = (v.trunc() if isinstance(v, Tensor) else float(int(v)) for v in (s, e))
    i = arange(n, dtype=work, device=device)
    first_half = arange(n, dtype=dtypes.int64, device=device) < max(n // 2, 1)  # a real index: complex has no order
    step = (e - s) / (n - 1) if n > 1 else (e - s) * 0.0
    vals = lucid.where(first_half, s + step * i, e - step * (n - 1 - i))
    if base is not None:
        vals = lucid.pow(base, vals)
    return (vals.trunc() if kind in "iub" else vals).to(dt)


def _int_end(v, dt, op):
    """An end of an integer linspace/arange as ``dt``'s value: an int wraps, a float truncates
    toward zero and must fit (PyTorch's conversions)."""
    v = v.item() if isinstance(v, Tensor) else v
    info = np.iinfo(dt) if np.dtype(dt).kind != "b" else None
    if isinstance(v, float) or isinstance(v, np.floating):
        v = int(v)  # toward zero
        if info is not None and not info.min <= v <= info.max:
            raise RuntimeError(f"{op}: value cannot be converted to type {np.dtype(dt)} without overflow")
        return v
    return int(np.array(int(v)).astype(dt)) if info is not None else int(bool(v))


def _ends_dtype(start, end, dtype, op):
    """The result dtype of linspace/logspace: complex ends make a complex default (NumPy would
    drop their imaginary parts into a real dtype); multi-element tensor ends are refused (NumPy
    would broadcast them into a batch of ranges), as PyTorch."""
    nd = [getattr(v, "ndim", 0) for v in (start, end)]
    if any(nd):
        raise RuntimeError(f"{op}: only supports 0-dimensional start and end tensors, but got start "
                           f"with {nd[0]} dimension(s) and end with {nd[1]} dimension(s)")
    cplx = any(isinstance(v, complex) or (isinstance(v, Tensor) and v.dtype.kind == "c") for v in (start, end))
    if dtype is None:
        return dtypes.default_complex() if cplx else dtypes.get_default_dtype()
    dt = dtype_arg(dtype, op)
    if cplx and np.dtype(dt).kind != "c":
        raise RuntimeError(f"{op}: inferred dtype {dtypes.default_complex()} can't be safely cast to "
                           f"passed dtype {dt}")
    return dt


def _steps(steps, op):
    if isinstance(steps, (float, complex, np.floating)):
        raise TypeError(f"{op}: steps must be an int, got {type(steps).__name__} {steps!r}")
    if int(steps) < 0:
        raise RuntimeError(f"{op}: number of steps must be non-negative, got {steps}")
    return int(steps)


def eye(n, m=None, dtype=None, device=None, requires_grad=False, layout=None):
    """Identity matrix of shape ``(n, m)``.

    Parameters
    ----------
    n : int
        Rows.
    m : int, optional
        Columns (default ``n``).
    dtype : dtype, optional
        A floating dtype (default: the default dtype).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.eye(2).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """
    if layout is not None:
        layout_arg(layout, "eye")
    if n < 0 or (m is not None and m < 0):
        raise RuntimeError(f"eye: n and m must be non-negative, got n={n}, m={m}")
    return _finish(xp.eye(n, m, dtype=_float_dtype(dtype, "eye")), requires_grad, device, "eye")


# ------------------------------------------------------------------ conversions


def _is_device(a):
    """Whether a positional argument of ``to`` names a device (not a dtype)."""
    if isinstance(a, backend.device):
        return True
    if isinstance(a, str):
        return a.partition(":")[0] in backend.KNOWN_DEVICE_TYPES
    return isinstance(a, int) and not isinstance(a, bool)  # PyTorch: an ordinal is a CUDA device


# NOTE [Moving between devices]
# ``to_device`` is a primitive, so moving is differentiable (the cotangent goes back to the
# source device, the tangent forward to the target) and batchable (vmap keeps the batch dim).
def _to_device_impl(x, device, src):
    return backend.to_device(x, device)


to_device_p = defprim(
    "to_device",
    _to_device_impl,
    vjp=(lambda ns, g, out, x, device, src: ns.to_device(g, device=src, src=device),),
    jvp=lambda ns, primals, tangents, out, device, src: ns.to_device(tangents[0], device=device, src=src),
    save_inputs=None,
)
to_device_p.batch = lambda vals, bdims, device, src: (
    bind(to_device_p, (vals[0],), {"device": device, "src": src}), bdims[0])


def to_device(x, device):
    """``x`` on ``device`` (itself when already there); gradients flow back across the move.

    Examples
    --------
    >>> import lucid
    >>> lucid.ops.creation.to_device(lucid.ones(2), "cpu").device
    device(type='cpu')
    """
    dev = device_arg(device, "to")
    src = x.device
    if src == dev:
        return x
    return bind(to_device_p, (x,), {"device": dev, "src": src})


@tensor_method("to")
def to(input, *args, dtype=None, device=None, copy=False, non_blocking=False, memory_format=None):
    """Convert dtype and/or move: ``x.to(lucid.float64)``, ``x.to("cuda")``, ``x.to(other)``.

    Moving to a device this machine lacks (``"cuda"`` without a GPU, ``"mps"`` ...) raises a
    RuntimeError naming it (NOTE [Devices]). The move is differentiable (NOTE [Moving between
    devices]); ``non_blocking`` is accepted (copies are synchronous). ``memory_format`` asks for
    a layout: the tensor itself if nothing else changes and its strides suggest it, as PyTorch.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).to("cpu", lucid.float64)
    tensor([1., 2.], dtype=lucid.float64)
    >>> x = lucid.zeros(2, 3, 4, 5).to(memory_format=lucid.channels_last)  # NOTE [Memory formats]
    >>> x.stride(), x.to(memory_format=lucid.channels_last) is x
    ((60, 1, 15, 3), True)
    """
    flags = []  # PyTorch's positional (..., non_blocking, copy) after a dtype, device or tensor
    for a in args:
        if isinstance(a, Tensor):
            dtype, device = a.dtype, a.device
        elif a.__class__ is bool:
            flags.append(a)
        elif _is_device(a):
            device = a
        elif a is not None:
            dtype = a
    if len(flags) > 2:
        raise TypeError(f"to: expected at most two positional flags (non_blocking, copy), got {len(flags)}")
    if len(flags) == 2:
        copy = flags[1]
    out = input
    if dtype is not None and dtypes.ML_FLOATS and input.dtype in dtypes.ML_FLOATS:
        out = cast(out, dtype_arg(dtype, "to"))  # first, where bfloat16/float8 live: a GPU has neither
        dtype = None
    if device is not None:
        out = to_device(out, device)
    if dtype is not None:
        out = cast(out, dtype_arg(dtype, "to"))
    if memory_format is not None:
        from .memory_format import to_format

        return to_format(input, out, memory_format, copy)
    if copy and out is input:
        out = out.clone()
    return out


def _conv(dtype, name):
    def method(self, memory_format=None):
        if memory_format is None:
            return cast(self, dtype)
        return self.to(dtype, memory_format=memory_format)  # e.g. x.half(memory_format=lucid.channels_last)

    method.__name__ = name
    method.__doc__ = f"This tensor as ``{dtype}``."
    return method


for _n, _dt in [("float", dtypes.float32), ("double", dtypes.float64), ("half", dtypes.float16),
                ("long", dtypes.int64), ("int", dtypes.int32), ("short", dtypes.int16),
                ("bool", dtypes.bool_), ("byte", dtypes.uint8), ("char", dtypes.int8)]:
    setattr(Tensor, _n, _conv(_dt, _n))


def bfloat16(self, memory_format=None):
    """This tensor as ``lucid.bfloat16`` (loads ml_dtypes on first use; NOTE [bfloat16])."""
    dt = dtypes.enable_bfloat16()
    return cast(self, dt) if memory_format is None else self.to(dt, memory_format=memory_format)


Tensor.bfloat16 = bfloat16


@tensor_method("type_as")
def type_as(input, other):
    return cast(input, other.dtype)


@tensor_method("type")
def type_(input, dtype=None, non_blocking=False):
    """With no argument, the legacy type name (``'lucid.FloatTensor'``); else cast to ``dtype``.

    ``dtype`` may be a dtype, a typed class (``lucid.DoubleTensor``) or its name.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2)
    >>> x.type(), x.type("lucid.LongTensor").dtype
    ('lucid.FloatTensor', lucid.int64)
    """
    from .legacy import TYPED

    # PyTorch's names; the complex ones have no constructor class (neither in PyTorch)
    names = {c.dtype: c.__name__ for c in TYPED.values()}
    names.update({dtypes.complex64: "ComplexFloatTensor", dtypes.complex128: "ComplexDoubleTensor",
                  dtypes.uint16: "UInt16Tensor", dtypes.uint32: "UInt32Tensor", dtypes.uint64: "UInt64Tensor"})
    if dtypes.BF16 is not None or (isinstance(dtype, str) and dtype.endswith(".BFloat16Tensor")):
        names[dtypes.enable_bfloat16()] = "BFloat16Tensor"
    if dtype is None:
        where = "" if input.device.type == "cpu" else f"{input.device.type}."  # 'lucid.cuda.FloatTensor'
        return f"lucid.{where}{names[input.dtype]}"
    if isinstance(dtype, str) and dtype.startswith(("lucid.", "torch.")):
        *middle, name = dtype.split(".")[1:]
        by_name = {n: d for d, n in names.items()}
        if name not in by_name or len(middle) > 1:
            raise TypeError(f"type: unknown tensor type {dtype!r}")
        out = cast(input, by_name[name])
        if middle:  # 'lucid.cuda.FloatTensor': that device type too
            return out if out.device.type == middle[0] else to_device(out, middle[0])
        return out if out.device.type == "cpu" else to_device(out, "cpu")
    if dtype is Tensor:  # x.type(torch.Tensor): the default tensor type, as PyTorch
        return cast(input, dtypes.get_default_dtype())
    where = getattr(dtype, "device_type", None)  # a typed class: its dtype and device type
    out = cast(input, dtype_arg(getattr(dtype, "dtype", dtype), "type"))
    return out if where is None or out.device.type == where else to_device(out, where)


@tensor_method("cpu")
def cpu(input, memory_format=None):
    """This tensor on the CPU (itself when it is there already): the explicit host copy."""
    return to_device(input, "cpu")


@tensor_method("cuda")
def cuda(input, device=None, non_blocking=False, memory_format=None):
    """This tensor on a CUDA device (``lucid.cuda.is_available()`` must be True)."""
    return to_device(input, "cuda" if device is None else device
                     if isinstance(device, (str, backend.device)) else f"cuda:{device}")


# NOTE [Pinned memory]
# ``pin_memory()`` copies a CPU tensor into page-locked host memory from CuPy's pinned pool
# (``cupyx.empty_pinned``): still a NumPy array on the CPU, but the GPU's copy engine reads it
# directly, so host-to-device copies of batches are faster. A pinned array is recognised by
# its buffer, CuPy's ``PinnedMemoryPointer``. As in PyTorch it needs a GPU; DataLoader's
# ``pin_memory=True`` pins each batch when one is there.
@tensor_method("pin_memory")
def pin_memory(input, device=None):
    """This CPU tensor in page-locked (pinned) host memory, for faster copies to a CUDA device.

    Raises without a GPU, as PyTorch does. See NOTE [Pinned memory].

    Limitations: not differentiable (PyTorch's is): a tensor that requires grad is refused
    rather than cut from its graph; pin data, or ``detach()`` first.

    Examples
    --------
    >>> import lucid
    >>> lucid.ones(3).is_pinned()
    False
    """
    if input.device.type != "cpu":
        raise RuntimeError(f"pin_memory: cannot pin a '{input.device}' tensor: only CPU tensors can be pinned")
    if input.requires_grad:
        raise RuntimeError("pin_memory: the tensor requires grad and pinning is not differentiable in "
                           "Lucid; pin data tensors, or detach() first")
    if is_pinned(input):
        return input
    import lucid.cuda

    pinned = lucid.cuda._pinned_empty(tuple(input.shape), input.dtype, "pin_memory")
    pinned[...] = input._data
    return _wrap(pinned)


@tensor_method("is_pinned")
def is_pinned(input, device=None):
    """Whether this tensor's values lie in pinned host memory (NOTE [Pinned memory])."""
    a = input._data
    while a is not None:
        if a.__class__.__name__ == "PinnedMemoryPointer":
            return True
        a = getattr(a, "base", None)
    return False


@tensor_method("new_tensor")
def new_tensor(input, data, dtype=None, device=None, requires_grad=False):
    return tensor(data, dtype=dtype or input.dtype, device=device or input.device, requires_grad=requires_grad)


def _batch_levels(input):
    """The vmap levels ``input`` is batched at, innermost first (NOTE [Levels])."""
    from ..func._traces import BatchTracer, _Tracer

    levels = []
    while isinstance(input, _Tracer):
        if isinstance(input, BatchTracer):
            levels.append(input)
        input = input._inner_value()
    return levels[::-1]


def _new_like(op, input, make, size, dtype, device, requires_grad):
    """``make(shape, dtype, device, requires_grad)`` of ``size``; batched at each vmap level
    ``input`` is batched at, as functorch's batching rules for new_zeros/new_ones/new_full/
    new_empty make theirs (so writing batched values into it in place works)."""
    size = tuple(size_arg(sizes_or_keyword(size, None, op), op))
    dtype, device = dtype or input.dtype, device or input.device
    if input.__class__ is Tensor:
        return make(size, dtype, device, requires_grad)
    levels = _batch_levels(input)
    out = make(tuple(t._val.shape[t._bdim] for t in levels) + size, dtype, device, requires_grad)
    from ..func._traces import BatchTracer

    for t in levels:
        out = BatchTracer(out, 0, t._trace)
    return out


@tensor_method("new_zeros")
def new_zeros(input, *size, dtype=None, device=None, requires_grad=False, layout=None, **kwargs):
    """A zero tensor of ``size`` with ``input``'s dtype and device by default.

    Examples
    --------
    >>> import lucid
    >>> lucid.ones(2, dtype=lucid.float64).new_zeros(3)
    tensor([0., 0., 0.], dtype=lucid.float64)
    """
    size = _kw_shape(size, kwargs, "new_zeros", "size")  # ``x.new_zeros(size=(2, 3))``, PyTorch's keyword
    return _new_like("new_zeros", input, lambda s, dt, dev, rg: zeros(s, dtype=dt, device=dev, requires_grad=rg, layout=layout),
                     size, dtype, device, requires_grad)


@tensor_method("new_ones")
def new_ones(input, *size, dtype=None, device=None, requires_grad=False, layout=None, **kwargs):
    """A tensor of ones of ``size`` with ``input``'s dtype and device by default.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2).new_ones(2, 1).tolist()
    [[1.0], [1.0]]
    """
    size = _kw_shape(size, kwargs, "new_ones", "size")  # ``x.new_ones(size=(2, 3))``, PyTorch's keyword
    return _new_like("new_ones", input, lambda s, dt, dev, rg: ones(s, dtype=dt, device=dev, requires_grad=rg, layout=layout),
                     size, dtype, device, requires_grad)


@tensor_method("new_full")
def new_full(input, size, fill_value, dtype=None, device=None, requires_grad=False, layout=None):
    """A tensor of ``size`` filled with ``fill_value``, ``input``'s dtype and device by default.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, dtype=lucid.int64).new_full((2,), 7).tolist()
    [7, 7]
    """
    return _new_like("new_full", input,
                     lambda s, dt, dev, rg: full(s, fill_value, dtype=dt, device=dev, requires_grad=rg, layout=layout),
                     (size,), dtype, device, requires_grad)


@tensor_method("new_empty")
def new_empty(input, *size, dtype=None, device=None, requires_grad=False, layout=None, **kwargs):
    """An uninitialised tensor of ``size`` (Lucid fills it with zeros), ``input``'s dtype and device.

    Examples
    --------
    >>> import lucid
    >>> tuple(lucid.zeros(1).new_empty(2, 3).shape)
    (2, 3)
    """
    size = _kw_shape(size, kwargs, "new_empty", "size")  # ``x.new_empty(size=(2, 3))``, PyTorch's keyword
    return _new_like("new_empty", input, lambda s, dt, dev, rg: zeros(s, dtype=dt, device=dev, requires_grad=rg, layout=layout),
                     size, dtype, device, requires_grad)


__all__ = ['arange', 'as_tensor', 'asarray', 'empty', 'empty_like', 'empty_strided', 'eye', 'from_numpy',
           'frombuffer', 'full', 'full_like', 'linspace', 'logspace', 'ones', 'ones_like', 'range',
           'scalar_tensor', 'tensor', 'zeros', 'zeros_like']

# asarray, frombuffer, empty_strided, scalar_tensor, range: in creation_buffers.py (imported last:
# it uses this module's helpers)
from .creation_buffers import asarray, empty_strided, frombuffer, range, scalar_tensor  # noqa: E402,F401
