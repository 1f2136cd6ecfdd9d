"""More activations: the in-place ``*_`` forms, ``prelu``, ``rrelu``, the shrink functions and
``gumbel_softmax`` and ``native_channel_shuffle``. All are composites of existing primitives.

The in-place forms change their input and extend its autograd history through the in-place
machinery of ``lucid/ops/inplace.py`` (See NOTE [In-place semantics]).
"""
from __future__ import annotations

from ..._core.primitive import OpError, autocast_composite
from ..._core.tensor import Tensor
from .activation import _apply, _lucid, celu, elu, hardtanh, leaky_relu, selu, softmax, threshold

__all__ = [
    "elu_", "leaky_relu_", "hardtanh_", "selu_", "celu_", "threshold_", "rrelu", "rrelu_",
    "prelu", "hardshrink", "softshrink", "gumbel_softmax", "native_channel_shuffle",
]


_threshold = threshold


def elu_(input, alpha=1.0):
    """In-place :func:`elu`; returns ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x = lucid.tensor([0.0, 2.0]); F.elu_(x) is x
    True
    """
    return elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    """In-place :func:`leaky_relu`; returns ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.leaky_relu_(lucid.tensor([-2.0, 3.0]), 0.5).tolist()
    [-1.0, 3.0]
    """
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    """In-place :func:`hardtanh`; returns ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.hardtanh_(lucid.tensor([-3.0, 0.5])).tolist()
    [-1.0, 0.5]
    """
    return hardtanh(input, min_val, max_val, inplace=True)


def selu_(input):
    """In-place :func:`selu`; returns ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.selu_(lucid.tensor([0.0, -50.0])).tolist()
    [0.0, -1.7580993175506592]
    """
    return selu(input, inplace=True)


def celu_(input, alpha=1.0):
    """In-place :func:`celu`; returns ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.celu_(lucid.tensor([0.0, 2.0])).tolist()
    [0.0, 2.0]
    """
    return celu(input, alpha, inplace=True)


def threshold_(input, threshold, value):
    """In-place :func:`threshold`; returns ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.threshold_(lucid.tensor([0.5, 2.0]), 1.0, -1.0).tolist()
    [-1.0, 2.0]
    """
    return _threshold(input, threshold, value, inplace=True)


def rrelu(input, lower=1.0 / 8, upper=1.0 / 3, training=False, inplace=False):
    """Randomized leaky ReLU: negative inputs are scaled by a slope drawn uniformly from
    ``[lower, upper]`` per element in training, by ``(lower + upper) / 2`` otherwise.

    Parameters
    ----------
    input : Tensor
        Any shape, floating point.
    lower, upper : float
        The slope's range.
    training : bool
        Draw random slopes (uses the global generator; under ``vmap`` follows its
        ``randomness`` setting).
    inplace : bool
        Write the result into ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.rrelu(lucid.tensor([-24.0, 1.0]), 0.125, 0.125).tolist()
    [-3.0, 1.0]
    """
    if lower > upper:
        raise OpError(f"rrelu: lower bound {lower} must be <= upper bound {upper}")
    lucid = _lucid()

    def fn(x):
        if training:
            slope = lucid.rand(*x.shape, dtype=x.dtype, device=x.device) * (upper - lower) + lower
        else:
            slope = (lower + upper) / 2.0
        # x > 0, as PyTorch: at 0 the gradient is the slope (its kernels' subgradient)
        return lucid.where(x > 0, x, x * slope)

    return _apply("rrelu_", input, inplace, fn)


def rrelu_(input, lower=1.0 / 8, upper=1.0 / 3, training=False):
    """In-place :func:`rrelu`; returns ``input``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.rrelu_(lucid.tensor([-8.0, 1.0]), 0.25, 0.25).tolist()
    [-2.0, 1.0]
    """
    return rrelu(input, lower, upper, training, inplace=True)


@autocast_composite("prelu")  # NOTE [Autocast]: lower precision, as PyTorch's
def prelu(input, weight):
    """``x`` for ``x > 0`` else ``weight * x``; ``weight`` has one element or one per channel
    (dim 1; an input of fewer than 2 dims has one channel, as in PyTorch).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.prelu(lucid.tensor([[-2.0, -2.0]]), lucid.tensor([0.5, 0.25])).tolist()
    [[-1.0, -0.5]]
    """
    if not isinstance(weight, Tensor) or weight.ndim > 1:
        raise RuntimeError(f"prelu: weight must be a 0-d or 1-d tensor, got "
                           f"{getattr(weight, 'shape', type(weight).__name__)}")
    n = weight.numel()
    if input.ndim == 0 and n != 1:
        raise RuntimeError(f"prelu: a 0-d input needs a single weight, got {n}")
    if n != 1:
        # PyTorch: the channels are dim 1; an input of fewer dims has one channel
        if input.ndim < 2 or input.shape[1] != n:
            raise RuntimeError(f"prelu: mismatch of parameter numbers and input channel size: "
                               f"{n} weights for input of shape {tuple(input.shape)}")
        shape = [1] * input.ndim
        shape[1] = n
        weight = weight.reshape(tuple(shape))
    elif weight.ndim == 1 and input.ndim == 0:
        weight = weight.reshape(())
    # x > 0, as PyTorch: at 0 the input's gradient is the weight (its kernel's subgradient)
    return _lucid().where(input > 0, input, weight * input)


def hardshrink(input, lambd=0.5):
    """``x`` where ``|x| > lambd``, else 0.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.hardshrink(lucid.tensor([-1.0, 0.2, 0.75])).tolist()
    [-1.0, 0.0, 0.75]
    """
    # the zero band is tested, not its complement, so nan stays nan (as PyTorch)
    return _lucid().where((input >= -lambd) & (input <= lambd), 0.0, input)


def softshrink(input, lambd=0.5):
    """``x - lambd`` above ``lambd``, ``x + lambd`` below ``-lambd``, else 0.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.softshrink(lucid.tensor([-1.0, 0.2, 1.5])).tolist()
    [-0.5, 0.0, 1.0]
    """
    if lambd < 0:
        raise RuntimeError(f"softshrink: lambda must be greater or equal to 0, but found to be {lambd}")
    lucid = _lucid()
    # the band is tested (input * 0 there keeps -0.0 signed), so nan takes the outer branch: nan, with
    # gradient 1, as PyTorch
    band = (input >= -lambd) & (input <= lambd)
    return lucid.where(band, input * 0, lucid.where(input > lambd, input - lambd, input + lambd))


def gumbel_softmax(logits, tau=1.0, hard=False, eps=1e-10, dim=-1):
    """Sample from the Gumbel-softmax (concrete) distribution over ``dim``.

    ``softmax((logits + g) / tau)`` with Gumbel noise ``g = -log(Exp(1))``; with ``hard`` the
    result is the one-hot of its argmax in the forward and the soft sample's gradient in the
    backward (straight-through).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> _ = lucid.manual_seed(0)
    >>> y = F.gumbel_softmax(lucid.zeros(2, 3), hard=True)
    >>> y.sum(-1).tolist()
    [1.0, 1.0]
    """
    lucid = _lucid()
    u = lucid.rand(*logits.shape, dtype=logits.dtype, device=logits.device)
    # -log(Exp(1)) with Exp(1) = -log(U), U in (0, 1): clamped away from 0 (log(0)).
    gumbels = -lucid.log(-lucid.log(lucid.clamp(u, min=max(eps, 1e-30))))
    y = softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y
    idx = y.argmax(dim, keepdim=True)
    y_hard = lucid.zeros_like(y).scatter(dim, idx, 1.0)
    return y_hard - y.detach() + y


def native_channel_shuffle(input, groups):
    """PyTorch's "native kernel" spelling of :func:`channel_shuffle`: split the C channels (dim
    1) of a (N, C, *) input into ``groups`` groups and interleave them, ``(N, g, C/g, *) ->
    (N, C/g, g, *)``. The same composite (a reshape and a transpose), so it is differentiable.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.native_channel_shuffle(lucid.arange(4.0).reshape(1, 4, 1), 2).reshape(-1).tolist()
    [0.0, 2.0, 1.0, 3.0]
    """
    from .vision import channel_shuffle

    g = int(groups)
    if input.ndim <= 2:
        raise RuntimeError(f"native_channel_shuffle: expects input with > 2 dims, but got input with sizes "
                           f"{list(input.shape)}")
    if g <= 0:
        raise RuntimeError(f"native_channel_shuffle: number of groups to divide channels in must be positive, "
                           f"got {g}")
    if input.shape[1] % g:
        raise RuntimeError(f"native_channel_shuffle: number of channels must be divisible by groups. Got "
                           f"{input.shape[1]} channels and {g} groups.")
    return channel_shuffle(input, g)
