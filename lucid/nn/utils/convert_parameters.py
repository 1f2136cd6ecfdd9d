"""Flatten parameters into one vector and back."""
from __future__ import annotations

from ..._core.backend import xp
from ..._core.tensor import Tensor

__all__ = ["parameters_to_vector", "vector_to_parameters"]


class _EmptyParametersError(RuntimeError, ValueError):
    """PyTorch raises ValueError (from ``cat``) where Lucid raised RuntimeError: both keep callers working."""


def _check_same_device(params, op):
    """PyTorch refuses parameters on several devices with a TypeError (before any copying)."""
    devices = {p.device for p in params}
    if len(devices) > 1:
        raise TypeError(f"{op}: found two parameters on different devices ({', '.join(sorted(map(str, devices)))}), "
                        "this is currently not supported")


def parameters_to_vector(parameters):
    """Concatenate the flattened parameters into one 1-D tensor (differentiable).

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils import parameters_to_vector
    >>> parameters_to_vector([lucid.ones(2, 2), lucid.zeros(1)]).shape
    (5,)
    """
    import lucid

    params = list(parameters)
    if not params:
        raise _EmptyParametersError("parameters_to_vector: expected a non-empty iterable of tensors")
    _check_same_device(params, "parameters_to_vector")
    return lucid.cat([p.reshape(-1) for p in params])


def vector_to_parameters(vec, parameters):
    """Copy consecutive slices of the 1-D ``vec`` into ``parameters`` (in place, no graph)."""
    if not isinstance(vec, Tensor):
        raise TypeError(f"vector_to_parameters: expected vec to be a Tensor, but got {type(vec).__name__}")
    if vec.ndim != 1:
        raise RuntimeError(f"vector_to_parameters: expected a 1-D vector, got shape {tuple(vec.shape)}")
    params = list(parameters)
    _check_same_device(params, "vector_to_parameters")
    total = sum(p.numel() for p in params)
    if total != vec.numel():
        raise RuntimeError(
            f"vector_to_parameters: vector has {vec.numel()} elements but the parameters need {total}"
        )
    data = vec._data
    pointer = 0
    for p in params:
        n = p.numel()
        # A copy in the parameter's dtype, on the vector's device (PyTorch's parameters take
        # views of ``vec``: its device).
        p._data = xp.array(data[pointer:pointer + n].reshape(p.shape), dtype=p.dtype)
        p._version[0] += 1
        pointer += n
