"""Activation functions (functional form).

``softplus`` is a primitive of its own for numerical stability, defined with the
:func:`~lucid.ops._family.unary` family helper; ``sigmoid``, ``erf`` (for the exact GELU),
``softmax`` and ``log_softmax`` are the core primitives. Everything else is a composite.
"""
from __future__ import annotations

import math

import numpy as np

from ..._core.primitive import OpError
from ..._core.tensor import Tensor
from ...ops import elementwise as _elementwise
from ...ops._family import _promote_float, unary
from ._complex import refuse_complex as _refuse_complex
from ._opmath import in_float32 as _in_float32, is_half as _is_half

__all__ = [
    "relu", "relu_", "leaky_relu", "elu", "gelu", "silu", "mish", "tanh", "sigmoid", "softplus",
    "softmax", "log_softmax", "hardtanh", "relu6", "softsign", "logsigmoid", "selu", "celu",
    "hardsigmoid", "hardswish", "tanhshrink", "threshold", "glu", "softmin", "erf",
]

_SQRT2 = math.sqrt(2.0)
_SQRT2PI = math.sqrt(2.0 / math.pi)


def _softplus_impl(x):
    return (np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))).astype(x.dtype, copy=False)


# sigmoid and erf are core elementwise primitives (lucid/ops/elementwise/).
_sigmoid, _erf = _elementwise.sigmoid, _elementwise.erf
# softplus'(x) = sigmoid(x); a primitive so that large |x| neither overflows nor loses precision.
_softplus_prim, _softplus = unary("softplus", _softplus_impl, lambda ns, x, out: ns.sigmoid(x))


def _t(x):
    return x if isinstance(x, Tensor) else _promote_float(x)


def _lucid():
    import lucid

    return lucid


def _apply(name, input, inplace, fn, opmath=True):
    """``fn(input)``; with ``inplace`` its value is written into ``input``, which is returned
    and takes the result's history (See NOTE [In-place semantics] in lucid/ops/inplace.py).
    A float16 ``input`` is computed in float32 and rounded once (NOTE [Half composites]);
    ``opmath=False`` for the exact ones (clamps, selections), whose float16 values are PyTorch's."""
    if opmath and _is_half(input):
        fn = _float32_fn(fn)
    if not inplace:
        return fn(input)
    from ...ops.inplace import _inplace

    if not isinstance(input, Tensor):
        raise TypeError(f"{name}: expected a Tensor to change in place, got {type(input).__name__}")
    return _inplace(name, input, (), fn)


def _float32_fn(fn):
    return lambda x: _in_float32(fn, x)


def _nonpos(x):
    """``min(x, 0)`` whose derivative at exactly 0 is 1 (the negative branch's), as PyTorch's
    ELU family has it; ``minimum`` would split the tie and halve the derivative there. NaN maps
    to 0: the ELU family sends it down the positive branch (``x <= 0`` is false), as PyTorch's
    backward does, so the unused negative branch stays finite."""
    return _lucid().where(x <= 0, x, 0.0)


def erf(input):
    """The error function, elementwise (``lucid.erf`` when the core provides it).

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.erf(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    return _erf(_t(input))


def relu(input, inplace=False):
    """``max(x, 0)``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.relu(lucid.tensor([-1.0, 2.0]))
    tensor([0., 2.])
    """
    return _apply("relu_", input, inplace, _lucid().relu, opmath=False)


def relu_(input):
    """In-place ``relu``: ``input`` is changed and returned.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x = lucid.tensor([-1.0, 2.0])
    >>> F.relu_(x) is x, x.tolist()
    (True, [0.0, 2.0])
    """
    return relu(input, inplace=True)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    """``x`` for ``x > 0`` else ``negative_slope * x``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    negative_slope : float
        Slope for negative inputs (default 0.01).
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.leaky_relu(lucid.tensor([-2.0, 3.0]), 0.5).tolist()
    [-1.0, 3.0]
    """
    return _apply("leaky_relu_", input, inplace,
                  lambda x: _lucid().where(x > 0, x, x * negative_slope), opmath=False)


def elu(input, alpha=1.0, inplace=False):
    """``x`` for ``x > 0`` else ``alpha * (exp(x) - 1)``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    alpha : float
        Scale of the negative branch.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.elu(lucid.tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    def fn(x):
        neg = _lucid().exp(_nonpos(x)) - 1.0  # exp of non-positive values only
        return _lucid().where(x <= 0, alpha * neg, x)  # NaN takes the positive branch: gradient 1

    return _apply("elu_", input, inplace, fn)


def selu(input, inplace=False):
    """Scaled ELU: ``scale * elu(x, alpha)`` with the self-normalising constants.

    Parameters
    ----------
    input : Tensor
        Any shape.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.selu(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    alpha, scale = 1.6732632423543772, 1.0507009873554805
    return _apply("selu_", input, inplace, lambda x: scale * elu(x, alpha))


def celu(input, alpha=1.0, inplace=False):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    alpha : float
        Scale of the negative branch.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.celu(lucid.tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    if alpha == 0:
        raise OpError("celu: alpha cannot be 0 (a division by zero)")
    lucid = _lucid()
    return _apply("celu_", input, inplace,
                  lambda x: lucid.where(x <= 0, alpha * (lucid.exp(_nonpos(x) / alpha) - 1.0), x))


def gelu(input, approximate="none"):
    """Gaussian Error Linear Unit: ``x * Φ(x)`` exactly (via ``erf``) or with the tanh formula.

    Parameters
    ----------
    approximate : {'none', 'tanh'}

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.gelu(lucid.tensor([1.0])).item(), 4)
    0.8413
    """
    x = _t(input)
    if approximate == "none":
        return _apply("gelu", x, False, lambda x: 0.5 * x * (1.0 + erf(x * (1.0 / _SQRT2))))
    if approximate == "tanh":
        return _apply("gelu", x, False,
                      lambda x: 0.5 * x * (1.0 + _lucid().tanh(_SQRT2PI * (x + 0.044715 * x * x * x))))
    raise OpError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def sigmoid(input):
    """``1 / (1 + exp(-x))``, computed without overflow.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.sigmoid(lucid.tensor([0.0])).tolist()
    [0.5]
    """
    return _apply("sigmoid", _t(input), False, _sigmoid)  # lucid.sigmoid rounds twice in float16


def silu(input, inplace=False):
    """``x * sigmoid(x)`` (a.k.a. swish).

    Parameters
    ----------
    input : Tensor
        Any shape.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.silu(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    return _apply("silu_", _t(input), inplace, lambda x: x * sigmoid(x))


def softplus(input, beta=1.0, threshold=20.0):
    """``log(1 + exp(beta x)) / beta``, and ``x`` where ``beta * x > threshold``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    beta : float
        Sharpness.
    threshold : float
        Above ``beta * x > threshold`` the result is ``x``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.softplus(lucid.tensor([30.0])).tolist()
    [30.0]
    """
    def fn(x):
        sp = _softplus(x * beta) / beta if beta != 1 else _softplus(x)
        return _lucid().where(x * beta > threshold, x, sp)

    return _apply("softplus", _t(input), False, fn)


def mish(input, inplace=False):
    """``x * tanh(softplus(x))``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.mish(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    _refuse_complex("mish", input)
    return _apply("mish_", _t(input), inplace, lambda x: x * _lucid().tanh(_softplus(x)))


def tanh(input):
    """Hyperbolic tangent.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.tanh(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    return _lucid().tanh(input)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    """Clamp to ``[min_val, max_val]``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    min_val, max_val : float
        The clamp range.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.hardtanh(lucid.tensor([-3.0, 0.5, 3.0])).tolist()
    [-1.0, 0.5, 1.0]
    """
    if min_val > max_val:
        raise ValueError(f"hardtanh: min_val ({min_val}) cannot be greater than max_val ({max_val})")
    return _apply("hardtanh_", input, inplace, lambda x: _hard_clamp(x, min_val, max_val, nan_passes=True),
                  opmath=False)


def _hard_clamp(x, lo, hi, nan_passes=False):
    """``clamp(x, lo, hi)`` whose derivative is 1 strictly inside ``(lo, hi)`` and 0 at the bounds,
    as PyTorch's hardtanh/relu6/hardsigmoid backward (``clamp`` itself passes it at the bounds).
    At NaN the derivative is 1 with ``nan_passes`` (hardtanh/relu6 test ``x <= lo || x >= hi``
    in PyTorch) and 0 without (hardsigmoid tests ``lo < x < hi``).
    An integer input stays integer, its bounds cast as C does."""
    lucid = _lucid()
    if isinstance(x, Tensor) and x.dtype.kind in "iu":
        if x.dtype.kind == "u" and (lo < 0 or hi < 0):
            raise RuntimeError("hardtanh: cannot do hardtanh on an unsigned type with negative limits")
        return lucid.clamp(x, int(lo), int(hi))
    inside = ~((x <= lo) | (x >= hi)) if nan_passes else (x > lo) & (x < hi)
    return lucid.where(inside, x, lucid.clamp(x, lo, hi).detach())


def relu6(input, inplace=False):
    """``min(max(0, x), 6)``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.relu6(lucid.tensor([-1.0, 3.0, 9.0])).tolist()
    [0.0, 3.0, 6.0]
    """
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input, inplace=False):
    """Piecewise-linear sigmoid ``clamp(x / 6 + 1/2, 0, 1)``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.hardsigmoid(lucid.tensor([-4.0, 0.0, 4.0])).tolist()
    [0.0, 0.5, 1.0]
    """
    return _apply("hardsigmoid_", input, inplace, lambda x: _hard_clamp(x / 6.0 + 0.5, 0.0, 1.0))


def hardswish(input, inplace=False):
    """``x * hardsigmoid(x)``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.hardswish(lucid.tensor([-4.0, 0.0, 4.0])).tolist()
    [-0.0, 0.0, 4.0]
    """
    def fn(x):
        # PyTorch's three branches, so NaN takes the last (gradient 1) as in its backward; the
        # middle one sees only its own inputs (0 elsewhere), so an inf outside adds no 0 * inf
        lucid = _lucid()
        mid = (x > -3.0) & (x < 3.0)
        xm = lucid.where(mid, x, 0.0)
        return lucid.where(x <= -3.0, x * 0.0, lucid.where(mid, xm * (xm + 3.0) / 6.0, x))

    return _apply("hardswish_", input, inplace, fn)


def softsign(input):
    """``x / (1 + |x|)``.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.softsign(lucid.tensor([1.0, -3.0])).tolist()
    [0.5, -0.75]
    """
    return input / (1.0 + _lucid().abs(input))


def logsigmoid(input):
    """``log(sigmoid(x)) = -softplus(-x)``, stable.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> round(F.logsigmoid(lucid.tensor([0.0])).item(), 4)
    -0.6931
    """
    _refuse_complex("logsigmoid", input)
    return _apply("logsigmoid", _t(input), False, lambda x: -_softplus(-x))


def tanhshrink(input):
    """``x - tanh(x)``.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.tanhshrink(lucid.tensor([0.0])).tolist()
    [0.0]
    """
    return input - _lucid().tanh(input)


def threshold(input, threshold, value, inplace=False):
    """``x`` where ``x > threshold``, else ``value``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    threshold : float
        The cut-off.
    value : float
        The replacement below or at the cut-off.
    inplace : bool
        Write the result into ``input`` and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.threshold(lucid.tensor([0.5, 2.0]), 1.0, -1.0).tolist()
    [-1.0, 2.0]
    """
    if isinstance(input, Tensor) and input.dtype.kind in "iu" and isinstance(threshold, float):
        threshold = int(threshold)  # PyTorch converts both numbers to the input's integer type
    if isinstance(input, Tensor) and input.dtype.kind in "iu" and isinstance(value, float):
        value = int(value)
    return _apply("threshold_", input, inplace, lambda x: _lucid().where(x <= threshold, value, x),
                  opmath=False)


def glu(input, dim=-1):
    """Gated linear unit: ``a * sigmoid(b)`` where ``a, b`` are the halves of ``input`` along ``dim``.

    Parameters
    ----------
    input : Tensor
        Any shape. The size along ``dim`` must be even.
    dim : int
        The dimension to split (default -1).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.glu(lucid.tensor([2.0, 0.0])).tolist()
    [1.0]
    """
    _refuse_complex("glu", input)
    if _is_half(input):  # See NOTE [Half composites]
        return _in_float32(glu, input, dim)
    if input.ndim == 0:
        raise RuntimeError("glu: does not support scalars because halving size must be even")
    n = input.shape[dim]
    if n % 2:
        raise RuntimeError(f"glu: halving dimension must be even, but dimension {dim} is size {n}")
    idx = [slice(None)] * input.ndim
    idx[dim] = slice(0, n // 2)
    a = input[tuple(idx)]
    idx[dim] = slice(n // 2, n)
    return a * sigmoid(input[tuple(idx)])


def _softmax_dim(dim, ndim, name):
    if dim is None:
        import warnings

        warnings.warn(f"Implicit dimension choice for {name} has been deprecated. "
                      "Change the call to include dim=X as an argument.", stacklevel=3)
        dim = 0 if ndim in (0, 1, 3) else 1
    return dim


def _max_const(x, dim):
    """The max along ``dim`` as a constant: any constant shift gives the same (log-)softmax,
    and the max keeps ``exp`` from overflowing."""
    if x._level == 0:
        from ..._core.tensor import _wrap

        return _wrap(x._data.max(dim, keepdims=True)) if x._data.size else 0.0
    return _lucid().amax(x, dim, keepdim=True).detach()


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``x - logsumexp(x, dim)`` (``lucid.log_softmax`` when the core provides it).

    Parameters
    ----------
    input : Tensor
        Any shape.
    dim : int
        The dimension that sums to one (in probability space).
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.log_softmax(lucid.tensor([0.0, 0.0]), dim=0).exp()
    tensor([0.5, 0.5])
    """
    lucid = _lucid()
    x = _t(input)
    if dtype is not None:
        x = x.to(dtype)
    dim = _softmax_dim(dim, x.ndim, "log_softmax")
    if _is_half(x):  # See NOTE [Half composites]
        return _in_float32(log_softmax, x, dim)
    if hasattr(lucid, "log_softmax") and lucid.log_softmax is not log_softmax:
        return lucid.log_softmax(x, dim)
    shifted = x - _max_const(x, dim)
    return shifted - lucid.log(lucid.sum(lucid.exp(shifted), dim, keepdim=True))


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    """``exp(x) / sum(exp(x), dim)`` (``lucid.softmax`` when the core provides it).

    Parameters
    ----------
    input : Tensor
        Any shape.
    dim : int
        The dimension that sums to one.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.softmax(lucid.tensor([0.0, 0.0]), dim=0).tolist()
    [0.5, 0.5]
    """
    lucid = _lucid()
    x = _t(input)
    if dtype is not None:
        x = x.to(dtype)
    dim = _softmax_dim(dim, x.ndim, "softmax")
    if _is_half(x):  # See NOTE [Half composites]
        return _in_float32(softmax, x, dim)
    if hasattr(lucid, "softmax") and lucid.softmax is not softmax:
        return lucid.softmax(x, dim)
    e = lucid.exp(x - _max_const(x, dim))
    return e / lucid.sum(e, dim, keepdim=True)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    """``softmax(-input, dim)``.

    Parameters
    ----------
    input : Tensor
        Any shape.
    dim : int
        The dimension that sums to one.
    dtype : dtype, optional
        Cast the input to this dtype first.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.softmin(lucid.tensor([1.0, 1.0]), dim=0).tolist()
    [0.5, 0.5]
    """
    return softmax(-_t(input), dim, dtype=dtype)
