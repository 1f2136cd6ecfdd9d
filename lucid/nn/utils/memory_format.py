"""``torch.nn.utils.memory_format``: lay out convolution weights in a memory format.

Only the weights of ``Conv2d``/``ConvTranspose2d`` (``Conv3d``/``ConvTranspose3d``) change,
which is gentler than ``Module.to(memory_format=...)``, which lays out every 4-d/5-d tensor.
The Parameter objects stay the same (their data is swapped, as PyTorch's ``weight.data = ...``),
so optimizers and hooks keep working. See NOTE [Memory formats] in ``lucid/ops/memory_format.py``.
"""
from __future__ import annotations

__all__ = ["convert_conv2d_weight_memory_format", "convert_conv3d_weight_memory_format"]


def _convert(module, memory_format, kinds, op):
    from ...ops.memory_format import as_format, preserve_format

    fmt = as_format(memory_format, op)
    if isinstance(module, kinds):
        if fmt is preserve_format:  # PyTorch's resize_ refuses it
            raise RuntimeError(f"{op}: unsupported memory format Preserve")
        weight = module.weight
        weight.data = weight.detach().clone(memory_format=fmt)
    for child in module.children():
        _convert(child, fmt, kinds, op)
    return module


def convert_conv2d_weight_memory_format(module, memory_format):
    """Lay out the weight of every ``Conv2d`` and ``ConvTranspose2d`` in ``module`` (itself
    included, recursively) in ``memory_format``; returns ``module``.

    Parameters
    ----------
    module : nn.Module
        A convolution or a container of them.
    memory_format : lucid.memory_format
        ``lucid.channels_last`` or ``lucid.contiguous_format`` (``channels_last_3d`` raises a
        RuntimeError on a 4-d weight, ``preserve_format`` on any convolution, as in PyTorch).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    >>> net = nn.utils.convert_conv2d_weight_memory_format(net, lucid.channels_last)
    >>> net[0].weight.stride(), net[0].weight.is_contiguous(memory_format=lucid.channels_last)
    ((27, 1, 9, 3), True)
    """
    from ..conv import Conv2d, ConvTranspose2d

    return _convert(module, memory_format, (Conv2d, ConvTranspose2d), "convert_conv2d_weight_memory_format")


def convert_conv3d_weight_memory_format(module, memory_format):
    """Lay out the weight of every ``Conv3d`` and ``ConvTranspose3d`` in ``module`` (itself
    included, recursively) in ``memory_format``; returns ``module``.

    Parameters
    ----------
    module : nn.Module
        A convolution or a container of them.
    memory_format : lucid.memory_format
        ``lucid.channels_last_3d`` or ``lucid.contiguous_format`` (``channels_last`` raises a
        RuntimeError on a 5-d weight, ``preserve_format`` on any convolution, as in PyTorch).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> conv = nn.utils.convert_conv3d_weight_memory_format(nn.Conv3d(2, 3, 2), lucid.channels_last_3d)
    >>> conv.weight.stride()
    (16, 1, 8, 4, 2)
    """
    from ..conv import Conv3d, ConvTranspose3d

    return _convert(module, memory_format, (Conv3d, ConvTranspose3d), "convert_conv3d_weight_memory_format")
