"""Module fusion (PyTorch's ``torch.ao.quantization.fuse_modules``): conv + batch norm (+ ReLU)
folded into one conv (eval mode), linear (+ batch norm) + ReLU into one fused module, so the
quantized model requantizes once per fused group."""
from __future__ import annotations

import copy

from lucid import nn

__all__ = ["fuse_modules", "fuse_known_modules", "LinearReLU", "ConvReLU2d"]


class _FusedModule(nn.Sequential):
    pass


class LinearReLU(_FusedModule):
    """A Linear followed by a ReLU, quantized as one module (PyTorch's ``nni.LinearReLU``)."""

    def __init__(self, linear, relu):
        super().__init__(linear, relu)


class ConvReLU2d(_FusedModule):
    """A Conv2d followed by a ReLU (PyTorch's ``nni.ConvReLU2d``)."""

    def __init__(self, conv, relu):
        super().__init__(conv, relu)


def _fuse_conv_bn(conv, bn):
    if conv.training or bn.training:
        raise NotImplementedError("fuse_modules: conv + bn fusion for training (QAT) is not supported; "
                                  "call model.eval() first")
    return nn.utils.fuse_conv_bn_eval(conv, bn)


def fuse_known_modules(mod_list, is_qat=False, additional_fuser_method_mapping=None):
    """The fused replacement of ``mod_list``: the fused module first, then Identity for the rest."""
    types = tuple(type(m) for m in mod_list)
    if types in ((nn.Conv1d, nn.BatchNorm1d), (nn.Conv2d, nn.BatchNorm2d), (nn.Conv3d, nn.BatchNorm3d)):
        fused = _fuse_conv_bn(*mod_list)
    elif types in ((nn.Conv2d, nn.BatchNorm2d, nn.ReLU),):
        fused = ConvReLU2d(_fuse_conv_bn(*mod_list[:2]), mod_list[2])
    elif types == (nn.Conv2d, nn.ReLU):
        fused = ConvReLU2d(*mod_list)
    elif types == (nn.Linear, nn.ReLU):
        fused = LinearReLU(*mod_list)
    elif types == (nn.Linear, nn.BatchNorm1d):
        if mod_list[0].training or mod_list[1].training:
            raise NotImplementedError("fuse_modules: linear + bn fusion needs eval mode")
        fused = nn.utils.fuse_linear_bn_eval(*mod_list)
    elif types == (nn.BatchNorm2d, nn.ReLU):
        raise NotImplementedError("fuse_modules: BatchNorm2d + ReLU fusion is not supported in Lucid")
    else:
        raise NotImplementedError(f"Cannot fuse modules: {types}")
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
