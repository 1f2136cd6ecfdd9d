"""``LinearCrossEntropyLoss``: a linear head and its cross-entropy in one module (PyTorch 2.13),
chunked through :func:`lucid.nn.functional.linear_cross_entropy` when ``options`` asks."""
from __future__ import annotations

import math

from .functional.linear_cross_entropy import LinearCrossEntropyOptions, linear_cross_entropy
from .linear import Linear
from .loss import _WeightedLoss

__all__ = ["LinearCrossEntropyLoss", "LinearCrossEntropyOptions"]


class LinearCrossEntropyLoss(_WeightedLoss):
    """Cross entropy of ``input`` projected to logits by an owned :class:`Linear`.

    Parameters
    ----------
    in_features : int
        Features of each input row.
    num_classes : int
        Number of classes ``C``.
    out_features : tuple of int
        ``(d1, ..., dK)`` for a K-dimensional loss (the linear layer then has
        ``C * prod(out_features)`` outputs, stored flat as in PyTorch).
    bias : bool
        Give the linear layer a bias (default False, as in PyTorch).
    device, dtype : optional
        Of the linear layer's parameters.
    reduction : {'mean', 'sum', 'none'}
    weight : Tensor of shape (C,), optional
        Per-class rescaling.
    ignore_index : int, optional
        Ignored target value (class indices; default -100).
    label_smoothing : float in [0, 1]
    options : LinearCrossEntropyOptions, optional
        Chunking (None: the reference composition).
    chunk_size : int, optional
        Lucid shorthand for ``options=LinearCrossEntropyOptions(batch_chunk_size=chunk_size)``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> loss = nn.LinearCrossEntropyLoss(4, 10, chunk_size=2)
    >>> [k for k in loss.state_dict()]
    ['linear.weight']
    >>> loss(lucid.zeros(5, 4), lucid.tensor([1, 2, 3, 4, 5])).shape
    ()
    """

    def __init__(self, in_features, num_classes, *, out_features=(), bias=False, device=None, dtype=None,
                 reduction="mean", weight=None, ignore_index=None, label_smoothing=0.0, options=None,
                 chunk_size=None):
        name = "LinearCrossEntropyLoss"
        if weight is not None and tuple(weight.shape) != (num_classes,):
            raise RuntimeError(f"{name}: expected weight shape to be {(num_classes,)}, got {tuple(weight.shape)}")
        if label_smoothing < 0 or label_smoothing > 1.0:
            raise RuntimeError(f"{name}: expected label_smoothing to be in range [0, 1], got {label_smoothing}")
        super().__init__(weight=weight, reduction=reduction)
        self.num_classes = num_classes
        self.out_features = tuple(out_features)
        self.ignore_index = ignore_index
        self.label_smoothing = label_smoothing
        # Stored flat, as PyTorch does (Linear is 2-D); reshaped in forward.
        self.linear = Linear(in_features, math.prod(self.out_features) * num_classes, bias=bias,
                             device=device, dtype=dtype)
        self.options = options
        self.chunk_size = chunk_size

    def forward(self, input, target):
        shape = (self.num_classes, *self.out_features)
        w = self.linear.weight.reshape(*shape, self.linear.in_features)
        b = None if self.linear.bias is None else self.linear.bias.reshape(*shape)
        return linear_cross_entropy(input, w, target, linear_bias=b, weight=self.weight, reduction=self.reduction,
                                    ignore_index=self.ignore_index, label_smoothing=self.label_smoothing,
                                    options=self.options, chunk_size=self.chunk_size)

    def extra_repr(self):
        return (f"in_features={self.linear.in_features}, num_classes={self.num_classes}, "
                f"out_features={self.out_features}, bias={self.linear.bias is not None}, "
                f"reduction={self.reduction}, ignore_index={self.ignore_index}, "
                f"label_smoothing={self.label_smoothing}, options={self.options}"
                + ("" if self.chunk_size is None else f", chunk_size={self.chunk_size}"))
