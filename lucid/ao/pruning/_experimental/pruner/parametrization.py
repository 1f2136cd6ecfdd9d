"""The parametrization and bias hook of structured pruning (PyTorch's
``torch.ao.pruning._experimental.pruner.parametrization``)."""
from __future__ import annotations

from .....nn.module import Module
from ...sparsifier.utils import module_contains_param

__all__ = ["FakeStructuredSparsity", "BiasHook", "module_contains_param"]


class FakeStructuredSparsity(Module):
    """``x -> mask[:, None, ...] * x``: a boolean mask of the *rows* (output channels) of a
    tensor. Like ``FakeSparsity``, its mask is kept out of ``state_dict`` (the sparsifier
    owns it) and is a non-persistent buffer.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.pruning._experimental.pruner import FakeStructuredSparsity
    >>> FakeStructuredSparsity(lucid.tensor([True, False]))(lucid.ones(2, 3))
    tensor([[1., 1., 1.],
            [0., 0., 0.]])
    """

    def __init__(self, mask):
        super().__init__()
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x):
        if self.mask.shape[0] != x.shape[0]:
            raise AssertionError(f"FakeStructuredSparsity: mask shape[0] ({self.mask.shape[0]}) must match x "
                                 f"shape[0] ({x.shape[0]})")
        return self.mask.reshape((-1,) + (1,) * (x.ndim - 1)) * x

    def state_dict(self, *args, **kwargs):
        return {}


class BiasHook:
    """The forward hook that adds a pruned layer's bias, kept aside as ``module._bias`` while
    the layer is parametrized (so the bias of a pruned channel can be propagated to the next
    layer). With ``prune_bias`` the pruned channels get no bias.

    PyTorch adds ``_bias.data`` (so the bias does not train while the model is prepared) and
    zeroes its pruned entries in place; here the bias is added as a differentiable
    ``_bias * mask``: the same values, and the kept entries keep training.
    """

    def __init__(self, parametrization, prune_bias):
        self.param = parametrization
        self.prune_bias = prune_bias

    def __call__(self, module, input, output):
        bias = getattr(module, "_bias", None)
        if bias is None:
            return output
        if self.prune_bias:
            bias = bias * self.param.mask.to(dtype=bias.dtype)
        return output + bias.reshape((1, -1) + (1,) * (output.ndim - 2))
