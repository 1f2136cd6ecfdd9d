"""``lucid.nn.quantized.functional`` (``torch.nn.quantized.functional``): ``lucid.ao.nn.quantized.functional``.

Every function is ``lucid.ao.nn.quantized.functional``'s own object.

Examples
--------
>>> import lucid
>>> from lucid.nn.quantized.functional import linear
>>> import lucid.ao.nn.quantized.functional as qF
>>> linear is qF.linear
True
"""
from __future__ import annotations

from ...ao.nn.quantized.functional import (adaptive_avg_pool2d, adaptive_avg_pool3d, avg_pool2d, avg_pool3d, celu,
                                           clamp, conv1d, conv2d, conv3d, elu, hardsigmoid, hardswish, hardtanh,
                                           interpolate, leaky_relu, linear, max_pool1d, max_pool2d, threshold,
                                           upsample, upsample_bilinear, upsample_nearest)

__all__ = ["adaptive_avg_pool2d", "adaptive_avg_pool3d", "avg_pool2d", "avg_pool3d", "celu", "clamp", "conv1d",
           "conv2d", "conv3d", "elu", "hardsigmoid", "hardswish", "hardtanh", "interpolate", "leaky_relu", "linear",
           "max_pool1d", "max_pool2d", "threshold", "upsample", "upsample_bilinear", "upsample_nearest"]
