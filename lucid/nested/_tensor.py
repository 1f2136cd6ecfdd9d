"""The jagged ``NestedTensor``: its layout, ragged size symbol, structure and the class itself.

See NOTE [Nested tensors] in ``lucid/nested/__init__.py``.
"""
from __future__ import annotations

import itertools
import weakref

from .._core.no_values import NoValues
from .._core.size import Size
from .._core.tensor import Tensor
from ..ops.tensor_surface_more import layout as _layout

NOT_HERE = "nested tensors are not supported here; use .values(), .unbind() or .to_padded_tensor()"


class _NestedLayout(_layout):
    """The jagged layout singleton (pickled by name from this module)."""

    __slots__ = ()


jagged = _NestedLayout("jagged")


# ------------------------------------------------------------------ the ragged size

class NestedInt:
    """The size of a ragged dimension: a symbol (``j1``, ``j2`` ...), one per offsets tensor.

    PyTorch's nested ints: two nested tensors have the same ragged size exactly when they
    were built on the same offsets (so ``nt + nt.relu()`` works and two independently built
    nested tensors do not combine). It equals only itself and has no integer value.
    """

    __slots__ = ("_n", "__weakref__")
    _counter = itertools.count(1)

    def __init__(self):
        self._n = next(NestedInt._counter)

    def __repr__(self):
        return f"j{self._n}"

    __str__ = __repr__

    def __eq__(self, other):
        return self is other

    def __ne__(self, other):
        return self is not other

    def __hash__(self):
        return hash(("nested int", self._n))

    def __index__(self):
        raise TypeError(f"int: the ragged size {self!r} of a nested tensor has no single integer value")

    __int__ = __index__


_SYMBOLS = {}  # id(offsets tensor) -> (weakref to it, NestedInt)


def nested_int_for(offsets):
    """The ragged size symbol of ``offsets`` (made on first use, kept while it lives)."""
    known = _SYMBOLS.get(id(offsets))
    if known is not None and known[0]() is offsets:
        return known[1]
    sym = NestedInt()
    key = id(offsets)
    _SYMBOLS[key] = (weakref.ref(offsets, lambda _r, key=key: _SYMBOLS.pop(key, None)), sym)
    return sym


class NestedSize(Size):
    """``nt.shape``: a :class:`lucid.Size` whose ragged entry is a :class:`NestedInt`."""

    __slots__ = ()

    def __new__(cls, sizes=()):
        return tuple.__new__(cls, tuple(sizes))

    def __getitem__(self, item):
        out = tuple.__getitem__(self, item)
        return tuple.__new__(NestedSize, out) if isinstance(item, slice) else out

    def __reduce__(self):
        raise TypeError("pickle: a nested tensor's size can't be pickled")

    def numel(self):
        raise RuntimeError("numel: a nested tensor's size has a ragged dimension; call nt.numel()")


# ------------------------------------------------------------------ structure

class Structure:
    """What nested tensors built from one another share: offsets, lengths and the symbol.

    Index tensors derived from them (the batch index of each row, the padding gather) are
    cached here, on the offsets' device, so a chain of ops on one batch builds them once.
    """

    __slots__ = ("offsets", "lengths", "symbol", "_cache")

    def __init__(self, offsets, lengths=None, symbol=None):
        self.offsets = offsets
        self.lengths = lengths
        # with holes PyTorch keys the symbol on the lengths (distinct offsets may share them)
        self.symbol = symbol if symbol is not None else nested_int_for(offsets if lengths is None else lengths)
        self._cache = {}

    @property
    def batch(self):
        return int(self.offsets.shape[0]) - 1

    def cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def seq_lengths(self):
        """The lengths as a tensor on the offsets' device."""
        if self.lengths is not None:
            return self.lengths
        return self.cached("lens", lambda: self.offsets[1:] - self.offsets[:-1])

    def host_lengths(self):
        """The lengths as Python ints (one explicit read of the device)."""
        return self.cached("host_lens", lambda: [int(n) for n in self.seq_lengths().tolist()])

    def host_starts(self):
        return self.cached("host_starts", lambda: [int(n) for n in self.offsets[:-1].tolist()])

    def max_length(self):
        lens = self.host_lengths()
        return max(lens) if lens else 0

    def moved(self, device):
        """The same structure (same symbol) with its index tensors on ``device``."""
        lengths = None if self.lengths is None else self.lengths.to(device)
        return Structure(self.offsets.to(device), lengths, self.symbol)


# ------------------------------------------------------------------ the stand-in array

class _NestedData(NoValues):
    """A nested tensor's ``_data``: the packed values' shape and dtype, no values."""

    __slots__ = ()
    message = NOT_HERE
    kind = "nested tensor values"


# ------------------------------------------------------------------ autograd of both layouts

class CarriedAutograd:
    """Autograd of a nested tensor is that of the dense tensor carrying its graph (the jagged
    layout's values, the strided layout's buffer; ``_grad_carrier()``): ``requires_grad``,
    ``is_leaf``, ``grad_fn`` and ``.grad`` (rebuilt on this structure by ``_like``) read it, and
    ``lucid.autograd.grad`` differentiates it (``_grad_wrap``). A class defines
    ``_grad_carrier`` and ``_same_structure(other)``."""

    __slots__ = ()

    @property
    def requires_grad(self):
        return self._grad_carrier().requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        try:
            self._grad_carrier().requires_grad = flag
        except RuntimeError as e:
            raise RuntimeError(str(e)) from None

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self):
        return self._grad_carrier().is_leaf

    @property
    def grad_fn(self):
        return self._grad_carrier().grad_fn

    @grad_fn.setter
    def grad_fn(self, value):
        if value is not None:
            raise RuntimeError("grad_fn: can't set the grad_fn of a nested tensor")

    @property
    def grad(self):
        g = self._grad_carrier()._grad
        return None if g is None else self._like(g)

    @grad.setter
    def grad(self, value):
        if value is None:
            self._grad_carrier()._grad = None
            return
        if type(value) is not type(self) or not self._same_structure(value):
            raise RuntimeError("grad: assigned grad must be a nested tensor of the same structure")
        self._grad_carrier()._grad = value._grad_carrier()

    def _grad_wrap(self, g):
        return self._like(g)


# ------------------------------------------------------------------ the tensor

class NestedTensor(CarriedAutograd, Tensor):
    """A batch of tensors whose dim ``1`` (the ragged dim) differs, in PyTorch's jagged layout.

    Stored as ``values()`` of shape ``(sum of lengths, *rest)`` and ``offsets()`` (``B + 1``
    row boundaries), with optional ``lengths()`` when the rows have holes. Every public
    function called with one comes to :meth:`__torch_function__`, which maps it over the
    values (NOTE [Nested tensors]). Build one with :func:`lucid.nested.nested_tensor`.
    """

    _values = None
    _struct = None
    _ragged_idx = 1

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from ._ops import dispatch

        return dispatch(func, args, kwargs or {})

    def __init__(self, *args, **kwargs):
        raise TypeError("NestedTensor: build one with lucid.nested.nested_tensor, as_nested_tensor or "
                        "nested_tensor_from_jagged")

    @staticmethod
    def _make(values, struct, ragged_idx=1):
        """A nested tensor over ``values`` (the ragged dim at values dim ``ragged_idx - 1``)."""
        from .. import overrides

        overrides._activate()  # the protocol may have been switched off since the class was made
        nt = object.__new__(NestedTensor)
        nt._values = values
        nt._struct = struct
        nt._ragged_idx = ragged_idx
        nt._data = _NestedData(values.shape, getattr(values.dtype, "dtype", None))  # a tracer has no _data
        nt._version = [0]
        return nt

    def _like(self, values, ragged_idx=None):
        return NestedTensor._make(values, self._struct, self._ragged_idx if ragged_idx is None else ragged_idx)

    # ----------------------------------------------------------- components
    def values(self):
        """The packed values, ``(sum of lengths, *rest)`` (a view: gradients reach this tensor)."""
        return self._values

    def offsets(self):
        """The ``B + 1`` row boundaries of the sequences in :meth:`values` (int64)."""
        return self._struct.offsets

    def lengths(self):
        """Each sequence's length when the rows have holes (``narrow``, ``lengths=``), else None."""
        return self._struct.lengths

    def unbind(self, dim=0):
        """The components as a tuple of dense tensors (views of the values)."""
        if dim not in (0, -self.dim()):
            raise RuntimeError(f"unbind: only dim=0 is supported for nested tensors, got {dim}")
        axis = self._ragged_idx - 1
        vals = self._values
        return tuple(vals.narrow(axis, s, n)
                     for s, n in zip(self._struct.host_starts(), self._struct.host_lengths()))

    def to_padded_tensor(self, padding, output_size=None):
        """A dense tensor, each sequence padded with ``padding`` to the longest (or ``output_size``)."""
        from ._ops import to_padded

        return to_padded(self, padding, output_size)

    # ----------------------------------------------------------- metadata
    @property
    def shape(self):
        rest = list(self._values.shape)
        rest[self._ragged_idx - 1] = self._struct.symbol
        return NestedSize([self._struct.batch] + rest)

    def size(self, dim=None):
        s = self.shape
        return s if dim is None else s[dim]

    @property
    def ndim(self):
        return self._values.ndim + 1

    def dim(self):
        return self._values.ndim + 1

    @property
    def dtype(self):
        return self._values.dtype

    @property
    def device(self):
        return self._values.device

    @property
    def is_cpu(self):
        return self._values.is_cpu

    @property
    def is_cuda(self):
        return self._values.is_cuda

    @property
    def layout(self):
        return jagged

    @property
    def is_nested(self):
        return True

    def numel(self):
        return self._values.numel()

    nelement = numel

    def is_contiguous(self, memory_format=None):
        return self._struct.lengths is None and self._ragged_idx == 1 and self._values.is_contiguous()

    def __len__(self):
        return self._struct.batch

    def __iter__(self):
        return iter(self.unbind())

    # ----------------------------------------------------------- autograd (CarriedAutograd)
    def _grad_carrier(self):
        return self._values

    def _same_structure(self, other):
        return other._struct.symbol is self._struct.symbol

    @property
    def data(self):
        return self._like(self._values.detach())

    def retain_grad(self):
        self._values.retain_grad()

    def register_hook(self, hook):
        raise NotImplementedError("register_hook: not supported on nested tensors; hook .values() instead")

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        if gradient is None:
            raise RuntimeError("backward: grad can be implicitly created only for scalar outputs; "
                               "pass a nested gradient of the same structure")
        if not isinstance(gradient, NestedTensor):
            raise TypeError("backward: the gradient of a nested tensor must be a nested tensor")
        self._values.backward(gradient._values, retain_graph, create_graph, inputs)

    # ----------------------------------------------------------- conversions
    def numpy(self, *, force=False):
        raise RuntimeError("numpy: not supported for nested tensors; use .values() or .to_padded_tensor()")

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("numpy: not supported for nested tensors; use .values() or .to_padded_tensor()")

    def tolist(self):
        raise RuntimeError("tolist: not supported for nested tensors; use [t.tolist() for t in nt.unbind()]")

    def item(self):
        raise RuntimeError("item: a nested tensor is not a one-element tensor")

    def __bool__(self):
        raise RuntimeError("bool: the truth value of a nested tensor is ambiguous")

    def __reduce_ex__(self, protocol):
        lengths = self._struct.lengths
        return (_rebuild, (self._values.detach(), self._struct.offsets,
                           None if lengths is None else lengths, self._ragged_idx, self.requires_grad))

    def __repr__(self):
        parts = [f"size={tuple(self.shape)}".replace("'", ""), f"offsets={self._struct.offsets!r}"]
        if self.grad_fn is not None:
            parts.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            parts.append("requires_grad=True")
        parts.append(f"contiguous={self.is_contiguous()}")
        return "NestedTensor(" + ", ".join(parts) + ")"

    __str__ = __repr__


def _rebuild(values, offsets, lengths, ragged_idx, requires_grad):
    from ._create import nested_tensor_from_jagged

    nt = nested_tensor_from_jagged(values, offsets, lengths, jagged_dim=ragged_idx)
    if requires_grad:
        nt.requires_grad_()
    return nt
