"""``load_state_dict`` into and from DTensors (called by ``nn/utils/_load_state.py``).

PyTorch's rules (its ``param.copy_(value)`` and ``assign=True``): a DTensor value is copied
into a DTensor parameter after being moved to the parameter's placements; a plain value into
a DTensor parameter (or the reverse) is refused, since the copy mixes Tensor and DTensor;
with ``assign=True`` the module takes the value's layout (a plain value makes the parameter
plain again). Shapes are compared globally, so every rank reaches the same verdict and the
collectives of the moves stay matched.
"""
from __future__ import annotations

from ..._core.grad_mode import no_grad
from ..._core.tensor import Tensor
from ._api import DTensor

__all__ = ["checked_value", "Replace"]


class Replace:
    """``assign=True`` into or from a DTensor: the module's entry becomes ``value``."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


def _mixed(key, shape):
    return (f'While copying the parameter named "{key}", whose dimensions in the model are {shape} and whose '
            f"dimensions in the checkpoint are {shape}, an exception occurred: got mixed Tensor and DTensor; "
            "convert the value to a DTensor (distribute_tensor) or load with assign=True.")


def checked_value(key, value, target, assign):
    """``(array or Replace, None)`` or ``(None, error text)``, as ``_checked_value`` of ``_load_state``."""
    if not isinstance(value, Tensor):
        return None, f"value for {key} must be a Tensor or DTensor to load into a DTensor, got {type(value).__name__}."
    shape = tuple(target.shape)
    if tuple(value.shape) != shape:
        return None, (f"size mismatch for {key}: copying a param with shape {tuple(value.shape)} from "
                      f"checkpoint, the shape in current model is {shape}.")
    if assign:
        return Replace(_assigned(value, target)), None
    if not (isinstance(value, DTensor) and isinstance(target, DTensor)):
        return None, _mixed(key, shape)
    if value.device_mesh != target.device_mesh:
        return None, (f"value for {key} is on {value.device_mesh!r}, the module's DTensor on "
                      f"{target.device_mesh!r}.")
    if value.dtype.is_complex and not target.dtype.is_complex:
        return None, f"value for {key} is complex ({value.dtype}) but the module's tensor is {target.dtype}."
    try:
        with no_grad():
            local = value.detach().redistribute(target.device_mesh, target.placements)._local_tensor
    except RuntimeError as e:
        return None, f'While copying the parameter named "{key}", an exception occurred: {e}'
    return local.to(target.dtype)._data, None


def _assigned(value, target):
    """What ``assign=True`` puts in the module: a copy of ``value`` (Lucid's assign copies), a
    parameter again when ``target`` is one (with its ``requires_grad``), as PyTorch's."""
    from ...nn.parameter import Parameter

    with no_grad():
        copy = value.detach().clone()
    if isinstance(target, Parameter):
        return Parameter(copy, requires_grad=target.requires_grad)
    return copy
