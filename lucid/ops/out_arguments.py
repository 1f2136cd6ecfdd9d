"""PyTorch's ``out=`` argument for the top-level functions that take one.

NOTE [Out arguments]
In PyTorch most functions in ``torch``, ``torch.linalg``, ``torch.special`` and ``torch.fft``
take ``out=``: the result is written into an existing tensor (resized, with a warning, if it
had another non-empty shape; its dtype must be one the result casts to) and returned. Such a
call is not differentiable: with grad mode on, an argument that requires grad is an error.
Lucid's ops compute a fresh result; :func:`accept_out` wraps the public functions of a
namespace that PyTorch gives ``out=`` (the name lists below, read off PyTorch 2.13's
signatures) so that ``out=`` computes, checks and copies. Only the names in the ``lucid``
namespaces are wrapped, never the Tensor methods or the functions Lucid's own code calls,
so nothing else pays for it; a function that already takes ``out`` is left as it is.
"""
from __future__ import annotations

import functools
import inspect
import warnings

import numpy as np

TOP_LEVEL = frozenset("""
abs absolute acos acosh add addbmm addcdiv addcmul addmm addmv addr all amax amin aminmax angle
any arange arccos arccosh arcsin arcsinh arctan arctan2 arctanh argmax argmin asin asinh atan
atan2 atanh baddbmm bernoulli bitwise_and bitwise_left_shift bitwise_not bitwise_or
bitwise_right_shift bitwise_xor bmm bucketize cat ceil chain_matmul cholesky cholesky_inverse
cholesky_solve clamp clamp_max clamp_min clip column_stack complex concat concatenate
conj_physical copysign cos cosh cross cummax cummin cumprod cumsum deg2rad diag diff digamma div
divide dot dstack empty eq erf erfc erfinv exp exp2 expm1 eye fix float_power floor floor_divide
fmax fmin fmod frac frexp full gather gcd ge geqrf ger greater greater_equal gt heaviside histc
histogram histogramdd hstack hypot i0 igamma igammac index_add index_copy index_reduce
index_select inner inverse isneginf isposinf kron kthvalue lcm ldexp le lerp less less_equal
lgamma linspace log log10 log1p log2 log_softmax logaddexp logaddexp2 logcumsumexp logical_and
logical_not logical_or logical_xor logit logspace logsumexp lt lu_solve lu_unpack masked_select
matmul matrix_power max maximum mean median min minimum mm mode msort mul multinomial multiply
mv mvlgamma nan_to_num nanmean nanmedian nanquantile nansum narrow_copy ne neg negative
nextafter nonzero norm normal not_equal ones ormqr outer polar polygamma pow prod qr quantile
rad2deg rand randint randn randperm range reciprocal remainder renorm round row_stack rsqrt
searchsorted sgn sigmoid sign signbit sin sinc sinh softmax sort sqrt square stack std std_mean
sub subtract sum svd take take_along_dim tan tanh tensordot topk triangular_solve tril triu
trunc var var_mean vdot vstack where xlogy zeros
""".split())

LINALG = frozenset("""
cholesky cholesky_ex cond cross det eig eigh eigvals eigvalsh householder_product inv inv_ex
ldl_factor ldl_factor_ex ldl_solve lu lu_factor lu_factor_ex lu_solve matmul matrix_norm
matrix_power matrix_rank multi_dot norm pinv qr slogdet solve solve_ex solve_triangular svd
svdvals tensorinv tensorsolve vecdot vector_norm
""".split())

SPECIAL = frozenset("""
airy_ai bessel_j0 bessel_j1 bessel_y0 bessel_y1 chebyshev_polynomial_t chebyshev_polynomial_u
chebyshev_polynomial_v chebyshev_polynomial_w digamma entr erf erfc erfcx erfinv exp2 expit
expm1 gammainc gammaincc gammaln hermite_polynomial_h hermite_polynomial_he i0 i0e i1 i1e
laguerre_polynomial_l legendre_polynomial_p log1p log_ndtr logit logsumexp modified_bessel_i0
modified_bessel_i1 modified_bessel_k0 modified_bessel_k1 multigammaln ndtr ndtri polygamma psi
round scaled_modified_bessel_k0 scaled_modified_bessel_k1 shifted_chebyshev_polynomial_t
shifted_chebyshev_polynomial_u shifted_chebyshev_polynomial_v shifted_chebyshev_polynomial_w
sinc spherical_bessel_j0 xlog1py xlogy zeta
""".split())

FFT = frozenset("""
fft fft2 fftfreq fftn hfft hfft2 hfftn ifft ifft2 ifftn ihfft ihfft2 ihfftn irfft irfft2 irfftn
rfft rfft2 rfftfreq rfftn
""".split())


def _tensors_in(values):
    from .._core.tensor import Tensor

    for v in values:
        if isinstance(v, Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors_in(v)


def _write_out(name, fn, args, kwargs, out):
    from .._core.grad_mode import STATE, no_grad
    from .._core.tensor import Tensor

    outs = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if not all(isinstance(o, Tensor) for o in outs):
        raise TypeError(f"{name}(): argument 'out' must be a Tensor (or a tuple of Tensors), got "
                        f"{type(out).__name__}")
    if STATE.grad_enabled and any(t.requires_grad for t in _tensors_in((args, tuple(kwargs.values()), outs))):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad.")
    with no_grad():
        result = fn(*args, **kwargs)
    results = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if len(results) != len(outs) or not all(isinstance(r, Tensor) for r in results):
        raise TypeError(f"{name}(): out must be {len(results)} tensor(s) for this call, got {len(outs)}")
    for o, r in zip(outs, results):  # every check before any write: a failing call changes nothing
        if o.device != r.device:
            raise RuntimeError(f"{name}(): Expected out tensor to have device {r.device}, but got {o.device} instead")
        if r.dtype != o.dtype and not (np.can_cast(r.dtype, o.dtype, "same_kind")
                                       and not (r.dtype.kind == "c" and o.dtype.kind != "c")):
            raise RuntimeError(f"{name}(): result type {r.dtype} can't be cast to the desired output type {o.dtype}")
    with no_grad():
        for o, r in zip(outs, results):
            resize_out(f"{name}()", o, tuple(r.shape), stacklevel=3)
            o.copy_(r)
    return out


def resize_out(name, out, shape, stacklevel=3):
    """Give ``out`` the result's ``shape`` as PyTorch's ``out=`` does: silently when it is empty,
    with PyTorch's deprecation warning when it held elements."""
    if tuple(out.shape) == shape:
        return
    if out.numel():
        warnings.warn(
            f"{name}: An output with one or more elements was resized since it had shape "
            f"{list(out.shape)}, which does not match the required output shape {list(shape)}. "
            "This behavior is deprecated, and in a future PyTorch release outputs will not be "
            "resized unless they have zero elements. You can explicitly reuse an out tensor t by "
            "resizing it, inplace, to zero elements with t.resize_(0).", UserWarning, stacklevel=stacklevel + 1)
    out.resize_(shape)


_WRAPPED = {}  # id(function) -> (function, its wrapper): aliases (row_stack/vstack, special.expit and
# lucid.sigmoid) stay one object in every namespace


def _wrap(name, fn):
    hit = _WRAPPED.get(id(fn))
    if hit is not None and hit[0] is fn:
        return hit[1]

    @functools.wraps(fn)
    def with_out(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        return _write_out(name, fn, args, kwargs, out)

    _WRAPPED[id(fn)] = (fn, with_out)
    return with_out


def _is_out_wrapper(fn):
    hit = _WRAPPED.get(id(getattr(fn, "__wrapped__", None)))
    return hit is not None and hit[1] is fn


def _takes_out(fn):
    code = getattr(fn, "__code__", None)
    if code is None:
        return True  # a class or builtin: leave it
    return "out" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


def accept_out(namespace, names):
    """Give each function ``namespace[name]`` (a module's globals) PyTorch's ``out=``; see
    NOTE [Out arguments].

    Examples
    --------
    >>> import lucid
    >>> y = lucid.empty(2)
    >>> lucid.add(lucid.tensor([1.0, 2.0]), 1, out=y) is y, y
    (True, tensor([2., 3.]))
    """
    for name in names:
        fn = namespace.get(name)
        # under decorators that keep __wrapped__ (device guards, autocast) the function's own
        # signature says whether it takes out
        if fn is None or not callable(fn) or _is_out_wrapper(fn) or _takes_out(inspect.unwrap(fn)):
            continue
        # errors name the function itself (mul, not the alias multiply it was reached by)
        namespace[name] = _wrap(getattr(fn, "__name__", name), fn)
