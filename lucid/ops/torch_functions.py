"""PyTorch's top-level functions that Lucid had only under another name or namespace.

``torch.cross``, ``torch.tensor_split``, ``torch.index_reduce``, ``torch.histogramdd``,
``torch.nonzero_static`` ... Each is composed from existing primitives (so it inherits their
vjp, jvp and batching rules; ``signbit`` alone is a one-line primitive without gradient) and
has op database samples in ``tests/ops/db_torch_functions.py``. Where PyTorch warns that a
function is deprecated (``chain_matmul``, ``cross`` without ``dim``, ``frobenius_norm``,
``nuclear_norm``), Lucid warns too.

The legacy linear algebra (``torch.svd`` returning V, ``torch.lu`` ...) is in
``torch_legacy_linalg.py`` and the ``nn.functional`` spellings with PyTorch's top-level
signatures (``torch.dropout(input, p, train)``, ``torch.embedding(weight, indices)`` ...) in
``torch_nn_functions.py``; both are exported from here.
"""
from __future__ import annotations

import builtins
import collections
import math
import warnings

import numpy as np

from .._core.primitive import bind
from .._core.size import Size
from .._core.tensor import Tensor
from ._family import _as_tensor, nondiff, normalize_axis, xp
from .numpy_aliases import REQUIRED, numpy_axis, numpy_keepdims

HistogramddResult = collections.namedtuple("histogramdd", ["hist", "bin_edges"])


def _L():
    import lucid

    return lucid


def _deprecated(message):
    warnings.warn(message, UserWarning, stacklevel=3)


def _method(name, fn):
    """Attach ``fn`` as ``Tensor.<name>`` unless the Tensor already has that method."""
    if not hasattr(Tensor, name):
        setattr(Tensor, name, fn)


def _on_host(t):
    """Whether ``t`` holds concrete CPU values: value checks run there only, since on a device
    they would read back every call (as ``one_hot``'s)."""
    return type(t) is Tensor and t._data.__class__ is np.ndarray


def _ints(value, op, what):
    vals = [value] if isinstance(value, (int, np.integer)) else list(value)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals):
        raise TypeError(f"{op}: {what} must be an int or a sequence of ints, got {value!r}")
    return [int(v) for v in vals]


# ------------------------------------------------------------------ elementwise


def absolute(input):
    """``|input|`` (PyTorch's alias of :func:`lucid.abs`).

    Examples
    --------
    >>> import lucid
    >>> lucid.absolute(lucid.tensor([-1.5, 2.0]))
    tensor([1.5, 2. ])
    """
    return _L().abs(input)


def _real_float(input, op):
    x = _as_tensor(input)
    if x.dtype.kind == "c":
        raise RuntimeError(f"{op}: not supported for complex tensors")
    return x.to(_L().get_default_dtype()) if x.dtype.kind in "biu" else x


def deg2rad(input):
    """Degrees to radians, ``input * pi / 180`` (integers and bools become the default float).

    Examples
    --------
    >>> import lucid
    >>> lucid.deg2rad(lucid.tensor([180.0, 90.0]))
    tensor([3.1415927, 1.5707964])
    """
    return _real_float(input, "deg2rad") * (math.pi / 180.0)


def rad2deg(input):
    """Radians to degrees, ``input * 180 / pi`` (integers and bools become the default float).

    Examples
    --------
    >>> import lucid
    >>> lucid.rad2deg(lucid.tensor([3.141592653589793]))
    tensor([180.])
    """
    return _real_float(input, "rad2deg") * (180.0 / math.pi)


def signbit(input):
    """Whether each element's sign bit is set: True for negatives, ``-0.0`` and ``-nan``.

    Examples
    --------
    >>> import lucid
    >>> lucid.signbit(lucid.tensor([-0.0, 0.0, -2.0, 3.0]))
    tensor([ True, False,  True, False])
    """
    L = _L()
    x = _as_tensor(input)
    if x.dtype.kind == "c":
        raise NotImplementedError("signbit: not implemented for complex tensors")
    if x.dtype.kind == "b":
        return L.zeros_like(x, dtype=L.bool)
    if x.dtype.kind in "iu":
        return x < 0
    return bind(signbit_p, (x,), {})


# A primitive because no arithmetic reads the sign of a NaN (copysign composes from atan2).
signbit_p = nondiff("signbit", xp.signbit)


def clamp_min(input, min):  # noqa: A002  (PyTorch's argument name)
    """``max(input, min)`` elementwise: :func:`lucid.clamp` with a lower bound only.

    Parameters
    ----------
    input : Tensor
    min : number or Tensor
        The lower bound (broadcasts).

    Examples
    --------
    >>> import lucid
    >>> lucid.clamp_min(lucid.tensor([1.0, 5.0]), 2.0)
    tensor([2., 5.])
    """
    return _clamp_one(input, "clamp_min", min=min)


def clamp_max(input, max):  # noqa: A002
    """``min(input, max)`` elementwise: :func:`lucid.clamp` with an upper bound only.

    Examples
    --------
    >>> import lucid
    >>> lucid.clamp_max(lucid.tensor([1.0, 5.0]), 2.0)
    tensor([1., 2.])
    """
    return _clamp_one(input, "clamp_max", max=max)


def _clamp_one(input, op, **bound):
    x = _as_tensor(input)
    if x.dtype.kind == "c" or any(isinstance(b, Tensor) and b.dtype.kind == "c" for b in bound.values()):
        raise NotImplementedError(f"{op}: not supported for complex tensors")
    if next(iter(bound.values())) is None:
        raise TypeError(f"{op}: the bound must be a number or a tensor, got None")
    return _L().clamp(x, **bound)


# ------------------------------------------------------------------ products and norms


def adjoint(input):
    """The conjugate transpose of the last two dims. For real input a view (``input.mT``);
    Lucid keeps no lazy conjugate bit, so complex input gives a new tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.adjoint(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([[1., 3.],
            [2., 4.]])
    """
    x = _as_tensor(input)
    if x.ndim == 1:  # 0-d: PyTorch's (deprecated) identity, conjugated
        raise RuntimeError(f"adjoint: only supported on matrices or batches of matrices, got a {x.ndim}-D tensor")
    return x.mT.conj() if x.dtype.kind == "c" else x.mT


def inner(input, other):
    """Sum of products over the last dims: shape ``input.shape[:-1] + other.shape[:-1]``
    (a 0-d operand multiplies). Complex values are not conjugated.

    Examples
    --------
    >>> import lucid
    >>> lucid.inner(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]), lucid.tensor([1.0, 1.0]))
    tensor([3., 7.])
    """
    a, b = _as_tensor(input), _as_tensor(other)
    if a.dtype != b.dtype:
        raise RuntimeError(f"inner: both inputs should have the same dtype, got {a.dtype} and {b.dtype}")
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"inner: the last dimension must match on both inputs, got shapes {tuple(a.shape)} "
                           f"and {tuple(b.shape)}")
    return _L().tensordot(a, b, dims=([a.ndim - 1], [b.ndim - 1]))


def chain_matmul(*matrices):
    """The product of two or more 2-D matrices (deprecated in PyTorch, which warns: use
    :func:`lucid.linalg.multi_dot`).

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.chain_matmul(lucid.eye(2), lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([[1., 2.],
            [3., 4.]])
    """
    _deprecated("chain_matmul is deprecated and will be removed in a future release (as in PyTorch). Use "
                "lucid.linalg.multi_dot instead, which accepts a list of two or more tensors.")
    if not matrices:
        raise RuntimeError("chain_matmul: expected one or more matrices")
    ms = [_as_tensor(m) for m in matrices]
    for i, m in enumerate(ms):
        if m.ndim != 2:
            raise RuntimeError(f"chain_matmul: tensor {i} has {m.ndim} dimensions, expected 2")
        if m.dtype != ms[0].dtype:
            raise RuntimeError(f"chain_matmul: all tensors must have the same dtype, but tensor 0 is "
                               f"{ms[0].dtype} and tensor {i} is {m.dtype}")
    for i in range(len(ms) - 1):
        if ms[i].shape[1] != ms[i + 1].shape[0]:
            raise RuntimeError(f"chain_matmul: tensors {i} and {i + 1} with shapes {tuple(ms[i].shape)} and "
                               f"{tuple(ms[i + 1].shape)} cannot be multiplied")
    return ms[0].clone() if len(ms) == 1 else _L().linalg.multi_dot(ms)


def cross(input, other, dim=None, *, axis=None):
    """The cross product of 3-vectors along ``dim`` (both inputs of size 3 there; the other
    dims broadcast). ``dim=None`` (deprecated, warns as in PyTorch) picks ``input``'s first
    dim of size 3; pass ``dim`` or use :func:`lucid.linalg.cross` (whose default is ``-1``).

    Examples
    --------
    >>> import lucid
    >>> lucid.cross(lucid.tensor([1.0, 0.0, 0.0]), lucid.tensor([0.0, 1.0, 0.0]), dim=0)
    tensor([0., 0., 1.])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("cross", dim, axis, None)
    a, b = _as_tensor(input), _as_tensor(other)
    if dim is None:
        _deprecated("Using cross without specifying the dim arg is deprecated (as in PyTorch). Pass the dim "
                    "explicitly or use lucid.linalg.cross; the default will change to agree with it.")
        # input's own shape, not the broadcast one (PyTorch's _default_cross_dim)
        dim = next((d for d, n in enumerate(a.shape) if n == 3), None)
        if dim is None:
            raise RuntimeError(f"cross: no dimension of size 3 in input (shape {tuple(a.shape)})")
    if a.ndim != b.ndim:
        raise RuntimeError(f"cross: inputs must have the same number of dimensions, got shapes "
                           f"{tuple(a.shape)} and {tuple(b.shape)}")
    d = normalize_axis(dim, a.ndim, "cross")
    if a.shape[d] != 3 or b.shape[d] != 3:  # a size 1 there would broadcast to a vector (c, c, c)
        raise RuntimeError(f"cross: inputs dimension {d} must have length 3, got {a.shape[d]} and {b.shape[d]}")
    return _L().linalg.cross(a, b, dim=d)


def frobenius_norm(input, dim=REQUIRED, keepdim=False, *, axis=None, keepdims=None):
    """The 2-norm over ``dim`` (at most two dims; ``()`` means all). Deprecated in PyTorch,
    which warns: use :func:`lucid.linalg.vector_norm`.

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.frobenius_norm(lucid.tensor([[3.0, 0.0], [0.0, 4.0]]), (0, 1))
    tensor(5.)
    """
    if axis is not None or dim is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("frobenius_norm", dim, axis, REQUIRED)
    if keepdims is not None:
        keepdim = numpy_keepdims("frobenius_norm", keepdim, keepdims)
    _deprecated("frobenius_norm is deprecated and will be removed in a future release (as in PyTorch). Use "
                "lucid.linalg.vector_norm(A, 2., dim, keepdim) instead.")
    x = _as_tensor(input)
    dims = _ints(dim, "frobenius_norm", "dim")
    if len(dims) > 2:
        raise RuntimeError(f"frobenius_norm: expected at most 2 dims, got {len(dims)} ({tuple(dims)})")
    norm = [normalize_axis(d, x.ndim, "frobenius_norm") for d in dims]
    if len(set(norm)) != len(norm):
        raise RuntimeError(f"frobenius_norm: dim {norm[0]} appears multiple times in the list of dims")
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"frobenius_norm: input dtype should be floating point or complex, got {x.dtype}")
    return _L().linalg.vector_norm(x, 2, dim=tuple(norm) or None, keepdim=keepdim)


def nuclear_norm(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
    """The sum of singular values of the matrices over ``dim`` (default the last two dims).
    As in PyTorch, the second positional argument may be ``keepdim`` (a bool) or ``dim``.
    Deprecated in PyTorch, which warns: use :func:`lucid.linalg.matrix_norm` with ``'nuc'``.

    Examples
    --------
    >>> import lucid, warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     lucid.nuclear_norm(lucid.tensor([[3.0, 0.0], [0.0, -4.0]]))
    tensor(7.)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("nuclear_norm", dim, axis, None)
    if keepdims is not None:
        keepdim = numpy_keepdims("nuclear_norm", keepdim, keepdims)
    _deprecated("nuclear_norm is deprecated and will be removed in a future release (as in PyTorch). Use "
                "lucid.linalg.matrix_norm(A, 'nuc', dim, keepdim) instead.")
    if isinstance(dim, bool):
        dim, keepdim = None, dim
    dims = (-2, -1) if dim is None else tuple(_ints(dim, "nuclear_norm", "dim"))
    if len(dims) != 2:
        raise RuntimeError(f"nuclear_norm: dim must be a 2-tuple, got {dims}")
    x = _as_tensor(input)
    if x.ndim < 2:
        raise RuntimeError(f"nuclear_norm: the input must have at least 2 dimensions, got shape {tuple(x.shape)}")
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"nuclear_norm: expected a floating point or complex input, got {x.dtype}")
    return _L().linalg.matrix_norm(x, "nuc", dim=dims, keepdim=keepdim)


# ------------------------------------------------------------------ shapes and splits


def diagflat(input, offset=0):
    """A 2-D matrix with the flattened ``input`` on its ``offset``-th diagonal.

    Examples
    --------
    >>> import lucid
    >>> lucid.diagflat(lucid.tensor([[1, 2]]), offset=1)
    tensor([[0, 1, 0],
            [0, 0, 2],
            [0, 0, 0]])
    """
    return _L().diag(_as_tensor(input).reshape(-1), int(offset))


def msort(input):
    """``input`` sorted along its first dim (``lucid.sort(input, dim=0).values``).

    Examples
    --------
    >>> import lucid
    >>> lucid.msort(lucid.tensor([[3, 1], [1, 2]]))
    tensor([[1, 1],
            [3, 2]])
    """
    return _L().sort(_as_tensor(input), dim=0).values


def trapz(y, x=None, *, dx=None, dim=-1, axis=None):
    """The trapezoidal rule along ``dim`` (PyTorch's alias of :func:`lucid.trapezoid`): with
    sample points ``x`` (a tensor) or a constant spacing ``dx`` (default 1), not both.

    Examples
    --------
    >>> import lucid
    >>> lucid.trapz(lucid.tensor([1.0, 2.0, 3.0]), dx=0.5)
    tensor(2.)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("trapz", dim, axis, -1)
    if x is not None and dx is not None:
        raise TypeError("trapz: pass the sample points x or the spacing dx, not both")
    if x is not None and not isinstance(x, Tensor):
        raise TypeError(f"trapz: x must be a Tensor of sample points (pass a spacing as dx=), got {type(x).__name__}")
    return _L().trapezoid(y, x, dx=dx, dim=dim)


def _getitem(x, d, start, stop):
    from .indexing import getitem

    return getitem(x, (slice(None),) * d + (slice(start, stop),))


def tensor_split(input, indices_or_sections=None, dim=0, *, sections=None, indices=None, axis=None):
    """Split ``input`` along ``dim`` into views: into ``n`` near-equal parts (an int or a 0-d
    int64 tensor; the first ``size % n`` parts one longer) or before each index of a list (or
    1-d int64 tensor) of indices (Python slicing: negative indices count from the end, out of
    range ones clamp, decreasing ones give empty parts).

    Examples
    --------
    >>> import lucid
    >>> [t.tolist() for t in lucid.tensor_split(lucid.arange(7), 3)]
    [[0, 1, 2], [3, 4], [5, 6]]
    >>> [t.tolist() for t in lucid.tensor_split(lucid.arange(7), [1, 5])]
    [[0], [1, 2, 3, 4], [5, 6]]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("tensor_split", dim, axis, 0)
    given = [v for v in (indices_or_sections, sections, indices) if v is not None]
    if len(given) != 1:  # PyTorch's overloads: exactly one of the three
        raise TypeError("tensor_split: expected exactly one of indices_or_sections, sections= or indices=")
    if sections is not None and not isinstance(sections, (int, np.integer)):
        raise TypeError(f"tensor_split: sections must be an int, got {type(sections).__name__}")
    x = _as_tensor(input)
    if x.ndim == 0:
        raise RuntimeError("tensor_split: expected at least a 1-dimensional tensor, but got a tensor with 0 dims")
    d = normalize_axis(dim, x.ndim, "tensor_split")
    spec = given[0]
    if isinstance(spec, Tensor):
        if spec.dtype != _L().int64:
            raise RuntimeError(f"tensor_split: expected tensor_indices_or_sections to have dtype int64, got "
                               f"{spec.dtype}")
        if spec.ndim > 1:
            raise RuntimeError(f"tensor_split: expected tensor_indices_or_sections to be 0- or 1-dimensional, "
                               f"got {spec.ndim} dims")
        spec = spec.tolist()  # the parts' sizes are values: read them (PyTorch wants them on the host too)
    if isinstance(spec, (int, np.integer)) and not isinstance(spec, bool):
        n, size = int(spec), x.shape[d]
        if n <= 0:
            raise RuntimeError(f"tensor_split: number of sections must be larger than 0, got {n}")
        q, r = divmod(size, n)
        bounds = [i * q + min(i, r) for i in range(n + 1)]
        return tuple(_getitem(x, d, bounds[i], bounds[i + 1]) for i in range(n))
    idx = _ints(spec, "tensor_split", "indices_or_sections")
    cuts = [0] + idx + [None]
    return tuple(_getitem(x, d, cuts[i], cuts[i + 1]) for i in range(len(cuts) - 1))


def split_with_sizes(input, split_sizes, dim=0, *, axis=None):
    """Split ``input`` along ``dim`` into views of the given sizes (they must add up to its size).

    Examples
    --------
    >>> import lucid
    >>> [t.tolist() for t in lucid.split_with_sizes(lucid.arange(5), [2, 3])]
    [[0, 1], [2, 3, 4]]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("split_with_sizes", dim, axis, 0)
    return _L().split(_as_tensor(input), _ints(split_sizes, "split_with_sizes", "split_sizes"), dim)


def broadcast_shapes(*shapes):
    """The shape that tensors of ``shapes`` (ints, sequences of ints or Sizes) broadcast to.

    Examples
    --------
    >>> import lucid
    >>> lucid.broadcast_shapes((2,), (3, 1), (1, 1, 1))
    (1, 3, 2)
    """
    out = []
    for i, s in enumerate(shapes):
        if isinstance(s, Tensor):
            raise RuntimeError(f"broadcast_shapes: shapes must be ints or sequences of ints, got a tensor "
                               f"(argument {i})")
        dims = _ints(s, "broadcast_shapes", "each shape")
        if any(n < 0 for n in dims):
            raise ValueError(f"broadcast_shapes: negative dimension in shape {tuple(dims)} (argument {i})")
        out = [1] * (len(dims) - len(out)) + out
        for k, n in enumerate(dims, start=len(out) - len(dims)):
            if out[k] == 1:
                out[k] = n
            elif n != 1 and n != out[k]:
                raise RuntimeError(f"broadcast_shapes: shape {tuple(dims)} (argument {i}) does not broadcast to "
                                   f"{tuple(out)}: size {n} against {out[k]} at dimension {k - len(out)}")
    return Size(out)


def broadcast_tensors(*tensors):
    """The tensors broadcast to their common shape (read-only expanded views).

    Examples
    --------
    >>> import lucid
    >>> a, b = lucid.broadcast_tensors(lucid.tensor([[1], [2]]), lucid.tensor([10, 20, 30]))
    >>> a.tolist(), b.shape
    ([[1, 1, 1], [2, 2, 2]], (2, 3))
    """
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(f"broadcast_tensors: expected Tensors, got {type(t).__name__} as element {i}")
    try:
        shape = broadcast_shapes(*[tuple(t.shape) for t in tensors])
    except RuntimeError as e:
        raise RuntimeError(str(e).replace("broadcast_shapes:", "broadcast_tensors:", 1)) from None
    return tuple(_L().broadcast_to(t, shape) for t in tensors)


def unravel_index(indices, shape):
    """Flat indices into a tensor of ``shape`` as a tuple of coordinate tensors, one per dim
    (int64, each of ``indices``' shape). Indices wrap as ``(i // stride) % size``, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> lucid.unravel_index(lucid.tensor([4, 1]), (3, 2))
    (tensor([2, 0]), tensor([0, 1]))
    """
    L = _L()
    idx = _as_tensor(indices)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"unravel_index: expected 'indices' to be an integer tensor, got {idx.dtype}")
    dims = _ints(shape, "unravel_index", "shape")
    if any(n < 0 for n in dims):
        raise ValueError(f"unravel_index: 'shape' cannot have negative values, got {tuple(dims)}")
    if 0 in dims and idx.numel():
        raise RuntimeError(f"unravel_index: no index fits in the empty shape {tuple(dims)}")
    if not dims:
        return ()
    idx = idx.to(L.int64)
    coefs = [int(np.prod(dims[k + 1:], dtype=np.int64)) for k in range(len(dims))]
    # Python-int divisors: an integer division by a tensor checks for zeros, a read-back on a device
    # (a zero size can only meet an empty idx here; max(., 1) keeps its division defined)
    return tuple(L.remainder(L.floor_divide(idx, max(c, 1)), max(n, 1)) for c, n in zip(coefs, dims))


# ------------------------------------------------------------------ indexing


_INDEX_REDUCES = ("prod", "mean", "amax", "amin")


def index_reduce(input, dim=REQUIRED, index=REQUIRED, source=REQUIRED, reduce=REQUIRED, *, include_self=True,
                 axis=None):
    """Reduce the slices of ``source`` into ``input`` at ``index`` along ``dim``:
    ``out[..., index[i], ...] = reduce(out[..., index[i], ...], source[..., i, ...])``.

    ``reduce`` is "prod", "mean", "amax" or "amin"; ``include_self=False`` leaves
    ``input``'s value out wherever something is reduced in. Composed from
    :func:`lucid.scatter_reduce` (so gradients of amax/amin are shared among ties). The index
    range is checked on the CPU only (on a device an index out of range reduces nothing).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0, 3.0])
    >>> lucid.index_reduce(x, 0, lucid.tensor([0, 0, 2]), lucid.tensor([4.0, 5.0, 6.0]), "prod")
    tensor([20.,  2., 18.])
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED or source is REQUIRED or reduce is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("index_reduce", dim, axis, REQUIRED, index=index, source=source, reduce=reduce)
    if reduce not in _INDEX_REDUCES:
        raise RuntimeError(f"index_reduce: expected reduce to be one of prod, mean, amax or amin, got {reduce!r}")
    x, idx, src = _as_tensor(input), _as_tensor(index), _as_tensor(source)
    if idx.dtype.name not in ("int32", "int64"):
        raise RuntimeError(f"index_reduce: expected an int32 or int64 index, got {idx.dtype}")
    if idx.ndim > 1:
        raise IndexError(f"index_reduce: index is supposed to be a vector, got shape {tuple(idx.shape)}")
    if x.dtype != src.dtype:
        raise RuntimeError(f"index_reduce: self ({x.dtype}) and source ({src.dtype}) must have the same dtype")
    scalar = x.ndim == 0
    xs, ss, ii = x.reshape(-1) if scalar else x, src.reshape(-1) if src.ndim == 0 else src, idx.reshape(-1)
    d = normalize_axis(dim, xs.ndim, "index_reduce")
    if ss.ndim != xs.ndim or any(ss.shape[k] != xs.shape[k] for k in range(xs.ndim) if k != d):
        raise RuntimeError(f"index_reduce: source shape {tuple(src.shape)} must match self shape "
                           f"{tuple(x.shape)} outside dim {d}")
    if ii.shape[0] != ss.shape[d]:
        raise RuntimeError(f"index_reduce: number of indices ({ii.shape[0]}) should equal source.size({d}) "
                           f"({ss.shape[d]})")
    if _on_host(ii) and ii.numel() and bool(((ii < 0) | (ii >= xs.shape[d])).any()):
        raise IndexError(f"index_reduce: index out of range for dimension {d} of size {xs.shape[d]}")
    full = ii.reshape([-1 if k == d else 1 for k in range(xs.ndim)]).expand(tuple(ss.shape))
    out = _L().scatter_reduce(xs, d, full, ss, reduce, include_self=include_self)
    return out.reshape(()) if scalar else out


def _index_reduce_(self, dim=REQUIRED, index=REQUIRED, source=REQUIRED, reduce=REQUIRED, *,
                   include_self=True, axis=None):
    """In-place :func:`lucid.index_reduce`; returns ``self``."""
    if axis is not None or dim is REQUIRED or index is REQUIRED or source is REQUIRED or reduce is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("_index_reduce_", dim, axis, REQUIRED, index=index, source=source, reduce=reduce)
    from .inplace import _inplace

    return _inplace("index_reduce_", self, (index, source),
                    lambda x, i, s: index_reduce(x, dim, i, s, reduce, include_self=include_self), None)


def nonzero_static(input, *, size, fill_value=-1):
    """The indices of the non-zero elements (as :func:`lucid.nonzero`), in a fixed-size
    ``(size, input.ndim)`` int64 tensor: truncated, or padded with ``fill_value`` rows.
    The shape depends on no value, so it needs no read-back and works under ``vmap``.

    Examples
    --------
    >>> import lucid
    >>> lucid.nonzero_static(lucid.tensor([[0, 1], [2, 0]]), size=3)
    tensor([[ 0,  1],
            [ 1,  0],
            [-1, -1]])
    """
    L = _L()
    x = _as_tensor(input)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise RuntimeError(f"nonzero_static: 'size' must be a non-negative integer, got {size!r}")
    size, dev = int(size), x.device
    if x.ndim == 0:
        return L.zeros((size, 0), dtype=L.int64, device=dev)
    mask = (x != 0).reshape(-1)
    k = min(size, mask.shape[0])
    # a stable sort of "is zero" puts the non-zero positions first, in order
    first = L.argsort(L.logical_not(mask).to(L.int8), stable=True)[:k]
    coords = L.stack(unravel_index(first, tuple(x.shape)), dim=-1)
    out = L.where(mask[first].unsqueeze(-1), coords, int(fill_value))
    if size > k:
        out = L.cat([out, L.full((size - k, x.ndim), int(fill_value), dtype=L.int64, device=dev)])
    return out


def _memory_order(x):
    """The dims of ``x`` from outermost to innermost in memory when ``x`` is dense and
    non-overlapping (PyTorch's ``clone`` keeps such a layout), else the logical order."""
    nd = x.ndim
    try:
        strides = x.stride()
    except (RuntimeError, AttributeError):
        return list(range(nd))
    big = [k for k in range(nd) if x.shape[k] > 1]
    order = sorted(big, key=lambda k: -strides[k])
    expect = 1
    for k in reversed(order):
        if strides[k] != expect:
            return list(range(nd))
        expect *= x.shape[k]
    ones = [k for k in range(nd) if x.shape[k] <= 1]
    return ones + order  # size-1 dims hold no position: any place works


def as_strided_scatter(input, src, size, stride, storage_offset=None):
    """``input`` with ``src`` written into the ``as_strided(size, stride, storage_offset)``
    view of its clone (strides and offset count elements of that clone, which keeps a dense
    input's memory layout, as PyTorch's does). Differentiable in both.

    Examples
    --------
    >>> import lucid
    >>> a = lucid.zeros(2, 3)
    >>> lucid.as_strided_scatter(a, lucid.tensor([1.0, 2.0]), (2,), (3,), 1)
    tensor([[0., 1., 0.],
            [0., 2., 0.]])
    """
    L = _L()
    x, s = _as_tensor(input), _as_tensor(src)
    size, stride = _ints(size, "as_strided_scatter", "size"), _ints(stride, "as_strided_scatter", "stride")
    off = 0 if storage_offset is None else int(storage_offset)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided_scatter: size {tuple(size)} and stride {tuple(stride)} differ in length")
    if any(v < 0 for v in size + stride) or off < 0:
        raise RuntimeError(f"as_strided_scatter: negative size, stride or offset ({tuple(size)}, "
                           f"{tuple(stride)}, {off})")
    if tuple(s.shape) != tuple(size):
        raise RuntimeError(f"as_strided_scatter: expected src of the view's size {tuple(size)}, got "
                           f"{tuple(s.shape)}")
    perm = _memory_order(x)
    inv = list(np.argsort(perm))
    moved = x.permute(*perm) if x.ndim else x
    flat = moved.reshape(-1)
    pos = np.full(tuple(size), off, dtype=np.int64)  # from the geometry alone: a host constant
    for k, (n, st) in enumerate(zip(size, stride)):
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape((-1,) + (1,) * (len(size) - k - 1))
    if pos.size:
        if pos.max() >= x.numel():
            raise RuntimeError(f"as_strided_scatter: size {tuple(size)}, stride {tuple(stride)} and offset {off} "
                               f"reach element {int(pos.max())}, out of bounds for {x.numel()} elements")
        if np.unique(pos).size != pos.size:
            raise RuntimeError("as_strided_scatter: more than one element of the written-to view refers to a "
                               "single memory location")
        flat = flat.scatter(0, L.tensor(pos.reshape(-1), device=x.device), s.reshape(-1).to(x.dtype))
    out = flat.reshape(tuple(moved.shape))
    return out.permute(*inv) if x.ndim else out


def constant_pad_nd(input, pad, value=0):
    """Pad the last ``len(pad) // 2`` dims with ``value``: ``pad = (left, right, top,
    bottom, ...)`` from the last dim backwards; negative entries crop.

    Examples
    --------
    >>> import lucid
    >>> lucid.constant_pad_nd(lucid.tensor([1.0, 2.0]), [1, 2], 9.0)
    tensor([9., 1., 2., 9., 9.])
    """
    x = _as_tensor(input)
    p = _ints(pad, "constant_pad_nd", "pad")
    if len(p) % 2:
        raise RuntimeError(f"constant_pad_nd: length of pad must be even, got {len(p)}")
    if len(p) > 2 * x.ndim:
        raise RuntimeError(f"constant_pad_nd: pad of length {len(p)} is longer than twice the {x.ndim} dims of "
                           "the input")
    for k in range(len(p) // 2):
        n = x.shape[x.ndim - 1 - k]
        if -min(p[2 * k], 0) - min(p[2 * k + 1], 0) > n:
            raise RuntimeError(f"constant_pad_nd: pad {tuple(p)} crops more than the size {n} of dim "
                               f"{x.ndim - 1 - k}")
    if not p:
        return x.clone()
    return _L().pad(x, tuple(p), mode="constant", value=value)


# ------------------------------------------------------------------ histogramdd


def histogramdd(input, bins, *, range=None, weight=None, density=False):  # noqa: A002
    """``(hist, bin_edges)``: the histogram of the points in the last dim of ``input``
    (``D`` coordinates each), with ``bins`` per dim (an int, ints, or 1-d tensors of edges).

    Without edges, each dim's bins split ``range`` (``[min0, max0, min1, max1, ...]``) or the
    data's span evenly; a value on the last edge falls in the last bin. ``weight`` (of
    ``input.shape[:-1]``) weighs each point; ``density`` divides by the total and the bin
    volume. Not differentiable. The span of the data is read to make the edges.

    Examples
    --------
    >>> import lucid
    >>> pts = lucid.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 0.5], [2.0, 2.0]])
    >>> h = lucid.histogramdd(pts, bins=[2, 2])
    >>> h.hist
    tensor([[1., 0.],
            [1., 2.]])
    >>> h.bin_edges[0]
    tensor([0., 1., 2.])
    """
    L = _L()
    x = _as_tensor(input)
    if x.dtype.kind != "f":
        raise NotImplementedError(f"histogramdd: not implemented for {x.dtype} input (expected floating point)")
    if x.ndim < 2:
        raise RuntimeError(f"histogramdd: input should have at least 2 dimensions, got shape {tuple(x.shape)}")
    D = x.shape[-1]
    pts = x.detach().reshape(-1, D)
    specs = [bins] * D if isinstance(bins, (int, np.integer)) else list(bins)
    if len(specs) != D:
        raise RuntimeError(f"histogramdd: expected {D} bin specifications (the innermost dim), got {len(specs)}")
    if range is not None and len(range) != 2 * D:
        raise RuntimeError(f"histogramdd: for a {D}-dimensional histogram range should have {2 * D} elements, "
                           f"got {len(range)}")
    w = _histogramdd_weight(x, weight)
    edges = [_histogramdd_edges(x, pts, d, b, range) for d, b in enumerate(specs)]
    nb = [e.shape[0] - 1 for e in edges]
    total = int(np.prod(nb, dtype=np.int64))
    hist = L.zeros(total, dtype=x.dtype, device=x.device)
    if total and pts.shape[0]:
        valid, flat = None, 0
        for d, e in enumerate(edges):
            col = pts[:, d]
            k = L.searchsorted(e, col, right=True) - 1
            k = L.where(col == e[-1], nb[d] - 1, k)  # the last bin is closed on the right
            inside = (col >= e[0]) & (col <= e[-1])
            valid = inside if valid is None else valid & inside
            flat = flat * nb[d] + k
        vals = L.ones(pts.shape[0], dtype=x.dtype, device=x.device) if w is None else w
        hist = hist.scatter_add(0, L.where(valid, flat, 0), L.where(valid, vals, 0))
    hist = hist.reshape(nb)
    if density:
        vol = None
        for d, e in enumerate(edges):
            step = (e[1:] - e[:-1]).reshape([-1 if k == d else 1 for k in builtins.range(D)])
            vol = step if vol is None else vol * step
        hist = hist / (hist.sum() * vol)
    return HistogramddResult(hist, tuple(edges))



def _histogramdd_weight(x, weight):
    if weight is None:
        return None
    w = _as_tensor(weight)
    if tuple(w.shape) != tuple(x.shape[:-1]):
        raise RuntimeError(f"histogramdd: weight should have the input's shape without its innermost dim "
                           f"{tuple(x.shape[:-1])}, got {tuple(w.shape)}")
    if w.dtype != x.dtype:
        raise RuntimeError(f"histogramdd: input and weight should have the same dtype, got {x.dtype} and {w.dtype}")
    return w.detach().reshape(-1)


def _histogramdd_edges(x, pts, d, spec, rng):
    L = _L()
    if isinstance(spec, Tensor):
        if spec.ndim != 1 or spec.shape[0] < 1:
            raise RuntimeError(f"histogramdd: the bin edges of dimension {d} should be a non-empty 1-d tensor, "
                               f"got shape {tuple(spec.shape)}")
        if spec.dtype != x.dtype:
            raise RuntimeError(f"histogramdd: input and bin edges should have the same dtype, got {x.dtype} and "
                               f"{spec.dtype} for dimension {d}")
        e = spec.detach()
        if _on_host(e) and e.shape[0] > 1 and bool((e[1:] < e[:-1]).any()):
            raise RuntimeError(f"histogramdd: the bin edges of dimension {d} must be non-decreasing")
        return e
    n = int(spec)
    if n <= 0:
        raise RuntimeError(f"histogramdd: bins must be > 0, got {n} for dimension {d}")
    if rng is not None:
        lo, hi = float(rng[2 * d]), float(rng[2 * d + 1])
    elif pts.shape[0]:
        col = pts[:, d]
        lo, hi = float(col.amin()), float(col.amax())  # the edges come from the data's span
    else:
        lo, hi = 0.0, 1.0
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise RuntimeError(f"histogramdd: dimension {d}'s range [{lo}, {hi}] is not finite")
    if lo > hi:
        raise RuntimeError(f"histogramdd: min should not exceed max, got min {lo} and max {hi} for dimension {d}")
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    return L.linspace(lo, hi, n + 1, dtype=x.dtype, device=x.device)


# ------------------------------------------------------------------ random and conv


def binomial(count, prob, generator=None):
    """Binomial samples: successes in ``count`` trials of probability ``prob`` (float
    tensors of one dtype, broadcast together). No gradient.

    Draws uniform noise with :func:`lucid.rand` (so ``vmap``'s randomness rule and the
    tensor's device apply) and maps it through the binomial quantile (NOTE [Discrete
    samplers]). As in PyTorch, ``prob >= 1`` gives ``count``, ``prob <= 0`` or ``count <= 0``
    gives 0 and a NaN or infinite parameter gives NaN.

    Examples
    --------
    >>> import lucid
    >>> lucid.binomial(lucid.tensor([5.0, 5.0]), lucid.tensor([0.0, 1.0]))
    tensor([0., 5.])
    """
    L = _L()
    if not isinstance(count, Tensor) or not isinstance(prob, Tensor):
        raise TypeError(f"binomial: count and prob must be Tensors, got {type(count).__name__} and "
                        f"{type(prob).__name__}")
    if count.dtype.kind != "f" or prob.dtype.kind != "f":
        raise ValueError(f"binomial: only floating point count and prob are supported, got {count.dtype} and "
                         f"{prob.dtype}")
    if count.dtype != prob.dtype:
        raise RuntimeError(f"binomial: count and prob must have the same dtype, got {count.dtype} and {prob.dtype}")
    from ..distributions._sampling import binomial_icdf

    shape = broadcast_shapes(tuple(count.shape), tuple(prob.shape))
    u = L.rand(tuple(shape), dtype=L.float64, device=count.device, generator=generator)
    n, p = count.detach().to(L.float64), prob.detach().to(L.float64)
    k = binomial_icdf(u, n, p)
    k = L.where(n < 0, 0.0, k)
    k = L.where(L.isnan(n) | L.isnan(p) | L.isinf(n), float("nan"), k)
    return k.to(count.dtype)


def _conv_arg(value, nsp, name):
    vals = _ints(value, "convolution", name)
    if len(vals) not in (1, nsp):
        raise RuntimeError(f"convolution: expected {name} to be a single integer value or a list of {nsp} "
                           f"values to match the convolution dimensions, got {name}={vals}")
    return tuple(vals * nsp if len(vals) == 1 else vals)


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """PyTorch's generic convolution: :func:`lucid.conv1d`/``2d``/``3d`` or, with
    ``transposed``, ``conv_transpose*d``, picked by ``weight``'s dims (input batched,
    ``(N, C, *spatial)``). Sequence arguments hold one value or one per spatial dim.

    Examples
    --------
    >>> import lucid
    >>> x, w = lucid.ones(1, 1, 4), lucid.ones(1, 1, 2)
    >>> lucid.convolution(x, w, None, [1], [0], [1], False, [0], 1)
    tensor([[[2., 2., 2.]]])
    """
    from . import conv

    x, w = _as_tensor(input), _as_tensor(weight)
    nsp = w.ndim - 2
    if nsp not in (1, 2, 3) or x.ndim != w.ndim:
        raise RuntimeError(f"convolution: expected a {w.ndim}-dimensional input for the {w.ndim}-dimensional weight "
                           f"{tuple(w.shape)} (a batched input), got shape {tuple(x.shape)}")
    st, pd, dl = (_conv_arg(v, nsp, n) for v, n in ((stride, "stride"), (padding, "padding"),
                                                     (dilation, "dilation")))
    if not transposed:
        return conv.convolution(x, w, bias, st, pd, dl, int(groups), nsp=nsp, op="convolution")
    op = _conv_arg(output_padding, nsp, "output_padding")
    return conv.conv_transpose(x, w, bias, st, pd, op, int(groups), dl, nsp=nsp, op="convolution")


__all__ = ["absolute", "adjoint", "as_strided_scatter", "binomial", "broadcast_shapes", "broadcast_tensors",
           "chain_matmul", "clamp_max", "clamp_min", "constant_pad_nd", "convolution", "cross", "deg2rad",
           "diagflat", "frobenius_norm", "histogramdd", "index_reduce", "inner", "msort", "nonzero_static",
           "nuclear_norm", "rad2deg", "signbit", "split_with_sizes", "tensor_split", "trapz", "unravel_index"]

for _name in ("absolute", "adjoint", "clamp_min", "clamp_max", "deg2rad", "rad2deg", "signbit", "inner",
              "diagflat", "msort", "tensor_split", "split_with_sizes", "cross", "nonzero_static",
              "as_strided_scatter", "index_reduce"):
    _method(_name, globals()[_name])
_method("index_reduce_", _index_reduce_)


# The legacy linear algebra and the nn.functional spellings are concepts of their own, each in
# its own module; exported from here.
from . import torch_legacy_linalg as _legacy_linalg  # noqa: E402
from . import torch_nn_functions as _nn_spellings  # noqa: E402
from .torch_legacy_linalg import *  # noqa: E402,F401,F403
from .torch_nn_functions import *  # noqa: E402,F401,F403

__all__ += _legacy_linalg.__all__ + _nn_spellings.__all__
