"""Functional convolutions, plus ``unfold``/``fold`` (im2col / col2im).

The convolutions are the primitives of ``lucid/ops/conv.py``. ``unfold`` is a grouped
convolution with a one-hot ("identity") kernel and ``fold`` is its adjoint, the
transposed convolution with the same kernel, so both inherit every rule (grad, jvp,
vmap, higher orders) from the conv family.
"""
from __future__ import annotations

import math

import numpy as np

from ...ops.conv import (_tuple, conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,
                         conv_transpose3d, conv_transpose_p, conv_p)
from ...ops._family import _as_tensor
from ..._core.primitive import bind
from ..._core.tensor import _wrap
from ._device import const_like

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "unfold", "fold"]


def _eye_kernel(channels, ksize, dtype, like):
    """(C*K, 1, *k) one-hot kernel: output channel c*K + j copies kernel position j of channel c."""
    k = math.prod(ksize)
    eye = np.eye(k, dtype=dtype).reshape((k, 1) + tuple(ksize))
    return const_like(np.tile(eye, (channels,) + (1,) * (len(ksize) + 1)), like)


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """Extract sliding local blocks: (N, C, H, W) -> (N, C*kh*kw, L) (im2col).

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> F.unfold(lucid.ones(1, 2, 4, 4), kernel_size=2).shape
    (1, 8, 9)
    """
    input = _as_tensor(input)
    if input.ndim not in (3, 4):
        raise RuntimeError(f"unfold: expected a 3-D or 4-D input, got shape {tuple(input.shape)}")
    unbatched = input.ndim == 3
    if unbatched:
        input = input.unsqueeze(0)
    ks = _tuple(kernel_size, 2, "kernel_size", "unfold")
    dil, pad, st = (_tuple(v, 2, n, "unfold") for v, n in ((dilation, "dilation"), (padding, "padding"),
                                                           (stride, "stride")))
    c = input.shape[1]
    w = _eye_kernel(c, ks, input.dtype, input)
    out = bind(conv_p, (input, w), dict(stride=st, padding=tuple((p, p) for p in pad), dilation=dil, groups=c))
    out = out.reshape(out.shape[0], out.shape[1], -1)
    return out.squeeze(0) if unbatched else out


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """Combine sliding local blocks into a tensor (col2im), the adjoint of :func:`unfold`:
    (N, C*kh*kw, L) -> (N, C, *output_size); overlapping values are summed.

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> F.fold(lucid.ones(1, 4, 9), (4, 4), kernel_size=2)[0, 0, 0].tolist()
    [1.0, 2.0, 2.0, 1.0]
    """
    input = _as_tensor(input)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"fold: expected a 2-D or 3-D input, got shape {tuple(input.shape)}")
    unbatched = input.ndim == 2
    if unbatched:
        input = input.unsqueeze(0)
    osz = _tuple(output_size, 2, "output_size", "fold")
    ks = _tuple(kernel_size, 2, "kernel_size", "fold")
    dil, pad, st = (_tuple(v, 2, n, "fold") for v, n in ((dilation, "dilation"), (padding, "padding"),
                                                         (stride, "stride")))
    k = math.prod(ks)
    blocks = tuple((o + 2 * p - d * (kk - 1) - 1) // s + 1 for o, p, d, kk, s in zip(osz, pad, dil, ks, st))
    n, ck, L = input.shape
    if ck % k or L != math.prod(blocks):
        raise RuntimeError(f"fold: input of shape {tuple(input.shape)} does not match kernel_size {ks} "
                           f"(channels must divide by {k}) and {math.prod(blocks)} blocks for output_size {osz}")
    c = ck // k
    x = input.reshape((n, ck) + blocks)
    out = bind(conv_transpose_p, (x, _eye_kernel(c, ks, input.dtype, input)),
               dict(stride=st, padding=pad, dilation=dil, groups=c, out_size=osz))
    return out.squeeze(0) if unbatched else out
