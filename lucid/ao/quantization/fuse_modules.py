"""Module fusion (PyTorch's ``torch.ao.quantization.fuse_modules``): conv + batch norm (+ ReLU)
folded into one conv (eval mode), linear (+ batch norm) + ReLU into one fused module, so the
quantized model requantizes once per fused group."""
from __future__ import annotations

import copy

from lucid import nn

__all__ = ["fuse_modules", "fuse_known_modules", "LinearReLU", "ConvReLU1d", "ConvReLU2d", "ConvReLU3d",
           "BNReLU2d", "BNReLU3d", "FusionError"]


class _FusedModule(nn.Sequential):
    pass


class LinearReLU(_FusedModule):
    """A Linear followed by a ReLU, quantized as one module (PyTorch's ``nni.LinearReLU``)."""

    def __init__(self, linear, relu):
        super().__init__(linear, relu)


class ConvReLU1d(_FusedModule):
    """A Conv1d followed by a ReLU (PyTorch's ``nni.ConvReLU1d``)."""

    def __init__(self, conv, relu):
        super().__init__(conv, relu)


class ConvReLU2d(_FusedModule):
    """A Conv2d followed by a ReLU (PyTorch's ``nni.ConvReLU2d``)."""

    def __init__(self, conv, relu):
        super().__init__(conv, relu)


class ConvReLU3d(_FusedModule):
    """A Conv3d followed by a ReLU (PyTorch's ``nni.ConvReLU3d``)."""

    def __init__(self, conv, relu):
        super().__init__(conv, relu)


class BNReLU2d(_FusedModule):
    """A BatchNorm2d followed by a ReLU (PyTorch's ``nni.BNReLU2d``)."""

    def __init__(self, batch_norm, relu):
        super().__init__(batch_norm, relu)


class BNReLU3d(_FusedModule):
    """A BatchNorm3d followed by a ReLU (PyTorch's ``nni.BNReLU3d``)."""

    def __init__(self, batch_norm, relu):
        super().__init__(batch_norm, relu)


class FusionError(AssertionError, NotImplementedError):
    """PyTorch raises AssertionError for an unfusable list; Lucid raised NotImplementedError."""


def _fuse_conv_bn(conv, bn):
    if conv.training or bn.training:
        raise FusionError("fuse_modules: Fusion only for eval! (conv + bn fusion for training is "
                          "fuse_modules_qat's, which Lucid lacks; call model.eval() first)")
    return nn.utils.fuse_conv_bn_eval(conv, bn)


_CONV_BN = {(nn.Conv1d, nn.BatchNorm1d): ConvReLU1d, (nn.Conv2d, nn.BatchNorm2d): ConvReLU2d,
            (nn.Conv3d, nn.BatchNorm3d): ConvReLU3d}
_CONV_RELU = {(conv, nn.ReLU): fused for (conv, _), fused in _CONV_BN.items()}
_BN_RELU = {(nn.BatchNorm2d, nn.ReLU): BNReLU2d, (nn.BatchNorm3d, nn.ReLU): BNReLU3d}


def fuse_known_modules(mod_list, is_qat=False, additional_fuser_method_mapping=None):
    """The fused replacement of ``mod_list``: the fused module first, then Identity for the rest
    (PyTorch's eval-mode fusions)."""
    types = tuple(type(m) for m in mod_list)
    if types in _CONV_BN:
        fused = _fuse_conv_bn(*mod_list)
    elif types[:2] in _CONV_BN and types[2:] == (nn.ReLU,):
        fused = _CONV_BN[types[:2]](_fuse_conv_bn(*mod_list[:2]), mod_list[2])
    elif types in _CONV_RELU:
        fused = _CONV_RELU[types](*mod_list)
    elif types == (nn.Linear, nn.ReLU):
        fused = LinearReLU(*mod_list)
    elif types == (nn.Linear, nn.BatchNorm1d):
        if mod_list[0].training or mod_list[1].training:
            raise FusionError("fuse_modules: Fusion only for eval! (linear + bn)")
        fused = nn.utils.fuse_linear_bn_eval(*mod_list)
    elif types in _BN_RELU:
        fused = _BN_RELU[types](*mod_list)
    else:
        raise FusionError(f"fuse_modules: did not find fuser method for: {types}")
    return [fused] + [nn.Identity() for _ in mod_list[1:]]


def _get(model, name):
    for part in name.split("."):
        model = getattr(model, part)
    return model


def _set(model, name, value):
    *parents, last = name.split(".")
    for part in parents:
        model = getattr(model, part)
    setattr(model, last, value)


def fuse_modules(model, modules_to_fuse, inplace=False, fuser_func=fuse_known_modules, fuse_custom_config_dict=None):
    """Fuse each list of submodule names in ``modules_to_fuse`` (or one list).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.quantization import fuse_modules
    >>> m = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    >>> print(fuse_modules(m, ["0", "1"]))
    Sequential(
      (0): LinearReLU(
        (0): Linear(in_features=2, out_features=2, bias=True)
        (1): ReLU()
      )
      (1): Identity()
    )
    """
    if not inplace:
        model = copy.deepcopy(model)
    groups = modules_to_fuse if all(isinstance(g, (list, tuple)) for g in modules_to_fuse) else [modules_to_fuse]
    for names in groups:
        fused = fuser_func([_get(model, n) for n in names])
        for n, m in zip(names, fused):
            _set(model, n, m)
    return model
