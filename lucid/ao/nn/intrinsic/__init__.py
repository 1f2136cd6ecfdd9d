"""Fused float modules (PyTorch's ``torch.ao.nn.intrinsic``): what module fusion makes, quantized
as one unit; ``qat`` holds their quantization-aware-training forms (loaded on first use)."""
import importlib

from lucid.ao.quantization.fuse_modules import (BNReLU2d, BNReLU3d, ConvBn1d, ConvBn2d, ConvBn3d, ConvBnReLU1d,
                                                ConvBnReLU2d, ConvBnReLU3d, ConvReLU1d, ConvReLU2d, ConvReLU3d,
                                                LinearBn1d, LinearReLU)

__all__ = ["BNReLU2d", "BNReLU3d", "ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d",
           "ConvBnReLU3d", "ConvReLU1d", "ConvReLU2d", "ConvReLU3d", "LinearReLU", "LinearBn1d", "qat"]


def __getattr__(name):
    if name == "qat":
        return importlib.import_module(".qat", __name__)
    raise AttributeError(f"module 'lucid.ao.nn.intrinsic' has no attribute {name!r}")
