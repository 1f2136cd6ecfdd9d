"""Complex-specific ops: ``complex``, ``polar``, ``real``, ``imag``, ``conj``, ``angle``,
``view_as_real``, ``view_as_complex``, ``is_complex``, ``isreal``, ``is_conj`` ...

NOTE [Complex gradients]
Lucid follows PyTorch's convention exactly. For a real loss ``L`` of a complex tensor
``z``, ``z.grad = dL/d(re z) + i dL/d(im z)`` (twice the conjugate Wirtinger derivative
``dL/d conj(z)``); a cotangent ``g`` flowing into an op is that quantity for the op's
output. Consequences every rule obeys:

* the vjp of a holomorphic ``f`` is ``g * conj(f'(x))`` (``mul``: ``g * conj(y)``,
  ``matmul``: ``g @ y^H``), while its jvp stays ``t * f'(x)``. The family helpers apply
  the ``conj`` centrally (NOTE [Holomorphic vjp] in ``_family.py``), so an op defined by
  its derivative gets it right for free;
* non-holomorphic ops (``abs``, ``angle``, ``real``, ``imag``, ``conj``) have rules of
  their own, written from the real partial derivatives;
* a real tensor that flows into a complex op receives a real gradient: the vjp of every
  real -> complex step (a cast, ``complex(re, im)``, ``rfft``) takes the real part;
* ``backward()`` with no gradient needs a *real* scalar (a complex loss has no gradient).

``real``/``imag``/``view_as_real``/``view_as_complex`` return views sharing memory (and the
version counter) with their input, as in PyTorch; ``conj`` returns a new tensor (PyTorch's
lazy conjugate bit is not copied, so ``is_conj`` is always False).
"""
from __future__ import annotations

import numpy as np

from .._core import dtypes
from .._core.backend import namespace_of, xp
from .._core.primitive import AN, REGISTRY, autocast_composite, bind, defprim
from .._core.tensor import Tensor, tensor_method
from . import elementwise as _elementwise, reduce as _reduce, special as _special  # noqa: F401  (the prims guarded below)
from ._family import _as_tensor, batch_elementwise, move_bdim

_REAL_OF = {np.dtype(np.complex64): np.dtype(np.float32), np.dtype(np.complex128): np.dtype(np.float64)}
_COMPLEX_OF = {np.dtype(np.float32): np.dtype(np.complex64), np.dtype(np.float64): np.dtype(np.complex128),
               np.dtype(np.float16): np.dtype(np.complex64)}


def _need_complex(name, x):
    if x.dtype.kind != "c":
        raise RuntimeError(f"{name}: expected a complex tensor, got dtype {x.dtype} (shape {tuple(x.shape)})")


# ------------------------------------------------------------------- complex(re, im)


def _complex_impl(re, im):
    out = namespace_of(re, im).empty(np.broadcast_shapes(np.shape(re), np.shape(im)),
                                     _COMPLEX_OF[np.result_type(re, im)])
    out.real = re
    out.imag = im
    return out


def _complex_jvp(ns, primals, tangents, out):
    tr, ti = tangents
    tr = ns.zeros_like(ns.real(out)) if tr is None else tr
    ti = ns.zeros_like(ns.real(out)) if ti is None else ti
    return ns.complex(tr, ti)


def _sum_back(ns, g, like):
    from ._family import sum_to_shape

    return sum_to_shape(ns, g, tuple(like.shape))


complex_p = defprim(
    "complex", _complex_impl,
    # A real leaf gets a real gradient: the real and imaginary parts of g. See NOTE [Complex gradients]
    vjp=(lambda ns, g, out, re, im: _sum_back(ns, ns.real(g), re),
         lambda ns, g, out, re, im: _sum_back(ns, ns.imag(g), im)),
    jvp=_complex_jvp, save_inputs=False,
)
complex_p.batch = batch_elementwise(complex_p)


def complex(real, imag):
    """The complex tensor ``real + i * imag`` (both floating, of one dtype; they broadcast).

    Parameters
    ----------
    real, imag : Tensor
        float32 inputs give complex64, float64 give complex128.

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import lucid
    >>> lucid.complex(lucid.tensor([1.0]), lucid.tensor([2.0]))
    tensor([1.+2.j], dtype=lucid.complex64)
    """
    real, imag = _as_tensor(real), _as_tensor(imag)
    if real.dtype != imag.dtype or real.dtype.kind != "f" or real.dtype == np.float16:
        raise RuntimeError(
            f"complex: expected both inputs to be float32 or float64 tensors of one dtype, "
            f"got real {real.dtype} and imag {imag.dtype}"
        )
    return bind(complex_p, (real, imag), {})


@autocast_composite("polar")  # NOTE [Autocast]
def polar(abs, angle):
    """The complex tensor ``abs * (cos(angle) + i sin(angle))``.

    Examples
    --------
    >>> import lucid, math
    >>> lucid.polar(lucid.tensor([2.0]), lucid.tensor([math.pi / 2])).imag
    tensor([2.])
    """
    from .elementwise import cos, sin

    abs, angle = _as_tensor(abs), _as_tensor(angle)
    if abs.dtype != angle.dtype or abs.dtype.kind != "f":
        raise RuntimeError(
            f"polar: expected abs and angle to be floating tensors of one dtype, got {abs.dtype} and {angle.dtype}"
        )
    return complex(abs * cos(angle), abs * sin(angle))


# ------------------------------------------------------------------- real / imag


def _real_impl(x):
    return x.real


def _imag_impl(x):
    return x.imag


real_p = defprim(
    "real", _real_impl,
    # L depends on re z only: grad = g + 0i.
    vjp=(lambda ns, g, out, x: ns.complex(g, ns.zeros_like(g)),),
    jvp=lambda ns, primals, tangents, out: ns.real(tangents[0]),
    save_inputs=None, is_view=True,
)
real_p.batch = batch_elementwise(real_p)

imag_p = defprim(
    "imag", _imag_impl,
    # L depends on im z only: grad = 0 + i g.
    vjp=(lambda ns, g, out, x: ns.complex(ns.zeros_like(g), g),),
    jvp=lambda ns, primals, tangents, out: ns.imag(tangents[0]),
    save_inputs=None, is_view=True,
)
imag_p.batch = batch_elementwise(imag_p)


def real(input):
    """The real part, as a view that writes through (a real tensor is returned as is).

    Examples
    --------
    >>> import lucid
    >>> z = lucid.tensor([1 + 2j])
    >>> lucid.real(z)
    tensor([1.])
    """
    input = _as_tensor(input)
    if input.dtype.kind != "c":
        return input
    return bind(real_p, (input,), {})


def imag(input):
    """The imaginary part, as a view that writes through (complex tensors only, as in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> lucid.imag(lucid.tensor([1 + 2j]))
    tensor([2.])
    """
    input = _as_tensor(input)
    if input.dtype.kind != "c":
        raise RuntimeError(f"imag: imag is not implemented for tensors with non-complex dtypes (got {input.dtype})")
    return bind(imag_p, (input,), {})


def _set_part(part):
    def setter(self, value):
        view = real(self) if part == "real" else imag(self)
        view.copy_(value)

    return setter


Tensor.real = property(real, _set_part("real"), doc="The real part (a view that writes through).")
Tensor.imag = property(imag, _set_part("imag"), doc="The imaginary part (a view; complex tensors only).")


# ------------------------------------------------------------------- conj


conj_p = defprim(
    "conj", xp.conjugate,
    vjp=(lambda ns, g, out, x: ns.conj(g),),
    jvp=lambda ns, primals, tangents, out: ns.conj(tangents[0]),
    save_inputs=None,
)
conj_p.batch = batch_elementwise(conj_p)


@tensor_method("conj", "conj_physical")
def conj(input):
    """The complex conjugate (a new tensor; a real tensor is returned as is).

    Lucid keeps no lazy conjugate bit: ``conj`` and ``conj_physical`` both compute the
    conjugate, ``is_conj`` is always False and ``resolve_conj`` returns its input.

    Examples
    --------
    >>> import lucid
    >>> lucid.conj(lucid.tensor([1 + 2j]))
    tensor([1.-2.j], dtype=lucid.complex64)
    """
    input = _as_tensor(input)
    if input.dtype.kind != "c":
        return input
    return bind(conj_p, (input,), {})


conj_physical = conj


@tensor_method("resolve_conj", "resolve_neg")
def resolve_conj(input):
    """``input`` itself: Lucid has no lazy conjugate bit (see :func:`conj`).

    Examples
    --------
    >>> import lucid
    >>> z = lucid.tensor([1j])
    >>> lucid.resolve_conj(z) is z
    True
    """
    return input


@tensor_method("is_conj")
def is_conj(input):
    """Always False: ``conj`` materializes the conjugate (see :func:`conj`).

    Examples
    --------
    >>> import lucid
    >>> lucid.is_conj(lucid.tensor([1j]).conj())
    False
    """
    return False


# ------------------------------------------------------------------- angle


def _angle_vjp(ns, g, out, x):
    # theta = atan2(y, x): d/dx = -y/r^2, d/dy = x/r^2, so grad = g * (i z) / |z|^2; 0 at z = 0.
    r2 = ns.real(x) * ns.real(x) + ns.imag(x) * ns.imag(x)
    safe = ns.where(r2 == 0, 1.0, r2)
    w = ns.where(r2 == 0, 0.0, g / safe)
    return ns.complex(-ns.imag(x) * w, ns.real(x) * w)


def _angle_jvp(ns, primals, tangents, out):
    x, t = primals[0], tangents[0]
    r2 = ns.real(x) * ns.real(x) + ns.imag(x) * ns.imag(x)
    num = ns.real(x) * ns.imag(t) - ns.imag(x) * ns.real(t)  # Im(conj(z) t)
    return ns.where(r2 == 0, 0.0, num / ns.where(r2 == 0, 1.0, r2))


angle_p = defprim("angle", xp.angle, vjp=(_angle_vjp,), jvp=_angle_jvp)
angle_p.batch = batch_elementwise(angle_p)


@tensor_method("angle")
def angle(input):
    """The argument ``atan2(imag, real)`` of each element, in radians (real result).

    Real inputs give 0 or pi (and a zero gradient), as in PyTorch; the gradient at 0 is 0.

    Examples
    --------
    >>> import lucid
    >>> lucid.angle(lucid.tensor([1j]))
    tensor([1.5707964])
    """
    input = _as_tensor(input)
    if input.dtype.kind != "c":
        from .elementwise import where

        if input.dtype.kind != "f":
            input = input.to(dtypes.get_default_dtype())
        # nan stays nan and +-inf gives 0 or pi (inf * 0 would be nan); input * 0 keeps the graph
        # with a zero gradient and the result in input's dtype
        return where(input < 0, np.pi, where(input >= 0, 0.0, input * 0))
    return bind(angle_p, (input,), {})


# ------------------------------------------------------------- view_as_real / _complex


def _view_as_real_impl(x):
    return x[..., None].view(_REAL_OF[x.dtype])


def _view_as_complex_impl(x):
    if x.strides[-1] != x.itemsize:
        x = xp.ascontiguousarray(x)
    return x.view(_COMPLEX_OF[x.dtype])[..., 0]


def _last_axis_batch(prim):
    def rule(vals, bdims):
        v, b = vals[0], bdims[0]
        if b == v.ndim - 1 or b == -1:  # the batch dim must not be the (2,)/last dim
            v = move_bdim(v, b, 0)
            b = 0
        return bind(prim, (v,), {}), b % v.ndim if b < 0 else b

    return rule


view_as_real_p = defprim(
    "view_as_real", _view_as_real_impl,
    vjp=(lambda ns, g, out, x: ns.view_as_complex(g),),
    jvp=lambda ns, primals, tangents, out: ns.view_as_real(tangents[0]),
    save_inputs=None, is_view=True,
)
view_as_complex_p = defprim(
    "view_as_complex", _view_as_complex_impl,
    vjp=(lambda ns, g, out, x: ns.view_as_real(g),),
    jvp=lambda ns, primals, tangents, out: ns.view_as_complex(tangents[0]),
    save_inputs=None, is_view=True,
)


def _view_as_real_batch(vals, bdims):
    v, b = vals[0], bdims[0]
    b = b % v.ndim
    return bind(view_as_real_p, (v,), {}), b


view_as_real_p.batch = _view_as_real_batch
view_as_complex_p.batch = _last_axis_batch(view_as_complex_p)


def view_as_real(input):
    """A real view of a complex tensor with a trailing dimension of size 2 (real, imag).

    Examples
    --------
    >>> import lucid
    >>> lucid.view_as_real(lucid.tensor([1 + 2j]))
    tensor([[1., 2.]])
    """
    input = _as_tensor(input)
    _need_complex("view_as_real", input)
    return bind(view_as_real_p, (input,), {})


@autocast_composite("view_as_complex")  # NOTE [Autocast]
def view_as_complex(input):
    """A complex view of a float32/float64 tensor whose last dimension has size 2 and stride 1.

    Examples
    --------
    >>> import lucid
    >>> lucid.view_as_complex(lucid.tensor([[1.0, 2.0]]))
    tensor([1.+2.j], dtype=lucid.complex64)
    """
    input = _as_tensor(input)
    if input.dtype not in (np.float32, np.float64):
        raise RuntimeError(f"view_as_complex: expected a float32 or float64 tensor, got {input.dtype}")
    if input.ndim == 0 or input.shape[-1] != 2:
        raise RuntimeError(f"view_as_complex: the last dimension must have size 2, got shape {tuple(input.shape)}")
    if not hasattr(input, "_trace") and input.stride(-1) != 1:  # a view, as PyTorch's; not a silent copy
        # (a transform's tracer has no strides of its own: its rules may pass any layout)
        raise RuntimeError(f"view_as_complex: Tensor must have a last dimension with stride 1, got strides "
                           f"{input.stride()} (shape {tuple(input.shape)}); call .contiguous() first")
    return bind(view_as_complex_p, (input,), {})


@autocast_composite("vdot")  # NOTE [Autocast]
def vdot(input, other):
    """``sum(conj(input) * other)`` of two 1-D tensors (the first argument conjugated).

    Examples
    --------
    >>> import lucid
    >>> lucid.vdot(lucid.tensor([1j]), lucid.tensor([1j]))
    tensor(1.+0.j, dtype=lucid.complex64)
    """
    input, other = _as_tensor(input), _as_tensor(other)
    if input.ndim != 1 or other.ndim != 1 or input.shape != other.shape:
        raise RuntimeError(f"vdot: expected two 1-D tensors of one size, got shapes {tuple(input.shape)} "
                           f"and {tuple(other.shape)}")
    if input.dtype.kind == "b" or other.dtype.kind == "b":  # no bool kernel in PyTorch either
        raise NotImplementedError("vdot: not implemented for bool tensors (as in PyTorch); cast them first")
    prod = conj(input) * other
    # small ints keep their dtype, as PyTorch's dot kernels (sum alone would widen to int64)
    return prod.sum(dtype=prod.dtype) if prod.dtype.kind in "iu" else prod.sum()


# ------------------------------------------------------------------- predicates


def is_complex(input):
    """Whether ``input`` has a complex dtype.

    Examples
    --------
    >>> import lucid
    >>> lucid.is_complex(lucid.tensor([1j])), lucid.is_complex(lucid.tensor([1.0]))
    (True, False)
    """
    return _as_tensor(input).dtype.kind == "c"


@tensor_method("isreal")
def isreal(input):
    """Elementwise: whether the imaginary part is 0 (every element of a real tensor is real).

    Examples
    --------
    >>> import lucid
    >>> lucid.isreal(lucid.tensor([1 + 0j, 1j]))
    tensor([ True, False])
    """
    input = _as_tensor(input)
    if input.dtype.kind != "c":
        from .creation import ones

        return ones(*input.shape, dtype=dtypes.bool_, device=input.device)
    return imag(input).detach() == 0


@tensor_method("sgn")
def sgn(input):
    """``input / |input|`` for complex input (0 where it is 0), ``sign`` for real input.

    Examples
    --------
    >>> import lucid
    >>> lucid.sgn(lucid.tensor([3 + 4j, 0j]))
    tensor([0.6+0.8j, 0. +0.j ], dtype=lucid.complex64)
    """
    from .elementwise import abs, sign, where

    input = _as_tensor(input)
    if input.dtype.kind != "c":
        return sign(input)
    a = abs(input)
    zero = a == 0
    # the outer where makes the derivative 0 at 0 (PyTorch's value), not that of input / 1
    return where(zero, 0.0, input / where(zero, 1.0, a))


# ------------------------------------------------------------- ops that need an order

# NOTE [No order on complex numbers]
# Ordering comparisons, max/min, sort and the rounding family have no meaning for complex
# numbers; PyTorch raises where NumPy would silently order lexicographically. The impls of
# these primitives are wrapped once here, so every entry point (function, method, operator,
# reduction) raises a TypeError naming the op, the shapes and the dtypes (NOTE [Errors name
# the op]) before anything is computed.
_ORDERED = ("lt", "le", "gt", "ge", "maximum", "minimum", "clamp", "amax", "amin", "argmax",
            "argmin", "argsort", "cumarg", "relu", "floor", "ceil", "trunc", "round", "frac",
            "floor_divide", "remainder", "fmod", "sign", "atan2", "hypot", "logaddexp", "logaddexp2",
            "pool_argmax")  # max pooling picks each window's largest element
# Real functions PyTorch does not implement for complex inputs either.
_REAL_FUNCTIONS = ("softmax", "log_softmax", "softplus", "cross_entropy", "erf", "erfc", "erfcx", "erfinv",
                   "lgamma", "digamma", "polygamma", "i0", "i0e", "i1", "i1e", "ndtri", "log_ndtr", "zeta",
                   "entr", "xlogy", "xlog1py", "bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
                   "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0",
                   "scaled_modified_bessel_k1", "spherical_bessel_j0")


class ComplexNotSupportedError(NotImplementedError, TypeError):
    """An op with no complex meaning met a complex tensor.

    PyTorch raises NotImplementedError (a RuntimeError) or RuntimeError here; Lucid raised
    TypeError before, so the class derives from both and old ``except TypeError`` callers still work.
    """


def _real_only(prim, why):
    impl = prim.impl

    def checked(*args, **params):
        for a in args:
            if getattr(a, "dtype", None) is not None and a.dtype.kind == "c":
                raise ComplexNotSupportedError(f"not supported for complex tensors ({why})")
        return impl(*args, **params)

    prim.impl = checked
    setattr(AN, prim.name, checked)


for _name in _ORDERED:
    if _name in REGISTRY:
        _real_only(REGISTRY[_name], "complex numbers have no order; compare .abs() or .real instead")
for _name in _REAL_FUNCTIONS:
    if _name in REGISTRY:
        _real_only(REGISTRY[_name], "a function of real arguments, as in PyTorch")


__all__ = ["complex", "polar", "sgn", "vdot", "real", "imag", "conj", "conj_physical", "resolve_conj", "is_conj",
           "angle", "view_as_real", "view_as_complex", "is_complex", "isreal"]
