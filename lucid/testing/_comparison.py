"""``lucid.testing.assert_close`` and ``make_tensor``: PyTorch's ``torch.testing`` helpers.

NOTE [assert_close]
Inputs are paired as PyTorch pairs them: sequences (not strings) element by element and
mappings key by key, recursively; then each pair of leaves is ``None``s, bools, numbers
(Python or NumPy scalars) or tensor-likes (two Tensors, or two NumPy arrays), in that order;
any other pair is a TypeError. Tensors are compared on their own device with Lucid ops
(``isclose``; one device-to-host read for the verdict), and only a mismatch computes its
statistics, with the same ops PyTorch uses, so the numbers in the message are PyTorch's.
"""
from __future__ import annotations

import cmath
import collections.abc
import math
import warnings

import numpy as np

from .._core import dtypes
from .._core.tensor import Tensor, _wrap

# {dtype: (rtol, atol)}: PyTorch's defaults. Other dtypes (ints, bool) compare exactly.
_PRECISIONS = {
    dtypes.float16: (0.001, 1e-5),
    dtypes.float32: (1.3e-6, 1e-5),
    dtypes.float64: (1e-7, 1e-7),
    dtypes.complex64: (1.3e-6, 1e-5),
    dtypes.complex128: (1e-7, 1e-7),
}
_BFLOAT16_PRECISION = (0.016, 1e-5)  # PyTorch's for bfloat16 (NOTE [bfloat16])


def _precision(d):
    if dtypes.BF16 is not None and d == dtypes.BF16:
        return _BFLOAT16_PRECISION
    return _PRECISIONS.get(d, (0.0, 0.0))


# Python numbers are compared as PyTorch's dtypes for them.
_NUMBER_DTYPES = {bool: dtypes.int64, int: dtypes.int64, float: dtypes.float64, complex: dtypes.complex128}


class _Mismatch(Exception):
    """A failed comparison: the exception type to raise, its message and the item path."""

    def __init__(self, type, msg, id=()):  # noqa: A002  (PyTorch's names)
        super().__init__(msg)
        self.type, self.msg, self.id = type, msg, id

    def to_error(self, msg=None):
        if isinstance(msg, str):
            return self.type(msg)
        text = self.msg
        if self.id:
            text += f"\n\nThe failure occurred for item {''.join(str([item]) for item in self.id)}"
        return self.type(msg(text) if callable(msg) else text)


class _Unsupported(Exception):
    """This kind of pair does not handle these inputs; the next kind is tried."""


def _tolerances(*dts, rtol, atol, id):
    if (rtol is None) ^ (atol is None):
        raise _Mismatch(ValueError, "Both 'rtol' and 'atol' must be either specified or omitted, but got "
                                    f"no {'rtol' if rtol is None else 'atol'}.", id)
    if rtol is not None:
        return rtol, atol
    rtols, atols = zip(*(_precision(np.dtype(d)) for d in dts))
    return max(rtols), max(atols)


def _mismatch_msg(identifier, extra, abs_diff, abs_idx, atol, rel_diff, rel_idx, rtol):
    equality = rtol == 0 and atol == 0

    def diff(kind, value, idx, tol):
        line = f"{kind.title()} difference: {value}" if idx is None else \
            f"Greatest {kind} difference: {value} at index {idx}"
        return line + ("" if equality else f" (up to {tol} allowed)") + "\n"

    msg = f"{identifier} are not {'equal' if equality else 'close'}!\n\n{extra.strip()}\n"
    msg += diff("absolute", abs_diff, abs_idx, atol) + diff("relative", rel_diff, rel_idx, rtol)
    return msg.strip()


def _scalar_msg(actual, expected, rtol, atol):
    abs_diff = abs(actual - expected)
    rel_diff = math.inf if expected == 0 else abs_diff / abs(expected)
    return _mismatch_msg("Scalars", f"Expected {expected} but got {actual}.", abs_diff, None, atol,
                         rel_diff, None, rtol)


# ------------------------------------------------------------------------- pairs
# Each maker returns the comparison of one pair of leaves (a function raising _Mismatch), or
# raises _Unsupported when the inputs are not its kind.


def _none_pair(actual, expected, id, opts):
    if not (actual is None or expected is None):
        raise _Unsupported

    def compare():
        if not (actual is None and expected is None):
            raise _Mismatch(AssertionError, f"None mismatch: {actual} is not {expected}", id)

    return compare


def _bool_pair(actual, expected, id, opts):
    if not all(isinstance(v, (bool, np.bool_)) for v in (actual, expected)):
        raise _Unsupported
    a, e = bool(actual), bool(expected)

    def compare():
        if a is not e:
            raise _Mismatch(AssertionError, f"Booleans mismatch: {a} is not {e}", id)

    return compare


def _number_pair(actual, expected, id, opts):
    if not all(isinstance(v, (int, float, complex, np.number)) for v in (actual, expected)):
        raise _Unsupported
    a, e = (v.item() if isinstance(v, np.number) else v for v in (actual, expected))
    rtol, atol = _tolerances(_NUMBER_DTYPES[type(a)], _NUMBER_DTYPES[type(e)],
                             rtol=opts["rtol"], atol=opts["atol"], id=id)

    def compare():
        if opts["check_dtype"] and type(a) is not type(e):
            raise _Mismatch(AssertionError, f"The (d)types do not match: {type(a)} != {type(e)}.", id)
        if a == e or (opts["equal_nan"] and cmath.isnan(a) and cmath.isnan(e)):
            return
        abs_diff = abs(a - e)
        if cmath.isfinite(abs_diff) and abs_diff <= atol + rtol * abs(e):
            return
        raise _Mismatch(AssertionError, _scalar_msg(a, e, rtol, atol), id)

    return compare


def _as_tensor(value):
    if isinstance(value, Tensor):
        return value
    if isinstance(value, np.ndarray):
        if dtypes.supported(value.dtype):
            return _wrap(value)
        if value.dtype.kind in "iu" and value.dtype.itemsize <= 4:  # uint16, uint32: exact in int64
            return _wrap(value.astype(np.int64))
    raise _Unsupported


def _tensor_pair(actual, expected, id, opts):
    if not (isinstance(actual, type(expected)) or isinstance(expected, type(actual))):
        raise _Unsupported
    if not opts["allow_subclasses"] and type(actual) is not type(expected):
        raise _Unsupported
    a, e = _as_tensor(actual), _as_tensor(expected)
    rtol, atol = _tolerances(a.dtype, e.dtype, rtol=opts["rtol"], atol=opts["atol"], id=id)
    return lambda: _compare_tensors(a, e, rtol, atol, id, opts)


def _attribute_error(name, a, e, id):
    return _Mismatch(AssertionError, f"The values for attribute '{name}' do not match: {a} != {e}.", id)


def _compare_tensors(a, e, rtol, atol, id, opts):
    if a.shape != e.shape:
        raise _attribute_error("shape", a.shape, e.shape, id)
    if opts["check_stride"] and a.stride() != e.stride():
        raise _attribute_error("stride()", a.stride(), e.stride(), id)
    if opts["check_device"] and a.device != e.device:
        raise _attribute_error("device", a.device, e.device, id)
    if opts["check_dtype"] and a.dtype != e.dtype:
        raise _attribute_error("dtype", a.dtype, e.dtype, id)
    if "meta" in (a.device.type, e.device.type):  # no values to compare
        return
    from .. import promote_types

    a, e = a.detach(), e.detach()
    if a.device != e.device:
        a, e = a.cpu(), e.cpu()
    if a.dtype != e.dtype:
        common = promote_types(a.dtype, e.dtype)
        a, e = a.to(common), e.to(common)
    exact = a.dtype.kind in "biu" and rtol == 0 and atol == 0  # isclose would go through float64
    matches = (a == e) if exact else a.isclose(e, rtol=rtol, atol=atol, equal_nan=opts["equal_nan"])
    if matches.all().item():
        return
    if a.ndim == 0:
        msg = _scalar_msg(a.item(), e.item(), rtol, atol)
    else:
        msg = _tensor_msg(a, e, matches, rtol, atol)
    raise _Mismatch(AssertionError, msg, id)


def _tensor_msg(a, e, matches, rtol, atol):
    """PyTorch's statistics of a mismatch, computed as PyTorch computes them."""
    from .. import int64, where

    n = matches.numel()
    bad = n - int(matches.sum().item())
    extra = f"Mismatched elements: {bad} / {n} ({bad / n:.1%})"
    a, e, m = a.flatten(), e.flatten(), matches.flatten()
    if a.dtype.kind in "biu":
        a, e = a.to(int64), e.to(int64)
    with np.errstate(all="ignore"):  # inf and nan relative differences are part of the message
        abs_diff = where(m, 0, (a - e).abs())
        max_abs, abs_idx = abs_diff.max(0)
        rel_diff = where(m, 0, abs_diff / e.abs())
        max_rel, rel_idx = rel_diff.max(0)
    shape = tuple(matches.shape)
    return _mismatch_msg("Tensor-likes", extra, max_abs.item(), _unravel(abs_idx.item(), shape), atol,
                         max_rel.item(), _unravel(rel_idx.item(), shape), rtol)


def _unravel(flat, shape):
    return tuple(int(i) for i in np.unravel_index(flat, shape))


_PAIRS = (_none_pair, _bool_pair, _number_pair, _tensor_pair)


def _originate(actual, expected, id, opts):
    """The comparisons of all leaf pairs (see NOTE [assert_close])."""
    seq = collections.abc.Sequence
    if isinstance(actual, seq) and isinstance(expected, seq) and not isinstance(actual, str) \
            and not isinstance(expected, str):
        if len(actual) != len(expected):
            raise _Mismatch(AssertionError, f"The length of the sequences mismatch: {len(actual)} != "
                                            f"{len(expected)}", id)
        return [c for i in range(len(actual)) for c in _originate(actual[i], expected[i], (*id, i), opts)]
    mapping = collections.abc.Mapping
    if isinstance(actual, mapping) and isinstance(expected, mapping):
        keys, other = set(actual.keys()), set(expected.keys())
        if keys != other:
            raise _Mismatch(AssertionError, "The keys of the mappings do not match:\n"
                                            f"Missing keys in the actual mapping: {sorted(other - keys)}\n"
                                            f"Additional keys in the actual mapping: {sorted(keys - other)}", id)
        try:
            keys = sorted(keys)
        except TypeError:  # unorderable keys: any order
            keys = list(keys)
        return [c for k in keys for c in _originate(actual[k], expected[k], (*id, k), opts)]
    for make in _PAIRS:
        try:
            return [make(actual, expected, id, opts)]
        except _Unsupported:
            continue
    raise _Mismatch(TypeError, f"No comparison pair was able to handle inputs of type {type(actual)} and "
                               f"{type(expected)}.", id)


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None, equal_nan=False,
                 check_device=True, check_dtype=True, check_layout=True, check_stride=False, msg=None):
    """Assert that ``actual`` and ``expected`` are close, as ``torch.testing.assert_close``.

    Values are close where ``|actual - expected| <= atol + rtol * |expected|``; infinities
    only where equal, NaNs only with ``equal_nan``. Without ``rtol``/``atol`` (give both or
    neither) the defaults follow the looser dtype: float16 ``1e-3``/``1e-5``, float32
    ``1.3e-6``/``1e-5``, float64 ``1e-7``/``1e-7``, complex as their float parts, integers and
    bool exactly; Python floats count as float64. Sequences and mappings are compared item
    by item (see NOTE [assert_close]).

    Parameters
    ----------
    actual, expected : Tensor, ndarray, number, bool, None, or sequences/mappings of them
        Tensors pair with tensors, NumPy arrays with NumPy arrays.
    allow_subclasses : bool
        False: a pair of leaves must be of one type (a Parameter is not a Tensor then).
    rtol, atol : float, optional
        Relative and absolute tolerance.
    equal_nan : bool
        Count NaN as equal to NaN.
    check_device, check_dtype : bool
        Require equal devices / dtypes (otherwise both move to the CPU / promote first).
    check_layout : bool
        Accepted; Lucid tensors are all strided.
    check_stride : bool
        Also require equal strides.
    msg : str or callable, optional
        The message instead of the generated one, or a function of it.

    Raises
    ------
    AssertionError
        With PyTorch's message: the number and share of mismatched elements and the greatest
        absolute and relative differences with their indices.

    Examples
    --------
    >>> import lucid
    >>> from lucid.testing import assert_close
    >>> assert_close(lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 2.0 + 1e-6]))
    >>> assert_close(lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([1.0, 4.0, 3.0]))
    Traceback (most recent call last):
    ...
    AssertionError: Tensor-likes are not close!
    <BLANKLINE>
    Mismatched elements: 1 / 3 (33.3%)
    Greatest absolute difference: 2.0 at index (1,) (up to 1e-05 allowed)
    Greatest relative difference: 0.5 at index (1,) (up to 1.3e-06 allowed)
    """
    __tracebackhide__ = True
    opts = {"allow_subclasses": allow_subclasses, "rtol": rtol, "atol": atol, "equal_nan": equal_nan,
            "check_device": check_device, "check_dtype": check_dtype, "check_layout": check_layout,
            "check_stride": check_stride}
    try:
        comparisons = _originate(actual, expected, (), opts)
    except _Mismatch as m:
        raise m.to_error() from None
    for compare in comparisons:
        try:
            compare()
        except _Mismatch as m:
            raise m.to_error(msg) from None


# ------------------------------------------------------------------------ make_tensor


def _low_high(low, high, dtype, lowest, highest, default_low, default_high, integral):
    """PyTorch's checks and clamping of ``make_tensor``'s bounds."""
    low = default_low if low is None else low
    high = default_high if high is None else high
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        raise ValueError(f"make_tensor: `low` and `high` cannot be NaN, but got low={low} and high={high}")
    if low == high and not integral:
        warnings.warn("make_tensor: passing `low==high` for floating or complex types is deprecated; use "
                      "`lucid.full(...)` instead", FutureWarning, stacklevel=3)
    elif low >= high:
        raise ValueError(f"make_tensor: `low` must be less than `high`, but got {low} >= {high}")
    elif high < lowest or low >= highest:
        raise ValueError(f"make_tensor: the value interval specified by `low` and `high` is [{low}, {high}), "
                         f"but {dtype} only supports [{lowest}, {highest})")
    low, high = min(max(low, lowest), highest), min(max(high, lowest), highest)
    return (math.ceil(low), math.ceil(high)) if integral else (low, high)


def make_tensor(*shape, dtype, device, low=None, high=None, requires_grad=False, noncontiguous=False,
                exclude_zero=False, memory_format=None):
    """A tensor of ``shape`` with values drawn uniformly from ``[low, high)``, for tests.

    Defaults as PyTorch: bool ``[0, 2)``, unsigned ``[0, 10)``, signed ints ``[-9, 10)``,
    floats and complex (both parts) ``[-9, 9)``; bounds outside the dtype's range are
    clamped to it.

    Parameters
    ----------
    *shape : int, or one sequence of ints
        The shape.
    dtype : dtype
        The dtype.
    device : str or lucid.device
        Where to make it.
    low, high : number, optional
        The interval (``low`` inclusive, ``high`` exclusive).
    requires_grad : bool
        Make the result a leaf that requires grad (floating and complex dtypes only).
    noncontiguous : bool
        Return a non-contiguous view (every other element of a tensor twice as long in the
        last dimension); ignored below 2 elements.
    exclude_zero : bool
        Replace zeros by 1 (bool, ints) or the dtype's smallest normal number (as PyTorch, the
        real part only for complex).
    memory_format : lucid.memory_format, optional
        Return a copy in this layout (e.g. ``lucid.channels_last`` for 4-d shapes); not with
        ``noncontiguous``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.testing import make_tensor
    >>> x = make_tensor(2, 3, dtype=lucid.float64, device="cpu", low=-1, high=1, noncontiguous=True)
    >>> x.shape, x.dtype, x.is_contiguous(), bool(((x >= -1) & (x < 1)).all())
    ((2, 3), lucid.float64, False, True)
    """
    import lucid

    try:
        dt = dtypes._LUCID[np.dtype(dtypes.to_dtype(dtype))] if dtype is not None else None
    except (TypeError, KeyError):
        dt = None
    if dt is None:
        raise TypeError(f"make_tensor: the requested dtype {dtype!r} is not supported")
    if len(shape) == 1 and isinstance(shape[0], collections.abc.Sequence):
        shape = shape[0]
    shape = tuple(int(s) for s in shape)
    if noncontiguous and memory_format is not None:
        raise ValueError("make_tensor: the parameters `noncontiguous` and `memory_format` are mutually exclusive, "
                         f"but got noncontiguous={noncontiguous} and memory_format={memory_format}")
    integral = dt.kind in "biu"
    if requires_grad and integral:
        raise ValueError(f"make_tensor: `requires_grad=True` is not supported for boolean and integral "
                         f"dtypes, but got dtype={dt}")
    noncontiguous = noncontiguous and math.prod(shape) > 1
    if noncontiguous:  # every other element of a twice-as-long last dimension, from offset 1
        shape = (*shape[:-1], 2 * shape[-1])
    if dt.kind == "b":
        low, high = _low_high(low, high, dt, 0, 2, 0, 2, True)
        result = lucid.randint(low, high, shape, dtype=dt, device=device)
    elif integral:
        info = np.iinfo(dt.dtype)
        top = min(int(info.max) + 1, int(np.iinfo(np.int64).max))  # randint's bound is an int64
        low, high = _low_high(low, high, dt, int(info.min), top, -9, 10, True)
        result = lucid.randint(low, high, shape, dtype=dt, device=device)
    else:
        info = dtypes.np_finfo(dt.dtype)
        low, high = _low_high(low, high, dt, float(info.min), float(info.max), -9, 9, False)
        result = lucid.empty(shape, dtype=dt, device=device)
        target = lucid.view_as_real(result) if dt.kind == "c" else result
        if high - low >= float(info.max):  # uniform_ needs a finite width: draw half, then double
            target.uniform_(low / 2, high / 2).mul_(2)
        else:
            target.uniform_(low, high)
    if noncontiguous:
        result = result[..., 1::2]
    elif memory_format is not None:
        result = result.clone(memory_format=memory_format)
    if exclude_zero:
        result[result == 0] = float(dtypes.np_finfo(dt.dtype).tiny) if not integral else 1
    if requires_grad:
        result.requires_grad = True
    return result
