"""The in-place methods on the machinery of ``inplace.py`` (NOTE [In-place semantics]):
arithmetic (``add_``, ``sub_``, ``mul_``, ``div_``, ``pow_``, with the deprecated scalar-first
overloads), unary math (``exp_``, ``sqrt_`` ...), ``relu_``/``clamp_``, ``zero_``/``fill_``/
``copy_``/``masked_fill_`` and the bitwise ones. ``x[idx] = v`` stays beside the machinery.
"""
from __future__ import annotations

import numpy as np

from .._core.backend import xp
from .._core.tensor import Tensor, tensor_method
from ._family import _as_tensor
from .inplace import _inplace, _keep_in_graph


def _binary_direct(ufunc):
    def direct(a, o):
        ufunc(a, o, out=a)

    return direct


def _half_with_number(x, *numbers):
    """A float16 tensor meeting a Python float: NumPy would round the number to float16 first;
    the out-of-place op computes in float32 and rounds once, as PyTorch (NOTE [Half opmath])."""
    if x.dtype != np.float16:  # dtype: tracers too; other dtypes pay this one test
        return False
    from .elementwise.arithmetic import _half_exact  # a number float16 holds keeps the direct path

    return any(n.__class__ is float and not _half_exact(n) for n in numbers)


def _check_alpha(self, other, alpha, op):
    """PyTorch's checks of ``alpha`` against the result dtype (rare alphas only: not a float
    beside a float tensor, the optimizers' ``add_(g, alpha=-lr)``)."""
    from .elementwise.arithmetic import _alpha_result_dtype

    if not isinstance(alpha, Tensor):
        _alpha_result_dtype(self, other, alpha, op)


def _alpha_in(alpha, a):
    """``alpha`` for a product in ``a``'s dtype: an integer alpha wraps into an integer dtype as
    PyTorch's scalar conversion does (``uint8.add_(y, alpha=-1)`` is ``x + 255 * y``), where
    NumPy refuses a Python int out of the dtype's range."""
    if alpha.__class__ is not float and a.dtype.kind in "iu" and isinstance(alpha, (int, np.integer)) \
            and not isinstance(alpha, bool):  # the float test first: an optimizer's add_(g, alpha=-lr)
        return np.array(alpha).astype(a.dtype)[()]  # a host scalar, not array data
    return alpha


@tensor_method("add_", "__iadd__")
def add_(self, other, *rest, alpha=1):
    """In-place ``self += alpha * other``; returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0])
    >>> x.add_(1.0, alpha=2).tolist()
    [3.0, 4.0]
    """
    from .elementwise import add

    if rest:  # See NOTE [Deprecated scalar-first overloads] (elementwise/arithmetic.py)
        from .elementwise.arithmetic import deprecated_scalar_first

        alpha, other = deprecated_scalar_first("add_", other, rest, alpha, 1, "alpha",
                                               "add_(Tensor other, *, Number alpha = 1)"), rest[0]

    def direct(a, o):
        xp.add(a, o if alpha == 1 else xp.multiply(o, _alpha_in(alpha, a)), out=a)

    if (alpha != 1 or alpha.__class__ is bool) and not (
            alpha.__class__ is float and self.__class__ is Tensor and self._data.dtype.kind == "f"):
        _check_alpha(self, other, alpha, "add_")
    if _half_with_number(self, other, alpha):
        direct = None
    elif alpha != 1 and not isinstance(other, (Tensor, bool)):  # a Python product stays exact
        other, alpha = other * alpha, 1
    return _inplace("add_", self, (other,), lambda x, o: add(x, o, alpha=alpha), direct, needs_old=False)


@tensor_method("sub_", "subtract_", "__isub__")
def sub_(self, other, *rest, alpha=1):
    """In-place ``self -= alpha * other``; returns ``self``."""
    from .elementwise import sub
    from .elementwise.arithmetic import _reject_bool_subtraction, deprecated_scalar_first

    if rest:  # See NOTE [Deprecated scalar-first overloads] (elementwise/arithmetic.py)
        alpha, other = deprecated_scalar_first("sub_", other, rest, alpha, 1, "alpha",
                                               "sub_(Tensor other, *, Number alpha = 1)"), rest[0]

    _reject_bool_subtraction(self, other)  # the direct path below would subtract a mask silently

    def direct(a, o):
        xp.subtract(a, o if alpha == 1 else xp.multiply(o, _alpha_in(alpha, a)), out=a)

    if (alpha != 1 or alpha.__class__ is bool) and not (
            alpha.__class__ is float and self.__class__ is Tensor and self._data.dtype.kind == "f"):
        _check_alpha(self, other, alpha, "sub_")
    if _half_with_number(self, other, alpha):
        direct = None
    elif alpha != 1 and not isinstance(other, Tensor):
        other, alpha = other * alpha, 1
    return _inplace("sub_", self, (other,), lambda x, o: sub(x, o, alpha=alpha), direct, needs_old=False)


@tensor_method("mul_", "multiply_", "__imul__")
def mul_(self, other):
    """In-place ``self *= other``; returns ``self``."""
    from .elementwise import mul

    direct = None if _half_with_number(self, other) else _binary_direct(xp.multiply)
    return _inplace("mul_", self, (other,), mul, direct)


@tensor_method("div_", "divide_", "true_divide_", "__itruediv__")
def div_(self, other, *, rounding_mode=None):
    """In-place ``self /= other`` (``rounding_mode`` "floor" / "trunc" as in ``div``)."""
    from .elementwise import div

    direct = _binary_direct(xp.true_divide) if rounding_mode is None and not _half_with_number(self, other) else None
    return _inplace("div_", self, (other,), lambda x, o: div(x, o, rounding_mode=rounding_mode), direct)


@tensor_method("pow_", "__ipow__")
def pow_(self, exponent):
    """In-place ``self **= exponent``."""
    from .elementwise import pow

    # integers go through pow's checks (a negative exponent raises or gives PyTorch's 0/±1)
    direct = _binary_direct(xp.power) if self.dtype.kind in "fc" else None
    return _inplace("pow_", self, (exponent,), pow, direct)


def _unary_inplace(name, ufunc, needs_old=True):
    def method(self):
        import lucid

        fn = getattr(lucid, name[:-1])
        direct = (lambda a: ufunc(a, out=a)) if ufunc is not None else None
        return _inplace(name, self, (), fn, direct, needs_old)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = (f"In-place ``{name[:-1]}``; returns ``self``.\n\nExamples\n--------\n"
                      f">>> import lucid\n>>> lucid.tensor([0.25]).{name}().shape\n(1,)\n")
    setattr(Tensor, name, method)
    return method


neg_ = _unary_inplace("neg_", xp.negative, needs_old=False)
Tensor.negative_ = neg_
exp_ = _unary_inplace("exp_", xp.exp)
log_ = _unary_inplace("log_", xp.log)
sqrt_ = _unary_inplace("sqrt_", xp.sqrt)
sin_ = _unary_inplace("sin_", xp.sin)
cos_ = _unary_inplace("cos_", xp.cos)
tanh_ = _unary_inplace("tanh_", xp.tanh)
_abs_ = _unary_inplace("abs_", xp.abs)


def abs_(self):
    """In-place ``abs``; returns ``self``. Not for complex tensors (|z| is real: PyTorch refuses)
    nor bool ones (no kernel).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([-1.5, 2.0]).abs_().tolist()
    [1.5, 2.0]
    """
    kind = self.dtype.kind
    if kind == "c":
        raise RuntimeError("abs_: In-place abs is not supported for complex tensors.")
    if kind == "b":
        from .elementwise.arithmetic import DtypeNotImplemented

        raise DtypeNotImplemented("abs_: not implemented for 'Bool' tensors")
    return _abs_(self)


Tensor.abs_ = abs_
sigmoid_ = _unary_inplace("sigmoid_", None)


@tensor_method("relu_")
def relu_(self):
    """In-place ReLU; returns ``self``."""
    from .elementwise import relu

    return _inplace("relu_", self, (), relu, lambda a: xp.maximum(a, 0, out=a))


@tensor_method("clamp_", "clip_")
def clamp_(self, min=None, max=None):
    """In-place ``clamp``; bounds may be numbers or tensors."""
    from .elementwise import clamp

    if min is None and max is None:
        raise RuntimeError("clamp_: at least one of 'min' or 'max' must not be None")
    direct = None
    # Only floats clip directly (numbers within float16's range never overflow); an integer
    # tensor's bounds are converted as clamp converts them (uint8: min=-1 is 255).
    if (self.dtype.kind == "f" and not isinstance(min, Tensor) and not isinstance(max, Tensor)
            and all(b is None or (b.__class__ in (int, float) and -65504.0 <= b <= 65504.0) for b in (min, max))):
        def direct(a, lo, hi):
            xp.clip(a, lo, hi, out=a)
    # the bounds are operands: a bound that requires grad puts the change in a graph
    return _inplace("clamp_", self, (min, max), clamp, direct)


@tensor_method("zero_")
def zero_(self):
    """Fill with zeros in place; returns ``self``."""
    from .creation import zeros

    return _inplace("zero_", self, (), lambda x: zeros(tuple(x.shape), dtype=x.dtype, device=x.device),
                    lambda a: a.fill(0), needs_old=False)


def _fitted_int(value, dtype, op):
    """A Python int for an integer tensor, by PyTorch's rule: it must fit, except that an
    unsigned dtype takes negatives down to -max and wraps them (``fill_(-1)`` on uint8 is 255)."""
    info = np.iinfo(np.dtype(dtype))
    if info.min <= value <= info.max:
        return value
    if info.min == 0 and -info.max <= value < 0:
        return value + info.max + 1
    raise RuntimeError(f"{op}: value {value} cannot be converted to type {dtype} without overflow")


def _filled(x, value):
    from .shape import broadcast_to

    if isinstance(value, Tensor):
        v = value if value.dtype == x.dtype else value.to(x.dtype)
        v = broadcast_to(v, tuple(x.shape))
        return _keep_in_graph(x, v) if x._rg else v  # x's old history gets zeros, as in PyTorch
    from .creation import _finish

    return _finish(np.full(tuple(x.shape), value, dtype=x.dtype), False, x.device, "fill_")  # beside x


@tensor_method("fill_")
def fill_(self, value):
    """Fill with ``value`` (a number or a 0-d tensor) in place; returns ``self``."""
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(f"fill_: only supports 0-dimension value tensor but got a tensor of "
                           f"shape {tuple(value.shape)}")
    if isinstance(value, Tensor) and value.device != self.device and value.device.type == "cpu":
        value = value.to(self.device)  # a CPU number fills any device's tensor (broadcast below: move it first)
    if value.__class__ is int and self.dtype.kind in "iu":
        value = _fitted_int(value, self.dtype, "fill_")
    elif isinstance(value, (float, np.floating)) and self.dtype.kind in "iu":
        from .creation import _float_fill_value

        value = _float_fill_value(value, np.dtype(self.dtype), "fill_")

    def direct(a, v):
        a[...] = v

    return _inplace("fill_", self, (value,), _filled, direct, needs_old=False)


@tensor_method("copy_")
def copy_(self, src, non_blocking=False):
    """Copy ``src`` (broadcast, cast to this dtype) into this tensor; returns ``self``.

    Gradients flow to ``src``; the old value of ``self`` gets none.
    """
    from .shape import broadcast_to

    src = _as_tensor(src)

    def fn(x, s):
        s = broadcast_to(s if s.dtype == x.dtype else s.to(x.dtype), tuple(x.shape))
        return _keep_in_graph(x, s) if x._rg else s

    def direct(a, s):
        np.copyto(a, s, casting="unsafe")

    if isinstance(src, Tensor) and src.device != self.device:  # PyTorch copies across devices
        src = src.to(self.device)
    try:
        np.broadcast_shapes(tuple(src.shape), tuple(self.shape))
        ok = np.broadcast_shapes(tuple(src.shape), tuple(self.shape)) == tuple(self.shape)
    except ValueError:
        ok = False
    if not ok:
        raise RuntimeError(f"copy_: the source of shape {tuple(src.shape)} can't be broadcast to "
                           f"the destination's shape {tuple(self.shape)}")
    return _inplace("copy_", self, (src,), fn, direct, needs_old=False)


@tensor_method("masked_fill_")
def masked_fill_(self, mask, value):
    """Set the elements where ``mask`` is True to ``value`` (number or 0-d tensor), in place."""
    from .elementwise import where

    mask = _as_tensor(mask)
    if mask.dtype != np.bool_:
        raise RuntimeError(f"masked_fill_: expected a bool mask, got {mask.dtype}")
    if isinstance(value, Tensor) and value.ndim != 0:
        raise RuntimeError(f"masked_fill_: only supports a 0-dimension value tensor, but got "
                           f"one of shape {tuple(value.shape)}")
    if self.dtype.kind in "iu":  # PyTorch's range check (NumPy's unsafe cast would wrap the number)
        if value.__class__ is int:
            value = _fitted_int(value, self.dtype, "masked_fill_")
        elif isinstance(value, (float, np.floating)):
            from .creation import _float_fill_value

            value = _float_fill_value(value, np.dtype(self.dtype), "masked_fill_")

    def fn(x, m, v):
        v = v.to(x.dtype) if isinstance(v, Tensor) and v.dtype != x.dtype else v
        return where(m, v, x)

    def direct(a, m, v):
        np.copyto(a, v, casting="unsafe", where=m)

    return _inplace("masked_fill_", self, (mask, value), fn, direct, needs_old=False)


def _bitwise(name, ufunc, fn_name):
    def method(self, other):
        import lucid

        return _inplace(name, self, (other,), getattr(lucid, fn_name), _binary_direct(ufunc))

    method.__name__ = name
    return method


Tensor.__iand__ = Tensor.bitwise_and_ = _bitwise("bitwise_and_", xp.bitwise_and, "bitwise_and")
Tensor.__ior__ = Tensor.bitwise_or_ = _bitwise("bitwise_or_", xp.bitwise_or, "bitwise_or")
Tensor.__ixor__ = Tensor.bitwise_xor_ = _bitwise("bitwise_xor_", xp.bitwise_xor, "bitwise_xor")
