"""Tensors made from buffers, array-likes and strides: ``asarray``, ``frombuffer``,
``empty_strided``, ``scalar_tensor`` and the legacy ``range`` (split from ``creation.py``)."""
from __future__ import annotations

import numpy as np

from .._core import backend, dtypes
from .._core.backend import xp
from .._core.tensor import Tensor, _to_array, _wrap
from .creation import _finish, _float_dtype, _made, device_arg, dtype_arg, to_device
from .elementwise import cast


def _alias_error(op, what):
    return ValueError(f"{op}: can't alias {what} (copy=False forbids a copy; pass copy=None to allow one)")


def _grad_flag(t, requires_grad, op):
    """Apply ``requires_grad`` (True / False / None: leave as is) to a result of :func:`asarray`."""
    if requires_grad is None:
        return t
    if not requires_grad:
        return t.detach() if t.requires_grad else t
    if not dtypes.is_differentiable(t.dtype):
        raise RuntimeError(f"{op}: only floating point and complex tensors can require gradients "
                           f"(got dtype {t.dtype})")
    if not t.requires_grad:
        t.requires_grad = True
    return t


def _asarray_tensor(t, dtype, dev, copy, op):
    """A tensor source: itself when nothing changes (shared), else a differentiable move/cast."""
    dev = t.device if dev is None else dev
    if copy is False and (dtype is not None and t.dtype != dtype):
        raise _alias_error(op, f"a tensor of dtype {t.dtype} into dtype {dtypes._LUCID[dtype]}")
    if copy is False and dev != t.device:
        raise _alias_error(op, f"a tensor from device '{t.device}' to '{dev}'")
    out = to_device(t, dev)
    if dtype is not None and out.dtype != dtype:
        out = cast(out, dtype)
    return out.clone() if copy and out is t else out


def _buffer_array(buffer, dtype, count, offset, op):
    """``numpy.frombuffer`` with PyTorch's checks and messages (sizes in bytes)."""
    try:
        nbytes = memoryview(buffer).nbytes
    except TypeError:
        raise ValueError(f"{op}: object does not implement Python buffer protocol.") from None
    item = dtype.itemsize
    if nbytes <= 0 or count == 0:
        raise ValueError(f"{op}: both buffer length ({nbytes}) and count ({count}) must not be 0")
    if not 0 <= offset < nbytes:
        raise ValueError(f"{op}: offset ({offset} bytes) must be non-negative and no greater than buffer "
                         f"length ({nbytes} bytes) minus 1")
    if count < 0 and (nbytes - offset) % item:
        raise ValueError(f"{op}: buffer length ({nbytes - offset} bytes) after offset ({offset} bytes) must "
                         f"be a multiple of element size ({item})")
    n = (nbytes - offset) // item if count < 0 else count
    if offset + n * item > nbytes:
        raise ValueError(f"{op}: requested buffer length ({n} * {item} bytes) after offset ({offset} bytes) "
                         f"must not be greater than actual buffer length ({nbytes} bytes)")
    return np.frombuffer(buffer, dtype=dtype, count=n, offset=offset)


def _is_buffer(obj):
    try:
        memoryview(obj)
    except TypeError:
        return False
    return True


def _host_values(obj):
    """Tensors inside a (nested) sequence as host arrays: an explicit copy from a device."""
    if isinstance(obj, Tensor):
        return backend.host(obj._data)
    if isinstance(obj, (list, tuple)):
        return [_host_values(v) for v in obj]
    return obj


def asarray(obj, *, dtype=None, device=None, copy=None, requires_grad=None):
    """``obj`` as a tensor, sharing its memory where it can (PyTorch's ``asarray``).

    A tensor comes back itself, or moved/cast (differentiably) when ``dtype``/``device`` ask.
    A NumPy array (or an array of a device's backend) is wrapped without a copy, keeping its
    strides; a buffer (``bytes``, ``bytearray``, ``memoryview`` ...) is read as elements of
    ``dtype`` (default: the default float dtype) in place, as :func:`frombuffer`; an object
    with ``__dlpack__`` is imported through DLPack. Scalars, NumPy scalars and (nested)
    sequences are copied, as :func:`tensor` does.

    Parameters
    ----------
    obj : Tensor, array, buffer, scalar or sequence
        The data.
    dtype : dtype, optional
        Convert to this dtype (a copy).
    device : str or lucid.device, optional
        Default: a tensor's or device array's own device; for host data the default device
        (``lucid.set_default_device``). A different device means a copy.
    copy : bool, optional
        None: share when possible; True: always copy; False: never copy (ValueError if a
        copy is needed).
    requires_grad : bool, optional
        None (the default, as in PyTorch 2.13): a tensor keeps its own flag and history,
        anything else does not require grad. True: require grad (a tensor returned itself gets
        the flag set, as in PyTorch). False: the result does not require grad (a tensor that
        does comes back detached, sharing memory; PyTorch clears the source's own flag).

    Examples
    --------
    >>> import lucid, numpy as np
    >>> a = np.array([1.0, 2.0])
    >>> t = lucid.asarray(a, device="cpu"); a[0] = 5.0
    >>> t
    tensor([5., 2.], dtype=lucid.float64)
    >>> lucid.asarray(t) is t, lucid.asarray(t, copy=True) is t
    (True, False)
    >>> lucid.asarray(bytearray(b"\\x00\\x00\\x80?"), device="cpu")
    tensor([1.])
    """
    op = "asarray"
    dt = dtype_arg(dtype, op)
    if copy is not None and not isinstance(copy, bool):
        raise TypeError(f"{op}: copy must be a bool or None, got {type(copy).__name__}")
    dev = device_arg(device, op) if device is not None else None
    host_dev = dev if dev is not None else backend.get_default_device()  # where host data goes
    if isinstance(obj, Tensor):
        return _grad_flag(_asarray_tensor(obj, dt, dev, copy, op), requires_grad, op)
    if obj.__class__ in backend._BY_TYPE:  # an array of some backend: wrapped as it is
        if not dtypes.supported(obj.dtype):  # e.g. uint16: only a converting copy will do
            if dt is None or copy is False:
                raise TypeError(f"{op}: can't alias an array of dtype {obj.dtype} (not a lucid dtype: "
                                f"{', '.join(sorted(str(d) for d in dtypes._SUPPORTED))}); pass dtype=")
            with backend.on_device(obj):
                obj = obj.astype(dt)
        t = _asarray_tensor(_wrap(obj), dt, host_dev if obj.__class__ is np.ndarray else dev, copy, op)
    elif isinstance(obj, np.generic):
        if copy is False:
            raise RuntimeError(f"{op}: can't alias NumPy scalars; remove copy=False or pass an ndarray")
        t = _finish(_to_array(obj, dt), False, dev, op)
    elif hasattr(obj, "__dlpack__"):
        from .meta import from_dlpack

        t = _asarray_tensor(from_dlpack(obj), dt, host_dev, copy, op)
    elif _is_buffer(obj):
        arr = _buffer_array(obj, dt if dt is not None else dtypes.get_default_dtype(), -1, 0, op)
        t = _asarray_tensor(_wrap(arr), None, host_dev, copy, op)
    else:
        if copy is False:
            raise _alias_error(op, "an arbitrary sequence or scalar into a tensor")
        try:
            arr = _to_array(_host_values(obj), dt)
        except (TypeError, ValueError) as e:
            why = str(e).removeprefix("tensor: ")
            raise type(e)(f"{op}: can't make a tensor from {type(obj).__name__} ({why})") from None
        t = _finish(arr, False, dev, op)
    return _grad_flag(t, requires_grad, op)


def frombuffer(buffer, *, dtype, count=-1, offset=0, requires_grad=False):
    """A 1-D CPU tensor reading ``buffer``'s bytes in place as ``count`` elements of ``dtype``.

    The tensor shares the buffer's memory (writes show through both ways); a read-only buffer
    such as ``bytes`` gives a read-only tensor (PyTorch warns and lets it be written).

    Parameters
    ----------
    buffer : object with the buffer protocol
        ``bytes``, ``bytearray``, ``memoryview``, ``array.array`` ...
    dtype : dtype
        The element type.
    count : int
        Number of elements (-1: all that follow ``offset``).
    offset : int
        Bytes to skip at the start.
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> b = bytearray(b"\\x01\\x00\\x02\\x00\\x03\\x00")
    >>> t = lucid.frombuffer(b, dtype=lucid.int16, offset=2)
    >>> t
    tensor([2, 3], dtype=lucid.int16)
    >>> b[2] = 9; t.tolist()
    [9, 3]
    """
    op = "frombuffer"
    dt = dtype_arg(dtype, op)
    if dt is None:
        raise TypeError(f"{op}: dtype is required")
    for name, v in (("count", count), ("offset", offset)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(f"{op}: {name} must be an int, got {type(v).__name__}")
    if requires_grad and not dtypes.is_differentiable(dt):
        raise RuntimeError(f"{op}: only floating point and complex tensors can require gradients "
                           f"(got dtype {np.dtype(dt).name})")
    return _finish(_buffer_array(buffer, dt, int(count), int(offset), op), requires_grad, "cpu", op)


def _ints(values, what, op):
    if isinstance(values, (int, np.integer)) or not isinstance(values, (tuple, list)):
        raise TypeError(f"{op}: {what} must be a tuple of ints, got {type(values).__name__}")
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise TypeError(f"{op}: {what} must be a tuple of ints, got {values!r}") from None


def empty_strided(size, stride, *, dtype=None, device=None, requires_grad=False):
    """An uninitialised tensor (zeros in practice) with the given ``stride`` (in elements).

    Its memory is the smallest storage the geometry reaches, ``1 + sum((size - 1) * stride)``
    elements, viewed with those strides, on any device whose arrays take strides (the CPU and
    CUDA; the ``"meta"`` device only has contiguous strides).

    Parameters
    ----------
    size, stride : tuple of int
        The shape and the step between neighbours along each dimension (non-negative).
    dtype : dtype, optional
        The dtype (default: the default dtype).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.empty_strided((2, 3), (1, 2), device="cpu")
    >>> x.stride(), x.is_contiguous()
    ((1, 2), False)
    """
    op = "empty_strided"
    size, stride = _ints(size, "size", op), _ints(stride, "stride", op)
    if len(size) != len(stride):
        raise RuntimeError(f"{op}: dimensionality of sizes ({len(size)}) must match dimensionality of "
                           f"strides ({len(stride)})")
    if any(n < 0 for n in size):
        raise RuntimeError(f"{op}: trying to create tensor with negative dimension: {list(size)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"{op}: strides must be non-negative, got {list(stride)}")
    dt = _float_dtype(dtype, op)
    dev = device_arg(device, op)
    if dev.type == "meta":  # a shape and a dtype, reporting contiguous strides (NOTE [Meta device])
        contiguous = tuple(s // dt.itemsize for s in xp.empty(size, dt).strides)
        if any(s != c for s, c, k in zip(stride, contiguous, size) if k > 1):
            raise RuntimeError(f"{op}: the 'meta' device keeps no strides (its tensors are contiguous), "
                               f"so it can't make stride {stride} for size {size}")
        return _made("zeros", size, dt, requires_grad, dev, op)
    n = 0 if 0 in size else 1 + sum((k - 1) * s for k, s in zip(size, stride))
    flat = xp.zeros(n, dt)
    if dev is not backend.CPU:
        flat = backend.to_device(flat, dev)
    with backend.on_device(flat):  # the view must stay on flat's device (NOTE [Several devices])
        arr = backend.as_strided(flat, size, tuple(s * dt.itemsize for s in stride))
    return _finish(arr, requires_grad, dev, op)


def scalar_tensor(s, *, dtype=None, device=None, requires_grad=False):
    """A 0-d tensor holding the number ``s``, of the default float dtype unless ``dtype`` says.

    Parameters
    ----------
    s : number
        A Python or NumPy number (not a tensor, as in PyTorch).
    dtype : dtype, optional
        The dtype (default: the default dtype, also for ints and bools).
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.scalar_tensor(3), lucid.scalar_tensor(3, dtype=lucid.int64)
    (tensor(3.), tensor(3))
    """
    op = "scalar_tensor"
    if isinstance(s, Tensor) or not isinstance(s, (bool, int, float, complex, np.number, np.bool_)):
        raise TypeError(f"{op}: argument 's' must be a number, not {type(s).__name__}")
    dt = _float_dtype(dtype, op)
    v = s.item() if isinstance(s, np.generic) else s
    if isinstance(v, complex) and dt.kind != "c":
        if v.imag:
            raise RuntimeError(f"{op}: value cannot be converted to type {np.dtype(dt).name} without overflow")
        v = v.real
    if dt.kind in "iu" and (not np.isfinite(v) or not np.iinfo(dt).min <= v <= np.iinfo(dt).max):
        # as PyTorch's overflow test, a negative *integer* down to -max wraps into an unsigned
        # dtype by two's complement (-1 is 255 in uint8); negative floats still overflow
        if not (dt.kind == "u" and isinstance(v, int) and -np.iinfo(dt).max <= v < 0):
            raise RuntimeError(f"{op}: value cannot be converted to type {np.dtype(dt).name} without overflow")
        v = v % (int(np.iinfo(dt).max) + 1)
    if dt.kind in "fc" and np.isfinite(abs(v)) and abs(v) > float(dtypes.np_finfo(dt).max):
        raise RuntimeError(f"{op}: value cannot be converted to type {np.dtype(dt).name} without overflow")
    return _finish(np.array(v, dtype=dt), requires_grad, device, op)


def _range_size(start, end, step, op):
    if step == 0:
        raise RuntimeError(f"{op}: step must be nonzero")
    if not (np.isfinite(start) and np.isfinite(end)):
        raise RuntimeError(f"{op}: unsupported range: {start} -> {end}")
    if (step > 0 and end < start) or (step < 0 and end > start):
        raise RuntimeError(f"{op}: upper bound and lower bound inconsistent with step sign "
                           f"(start {start}, end {end}, step {step})")
    return int((end - start) / step + 1)


# Defined last: from here on, ``range`` in this module is this function, not the builtin.
def range(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):  # noqa: A001
    """Deprecated: values from ``start`` to ``end`` *inclusive* by ``step`` (use :func:`arange`).

    Warns (UserWarning) on every call, as PyTorch does. The length is
    ``floor((end - start) / step) + 1`` and value ``i`` is ``start + i * step``, computed in
    float64; the dtype is the default float dtype unless ``dtype`` says (an integer dtype
    truncates ``start``, ``end`` and ``step`` first, as PyTorch does).

    Parameters
    ----------
    start : number
        First value.
    end : number
        Last value (included when the steps reach it).
    step : number
        Spacing (nonzero).
    dtype : dtype, optional
        Default: the default float dtype, even for int arguments.
    device : str or lucid.device, optional
        Where to make it (default: the default device, see ``lucid.set_default_device``).
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.range(1, 4), lucid.range(1, 2, 0.5)
    (tensor([1., 2., 3., 4.]), tensor([1. , 1.5, 2. ]))
    """
    import warnings

    op = "range"
    if end is None:
        raise TypeError(f"{op}: missing the required argument 'end'")
    warnings.warn("lucid.range is deprecated and will be removed in a future release because its behavior "
                  "is inconsistent with Python's range builtin. Instead, use lucid.arange, which produces "
                  "values in [start, end).", UserWarning, stacklevel=2)
    dt = _float_dtype(dtype, op)
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if dt.kind in "iub":
        vals = [int(v) for v in vals]
    first, last, by = vals
    n = _range_size(first, last, by, op)
    if all(isinstance(v, int) for v in vals):  # exact in int64
        arr = (xp.arange(n, dtype=np.int64) * by + first).astype(dt)
    else:
        arr = (xp.arange(n, dtype=np.float64) * by + first).astype(dt)
    return _finish(arr, requires_grad, device, op)


__all__ = ["asarray", "empty_strided", "frombuffer", "range", "scalar_tensor"]
