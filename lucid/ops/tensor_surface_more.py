"""The last Tensor methods PyTorch code calls, after :mod:`lucid.ops.tensor_surface`; each is
attached to :class:`Tensor` only where no other module defined the name. Five groups:

* Python protocols: ``in`` (``__contains__``), ``reversed``, ``//=`` and ``%=`` in place, the
  Python 2 names PyTorch still has (``__div__`` ...), and ``__cuda_array_interface__`` (CUDA
  tensors only, so ``hasattr`` is False elsewhere, as in PyTorch);
* queries: the device flags (``is_meta``, ``is_mps`` ...), the flags of tensor kinds Lucid
  does not have (``is_sparse`` ...: always False; ``is_quantized`` and the ``q_*`` queries of
  quantized tensors, which refuse on a dense tensor), ``layout``, ``output_nr``,
  ``dim_order``, ``is_set_to``, ``const_data_ptr``;
* method forms and legacy constructors: ``hardshrink``, ``prelu``, ``orgqr``, ``unsafe_split``
  and kin (also top-level, as in PyTorch), ``new``, ``new_empty_strided``, ``as_subclass``,
  ``module_load``, ``to_dense``, the deprecated out-of-place ``resize``/``resize_as``, and the
  linear-algebra methods PyTorch removed (``eig`` ...), which raise PyTorch's migration advice;
* Python callables on each element: ``apply_``, ``map_``, ``map2_`` (CPU only, as PyTorch);
* storages: ``untyped_storage()``, the deprecated ``storage()``, and ``set_``, NOTE [Set_].
"""
from __future__ import annotations

import math
import numbers
import operator
import warnings

import numpy as np

from .._core import backend
from .._core.dtypes import as_lucid
from .._core.primitive import autocast_composite
from .._core.tensor import Tensor
from .inplace import BEFORE_MUTATION, _bump, _check_writeable
from .tensor_surface import _renamed, _size_args
from .memory_format import _BY_NAME as _FORMATS_BY_NAME, as_format, contiguous_format, is_contiguous_strides
from .memory_format import channels_last as _channels_last
from .numpy_aliases import numpy_axis


def _lucid(name):
    import lucid

    return getattr(lucid, name)


def _attach(*names):
    """Decorator: attach to :class:`Tensor` under ``names`` unless an op module already has."""

    def deco(fn):
        for n in names:
            if not hasattr(Tensor, n):
                setattr(Tensor, n, fn)
        return fn

    return deco


def _alias(t):
    """A new tensor object viewing all of ``t`` (PyTorch's ``alias``): its memory, version
    counter and gradient path. Identity views (``t[...]``, ``t.view(t.shape)``) return ``t``
    itself in Lucid, so this goes through a new leading dim and back."""
    return t[None][0]


def _call_as(name, fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, its errors reported under ``name``."""
    try:
        return fn(*args, **kwargs)
    except (RuntimeError, ValueError, IndexError) as e:
        raise _renamed(name, e) from None


# ------------------------------------------------------------------ Python protocols


@_attach("__contains__")
def _contains(self, element):
    """``element in x``: whether any element of ``x`` equals ``element`` (a number or a tensor
    broadcast against ``x``).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1, 2], [3, 4]])
    >>> 3 in x, 5 in x, lucid.tensor([3, 9]) in x
    (True, False, True)
    """
    if isinstance(element, (Tensor, numbers.Number)):
        return bool((element == self).any().item())
    raise RuntimeError(f"__contains__: Tensor.__contains__ only supports Tensor or scalar, but you passed in a "
                       f"{type(element)}.")


@_attach("__reversed__")
def _reversed(self):
    """``reversed(x)``: ``x`` flipped along dim 0 (a 0-d tensor is returned as is), as PyTorch.

    Examples
    --------
    >>> import lucid
    >>> reversed(lucid.tensor([[1, 2], [3, 4]]))
    tensor([[3, 4],
            [1, 2]])
    """
    return self if self.ndim == 0 else self.flip(0)


def _ifloordiv(self, other):  # x //= y changes x, as in PyTorch (not x = x // y)
    return self.floor_divide_(other)


def _imod(self, other):
    return self.remainder_(other)


for _name, _fn in (("__ifloordiv__", _ifloordiv), ("__imod__", _imod), ("__div__", Tensor.__truediv__),
                   ("__rdiv__", Tensor.__rtruediv__), ("__idiv__", Tensor.__itruediv__),
                   ("__long__", Tensor.__int__), ("__nonzero__", Tensor.__bool__)):
    _attach(_name)(_fn)


def _cuda_array_interface(self):
    if self.device.type != "cuda":
        # AttributeError, so hasattr(cpu_tensor, "__cuda_array_interface__") is False
        raise AttributeError(f"__cuda_array_interface__: Can't get __cuda_array_interface__ on a non-CUDA tensor "
                             f"(device {self.device}). If CUDA data is required use tensor.cuda() to copy the "
                             "tensor to device memory.")
    if self._rg:
        raise RuntimeError("__cuda_array_interface__: Can't get __cuda_array_interface__ on a tensor that requires "
                           "grad. If gradients aren't required, use tensor.detach().")
    return self._data.__cuda_array_interface__  # CuPy's: the same memory, numba/CuPy/PyTorch read it


if not hasattr(Tensor, "__cuda_array_interface__"):
    Tensor.__cuda_array_interface__ = property(
        _cuda_array_interface, doc="The CUDA array interface of a CUDA tensor's memory (zero-copy exchange).")


# --------------------------------------------------------------------------- queries


def _device_flag(name):
    return property(lambda self: self.device.type == name, doc=f"Whether the tensor is on a {name!r} device.")


for _name in ("meta", "mps", "xpu", "xla", "ipu", "mtia", "maia", "vulkan"):
    if not hasattr(Tensor, f"is_{_name}"):
        setattr(Tensor, f"is_{_name}", _device_flag(_name))

# Kinds of tensor Lucid does not have: every Lucid tensor is dense and strided.
for _name in ("is_sparse", "is_sparse_csr", "is_nested", "is_mkldnn"):
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, property(lambda self: False, doc="Always False: Lucid tensors are dense and strided."))
# Quantized tensors are their own subclass (NOTE [Quantized tensors] in lucid/_core/quantized.py),
# which overrides these; on a dense tensor the queries refuse as PyTorch's (no CPU kernel).
if not hasattr(Tensor, "is_quantized"):
    Tensor.is_quantized = False


def _not_quantized(name):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"{name}: expected a quantized tensor, got a dense {self.dtype} tensor "
                                  "(make one with lucid.quantize_per_tensor)")
    method.__name__ = name
    method.__doc__ = f"PyTorch's ``Tensor.{name}`` of a quantized tensor; a dense tensor raises NotImplementedError."
    return method


for _name in ("int_repr", "q_scale", "q_zero_point", "q_per_channel_scales", "q_per_channel_zero_points",
              "q_per_channel_axis", "qscheme"):
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, _not_quantized(_name))


# A dense tensor's sparse accessors answer as PyTorch's: no sparse dimensions, all dense, and the
# layout-specific parts refuse (the sparse subclasses in lucid/sparse override every one).
_SPARSE_PARTS = {"indices": "sparse coordinate", "values": "sparse", "coalesce": "sparse coordinate",
                 "is_coalesced": "sparse coordinate", "crow_indices": "sparse row compressed",
                 "col_indices": "sparse row compressed", "ccol_indices": "sparse column compressed",
                 "row_indices": "sparse column compressed"}


_LAYOUT_NAMES = {"strided": "Strided", "sparse_coo": "Sparse", "sparse_csr": "SparseCsr", "sparse_csc": "SparseCsc",
                 "sparse_bsr": "SparseBsr", "sparse_bsc": "SparseBsc"}  # as PyTorch's messages name them


def _not_sparse(name, layout):
    def method(self):
        got = str(self.layout).rsplit(".", 1)[-1]
        raise RuntimeError(f"{name} expected {layout} tensor layout but got {_LAYOUT_NAMES.get(got, got)}")
    method.__name__ = name
    method.__doc__ = f"PyTorch's ``Tensor.{name}`` of a sparse tensor; a dense tensor raises RuntimeError."
    return method


for _name, _layout in _SPARSE_PARTS.items():
    if not hasattr(Tensor, _name):
        setattr(Tensor, _name, _not_sparse(_name, _layout))
if not hasattr(Tensor, "sparse_dim"):
    Tensor.sparse_dim = lambda self: 0
    Tensor.sparse_dim.__doc__ = "0: a dense tensor has no sparse dimensions (as PyTorch)."
if not hasattr(Tensor, "dense_dim"):
    Tensor.dense_dim = lambda self: self.ndim
    Tensor.dense_dim.__doc__ = "``ndim``: every dimension of a dense tensor is dense (as PyTorch)."


@_attach("dequantize")
def dequantize(self):
    """The tensor itself if it is floating point, else a float32 copy (PyTorch's
    ``Tensor.dequantize`` of a dense tensor; quantized tensors override it).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).dequantize()
    tensor([1., 2.])
    """
    return self if self.dtype.kind == "f" else self.float()


@_attach("is_distributed")
def is_distributed(self):
    """Always False, as PyTorch's (a legacy query).

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2).is_distributed()
    False
    """
    return False


class layout:
    """How a tensor's elements are laid out; Lucid has one, :data:`strided` (PyTorch's
    ``torch.layout``/``torch.strided``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ops.tensor_surface_more import strided
    >>> lucid.zeros(2).layout, lucid.zeros(2).layout is strided
    (lucid.strided, True)
    """

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"lucid.{self.name}"

    def __reduce__(self):
        return self.name  # the module-level singleton


strided = layout("strided")
if not hasattr(Tensor, "layout"):
    Tensor.layout = property(lambda self: strided, doc="The memory layout: always ``strided``.")
if not hasattr(Tensor, "output_nr"):
    Tensor.output_nr = property(lambda self: self._out_idx,
                                doc="Which output of its ``grad_fn`` node this tensor is (0 for leaves).")
if not hasattr(Tensor, "const_data_ptr"):
    Tensor.const_data_ptr = Tensor.data_ptr

# dim_order: PyTorch's logical-to-physical permutation (torch._prims_common) for one tensor. A
# comparison is a tie (0) where a stride is 0, or strides and sizes are equal; the insertion sort
# keeps the given order there.
def _memory_format(fmt):
    """A memory format of ``ambiguity_check``: a lucid or torch ``memory_format``, or its name."""
    if isinstance(fmt, str) and fmt.rpartition(".")[2] in _FORMATS_BY_NAME:
        return _FORMATS_BY_NAME[fmt.rpartition(".")[2]]
    try:
        return as_format(fmt, "dim_order")
    except TypeError:
        raise TypeError("dim_order: The ambiguity_check argument must be a bool or a list of memory formats.") from None


def _is_contiguous_as(shape, stride, fmt):  # See NOTE [Memory formats]
    return is_contiguous_strides(shape, stride, fmt)


def _ge(a, b):
    return b == 0 or (a != 0 and (a >= b or a % b == 0))


def _should_swap(shape, stride, a, b):
    sa, sb = stride[a], stride[b]
    if sa == 0 or sb == 0:
        return 0
    if sa == sb:
        return 0 if _ge(shape[b], shape[a]) else 1
    if _ge(sb, sa):
        return -1
    return 1 if _ge(sa, sb) else 0


def _logical_to_physical(shape, stride, check):
    n = len(shape)
    if n <= 1:
        return list(range(n)), False
    contiguous = _is_contiguous_as(shape, stride, contiguous_format)
    channels_last = _is_contiguous_as(shape, stride, _channels_last)
    if contiguous and not channels_last:
        return list(range(n)), False
    if channels_last and not contiguous:
        return [0, *range(2, n), 1], False
    perm = list(reversed(range(n)))  # sorted back to front, reversed on return
    for i in range(1, n):
        d1 = i
        for d0 in reversed(range(i)):
            c = _should_swap(shape, stride, perm[d0], perm[d1])
            if c > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif c < 0:
                break
    ambiguous = check and any(_should_swap(shape, stride, perm[i], perm[i + 1]) != -1 for i in range(n - 1))
    return list(reversed(perm)), ambiguous


@_attach("dim_order")
def dim_order(self, *, ambiguity_check=False):
    """The dims from outermost to innermost in memory (PyTorch's ``dim_order``).

    Parameters
    ----------
    ambiguity_check : bool or list of memory formats
        True: raise where size-1 dims or equal strides allow several orders. A list of
        formats (``lucid.contiguous_format``, ``lucid.channels_last`` ..., their names, or a
        ``torch.memory_format``, read by its name): raise unless exactly one of them fits.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2, 3, 5, 7)
    >>> x.dim_order(), x.transpose(1, 2).dim_order(), x.permute(0, 2, 3, 1).contiguous().dim_order()
    ((0, 1, 2, 3), (0, 2, 1, 3), (0, 1, 2, 3))
    >>> x.permute(0, 2, 3, 1).contiguous().permute(0, 3, 1, 2).dim_order()
    (0, 2, 3, 1)
    """
    if not isinstance(ambiguity_check, bool):
        if not isinstance(ambiguity_check, list):
            raise TypeError("dim_order: The ambiguity_check argument must be a bool or a list of memory formats.")
        formats = [_memory_format(f) for f in ambiguity_check]
    else:
        formats = []
    shape, stride = tuple(self.shape), tuple(self.stride())
    check_several = ambiguity_check if isinstance(ambiguity_check, bool) else True
    several = any(a == b for a, b in zip(stride, stride[1:])) or any(n == 1 for n in shape)
    if check_several and several and sum(_is_contiguous_as(shape, stride, f) for f in formats) != 1:
        raise RuntimeError("dim_order: The tensor does not have unique dim order, or cannot map to exact one of "
                           "the given memory formats.")
    perm, ambiguous = _logical_to_physical(shape, stride, bool(ambiguity_check))
    if ambiguous:
        raise RuntimeError("dim_order: The tensor does not have unique dim order.")
    return tuple(perm)


def _storage_span(arr):
    """(device, lowest address, bytes) of the memory ``arr`` lies in (its storage)."""
    from .shape.strided import _byte_span, _owner

    if backend.backend_of(arr).type == "meta":
        return None
    return (backend.device_of_array(arr),) + _byte_span(_owner(arr))


@_attach("is_set_to")
def is_set_to(self, tensor):
    """Whether both tensors view the same storage with the same offset, sizes and strides
    (dtypes may differ, as in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.0)
    >>> x.is_set_to(x[:]), x[1:].is_set_to(x[1:]), x.is_set_to(x.clone()), x.is_set_to(x[1:])
    (True, True, False, False)
    """
    if not isinstance(tensor, Tensor):
        raise TypeError(f"is_set_to: expected a Tensor, got {type(tensor).__name__}")
    if self is tensor:
        return True
    a, b = self._data, tensor._data
    span = _storage_span(a)
    if span is None or span != _storage_span(b):  # a meta tensor has no storage to share
        return False
    return (backend.data_pointer(a) == backend.data_pointer(b) and tuple(a.shape) == tuple(b.shape)
            and tuple(self.stride()) == tuple(tensor.stride()))


# ------------------------------------------------------------------- method forms


@_attach("hardshrink")
def hardshrink(self, lambd=0.5):
    """Method form of :func:`lucid.nn.functional.hardshrink`: 0 where ``|x| <= lambd``, else x.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([-1.0, 0.3, 2.0]).hardshrink()
    tensor([-1.,  0.,  2.])
    """
    from ..nn import functional as F

    return F.hardshrink(self, lambd)


@_attach("prelu")
def prelu(self, weight):
    """Method form of :func:`lucid.nn.functional.prelu`: ``max(0, x) + weight * min(0, x)``,
    ``weight`` one value or one per channel (dim 1).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([-2.0, 3.0]).prelu(lucid.tensor([0.25]))
    tensor([-0.5,  3. ])
    """
    from ..nn import functional as F

    return F.prelu(self, weight)


@autocast_composite("orgqr")  # NOTE [Autocast]
def orgqr(input, tau):
    """The first ``n`` columns of the product of Householder reflectors ``(input, tau)`` (as
    :func:`lucid.linalg.householder_product`; PyTorch's ``orgqr``). Differentiable.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.tensor([[1.0, 0.0], [1.0, 1.0]])
    >>> lucid.orgqr(a, lucid.tensor([1.0, 0.0]))
    tensor([[ 0., -1.],
            [-1.,  0.]])
    """
    return _call_as("orgqr", _lucid("linalg").householder_product, input, tau)


def _index(name, what, v):
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, Tensor)):
        raise TypeError(f"{name}: argument '{what}' must be int, not {type(v).__name__}")
    return operator.index(v)


def _plain_views(pieces):
    """PyTorch's unsafe variants allow in-place changes of their pieces: no multi-output mark
    (NOTE [Multi-output views]); the pieces stay views, so the gradients stay right."""
    for t in pieces:
        if isinstance(t, Tensor):
            t._multi_out = None
    return tuple(pieces)


def unsafe_split(tensor, split_size, dim=0, *, axis=None):
    """:func:`lucid.split` into pieces of ``split_size`` (an int). PyTorch's unsafe variant skips
    view tracking; Lucid's pieces are ordinary views, so changing one in place is safe.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(5).unsafe_split(2)
    (tensor([0, 1]), tensor([2, 3]), tensor([4]))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unsafe_split", dim, axis, 0)
    return _plain_views(_call_as("unsafe_split", _lucid("split"), tensor,
                                 _index("unsafe_split", "split_size", split_size), dim))


def unsafe_split_with_sizes(input, split_sizes, dim=0, *, axis=None):
    """:func:`lucid.split` into pieces of the given sizes (which must sum to the dim's size).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(5).unsafe_split_with_sizes([2, 3])
    (tensor([0, 1]), tensor([2, 3, 4]))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unsafe_split_with_sizes", dim, axis, 0)
    if not isinstance(split_sizes, (list, tuple)):
        raise TypeError(f"unsafe_split_with_sizes: argument 'split_sizes' must be a list of ints, not "
                        f"{type(split_sizes).__name__}")
    sizes = [_index("unsafe_split_with_sizes", "split_sizes", s) for s in split_sizes]
    return _plain_views(_call_as("unsafe_split_with_sizes", _lucid("split_with_sizes"), input, sizes, dim))


def unsafe_chunk(input, chunks, dim=0, *, axis=None):
    """:func:`lucid.chunk` (see :func:`unsafe_split` for what "unsafe" means in PyTorch).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(5).unsafe_chunk(2)
    (tensor([0, 1, 2]), tensor([3, 4]))
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unsafe_chunk", dim, axis, 0)
    return _plain_views(_call_as("unsafe_chunk", _lucid("chunk"), input, _index("unsafe_chunk", "chunks", chunks),
                                 dim))


for _fn in (orgqr, unsafe_split, unsafe_split_with_sizes, unsafe_chunk):
    _attach(_fn.__name__)(_fn)


@_attach("to_dense")
def to_dense(self, dtype=None, *, masked_grad=None):
    """This tensor itself (it is dense already), or a copy in ``dtype``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.ones(2)
    >>> x.to_dense() is x, x.to_dense(lucid.float64).dtype
    (True, lucid.float64)
    """
    if dtype is None or as_lucid(dtype) == self.dtype:
        return self
    return self.to(dtype)


@_attach("module_load")
def module_load(self, other, assign=False):
    """How ``load_state_dict`` turns the state-dict value ``other`` into this parameter's new
    value: ``other.detach()`` with ``assign``, else ``self.copy_(other).detach()``.

    Examples
    --------
    >>> import lucid
    >>> p = lucid.zeros(2)
    >>> p.module_load(lucid.ones(2)), p
    (tensor([1., 1.]), tensor([1., 1.]))
    """
    if not isinstance(other, Tensor):
        raise TypeError(f"module_load: expected a Tensor, got {type(other).__name__}")
    if assign:
        return other.detach()
    return _call_as("module_load", self.copy_, other).detach()


@_attach("new_empty_strided")
def new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None, requires_grad=False,
                      pin_memory=False):
    """:func:`lucid.empty_strided` with this tensor's dtype and device unless given.

    Examples
    --------
    >>> import lucid
    >>> y = lucid.zeros(3, dtype=lucid.float64).new_empty_strided((2, 3), (1, 2))
    >>> y.shape, y.stride(), y.dtype
    ((2, 3), (1, 2), lucid.float64)
    """
    if layout is not None and layout is not strided:
        raise RuntimeError(f"new_empty_strided: only the strided layout is supported, got {layout!r}")
    try:
        return _lucid("empty_strided")(size, stride, dtype=self.dtype if dtype is None else dtype,
                                       device=self.device if device is None else device,
                                       requires_grad=requires_grad)
    except (RuntimeError, ValueError, TypeError) as e:
        raise _renamed("new_empty_strided", e) from None


@_attach("new")
def new(self, *args, device=None):
    """PyTorch's legacy constructor, in this tensor's dtype (and device unless ``device``).

    ``x.new()`` is empty; ``x.new(2, 3)`` or ``x.new(lucid.Size(...))`` uninitialised (zeros
    in practice); ``x.new(data)`` a copy of a list, tuple or array (a tuple is *data*, as in
    PyTorch); ``x.new(t)`` a new tensor sharing ``t``'s memory and gradient path, where ``t`` has
    this tensor's dtype and device.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1, 2])
    >>> x.new(2, 3).shape, x.new((2, 3)), x.new([1.5, 2.7])
    ((2, 3), tensor([2, 3]), tensor([1, 2]))
    """
    dev = self.device if device is None else device
    if len(args) == 1:
        a = args[0]
        if isinstance(a, Tensor):
            if a.dtype != self.dtype or a.device != self.device or (device is not None and
                                                                    _lucid("device")(device) != a.device):
                raise TypeError(f"new: expected a tensor of dtype {self.dtype} on {self.device}, got one of dtype "
                                f"{a.dtype} on {a.device}")
            return _alias(a)
        if isinstance(a, (bool, float, complex, str)) or (isinstance(a, numbers.Number)
                                                         and not isinstance(a, numbers.Integral)):
            raise TypeError(f"new: data must be a sequence (got {type(a).__name__})")
        if not isinstance(a, (numbers.Integral, _lucid("Size"))):
            try:
                return self.new_tensor(a, device=dev)
            except (RuntimeError, ValueError, TypeError) as e:
                raise _renamed("new", e) from None
    if len(args) > 1 and not all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
        raise TypeError(f"new: expected a size of ints, got {args!r}")
    shape = _size_args("new", args) if args else (0,)
    if any(s < 0 for s in shape):
        raise RuntimeError(f"new: Trying to create tensor with negative dimension: {list(shape)}")
    return self.new_empty(shape, device=dev)


@_attach("as_subclass")
def as_subclass(self, cls):
    """A ``cls`` instance sharing this tensor's memory, version counter and gradient path
    (PyTorch's ``as_subclass``: an alias; ``cls.__init__`` is not called).

    Examples
    --------
    >>> import lucid
    >>> class Tagged(lucid.Tensor):
    ...     pass
    >>> x = lucid.tensor([1.0, 2.0])
    >>> y = x.as_subclass(Tagged)
    >>> type(y).__name__, y.data_ptr() == x.data_ptr()
    ('Tagged', True)
    """
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError("as_subclass: Creating a Tensor subclass from a class that does not inherit from Tensor "
                        "is not possible. Make sure your class inherits from Tensor.")
    if self._level:
        raise RuntimeError(f"as_subclass: can't change the class of a tensor of an active "
                           f"{self._trace.kind} transform")
    out = _alias(self)
    try:
        out.__class__ = cls
    except TypeError as e:
        raise TypeError(f"as_subclass: {cls.__name__} can't share Tensor's instance layout ({e})") from None
    return out


def _make_subclass(cls, data, require_grad=False, **kwargs):
    """A ``cls`` instance viewing ``data``'s memory as a new leaf (PyTorch's
    ``Tensor._make_subclass``, what a subclass's ``__new__`` calls): detached from ``data``'s
    graph, sharing its version counter, requiring grad when ``require_grad``; ``cls.__init__``
    is not called.

    Examples
    --------
    >>> import lucid
    >>> class Scaled(lucid.Tensor):
    ...     def __new__(cls, data, scale=1.0):
    ...         t = lucid.Tensor._make_subclass(cls, data, True)
    ...         t.scale = scale
    ...         return t
    >>> w = Scaled(lucid.ones(2), scale=3.0)
    >>> type(w).__name__, w.is_leaf, w.requires_grad, w.scale
    ('Scaled', True, True, 3.0)
    """
    if not (isinstance(cls, type) and issubclass(cls, Tensor)):
        raise TypeError("_make_subclass: cls must be a subclass of Tensor, got "
                        f"{getattr(cls, '__name__', cls)!r}")
    if not isinstance(data, Tensor):
        raise TypeError(f"_make_subclass: data must be a Tensor, got {type(data).__name__}")
    if data._level:
        raise RuntimeError(f"_make_subclass: can't make a subclass from a tensor of an active {data._trace.kind} "
                           "transform")
    out = object.__new__(cls)
    out._data, out._version = data._data, data._version  # data.detach(): same memory and counter
    if require_grad:
        out.requires_grad_(True)
    return out


Tensor._make_subclass = staticmethod(_make_subclass)


def _resize_out(name, self, shape):
    n, have = math.prod(shape), self.numel()
    if n != have:
        raise RuntimeError(f"{name}: requested resize to {'x'.join(map(str, shape))} ({n} elements in total), "
                           f"but the given tensor has a size of {'x'.join(map(str, self.shape))} ({have} "
                           "elements). autograd's resize can only change the shape of a given tensor, while "
                           "preserving the number of elements.")
    out = self.contiguous().view(shape)  # a view of a contiguous tensor, else of a copy
    return _alias(out) if out is self else out


@_attach("resize")
def resize(self, *sizes):
    """Deprecated out-of-place resize: this tensor's elements, row-major, with shape ``sizes``
    (the same number of elements; differentiable). Warns, as PyTorch does.

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(4.0).resize(2, 2)  # and a UserWarning
    tensor([[0., 1.],
            [2., 3.]])
    """
    warnings.warn("resize: non-inplace resize is deprecated", UserWarning, stacklevel=2)
    return _resize_out("resize", self, _size_args("resize", sizes))


@_attach("resize_as")
def resize_as(self, tensor):
    """Deprecated out-of-place ``resize(tensor.shape)`` (see :meth:`Tensor.resize`).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(4.0).resize_as(lucid.zeros(2, 2)).shape  # and a UserWarning
    (2, 2)
    """
    warnings.warn("resize_as: non-inplace resize_as is deprecated", UserWarning, stacklevel=2)
    if not isinstance(tensor, Tensor):
        raise TypeError(f"resize_as: expected a Tensor, got {type(tensor).__name__}")
    return _resize_out("resize_as", self, tuple(tensor.shape))


_REMOVED = {
    "eig": "Use lucid.linalg.eigvals(A) for L and lucid.linalg.eig(A) for (L, V), complex tensors.",
    "symeig": "Use lucid.linalg.eigvalsh(A, UPLO='U' if upper else 'L') for L and lucid.linalg.eigh(A, UPLO=...).",
    "solve": "Use lucid.linalg.solve(A, B) (arguments reversed; no LU factorization returned).",
    "lstsq": "Use lucid.linalg.lstsq(A, B).solution (arguments reversed; residuals in its 'residuals').",
}


def _removed(name, hint):
    def method(self, *args, **kwargs):
        raise RuntimeError(f"{name}: This function was deprecated since PyTorch 1.9 and is now removed. {hint}")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Removed from PyTorch (1.9); raises with the replacement. {hint}"
    return method


for _name, _hint in _REMOVED.items():
    _attach(_name)(_removed(_name, _hint))


# ------------------------------------------------- Python callables on each element


def _checked_operands(name, self, others, fn):
    """PyTorch's checks for apply_/map_/map2_; False for a meta tensor (skipped, as PyTorch)."""
    for what, o in others:
        if not isinstance(o, Tensor):
            raise TypeError(f"{name}: argument '{what}' must be Tensor, not {type(o).__name__}")
    if not callable(fn):
        raise TypeError(f"{name}: the callable argument must be callable, got {type(fn).__name__}")
    tensors = [self] + [o for _, o in others]
    if any(t._level for t in tensors):
        raise RuntimeError(f"{name}: can't run a Python callable on each element of a tensor of an active "
                           "transform")
    if any(t.requires_grad for t in tensors):
        raise RuntimeError(f"{name}: Can't call {name}() on a tensor that requires grad. Use "
                           f"x.detach().{name}() instead.")
    if self.device.type == "meta":
        return False
    if any(t.device.type != "cpu" for t in (tensors if name == "map2_" else tensors[:1])):
        raise TypeError(f"{name} is only implemented on CPU tensors")
    for what, o in others:
        if o.dtype != self.dtype or o.device != self.device:
            raise TypeError(f"{name}: expected {self.dtype} on {self.device} for argument '{what}' (got "
                            f"{o.dtype} on {o.device})")
    _check_writeable(name, self)
    return True


def _stored(name, v, dtype):
    """The callable's result ``v`` as a value of ``dtype``, converted as PyTorch stores it."""
    kind = dtype.kind
    try:
        if kind in "fc":
            v = v.item() if isinstance(v, Tensor) else v
            if not isinstance(v, numbers.Complex if kind == "c" else numbers.Real):
                raise TypeError(f"must be {'a' if kind == 'c' else 'real'} number, not {type(v).__name__}")
            return complex(v) if kind == "c" else float(v)
        if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral):
            v = v != 0 if kind == "b" else int(v)  # a float: its truth, or truncated
        v = operator.index(v)
    except (ValueError, OverflowError):  # int(nan), int(inf)
        raise RuntimeError(f"{name}: value cannot be converted to type {as_lucid(dtype)} without overflow") from None
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None
    if kind == "b":
        return v != 0
    info = np.iinfo(dtype)
    if not (-info.max if kind == "u" else info.min) <= v <= info.max:
        raise RuntimeError(f"{name}: value cannot be converted to type {as_lucid(dtype)} without overflow")
    return v % (info.max + 1) if kind == "u" else v  # unsigned: a negative value wraps, as in C


def _apply_each(name, self, others, fn):
    """Call ``fn`` on each element (with the matching elements of ``others``, broadcast to self's
    shape) in row-major order and write the results into ``self``. CPU only (PyTorch's rule), so
    the arrays are host NumPy arrays here; all results are computed before anything is written."""
    arr = self._data
    try:
        cols = [np.broadcast_to(o._data, arr.shape) for o in others]
    except ValueError:
        raise RuntimeError(f"{name}: the other tensors (shapes {[tuple(o.shape) for o in others]}) do not "
                           f"broadcast to this tensor's shape {tuple(arr.shape)}") from None
    columns = [arr.reshape(-1).tolist()] + [c.reshape(-1).tolist() for c in cols]
    dtype = arr.dtype
    values = [_stored(name, fn(*elems), dtype) for elems in zip(*columns)]
    if BEFORE_MUTATION[0] is not None:  # allow_mutation_on_saved_tensors
        BEFORE_MUTATION[0](self)
    if values:
        arr[...] = np.array(values, dtype=dtype).reshape(arr.shape)
    _bump(self, name)
    return self


@_attach("apply_")
def apply_(self, callable):
    """Replace each element ``v`` by ``callable(v)`` (a Python number in, a number out), in
    place. CPU tensors only, and none that requires grad, as in PyTorch; slow by nature.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0, 3.0])
    >>> x.apply_(lambda v: v * v)
    tensor([1., 4., 9.])
    """
    if not _checked_operands("apply_", self, (), callable):
        return self
    return _apply_each("apply_", self, (), callable)


@_attach("map_")
def map_(self, tensor, callable):
    """Set each element to ``callable(self_elem, tensor_elem)``, ``tensor`` broadcast to this
    tensor's shape, with the same dtype; in place. CPU only, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(2, 2)
    >>> x.map_(lucid.tensor([1.0, 2.0]), lambda a, b: a + 10 * b)
    tensor([[10., 20.],
            [10., 20.]])
    """
    if not _checked_operands("map_", self, (("tensor", tensor),), callable):
        return self
    return _apply_each("map_", self, (tensor,), callable)


@_attach("map2_")
def map2_(self, x, y, callable):
    """Set each element to ``callable(self_elem, x_elem, y_elem)`` (``x`` and ``y`` broadcast to
    this tensor's shape, with the same dtype); in place. CPU only, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> z = lucid.zeros(3)
    >>> z.map2_(lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([2.0]), lambda a, b, c: b * c)
    tensor([2., 4., 6.])
    """
    if not _checked_operands("map2_", self, (("x", x), ("y", y)), callable):
        return self
    return _apply_each("map2_", self, (x, y), callable)


__all__ = ["orgqr", "unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes"]

from . import storage as _storage  # noqa: E402,F401  (storages and set_, attached on import)
