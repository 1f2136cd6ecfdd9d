"""Print options for tensors: ``lucid.set_printoptions`` / ``lucid.get_printoptions``.

NOTE [Printing tensors]
A tensor prints its values as NumPy's ``array2string`` does (``tensor([1., 2.])``), with
PyTorch's options: ``precision``, ``threshold`` (summarise with ``...`` above this many
elements), ``edgeitems``, ``linewidth``, ``sci_mode`` and the profiles. The defaults keep
Lucid's long-standing output: NumPy's own defaults (``precision=8``, ``linewidth=75``) and
PyTorch's ``threshold=1000``, where PyTorch has ``precision=4`` and ``linewidth=80``. NumPy's
global print options do not reach a tensor: only these do.

Two ways of writing floats:

* ``sci_mode=None`` (the default): NumPy's choice, ``floatmode="maxprec"`` — at most
  ``precision`` digits, trailing zeros dropped (``0.1``, where PyTorch prints ``0.1000``),
  scientific notation where NumPy would use it (values >= 1e8, or < 1e-4, or spanning
  more than 1e3).
* ``sci_mode=True`` / ``False``: PyTorch's fixed format, exactly ``precision`` digits
  (``1.0000e-01`` / ``0.1000``; ``1.`` for a tensor of whole numbers in fixed notation),
  right-aligned to the widest nonzero finite value shown (a ``-0.``, ``nan`` or ``inf`` keeps
  its own width, as in PyTorch).

Suffixes are PyTorch's: ``device=`` off the host, ``size=`` where the values do not show the
shape (empty tensors other than (0,), meta tensors, ``edgeitems=0``), ``dtype=`` unless it is
the default float dtype, int64 or bool (an empty tensor names any non-default dtype), then
``grad_fn=`` or ``requires_grad=True``. Two departures are pinned by tests/surface/test_printing.py:
complex dtypes are always named, and suffixes stay on the last line whatever ``linewidth`` is.
The layout (line wrapping, `` ...`` spacing) is NumPy's in every mode.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from .dtypes import ML_FLOATS

_DEFAULT = {"precision": 8, "threshold": 1000, "edgeitems": 3, "linewidth": 75}
_PROFILES = {
    "default": _DEFAULT,
    "short": {"precision": 2, "threshold": 1000, "edgeitems": 2, "linewidth": 75},
    "full": {"precision": 8, "threshold": math.inf, "edgeitems": 3, "linewidth": 75},
}
PRINT_OPTS = dict(_DEFAULT, sci_mode=None)


def _check_int(name, value, lowest):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"set_printoptions: {name} must be an int, got {type(value).__name__}")
    if value < lowest:
        raise ValueError(f"set_printoptions: {name} must be >= {lowest}, got {value}")
    return int(value)


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None, profile=None,
                     sci_mode=None):
    """Set how tensors print (see NOTE [Printing tensors] for Lucid's defaults).

    Parameters
    ----------
    precision : int, optional
        Digits after the decimal point (at most that many, unless ``sci_mode`` is set).
    threshold : int or float, optional
        Tensors with more elements than this print summarised (``math.inf``: never).
    edgeitems : int, optional
        Items shown at each end of a summarised dimension.
    linewidth : int, optional
        Characters per line before wrapping.
    profile : {'default', 'short', 'full'}, optional
        Start from these settings (``'default'``: Lucid's defaults; ``'short'``: precision 2,
        2 edge items; ``'full'``: never summarise), then apply the other arguments.
    sci_mode : bool, optional
        Always (True) or never (False) scientific notation; None chooses per tensor. As in
        PyTorch every call sets it, so a call without it returns to None.

    Examples
    --------
    >>> import lucid
    >>> lucid.set_printoptions(precision=2)
    >>> lucid.tensor([1.12345, 2.5])
    tensor([1.12, 2.5 ])
    >>> lucid.set_printoptions(threshold=5)
    >>> lucid.arange(10)
    tensor([0, 1, 2, ..., 7, 8, 9])
    >>> lucid.set_printoptions(sci_mode=False, precision=4)
    >>> lucid.tensor([1e-5, 2.5])
    tensor([0.0000, 2.5000])
    >>> lucid.set_printoptions(profile="default")
    >>> lucid.tensor([1.12345, 2.5])
    tensor([1.12345, 2.5    ])
    """
    new = dict(PRINT_OPTS)
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"set_printoptions: profile must be one of 'default', 'short', 'full', "
                             f"got {profile!r}")
        new.update(_PROFILES[profile])
    if precision is not None:
        new["precision"] = _check_int("precision", precision, 0)
    if threshold is not None:
        if isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.integer, np.floating)) \
                or threshold != threshold:
            raise TypeError(f"set_printoptions: threshold must be a number, got {threshold!r}")
        new["threshold"] = threshold
    if edgeitems is not None:
        new["edgeitems"] = _check_int("edgeitems", edgeitems, 0)
    if linewidth is not None:
        new["linewidth"] = _check_int("linewidth", linewidth, 1)
    if sci_mode is not None and not isinstance(sci_mode, bool):
        raise TypeError(f"set_printoptions: sci_mode must be a bool or None, got {type(sci_mode).__name__}")
    new["sci_mode"] = sci_mode
    PRINT_OPTS.update(new)


def get_printoptions() -> dict:
    """The current print options, as keyword arguments for :func:`set_printoptions`.

    Examples
    --------
    >>> import lucid
    >>> lucid.get_printoptions()
    {'precision': 8, 'threshold': 1000, 'edgeitems': 3, 'linewidth': 75, 'sci_mode': None}
    """
    return dict(PRINT_OPTS)


def array_str(arr: np.ndarray, prefix: str) -> str:
    """The values of host array ``arr`` as a tensor prints them after ``prefix``."""
    o = PRINT_OPTS
    threshold = o["threshold"]
    if arr.size == 0:
        return "[]"
    if arr.ndim and not o["edgeitems"] and arr.size > threshold:
        return "[...]"  # PyTorch's form: NumPy would still show a last item here
    if arr.dtype in ML_FLOATS:
        arr = arr.astype(np.float32)  # bfloat16, float8 (NOTE [bfloat16], [float8]): their values, exactly
    formatter = None
    if o["sci_mode"] is not None and arr.dtype.kind in "fc":
        shown = _summarized(arr, o["edgeitems"]) if arr.size > threshold else arr
        formatter = _fixed_formatter(shown, o["precision"], o["sci_mode"])
    return np.array2string(
        arr, max_line_width=o["linewidth"], precision=o["precision"], suppress_small=False,
        separator=", ", prefix=prefix, formatter=formatter, floatmode="maxprec", sign="-",
        threshold=sys.maxsize if threshold >= sys.maxsize else int(threshold), edgeitems=o["edgeitems"],
        legacy=False,
    )


def tensor_repr(t, prefix: str = "tensor(") -> str:
    """``repr(t)``: the values, then PyTorch's suffixes (device, size, dtype, autograd)."""
    from . import backend, dtypes
    from .tensor import WrapperValues

    data = t._data
    if data.__class__ is WrapperValues:
        return _wrapper_repr(t, data)
    on_host = data.__class__ is np.ndarray
    meta = not on_host and backend.backend_of(data).type == "meta"
    default = np.dtype(dtypes.get_default_dtype().dtype)
    suffixes = [] if on_host else [f"device='{t.device}'"]
    size = f"size={tuple(t.shape)}"
    if meta or data.size == 0:
        # No values to infer the shape or the dtype from: spelt out ((0,) is what "[]" reads as).
        body = "..." if meta else "[]"
        if meta or data.ndim != 1:
            suffixes.append(size)
        if data.dtype != default:
            suffixes.append(f"dtype=lucid.{data.dtype}")
    else:
        body = array_str(backend.host(data), prefix=prefix)
        if not PRINT_OPTS["edgeitems"]:
            suffixes.append(size)
        if data.dtype not in (default, np.dtype(np.int64), np.dtype(np.bool_)):
            suffixes.append(f"dtype=lucid.{data.dtype}")
    suffixes += _autograd_suffixes(t)
    # PyTorch moves a suffix that would pass ``linewidth`` to a line of its own; Lucid keeps
    # them on the last line (tests/surface/test_printing.py pins that form).
    return prefix + body + "".join(", " + s for s in suffixes) + ")"


def _autograd_suffixes(t):
    if t.grad_fn is not None:
        return [f"grad_fn=<{t.grad_fn.name()}>"]
    return ["requires_grad=True"] if t.requires_grad else []


def _wrapper_repr(t, data):
    """A wrapper subclass without a ``__repr__`` of its own (NOTE [Printing wrapper subclasses])."""
    from . import dtypes

    suffixes = [] if data.device.type == "cpu" else [f"device='{data.device}'"]
    suffixes.append(f"size={tuple(data.shape)}")
    if data.dtype != np.dtype(dtypes.get_default_dtype().dtype):
        suffixes.append(f"dtype=lucid.{data.dtype}")
    body = f"{type(t).__name__}(..." + "".join(", " + s for s in suffixes + _autograd_suffixes(t)) + ")"
    return f"Parameter({body})" if t.__dict__.get("_is_param") else body


# NOTE [Printing wrapper subclasses]
# A wrapper subclass (``Tensor._make_wrapper_subclass``) has no values of its own to print:
# PyTorch computes them through its ``__torch_dispatch__``, which for most wrappers gives the
# class back (TwoTensor: the print fails) or reads inner tensors the printer knows nothing
# of. Lucid prints the metadata form PyTorch uses for meta and fake tensors instead, with the
# class's name: ``TwoTensor(..., size=(2, 3), dtype=lucid.float64, requires_grad=True)``, and
# ``Parameter(...)`` around it for a parameter (NOTE [Subclass parameters]). A class that
# defines ``__repr__`` prints with it.


def _summarized(arr, edgeitems):
    """The elements a summarised print shows: ``edgeitems`` at each end of each long dimension."""
    for axis, n in enumerate(arr.shape):
        if n > 2 * edgeitems:
            keep = list(range(edgeitems)) + list(range(n - edgeitems, n))
            arr = np.take(arr, keep, axis=axis)
    return arr


def _fixed_formatter(arr, precision, sci):
    """PyTorch's fixed float format for ``sci_mode`` True/False, padded to one width."""
    if arr.dtype.kind == "c":
        real, imag = _float_format(arr.real, precision, sci), _float_format(arr.imag, precision, sci)

        def fmt_complex(z):
            im = (imag(z.imag) + "j").lstrip()
            return real(z.real) + (im if im[0] in "+-" else "+" + im)

        return {"complex_kind": fmt_complex}
    return {"float_kind": _float_format(arr, precision, sci)}


def _float_format(arr, precision, sci):
    """PyTorch's float formatter for the values of ``arr``: the width is that of the widest
    nonzero finite value (zeros, nan and inf neither widen it nor, alone, choose a format)."""
    vals = arr.astype(np.float64).ravel()
    finite = vals[np.isfinite(vals) & (vals != 0)]
    int_mode, width = True, 1
    if not finite.size:  # only zeros, nan and inf: PyTorch prints them in int mode (0.) either way
        sci = False
    else:
        int_mode = not sci and bool(np.all(finite == np.ceil(finite)))
        width = max(len(text) + int_mode for text in map(_text_of(precision, sci, int_mode), finite))
    text = _text_of(precision, sci, int_mode)

    def fmt(v):
        s = text(v)
        if int_mode and not sci and math.isfinite(v):
            s += "."
        return s.rjust(width)

    return fmt


def _text_of(precision, sci, int_mode):
    if sci:
        return lambda v: f"{float(v):.{precision}e}"
    if int_mode:
        return lambda v: f"{float(v):.0f}"
    return lambda v: f"{float(v):.{precision}f}"
