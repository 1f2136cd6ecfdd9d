"""Fused quantization-aware-training modules (PyTorch's ``torch.ao.nn.intrinsic.qat``)."""
from lucid.ao.quantization.qat import LinearReLU

from .modules import (ConvBn1d, LinearBn1d, ConvBn2d, ConvBn3d, ConvBnReLU1d, ConvBnReLU2d, ConvBnReLU3d, ConvReLU1d, ConvReLU2d,
                      ConvReLU3d, freeze_bn_stats, update_bn_stats)

__all__ = ["LinearReLU", "LinearBn1d", "ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d", "ConvBnReLU3d",
           "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "freeze_bn_stats", "update_bn_stats"]
