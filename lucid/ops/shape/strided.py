"""Strided views: ``Tensor.unfold`` (sliding windows) and ``as_strided``.

NOTE [Strided views]
Both are real views: the output aliases the input's memory (``is_view``), so writes through
it reach the input, as in PyTorch. ``unfold`` is a primitive paired with its adjoint, which
scatter-adds a cotangent back into the input's shape; the two are each other's vjp (and,
being linear, their own jvp), so derivatives of any order work.

``as_strided`` counts ``size``, ``stride`` and ``storage_offset`` in the *storage*, as PyTorch:
the memory of the ndarray owning the input's bytes (the end of its ``.base`` chain), in
elements from its lowest address -- the units ``Tensor.stride()``/``storage_offset()`` report
(``storage_geometry``). So ``x.t().as_strided(...)`` or ``x[1:].as_strided(...)`` is a view
of the root base's memory; it shares the root's version counter and view registry (NOTE
[View replay]) even when it reaches only storage outside its input (``_join_storage``).
The primitive carries the input's geometry ``geom = (shape, strides, offset)``. As a function
of the input's values the output is ``G_out D^-1 S_in x``: scatter-add x into a storage buffer
at its own positions, divide by how often each position is covered (an input with repeated
memory, an expand, holds equal values there), gather at the requested positions; storage
the input does not cover is a constant there. So that the derivative reaches those elements
too, an eager view reaching them is bound on the root base instead, when the input's history
is a view chain of the root's (PyTorch's AsStridedBackward drops them, except after view
replay); a detached input keeps its own. The adjoint ``G_in D^-1 S_out g`` (repeated output
positions accumulate) is ``as_strided_adjoint``; the two are each other's vjp, and the jvp
applies the functional form (``view=False``) to the tangent, so any order works. The eager
forward is a real view when the input lies where ``geom`` says; without memory (tangents,
batches, replayed positions) it is the functional form.
Under transforms a tracer has no memory of its own: under grad/jvp the geometry is its
primal's; under vmap each example is its own storage (the vmap root example, row-major, with
the view chain replayed on its positions), so vmap equals a loop over fresh examples. Under
any transform the view must stay within its input's elements (the rest would be another
example's, or a constant of the enclosing level), or it raises.
"""
from __future__ import annotations

import numpy as np

from ..._core import backend, dtypes
from ..._core.backend import add_at, namespace_of, xp
from ..._core.primitive import TN, bind, defprim
from ..._core.tensor import tensor_method
from .._family import _as_tensor, linear_jvp, move_bdim, normalize_axis, quiet

# ------------------------------------------------------------------------ unfold


def _unfold_impl(x, dim, size, step):
    win = backend.sliding_window_view(x, size, axis=dim)
    return win[(slice(None),) * dim + (slice(None, None, step),)]


def _unfold_adjoint_impl(g, shape, dim, size, step):
    out = namespace_of(g).zeros(shape, g.dtype)
    n = g.shape[dim]
    for k in range(size):  # window position k of window i sits at k + i * step
        dst = (slice(None),) * dim + (slice(k, k + (n - 1) * step + 1, step),)
        out[dst] += g[..., k]
    return out


unfold_p = defprim(
    "unfold", _unfold_impl,
    vjp=(lambda ns, g, out, x, dim, size, step: ns.unfold_adjoint(g, shape=tuple(x.shape), dim=dim,
                                                                  size=size, step=step),),
    save_inputs=False, is_view=True,
)
unfold_p.jvp = linear_jvp(unfold_p)

unfold_adjoint_p = defprim(
    "unfold_adjoint", quiet(_unfold_adjoint_impl, 1),
    vjp=(lambda ns, g, out, gy, shape, dim, size, step: ns.unfold(g, dim=dim, size=size, step=step),),
    save_inputs=None,
)
unfold_adjoint_p.jvp = linear_jvp(unfold_adjoint_p)


def _unfold_batch(vals, bdims, dim, size, step):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(unfold_p, (v,), {"dim": dim + 1, "size": size, "step": step}), 0


def _unfold_adjoint_batch(vals, bdims, shape, dim, size, step):
    v = move_bdim(vals[0], bdims[0], 0)
    params = {"shape": (v.shape[0],) + tuple(shape), "dim": dim + 1, "size": size, "step": step}
    return bind(unfold_adjoint_p, (v,), params), 0


unfold_p.batch = _unfold_batch
unfold_adjoint_p.batch = _unfold_adjoint_batch


@tensor_method("unfold")
def unfold(input, dimension, size, step):
    """A view of all windows of length ``size`` along ``dimension``, ``step`` apart.

    The windows' dimension replaces ``dimension``; a new last dimension of length ``size``
    holds each window. Writes through the result reach ``input``. See NOTE [Strided views].

    Parameters
    ----------
    input : Tensor
    dimension : int
    size : int
        Window length (at most the dimension's length).
    step : int
        Distance between window starts (positive).

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(5.0).unfold(0, 2, 2)
    tensor([[0., 1.],
            [2., 3.]])
    """
    input = _as_tensor(input)
    nd = input.ndim
    d = normalize_axis(dimension, nd, "unfold")
    length = input.shape[d] if nd else 1
    if size < 0 or size > length:
        raise RuntimeError(f"unfold: size {size} must be between 0 and the size of dimension {dimension} "
                           f"({length}) of a tensor of shape {tuple(input.shape)}")
    if step <= 0:
        raise RuntimeError(f"unfold: step must be positive, got {step}")
    if nd == 0:
        return TN.reshape(input, shape=(1,))
    return bind(unfold_p, (input,), {"dim": d, "size": int(size), "step": int(step)})


# -------------------------------------------------------------------- as_strided
# See NOTE [Strided views]. A geometry is ``(size, stride, offset)`` in elements of a storage.


def _owner(arr):
    """The ndarray whose memory ``arr`` lies in: the end of its ``.base`` chain, walking through
    the holders NumPy's ``as_strided`` (and ours) leave as ``.base``."""
    while True:
        b = arr.base
        if b is not None and backend.is_array(b):
            arr = b
        elif isinstance(getattr(b, "base", None), np.ndarray) and hasattr(b, "__array_interface__"):
            arr = b.base
        else:
            return arr


def _byte_span(arr):
    """(lowest address, bytes up to one past the highest element) of ``arr``'s elements."""
    ptr = backend.data_pointer(arr)
    flags = arr.flags
    if flags.c_contiguous or flags.f_contiguous:  # the common owner: one block from ptr
        return ptr, arr.nbytes
    lo = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides) if s < 0)
    hi = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides) if s > 0)
    return ptr + lo, hi - lo + arr.itemsize


def storage_geometry(arr):
    """``(shape, strides, storage_offset, storage_size)`` of ``arr`` in its own elements, counted
    from the lowest address of the array owning its memory (PyTorch's storage), or None where
    the layout is no whole number of elements (e.g. a reinterpreting dtype view)."""
    if not backend.has_values(arr):  # a meta array: its own, contiguous storage (NOTE [Meta device])
        return tuple(arr.shape), tuple(s // arr.itemsize for s in arr.strides), 0, arr.size
    item = arr.itemsize
    start, nbytes = _byte_span(_owner(arr))
    delta = backend.data_pointer(arr) - start
    if delta % item or any(s % item for s in arr.strides):
        return None
    return tuple(arr.shape), tuple(s // item for s in arr.strides), delta // item, nbytes // item


class _StorageRef:
    """The ``.base`` of a view made by ``as_strided``: its array interface, and the owner it keeps alive."""

    __slots__ = ("__array_interface__", "base")

    def __init__(self, interface, base):
        self.__array_interface__ = interface
        self.base = base


def _storage_view(x, size, stride, offset):
    """A view of ``x``'s storage (bounds already checked) with the given geometry."""
    owner = _owner(x)
    item = x.itemsize
    if owner.__class__ is not np.ndarray:  # a device array: a strided view of its flat memory
        flat = owner.reshape(-1)
        if flat.dtype != x.dtype:  # x reinterprets it (a complex array's .real/.imag): same bytes
            flat = flat.view(x.dtype)
        return backend.as_strided(flat[offset:], tuple(size), tuple(s * item for s in stride))
    start, _ = _byte_span(owner)
    # A dimension that repeats one element is read-only, like expand's (PyTorch refuses to write
    # through such a tensor too); overlapping windows with nonzero strides stay writable.
    repeats = any(st == 0 and n > 1 for n, st in zip(size, stride))
    # an ml_dtypes float travels as its bytes: NumPy parses neither "<V2" back to bfloat16 nor
    # float8_e5m2's "<f1" at all (NOTE [float8])
    typestr = f"|V{item}" if x.dtype in dtypes.ML_FLOATS else x.dtype.str
    interface = {"version": 3, "shape": tuple(size), "typestr": typestr, "descr": [("", typestr)],
                 "strides": tuple(s * item for s in stride),
                 "data": (start + offset * item, repeats or not owner.flags.writeable)}
    arr = np.asarray(_StorageRef(interface, owner))
    # the interface spells an extension dtype by its bytes ("<V2" for bfloat16): name it again
    return arr if arr.dtype == x.dtype else arr.view(x.dtype)


def _extent(size, stride, offset):
    """(lowest, highest) storage position of a geometry; None when it has no elements."""
    if 0 in size:
        return None
    lo = offset + sum((n - 1) * s for n, s in zip(size, stride) if s < 0)
    hi = offset + sum((n - 1) * s for n, s in zip(size, stride) if s > 0)
    return lo, hi


def _positions(size, stride, offset, like):
    """Storage position of every element of a geometry (int64, shape ``size``), on ``like``'s device."""
    nd = len(size)
    pos = namespace_of(like).full((1,) * nd, offset, np.int64)  # not full_like: CuPy's drops shape=()
    for d, (n, s) in enumerate(zip(size, stride)):
        shp = [1] * nd
        shp[d] = n
        pos = pos + (np.arange(n, dtype=np.int64, like=like) * s).reshape(shp)
    return pos


def _may_overlap(size, stride):
    """False only if no two elements of the geometry share a position (PyTorch's test)."""
    dims = sorted((abs(s), n) for n, s in zip(size, stride) if n > 1)
    reach = 0
    for s, n in dims:
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def _relayout(x, src, dst, cnt):
    """``G_dst · D_cnt⁻¹ · S_src x`` over the trailing dims (leading dims are a batch): scatter-add
    ``x`` into a storage buffer at the ``src`` positions, divide by how often ``cnt`` covers each
    position, gather at the ``dst`` positions. Positions nothing was scattered to read 0."""
    nlead = x.ndim - len(src[0])
    lead = x.shape[:nlead]
    ext = [e for e in (_extent(*src), _extent(*dst), _extent(*cnt)) if e is not None]
    lo = min(e[0] for e in ext) if ext else 0
    span = max(e[1] for e in ext) - lo + 1 if ext else 0
    nb = int(np.prod(lead, dtype=np.int64))
    buf = np.zeros_like(x, shape=(nb, span))
    ps = (_positions(*src, like=x) - lo).reshape(-1)
    xs = x.reshape(nb, ps.size)
    if _may_overlap(src[0], src[1]):
        add_at(buf, (slice(None), ps), xs)  # repeated positions accumulate
    else:
        buf[:, ps] = xs
    if _may_overlap(cnt[0], cnt[1]) and x.dtype.kind != "b":
        count = np.zeros_like(ps, shape=(span,))
        add_at(count, (_positions(*cnt, like=x) - lo).reshape(-1), 1)
        count = np.maximum(count, 1)
        if dtypes.is_differentiable(x.dtype):  # (bfloat16's NumPy kind is "V": NOTE [bfloat16])
            buf /= count
        else:
            buf //= count
    pd = (_positions(*dst, like=x) - lo).reshape(-1)
    return buf[:, pd].reshape(lead + tuple(dst[0]))


def _as_strided_impl(x, size, stride, offset, geom, view):
    if not backend.has_values(x):  # a meta array: its shape is all there is (NOTE [Meta device])
        return backend.as_strided(x, size, stride)
    if view and x.ndim == len(geom[0]):
        g = storage_geometry(x)
        if g is not None and g[:3] == tuple(geom) and (_extent(size, stride, offset) or (0, -1))[1] < g[3]:
            return _storage_view(x, size, stride, offset)  # x lies where geom says: a real view
    # No memory to view (a tangent, a batch, positions being replayed): the functional form.
    return _relayout(x, geom, (size, stride, offset), geom)


def _as_strided_adjoint_impl(g, size, stride, offset, geom):
    return _relayout(g, (size, stride, offset), geom, geom)


def _as_strided_vjp(ns, g, out, x, size, stride, offset, geom, view):
    return ns.as_strided_adjoint(g, size=size, stride=stride, offset=offset, geom=geom)


def _as_strided_jvp(ns, primals, tangents, out, size, stride, offset, geom, view):
    return bind(as_strided_p, (tangents[0],), {"size": size, "stride": stride, "offset": offset,
                                               "geom": geom, "view": False})


as_strided_p = defprim("as_strided", _as_strided_impl, vjp=(_as_strided_vjp,), jvp=_as_strided_jvp,
                       save_inputs=False, is_view=True)

as_strided_adjoint_p = defprim(
    "as_strided_adjoint", _as_strided_adjoint_impl,
    vjp=(lambda ns, g, out, gy, size, stride, offset, geom: ns.as_strided(
        g, size=size, stride=stride, offset=offset, geom=geom, view=False),),
    save_inputs=None,
)
as_strided_adjoint_p.jvp = linear_jvp(as_strided_adjoint_p)


def _lead_batch(prim):
    """Batching rule: both impls treat leading dims as a batch of independent examples."""

    def batch(vals, bdims, **params):
        return bind(prim, (move_bdim(vals[0], bdims[0], 0),), params), 0

    return batch


as_strided_p.batch = _lead_batch(as_strided_p)
as_strided_adjoint_p.batch = _lead_batch(as_strided_adjoint_p)


def _is_vmap_tracer(t):
    return getattr(getattr(t, "_trace", None), "kind", None) == "vmap"


def _example_geometry(t):
    """Geometry of a vmap tracer with each example as its own storage: its view chain
    (``_view_src``) replayed on the positions of its root example, laid out row-major."""
    from ..._core.tensor import Tensor, _wrap

    chain, v = [], t
    while v._base is not None and v._view_src is not None and v is not v._base:
        chain.append(v._view_src)
        v = v._view_src[2][0]
    root_shape = tuple(v.shape)
    n = int(np.prod(root_shape, dtype=np.int64))
    pos = _wrap(np.arange(n, dtype=np.int64).reshape(root_shape))
    for prim, params, args in reversed(chain):
        pos = bind(prim, (pos,) + tuple(args[1:]), params)
        if type(pos) is not Tensor:  # a view with traced operands: keep the tensor's own layout
            break
    shape = tuple(t.shape)
    row_major = tuple(int(np.prod(shape[d + 1:], dtype=np.int64)) for d in range(len(shape)))
    if type(pos) is Tensor and tuple(pos.shape) == shape and pos.numel():
        p = np.asarray(pos._data)
        offset = int(p.reshape(-1)[0])
        stride = tuple(int(p[(0,) * d + (1,) + (0,) * (p.ndim - d - 1)]) - offset if k > 1 else row_major[d]
                       for d, k in enumerate(shape))  # a dim of length 1 has any stride: say row-major's
        if np.array_equal(_positions(shape, stride, offset, like=p), p):
            return shape, stride, offset, n
    # Empty, or not a strided view of the root (a copying reshape): its own storage.
    return shape, row_major, 0, int(np.prod(shape, dtype=np.int64))


def _geometry(t):
    """``(shape, strides, storage_offset, storage_size)`` of a Tensor or tracer (in elements)."""
    if _is_vmap_tracer(t):
        return _example_geometry(t)
    primal = getattr(t, "_primal", None)  # grad / jvp tracers: the primal's memory
    if primal is not None:
        return _geometry(primal)
    geom = storage_geometry(t._data)
    if t._base is not None and not backend.has_values(t._data):
        # a meta view: its storage is its root's, whose layout is all a meta tensor keeps
        geom = geom[:3] + (max(geom[3], t._base.numel()),)
    return geom


def _join_storage(out, input, params):
    """A view reaching only storage outside its input's bytes still aliases the input's storage:
    share the root's version counter and view registry, as ``bind`` does for overlapping views."""
    from ..._core import primitive
    from ..._core.grad_mode import STATE

    out._version = input._version
    root = input if input._base is None else input._base
    out._base = root
    if STATE.grad_enabled and not (root._rg and root.grad_fn is None):
        out._view_src = (as_strided_p, params, (input,))
        primitive._register_view(root, out)


@tensor_method("as_strided")
def as_strided(input, size, stride, storage_offset=None):
    """A view of ``input``'s storage with the given ``size``, ``stride`` and ``storage_offset``.

    As in PyTorch, all three count elements of the *storage* that ``input`` views (the memory
    of its root base), the units of ``Tensor.stride()`` and ``Tensor.storage_offset()``;
    ``storage_offset=None`` means ``input.storage_offset()``. Elements may repeat (overlapping
    windows: their gradients add up), and writes through the view reach ``input``, its base and
    its other views. Under ``vmap`` each example is its own storage, and under any transform
    the view must stay within ``input``'s elements. See NOTE [Strided views].

    Examples
    --------
    >>> import lucid
    >>> lucid.arange(6.0).as_strided((2, 3), (1, 1))
    tensor([[0., 1., 2.],
            [1., 2., 3.]])
    >>> x = lucid.arange(6.0).reshape(2, 3)
    >>> x.t().as_strided((2,), (4,), 0)  # offsets and strides are the storage's, not x.t()'s
    tensor([0., 4.])
    """
    input = _as_tensor(input)
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    if len(size) != len(stride):
        raise RuntimeError(f"as_strided: size {list(size)} and stride {list(stride)} must have the same "
                           "length")
    if any(s < 0 for s in size):
        raise RuntimeError(f"as_strided: sizes must be non-negative, got {list(size)}")
    if any(s < 0 for s in stride):
        raise RuntimeError(f"as_strided: negative strides are not supported, got {list(stride)}")
    geom = _geometry(input)
    if geom is None:
        raise RuntimeError(f"as_strided: the input (shape {tuple(input.shape)}) is laid out in its memory "
                           "in no whole number of elements (a reinterpreting dtype view); clone() it first")
    shape, in_stride, in_offset, n_storage = geom
    offset = in_offset if storage_offset is None else int(storage_offset)
    if offset < 0:
        raise RuntimeError(f"as_strided: storage offset must be non-negative, got {offset}")
    item = input.dtype.itemsize
    ext = _extent(size, stride, offset)
    if ext is not None and ext[1] >= n_storage:
        raise RuntimeError(
            f"as_strided: setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, "
            f"and itemsize {item} requiring a storage size of {(ext[1] + 1) * item} are out of bounds "
            f"for storage of size {n_storage * item}")
    traced = input._level > 0
    if traced and ext is not None and not _covers((shape, in_stride, in_offset), size, stride, offset):
        raise RuntimeError(
            f"as_strided: under {input._trace.kind} the view must stay within the elements of its "
            f"input: sizes {list(size)}, strides {list(stride)}, storage offset {offset} reach storage "
            f"the input (shape {list(shape)}, strides {list(in_stride)}, storage offset {in_offset}) "
            "does not cover")
    src = input
    if not traced and input._rg and input._base is not None and ext is not None:
        root = input._base
        # A view reaching storage its input does not cover reads the root's elements there, so
        # its derivative flows through the root when the input's history is a view chain of the
        # root's (a registered view, or a view of a leaf); a detached view keeps its input.
        derived = input._view_src is not None or (root._rg and root.grad_fn is None
                                                  and input.grad_fn is not None)
        if derived and not _covers((shape, in_stride, in_offset), size, stride, offset):
            root_geom = storage_geometry(root._data)
            if root_geom is not None:
                src, (shape, in_stride, in_offset, _) = root, root_geom
    params = {"size": size, "stride": stride, "offset": offset,
              "geom": (tuple(shape), tuple(in_stride), in_offset), "view": True}
    out = bind(as_strided_p, (src,), params)
    # every as_strided result on a device is a view of its storage (_storage_view); on the CPU
    # one made through a _StorageRef may lie outside its input's bytes
    if not traced and out._base is None and (isinstance(out._data.base, _StorageRef)
                                             or out._data.__class__ is not np.ndarray):
        _join_storage(out, src, params)
    return out


def _covers(geom, size, stride, offset):
    """Whether every storage position of the view is one of the input's (``geom``)."""
    lo, hi = _extent(size, stride, offset)
    in_ext = _extent(*geom)
    if in_ext is None or lo < in_ext[0] or hi > in_ext[1]:
        return False
    n_in = int(np.prod(geom[0], dtype=np.int64))
    if in_ext[1] - in_ext[0] + 1 == n_in and not _may_overlap(geom[0], geom[1]):
        return True  # the input fills its extent densely
    held = _positions(*geom, like=np.empty(0)).reshape(-1)
    return bool(np.isin(_positions(size, stride, offset, like=held).reshape(-1), held).all())

__all__ = ["as_strided"]
