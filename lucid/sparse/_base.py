"""What COO and CSR tensors share: the layouts, the stand-in array and the base class.

See NOTE [Sparse tensors] in ``lucid/sparse/__init__.py``.
"""
from __future__ import annotations

import numpy as np

import lucid
from .._core import backend
from .._core import tensor as _tensor_module
from .._core.no_values import NoValues
from .._core.tensor import Tensor
from ..ops.tensor_surface_more import layout as _layout

NOT_HERE = "sparse tensors are not supported here; call .to_dense() first"


class _SparseLayout(_layout):
    """A sparse layout singleton (pickled by name from this module)."""

    __slots__ = ()


sparse_coo = _SparseLayout("sparse_coo")
sparse_csr = _SparseLayout("sparse_csr")
sparse_csc = _SparseLayout("sparse_csc")
sparse_bsr = _SparseLayout("sparse_bsr")
sparse_bsc = _SparseLayout("sparse_bsc")


class _SparseData(NoValues):
    """What a sparse tensor holds as ``_data``: a shape and a dtype, and no values."""

    __slots__ = ()
    message = NOT_HERE
    kind = "sparse tensor"


class SparseTensor(Tensor):
    """Base of :class:`SparseCOOTensor` and :class:`SparseCSRTensor`: a ``Tensor`` whose
    autograd identity is its dense ``values`` tensor (NOTE [Sparse tensors])."""

    _vals = None
    _size = ()
    _dense_fn = None  # the dense tensor it stands for, with its graph: NOTE [Sparse outputs]
    # Off the __torch_function__ protocol (NOTE [Torch function]), which a Tensor subclass
    # would otherwise switch on for every public call: sparse tensors dispatch through their
    # own methods and lucid.mm/matmul/addmm's wrappers.
    if hasattr(_tensor_module, "_disabled_torch_function_impl"):
        __torch_function__ = _tensor_module._disabled_torch_function_impl

    def _init(self, vals, size):
        self._vals = vals
        self._size = backend_size(size)
        self._data = _SparseData(self._size, np.dtype(vals.dtype))
        self._version = [0]

    # ----------------------------------------------------------- metadata
    @property
    def shape(self):
        return self._size

    @property
    def dtype(self):
        return self._vals.dtype

    @property
    def device(self):
        return self._vals.device

    @property
    def is_cpu(self):
        return self._vals.is_cpu

    def numel(self):
        return int(np.prod(self._size, dtype=np.int64))

    @property
    def mT(self):
        """``transpose(-2, -1)``, as PyTorch's (a batch of matrices too; CSR becomes CSC)."""
        if len(self._size) < 2:
            raise RuntimeError("tensor.mT is only supported on matrices or batches of matrices. "
                               f"Got {len(self._size)}-D tensor.")
        return self.transpose(-2, -1)

    @property
    def mH(self):
        """``mT``, conjugated for a complex tensor, as PyTorch's."""
        t = self.mT
        return t.conj() if self.dtype.is_complex else t

    nelement = numel

    def _nnz(self):
        return int(self._vals.shape[0])

    def dense_dim(self):
        return len(self._vals.shape) - 1

    # ----------------------------------------------------------- autograd
    @property
    def requires_grad(self):
        return self._vals.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        flag = bool(flag)
        if flag == self._vals.requires_grad:
            return
        if not flag:  # a leaf only, as for dense tensors
            self._vals.requires_grad = False
            return
        # A fresh leaf of our own: never flip the flag of the tensor the values came from.
        leaf = self._vals.detach()
        try:
            leaf.requires_grad = True
        except RuntimeError as e:
            raise RuntimeError(str(e).replace("requires_grad:", "requires_grad_:", 1)) from None
        self._vals = leaf

    @property
    def is_leaf(self):
        return self._vals.is_leaf

    @property
    def grad_fn(self):
        return self._vals.grad_fn

    @property
    def grad(self):
        g = self._vals._grad
        if g is None:
            return None
        cached = self.__dict__.get("_grad_cache")
        if cached is not None and cached[0] is g:
            return cached[1]
        out = self._grad_from_values(g)
        self.__dict__["_grad_cache"] = (g, out)
        return out

    @grad.setter
    def grad(self, value):
        if value is not None:
            raise NotImplementedError("grad: only None can be assigned to a sparse tensor's .grad")
        self._vals._grad = None

    # lucid.autograd.grad's protocol for layouts: the dense tensor carrying the graph, and the
    # gradient in this layout
    def _grad_carrier(self):
        return self._vals

    def _grad_wrap(self, g):
        return self._grad_from_values(g)

    # NOTE [Sparse outputs]
    # In PyTorch the gradient reaching a sparse tensor is dense or sparse depending on the ops
    # around it. Converting a dense tensor (``to_sparse*``: ``ToSparseBackward`` is
    # ``grad.to_dense()``) is the identity on the dense values, so a dense gradient arriving at
    # its output reaches every entry of the source, stored or not, and the linear ops that
    # keep a dense gradient dense (scalar mul/div, neg, add/sub and mul of sparse tensors, mul
    # by a dense tensor, clone, to, t/transpose, coalesce, layout conversions, index_select,
    # narrow_copy) pass it on; ``torch.sparse.sum``/``mm``, ``values()``, ``to_dense()`` (its
    # default masked_grad), ``sparse_mask`` and the nonlinear elementwise ops (abs, pow ...)
    # hand back a sparse gradient, which reaches the stored entries only. Lucid's graph runs
    # through the values (NOTE [Sparse tensors]): the second kind. The first is kept aside as
    # ``_dense_fn``: converting a dense tensor that requires grad (in grad mode) records a
    # function returning it, and those linear ops record one composed from their operands'
    # (``to_dense()`` standing in for an operand without one). It is called lazily, in grad
    # mode, where the dense gradient is wanted:
    # - ``autograd.grad``/``backward`` of a sparse output that has one differentiate the
    #   dense tensor it returns, seeded with the whole gradient (dense, or sparse of any
    #   layout made dense; ones when omitted under ``grad``): ``grad(x.to_sparse(), x,
    #   ones)`` is ones, as in PyTorch. Those are plain Lucid ops, so create_graph,
    #   is_grads_batched (the seeds are batched, the output is made before vmap) and the
    #   devices need nothing more.
    # - ``to_dense(masked_grad=False)`` returns a copy of it.
    # Any other sparse output (built from values by ``sparse_coo_tensor``, a leaf, the result
    # of abs or sparse.sum(dim) ...), and every output while a sparse tensor is among the
    # inputs of ``grad`` (or ``backward(inputs=)``), whose gradient must reach its values,
    # goes through its values, seeded with the gradient read at the stored entries in the
    # values' storage order: the vjp of "values -> the dense tensor they represent".
    def _grad_output(self, g, api, batched=False, dense=True):
        """``(output, seed)`` to differentiate for gradient ``g`` of this output: its dense
        source (``dense``, where it has one) or its values. See NOTE [Sparse outputs]."""
        g, lead = self._dense_seed(g, api, batched)
        if dense and self._dense_fn is not None:
            from .._core.grad_mode import enable_grad

            with enable_grad():
                return self._dense_fn(), g
        idx = self._stored_index()
        if idx.shape[0] == 0:  # a 0-d tensor: every stored entry is the one element
            picked = g.reshape(lead + (1,)).expand(lead + (int(idx.shape[1]),))
        else:
            picked = g[(slice(None),) * len(lead) + tuple(idx[d] for d in range(int(idx.shape[0])))]
        return self._vals, picked.reshape(lead + tuple(self._vals.shape))

    def _dense_seed(self, g, api, batched):
        """Gradient ``g`` of this output as a dense tensor of its shape (after a batch dim when
        ``batched``), and that batch dim's shape."""
        if g is None:
            if api == "backward" and self.numel() != 1:
                raise RuntimeError(f"{api}: grad can be implicitly created only for scalar outputs, but the "
                                   f"sparse output has shape {tuple(self._size)}; pass a gradient of that shape")
            g, batched = lucid.ones(tuple(self._size), dtype=self.dtype, device=self.device), False
        elif isinstance(g, SparseTensor):
            g = g.to_dense()
        elif not isinstance(g, Tensor):
            g = lucid.tensor(g, dtype=self.dtype, device=self.device)
        lead = tuple(g.shape[:1]) if batched else ()
        if tuple(g.shape) != lead + tuple(self._size):
            if batched or g.numel() != 1 or self.numel() != 1:
                raise RuntimeError(f"{api}: mismatch in shape: gradient has shape {tuple(g.shape)} but the sparse "
                                   f"output has shape {tuple(self._size)}")
            g = g.reshape(tuple(self._size))
        return g, lead

    def _masked_grad_off(self, masked_grad):
        """``to_dense(masked_grad=False)``'s result where it differs from the masked one: a
        copy of the dense source, else None. See NOTE [Sparse outputs]."""
        from .._core.grad_mode import is_grad_enabled

        if masked_grad is None or masked_grad or self._dense_fn is None or not is_grad_enabled():
            return None
        return self._dense_fn().clone()

    def _stored_index(self):
        raise NotImplementedError  # per layout: (sparse dims, entries) in the values' order

    @property
    def data(self):
        return self.detach()

    def retain_grad(self):
        raise NotImplementedError("retain_grad: not supported on sparse tensors; call it on .values()")

    def register_hook(self, hook):
        raise NotImplementedError("register_hook: not supported on sparse tensors; hook .values() instead")

    def detach_(self):
        raise NotImplementedError("detach_: not supported on sparse tensors; use .detach()")

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """``Tensor.backward`` of a sparse tensor: ``gradient`` (dense or sparse, this shape)
        reaches the dense tensor it was converted from whole, or else is read at the stored
        entries and pushed through the values (NOTE [Sparse outputs]).

        Examples
        --------
        >>> import lucid
        >>> x = lucid.tensor([[0.0, 2.0], [3.0, 0.0]], requires_grad=True)
        >>> (x * 2).to_sparse().backward(lucid.ones(2, 2))
        >>> x.grad
        tensor([[2., 2.],
                [2., 2.]])
        >>> v = lucid.tensor([2.0, 3.0], requires_grad=True)
        >>> lucid.sparse_coo_tensor([[0, 1], [1, 0]], v, (2, 2)).backward(lucid.ones(2, 2))
        >>> v.grad
        tensor([1., 1.])
        """
        from ..autograd.grad import backward

        backward(self, gradient, retain_graph, create_graph, inputs=inputs)

    # ----------------------------------------------------------- conversions
    def numpy(self, *, force=False):
        raise TypeError("numpy: can't convert a sparse tensor to numpy; use Tensor.to_dense() first")

    def __array__(self, dtype=None, copy=None):
        raise TypeError("numpy: can't convert a sparse tensor to numpy; use Tensor.to_dense() first")

    def tolist(self):
        raise RuntimeError("tolist: " + NOT_HERE)

    def item(self):
        raise RuntimeError("item: " + NOT_HERE)

    def __bool__(self):
        raise RuntimeError("bool: " + NOT_HERE)

    def __len__(self):
        if not self._size:
            raise TypeError("len() of a 0-d tensor")
        return self._size[0]

    def __iter__(self):
        raise NotImplementedError("iter: " + NOT_HERE)

    def __getitem__(self, key):
        raise NotImplementedError("getitem: " + NOT_HERE)

    def __setitem__(self, key, value):
        raise NotImplementedError("setitem: " + NOT_HERE)

    def to(self, *args, **kwargs):
        """The same sparse tensor with its values (and indices) moved or cast, as ``Tensor.to``."""
        vals = self._vals.to(*args, **kwargs)
        if vals is self._vals:
            return self
        return derive_dense(self._replace(vals, vals.device), lambda d: d.to(*args, **kwargs), self)

    def double(self):
        return self.to(np.float64)

    def float(self):
        return self.to(np.float32)

    def half(self):
        return self.to(np.float16)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None, non_blocking=False):
        return self.to("cuda" if device is None else device)

    def type(self, dtype=None, non_blocking=False):
        if dtype is None:
            head, name = self._vals.type().rsplit(".", 1)  # PyTorch's torch[.cuda].sparse.FloatTensor
            return f"{head}.sparse.{name}"
        return self.to(dtype)

    def type_as(self, other):
        return self.to(other.dtype)

    def to_dense(self, dtype=None, *, masked_grad=None):
        raise NotImplementedError  # per layout

    # ----------------------------------------------------------- printing
    def _suffixes(self):
        from .._core.dtypes import get_default_dtype

        out = []
        if self.device.type != "cpu":
            out.append(f"device='{self.device}'")
        out += [f"size={tuple(self._size)}", f"nnz={self._nnz()}"]
        dt = self.dtype
        complex_default = np.complex128 if np.dtype(get_default_dtype()) == np.float64 else np.complex64
        if np.dtype(dt) not in (np.dtype(get_default_dtype()), np.dtype(complex_default), np.dtype(np.int64),
                                np.dtype(np.bool_)):
            out.append(f"dtype=lucid.{np.dtype(dt)}")
        return out

    def _tail(self):
        out = [f"layout={self.layout!r}"]
        if self.grad_fn is not None:
            out.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            out.append("requires_grad=True")
        return out


def from_dense(s, x):
    """Sparse ``s`` converted from dense ``x``: records ``x`` as its dense source when ``x``
    requires grad in grad mode (NOTE [Sparse outputs]); returns ``s``."""
    from .._core.grad_mode import is_grad_enabled

    if x.requires_grad and is_grad_enabled():
        version = x._version[0]

        def source():
            _check_unchanged(((x, version),))
            return x

        s._dense_fn = source
    return s


def _check_unchanged(recorded):
    """The dense tensors a lazily built dense source reads must be as they were when it was
    recorded: its graph is built from their current values and nodes (NOTE [Sparse outputs])."""
    for t, version in recorded:
        if t._version[0] != version:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified by an inplace "
                f"operation: a dense tensor of shape {tuple(t.shape)} that a sparse tensor was made from is at "
                f"version {t._version[0]}; expected version {version} (sparse gradient through its dense source)")


def derive_dense(out, op, *args):
    """``out = op(*args)`` on sparse operands: where one of them has a dense source, ``out``'s
    is ``op`` of their dense forms (``to_dense()`` for one without; other arguments as they
    are), built when asked for. See NOTE [Sparse outputs]; returns ``out``."""
    from .._core.grad_mode import is_grad_enabled

    if out is None or out is NotImplemented or not isinstance(out, SparseTensor) or not is_grad_enabled() \
            or not any(isinstance(a, SparseTensor) and a._dense_fn is not None for a in args):
        return out
    if any(a is out for a in args):  # the same tensor handed back (a no-op): it keeps its own
        return out

    def dense_of(a):
        if not isinstance(a, SparseTensor):
            return a
        return a._dense_fn() if a._dense_fn is not None else a.to_dense()

    recorded = tuple((a, a._version[0]) for a in args if isinstance(a, Tensor) and not isinstance(a, SparseTensor))

    def source():
        _check_unchanged(recorded)
        return op(*[dense_of(a) for a in args])

    out._dense_fn = source
    return out


def backend_size(size):
    from .._core.size import as_size

    return as_size(tuple(int(s) for s in size))


def field_str(t, prefix, indent=7):
    """PyTorch's ``_tensor_str`` of a component tensor printed after ``prefix``."""
    from .._core.printing import array_str

    arr = backend.host(t.detach()._data)
    if arr.size == 0:
        return "[]" + f", size={tuple(arr.shape)}"
    return array_str(arr, prefix=" " * (indent + len(prefix)))


def add_suffixes(text, suffixes, indent, force_newline):
    """PyTorch's ``_add_suffixes``: suffixes after ``text``, wrapped at the print width."""
    from .._core.printing import get_printoptions

    width = max(80, get_printoptions().get("linewidth", 80))  # PyTorch's default width is 80
    parts = [text]
    last = len(text) - text.rfind("\n") + 1
    for s in suffixes:
        if force_newline or last + len(s) + 2 > width:
            parts.append(",\n" + " " * indent + s)
            last = indent + len(s)
            force_newline = False
        else:
            parts.append(", " + s)
            last += len(s) + 2
    parts.append(")")
    return "".join(parts)


def require_sparse(x, name):
    if not isinstance(x, SparseTensor):
        raise TypeError(f"{name}: expected a sparse tensor, got {type(x).__name__}"
                        + (" with layout lucid.strided" if isinstance(x, Tensor) else ""))
    return x


class check_sparse_tensor_invariants:  # noqa: N801 (PyTorch's name)
    """Check the invariants of every sparse tensor made (indices in bounds, compressed indices
    sorted ...) unless a constructor says ``check_invariants=False``: a context manager, a
    decorator, or switched globally with ``enable()``/``disable()`` (PyTorch's).

    Examples
    --------
    >>> import lucid
    >>> with lucid.sparse.check_sparse_tensor_invariants():
    ...     lucid.sparse.check_sparse_tensor_invariants.is_enabled()
    True
    >>> lucid.sparse.check_sparse_tensor_invariants.is_enabled()
    False
    """

    _enabled = [False]

    def __init__(self, enable=True):
        self.state = bool(enable)
        self._saved = []

    @staticmethod
    def is_enabled():
        return check_sparse_tensor_invariants._enabled[0]

    @staticmethod
    def enable():
        check_sparse_tensor_invariants._enabled[0] = True

    @staticmethod
    def disable():
        check_sparse_tensor_invariants._enabled[0] = False

    def __enter__(self):
        self._saved.append(self._enabled[0])
        self._enabled[0] = self.state
        return self

    def __exit__(self, *exc):
        self._enabled[0] = self._saved.pop()
        return False

    def __call__(self, fn):
        import functools

        @functools.wraps(fn)
        def run(*args, **kwargs):
            with check_sparse_tensor_invariants(self.state):
                return fn(*args, **kwargs)

        return run


def checks_invariants(flag):
    """A constructor's ``check_invariants`` (None: the global setting)."""
    return check_sparse_tensor_invariants._enabled[0] if flag is None else bool(flag)
