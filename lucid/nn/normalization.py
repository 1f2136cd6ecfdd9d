"""Normalisation modules: BatchNorm1d/2d/3d, LayerNorm, GroupNorm, InstanceNorm1d/2d, RMSNorm."""
from __future__ import annotations

import math

import numpy as np

from .._core import backend
from .._core.grad_mode import no_grad

from . import functional as F
from .functional.normalization import check_batch_count, check_batch_eps
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LayerNorm", "GroupNorm",
           "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm", "LocalResponseNorm", "CrossMapLRN2d"]


def _lucid():
    import lucid

    return lucid


class _NormBase(Module):
    _version = 2  # version 2 added num_batches_tracked (PyTorch's numbering)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None, *, bias=True):
        super().__init__()
        lucid = _lucid()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:  # PyTorch 2.13's ``bias=False`` keeps the scale alone
            self.weight = Parameter(lucid.ones(num_features, dtype=dtype))
            if bias:
                self.bias = Parameter(lucid.zeros(num_features, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", lucid.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", lucid.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", lucid.tensor(0, dtype=lucid.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def _upgrade_state_dict(self, state_dict, prefix, local_metadata):
        """PyTorch's rule: a checkpoint older than version 2, or without metadata, may lack
        ``num_batches_tracked``; the module's current count is kept then. See NOTE
        [State-dict metadata]."""
        version = local_metadata.get("version")
        key = prefix + "num_batches_tracked"
        if (version is None or version < 2) and self.track_running_stats and key not in state_dict:
            nbt = self.num_batches_tracked
            state_dict[key] = nbt if nbt is not None else _lucid().tensor(0, dtype=_lucid().int64)

    def reset_running_stats(self):
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)
            with backend.on_device(self.num_batches_tracked):
                self.num_batches_tracked._data[...] = 0
            self.num_batches_tracked._version[0] += 1

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


def _values_per_channel(shape):
    """N times the spatial sizes: the values each channel's statistics see. A product, not
    ``numel() // C``, so 0 channels or an empty batch need no division (PyTorch's count too:
    ``(1, 0)`` has one value per channel and fails in training, ``(0, C)`` has none and passes)."""
    return shape[0] * math.prod(shape[2:])


class _BatchNorm(_NormBase):
    _dims = ()

    def _check_input_dim(self, input):
        if not self._dims:  # a subclass of the base itself must say which inputs it takes
            raise NotImplementedError(f"{type(self).__name__}: _check_input_dim is not implemented")
        if input.ndim not in self._dims:
            raise ValueError(
                f"{type(self).__name__}: expected {' or '.join(f'{d}D' for d in self._dims)} input "
                f"(got {input.ndim}D input of shape {tuple(input.shape)})"
            )
        # PyTorch: RuntimeError from the size of the weight or running stats (without either, any C goes);
        # an empty input is answered before its channels are looked at (NOTE [Empty batch norm])
        if (input.shape[1] != self.num_features and (self.affine or self.running_mean is not None)
                and input.numel()):
            raise RuntimeError(
                f"{type(self).__name__}: expected {self.num_features} channels at dim 1, got input of "
                f"shape {tuple(input.shape)}"
            )

    def _count_batch(self):
        """Count a training batch; the weight of its statistics in the running ones."""
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            # In place, like running_mean, and as an op, so lucid.export records the update as
            # PyTorch's export does (a buffer mutation)
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:  # cumulative moving average
                factor = 1.0 / float(self.num_batches_tracked)
        return factor

    def forward(self, input):
        self._check_input_dim(input)
        use_batch_stats = self.training or (self.running_mean is None and self.running_var is None)
        check_batch_eps(self.eps, use_batch_stats)  # before counting the batch: a failed call changes nothing
        if self.num_features == 0 and self.weight is not None and input.numel() == 0:
            # PyTorch's IndexError (the empty output reads weight[0]), raised before counting the batch
            raise IndexError(f"{type(self).__name__}: an empty input of shape {tuple(input.shape)} needs "
                             f"num_features > 0 with affine=True (got num_features={self.num_features})")
        if self.training:
            check_batch_count(_values_per_channel(input.shape), tuple(input.shape))
        factor = self._count_batch()
        track = not self.training or self.track_running_stats
        return F.batch_norm(
            input,
            self.running_mean if track else None,
            self.running_var if track else None,
            self.weight, self.bias, use_batch_stats, factor, self.eps,
        )


class BatchNorm1d(_BatchNorm):
    """Batch normalisation over (N, C) or (N, C, L) inputs.

    Training uses batch statistics and updates ``running_mean``/``running_var`` with
    ``momentum`` (``None``: cumulative average); evaluation uses the running statistics.

    Parameters
    ----------
    num_features : int
        The number of channels C.
    eps : float
        Added to the variance for stability.
    momentum : float or None
        Weight of the newest batch in the running statistics (None: cumulative average).
    affine : bool
        Learn a per-channel ``weight`` and ``bias``.
    bias : bool, keyword-only
        With ``affine``, learn the ``bias`` too (``False``: the scale alone).
    track_running_stats : bool
        Keep running statistics for evaluation mode.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> bn = nn.BatchNorm1d(2, eps=1e-12)
    >>> bn(lucid.tensor([[1.0, 2.0], [3.0, 6.0]]))
    tensor([[-1., -1.],
            [ 1.,  1.]], grad_fn=<AddBackward0>)
    """

    _dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation over (N, C, H, W) inputs (see :class:`BatchNorm1d`).

    Parameters
    ----------
    num_features : int
        The number of channels C.
    eps : float
        Added to the variance for stability.
    momentum : float or None
        Weight of the newest batch in the running statistics (None: cumulative average).
    affine : bool
        Learn a per-channel ``weight`` and ``bias``.
    bias : bool, keyword-only
        With ``affine``, learn the ``bias`` too (``False``: the scale alone).
    track_running_stats : bool
        Keep running statistics for evaluation mode.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.BatchNorm2d(3)(lucid.ones(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """

    _dims = (4,)


class BatchNorm3d(_BatchNorm):
    """Batch normalisation over (N, C, D, H, W) inputs (see :class:`BatchNorm1d`).

    Parameters
    ----------
    num_features : int
        The number of channels C.
    eps : float
        Added to the variance for stability.
    momentum : float or None
        Weight of the newest batch in the running statistics (None: cumulative average).
    affine : bool
        Learn a per-channel ``weight`` and ``bias``.
    bias : bool, keyword-only
        With ``affine``, learn the ``bias`` too (``False``: the scale alone).
    track_running_stats : bool
        Keep running statistics for evaluation mode.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.BatchNorm3d(3)(lucid.ones(2, 3, 2, 2, 2)).shape
    (2, 3, 2, 2, 2)
    """
    _dims = (5,)



class SyncBatchNorm(_BatchNorm):
    """Batch normalisation whose training statistics cover the whole batch of every rank.

    In a distributed job (``lucid.distributed`` initialised, more than one rank in
    ``process_group``) training mode normalises with the mean and variance of the union of all
    ranks' batches, through differentiable all-reduces (NOTE [Synchronised batch norm]), and
    updates the running statistics with them, identically on every rank. Otherwise (one
    process, or evaluation) it is :class:`BatchNorm2d` for inputs of any rank >= 2.

    Parameters
    ----------
    num_features, eps, momentum, affine, track_running_stats
        As :class:`BatchNorm1d`.
    process_group : ProcessGroup, optional
        The ranks whose batches are pooled (default: the world).

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> model = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4)))
    >>> type(model[1]).__name__, model(lucid.ones(2, 1, 5, 5)).shape
    ('SyncBatchNorm', (2, 4, 3, 3))
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.ndim < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.ndim}D input)")
        if input.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm: expected {self.num_features} channels at dim 1, got input of "
                             f"shape {tuple(input.shape)}")

    def _world(self):
        """The number of ranks pooled now (1: no distributed job)."""
        if not self.training:
            return 1
        import lucid.distributed as dist

        if not dist.is_initialized():
            return 1
        return dist.get_world_size(self.process_group)

    def forward(self, input):
        if self._world() <= 1:
            return super().forward(input)
        self._check_input_dim(input)
        return _synced_batch_norm(self, input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """``module`` with every BatchNorm1d/2d/3d replaced by a SyncBatchNorm that shares its
        parameters and running statistics (the module itself where it is one), as PyTorch's."""
        out = module
        if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
            out = cls(module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats,
                      process_group)
            if module.affine:
                out.weight, out.bias = module.weight, module.bias
            out.running_mean, out.running_var = module.running_mean, module.running_var
            out.num_batches_tracked = module.num_batches_tracked
            out.training = module.training
            if hasattr(module, "qconfig"):
                out.qconfig = module.qconfig
        for name, child in module.named_children():
            out.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return out


# NOTE [Synchronised batch norm]
# Two differentiable all-reduces (lucid.distributed.nn.functional.all_reduce), so the backward
# is the matching pair of collectives and every rank's input gradient is its slice of the
# whole batch's: the per-channel sums and the element count give the global mean; the sums of
# squared deviations from it give the (biased) variance used to normalise, exact and stable
# for any split of the batch (a sum of squares minus a squared mean would cancel). The
# running statistics take the unbiased variance of the union, the same on every rank.
def _synced_batch_norm(bn, x):
    import lucid
    from lucid.distributed.nn.functional import all_reduce

    from .functional.normalization import _update_running

    axes = (0,) + tuple(range(2, x.ndim))
    cshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    local = lucid.cat([x.sum(axes), lucid.full((1,), _values_per_channel(x.shape), dtype=x.dtype, device=x.device)])
    total = all_reduce(local, group=bn.process_group)
    count = int(round(float(total[-1].item())))  # the union's size: a host read, as PyTorch's
    check_batch_count(count, f"{tuple(x.shape)} on this rank, {count} values per channel across the ranks",
                      "SyncBatchNorm")
    mean = (total[:-1] / count).reshape(cshape)
    xc = x - mean
    var = (all_reduce((xc * xc).sum(axes), group=bn.process_group) / count).reshape(cshape)
    factor = bn._count_batch()  # after the checks: a failed call changes nothing
    if bn.track_running_stats and bn.running_mean is not None:
        _update_running(bn.running_mean, bn.running_var, mean, var, count, factor)
    out = xc / lucid.sqrt(var + bn.eps)
    if bn.weight is not None:
        out = out * bn.weight.reshape(cshape)
    if bn.bias is not None:
        out = out + bn.bias.reshape(cshape)
    return out


class _InstanceNorm(_NormBase):
    _dims = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False, track_running_stats=False,
                 device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, input):
        if input.ndim not in self._dims:
            raise ValueError(f"{type(self).__name__}: expected {' or '.join(f'{d}D' for d in self._dims)} input "
                             f"(got {input.ndim}D input)")
        if self.affine and input.shape[-self._dims[0]] != self.num_features:
            raise ValueError(f"{type(self).__name__}: expected input's size at dim={input.ndim - self._dims[0]} "
                             f"to match num_features ({self.num_features}), but got: {input.shape[-self._dims[0]]}.")
        if input.ndim == self._dims[0]:  # unbatched
            return self.forward(input.unsqueeze(0)).squeeze(0)
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight, self.bias,
                               self.training or not self.track_running_stats, self.momentum or 0.0, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Normalise each channel of each sample of (N, C, L) inputs over L.

    Parameters
    ----------
    num_features : int
        The number of channels C.
    eps : float
        Added to the variance for stability.
    momentum : float or None
        Weight of the newest batch in the running statistics (None: cumulative average).
    affine : bool
        (default False) Learn a per-channel ``weight`` and ``bias``.
    track_running_stats : bool
        (default False) Keep running statistics for evaluation mode.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.InstanceNorm1d(2, eps=0.0)(lucid.tensor([[[1.0, 3.0], [2.0, 4.0]]])).tolist()
    [[[-1.0, 1.0], [-1.0, 1.0]]]
    """
    _dims = (2, 3)


class InstanceNorm2d(_InstanceNorm):
    """Normalise each channel of each sample of (N, C, H, W) inputs over H and W.

    Parameters
    ----------
    num_features : int
        The number of channels C.
    eps : float
        Added to the variance for stability.
    momentum : float or None
        Weight of the newest batch in the running statistics (None: cumulative average).
    affine : bool
        (default False) Learn a per-channel ``weight`` and ``bias``.
    track_running_stats : bool
        (default False) Keep running statistics for evaluation mode.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.InstanceNorm2d(3)(lucid.ones(2, 3, 4, 4)).shape
    (2, 3, 4, 4)
    """
    _dims = (3, 4)


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dims; ``weight`` = 1, ``bias`` = 0.

    Parameters
    ----------
    normalized_shape : int or tuple of int
        The trailing dims to normalise over.
    eps : float
        Added to the variance for stability.
    elementwise_affine : bool
        Learn ``weight`` (and ``bias``) of shape ``normalized_shape``.
    bias : bool
        Whether to learn a bias when ``elementwise_affine``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.LayerNorm(2)
    LayerNorm((2,), eps=1e-05, elementwise_affine=True, bias=True)
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None,
                 dtype=None):
        super().__init__()
        lucid = _lucid()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(lucid.ones(*self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(lucid.zeros(*self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, weight=self.weight, bias=self.bias, eps=self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """Root-mean-square normalisation ``x / sqrt(mean(x^2) + eps) * weight`` over the trailing dims.

    Parameters
    ----------
    normalized_shape : int or tuple of int
        The trailing dims to normalise over.
    eps : float, optional
        Added under the root (default: the dtype's machine epsilon).
    elementwise_affine : bool
        Learn a ``weight`` of shape ``normalized_shape``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.RMSNorm(2)(lucid.tensor([[3.0, 3.0]])).tolist()
    [[1.0, 1.0]]
    """
    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape, self.eps, self.elementwise_affine = tuple(normalized_shape), eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(_lucid().ones(*self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, input):
        return F.rms_norm(input, self.normalized_shape, weight=self.weight, eps=self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    """Group normalisation of (N, C, *) inputs; per-channel affine ``weight`` = 1, ``bias`` = 0.

    Parameters
    ----------
    num_groups : int
        Number of channel groups (must divide ``num_channels``).
    num_channels : int
        The number of channels C.
    eps : float
        Added to the variance for stability.
    affine : bool
        Learn a per-channel ``weight`` and ``bias``.
    bias : bool, keyword-only
        With ``affine``, learn the ``bias`` too (``False``: the scale alone).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.GroupNorm(1, 2)(lucid.ones(1, 2, 3)).shape
    (1, 2, 3)
    """

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
        lucid = _lucid()
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        if affine:
            self.weight = Parameter(lucid.ones(num_channels, dtype=dtype))
            if bias:
                self.bias = Parameter(lucid.zeros(num_channels, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, weight=self.weight, bias=self.bias, eps=self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class InstanceNorm3d(_InstanceNorm):
    """Normalise each channel of each sample of (N, C, D, H, W) inputs over D, H and W.

    Parameters
    ----------
    num_features : int
        The number of channels C.
    eps : float
        Added to the variance for stability.
    momentum : float or None
        Weight of the newest batch in the running statistics (None: cumulative average).
    affine : bool
        (default False) Learn a per-channel ``weight`` and ``bias``.
    track_running_stats : bool
        (default False) Keep running statistics for evaluation mode.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.InstanceNorm3d(3)(lucid.ones(2, 3, 2, 2, 2)).shape
    (2, 3, 2, 2, 2)
    """
    _dims = (4, 5)


class _ResponseNorm(Module):
    """What LocalResponseNorm and CrossMapLRN2d share (PyTorch derives both from Module)."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class LocalResponseNorm(_ResponseNorm):
    """Local response normalisation across channels (:func:`F.local_response_norm`).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.LocalResponseNorm(2)(lucid.ones(1, 4, 3, 3)).shape
    (1, 4, 3, 3)
    """

    def forward(self, input):
        return F.local_response_norm(input, self.size, alpha=self.alpha, beta=self.beta, k=self.k)


def _cross_map_matrix(c, size):
    """Which channels PyTorch's (legacy, Lua-torch) CrossMapLRN2d sums for each channel: its
    running-window recurrence replayed on indicator rows, so the result matches it exactly
    (including the window's asymmetry near the first channels)."""
    pre_pad = int((size - 1) / 2 + 1)
    m = np.zeros((c, c))
    m[0, :min(pre_pad, c)] = 1.0
    for i in range(1, c):
        m[i] = m[i - 1]
        if i < c - pre_pad + 1:
            m[i, i + pre_pad - 1] += 1.0
        if i > pre_pad:
            m[i, i - pre_pad] -= 1.0
    return m


class CrossMapLRN2d(_ResponseNorm):
    """PyTorch's legacy cross-channel LRN for (N, C, H, W):
    ``x * (k + alpha / size * sum of x**2 over the window) ** -beta``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.CrossMapLRN2d(3)(lucid.ones(1, 4, 2, 2)).shape
    (1, 4, 2, 2)
    """

    def forward(self, input):
        from .functional.normalization import _channel_mix

        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: expected a 4-D input (N, C, H, W), got shape {tuple(input.shape)}")
        scale = _channel_mix(input * input, _cross_map_matrix(input.shape[1], self.size))
        return input * (scale * (self.alpha / self.size) + self.k) ** (-self.beta)
