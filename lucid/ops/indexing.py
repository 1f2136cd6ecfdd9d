"""Indexing: ``x[key]`` and its adjoint (scatter-add into zeros), the along-axis family
(gather / scatter / scatter_add, and take_along_dim), index_select / index_add, masks,
take and nonzero.

Primitives here: ``getitem``, ``index_scatter`` (its adjoint), ``gather``, ``scatter``,
``scatter_add`` and ``nonzero``; everything else is composed from them.

NOTE [Index keys]
A key is normalised to a tuple of ints, slices, None, Ellipsis and ``IDX`` placeholders.
Integer/bool index *tensors* are passed to the primitive as positional arguments (so
transforms can see and batch them) and the placeholders mark where they go; everything
else stays in the hashable ``key`` parameter.
"""
from __future__ import annotations

import warnings

import numpy as np

from .._core.backend import add_at, has_values, namespace_of, on_device, on_device_of, xp
from .._core.primitive import TN, bind, defprim
from .._core.tensor import Tensor, _wrap, tensor_method
from ._family import _as_tensor, move_bdim, normalize_axis, quiet
from .numpy_aliases import REQUIRED, numpy_axis


class _Placeholder:
    __slots__ = ()

    def __repr__(self):
        return "IDX"


IDX = _Placeholder()


def concrete(t):
    """The array behind ``t``, or None where it has no single value (a batched tensor in vmap)."""
    try:
        return t._data
    except RuntimeError:
        return None


def fill_key(key, idx):
    """The NumPy index for ``key`` with its placeholders replaced by ``idx`` arrays."""
    if not idx:
        return key
    it = iter(idx)
    return tuple(next(it) if k is IDX else k for k in key)


def _list_as_tuple(key):
    """PyTorch's (and old NumPy's) rule: a short list holding a slice, None, Ellipsis, a tensor or a
    sequence is a multi-dim key, ``x[[slice(0, 2), 1]] == x[0:2, 1]`` (deprecated, with a warning)."""
    multi = (slice, Tensor, list, tuple, range, np.ndarray)
    if len(key) >= 32 or not any(k is None or k is Ellipsis or isinstance(k, multi) for k in key):
        return False
    warnings.warn("Using a non-tuple sequence for multidimensional indexing is deprecated; use "
                  "x[tuple(seq)] instead of x[seq]", UserWarning, stacklevel=4)
    return True


def split_key(key):
    """User index -> (template key, index tensors). See NOTE [Index keys]."""
    if isinstance(key, list) and _list_as_tuple(key):
        key = tuple(key)
    if not isinstance(key, tuple):
        key = (key,)
    template, tensors = [], []
    for k in key:
        if isinstance(k, Tensor):
            if k.dtype.kind not in "biu":
                raise IndexError(f"getitem: tensors used as indices must be long, int or bool, got {k.dtype}")
            if k.dtype == np.uint8:  # PyTorch still reads a uint8 index as a mask (deprecated)
                warnings.warn("indexing with dtype uint8 is deprecated, please use a dtype bool instead",
                              UserWarning, stacklevel=3)
                k = k != 0
            template.append(IDX)
            tensors.append(k)
        elif isinstance(k, (list, tuple, range, np.ndarray)):  # range: as a list (the nn tutorial's x[range(n), y]);
            # a tuple inside the key, too (K-Planes' ``x[..., (0, 1)]``), as PyTorch reads it
            arr = np.asarray(k)
            if arr.dtype.kind not in "biu":
                if arr.size == 0:
                    arr = arr.astype(np.int64)
                else:
                    raise IndexError(f"getitem: index arrays must be integer or bool, got {arr.dtype}")
            template.append(IDX)
            tensors.append(_wrap(arr))
        elif isinstance(k, (int, np.integer)) and not isinstance(k, bool):
            template.append(int(k))
        elif k is None or k is Ellipsis or isinstance(k, slice):
            template.append(k)
        elif isinstance(k, bool):
            template.append(IDX)
            tensors.append(_wrap(np.array(k)))
        else:
            raise IndexError(f"getitem: unsupported index of type {type(k).__name__}")
    return tuple(template), tuple(tensors)


def _getitem_impl(x, *idx, key):
    k = fill_key(key, idx)
    out = x[k]
    if out.__class__ is not x.__class__:
        # An integer for every dim gives a NumPy scalar (a copy); with a trailing Ellipsis it is
        # a 0-d view, so y[0] sees later in-place changes of y, as in PyTorch.
        out = x[(k if isinstance(k, tuple) else (k,)) + (Ellipsis,)]
    elif idx and out.ndim > 1:
        # Advanced indexing copies; NumPy's copy is not row-major when the index arrays do not
        # lead (``x[:, :, i]``), PyTorch's is, so ``.view`` after it (interpolate's nearest mode,
        # reflect/replicate padding) raised. Row-major it is: a no-op when it already is.
        out = xp.ascontiguousarray(out)
    return out


def _scatter_impl(g, *idx, key, shape):
    z = namespace_of(g).zeros(shape, g.dtype)
    if g.__class__ is not np.ndarray:  # host index arrays (constants of the op) go to g's device
        idx = on_device_of(idx, g)
    k = fill_key(key, idx)
    if idx:
        add_at(z, k, g)  # advanced indices may repeat: accumulate
    else:
        z[k] = g  # basic indexing touches each element at most once
    return z


getitem_p = defprim(
    "getitem", _getitem_impl,
    vjp=lambda i, ns, g, out, x, *idx, key: (
        ns.index_scatter(g, *idx, key=key, shape=tuple(x.shape)) if i == 0 else None),
    jvp=lambda ns, primals, tangents, out, key: bind(getitem_p, (tangents[0],) + tuple(primals[1:]), {"key": key}),
    save_inputs=1, is_view=True,
)

index_scatter_p = defprim(
    "index_scatter", quiet(_scatter_impl),
    vjp=lambda i, ns, g, out, gg, *idx, key, shape: ns.getitem(g, *idx, key=key) if i == 0 else None,
    jvp=lambda ns, primals, tangents, out, key, shape:
        bind(index_scatter_p, (tangents[0],) + tuple(primals[1:]), {"key": key, "shape": shape}),
    save_inputs=1,
)


# NOTE [Ints beside index tensors]
# PyTorch applies integer indices first (as select), so they never join the advanced group:
# ``x[0, :, idx]`` is ``x[0][:, idx]``, shape (4, 2) for x of shape (3, 4, 5). NumPy counts the
# int as an advanced index, finds the group split by the slice and puts its dims in front:
# (2, 4). The dims are the same, only their order differs, so ``torch_order`` gives the
# permutation from NumPy's result to PyTorch's (None where they agree: every key without both
# an int and an index tensor takes one test).
def torch_order(template, idx, ndim):
    """Permutation taking ``x[template]`` in NumPy's dim order to PyTorch's, or None."""
    if not idx or not any(k.__class__ is int for k in template):
        return None
    it = iter(idx)
    entries = []  # (kind, input dims consumed); a basic entry makes one output dim
    for k in template:
        if k is IDX:
            i = next(it)
            entries.append(("adv", i.ndim if i.dtype == np.bool_ else 1))
        else:
            entries.append(("...", 0) if k is Ellipsis else ("int", 1) if k.__class__ is int
                           else ("basic", 0 if k is None else 1))
    rest = [("basic", 1)] * (ndim - sum(n for _, n in entries))
    kinds = []
    for kind, _ in entries:
        kinds += [k for k, _ in rest] if kind == "..." else [kind]
    if not any(kind == "..." for kind, _ in entries):
        kinds += [k for k, _ in rest]

    def slot(advanced):  # how many basic dims precede the advanced group's dims
        kept = [k for k in kinds if k != "int" or "int" in advanced]
        pos = [j for j, k in enumerate(kept) if k in advanced]
        if pos != list(range(pos[0], pos[-1] + 1)):
            return 0
        return kept[:pos[0]].count("basic")

    p_np, p_t = slot(("adv", "int")), slot(("adv",))
    if p_np == p_t:
        return None
    nb = len(np.broadcast_shapes(*[(1,) if i.dtype == np.bool_ and i.ndim else tuple(i.shape) for i in idx]))
    basic = list(range(kinds.count("basic")))
    group = [("b", j) for j in range(nb)]
    np_order, t_order = basic[:p_np] + group + basic[p_np:], basic[:p_t] + group + basic[p_t:]
    return tuple(np_order.index(d) for d in t_order)


def _advanced_front(key):
    """True when NumPy moves the advanced-index dims to the front: the advanced indices
    (index arrays, and ints once arrays are present) are not all adjacent in ``key``."""
    if not any(k is IDX for k in key):
        return False
    pos = [i for i, k in enumerate(key) if k is IDX or isinstance(k, int)]
    return pos != list(range(pos[0], pos[-1] + 1))


def _batched_out_dim(key, idx):
    """Where the batch dim lands in ``x[(slice(None),) + key]`` (x batched at dim 0)."""
    new_key = (slice(None),) + key
    if idx and _advanced_front(new_key):
        return len(np.broadcast_shapes(*[tuple(i.shape) for i in idx]))
    return 0


# NOTE [Batched index tensors]
# vmap of ``x[key]`` where an index tensor is itself batched: prepend an ``arange(B)``
# advanced index (shaped to broadcast against the index tensors), so each example picks
# from its own slice of x. NumPy then puts the broadcast index dims first,
# ``(B, *bshape, *pre, *post)``, where ``pre`` are the dims that the per-example result
# has before its (adjacent) advanced dims; a transpose restores ``(B, *pre, *bshape, *post)``.
# Boolean masks are turned into integer index arrays first; a *batched* mask has a
# data-dependent shape per example and is refused.


def check_unbatched_masks(op, idx, bidx):
    """Raise for a boolean index that is batched under vmap (data-dependent shape)."""
    for v, b in zip(idx, bidx):
        if b is not None and v.dtype == np.bool_:
            raise RuntimeError(
                f"{op}: a boolean mask that is batched under vmap gives each example an output "
                "of a different (data-dependent) shape, which vmap does not support; use "
                "lucid.where(mask, x, other) to keep shapes static"
            )


def _mask_to_ints(v, op):
    arr = concrete(v)
    if arr is None or arr.ndim == 0:
        raise RuntimeError(f"{op}: this boolean index can't be combined with batched integer indices under vmap")
    return [_wrap(a) for a in np.nonzero(arr)]


def batched_index_key(key, idx, bidx, size, nd):
    """See NOTE [Batched index tensors]. Returns (key, index tensors, n_pre, n_bcast)."""
    entries, it = [], iter(zip(idx, bidx))
    for k in key:
        if k is not IDX:
            entries.append((k, None, None))
            continue
        v, b = next(it)
        if v.dtype == np.bool_:
            entries.extend((IDX, a, None) for a in _mask_to_ints(v, "getitem"))
        else:
            entries.append((IDX, v, b))
    per = [tuple(v.shape) if b is None else tuple(v.shape[:b]) + tuple(v.shape[b + 1:])
           for k, v, b in entries if k is IDX]
    nb = len(np.broadcast_shapes(*per))
    arrays = [_wrap(np.arange(size).reshape((size,) + (1,) * nb))]
    for k, v, b in entries:
        if k is IDX and b is not None:
            v = move_bdim(v, b, 0)
            arrays.append(TN.reshape(v, shape=(size,) + (1,) * (nb + 1 - v.ndim) + tuple(v.shape[1:])))
        elif k is IDX:
            arrays.append(v)
    new_key = (IDX,) + tuple(k for k, _, _ in entries)
    return new_key, tuple(arrays), _pre_dims([k for k, _, _ in entries], nd), nb


def _pre_dims(key, nd):
    """Result dims a per-example ``x[key]`` has before its advanced-index dims (0 if those go first)."""
    if _advanced_front(key):
        return 0
    first = next(i for i, k in enumerate(key) if k is IDX or isinstance(k, int))
    used = sum(1 for k in key if k is not None and k is not Ellipsis)
    return sum((nd - used) if k is Ellipsis else 1 for k in key[:first] if not isinstance(k, int))


def batched_index_perm(ndim, n_pre, nb, inverse=False):
    """Permutation between ``(B, *bshape, *pre, *post)`` and ``(B, *pre, *bshape, *post)``."""
    perm = (0,) + tuple(range(1 + nb, 1 + nb + n_pre)) + tuple(range(1, 1 + nb)) + tuple(range(1 + nb + n_pre, ndim))
    return _inverse(perm) if inverse else perm


def _inverse(perm):
    inv = [0] * len(perm)
    for i, a in enumerate(perm):
        inv[a] = i
    return tuple(inv)


def _batch_size(vals, bdims):
    return next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)


def _getitem_batch(vals, bdims, key):
    x, *idx = vals
    bx, *bidx = bdims
    check_unbatched_masks("getitem", idx, bidx)
    if all(b is None for b in bidx):
        x = move_bdim(x, bx, 0)
        out = bind(getitem_p, (x,) + tuple(idx), {"key": (slice(None),) + key})
        return out, _batched_out_dim(key, idx)
    size = _batch_size(vals, bdims)
    x = move_bdim(x, bx, 0) if bx is not None else TN.broadcast_to(x, shape=(size,) + tuple(x.shape))
    new_key, arrays, n_pre, nb = batched_index_key(key, idx, bidx, size, x.ndim - 1)
    out = bind(getitem_p, (x,) + arrays, {"key": new_key})
    if n_pre and nb:
        out = TN.transpose(out, axes=batched_index_perm(out.ndim, n_pre, nb))
    return out, 0


def _scatter_batch(vals, bdims, key, shape):
    g, *idx = vals
    bg, *bidx = bdims
    check_unbatched_masks("index_scatter", idx, bidx)
    if all(b is None for b in bidx):
        pos = _batched_out_dim(key, idx)
        g = move_bdim(g, bg, pos)
        params = {"key": (slice(None),) + key, "shape": (g.shape[pos],) + tuple(shape)}
        return bind(index_scatter_p, (g,) + tuple(idx), params), 0
    size = _batch_size(vals, bdims)
    g = move_bdim(g, bg, 0) if bg is not None else TN.broadcast_to(g, shape=(size,) + tuple(g.shape))
    new_key, arrays, n_pre, nb = batched_index_key(key, idx, bidx, size, len(shape))
    if n_pre and nb:
        g = TN.transpose(g, axes=batched_index_perm(g.ndim, n_pre, nb, inverse=True))
    return bind(index_scatter_p, (g,) + arrays, {"key": new_key, "shape": (size,) + tuple(shape)}), 0


getitem_p.batch = _getitem_batch
index_scatter_p.batch = _scatter_batch

_warned = set()


def _loop_batch(prim, vals, bdims, params):
    """The one explicit per-example fallback: warns once per op, then loops and stacks."""
    if prim.name not in _warned:
        _warned.add(prim.name)
        warnings.warn(
            f"vmap: op '{prim.name}' has no batching rule for these batched arguments; "
            "falling back to a per-example Python loop (slow)",
            RuntimeWarning,
            stacklevel=3,
        )
    size = next(v.shape[b] for v, b in zip(vals, bdims) if b is not None)
    outs = []
    for i in range(size):
        args = tuple(v if b is None else bind(getitem_p, (v,), {"key": (slice(None),) * b + (i,)})
                     for v, b in zip(vals, bdims))
        outs.append(bind(prim, args, params))
    from .shape import stack

    return stack(outs, 0), 0


@tensor_method("__getitem__")
def getitem(input, key):
    """``input[key]`` with ints, slices, None, Ellipsis, bool masks and integer tensors.

    Parameters
    ----------
    input : Tensor
        The tensor.
    key : index
        Ints, slices, None, Ellipsis, bool masks, integer tensors or lists.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(6).reshape(2, 3)
    >>> x[:, lucid.tensor([2, 0])].tolist()
    [[2, 0], [5, 3]]
    """
    template, idx = split_key(key)
    if not idx and (template == (slice(None),) * len(template) or template == (Ellipsis,)):
        from .shape.views import alias  # x[:] is a new view of x, as in PyTorch

        return alias(input)
    try:
        out = bind(getitem_p, (input,) + idx, {"key": template})
        perm = torch_order(template, idx, input.ndim)  # NOTE [Ints beside index tensors]
        return out if perm is None else out.permute(perm)
    except IndexError as e:
        if input.ndim == 0 and isinstance(key, (int, np.integer, slice)) and not isinstance(key, bool):
            # PyTorch's hints: the old ``loss.data[0]`` idiom reads a 0-d tensor's value
            raise IndexError("getitem: slice() cannot be applied to a 0-dim tensor." if isinstance(key, slice) else
                             "getitem: invalid index of a 0-dim tensor. Use `tensor.item()` in Python or "
                             "`tensor.item<T>()` in C++ to convert a 0-dim tensor to a number") from None
        raise IndexError(f"getitem: {e} (tensor shape {tuple(input.shape)})".replace("getitem: getitem: ", "getitem: ")) from None


# ------------------------------------------------------- gather / scatter family
# NOTE [Along-axis indexing]
# gather/scatter/scatter_add index ``x`` at ``index`` along ``axis`` and at the position
# itself along every other dim, where ``index`` may be *smaller* than ``x`` in those
# dims (PyTorch's rule). ``along_axis_key`` builds that NumPy advanced index: ``index`` at
# ``axis`` and broadcastable aranges elsewhere. The three primitives are linear in their
# data arguments and adjoint to one another: gather^T = scatter_add into zeros.


def along_axis_key(index, axis):
    nd = index.ndim
    arange = namespace_of(index).arange
    return tuple(index if d == axis else
                 arange(index.shape[d]).reshape((1,) * d + (-1,) + (1,) * (nd - d - 1))
                 for d in range(nd))


def _scatter_impl_(x, index, src, axis):
    out = x.copy()
    out[along_axis_key(index, axis)] = src
    return out


def _scatter_add_impl(x, index, src, axis):
    out = x.copy()
    add_at(out, along_axis_key(index, axis), src)
    return out


def _tangent_or_zeros(ns, t, like):
    if t is not None:
        return t
    return ns.zeros_like(like) if hasattr(like, "shape") else 0.0


def _batch_all_front(vals, bdims):
    """Every tensor argument with a leading batch dim (unbatched ones broadcast as views)."""
    size = _batch_size(vals, bdims)
    out = []
    for v, b in zip(vals, bdims):
        if b is not None:
            v = move_bdim(v, b, 0)
        elif isinstance(v, Tensor):
            v = TN.broadcast_to(v, shape=(size,) + tuple(v.shape))
        out.append(v)
    return tuple(out)


def _along_axis_batch(prim):
    def rule(vals, bdims, axis):
        return bind(prim, _batch_all_front(vals, bdims), {"axis": axis + 1}), 0

    return rule


gather_p = defprim(
    "gather", lambda x, index, axis: x[along_axis_key(index, axis)],
    vjp=(lambda ns, g, out, x, index, axis: ns.scatter_add(ns.zeros_like(x), index, g, axis=axis), None),
    save_inputs=1,
)
gather_p.jvp = lambda ns, primals, tangents, out, axis: bind(gather_p, (tangents[0], primals[1]), {"axis": axis})

scatter_add_p = defprim(
    "scatter_add", quiet(_scatter_add_impl),
    vjp=(lambda ns, g, out, x, index, src, axis: g, None,
         lambda ns, g, out, x, index, src, axis: ns.gather(g, index, axis=axis)),
    jvp=lambda ns, primals, tangents, out, axis: bind(scatter_add_p, (
        _tangent_or_zeros(ns, tangents[0], primals[0]), primals[1],
        _tangent_or_zeros(ns, tangents[2], primals[2])), {"axis": axis}),
    save_inputs=1,
)

# ``src`` may be a Python scalar (scatter's ``value=``): it then gets no gradient.
scatter_p = defprim(
    "scatter", _scatter_impl_,
    vjp=(lambda ns, g, out, x, index, src, axis: ns.scatter(g, index, 0.0, axis=axis), None,
         lambda ns, g, out, x, index, src, axis: ns.gather(g, index, axis=axis)),
    jvp=lambda ns, primals, tangents, out, axis: bind(scatter_p, (
        _tangent_or_zeros(ns, tangents[0], primals[0]), primals[1],
        _tangent_or_zeros(ns, tangents[2], primals[2])), {"axis": axis}),
    save_inputs=1,
)
for _p in (gather_p, scatter_add_p, scatter_p):
    _p.batch = _along_axis_batch(_p)


class _AlongAxisIndexError(RuntimeError, IndexError):
    """gather/scatter's out-of-bounds index: PyTorch raises RuntimeError (its index_select and
    take: IndexError); still an IndexError, as Lucid raised for all of them."""


def _check_index(op, index, size, dim, allow_negative=False, error=IndexError):
    """PyTorch-style bounds check of an integer index tensor (skipped where values are unknown)."""
    if not isinstance(index, Tensor) or index.dtype.kind not in "iu":
        raise RuntimeError(f"{op}: expected an integer index tensor, got "
                           f"{getattr(index, 'dtype', type(index).__name__)}")
    arr = concrete(index)
    if arr is None or arr.size == 0 or not has_values(arr):  # meta: no values to check, as PyTorch
        return
    lo = -size if allow_negative else 0
    with on_device(arr):
        bad = arr[(arr < lo) | (arr >= size)]
        first = int(bad.reshape(-1)[0]) if bad.size else None
    if first is not None:
        raise error(f"{op}: index {first} is out of bounds for dimension {dim} with size {size}")


def _along_axis_args(op, input, dim, index, src=None):
    """``(input, axis, index)`` checked; a 0-d input comes back as 1-d (PyTorch reads it so)."""
    input, index = _as_tensor(input), _as_tensor(index)
    nd = input.ndim
    if index.ndim != nd and not (index.ndim <= 1 and nd <= 1):
        raise RuntimeError(f"{op}: index tensor must have the same number of dimensions as input tensor "
                           f"(got index shape {tuple(index.shape)} and input shape {tuple(input.shape)})")
    axis = normalize_axis(dim, nd, op)
    if nd == 0:
        input, index, nd = input.reshape(1), index.reshape(-1), 1
    elif index.ndim == 0:  # a 0-d index of a 1-d input is one position, as PyTorch (it broadcast to all)
        index = index.reshape(1)
    for d in range(nd):
        if d != axis and index.shape[d] > input.shape[d]:
            raise RuntimeError(f"{op}: size of index {tuple(index.shape)} does not match input "
                               f"{tuple(input.shape)} at dimension {d} (it must not be larger)")
    _check_index(op, index, input.shape[axis], axis, error=_AlongAxisIndexError)
    return input, axis, index


def _empty_index(index):
    # PyTorch checks nothing about an empty index (any rank): gather gives an empty result,
    # scatter a copy of the input
    return isinstance(index, Tensor) and index.numel() == 0


def _fit_src(op, src, index, dtype):
    """``src`` cut to ``index``'s shape (PyTorch reads only that corner of it)."""
    if not isinstance(src, Tensor):
        return src
    if src.ndim == 0 and index.ndim == 1:  # PyTorch reads a 0-d tensor as a 1-d one here
        src = src.reshape(1)
    if src.ndim != index.ndim or any(i > s for i, s in zip(index.shape, src.shape)):
        raise RuntimeError(f"{op}: index {tuple(index.shape)} must not be larger than src "
                           f"{tuple(src.shape)} in any dimension")
    if src.dtype != dtype:
        raise RuntimeError(f"{op}: expected self.dtype to be equal to src.dtype, got {dtype} and {src.dtype}")
    if tuple(src.shape) != tuple(index.shape):
        src = getitem(src, tuple(slice(0, n) for n in index.shape))
    return src


@tensor_method("gather")
def gather(input, dim=REQUIRED, index=REQUIRED, *, sparse_grad=False, axis=None):
    """Values of ``input`` picked along ``dim`` by ``index``: ``out[i][j] = input[index[i][j]][j]`` (dim 0).

    ``index`` has the same number of dims as ``input`` and may be smaller in the others.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim indexed by ``index``.
    index : Tensor
        Integer (long) indices. Same number of dims as ``input``.
    sparse_grad : bool
        Ignored.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[1.0, 2.0], [3.0, 4.0]])
    >>> lucid.gather(x, 1, lucid.tensor([[1], [0]])).tolist()
    [[2.0], [3.0]]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("gather", dim, axis, REQUIRED, index=index)
    index_shape = tuple(getattr(index, "shape", ()))
    if _empty_index(index):
        input = _as_tensor(input)
        return input.reshape(-1)[:0].reshape(index_shape)  # keeps the graph: a zero gradient
    input, axis, index = _along_axis_args("gather", input, dim, index)
    out = bind(gather_p, (input, index), {"axis": axis})
    return out if tuple(out.shape) == index_shape else out.reshape(index_shape)  # the index's shape


@tensor_method("scatter")
def scatter(input, dim=REQUIRED, index=REQUIRED, src=None, *, value=None, reduce=None, axis=None):
    """Copy of ``input`` with ``src`` (a tensor, or a number ``value``) written at ``index`` along ``dim``.

    For dim 0: ``out[index[i][j]][j] = src[i][j]``. With repeated indices the value written
    is unspecified (as in PyTorch). ``reduce="add"`` or ``"multiply"`` accumulates into the
    values of ``input`` instead (as :func:`scatter_reduce` with "sum" / "prod").

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim indexed by ``index``.
    index : Tensor
        Integer (long) indices.
    src : Tensor, optional
        The values written.
    value : number, optional
        One value written everywhere (instead of ``src``).
    reduce : str, optional
        "add" or "multiply": combine with ``input``'s values (PyTorch's deprecated form of
        :func:`scatter_reduce`; here differentiable too).

    Examples
    --------
    >>> import lucid
    >>> lucid.scatter(lucid.zeros(3), 0, lucid.tensor([2, 0]), lucid.tensor([5.0, 6.0])).tolist()
    [6.0, 0.0, 5.0]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("scatter", dim, axis, REQUIRED, index=index)
    if src is None:
        src = value
    if src is None:
        raise TypeError("scatter: expected a src tensor or a value")
    if reduce is not None:
        return _scatter_reduce_kw(input, dim, index, src, reduce)
    if _empty_index(index):
        return _as_tensor(input).clone()
    shape = tuple(_as_tensor(input).shape)
    input, axis, index = _along_axis_args("scatter", input, dim, index)
    src = _fit_src("scatter", src, index, input.dtype)
    if not isinstance(src, Tensor):
        src = float(src) if input.dtype.kind in "fc" else src
    out = bind(scatter_p, (input, index, src), {"axis": axis})
    return out if tuple(out.shape) == shape else out.reshape(shape)


def _scatter_reduce_kw(input, dim, index, src, reduce):
    if reduce not in ("add", "multiply"):
        raise RuntimeError(f"scatter: reduce argument must be either add or multiply, got {reduce!r}")
    from .creation import full
    from .scatter_extra import scatter_reduce

    input, index = _as_tensor(input), _as_tensor(index)
    if not isinstance(src, Tensor):
        src = full(tuple(index.shape), src, dtype=input.dtype, device=input.device)
    return scatter_reduce(input, dim, index, src, "sum" if reduce == "add" else "prod")


@tensor_method("scatter_add")
def scatter_add(input, dim=REQUIRED, index=REQUIRED, src=REQUIRED, *, axis=None):
    """Copy of ``input`` with ``src`` added at ``index`` along ``dim`` (repeats accumulate).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim indexed by ``index``.
    index : Tensor
        Integer (long) indices.
    src : Tensor
        The values added (repeated indices accumulate).

    Examples
    --------
    >>> import lucid
    >>> lucid.scatter_add(lucid.zeros(3), 0, lucid.tensor([0, 0, 2]), lucid.ones(3)).tolist()
    [2.0, 0.0, 1.0]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED or src is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("scatter_add", dim, axis, REQUIRED, index=index, src=src)
    if _empty_index(index):
        return _as_tensor(input).clone()
    shape = tuple(_as_tensor(input).shape)
    input, axis, index = _along_axis_args("scatter_add", input, dim, index)
    src = _fit_src("scatter_add", _as_tensor(src), index, input.dtype)
    out = bind(scatter_add_p, (input, index, src), {"axis": axis})
    return out if tuple(out.shape) == shape else out.reshape(shape)


@tensor_method("take_along_dim")
def take_along_dim(input, indices, dim=None, *, axis=None):
    """Values of ``input`` at ``indices`` along ``dim`` (other dims broadcast); flattened when ``dim`` is None.

    Parameters
    ----------
    input : Tensor
        The tensor.
    indices : Tensor
        Integer indices that broadcast with ``input``. Along ``dim`` they wrap modulo its size
        (``-1`` is the last), as in PyTorch; with ``dim=None`` they must be in bounds.
    dim : int, optional
        The dim (default: the flattened input).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([[10.0, 30.0, 20.0]])
    >>> lucid.take_along_dim(x, x.argsort(dim=1), dim=1).tolist()
    [[10.0, 20.0, 30.0]]
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("take_along_dim", dim, axis, None)
    input, indices = _as_tensor(input), _as_tensor(indices)
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    if input.ndim != indices.ndim:
        raise RuntimeError(f"take_along_dim: input and indices should have the same number of dimensions, "
                           f"got {input.ndim} and {indices.ndim}")
    axis = normalize_axis(dim, input.ndim, "take_along_dim")
    cut = lambda s: tuple(1 if d == axis else n for d, n in enumerate(s))  # noqa: E731
    try:
        common = np.broadcast_shapes(cut(input.shape), cut(indices.shape))
    except ValueError:
        raise RuntimeError(f"take_along_dim: shapes {tuple(input.shape)} and {tuple(indices.shape)} "
                           f"can't be broadcast outside dimension {axis}") from None
    with_dim = lambda n: tuple(n if d == axis else s for d, s in enumerate(common))  # noqa: E731
    input = input.broadcast_to(with_dim(input.shape[axis]))
    indices = indices.broadcast_to(with_dim(indices.shape[axis]))
    try:
        return gather(input, axis, indices)
    except _AlongAxisIndexError:
        # PyTorch 2.13 wraps every index along ``dim`` modulo its size (-1 is the last, and so is
        # size - 1 + k * size; the flattened form, dim=None, checks bounds as gather does).
        # gather's bounds check finds such an index, so a call with indices in range pays nothing.
        if not input.shape[axis]:
            raise
        return gather(input, axis, indices % input.shape[axis])


# ------------------------------------------------------ index_select / index_add


def _dim_index(op, input, dim, index):
    input, index = _as_tensor(input), _as_tensor(index)
    if index.ndim > 1:
        raise IndexError(f"{op}: index must be a 0-D or 1-D tensor, got shape {tuple(index.shape)}")
    nd = input.ndim
    axis = normalize_axis(dim, nd, op)
    _check_index(op, index, input.shape[axis] if nd else 1, axis)
    return input, axis, index.reshape(-1)


@tensor_method("index_select")
def index_select(input, dim=REQUIRED, index=REQUIRED, *, axis=None):
    """The slices of ``input`` along ``dim`` at the positions in the 1-D ``index``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to index.
    index : Tensor
        Integer (long) indices (1-D).

    Examples
    --------
    >>> import lucid
    >>> lucid.index_select(lucid.tensor([[1, 2], [3, 4]]), 1, lucid.tensor([1, 1])).tolist()
    [[2, 2], [4, 4]]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("index_select", dim, axis, REQUIRED, index=index)
    input, axis, index = _dim_index("index_select", input, dim, index)
    if input.ndim == 0:
        return getitem(input.reshape(1), index).reshape(())
    return getitem(input, (slice(None),) * axis + (index,))


@tensor_method("index_add")
def index_add(input, dim=REQUIRED, index=REQUIRED, source=REQUIRED, *, alpha=1, axis=None):
    """Copy of ``input`` with ``alpha * source`` added to the slices along ``dim`` at ``index`` (repeats accumulate).

    Parameters
    ----------
    input : Tensor
        The tensor.
    dim : int
        The dim to index.
    index : Tensor
        Integer (long) indices. (1-D)
    source : Tensor
        Values added at those positions.
    alpha : number
        Multiplier of ``source``.

    Examples
    --------
    >>> import lucid
    >>> lucid.index_add(lucid.zeros(3), 0, lucid.tensor([0, 0]), lucid.tensor([1.0, 2.0])).tolist()
    [3.0, 0.0, 0.0]
    """
    if axis is not None or dim is REQUIRED or index is REQUIRED or source is REQUIRED:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("index_add", dim, axis, REQUIRED, index=index, source=source)
    input, axis, index = _dim_index("index_add", input, dim, index)
    source = _as_tensor(source)
    want = tuple(index.shape[0] if d == axis else s for d, s in enumerate(input.shape))
    if tuple(source.shape) != want and not (input.ndim == 0 and source.numel() == index.numel()):
        raise RuntimeError(f"index_add: source {tuple(source.shape)} must have shape {want} for "
                           f"input {tuple(input.shape)}, dim {axis} and {index.shape[0]} indices")
    if alpha != 1:
        source = source * alpha
    source = source if source.dtype == input.dtype else source.to(input.dtype)
    if input.ndim == 0:
        return input + source.sum().to(input.dtype)
    key = (slice(None),) * axis + (IDX,)
    return input + bind(index_scatter_p, (source, index), {"key": key, "shape": tuple(input.shape)})


# ---------------------------------------------------------------- masks


def _is_batched(t):
    """True for a value batched by some vmap (possibly under other transforms)."""
    from ..func._traces import BatchTracer, _Tracer

    while isinstance(t, _Tracer):
        if isinstance(t, BatchTracer):
            return True
        t = t._inner_value()
    return False


def _check_mask(op, mask):
    if not isinstance(mask, Tensor) or mask.dtype != np.bool_:
        raise RuntimeError(f"{op}: expected a boolean mask, got {getattr(mask, 'dtype', type(mask).__name__)}")


class _ValueCastError(RuntimeError, TypeError):
    """PyTorch raises RuntimeError; Lucid raised TypeError before."""


@tensor_method("masked_fill")
def masked_fill(input, mask, value):
    """Copy of ``input`` with ``value`` where ``mask`` is true (``mask`` broadcasts).

    ``value`` is a number or a 0-d tensor (which receives gradient).

    Parameters
    ----------
    input : Tensor
        The tensor.
    mask : Tensor
        Bool; broadcasts with ``input``.
    value : number or 0-d Tensor
        The fill value.

    Examples
    --------
    >>> import lucid
    >>> lucid.masked_fill(lucid.zeros(3), lucid.tensor([True, False, True]), 1.0).tolist()
    [1.0, 0.0, 1.0]
    """
    from .elementwise import where

    input = _as_tensor(input)
    _check_mask("masked_fill", mask)
    if (isinstance(value, complex) or (isinstance(value, Tensor) and value.is_complex())) \
            and not input.is_complex():
        raise _ValueCastError(f"masked_fill: value cannot be converted to type {input.dtype} without overflow")
    if isinstance(value, Tensor):
        if value.ndim != 0:
            raise RuntimeError(f"masked_fill: only supports a 0-dimensional value tensor, but got "
                               f"one with shape {tuple(value.shape)}")
        value = value if value.dtype == input.dtype else value.to(input.dtype)
    else:
        if input.dtype.kind in "iu" and not isinstance(value, (bool, np.bool_)):
            # PyTorch's range check, as masked_fill_'s (NumPy's cast would wrap 300 or inf)
            from .creation import _float_fill_value
            from .inplace_ops import _fitted_int

            if isinstance(value, (int, np.integer)):
                value = _fitted_int(int(value), input.dtype, "masked_fill")
            elif isinstance(value, (float, np.floating)):
                value = _float_fill_value(value, np.dtype(input.dtype), "masked_fill")
        value = _wrap(namespace_of(input).asarray(value, dtype=np.dtype(input.dtype)))
    from .shape import errors_as

    with errors_as("masked_fill"):
        return where(mask, value, input)


@tensor_method("masked_select")
def masked_select(input, mask):
    """1-D tensor of the elements of ``input`` where ``mask`` is true (the two broadcast).

    Under vmap the mask must not be batched (each example would get a different length).

    Parameters
    ----------
    input : Tensor
        The tensor.
    mask : Tensor
        Bool; broadcasts with ``input``.

    Examples
    --------
    >>> import lucid
    >>> lucid.masked_select(lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([True, False, True])).tolist()
    [1.0, 3.0]
    """
    input = _as_tensor(input)
    _check_mask("masked_select", mask)
    if _is_batched(mask):
        raise RuntimeError("masked_select: the mask is batched under vmap, so each example's output "
                           "has a data-dependent length, which vmap does not support; use "
                           "lucid.where(mask, x, 0) instead")
    shape = tuple(np.broadcast_shapes(tuple(input.shape), tuple(mask.shape)))
    return getitem(input.broadcast_to(shape), mask.broadcast_to(shape)).reshape(-1)


@tensor_method("take")
def take(input, index):
    """Elements of ``input`` viewed as 1-D at ``index``; the result has ``index``'s shape.

    Parameters
    ----------
    input : Tensor
        The tensor.
    index : Tensor
        Integer (long) indices. Into the flattened input.

    Examples
    --------
    >>> import lucid
    >>> lucid.take(lucid.tensor([[1, 2], [3, 4]]), lucid.tensor([0, 3])).tolist()
    [1, 4]
    """
    input, index = _as_tensor(input), _as_tensor(index)
    n = input.numel()
    _check_index("take", index, n, 0, allow_negative=True)
    return getitem(input.reshape(-1), index)


# ------------------------------------------------------------------ nonzero


def _nonzero_batch(vals, bdims):
    raise RuntimeError("nonzero: the input is batched under vmap, so each example's result has a "
                       "data-dependent shape, which vmap does not support (also argwhere, "
                       "where(cond) and boolean-mask indexing)")


nonzero_p = defprim("nonzero", lambda x: xp.argwhere(x).astype(np.int64), vjp=None,
                    jvp=lambda ns, primals, tangents, out: None, differentiable=False, save_inputs=False)
nonzero_p.batch = _nonzero_batch


@tensor_method("nonzero")
def nonzero(input, *, as_tuple=False):
    """Indices of the non-zero elements: an ``(n, ndim)`` tensor, or a tuple of ``ndim`` 1-D tensors.

    Not supported under vmap with a batched input (data-dependent shape).

    Parameters
    ----------
    input : Tensor
        The tensor.
    as_tuple : bool
        Return one index tensor per dim instead of an (n, ndim) tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.nonzero(lucid.tensor([0, 3, 0, 4])).tolist()
    [[1], [3]]
    """
    input = _as_tensor(input)
    out = bind(nonzero_p, (input,), {})
    if not as_tuple:
        return out
    if input.ndim == 0:
        return (_wrap(namespace_of(out._data).zeros(out.shape[0], np.int64)),)  # beside out
    return tuple(getitem(out, (slice(None), d)) for d in range(input.ndim))


@tensor_method("argwhere")
def argwhere(input):
    """Indices of the non-zero elements as an ``(n, ndim)`` tensor (``nonzero(input)``).

    Parameters
    ----------
    input : Tensor
        The tensor.

    Examples
    --------
    >>> import lucid
    >>> lucid.argwhere(lucid.tensor([[0, 1], [1, 0]])).tolist()
    [[0, 1], [1, 0]]
    """
    return nonzero(input)


__all__ = ['argwhere', 'gather', 'getitem', 'index_add', 'index_select', 'masked_fill', 'masked_select',
           'nonzero', 'scatter', 'scatter_add', 'take', 'take_along_dim']
