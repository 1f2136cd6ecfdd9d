"""Module fusion (PyTorch's ``torch.ao.quantization.fuse_modules``): conv + batch norm (+ ReLU)
folded into one conv (eval mode), linear (+ batch norm) + ReLU into one fused module, so the
quantized model requantizes once per fused group."""
from __future__ import annotations

import copy

from lucid import nn

__all__ = ["fuse_modules", "fuse_modules_qat", "fuse_known_modules", "LinearReLU", "LinearBn1d", "ConvReLU1d", "ConvReLU2d",
           "ConvReLU3d", "ConvBn1d", "ConvBn2d", "ConvBn3d", "ConvBnReLU1d", "ConvBnReLU2d", "ConvBnReLU3d",
           "BNReLU2d", "BNReLU3d", "FusionError"]


class _FusedModule(nn.Sequential):
    pass


class LinearReLU(_FusedModule):
    """A Linear followed by a ReLU, quantized as one module (PyTorch's ``nni.LinearReLU``)."""

    def __init__(self, linear, relu):
        super().__init__(linear, relu)


class LinearBn1d(_FusedModule):
    """A Linear followed by a BatchNorm1d, kept apart for quantization-aware training
    (PyTorch's ``nni.LinearBn1d``, what ``fuse_modules_qat`` makes)."""

    def __init__(self, linear, bn):
        super().__init__(linear, bn)


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


class ConvBn1d(_FusedModule):
    """A Conv1d followed by a BatchNorm1d, kept apart for quantization-aware training
    (PyTorch's ``nni.ConvBn1d``, what ``fuse_modules_qat`` makes)."""

    def __init__(self, conv, bn):
        super().__init__(conv, bn)


class ConvBn2d(_FusedModule):
    """A Conv2d followed by a BatchNorm2d (PyTorch's ``nni.ConvBn2d``)."""

    def __init__(self, conv, bn):
        super().__init__(conv, bn)


class ConvBn3d(_FusedModule):
    """A Conv3d followed by a BatchNorm3d (PyTorch's ``nni.ConvBn3d``)."""

    def __init__(self, conv, bn):
        super().__init__(conv, bn)


class ConvBnReLU1d(_FusedModule):
    """Conv1d, BatchNorm1d, ReLU (PyTorch's ``nni.ConvBnReLU1d``)."""

    def __init__(self, conv, bn, relu):
        super().__init__(conv, bn, relu)


class ConvBnReLU2d(_FusedModule):
    """Conv2d, BatchNorm2d, ReLU (PyTorch's ``nni.ConvBnReLU2d``)."""

    def __init__(self, conv, bn, relu):
        super().__init__(conv, bn, relu)


class ConvBnReLU3d(_FusedModule):
    """Conv3d, BatchNorm3d, ReLU (PyTorch's ``nni.ConvBnReLU3d``)."""

    def __init__(self, conv, bn, relu):
        super().__init__(conv, bn, relu)


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
                          "fuse_modules_qat's; call model.eval() first)")
    return nn.utils.fuse_conv_bn_eval(conv, bn)


def _fuse_convtranspose_bn(convt, bn, is_qat):
    """PyTorch's ``fuse_convtranspose_bn``: the batch norm folded into the transposed conv's
    weight (per output channel, its dim 1) and bias; eval only, and not for QAT."""
    if is_qat:
        raise FusionError("fuse_modules_qat: Fusing ConvTranspose+BatchNorm not yet supported in QAT.")
    if convt.training or bn.training:
        raise FusionError("fuse_modules: Fusion only for eval! (call model.eval() first)")
    return nn.utils.fuse_conv_bn_eval(convt, bn, transpose=True)


_CONVT_BN = {(nn.ConvTranspose1d, nn.BatchNorm1d), (nn.ConvTranspose2d, nn.BatchNorm2d),
             (nn.ConvTranspose3d, nn.BatchNorm3d)}
_CONV_BN = {(nn.Conv1d, nn.BatchNorm1d): ConvReLU1d, (nn.Conv2d, nn.BatchNorm2d): ConvReLU2d,
            (nn.Conv3d, nn.BatchNorm3d): ConvReLU3d}
_CONV_RELU = {(conv, nn.ReLU): fused for (conv, _), fused in _CONV_BN.items()}
_BN_RELU = {(nn.BatchNorm2d, nn.ReLU): BNReLU2d, (nn.BatchNorm3d, nn.ReLU): BNReLU3d}


_CONV_BN_QAT = {(nn.Conv1d, nn.BatchNorm1d): (ConvBn1d, ConvBnReLU1d), (nn.Conv2d, nn.BatchNorm2d): (ConvBn2d, ConvBnReLU2d),
                (nn.Conv3d, nn.BatchNorm3d): (ConvBn3d, ConvBnReLU3d)}


def _fuse_qat(mod_list, types):
    """Training-mode fusions: conv + bn (+ relu) stay separate modules inside one fused module,
    which ``prepare_qat`` turns into a QAT ConvBn (batch statistics folded on the fly)."""
    if types[:2] not in _CONV_BN_QAT or types[2:] not in ((), (nn.ReLU,)):
        return None
    conv, bn = mod_list[:2]
    if conv.training != bn.training:
        raise FusionError("fuse_modules_qat: Conv and BN both must be in the same mode (train or eval).")
    if bn.num_features != conv.out_channels:
        raise FusionError("fuse_modules_qat: Output channel of Conv must match num_features of BatchNorm")
    if not (bn.affine and bn.track_running_stats):
        raise FusionError("fuse_modules_qat: Only support fusing BatchNorm with affine set to True and "
                          "tracking_running_stats set to True")
    plain, with_relu = _CONV_BN_QAT[types[:2]]
    return with_relu(*mod_list) if len(types) == 3 else plain(*mod_list)


def _fuse_linear_bn_qat(linear, bn):
    if linear.training != bn.training:
        raise FusionError("fuse_modules_qat: Linear and BN both must be in the same mode (train or eval).")
    if bn.num_features != linear.out_features:
        raise FusionError("fuse_modules_qat: Output features of Linear must match num_features of BatchNorm1d")
    if not bn.affine:
        raise FusionError("fuse_modules_qat: Only support fusing BatchNorm1d with affine set to True")
    if not bn.track_running_stats:
        raise FusionError("fuse_modules_qat: Only support fusing BatchNorm1d with tracking_running_stats set to True")
    return LinearBn1d(linear, bn)


def fuse_known_modules(mod_list, is_qat=False, additional_fuser_method_mapping=None):
    """The fused replacement of ``mod_list``: the fused module first, then Identity for the rest
    (PyTorch's eval-mode fusions, and its training-mode ones with ``is_qat``)."""
    types = tuple(type(m) for m in mod_list)
    fused = _fuse_qat(mod_list, types) if is_qat else None
    if fused is not None:
        pass
    elif types in _CONV_BN:
        fused = _fuse_conv_bn(*mod_list)
    elif types in _CONVT_BN:
        fused = _fuse_convtranspose_bn(*mod_list, is_qat)
    elif types[:2] in _CONV_BN and types[2:] == (nn.ReLU,):
        fused = _CONV_BN[types[:2]](_fuse_conv_bn(*mod_list[:2]), mod_list[2])
    elif types in _CONV_RELU:
        fused = _CONV_RELU[types](*mod_list)
    elif types == (nn.Linear, nn.ReLU):
        fused = LinearReLU(*mod_list)
    elif types == (nn.Linear, nn.BatchNorm1d) and is_qat:
        fused = _fuse_linear_bn_qat(*mod_list)
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
    return _fuse(model, modules_to_fuse, inplace, fuser_func, False)


def fuse_modules_qat(model, modules_to_fuse, inplace=False, fuser_func=fuse_known_modules,
                     fuse_custom_config_dict=None):
    """``fuse_modules`` for quantization-aware training: conv + bn (+ ReLU) become ``ConvBn2d`` /
    ``ConvBnReLU2d`` and linear + bn ``LinearBn1d`` (kept unfolded; ``prepare_qat`` makes them
    QAT modules that fold the batch norm into the fake-quantized weight).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.ao.quantization import fuse_modules_qat
    >>> m = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU())
    >>> type(fuse_modules_qat(m, ["0", "1", "2"])[0]).__name__
    'ConvBnReLU2d'
    """
    return _fuse(model, modules_to_fuse, inplace, fuser_func, True)


def _fuse(model, modules_to_fuse, inplace, fuser_func, is_qat):
    if not inplace:
        model = copy.deepcopy(model)
    groups = modules_to_fuse if all(isinstance(g, (list, tuple)) for g in modules_to_fuse) else [modules_to_fuse]
    for names in groups:
        mods = [_get(model, n) for n in names]
        fused = fuser_func(mods, is_qat=True) if is_qat else fuser_func(mods)
        for n, m in zip(names, fused):
            _set(model, n, m)
    return model
