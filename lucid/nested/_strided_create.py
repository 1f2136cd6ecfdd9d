"""Constructors of strided nested tensors (``torch.nested``'s functions with ``layout=strided``).

See NOTE [Strided nested tensors] in ``lucid/nested/__init__.py``.
"""
from __future__ import annotations

from .._core.tensor import Tensor
from ._strided import StridedNestedTensor


def _components(name, tensor_list, dtype, device, copy):
    """The components as dense tensors of one dtype (the first one's, as PyTorch's) and device."""
    import lucid

    if isinstance(tensor_list, Tensor) or not isinstance(tensor_list, (list, tuple)):
        raise TypeError(f"{name}: expected a list of tensors, got {type(tensor_list).__name__}")
    comps = []
    for t in tensor_list:
        if not isinstance(t, Tensor):
            if not copy:
                raise TypeError(f"{name}: Expected a list of Tensors, got an element of type {type(t).__name__}")
            t = lucid.tensor(t, dtype=dtype, device=device)
        elif t.is_nested:
            raise RuntimeError(f"{name}: the components must be dense tensors, got a nested tensor")
        comps.append(t.detach() if copy else t)
    for i, c in enumerate(comps):
        if c.dim() != comps[0].dim():
            raise RuntimeError(f"{name}: All Tensors given to nested_tensor must have the same dimension. Found "
                               f"dimension {c.dim()} for Tensor at index {i} and dimension {comps[0].dim()} for "
                               "Tensor at index 0.")
    if len({str(c.device) for c in comps}) > 1:
        raise RuntimeError(f"{name}: all tensors in list must be on the same device")
    if dtype is None and comps:
        dtype = comps[0].dtype  # PyTorch casts every component to the first one's dtype, no promotion
    return [c.to(device=device, dtype=dtype) for c in comps], dtype


def _build(comps, dtype, device):
    import lucid

    if not comps:
        return StridedNestedTensor._make(lucid.empty(0, dtype=dtype, device=device), ())
    flat = [c.reshape(-1) for c in comps]
    buf = lucid.cat(flat) if len(flat) > 1 else flat[0]
    return StridedNestedTensor._make(buf, [tuple(c.shape) for c in comps])


def strided_nested_tensor(tensor_list, dtype, device, requires_grad):
    comps, dtype = _components("nested_tensor", tensor_list, dtype, device, True)
    nt = _build(comps, dtype, device)
    if not comps or len(comps) == 1:  # the one component's reshape may be a view of the caller's tensor
        nt = StridedNestedTensor._make(nt._buffer.clone(), nt._sizes)
    if requires_grad:
        nt.requires_grad_(True)
    return nt


def strided_as_nested_tensor(ts, dtype, device):
    if isinstance(ts, Tensor):
        if ts.dim() < 2:
            raise RuntimeError("as_nested_tensor: Expected tensor argument to have dim() > 1")
        if dtype is not None or device is not None:
            ts = ts.to(device=device, dtype=dtype)
        # each row is a component; the buffer is a view of ``ts`` where a reshape can be one
        return StridedNestedTensor._make(ts.reshape(-1), [tuple(ts.shape[1:])] * int(ts.shape[0]))
    comps, dtype = _components("as_nested_tensor", ts, dtype, device, False)
    if len(comps) == 1:
        comps = [comps[0].clone()]  # the memory is the nested tensor's own; the graph is kept
    return _build(comps, dtype, device)


def strided_narrow(tensor, dim, start, length):
    if isinstance(start, Tensor) or isinstance(length, Tensor):
        raise RuntimeError("narrow: start and length must be integers for the strided layout NT impl")
    if not isinstance(tensor, Tensor) or tensor.dim() < 2:
        raise RuntimeError("narrow: expected a dense tensor with at least 2 dims")
    if dim != 0:
        raise RuntimeError(f"narrow: only dim=0 supported for nested tensors, but got: {dim}")
    return strided_as_nested_tensor(tensor, None, None).narrow(0, int(start), int(length))
