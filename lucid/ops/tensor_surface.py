"""Tensor methods PyTorch code calls that Lucid had only as functions, and in-place variants.

Three groups, each attached to :class:`Tensor` here:

* method forms of existing functions (``x.cov()``, ``x.bincount()``, ``x.H`` ...) and small
  queries (``is_signed``, ``is_neg``, ``is_inference``);
* in-place forms (``eq_``, ``cumsum_``, ``polygamma_`` ...), each its out-of-place op run
  through ``inplace._inplace`` (NOTE [In-place semantics]), and the in-place *layout* changes
  (``t_``, ``transpose_``, ``squeeze_``, ``unsqueeze_``, ``as_strided_``, ``resize_``), NOTE
  [In-place layout changes] below;
* PyTorch's top-level in-place functions (``lucid.abs_(x)``, ``lucid.relu_(x)`` ...), exported
  through ``__all__``: each calls the Tensor method (or ``nn.functional``'s in-place form).

Functions another module provides (``deg2rad``, ``index_reduce`` ...) are looked up through
``lucid.<name>`` when called, so the order modules load in does not matter.

NOTE [In-place layout changes]
``x.t_()`` and its kin change x's shape and strides, not its values: x keeps its identity
(``x is x.t_()``), its memory, its base and its version counter (bumped once, as PyTorch does
even for a change that is the identity), and takes the layout of the out-of-place view. In a
graph x is rebased onto the view's node (``TBackward``-style: the gradient flows through the
view to x's old history); a leaf that requires grad, or a view of one, refuses in grad mode
with the message every in-place op gives. A tensor that requires grad but is not a leaf gets
the view's node even under ``no_grad``: a history of the old shape would make its backward
fail (PyTorch keeps the stale node there and its backward raises).
The view registry (NOTE [View replay]) must stay a chain of the views' real relations, since
replay and vmap's example geometry re-bind each view on its parent. So a *copy of x's old
state* (a new Tensor object: x's old value, layout and history) stands in for x as the parent
of x's existing views:

* x is a view: the copy takes x's place in its root's registry and its recorded parent; x
  becomes the view op of the copy, registered last (after the copy and its other children).
* x is a root: x stays the root (``x._base`` stays None, as in PyTorch); the copy is the
  *inverse* view of x's new layout (``t``, the reshape back, or ``as_strided`` with the old
  geometry), registered first, and x's existing views become its children.

Under a transform the change is functional (the tracer is rebound to the view, as in
``inplace._inplace_traced``) with the same registry bookkeeping. ``resize_`` is ``as_strided_``
with row-major strides while the storage holds the new size; past it, Lucid cannot grow a
storage other tensors share, so x gets a storage of its own (the old one's values from x's
offset, zeros after; PyTorch leaves those uninitialised) and leaves its base's views.
"""
from __future__ import annotations

import contextlib
import math
import warnings
import weakref

from .._core import primitive
from .._core.dtypes import as_lucid
from .._core.grad_mode import STATE, enable_grad, no_grad
from .._core.tensor import Tensor, _wrap, tensor_method
from .inplace import _adopt, _bump, _check_leaf, _inplace, _rebase
from .inplace_more import _method
from .numpy_aliases import REQUIRED, numpy_axis


def _lucid(name):
    import lucid

    return getattr(lucid, name)


# --------------------------------------------------------------- method forms


def _forward(name, fn_name=None):
    """``Tensor.<name>`` as ``lucid.<fn_name>(self, ...)``, looked up when called."""
    fn_name = fn_name or name

    def method(self, *args, **kwargs):
        return _lucid(fn_name)(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Method form of :func:`lucid.{fn_name}` (``input`` is ``self``)."
    setattr(Tensor, name, method)


for _n in ("bincount", "cov", "corrcoef", "histc", "histogram", "vdot"):
    _forward(_n)


@tensor_method("to_padded_tensor")
def to_padded_tensor(self, padding, output_size=None):
    """A nested tensor's components padded into one dense tensor (see
    ``lucid.nested.to_padded_tensor``); a dense tensor raises, as in PyTorch.

    Examples
    --------
    >>> import lucid, lucid.nested
    >>> nt = lucid.nested.nested_tensor([lucid.ones(1), lucid.ones(2)])
    >>> nt.to_padded_tensor(0.0).tolist()
    [[1.0, 0.0], [1.0, 1.0]]
    """
    # nested tensors' classes override this method: only a dense tensor gets here
    from ..nested._create import _dense_to_padded_tensor

    return _dense_to_padded_tensor(self, padding, output_size)


@tensor_method("cfloat")
def cfloat(self, memory_format=None):
    """This tensor as ``complex64`` (differentiable; a real input gets a real gradient).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1.0, 2.0]).cfloat()
    tensor([1.+0.j, 2.+0.j], dtype=lucid.complex64)
    """
    return self.to(_lucid("complex64"), memory_format=memory_format)


@tensor_method("cdouble")
def cdouble(self, memory_format=None):
    """This tensor as ``complex128``.

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1, 2]).cdouble().dtype
    lucid.complex128
    """
    return self.to(_lucid("complex128"), memory_format=memory_format)


@tensor_method("ndimension")
def ndimension(self):
    """The number of dimensions (PyTorch's alias of ``dim()``).

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3).ndimension()
    2
    """
    return self.ndim


def _size_args(name, sizes):
    """``f(2, 3)``, ``f((2, 3))`` and ``f(lucid.Size(...))`` all as one tuple of ints."""
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    try:
        return tuple(int(s) for s in sizes)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a sequence of ints as the size, got {sizes!r}") from None


@tensor_method("sum_to_size")
def sum_to_size(self, *size):
    """Sum this tensor down to ``size``, which must broadcast to its shape (undoes an expand).

    Leading dims are summed away, and dims where ``size`` is 1 are summed keeping the dim.
    Differentiable; ``self`` itself is returned when ``size`` is already its (non-empty) shape.
    A sum gives bool and integer tensors the dtype ``sum`` gives (int64), as in PyTorch, which
    always sums when ``size`` is ``()``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.0).reshape(2, 3)
    >>> x.sum_to_size(3)
    tensor([3., 5., 7.])
    >>> x.sum_to_size(2, 1)
    tensor([[ 3.],
            [12.]])
    """
    size = _size_args("sum_to_size", size)
    shape = tuple(self.shape)
    lead = len(shape) - len(size)
    if lead < 0 or any(s != 1 and s != n for s, n in zip(size, shape[lead:])):
        raise RuntimeError(f"sum_to_size: size {list(size)} is not expandable to size {list(shape)}")
    if not size:  # PyTorch sums whenever the target is 0-d, so a 0-d bool/int input becomes int64
        return self.sum()
    if size == shape:
        return self
    dims = tuple(range(lead)) + tuple(lead + i for i, s in enumerate(size) if s == 1 and shape[lead + i] != 1)
    out = self.sum(dim=dims, keepdim=True) if dims else self
    return out.reshape(size)


@tensor_method("narrow_copy")
def narrow_copy(self, dim=REQUIRED, start=REQUIRED, length=REQUIRED, *, axis=None):
    """``narrow(dim, start, length)`` as a new contiguous tensor (not a view).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.0).reshape(2, 3)
    >>> y = x.narrow_copy(1, 1, 2)
    >>> y
    tensor([[1., 2.],
            [4., 5.]])
    >>> y.is_contiguous(), y.storage_offset()
    (True, 0)
    """
    if axis is not None or dim is REQUIRED or start is REQUIRED or length is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("narrow_copy", dim, axis, REQUIRED, start=start, length=length)
    try:
        return _lucid("narrow")(self, dim, start, length).clone()
    except (RuntimeError, IndexError, ValueError) as e:
        raise _renamed("narrow_copy", e) from None


@tensor_method("is_neg")
def is_neg(self):
    """Always False: Lucid has no lazy negation bit (``neg`` computes; ``resolve_neg`` is the identity).

    Examples
    --------
    >>> import lucid
    >>> lucid.tensor([1.0]).neg().is_neg()
    False
    """
    return False


@tensor_method("is_signed")
def is_signed(self):
    """Whether the dtype holds negative values: floats, complex and signed ints (not uint8, bool).

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(1).is_signed(), lucid.zeros(1, dtype=lucid.uint8).is_signed()
    (True, False)
    """
    return self.dtype.kind in "fci"


@tensor_method("is_inference")
def is_inference(self):
    """Always False: Lucid's ``inference_mode`` switches grad recording off but makes ordinary
    tensors (no inference-tensor flag), so they may be used in autograd later, which PyTorch
    refuses for its inference tensors.

    Examples
    --------
    >>> import lucid
    >>> with lucid.inference_mode():
    ...     y = lucid.ones(2) * 2
    >>> y.is_inference()
    False
    """
    return False


def _H(self):
    n = self.ndim
    if n not in (0, 2):
        hint = ". For batches of matrices, consider using tensor.mH" if n > 2 else ""
        raise RuntimeError(f"H: tensor.H is only supported on matrices (2-D tensors). Got {n}-D tensor{hint}")
    if n == 0:
        warnings.warn("H: Tensor.H is deprecated on 0-D tensors. Consider using x.conj().", UserWarning,
                      stacklevel=2)
        return self.conj()
    return self.transpose(0, 1).conj()


def _mH(self):
    if self.ndim < 2:
        raise RuntimeError(f"mH: tensor.mH is only supported on matrices or batches of matrices. Got "
                           f"{self.ndim}-D tensor.")
    return self.transpose(-2, -1).conj()


Tensor.H = property(_H, doc="Conjugate transpose of a matrix (a view for real tensors): ``x.t().conj()``.")
Tensor.mH = property(_mH, doc="Conjugate transpose of the last two dims: ``x.mT.conj()``.")


# ----------------------------------------------------------- in-place forms

# Comparisons and logical ops write 1/0 in self's dtype, as PyTorch (the old value gets a zero
# gradient: ``_fit`` keeps it in the graph).
for _n in ("eq", "ne", "lt", "le", "gt", "ge", "greater", "greater_equal", "less", "less_equal", "not_equal",
           "logical_and", "logical_or", "logical_xor", "logical_not", "bitwise_not", "floor_divide",
           "sinc", "sgn", "digamma", "erfinv", "lgamma", "i0", "mvlgamma", "igamma", "igammac",
           "deg2rad", "rad2deg", "conj_physical", "index_reduce", "tril", "triu"):
    if not hasattr(Tensor, f"{_n}_"):
        _method(f"{_n}_", _n)
if not hasattr(Tensor, "absolute_"):
    _absolute_ = _method("absolute_", "abs")

    def _absolute_real_(self):
        if self.dtype.kind == "c":  # |z| is real: PyTorch refuses to write it into z, as abs_
            raise RuntimeError("absolute_: In-place abs is not supported for complex tensors.")
        return _absolute_(self)

    _absolute_real_.__name__ = _absolute_real_.__qualname__ = "absolute_"
    _absolute_real_.__doc__ = _absolute_.__doc__
    Tensor.absolute_ = _absolute_real_


def _polygamma_(self, n):
    """In-place ``polygamma(n, self)`` (``n`` first, as PyTorch's ``x.polygamma_(n)``); returns ``self``."""
    return _inplace("polygamma_", self, (), lambda x: _lucid("polygamma")(n, x))


def _scan_(name):
    def method(self, dim=REQUIRED, dtype=None, *, axis=None):
        if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
            dim = numpy_axis(name, dim, axis, REQUIRED)
        if dtype is not None and as_lucid(dtype) != self.dtype:  # PyTorch refuses a cast back too
            raise RuntimeError(f"{name}: Bad in-place call: input tensor dtype {self.dtype} and output "
                               f"tensor dtype {as_lucid(dtype)} should match")
        return _inplace(name, self, (), lambda x: _lucid(name[:-1])(x, dim, dtype=dtype))

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"In-place :func:`lucid.{name[:-1]}` along ``dim``; returns ``self``."
    return method


Tensor.polygamma_ = _polygamma_
Tensor.cumsum_ = _scan_("cumsum_")
Tensor.cumprod_ = _scan_("cumprod_")


# ----------------------------------------------------- in-place layout changes
# See NOTE [In-place layout changes].


def _renamed(name, err):
    head, sep, rest = str(err).partition(": ")
    return type(err)(f"{name}: {rest if sep and head.isidentifier() else err}")


def _copy_state(x):
    """A new tensor object with x's present value, layout, history and registry record."""
    old = object.__new__(type(x))
    old.__dict__.update(x.__dict__)
    for cls in type(x).__mro__:
        for slot in cls.__dict__.get("__slots__", ()):
            if hasattr(x, slot):
                setattr(old, slot, getattr(x, slot))
    old._views, old._grad, old._hooks, old._post_hooks, old._retains = None, None, None, None, False
    return old


def _live(registry):
    return [v for v in (r() for r in registry or ()) if v is not None]


def _children(root, x):
    """The registered views whose recorded parent is ``x``."""
    return [v for v in _live(root._views) if v._view_src is not None and v._view_src[2][0] is x]


def _reparent(views, parent):
    for v in views:
        prim, params, args = v._view_src
        v._view_src = (prim, params, (parent,) + tuple(args[1:]))


def _replace_ref(root, a, b):
    """Put ``b`` where ``a`` is in root's registry (``b`` None: drop ``a``); False if ``a`` is not there."""
    reg = root._views or []
    for i, r in enumerate(reg):
        if r() is a:
            if b is None:
                del reg[i]
            else:
                reg[i] = weakref.ref(b)
            return True
    return False


def _owner_trace(x):
    if primitive.ACTIVE_TRACES[0] and STATE.traces:
        return primitive._owning_trace((x,))
    return None


def _relayout(name, x, view, inverse):
    """Give ``x`` the layout ``view(x)`` in place. See NOTE [In-place layout changes].

    ``inverse(t)`` makes x's old layout as a view of ``t`` (a tensor with the new one).
    """
    trace = _owner_trace(x)
    if trace is None:
        if STATE.grad_enabled and x._rg:
            _check_leaf(name, x)
        graph = x._rg and x.grad_fn is not None
        # record (a node, and the registry entry) unless x is a leaf that requires grad
        mode = enable_grad() if graph or not x._rg else no_grad()
    else:
        graph, mode = False, contextlib.nullcontext()
    root = x._base if x._base is not None and (trace is None or trace.owns(x._base)) else None
    children = _children(x if root is None else root, x)
    with mode:
        src = x if root is None else _copy_state(x)  # the copy stands in for x's old layout
        try:
            res = view(src)
        except (RuntimeError, ValueError, IndexError, TypeError) as e:
            raise _renamed(name, e) from None
        if res is not src:  # else the identity (t_ of a vector ...): only the version moves
            _take(x, res, trace, graph)
            if root is None:
                _replace_ref(x, res, None)
                if children:
                    _adopt_children(x, inverse, children)
            else:
                _succeed_view(x, root, src, res, children)
    _bump(x, name)
    return x


def _take(x, res, trace, graph):
    """x takes res's layout (eager: its array; a tracer: its inner value) and, in a graph, its node."""
    if trace is not None:
        _adopt(x, res)
        return
    x._data = res._data
    if graph:
        _rebase(x, res)


def _succeed_view(x, root, old, res, children):
    """x (a view) changed layout: ``old`` takes its place in root's registry and parents x's
    views; x is recorded as ``res``, the view op of ``old``, in ``res``'s place (last)."""
    if x._view_src is not None:
        _replace_ref(root, x, old)
    _reparent(children, old)
    x._view_src = res._view_src
    if res._view_src is not None:
        _replace_ref(root, res, x)


def _adopt_children(x, inverse, children):
    """x (a root) changed layout: its old layout, as a view of the new one, parents its views."""
    try:
        back = inverse(x)
    except (RuntimeError, ValueError, IndexError):  # e.g. as_strided under vmap reaching outside
        back = None
    if back is None or back._view_src is None or back._base is not x:
        return
    prim, params, args = back._view_src
    back._view_src = (prim, params, (x,) + tuple(args[1:]))
    reg = x._views
    _replace_ref(x, back, None)
    reg.insert(0, weakref.ref(back))
    _reparent(children, back)


def _perm_view(d0, d1):
    return lambda t: t.transpose(d0, d1)


@tensor_method("transpose_")
def transpose_(self, dim0, dim1):
    """Swap dims ``dim0`` and ``dim1`` of this tensor in place (its layout, not its memory).

    See NOTE [In-place layout changes]: ``self`` keeps its identity and memory; in a graph it
    takes the transpose's history.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.0).reshape(2, 3)
    >>> x.transpose_(0, 1) is x, x.shape, x.stride()
    (True, (3, 2), (1, 3))
    """
    return _relayout("transpose_", self, _perm_view(dim0, dim1), _perm_view(dim0, dim1))


@tensor_method("swapaxes_")
def swapaxes_(self, axis0, axis1):
    """In-place :meth:`Tensor.swapaxes` (NumPy's name for :meth:`Tensor.transpose_`); returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3).swapaxes_(0, 1).shape
    (3, 2)
    """
    return _relayout("swapaxes_", self, _perm_view(axis0, axis1), _perm_view(axis0, axis1))


@tensor_method("swapdims_")
def swapdims_(self, dim0, dim1):
    """In-place :meth:`Tensor.swapdims` (an alias of :meth:`Tensor.transpose_`); returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> lucid.zeros(2, 3).swapdims_(0, 1).shape
    (3, 2)
    """
    return _relayout("swapdims_", self, _perm_view(dim0, dim1), _perm_view(dim0, dim1))


@tensor_method("t_")
def t_(self):
    """In-place :meth:`Tensor.t` (tensors of at most 2 dims); returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1.0, 2.0]])
    >>> x.t_()
    tensor([[1.],
            [2.]])
    """
    if self.ndim > 2:
        raise RuntimeError(f"t_: expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
    return _relayout("t_", self, lambda t: t.t(), lambda t: t.t())


def _reshape_back(shape):
    return lambda t: _lucid("reshape")(t, shape)


@tensor_method("squeeze_")
def squeeze_(self, dim=None, *, axis=None):
    """In-place :meth:`Tensor.squeeze` (all size-1 dims, or those of ``dim``); returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(1, 3, 1)
    >>> x.squeeze_().shape
    (3,)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("squeeze_", dim, axis, None)
    shape = tuple(self.shape)
    return _relayout("squeeze_", self, lambda t: t.squeeze() if dim is None else t.squeeze(dim),
                     _reshape_back(shape))


@tensor_method("unsqueeze_")
def unsqueeze_(self, dim=REQUIRED, *, axis=None):
    """In-place :meth:`Tensor.unsqueeze`; returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.zeros(3)
    >>> x.unsqueeze_(-1).shape
    (3, 1)
    """
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("unsqueeze_", dim, axis, REQUIRED)
    shape = tuple(self.shape)
    return _relayout("unsqueeze_", self, lambda t: t.unsqueeze(dim), _reshape_back(shape))


def _as_strided_view(size, stride, offset):
    return lambda t: _lucid("as_strided")(t, size, stride, offset)


@tensor_method("as_strided_")
def as_strided_(self, size, stride, storage_offset=None):
    """Give this tensor the layout ``as_strided(size, stride, storage_offset)`` in place.

    Sizes, strides and offset count elements of the storage, as :func:`lucid.as_strided`.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.0)
    >>> x.as_strided_((2, 2), (1, 2), 1)
    tensor([[1., 3.],
            [2., 4.]])
    >>> x.storage_offset()
    1
    """
    old = (tuple(self.shape), tuple(self.stride()), self.storage_offset())
    return _relayout("as_strided_", self, _as_strided_view(size, stride, storage_offset), _as_strided_view(*old))


@tensor_method("resize_")
def resize_(self, *sizes, memory_format=None):
    """Give this tensor the shape ``sizes``, row-major, keeping its storage where it is big enough.

    As PyTorch: the elements are the storage's from this tensor's offset on; the same shape
    changes nothing; a tensor that requires grad can't be resized. ``memory_format`` is
    ignored (always row-major). Where the storage is too small Lucid gives this tensor a new
    storage holding the old values and zeros after them (PyTorch grows the storage it shares
    with its base and leaves the new elements uninitialised; here the base keeps the old one).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6.0)
    >>> x.resize_(2, 2)
    tensor([[0., 1.],
            [2., 3.]])
    >>> x.resize_(3, 3)
    tensor([[0., 1., 2.],
            [3., 4., 5.],
            [0., 0., 0.]])
    """
    shape = _size_args("resize_", sizes)
    if self._level:
        raise RuntimeError(f"resize_: can't resize a tensor of an active {self._trace.kind} transform")
    if self._rg:
        raise RuntimeError("resize_: cannot resize variables that require grad")
    if any(s < 0 for s in shape):
        raise RuntimeError(f"resize_: negative dimension in the size {list(shape)}")
    if shape == tuple(self.shape):
        return self
    from .shape.strided import storage_geometry

    geom = storage_geometry(self._data)
    n = math.prod(shape)
    stride = tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))
    if geom is not None and geom[2] + n <= geom[3]:
        return _relayout("resize_", self, _as_strided_view(shape, stride, geom[2]),
                         _as_strided_view(*geom[:3]))
    return _resize_new_storage(self, shape, geom)


def _leave_storage(x):
    """x is about to view other memory: a copy of its old state takes its place in the view
    registry and as the parent and base of its views (``resize_`` past its storage, ``set_``)."""
    old = _copy_state(x)
    root = x._base
    if root is None:
        old._views, x._views = x._views, None
        for v in _live(old._views):
            v._base = old
    elif x._view_src is not None:
        _replace_ref(root, x, old)
    _reparent(_children(old if root is None else root, x), old)
    return old


def _resize_new_storage(x, shape, geom):
    """``resize_`` past the end of x's storage: x gets a storage of its own."""
    n = math.prod(shape)
    with no_grad():
        if geom is None:  # a reinterpreting dtype view: its own elements, row-major
            tail = x.reshape(-1)
        else:
            tail = _lucid("as_strided")(_wrap(x._data), (geom[3] - geom[2],), (1,), geom[2])
        tail = tail[:n]
        new = _lucid("zeros")(n, dtype=x.dtype, device=x.device)
        new[: tail.shape[0]] = tail
        new = new.reshape(shape)
    _leave_storage(x)  # x's views keep the old storage: their root is now the copy
    x._data, x._base, x._view_src = new._data, None, None
    x._version = [x._version[0]]
    _bump(x, "resize_")
    return x


@tensor_method("resize_as_")
def resize_as_(self, other, memory_format=None):
    """``resize_(other.shape)``: this tensor with ``other``'s shape (see :meth:`Tensor.resize_`).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(4.0).resize_as_(lucid.zeros(2, 2))
    tensor([[0., 1.],
            [2., 3.]])
    """
    if not isinstance(other, Tensor):
        raise TypeError(f"resize_as_: expected a Tensor, got {type(other).__name__}")
    return resize_(self, tuple(other.shape))


# ------------------------------------------------------ top-level in-place functions


def _nn(name):
    import lucid.nn.functional as F

    return getattr(F, name)


def _dropout_call(fn_name):
    def call(x, p, train):
        return _nn(fn_name)(x, p, train, inplace=True)

    return call


def _feature_dropout_(x, p, train):
    from ..nn.functional.dropout import _apply_mask, _check

    _check(p, "feature_dropout_")
    if x.ndim < 2:
        raise RuntimeError(f"feature_dropout_: Feature dropout requires at least 2 dimensions in the input, "
                           f"got shape {tuple(x.shape)}")
    if not train or p == 0.0:
        return x
    shape = tuple(x.shape[:2]) + (1,) * (x.ndim - 2)
    return _inplace("feature_dropout_", x, (), lambda t: _apply_mask(t, shape, p))


# name: (how it is called: a Tensor method name or a callable, doc example setup, its arguments,
# what the tensor prints afterwards).
_TOP = {
    "abs_": ("abs_", "lucid.tensor([-1.0, 2.0])", "", "tensor([1., 2.])"),
    "acos_": ("acos_", "lucid.tensor([1.0])", "", "tensor([0.])"),
    "acosh_": ("acosh_", "lucid.tensor([1.0])", "", "tensor([0.])"),
    "arccos_": ("arccos_", "lucid.tensor([1.0])", "", "tensor([0.])"),
    "arccosh_": ("arccosh_", "lucid.tensor([1.0])", "", "tensor([0.])"),
    "arcsin_": ("arcsin_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "arcsinh_": ("arcsinh_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "arctan_": ("arctan_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "arctanh_": ("arctanh_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "asin_": ("asin_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "asinh_": ("asinh_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "atan_": ("atan_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "atanh_": ("atanh_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "ceil_": ("ceil_", "lucid.tensor([0.5, -1.5])", "", "tensor([ 1., -1.])"),
    "clamp_": ("clamp_", "lucid.tensor([-2.0, 0.5, 3.0])", ", -1.0, 1.0", "tensor([-1. ,  0.5,  1. ])"),
    "clip_": ("clip_", "lucid.tensor([-2.0, 0.5, 3.0])", ", -1.0, 1.0", "tensor([-1. ,  0.5,  1. ])"),
    "clamp_min_": ("clamp_min_", "lucid.tensor([-2.0, 3.0])", ", 0.0", "tensor([0., 3.])"),
    "clamp_max_": ("clamp_max_", "lucid.tensor([-2.0, 3.0])", ", 0.0", "tensor([-2.,  0.])"),
    "cos_": ("cos_", "lucid.tensor([0.0])", "", "tensor([1.])"),
    "cosh_": ("cosh_", "lucid.tensor([0.0])", "", "tensor([1.])"),
    "deg2rad_": ("deg2rad_", "lucid.tensor([180.0])", "", "tensor([3.1415927])"),
    "rad2deg_": ("rad2deg_", "lucid.tensor([0.5])", "", "tensor([28.64789])"),
    "detach_": ("detach_", "lucid.ones(2, requires_grad=True) * 2", "", "tensor([2., 2.])"),
    "erf_": ("erf_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "erfc_": ("erfc_", "lucid.tensor([0.0])", "", "tensor([1.])"),
    "exp_": ("exp_", "lucid.tensor([0.0])", "", "tensor([1.])"),
    "exp2_": ("exp2_", "lucid.tensor([3.0])", "", "tensor([8.])"),
    "expm1_": ("expm1_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "fill_": ("fill_", "lucid.zeros(2)", ", 7.0", "tensor([7., 7.])"),
    "fix_": ("fix_", "lucid.tensor([-1.5, 1.5])", "", "tensor([-1.,  1.])"),
    "floor_": ("floor_", "lucid.tensor([-1.5, 1.5])", "", "tensor([-2.,  1.])"),
    "frac_": ("frac_", "lucid.tensor([-1.5, 1.25])", "", "tensor([-0.5 ,  0.25])"),
    "gcd_": ("gcd_", "lucid.tensor([4, 6])", ", lucid.tensor([6, 9])", "tensor([2, 3])"),
    "lcm_": ("lcm_", "lucid.tensor([4, 6])", ", lucid.tensor([6, 9])", "tensor([12, 18])"),
    "i0_": ("i0_", "lucid.tensor([0.0])", "", "tensor([1.])"),
    "ldexp_": ("ldexp_", "lucid.tensor([1.0, 3.0])", ", lucid.tensor([2, 1])", "tensor([4., 6.])"),
    "log_": ("log_", "lucid.tensor([1.0])", "", "tensor([0.])"),
    "log10_": ("log10_", "lucid.tensor([10.0])", "", "tensor([1.])"),
    "log1p_": ("log1p_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "log2_": ("log2_", "lucid.tensor([8.0])", "", "tensor([3.])"),
    "logit_": ("logit_", "lucid.tensor([0.5])", "", "tensor([0.])"),
    "nan_to_num_": ("nan_to_num_", "lucid.tensor([float('nan'), 1.0])", ", nan=-1.0", "tensor([-1.,  1.])"),
    "neg_": ("neg_", "lucid.tensor([1.0, -2.0])", "", "tensor([-1.,  2.])"),
    "negative_": ("negative_", "lucid.tensor([1.0, -2.0])", "", "tensor([-1.,  2.])"),
    "reciprocal_": ("reciprocal_", "lucid.tensor([2.0, 4.0])", "", "tensor([0.5 , 0.25])"),
    "relu_": ("relu_", "lucid.tensor([-1.0, 2.0])", "", "tensor([0., 2.])"),
    "round_": ("round_", "lucid.tensor([1.26, 2.5])", ", decimals=1", "tensor([1.3, 2.5])"),
    "rsqrt_": ("rsqrt_", "lucid.tensor([4.0])", "", "tensor([0.5])"),
    "sigmoid_": ("sigmoid_", "lucid.tensor([0.0])", "", "tensor([0.5])"),
    "sin_": ("sin_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "sinc_": ("sinc_", "lucid.tensor([0.0, 1.0])", "", "tensor([ 1.0000000e+00, -2.7827534e-08])"),
    "sinh_": ("sinh_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "sqrt_": ("sqrt_", "lucid.tensor([4.0])", "", "tensor([2.])"),
    "square_": ("square_", "lucid.tensor([-3.0])", "", "tensor([9.])"),
    "tan_": ("tan_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "tanh_": ("tanh_", "lucid.tensor([0.0])", "", "tensor([0.])"),
    "trunc_": ("trunc_", "lucid.tensor([-1.5, 1.5])", "", "tensor([-1.,  1.])"),
    "xlogy_": ("xlogy_", "lucid.tensor([0.0, 2.0])", ", lucid.tensor([0.0, 1.0])", "tensor([0., 0.])"),
    "zero_": ("zero_", "lucid.ones(2)", "", "tensor([0., 0.])"),
    "index_put_": ("index_put_", "lucid.zeros(3)", ", (lucid.tensor([0, 2]),), lucid.tensor(5.0)",
                   "tensor([5., 0., 5.])"),
    "resize_as_": ("resize_as_", "lucid.arange(4.0)", ", lucid.zeros(2, 2)", "tensor([[0., 1.],\n        [2., 3.]])"),
    "as_strided_": ("as_strided_", "lucid.arange(4.0)", ", (2,), (2,)", "tensor([0., 2.])"),
    "addmv_": ("addmv_", "lucid.ones(2)", ", lucid.eye(2), lucid.tensor([1.0, 2.0])", "tensor([2., 3.])"),
    "conj_physical_": ("conj_physical_", "lucid.tensor([1 + 2j])", "", "tensor([1.-2.j], dtype=lucid.complex64)"),
    "selu_": (lambda x: _nn("selu_")(x), "lucid.tensor([0.0, 1.0])", "", "tensor([0.      , 1.050701])"),
    "celu_": (lambda x, alpha=1.0: _nn("celu_")(x, alpha), "lucid.tensor([0.0, 1.0])", "", "tensor([0., 1.])"),
    "threshold_": (lambda x, threshold, value: _nn("threshold_")(x, threshold, value),
                   "lucid.tensor([0.5, 2.0])", ", 1.0, -1.0", "tensor([-1.,  2.])"),
    "rrelu_": (lambda x, lower=1 / 8, upper=1 / 3, training=False: _nn("rrelu_")(x, lower, upper, training),
               "lucid.tensor([-1.0, 2.0])", "", "tensor([-0.22916667,  2.        ])"),
    "dropout_": (_dropout_call("dropout"), "lucid.ones(2)", ", 0.5, False", "tensor([1., 1.])"),
    "alpha_dropout_": (_dropout_call("alpha_dropout"), "lucid.ones(2)", ", 0.5, False", "tensor([1., 1.])"),
    "feature_alpha_dropout_": (_dropout_call("feature_alpha_dropout"), "lucid.ones(1, 2)", ", 0.5, False",
                               "tensor([[1., 1.]])"),
    "feature_dropout_": (_feature_dropout_, "lucid.ones(1, 2)", ", 1.0, True", "tensor([[0., 0.]])"),
}


def _top_level(name, how, setup, args, shows):
    def fn(input, *a, **k):
        if not isinstance(input, Tensor):
            raise TypeError(f"{name}: expected a Tensor to change in place, got {type(input).__name__}")
        return getattr(input, how)(*a, **k) if isinstance(how, str) else how(input, *a, **k)

    what = f":meth:`Tensor.{how}`" if isinstance(how, str) else "the ``nn.functional`` form with ``inplace=True``"
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"PyTorch's ``torch.{name}(input, ...)``: {what} on ``input``; returns ``input``.\n\n"
                  f"Examples\n--------\n>>> import lucid\n>>> x = {setup}\n>>> lucid.{name}(x{args}) is x\n"
                  f"True\n>>> x\n{shows}\n")
    return fn


for _name, _spec in _TOP.items():
    globals()[_name] = _top_level(_name, *_spec)

__all__ = list(_TOP)

# The last Tensor methods (protocols, queries, legacy constructors, apply_/map_, storages, set_)
# live in tensor_surface_more, which imports helpers from this module.
from . import tensor_surface_more as _more  # noqa: E402
from .tensor_surface_more import *  # noqa: E402,F401,F403

__all__ += _more.__all__
