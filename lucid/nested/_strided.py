"""The strided ``NestedTensor``: PyTorch's default nested layout, ragged in any dims.

See NOTE [Strided nested tensors] in ``lucid/nested/__init__.py``.
"""
from __future__ import annotations

import math

from .._core.size import Size
from .._core.tensor import Tensor
from ._tensor import CarriedAutograd, _NestedData


def _prod(shape):
    return math.prod(int(n) for n in shape)


class StridedNestedTensor(CarriedAutograd, Tensor):
    """A batch of tensors of one rank whose sizes may differ in every dim (``layout=lucid.strided``).

    Stored as one flat ``buffer`` (the components' row-major values, one after the other) and
    the components' sizes; the buffer carries dtype, device and the autograd graph. Every
    public function called with one comes to :meth:`__torch_function__`
    (``_strided_ops.dispatch``). Build one with :func:`lucid.nested.nested_tensor`.
    """

    _buffer = None
    _sizes = ()
    _contig = True  # or the permutation of the component dims since the last row-major layout

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from ._strided_ops import dispatch

        return dispatch(func, args, kwargs or {})

    def __init__(self, *args, **kwargs):
        raise TypeError("NestedTensor: build one with lucid.nested.nested_tensor or as_nested_tensor")

    @staticmethod
    def _make(buffer, sizes, contiguous=True):
        """A nested tensor over the flat ``buffer`` holding components of ``sizes`` in order."""
        from .. import overrides

        overrides._activate()  # the protocol may have been switched off since the class was made
        nt = object.__new__(StridedNestedTensor)
        nt._buffer = buffer
        nt._sizes = tuple(tuple(int(n) for n in s) for s in sizes)
        nt._contig = contiguous
        # the dtype through the Tensor (a tracer of lucid.func has no _data to read)
        nt._data = _NestedData(buffer.shape, getattr(buffer.dtype, "dtype", None))
        nt._version = [0]
        return nt

    def _like(self, buffer):
        return StridedNestedTensor._make(buffer, self._sizes, self._contig)

    # ----------------------------------------------------------- components
    def unbind(self, dim=0):
        """The components as a tuple of dense tensors (views of the buffer)."""
        if dim not in (0, -self.dim()):
            raise RuntimeError(f"unbind: NestedTensor can only be unbound along dimension 0 got dimension {dim} "
                               "instead.")
        out, start = [], 0
        for s in self._sizes:
            n = _prod(s)
            out.append(self._buffer.narrow(0, start, n).view(s))
            start += n
        return tuple(out)

    def values(self):
        """The flat buffer: every component's values, row-major, one after another (PyTorch's
        ``values()`` of a contiguous strided nested tensor; gradients reach the nested tensor)."""
        return self._buffer

    def to_padded_tensor(self, padding, output_size=None):
        """A dense ``(B, *max sizes)`` tensor, each component padded with ``padding`` at the end of
        every dim (PyTorch's ``to_padded_tensor``; ``output_size`` may only pad further)."""
        from ._strided_ops import to_padded

        return to_padded(self, padding, output_size)

    def _nested_tensor_size(self):
        """The components' sizes as a ``(B, dim - 1)`` int64 tensor on the CPU (PyTorch's private
        accessor; metadata stays on the host whatever the device)."""
        import lucid

        return lucid.tensor([list(s) for s in self._sizes], dtype=lucid.int64, device="cpu").reshape(
            len(self._sizes), -1)

    def _nested_tensor_strides(self):
        """The components' row-major strides, ``(B, dim - 1)`` int64."""
        import lucid

        def strides(s):
            out, acc = [], 1
            for n in reversed(s):
                out.append(acc)
                acc *= n
            return out[::-1]
        return lucid.tensor([strides(s) for s in self._sizes], dtype=lucid.int64, device="cpu").reshape(
            len(self._sizes), -1)

    def _nested_tensor_storage_offsets(self):
        """Where each component starts in the buffer (int64)."""
        import lucid

        starts, acc = [], 0
        for s in self._sizes:
            starts.append(acc)
            acc += _prod(s)
        return lucid.tensor(starts, dtype=lucid.int64, device="cpu")

    # ----------------------------------------------------------- metadata
    def _regular(self, d):
        """The common size of component dim ``d`` (None where the components differ)."""
        sizes = {s[d] for s in self._sizes}
        return sizes.pop() if len(sizes) == 1 else None

    def size(self, dim=None):
        if dim is None:
            return self.shape
        nd = self.dim()
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"size(): argument 'dim' must be int, not {type(dim).__name__}")
        if not -nd <= dim < nd:
            raise IndexError(f"size: Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got "
                             f"{dim})")
        d = dim % nd
        if d == 0:
            return len(self._sizes)
        n = self._regular(d - 1)
        if n is None:
            raise RuntimeError(f"size: Given dimension {dim} is irregular and does not have a size.")
        return n

    @property
    def shape(self):
        nd = self.dim()
        sizes = [len(self._sizes)] + [self._regular(d) for d in range(nd - 1)] if self._sizes else [0]
        if None in sizes:
            ragged = [d for d, n in enumerate(sizes) if n is None]
            raise RuntimeError(f"shape: a strided nested tensor has irregular dims {ragged} with no size; use "
                               "size(dim) for the regular ones or _nested_tensor_size()")
        return Size(sizes)

    def stride(self, dim=None):
        raise RuntimeError("stride: a strided nested tensor has one stride per component; "
                           "use _nested_tensor_strides()")

    @property
    def ndim(self):
        return self.dim()

    def dim(self):
        return len(self._sizes[0]) + 1 if self._sizes else 1

    ndimension = dim

    @property
    def dtype(self):
        return self._buffer.dtype

    @property
    def device(self):
        return self._buffer.device

    @property
    def is_cpu(self):
        return self._buffer.is_cpu

    @property
    def is_cuda(self):
        return self._buffer.is_cuda

    @property
    def layout(self):
        from ..ops.tensor_surface_more import strided

        return strided

    @property
    def is_nested(self):
        return True

    def numel(self):
        return self._buffer.numel()

    nelement = numel

    def is_contiguous(self, memory_format=None):
        return self._contig is True

    def __len__(self):
        return len(self._sizes)

    def __iter__(self):
        return iter(self.unbind())

    # ----------------------------------------------------------- autograd (CarriedAutograd: the buffer's)
    def _grad_carrier(self):
        return self._buffer

    def _same_structure(self, other):
        return other._sizes == self._sizes

    @property
    def data(self):
        return self._like(self._buffer.detach())

    def retain_grad(self):
        self._buffer.retain_grad()

    def register_hook(self, hook):
        raise NotImplementedError("register_hook: not supported on nested tensors; hook the components instead")

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        if gradient is None:
            raise RuntimeError("backward: grad can be implicitly created only for scalar outputs")
        if not isinstance(gradient, StridedNestedTensor):
            raise RuntimeError("backward: Expected both self and other to be nested tensors. Self is nested. "
                               "While Other is not nested.")
        if gradient._sizes != self._sizes:
            raise RuntimeError(f"backward: the gradient's sizes {list(gradient._sizes)} differ from the "
                               f"tensor's {list(self._sizes)}")
        self._buffer.backward(gradient._buffer, retain_graph, create_graph, inputs)

    # ----------------------------------------------------------- conversions
    def numpy(self, *, force=False):
        raise RuntimeError("numpy: not supported for nested tensors; use .unbind() or .to_padded_tensor()")

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("numpy: not supported for nested tensors; use .unbind() or .to_padded_tensor()")

    def tolist(self):
        return [t.tolist() for t in self.unbind()]

    def item(self):
        raise RuntimeError("item: a nested tensor is not a one-element tensor")

    def __bool__(self):
        raise RuntimeError("bool: the truth value of a nested tensor is ambiguous")

    def __reduce_ex__(self, protocol):
        return (_rebuild, (self._buffer.detach(), self._sizes, self.requires_grad))

    def __repr__(self):
        # PyTorch's: each component as a dense tensor, indented, then the nested tensor's own flags
        def comp(t):
            text = repr(t.detach())
            if self.requires_grad:
                text = text[:-1] + ", requires_grad=True)"
            return "  " + text.replace("\n", "\n  ")
        tail = ""
        if self.grad_fn is not None:
            tail = f", grad_fn=<{self.grad_fn.name()}>"
        elif self.requires_grad:
            tail = ", requires_grad=True"
        body = ",\n".join(comp(t) for t in self.unbind())
        return f"nested_tensor([\n{body}\n]{tail})"

    __str__ = __repr__


def _rebuild(buffer, sizes, requires_grad):
    nt = StridedNestedTensor._make(buffer, sizes)
    if requires_grad:
        nt.requires_grad_()
    return nt
