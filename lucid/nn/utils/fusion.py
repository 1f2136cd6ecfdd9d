"""Fold an eval-mode BatchNorm into the preceding Conv or Linear (``torch.nn.utils.fusion``)."""
from __future__ import annotations

import copy

from ..._core.grad_mode import no_grad
from ..parameter import Parameter

__all__ = ["fuse_conv_bn_eval", "fuse_conv_bn_weights", "fuse_linear_bn_eval", "fuse_linear_bn_weights"]


def _lucid():
    import lucid

    return lucid


def fuse_conv_bn_weights(conv_w, conv_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b, transpose=False):
    """``(W * s, (b - mean) * s + beta)`` with ``s = gamma / sqrt(var + eps)`` per output channel.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.fusion import fuse_conv_bn_weights
    >>> w, b = fuse_conv_bn_weights(lucid.ones(2, 1, 1), None, lucid.zeros(2), lucid.full((2,), 3.0), 1.0,
    ...                             None, None)
    >>> w.reshape(-1).tolist(), b.tolist()
    ([0.5, 0.5], [0.0, 0.0])
    """
    lucid = _lucid()
    with no_grad():
        w_dtype = conv_w.dtype
        b_dtype = conv_b.dtype if conv_b is not None else w_dtype
        conv_b = lucid.zeros_like(bn_rm) if conv_b is None else conv_b
        bn_w = lucid.ones_like(bn_rm) if bn_w is None else bn_w
        bn_b = lucid.zeros_like(bn_rm) if bn_b is None else bn_b
        rsqrt = 1.0 / lucid.sqrt(bn_rv + bn_eps)
        shape = ((1, -1) if transpose else (-1, 1)) + (1,) * (conv_w.ndim - 2)
        w = (conv_w * (bn_w * rsqrt).reshape(shape)).to(w_dtype)
        b = ((conv_b - bn_rm) * rsqrt * bn_w + bn_b).to(b_dtype)
    return Parameter(w, conv_w.requires_grad), Parameter(b, conv_b.requires_grad)


def fuse_conv_bn_eval(conv, bn, transpose=False):
    """A copy of ``conv`` computing ``bn(conv(x))`` (both must be in eval mode).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils.fusion import fuse_conv_bn_eval
    >>> conv, bn = nn.Conv2d(2, 3, 3).eval(), nn.BatchNorm2d(3).eval()
    >>> x = lucid.randn(1, 2, 5, 5)
    >>> bool(lucid.allclose(fuse_conv_bn_eval(conv, bn)(x), bn(conv(x)), atol=1e-5))
    True
    """
    if conv.training or bn.training:
        raise AssertionError("fuse_conv_bn_eval: fusion only for eval!")
    fused = copy.deepcopy(conv)
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("fuse_conv_bn_eval: the BatchNorm needs running statistics")
    fused.weight, fused.bias = fuse_conv_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                    bn.eps, bn.weight, bn.bias, transpose)
    return fused


def fuse_linear_bn_weights(linear_w, linear_b, bn_rm, bn_rv, bn_eps, bn_w, bn_b):
    """``(W * s[:, None], (b - mean) * s + beta)`` with ``s = gamma / sqrt(var + eps)``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.fusion import fuse_linear_bn_weights
    >>> w, b = fuse_linear_bn_weights(lucid.ones(2, 2), None, lucid.ones(2), lucid.full((2,), 3.0), 1.0,
    ...                               lucid.ones(2), lucid.zeros(2))
    >>> w.tolist(), b.tolist()
    ([[0.5, 0.5], [0.5, 0.5]], [-0.5, -0.5])
    """
    lucid = _lucid()
    with no_grad():
        w_dtype = linear_w.dtype
        b_dtype = linear_b.dtype if linear_b is not None else w_dtype
        linear_b = lucid.zeros_like(bn_rm) if linear_b is None else linear_b
        scale = bn_w / lucid.sqrt(bn_rv + bn_eps)
        # the fused tensors keep the Linear's dtypes (a float64 BatchNorm must not widen them)
        w = linear_w * scale.unsqueeze(-1).to(w_dtype)
        b = ((linear_b - bn_rm) * scale + bn_b).to(b_dtype)
    return Parameter(w, linear_w.requires_grad), Parameter(b, linear_b.requires_grad)


def fuse_linear_bn_eval(linear, bn):
    """A copy of ``linear`` computing ``bn(linear(x))`` (both in eval mode).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils.fusion import fuse_linear_bn_eval
    >>> lin, bn = nn.Linear(3, 2).eval(), nn.BatchNorm1d(2).eval()
    >>> x = lucid.randn(4, 3)
    >>> bool(lucid.allclose(fuse_linear_bn_eval(lin, bn)(x), bn(lin(x)), atol=1e-6))
    True
    """
    if linear.training or bn.training:
        raise AssertionError("fuse_linear_bn_eval: fusion only for eval!")
    if not (linear.out_features == bn.num_features or bn.num_features == 1):
        raise AssertionError("fuse_linear_bn_eval: output features of Linear must equal num_features of "
                             "BatchNorm (or BatchNorm must have a single feature)")
    if bn.running_mean is None or bn.running_var is None:
        raise AssertionError("fuse_linear_bn_eval: the BatchNorm needs running statistics")
    fused = copy.deepcopy(linear)
    fused.weight, fused.bias = fuse_linear_bn_weights(fused.weight, fused.bias, bn.running_mean, bn.running_var,
                                                      bn.eps, bn.weight, bn.bias)
    return fused
