"""Constructors of jagged nested tensors (``torch.nested``'s functions).

See NOTE [Nested tensors] in ``lucid/nested/__init__.py``.
"""
from __future__ import annotations

from .._core.tensor import Tensor, tensor_method
from ._tensor import NestedTensor, Structure, jagged


def _check_layout(name, layout):
    """The layout asked for: ``jagged`` or ``strided`` (PyTorch's default, also for None)."""
    from ..ops.tensor_surface_more import strided

    if layout is None or layout is strided:
        return strided
    if layout is jagged:
        return jagged
    raise RuntimeError(f"{name}: Specified layout is unsupported for nested tensors: {layout!r}")


def _offsets(lengths, device):
    import lucid

    out, total = [0], 0
    for n in lengths:
        total += n
        out.append(total)
    return lucid.tensor(out, dtype=lucid.int64, device=device)


def _ragged_axis(name, shapes):
    """The one component dim whose size differs (0 when none does), as PyTorch infers it."""
    if any(len(s) != len(shapes[0]) for s in shapes):
        raise RuntimeError(f"{name}: When constructing a nested tensor, all tensors in list must have the same dim")
    if not shapes[0]:
        raise RuntimeError(f"{name}: Cannot construct a nested tensor from a list of zero-dim tensors")
    differ = [d for d in range(len(shapes[0])) if len({s[d] for s in shapes}) > 1]
    if len(differ) > 1:
        raise RuntimeError(f"{name}: the jagged layout has one ragged dimension; the components differ in "
                           f"dims {differ} (shapes {[tuple(s) for s in shapes]})")
    return differ[0] if differ else 0


def _components(name, tensor_list, dtype, device, copy):
    import lucid

    if isinstance(tensor_list, Tensor) or not isinstance(tensor_list, (list, tuple)):
        raise TypeError(f"{name}: expected a list of tensors, got {type(tensor_list).__name__}")
    if not tensor_list:
        raise RuntimeError(f"{name}: Cannot construct a nested tensor from an empty tensor list")
    comps = []
    for t in tensor_list:
        if not isinstance(t, Tensor):
            t = lucid.tensor(t, dtype=dtype, device=device)
        elif copy:
            t = t.detach().clone()
        comps.append(t)
    if len({c.dtype for c in comps}) > 1:
        raise RuntimeError(f"{name}: When constructing a nested tensor, all tensors in list must have the same dtype")
    if len({str(c.device) for c in comps}) > 1:
        raise RuntimeError(f"{name}: all tensors in list must be on the same device")
    if dtype is not None or device is not None:
        comps = [c.to(device=device, dtype=dtype) for c in comps]
    return comps


def _from_components(name, comps):
    import lucid

    axis = _ragged_axis(name, [tuple(c.shape) for c in comps])
    values = lucid.cat(comps, dim=axis) if len(comps) > 1 else comps[0].view(tuple(comps[0].shape))
    struct = Structure(_offsets([int(c.shape[axis]) for c in comps], values.device))
    return NestedTensor._make(values, struct, axis + 1)


def nested_tensor(tensor_list, *, dtype=None, layout=None, device=None, requires_grad=False, pin_memory=False):
    """A nested tensor holding copies of ``tensor_list`` (PyTorch's ``torch.nested.nested_tensor``).

    Parameters
    ----------
    tensor_list : list of Tensor or nested lists
        The components, all of one rank. In the strided layout their sizes may differ in any
        dims; in the jagged layout in at most one (the ragged one).
    dtype, device : optional
        Cast and move the values (strided: the first component's dtype by default, as PyTorch's).
    layout : lucid.strided, lucid.jagged or None
        None means ``lucid.strided``, PyTorch's default.
    requires_grad : bool
        Make the values a leaf that records operations (``nt.grad`` is nested).
    pin_memory : bool
        Accepted for PyTorch's signature; nothing to pin.

    Returns
    -------
    Tensor
        A :class:`StridedNestedTensor` or a jagged :class:`NestedTensor`.

    Limitations
    -----------
    The result never shares memory with ``tensor_list``, and gradients do not flow back to it
    (use :func:`as_nested_tensor` for that), as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> nt = lucid.nested.nested_tensor([lucid.ones(3, 4, 5), lucid.ones(3, 6, 2)])
    >>> nt.layout, nt.dim(), nt.size(1), nt._nested_tensor_size()
    (lucid.strided, 4, 3, tensor([[3, 4, 5],
            [3, 6, 2]]))
    >>> jt = lucid.nested.nested_tensor([lucid.ones(2, 3), lucid.ones(4, 3)], layout=lucid.jagged)
    >>> jt.dim(), jt.size(0), jt.size(2), jt.offsets()
    (3, 2, 3, tensor([0, 2, 6]))
    >>> [tuple(t.shape) for t in jt.unbind()]
    [(2, 3), (4, 3)]
    """
    if _check_layout("nested_tensor", layout) is not jagged:
        from ._strided_create import strided_nested_tensor

        return strided_nested_tensor(tensor_list, dtype, device, requires_grad)
    nt = _from_components("nested_tensor", _components("nested_tensor", tensor_list, dtype, device, True))
    if requires_grad:
        nt.requires_grad_(True)
    return nt


def as_nested_tensor(ts, dtype=None, device=None, layout=None):
    """A nested tensor whose values are built from ``ts`` with autograd kept to it.

    ``ts`` is a list of tensors (the values are their concatenation, so gradients reach each
    component) or a dense ``(B, L, ...)`` tensor (each row a sequence of length ``L``; in the
    strided layout, the default, the buffer is a view of ``ts`` where a reshape can be one).
    A nested ``ts`` comes back as it is (moved or cast when asked) where ``layout`` is None or
    its own layout.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.ones(2, 2, requires_grad=True)
    >>> nt = lucid.nested.as_nested_tensor([a, lucid.ones(1, 3)])
    >>> nt.to_padded_tensor(0.0).sum().backward()
    >>> a.grad
    tensor([[1., 1.],
            [1., 1.]])
    >>> jt = lucid.nested.as_nested_tensor([a, lucid.ones(1, 2)], layout=lucid.jagged)
    >>> jt.values().shape
    (3, 2)
    """
    want = _check_layout("as_nested_tensor", None if layout is None else layout)
    if isinstance(ts, Tensor) and ts.is_nested:
        if layout is not None and want is not ts.layout:
            raise RuntimeError("as_nested_tensor: Converting between nested tensor layouts is not supported")
        return ts if dtype is None and device is None else ts.to(device=device, dtype=dtype)
    if want is not jagged:
        from ._strided_create import strided_as_nested_tensor

        return strided_as_nested_tensor(ts, dtype, device)
    if isinstance(ts, Tensor):
        if ts.dim() < 2:
            raise RuntimeError(f"as_nested_tensor: expected a tensor with a batch and a sequence dim, got "
                               f"shape {tuple(ts.shape)}")
        if dtype is not None or device is not None:
            ts = ts.to(device=device, dtype=dtype)
        b, n = int(ts.shape[0]), int(ts.shape[1])
        values = ts.reshape((b * n,) + tuple(ts.shape[2:]))
        return NestedTensor._make(values, Structure(_offsets([n] * b, values.device)), 1)
    return _from_components("as_nested_tensor", _components("as_nested_tensor", ts, dtype, device, False))


def nested_tensor_from_jagged(values, offsets=None, lengths=None, jagged_dim=None, min_seqlen=None, max_seqlen=None):
    """A nested tensor viewing ``values`` split at ``offsets`` (PyTorch's jagged constructor).

    Parameters
    ----------
    values : Tensor
        The packed sequences; gradients of the result reach it.
    offsets : Tensor, optional
        ``B + 1`` integer row boundaries; made from ``lengths`` when omitted.
    lengths : Tensor, optional
        With ``offsets``: each sequence's length, leaving holes between sequences.
    jagged_dim : int, optional
        The ragged dim of the result (default 1); values dim ``jagged_dim - 1`` is packed.

    Examples
    --------
    >>> import lucid
    >>> nt = lucid.nested.nested_tensor_from_jagged(lucid.arange(5.), lucid.tensor([0, 2, 5]))
    >>> nt.unbind()
    (tensor([0., 1.]), tensor([2., 3., 4.]))
    """
    import lucid

    name = "nested_tensor_from_jagged"
    if not isinstance(values, Tensor) or isinstance(values, NestedTensor):
        raise TypeError(f"{name}: values must be a dense tensor, got {type(values).__name__}")
    if offsets is None:
        if lengths is None:
            raise RuntimeError(f"{name}: At least one of offsets or lengths is required.")
        offsets = lucid.cat([lucid.zeros(1, dtype=lengths.dtype, device=lengths.device), lengths.cumsum(0)])
        lengths = None
    jagged_dim = 1 if jagged_dim is None else int(jagged_dim)
    if jagged_dim < 1:
        raise ValueError(f"{name}: Expected jagged_dim >=1, but got {jagged_dim}.")
    if jagged_dim > values.dim():
        raise ValueError(f"{name}: jagged_dim {jagged_dim} is out of range for values of shape {tuple(values.shape)}")
    for what, t in (("offsets", offsets), ("lengths", lengths)):
        if t is None:
            continue
        if not isinstance(t, Tensor) or t.dtype.kind not in "iu" or t.dim() != 1:
            raise TypeError(f"{name}: {what} must be a 1-D integer tensor")
        if t.device != values.device:
            raise RuntimeError(f"{name}: {what} is on {t.device} but values are on {values.device}")
    return NestedTensor._make(values.view(tuple(values.shape)), Structure(offsets, lengths), jagged_dim)


def narrow(tensor, dim, start, length, layout=None):
    """Sequence ``i`` is ``tensor[i, start[i]:start[i] + length[i]]``, as a jagged view of ``tensor``.

    With ``layout=lucid.strided`` (the default, as PyTorch's) only ``dim=0`` and integer
    ``start``/``length`` are accepted: rows ``start .. start + length`` as components.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(8.).reshape(2, 4)
    >>> nt = lucid.nested.narrow(x, 1, lucid.tensor([0, 1]), lucid.tensor([3, 2]), layout=lucid.jagged)
    >>> nt.unbind()
    (tensor([0., 1., 2.]), tensor([5., 6.]))
    """
    import lucid

    if _check_layout("narrow", layout) is not jagged:
        from ._strided_create import strided_narrow

        return strided_narrow(tensor, dim, start, length)
    if not isinstance(tensor, Tensor) or tensor.dim() < 2:
        raise RuntimeError("narrow: expected a dense tensor with at least 2 dims")
    if dim != 1:
        raise RuntimeError(f"narrow: jagged layout only supports dim=1, got {dim}")
    b, n = int(tensor.shape[0]), int(tensor.shape[1])
    dev = tensor.device
    start = start if isinstance(start, Tensor) else lucid.full((b,), int(start), dtype=lucid.int64, device=dev)
    length = length if isinstance(length, Tensor) else lucid.full((b,), int(length), dtype=lucid.int64, device=dev)
    start, length = start.to(lucid.int64), length.to(lucid.int64)
    first = lucid.arange(b, dtype=lucid.int64, device=dev) * n + start
    offsets = lucid.cat([first, first[-1:] + length[-1:]])
    values = tensor.reshape((b * n,) + tuple(tensor.shape[2:]))
    return NestedTensor._make(values, Structure(offsets, length), 1)


def masked_select(tensor, mask):
    """The elements of ``tensor`` where ``mask`` is True, one sequence per row of the last dim.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.).reshape(2, 3)
    >>> m = lucid.tensor([[True, False, True], [False, False, True]])
    >>> lucid.nested.masked_select(x, m).unbind()
    (tensor([0., 2.]), tensor([5.]))
    """
    import lucid

    if not isinstance(tensor, Tensor) or not isinstance(mask, Tensor) or mask.dtype != lucid.bool:
        raise TypeError("masked_select: expected a tensor and a boolean mask")
    if tensor.dim() < 2:
        raise RuntimeError("masked_select: expected a tensor with at least 2 dims")
    mask = mask.expand(tuple(tensor.shape))
    values = tensor[mask]
    lengths = mask.sum(-1).reshape(-1)
    offsets = lucid.cat([lucid.zeros(1, dtype=lucid.int64, device=tensor.device), lengths.cumsum(0)])
    return NestedTensor._make(values, Structure(offsets), 1)


def to_padded_tensor(input, padding, output_size=None):
    """``input.to_padded_tensor(padding, output_size)`` (PyTorch's ``torch.nested.to_padded_tensor``).

    Examples
    --------
    >>> import lucid
    >>> nt = lucid.nested.nested_tensor([lucid.ones(1), lucid.ones(2)], layout=lucid.jagged)
    >>> lucid.nested.to_padded_tensor(nt, 0.0)
    tensor([[1., 0.],
            [1., 1.]])
    """
    if not isinstance(input, Tensor) or not input.is_nested:
        raise NotNestedError(f"to_padded_tensor: expected a nested tensor, got a {type(input).__name__} that is "
                             "not nested")
    return input.to_padded_tensor(padding, output_size)


class NotNestedError(NotImplementedError, TypeError):
    """PyTorch's NotImplementedError for a dense tensor; a TypeError for Lucid's older callers."""


@tensor_method("to_padded_tensor")
def _dense_to_padded_tensor(self, padding, output_size=None):
    """``Tensor.to_padded_tensor``: defined for nested tensors only (their classes override it)."""
    raise NotNestedError("to_padded_tensor: expected a nested tensor, got a dense tensor (PyTorch has no "
                         "to_padded_tensor kernel for dense tensors)")
