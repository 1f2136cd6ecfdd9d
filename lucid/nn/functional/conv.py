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
from ..._core.primitive import autocast_composite, bind
from ..._core.tensor import _wrap
from ._device import const_like

__all__ = ["conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
           "unfold", "fold", "conv_tbc"]


def _eye_kernel(channels, ksize, dtype, like):
    """(C*K, 1, *k) one-hot kernel: output channel c*K + j copies kernel position j of channel c."""
    k = math.prod(ksize)
    eye = np.eye(k, dtype=dtype).reshape((k, 1) + tuple(ksize))
    return const_like(np.tile(eye, (channels,) + (1,) * (len(ksize) + 1)), like)


@autocast_composite("im2col")  # NOTE [Autocast]: in no list: PyTorch leaves im2col alone, the conv inside too
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
    out = out.reshape(out.shape[0], out.shape[1], out.shape[2] * out.shape[3])  # (-1 fails on an empty batch)
    return out.squeeze(0) if unbatched else out


@autocast_composite("col2im")  # NOTE [Autocast]: in no list, as unfold
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


def conv_tbc(input, weight, bias, pad=0):
    """1-D convolution in time-batch-channel layout, as ``torch.conv_tbc``: input (T, B, C_in),
    weight (K, C_in, C_out), bias (C_out,); output (T + 2*pad - K + 1, B, C_out).

    A composite of :func:`conv1d` between two permutes; a negative ``pad`` crops the input.

    Examples
    --------
    >>> import lucid
    >>> import lucid.nn.functional as F
    >>> F.conv_tbc(lucid.ones(5, 2, 3), lucid.ones(2, 3, 4), lucid.zeros(4), pad=1).shape
    (6, 2, 4)
    """
    input, weight, bias = _as_tensor(input), _as_tensor(weight), _as_tensor(bias)
    if input.ndim != 3:
        raise RuntimeError(f"conv_tbc: input must have 3 dims: time, batch, in_channel; got {tuple(input.shape)}")
    if weight.ndim != 3:
        raise RuntimeError(f"conv_tbc: weight must have 3 dims: kernel width, in_channels, out_channels; got "
                           f"{tuple(weight.shape)}")
    if weight.shape[1] != input.shape[2]:
        raise RuntimeError(f"conv_tbc: input dim 2 (input channels) {input.shape[2]} is not == dim 1 in the weight "
                           f"tensor {tuple(weight.shape)}")
    if bias.shape != (weight.shape[2],):
        raise RuntimeError(f"conv_tbc: bias size {tuple(bias.shape)} must equal dim 2 in the weight tensor "
                           f"(output channels) {weight.shape[2]}")
    pad = int(pad)
    t, k = input.shape[0], weight.shape[0]
    if t + 2 * pad - k + 1 < 0:
        raise RuntimeError(f"conv_tbc: output length {t + 2 * pad - k + 1} would be negative (input length {t}, "
                           f"kernel {k}, pad {pad})")
    if pad < 0:
        input, pad = input[-pad:t + pad], 0
    x = input.permute(1, 2, 0)
    if t + 2 * pad - k + 1 == 0:  # an empty output, which conv1d refuses
        return bias.reshape(1, -1, 1).expand(x.shape[0], -1, 0).permute(2, 0, 1)
    return conv1d(x, weight.permute(2, 1, 0), bias, padding=pad).permute(2, 0, 1)
