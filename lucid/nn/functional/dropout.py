"""Dropout (functional).

The mask comes from lucid's random generator (``lucid.ops.random.dropout_mask``,
seeded by ``lucid.manual_seed``). It is a constant: the output is
``input * mask / (1 - p)``, so gradients flow through the kept entries only. Inside
``vmap`` the mask follows the transform's ``randomness`` setting like every random op.
"""
from __future__ import annotations

__all__ = ["dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]


def _check(p, name):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: dropout probability has to be between 0 and 1, but got {p}")


def _apply_mask(input, mask_shape, p):
    from ...ops.random import dropout_mask

    # The mask is a random op, so vmap's `randomness` rule applies to it (error / same /
    # different), exactly as for lucid.rand.
    return input * dropout_mask(mask_shape, p, input.dtype, device=getattr(input, "device", None))


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    Parameters
    ----------
    input : Tensor
        The activations.
    p : float
        Probability of dropping, in [0, 1].
    training : bool
        Apply dropout only when True.
    inplace : bool
        Write the result into ``input`` and return it.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.dropout(lucid.ones(3), p=0.5, training=False)
    tensor([1., 1., 1.])
    """
    _check(p, "dropout")
    if not training or p == 0.0:
        return input
    return _maybe_inplace("dropout_", input, inplace, lambda x: _apply_mask(x, tuple(x.shape), p))


def _maybe_inplace(name, input, inplace, fn):
    from .activation import _apply

    return _apply(name, input, inplace, fn)


def _feature_dropout(input, p, training, name, nspatial, inplace=False):
    _check(p, name)
    if not training or p == 0.0:
        return input
    if input.ndim < nspatial + 1:
        raise RuntimeError(f"{name}: expected an input with a channel dim, got shape {tuple(input.shape)}")
    shape = tuple(input.shape[:input.ndim - nspatial]) + (1,) * nspatial  # [:-0] would be empty
    return _maybe_inplace(name + "_", input, inplace, lambda x: _apply_mask(x, shape, p))


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, L) / (C, L) inputs.

    Parameters
    ----------
    input : Tensor
        The activations.
    p : float
        Probability of dropping, in [0, 1].
    training : bool
        Apply dropout only when True.
    inplace : bool
        Write the result into ``input`` and return it.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.dropout1d(lucid.ones(1, 2, 3), training=False).shape
    (1, 2, 3)
    """
    return _feature_dropout(input, p, training, "dropout1d", 1, inplace)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, H, W) / (C, H, W) inputs.

    Parameters
    ----------
    input : Tensor
        The activations.
    p : float
        Probability of dropping, in [0, 1].
    training : bool
        Apply dropout only when True.
    inplace : bool
        Write the result into ``input`` and return it.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.dropout2d(lucid.ones(1, 2, 2, 2), training=False).shape
    (1, 2, 2, 2)
    """
    return _feature_dropout(input, p, training, "dropout2d", 2, inplace)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, D, H, W) or (C, D, H, W) inputs with probability ``p``.

    Parameters
    ----------
    input : Tensor
        The activations.
    p : float
        Probability of dropping, in [0, 1].
    training : bool
        Apply dropout only when True.
    inplace : bool
        Write the result into ``input`` and return it.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.dropout3d(lucid.ones(1, 2, 2, 2, 2), training=False).shape
    (1, 2, 2, 2, 2)
    """
    return _feature_dropout(input, p, training, "dropout3d", 3, inplace)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout that keeps the self-normalising property (for SELU networks).

    Parameters
    ----------
    input : Tensor
        The activations.
    p : float
        Probability of dropping, in [0, 1].
    training : bool
        Apply dropout only when True (default False).
    inplace : bool
        Write the result into ``input`` and return it.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.alpha_dropout(lucid.ones(2)).tolist()
    [1.0, 1.0]
    """
    return _alpha(input, p, training, inplace, "alpha_dropout", None)


def _alpha(input, p, training, inplace, name, mask_shape):
    _check(p, name)
    if not training or p == 0.0:
        return input
    if p == 1.0:  # the scale below is 0 ** -0.5: everything is dropped, as PyTorch gives zeros
        return _maybe_inplace(name + "_", input, inplace, lambda x: x * 0.0)
    from ...ops.random import bernoulli_mask

    alpha = -1.7580993408473766
    a = ((1 - p) * (1 + p * alpha ** 2)) ** -0.5
    b = -a * alpha * p

    def fn(x):
        kt = bernoulli_mask(tuple(x.shape) if mask_shape is None else mask_shape, 1.0 - p, x.dtype,
                            device=getattr(x, "device", None))
        return (x * kt + alpha * (1 - kt)) * a + b

    return _maybe_inplace(name + "_", input, inplace, fn)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Alpha dropout of whole channels (dim 1 of a batched input): each channel of each sample
    is kept, or set to SELU's negative saturation value, as a whole.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.feature_alpha_dropout(lucid.ones(1, 2, 3)).tolist()
    [[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]
    """
    if training and p and input.ndim < 2:
        raise RuntimeError(f"feature_alpha_dropout: expected an input with a channel dim, got shape "
                           f"{tuple(input.shape)}")
    shape = tuple(input.shape[:2]) + (1,) * (input.ndim - 2) if input.ndim >= 2 else None
    return _alpha(input, p, training, inplace, "feature_alpha_dropout", shape)
