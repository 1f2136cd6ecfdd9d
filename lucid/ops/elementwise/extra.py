"""More arithmetic (issue 10): the ``add*`` fused forms, copysign, fmax/fmin, float_power,
ldexp, heaviside, trapezoid rules, distances, renorm; integer ops gcd/lcm, shifts, nextafter,
frexp; ``divmod`` and the shift operators.

Differentiable ops here are composites of existing primitives. The integer and bit-level ops
(gcd, lcm, shifts) are primitives without gradient (``nondiff``: zero tangent, elementwise
batching); nextafter and frexp are primitives with PyTorch's gradients (1 for nextafter's
input, ``grad / 2 ** exponent`` for frexp's mantissa).
"""
from __future__ import annotations

import collections

from ..._core import dtypes
from ..._core.backend import xp
from ..._core.primitive import autocast_composite, bind, defprim
from ..._core.tensor import Tensor, _wrap, tensor_method
from .._family import _as_tensor, batch_elementwise, binary, nondiff, normalize_axis
from ._half import F16, F32
from .arithmetic import DtypeNotImplemented, _floatify, _is_half, _zero, cast, promote
from ..numpy_aliases import REQUIRED, numpy_axis


def _t(x):
    return _as_tensor(x)


def _pair(a, b):
    """Both operands as Tensors, a constant made on the other's device."""
    return _as_tensor(a, like=b), _as_tensor(b, like=a)


def _integral_scalars(op, input, prod, beta, alpha):
    """``beta``/``alpha`` in the dtype of integral operands, so the result keeps that dtype as
    PyTorch's (which truncates float scalars to int, or refuses them for addr)."""
    if input.dtype.kind not in "biu" or prod.dtype.kind not in "biu":
        return beta, alpha
    if op == "addr":
        for name, v in (("beta", beta), ("alpha", alpha)):
            if isinstance(v, (float, complex)):
                raise RuntimeError(f"addr: For integral input tensors, argument {name} must not be a "
                                   "floating point number.")
    if isinstance(beta, complex) or isinstance(alpha, complex):
        raise RuntimeError(f"{op}: value cannot be converted to type {input.dtype} without overflow")
    conv = bool if input.dtype.kind == "b" and prod.dtype.kind == "b" else int
    return conv(beta), conv(alpha)


def _scaled(beta, input, alpha, prod, op=""):
    """``beta * input + alpha * prod``; ``beta == 0`` ignores ``input`` (NaN/inf included), as PyTorch."""
    import numpy as np

    if not (alpha == 1 and beta == 1):
        beta, alpha = _integral_scalars(op, _t(input), prod, beta, alpha)
    prod = prod if alpha == 1 else prod * alpha
    if beta == 0:  # input is ignored entirely (its NaN and inf too), but its shape still broadcasts
        shape = np.broadcast_shapes(tuple(_t(input).shape), tuple(prod.shape))
        return prod if tuple(prod.shape) == shape else prod.expand(*shape)
    return (input if beta == 1 else input * beta) + prod


@tensor_method("addmm")
@autocast_composite("addmm")  # NOTE [Autocast]: one lower-precision op, as PyTorch's
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat1 @ mat2)``.

    Examples
    --------
    >>> import lucid
    >>> lucid.addmm(lucid.ones(2, 2), lucid.eye(2), lucid.eye(2), alpha=2).tolist()
    [[3.0, 1.0], [1.0, 3.0]]
    """
    if _t(mat1).ndim != 2 or _t(mat2).ndim != 2:
        raise RuntimeError(f"addmm: mat1 and mat2 must be matrices, got shapes {tuple(_t(mat1).shape)} "
                           f"and {tuple(_t(mat2).shape)}")
    return _scaled(beta, input, alpha, _t(mat1) @ _t(mat2), "addmm")


@tensor_method("addmv")
@autocast_composite("addmv")  # NOTE [Autocast]
def addmv(input, mat, vec, *, beta=1, alpha=1):
    """``beta * input + alpha * (mat @ vec)``."""
    if _t(mat).ndim != 2 or _t(vec).ndim != 1:
        raise RuntimeError(f"addmv: expected a matrix and a vector, got shapes {tuple(_t(mat).shape)} "
                           f"and {tuple(_t(vec).shape)}")
    return _scaled(beta, input, alpha, _t(mat) @ _t(vec), "addmv")


@tensor_method("addr")
@autocast_composite("addr")  # NOTE [Autocast]
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    """``beta * input + alpha * outer(vec1, vec2)``."""
    v1, v2 = _t(vec1), _t(vec2)
    if v1.ndim != 1 or v2.ndim != 1:
        raise RuntimeError(f"addr: expected vectors, got shapes {tuple(v1.shape)} and {tuple(v2.shape)}")
    return _scaled(beta, input, alpha, v1[:, None] * v2[None, :], "addr")


def _check_batches(op, b1, b2):
    if b1.ndim != 3 or b2.ndim != 3 or b1.shape[0] != b2.shape[0]:
        raise RuntimeError(f"{op}: expected 3-d batches of matrices with equal batch sizes, got shapes "
                           f"{tuple(b1.shape)} and {tuple(b2.shape)}")


@tensor_method("baddbmm")
@autocast_composite("baddbmm")  # NOTE [Autocast]: one lower-precision op, as PyTorch's
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * (batch1 @ batch2)`` for batches of matrices."""
    b1, b2 = _t(batch1), _t(batch2)
    _check_batches("baddbmm", b1, b2)
    return _scaled(beta, input, alpha, b1 @ b2, "baddbmm")


@tensor_method("addbmm")
@autocast_composite("addbmm")  # NOTE [Autocast]: one lower-precision op, as PyTorch's
def addbmm(input, batch1, batch2, *, beta=1, alpha=1):
    """``beta * input + alpha * sum_b(batch1[b] @ batch2[b])``."""
    b1, b2 = _t(batch1), _t(batch2)
    _check_batches("addbmm", b1, b2)
    prods = b1 @ b2
    # PyTorch accumulates the batch into the operands' dtype (int32 stays int32; sum would widen)
    total = prods.sum(0, dtype=prods.dtype) if prods.dtype.kind in "iu" else prods.sum(0)
    return _scaled(beta, input, alpha, total, "addbmm")


@tensor_method("addcmul")
def addcmul(input, tensor1, tensor2=None, *rest, value=1):
    """``input + value * tensor1 * tensor2``.

    Examples
    --------
    >>> import lucid
    >>> lucid.addcmul(lucid.ones(2), lucid.tensor([1.0, 2.0]), lucid.tensor([3.0, 4.0]), value=0.5).tolist()
    [2.5, 5.0]
    """
    if rest or tensor2 is None:
        tensor1, tensor2, value = _deprecated_value("addcmul", tensor1, tensor2, rest, value)
    if _all_half(input, tensor1, tensor2):  # float32 inside, one rounding (NOTE [Half primitives])
        return cast(addcmul(*(cast(v, F32) for v in (input, tensor1, tensor2)), value=value), F16)
    prod = _t(tensor1) * tensor2
    if prod.dtype.kind == "b" and _t(input).dtype.kind == "b":  # PyTorch has no bool kernel (b * b is `and`)
        raise DtypeNotImplemented("addcmul: not implemented for 'Bool' tensors")
    if value.__class__ is float and prod.dtype.kind in "biu" and _t(input).dtype.kind in "biu":
        value = int(value)  # PyTorch converts value to the integer result type, truncating
    return input + (prod if value == 1 else prod * value)


def _deprecated_value(op, first, second, rest, value):
    """``(tensor1, tensor2, value)`` of PyTorch's deprecated ``op(input, value, tensor1, tensor2)``
    (NOTE [Deprecated scalar-first overloads])."""
    if second is None:
        raise TypeError(f"{op}() missing required argument 'tensor2' (pos 3)")
    from .arithmetic import deprecated_scalar_first

    value = deprecated_scalar_first(op, first, (second,) + rest, value, 2, "value",
                                    f"{op}(Tensor tensor1, Tensor tensor2, *, Number value = 1)")
    return second, rest[0], value


@tensor_method("addcdiv")
def addcdiv(input, tensor1, tensor2=None, *rest, value=1):
    """``input + value * tensor1 / tensor2`` (integer inputs are refused, as in PyTorch)."""
    if rest or tensor2 is None:
        tensor1, tensor2, value = _deprecated_value("addcdiv", tensor1, tensor2, rest, value)
    t1, t2 = _t(tensor1), _t(tensor2)
    if t1.dtype.kind in "biu" and t2.dtype.kind in "biu":
        raise RuntimeError("addcdiv: integer division of tensors is not supported; use floating point "
                           "tensor1/tensor2")
    if _all_half(input, t1, t2):  # See NOTE [Half primitives]
        return cast(addcdiv(*(cast(v, F32) for v in (input, t1, t2)), value=value), F16)
    q = t1 / t2
    return input + (q if value == 1 else q * value)


def _all_half(*tensors):
    return all(_is_half(t) for t in tensors)


@tensor_method("positive")
def positive(input):
    """``input`` itself (unary plus); an error for bool tensors, as in PyTorch."""
    input = _t(input)
    if input.dtype == dtypes.bool_:
        raise DtypeNotImplemented("positive: the unary + operator does not support bool tensors")
    return input


Tensor.__pos__ = positive


def rsub(input, other, *, alpha=1):
    """``other - alpha * input``.

    Examples
    --------
    >>> import lucid
    >>> lucid.rsub(lucid.tensor([1.0, 2.0]), 5.0).tolist()
    [4.0, 3.0]
    """
    return other - (input if alpha == 1 else input * alpha)


def _signbit(x):
    # the sign bit itself: -0.0 and -nan count as negative, as C's copysign reads them
    import lucid

    return lucid.signbit(x)


@tensor_method("copysign")
def copysign(input, other):
    """``|input|`` with the sign of ``other`` (the sign bit: ``-0.0`` counts as negative).

    Examples
    --------
    >>> import lucid
    >>> lucid.copysign(lucid.tensor([1.0, -2.0, 3.0]), lucid.tensor([-1.0, 1.0, -0.0])).tolist()
    [-1.0, 2.0, -3.0]
    """
    import lucid

    a, b = _pair(*_floatify(input, other))
    out = lucid.where(_signbit(b), -a.abs(), a.abs())
    if b.requires_grad:
        # PyTorch's gradient for ``other`` is zeros, not None: a where that never picks ``b``
        # gives it one and keeps ``out`` bit for bit (adding 0 would turn -0.0 into 0.0)
        out = lucid.where(lucid.zeros((), dtype=lucid.bool, device=out.device), b, out)
    return out


def _nan_aware(name, pick):
    def fn(input, other):
        import lucid

        a, b = _pair(*promote(input, other))
        if a.dtype.kind not in "fc":
            return pick(a, b)
        return lucid.where(b.isnan(), a, lucid.where(a.isnan(), b, pick(a, b)))

    fn.__name__ = fn.__qualname__ = name
    return fn


def _fmax_pick(a, b):
    import lucid

    # a tie goes to input, value and gradient (PyTorch's fmax; maximum splits a tie's gradient)
    return lucid.where(a >= b, a, b)


def _fmin_pick(a, b):
    import lucid

    return lucid.where(a <= b, a, b)


fmax = tensor_method("fmax")(_nan_aware("fmax", _fmax_pick))
fmin = tensor_method("fmin")(_nan_aware("fmin", _fmin_pick))
fmax.__doc__ = """Elementwise maximum that ignores NaN (NaN only where both are NaN).

    Examples
    --------
    >>> import lucid
    >>> lucid.fmax(lucid.tensor([1.0, float("nan")]), lucid.tensor([float("nan"), 2.0])).tolist()
    [1.0, 2.0]
    """
fmin.__doc__ = "Elementwise minimum that ignores NaN (NaN only where both are NaN)."


@tensor_method("float_power")
def float_power(input, exponent):
    """``input ** exponent`` computed in double precision (complex128 for complex operands).

    Examples
    --------
    >>> import lucid
    >>> lucid.float_power(lucid.tensor([2]), 3).dtype
    lucid.float64
    """
    import lucid

    dt = lucid.complex128 if any(getattr(v, "dtype", None) is not None and v.dtype.kind == "c"
                                 or isinstance(v, complex) for v in (input, exponent)) else lucid.float64
    a = _t(input).to(dt)
    b = exponent.to(dt) if isinstance(exponent, Tensor) else exponent
    return a ** b


@tensor_method("ldexp")
def ldexp(input, other):
    """``input * 2 ** other`` (floating result).

    Examples
    --------
    >>> import lucid
    >>> lucid.ldexp(lucid.tensor([1.0]), lucid.tensor([3])).tolist()
    [8.0]
    """
    import lucid

    a, b = _t(input), _t(other)
    dt = dtypes.result_type(a, b)  # PyTorch: the promoted type, the default float for integers
    dt = dt if dtypes.is_differentiable(dt) else dtypes.to_dtype(dtypes.get_default_dtype())
    return a.to(dt) * lucid.exp2(b.to(dt))


@tensor_method("heaviside")
def heaviside(input, values):
    """The step function: 0 for ``input < 0``, ``values`` at 0, 1 for ``input > 0``.

    Examples
    --------
    >>> import lucid
    >>> lucid.heaviside(lucid.tensor([-1.0, 0.0, 2.0]), lucid.tensor(0.5)).tolist()
    [0.0, 0.5, 1.0]
    """
    import lucid

    x, v = _t(input), _t(values)
    if x.dtype != v.dtype:
        raise RuntimeError(f"heaviside: input ({x.dtype}) and values ({v.dtype}) must have the same dtype")
    return lucid.where(x == 0, v, (x > 0).to(x.dtype))


# ------------------------------------------------------------------ integer and bit-level ops


def _int_binary(name, impl, doc, kinds="iu", dunder=(), prim=None):
    prim = prim or nondiff(name, impl)

    def fn(input, other):
        a, b = promote(input, other)
        ref = a if isinstance(a, Tensor) else b
        if ref.dtype.kind not in kinds:
            raise DtypeNotImplemented(f"{name}: expected {'floating point' if kinds == 'f' else 'integer'} tensors, "
                                      f"got {ref.dtype}")
        return bind(prim, (a, b), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    for d in (name,) + tuple(dunder):
        setattr(Tensor, d, fn)
    return prim, fn


gcd_p, gcd = _int_binary("gcd", xp.gcd, """Elementwise greatest common divisor of integer tensors.

    Examples
    --------
    >>> import lucid
    >>> lucid.gcd(lucid.tensor([12, 7]), lucid.tensor([18, 0])).tolist()
    [6, 7]
    """)
lcm_p, lcm = _int_binary("lcm", xp.lcm, "Elementwise least common multiple of integer tensors.")
shl_p, bitwise_left_shift = _int_binary("bitwise_left_shift", xp.left_shift, """``input << other`` elementwise.

    Examples
    --------
    >>> import lucid
    >>> (lucid.tensor([1, 2]) << 2).tolist()
    [4, 8]
    """, dunder=("__lshift__",))
shr_p, bitwise_right_shift = _int_binary("bitwise_right_shift", xp.right_shift,
                                         "``input >> other`` elementwise (arithmetic shift).",
                                         dunder=("__rshift__",))
Tensor.__rlshift__ = lambda self, other: bitwise_left_shift(other, self)
Tensor.__rrshift__ = lambda self, other: bitwise_right_shift(other, self)
nextafter_p, nextafter = _int_binary("nextafter", xp.nextafter, """The next floating point value after ``input`` towards ``other``.

    The gradient is 1 for ``input`` (0 where it equals ``other``) and 0 for ``other``, as PyTorch's.

    Examples
    --------
    >>> import lucid
    >>> lucid.nextafter(lucid.tensor([1.0]), lucid.tensor([2.0])).item() > 1.0
    True
    """, kinds="f", prim=binary("nextafter", xp.nextafter, lambda ns, x, y, o: x != y, _zero))


_Frexp = collections.namedtuple("frexp", ["mantissa", "exponent"])


def _frexp_impl(x):
    m, e = xp.frexp(x)
    return m, e.astype(xp.int32)


def _frexp_vjp(ns, g, out, x):
    # PyTorch: the mantissa is x / 2**exponent, the exponent is piecewise constant
    gm = g[0]
    return None if gm is None else gm / ns.exp2(ns.cast(out[1], dtype=gm.dtype))


def _frexp_jvp(ns, primals, tangents, out):
    t = tangents[0]
    return (None if t is None else t / ns.exp2(ns.cast(out[1], dtype=t.dtype))), None


frexp_p = defprim("frexp", _frexp_impl, vjp=(_frexp_vjp,), jvp=_frexp_jvp, nout=2, save_inputs=False,
                  save_out=True)
frexp_p.batch = batch_elementwise(frexp_p)


@tensor_method("frexp")
def frexp(input):
    """``(mantissa, exponent)`` with ``input = mantissa * 2 ** exponent`` (exponent int32).

    Examples
    --------
    >>> import lucid
    >>> m, e = lucid.frexp(lucid.tensor([8.0]))
    >>> m.tolist(), e.tolist()
    ([0.5], [4])
    """
    x = _t(input)
    if x.dtype.kind != "f":
        raise DtypeNotImplemented(f"frexp: expected a floating point tensor, got {x.dtype}")
    m, e = bind(frexp_p, (x,), {})
    return _Frexp(m, e)


def _divmod(self, other):
    import lucid

    return lucid.floor_divide(self, other), lucid.remainder(self, other)


def _rdivmod(self, other):
    import lucid

    return lucid.floor_divide(other, self), lucid.remainder(other, self)


Tensor.__divmod__ = _divmod
Tensor.__rdivmod__ = _rdivmod


# ------------------------------------------------------------------ integrals and distances


def _dim_slices(d, nd):
    pre = (slice(None),) * d
    return pre + (slice(1, None),), pre + (slice(None, -1),)


def trapezoid(y, x=None, *, dx=None, dim=-1, axis=None):
    """Integral of ``y`` along ``dim`` by the trapezoid rule (spacing ``dx`` or sample points ``x``).

    Integer ``y`` and ``x`` are integrated in the default float dtype, so the answer is exact
    where PyTorch's integer sums and steps wrap around (uint8 ``250 + 200``).

    Examples
    --------
    >>> import lucid
    >>> lucid.trapezoid(lucid.tensor([1.0, 2.0, 3.0])).item()
    4.0
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("trapezoid", dim, axis, -1)
    return _trapz("trapezoid", y, x, dx, dim, cumulative=False)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1, axis=None):
    """Running trapezoid-rule integral of ``y`` along ``dim`` (one element shorter).

    Examples
    --------
    >>> import lucid
    >>> lucid.cumulative_trapezoid(lucid.tensor([1.0, 2.0, 3.0])).tolist()
    [1.5, 4.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cumulative_trapezoid", dim, axis, -1)
    return _trapz("cumulative_trapezoid", y, x, dx, dim, cumulative=True)


def gradient(input, *, spacing=1, dim=None, edge_order=1, axis=None):
    """Derivatives of sampled values by central differences, one tensor per ``dim``, as
    ``torch.gradient`` / ``numpy.gradient``.

    Second-order accurate inside (also for uneven sample points); the two ends take one-sided
    differences of order ``edge_order`` (1 or 2). Built from slices and arithmetic, so it is
    differentiable and batches under ``vmap``.

    Parameters
    ----------
    input : Tensor
        The samples.
    spacing : number, sequence of numbers, or sequence of 1-D tensors, optional
        One step for every dim, a step per dim, or the sample coordinates along each dim
        (default, or None: 1).
    dim : int or sequence of int, optional
        The dims to differentiate along (default: all).
    edge_order : int
        1 or 2.

    Examples
    --------
    >>> import lucid
    >>> lucid.gradient(lucid.tensor([1.0, 4.0, 9.0, 16.0]))[0].tolist()
    [3.0, 4.0, 6.0, 7.0]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("gradient", dim, axis, None)
    op = "gradient"
    y = _t(input)
    if y.dtype.kind in "biu":
        y = y.to(dtypes.get_default_dtype())
    if edge_order not in (1, 2):
        raise RuntimeError(f"{op}: only edge_order=1 and edge_order=2 are supported, got {edge_order}")
    dims = tuple(range(y.ndim)) if dim is None else ((dim,) if isinstance(dim, int) else tuple(dim))
    dims = tuple(normalize_axis(d, y.ndim, op) for d in dims)
    if len(set(dims)) != len(dims):
        raise RuntimeError(f"{op}: dim {next(d for d in dims if dims.count(d) > 1)} appears multiple times "
                           "in the list of dims")
    if spacing is None:  # PyTorch's signature default: unit steps
        spacing = 1
    if isinstance(spacing, (list, tuple)):
        if len(spacing) != len(dims):
            raise RuntimeError(f"{op}: expected spacing to be unspecified, a scalar or a list of length "
                               f"{len(dims)} (one per dim), got a list of length {len(spacing)}")
        steps = list(spacing)
    else:
        steps = [spacing] * len(dims)
    outs = []
    for d, h in zip(dims, steps):
        n = y.shape[d]
        if n < edge_order + 1:
            raise RuntimeError(f"{op}: expected each dimension size to be at least edge_order+1, "
                               f"got size {n} at dim {d} with edge_order={edge_order}")
        outs.append(_gradient_along(y, d, h, edge_order, op))
    return tuple(outs)


def _gradient_along(y, d, h, edge_order, op):
    import lucid

    n, nd = y.shape[d], y.ndim

    def take(start, stop):
        return y.narrow(d, start, stop - start)

    if isinstance(h, Tensor) and h.ndim == 1:  # sample coordinates: uneven steps
        if h.shape[0] != n:
            raise RuntimeError(f"{op}: the coordinates along dim {d} have {h.shape[0]} entries for {n} samples")
        shape = [1] * nd
        shape[d] = n - 1
        dx = (h[1:] - h[:-1]).to(y.dtype).reshape(shape)
        a, b = dx.narrow(d, 0, n - 2), dx.narrow(d, 1, n - 2)  # left and right steps of each interior point
        inner = (a * a * take(2, n) - b * b * take(0, n - 2) + (b * b - a * a) * take(1, n - 1)) / (a * b * (a + b))
        h0, h1 = dx.narrow(d, 0, 1), dx.narrow(d, n - 2, 1)
        if edge_order == 1 or n < 3:
            first = (take(1, 2) - take(0, 1)) / h0
            last = (take(n - 1, n) - take(n - 2, n - 1)) / h1
        else:
            g0, g1 = dx.narrow(d, 1, 1), dx.narrow(d, n - 3, 1)
            first = (-(2 * h0 + g0) / (h0 * (h0 + g0)) * take(0, 1) + (h0 + g0) / (h0 * g0) * take(1, 2)
                     - h0 / (g0 * (h0 + g0)) * take(2, 3))
            last = (h1 / (g1 * (g1 + h1)) * take(n - 3, n - 2) - (g1 + h1) / (g1 * h1) * take(n - 2, n - 1)
                    + (2 * h1 + g1) / (h1 * (g1 + h1)) * take(n - 1, n))
    else:
        if isinstance(h, Tensor):
            h = h.item()
        inner = (take(2, n) - take(0, n - 2)) / (2.0 * h)
        if edge_order == 1 or n < 3:
            first = (take(1, 2) - take(0, 1)) / h
            last = (take(n - 1, n) - take(n - 2, n - 1)) / h
        else:
            first = (-1.5 * take(0, 1) + 2.0 * take(1, 2) - 0.5 * take(2, 3)) / h
            last = (0.5 * take(n - 3, n - 2) - 2.0 * take(n - 2, n - 1) + 1.5 * take(n - 1, n)) / h
    return lucid.cat([first, inner, last], dim=d) if n > 2 else lucid.cat([first, last], dim=d)


def _trapz(op, y, x, dx, dim, cumulative):
    y = _t(y)
    if y.dtype.kind in "biu":
        y = y.to(dtypes.get_default_dtype())
    if x is not None and dx is not None:
        raise RuntimeError(f"{op}: pass x or dx, not both")
    d = normalize_axis(dim, y.ndim, op)
    hi, lo = _dim_slices(d, y.ndim)
    avg = (y[hi] + y[lo]) * 0.5
    if x is not None:
        x = _t(x)
        if x.dtype.kind in "biu":  # exact steps: an integer x - x' wraps around (uint8 3 - 200 is 59)
            x = x.to(y.dtype)
        if x.ndim == 1:
            shape = [1] * y.ndim
            shape[d] = x.shape[0]
            x = x.reshape(shape)
        xh, xl = _dim_slices(d if x.ndim == y.ndim else normalize_axis(dim, x.ndim, op), x.ndim)
        area = avg * (x[xh] - x[xl])
    else:
        area = avg * (1.0 if dx is None else dx)
    return area.cumsum(d) if cumulative else area.sum(d)


@tensor_method("dist")
@autocast_composite("dist")  # NOTE [Autocast]
def dist(input, other, p=2):
    """The ``p``-norm of ``input - other`` (broadcast), a 0-d tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.dist(lucid.tensor([0.0, 0.0]), lucid.tensor([3.0, 4.0])).item()
    5.0
    """
    import lucid

    return lucid.linalg.vector_norm(_t(input) - other, p)


@autocast_composite("cdist")  # NOTE [Autocast]
def cdist(x1, x2, p=2.0, compute_mode=None):
    """Pairwise ``p``-norm distances between the rows of ``x1`` (..., P, M) and ``x2`` (..., R, M).

    Examples
    --------
    >>> import lucid
    >>> lucid.cdist(lucid.tensor([[0.0, 0.0]]), lucid.tensor([[3.0, 4.0], [0.0, 1.0]])).tolist()
    [[5.0, 1.0]]
    """
    import lucid

    a, b = _t(x1), _t(x2)
    if a.dtype.kind == "c" or b.dtype.kind == "c":  # PyTorch: "cdist only supports floating-point dtypes"
        raise TypeError(f"cdist: complex inputs are not supported, as in PyTorch (got {a.dtype} and {b.dtype})")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"cdist: expected (..., P, M) and (..., R, M) tensors, got shapes "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
    return lucid.linalg.vector_norm(a[..., :, None, :] - b[..., None, :, :], p, dim=-1)


@autocast_composite("pdist")  # NOTE [Autocast]
def pdist(input, p=2):
    """Distances between all pairs of rows of an (N, M) tensor, upper triangle in row order."""
    from ...nn import functional as F

    return F.pdist(input, p)


def cosine_similarity(x1, x2, dim=1, eps=1e-08, *, axis=None):
    """Cosine of the angle between ``x1`` and ``x2`` along ``dim`` (as ``nn.functional``)."""
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cosine_similarity", dim, axis, 1)
    from ...nn import functional as F

    return F.cosine_similarity(x1, x2, dim=dim, eps=eps)


@tensor_method("renorm")
@autocast_composite("renorm")  # NOTE [Autocast]
def renorm(input, p, dim=REQUIRED, maxnorm=REQUIRED, *, axis=None):
    """Rescale each slice along ``dim`` whose ``p``-norm exceeds ``maxnorm`` to norm ``maxnorm``.

    Examples
    --------
    >>> import lucid
    >>> lucid.renorm(lucid.tensor([[3.0, 4.0], [0.3, 0.4]]), 2, 0, 1.0).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.30000001192092896, 0.4000000059604645]]
    """
    if axis is not None or dim is REQUIRED or maxnorm is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("renorm", dim, axis, REQUIRED, maxnorm=maxnorm)
    import lucid

    x = _t(input)
    if x.ndim < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {x.ndim} dimensions")
    if not p > 0:
        raise RuntimeError(f"renorm: non-positive-norm not supported (got p={p})")
    if not maxnorm >= 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")
    d = normalize_axis(dim, x.ndim, "renorm")
    others = tuple(i for i in range(x.ndim) if i != d)
    norms = lucid.linalg.vector_norm(x, p, dim=others, keepdim=True) if others else x.abs()
    factor = lucid.where(norms > maxnorm, maxnorm / (norms + 1e-7), lucid.ones_like(norms))
    return x * factor


__all__ = ["addbmm", "addcdiv", "addcmul", "addmm", "addmv", "addr", "baddbmm", "bitwise_left_shift",
           "bitwise_right_shift", "cdist", "copysign", "cosine_similarity", "cumulative_trapezoid", "dist",
           "float_power", "fmax", "fmin", "frexp", "gcd", "gradient", "heaviside", "lcm", "ldexp", "nextafter", "pdist",
           "positive", "renorm", "rsub", "trapezoid"]
