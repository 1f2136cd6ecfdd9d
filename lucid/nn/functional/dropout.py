"""Dropout (functional).

The mask is drawn from lucid's random generator (``lucid.rand``, seeded by
``lucid.manual_seed``) when it exists, else from NumPy's global generator. It is a
constant: the output is ``input * mask / (1 - p)``, so gradients flow through the kept
entries only. Inside ``vmap`` the mask is shared by all examples (like
``randomness='same'``).
"""
from __future__ import annotations

import numpy as np

__all__ = ["dropout", "dropout1d", "dropout2d", "alpha_dropout", "feature_alpha_dropout"]


def _uniform(shape, dtype):
    import lucid

    if hasattr(lucid, "rand"):
        return lucid.rand(*shape)._data if shape else lucid.rand(1)._data.reshape(())
    return np.random.random_sample(shape)


def _check(p, name):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"{name}: dropout probability has to be between 0 and 1, but got {p}")


def _apply_mask(input, mask_shape, p):
    import lucid

    if p == 1.0:
        return input * 0.0
    keep = (_uniform(mask_shape, input.dtype) >= p).astype(input.dtype)
    return input * lucid.tensor(keep * (1.0 / (1.0 - p)), dtype=input.dtype)


def dropout(input, p=0.5, training=True, inplace=False):
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.dropout(lucid.ones(3), p=0.5, training=False)
    tensor([1., 1., 1.])
    """
    _check(p, "dropout")
    if not training or p == 0.0:
        return input
    return _apply_mask(input, tuple(input.shape), p)


def _feature_dropout(input, p, training, name, nspatial):
    _check(p, name)
    if not training or p == 0.0:
        return input
    if input.ndim < nspatial + 1:
        raise RuntimeError(f"{name}: expected an input with a channel dim, got shape {tuple(input.shape)}")
    shape = tuple(input.shape[:-nspatial]) + (1,) * nspatial
    return _apply_mask(input, shape, p)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, L) / (C, L) inputs."""
    return _feature_dropout(input, p, training, "dropout1d", 1)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zero whole channels of (N, C, H, W) / (C, H, W) inputs."""
    return _feature_dropout(input, p, training, "dropout2d", 2)


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout that keeps the self-normalising property (for SELU networks)."""
    _check(p, "alpha_dropout")
    if not training or p == 0.0:
        return input
    import lucid

    alpha = -1.7580993408473766
    keep = _uniform(tuple(input.shape), input.dtype) >= p
    a = ((1 - p) * (1 + p * alpha ** 2)) ** -0.5
    b = -a * alpha * p
    kt = lucid.tensor(keep.astype(input.dtype), dtype=input.dtype)
    return (input * kt + alpha * (1 - kt)) * a + b


feature_alpha_dropout = alpha_dropout
