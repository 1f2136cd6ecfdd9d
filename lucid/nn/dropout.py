"""Dropout modules (active in training mode only). See ``lucid.nn.functional.dropout``."""
from __future__ import annotations

from . import functional as F
from ._functional_ref import functional_ref
from .module import Module

__all__ = ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"]


class _DropoutNd(Module):
    _fn = functional_ref("dropout")

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"{type(self).__name__}: dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return type(self)._fn(input, p=self.p, training=self.training, inplace=self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout(_DropoutNd):
    """Zero elements with probability ``p`` in training, scaling the rest by ``1/(1-p)``.

    Parameters
    ----------
    p : float
        Probability of dropping, in [0, 1].
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Dropout(0.5).eval()(lucid.ones(2))
    tensor([1., 1.])
    """

    _fn = functional_ref("dropout")


class Dropout1d(_DropoutNd):
    """Drop whole channels of (N, C, L) inputs with probability ``p`` in training.

    Parameters
    ----------
    p : float
        Probability of dropping, in [0, 1].
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Dropout1d(0.5).eval()(lucid.ones(1, 2, 3)).shape
    (1, 2, 3)
    """
    _fn = functional_ref("dropout1d")


class Dropout2d(_DropoutNd):
    """Drop whole channels of (N, C, H, W) inputs with probability ``p`` in training.

    Parameters
    ----------
    p : float
        Probability of dropping, in [0, 1].
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Dropout2d(0.5).eval()(lucid.ones(1, 2, 2, 2)).shape
    (1, 2, 2, 2)
    """
    _fn = functional_ref("dropout2d")


class AlphaDropout(_DropoutNd):
    """Dropout that keeps the mean and variance of SELU activations (training only).

    Parameters
    ----------
    p : float
        Probability of dropping, in [0, 1].
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.AlphaDropout(0.5).eval()(lucid.ones(2)).tolist()
    [1.0, 1.0]
    """
    _fn = functional_ref("alpha_dropout")


class Dropout3d(_DropoutNd):
    """Drop whole channels of (N, C, D, H, W) inputs with probability ``p`` in training.

    Parameters
    ----------
    p : float
        Probability of dropping, in [0, 1].
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Dropout3d(0.5).eval()(lucid.ones(1, 2, 2, 2, 2)).shape
    (1, 2, 2, 2, 2)
    """
    _fn = functional_ref("dropout3d")


class FeatureAlphaDropout(_DropoutNd):
    """Alpha dropout of whole channels (see ``F.feature_alpha_dropout``), training only.

    Parameters
    ----------
    p : float
        Probability of dropping, in [0, 1].
    inplace : bool
        Change the input in place and return it (default False).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.FeatureAlphaDropout(0.5).eval()(lucid.ones(1, 2)).tolist()
    [[1.0, 1.0]]
    """
    _fn = functional_ref("feature_alpha_dropout")
