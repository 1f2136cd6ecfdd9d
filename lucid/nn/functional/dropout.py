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
    nd = input.ndim
    _check_feature_dims(name, nd, nspatial)
    if not training or p == 0.0:
        return input
    # PyTorch gives an unbatched input a batch dim of 1, except dropout2d, which still reads a
    # 3-D input as (N, C, L) (pytorch/pytorch#77081): ``lead`` is how many dims the mask keeps.
    lead = 2 if nspatial == 2 or nd == nspatial + 2 else 1
    if nd < lead:
        raise RuntimeError(f"{name}: Feature dropout requires at least 2 dimensions in the input")
    shape = tuple(input.shape[:lead]) + (1,) * (nd - lead)
    return _maybe_inplace(name + "_", input, inplace, lambda x: _apply_mask(x, shape, p))


def _check_feature_dims(name, nd, nspatial):
    """PyTorch's checks on the rank: dropout1d refuses, dropout2d/3d warn (and still run)."""
    import warnings

    if nspatial == 1:
        if nd not in (2, 3):
            raise RuntimeError(
                f"dropout1d: Expected 2D or 3D input, but received a {nd}D input. Note that dropout1d exists "
                "to provide channel-wise dropout on inputs with 1 spatial dimension, a channel dimension, "
                "and an optional batch dimension (i.e. 2D or 3D inputs).")
        return
    if nd not in (nspatial + 1, nspatial + 2):
        warnings.warn(
            f"{name}: Received a {nd}-D input to {name}, which is deprecated and will result in an error "
            "in a future release. To retain the behavior and silence this warning, please use dropout "
            f"instead. Note that {name} exists to provide channel-wise dropout on inputs with {nspatial} "
            "spatial dimensions, a channel dimension, and an optional batch dimension (i.e. "
            f"{nspatial + 1}D or {nspatial + 2}D inputs).", stacklevel=4)
    if nspatial == 2 and nd == 3:
        warnings.warn(
            "dropout2d: Received a 3D input to dropout2d and assuming that channel-wise 1D dropout behavior "
            "is desired - input is interpreted as shape (N, C, L), where C is the channel dim. This behavior "
            "will change in a future release to interpret the input as one without a batch dimension, i.e. "
            "shape (C, H, W). To maintain the 1D channel-wise dropout behavior, please switch to using "
            "dropout1d instead.", stacklevel=4)


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
    """Zero whole channels of (N, C, H, W) inputs.

    As in PyTorch, a 3-D input is read as (N, C, L) (with a warning: PyTorch plans to read it
    as an unbatched (C, H, W) one), and other ranks warn and drop along dims 0 and 1.

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
