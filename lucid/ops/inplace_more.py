"""More in-place forms (``scatter_``, ``index_add_``, ``addcmul_``, ``floor_``, ``sin_`` ...).

Each is its out-of-place op run through ``inplace._inplace`` (NOTE [In-place semantics]):
written straight into the tensor with no graph, rebased onto the out-of-place result's node
in a graph, functional under transforms. So version counters, gradients and views behave as
for ``add_``; the out-of-place op supplies all the rules.
"""
from __future__ import annotations

from .._core.tensor import Tensor
from .inplace import _inplace


def _lucid(name):
    import lucid

    return getattr(lucid, name)


def _method(name, fn_name, needs_old=True, doc=None):
    def method(self, *args, **kwargs):
        fn = _lucid(fn_name)
        if not kwargs:
            return _inplace(name, self, args, fn, None, needs_old)
        # keyword values are operands too (``scatter_(0, i, src=w)``): a tensor among them that
        # requires grad must put the change in a graph, so they travel with the positional ones
        n, keys = len(args), tuple(kwargs)
        return _inplace(name, self, args + tuple(kwargs.values()),
                        lambda x, *a: fn(x, *a[:n], **dict(zip(keys, a[n:]))), None, needs_old)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = doc or f"In-place :func:`lucid.{fn_name}`; returns ``self``."
    setattr(Tensor, name, method)
    return method


# Unary: the rounding family, sign, reciprocal, square, trig and hyperbolic.
for _n in ("floor", "ceil", "trunc", "frac", "sign", "reciprocal", "square", "rsqrt", "expm1", "log1p",
           "log2", "log10", "exp2", "tan", "sinh", "cosh", "asin", "acos", "atan", "asinh", "acosh",
           "atanh", "erf", "erfc", "logit", "nan_to_num", "fix"):
    _method(f"{_n}_", _n)
Tensor.arcsin_, Tensor.arccos_, Tensor.arctan_ = Tensor.asin_, Tensor.acos_, Tensor.atan_
Tensor.arcsinh_, Tensor.arccosh_, Tensor.arctanh_ = Tensor.asinh_, Tensor.acosh_, Tensor.atanh_
_method("round_", "round", doc="In-place :func:`lucid.round` (``decimals=`` as a keyword); returns ``self``.")
Tensor.clamp_min_ = lambda self, min: Tensor.clamp_(self, min=min)
Tensor.clamp_max_ = lambda self, max: Tensor.clamp_(self, max=max)

# Binary and ternary arithmetic.
for _n in ("lerp", "addcmul", "addcdiv", "hypot", "atan2", "fmod", "remainder", "copysign", "fmax", "fmin",
           "float_power", "ldexp", "logaddexp", "xlogy", "maximum", "minimum", "heaviside", "nextafter",
           "gcd", "lcm", "bitwise_left_shift", "bitwise_right_shift", "addmm", "addmv", "addr", "addbmm",
           "baddbmm", "renorm"):
    _method(f"{_n}_", _n)
Tensor.arctan2_ = Tensor.atan2_
_float_power_ = Tensor.float_power_


def _float_power_in_place(self, exponent):
    # float_power computes in double: PyTorch refuses to write that into a float32 tensor (the
    # other in-place ops cast their result down)
    if self.dtype.kind in "fc" and self.dtype.itemsize < (16 if self.dtype.kind == "c" else 8):
        want = "ComplexDouble" if self.dtype.kind == "c" else "Double"
        raise RuntimeError(f"float_power_: the base given to float_power_ has dtype {self.dtype} but the "
                           f"operation's result requires dtype {want}")
    return _float_power_(self, exponent)


_float_power_in_place.__name__ = _float_power_in_place.__qualname__ = "float_power_"
_float_power_in_place.__doc__ = _float_power_.__doc__
Tensor.float_power_ = _float_power_in_place
Tensor.__ilshift__ = Tensor.bitwise_left_shift_
Tensor.__irshift__ = Tensor.bitwise_right_shift_

# Indexing and scatter: arguments are (dim, index, ...), keyword options pass through.
for _n in ("scatter", "scatter_add", "scatter_reduce", "index_add", "index_fill", "index_copy", "index_put",
           "masked_scatter", "put"):
    _method(f"{_n}_", _n)

__all__ = []
