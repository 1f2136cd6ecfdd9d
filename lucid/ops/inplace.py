"""In-place operations: the machinery every in-place op runs through, ``x[idx] = v`` and the
``setitem`` primitive behind it; the in-place methods themselves (``add_``, ``mul_`` ..., ``zero_``,
``fill_``, ``copy_``, ``masked_fill_``) are in ``inplace_ops.py``, imported at the bottom.

NOTE [In-place semantics]
An in-place op changes ``x._data`` in place (so views see it) and bumps the version
counter ``x._version`` (shared by a base and its views), so a tensor changed after it
was saved for backward is detected at backward time (``Node._check_versions``). The
name of the last in-place op is kept as ``x._version[1]`` for that error message.

1. No graph (grad mode off, or nothing involved requires grad): the op writes straight
   into ``x._data`` with a ufunc ``out=`` — the optimizer / ``nn.init`` path.
2. Graph: the out-of-place result is computed by the normal primitives from a
   *snapshot* of x (a copy carrying x's history, so every saved value stays valid),
   copied into ``x._data``, and x is rebased onto the result's node (as PyTorch does).
   A leaf that requires grad, or a view of one, can't be changed in place while grad
   mode is on; nor can a view made under no_grad (its history would be ambiguous), and
   such a view of a tensor that requires grad counts as requiring grad here (PyTorch).
   ``detach()`` shares memory and the version counter but is no view: changing it never
   rebases the tensor it came from. ``.data`` has a version counter of its own. If x is a view, its base is rebased too: the base's new value is
   ``setitem(base_old, positions of x inside the base, x_new)``, the positions found
   from the memory addresses of the view's elements.
3. Transforms (x is a tracer of ``lucid.func.grad``/``jvp``/``vmap``): functional — the
   tracer is rebound to the out-of-place result. A tensor that belongs to no transform
   can't be changed in place with a tracer (as in ``torch.func``).

NOTE [View replay]
After an in-place change in a graph, every *other* live view of the same base (made before
the change, in grad mode) gets its history regenerated from the base's new history, as
PyTorch does: each view remembers the primitive, parameters and parent that made it
(``_view_src``, set in ``primitive._share_version``), the base keeps weak references to its
views in creation order (``_views``), and ``_replay_views`` re-binds each view's primitive
on its (already replayed) parent. Values need no replay: a view shares its base's memory.
Views of a leaf that requires grad are not registered (such a leaf can't change in place
in grad mode), so a weight's per-step ``w.t()`` costs nothing here.

Under a transform the change is functional (the tracer is rebound to the out-of-place
result); views made under the transform record the same ``_view_src`` (``primitive.
_traced_view``), the base of a changed view is rebound to the base with the view's elements
scattered in (``_scatter_into_base``), and the other views are re-derived from it.

Limitation: under a transform the caller's tensor is not modified (the change is functional).
"""
from __future__ import annotations

import numpy as np

from .._core import primitive
from .._core.backend import (DEVICE_GUARD, data_pointer, guard_for, host, namespace_of, on_device_of,
                             writeable)
from .._core.grad_mode import STATE, no_grad
from .._core.dtypes import _CAST_ORDER, kind_of
from .._core.primitive import bind, defprim
from .._core.tensor import Tensor, _wrap, tensor_method
from ._family import _as_tensor, move_bdim, quiet_apply, sum_to_shape
from .indexing import (IDX, _batch_size, _batched_out_dim, batched_index_key, batched_index_perm,
                       check_unbatched_masks, concrete, fill_key, split_key,
                       torch_order)

# ------------------------------------------------------------ setitem primitive


def _setitem_impl(x, v, *idx, key):
    out = x.copy()
    out[fill_key(key, idx)] = v
    return out


def _setitem_vjp(i, ns, g, out, x, v, *idx, key):
    if i == 0:  # the overwritten positions get no gradient
        return ns.setitem(g, 0.0, *idx, key=key)
    if i == 1:
        return sum_to_shape(ns, ns.getitem(g, *idx, key=key), tuple(getattr(v, "shape", ())))
    return None


def _setitem_jvp(ns, primals, tangents, out, key):
    tx, tv = tangents[0], tangents[1]
    tx = ns.zeros_like(out) if tx is None else tx
    return ns.setitem(tx, 0.0 if tv is None else tv, *primals[2:], key=key)


def _indexed_shape(shape, key, idx):
    """Shape of ``x[key]`` for an ``x`` of ``shape``: only index *shapes* are read (and the
    values of boolean masks, which decide the shape)."""
    dummy = np.broadcast_to(np.zeros((), np.bool_), tuple(shape))
    arrays = []
    for i in idx:
        if getattr(i, "dtype", None) == np.bool_:  # the values decide the shape: read them
            arrays.append(host(concrete(i) if isinstance(i, Tensor) else i))
        else:
            arrays.append(np.zeros(tuple(getattr(i, "shape", ())), np.intp))
    return dummy[fill_key(key, arrays)].shape


def _value_batched(v, bv, size, sub):
    """The batched right-hand side as a ``(size, *sub)`` tensor (example dims aligned on the right)."""
    if bv is None:
        return primitive.TN.broadcast_to(v, shape=(size,) + sub)
    v = move_bdim(v, bv, 0)
    if v.ndim - 1 < len(sub):
        v = primitive.TN.reshape(v, shape=(size,) + (1,) * (len(sub) - v.ndim + 1) + tuple(v.shape[1:]))
    return v if tuple(v.shape) == (size,) + sub else primitive.TN.broadcast_to(v, shape=(size,) + sub)


def _setitem_batch(vals, bdims, key):
    x, v, *idx = vals
    bx, bv, *bidx = bdims
    check_unbatched_masks("setitem", idx, bidx)
    size = _batch_size(vals, bdims)
    x = move_bdim(x, bx, 0) if bx is not None else primitive.TN.broadcast_to(x, shape=(size,) + tuple(x.shape))
    if all(b is None for b in bidx):
        sub = _indexed_shape(x.shape[1:], key, idx)
        pos = _batched_out_dim(key, idx)
        if isinstance(v, Tensor):
            if bv is None:  # one value for every example: a singleton batch dim broadcasts
                v = primitive.TN.broadcast_to(v, shape=sub) if tuple(v.shape) != sub else v
                v = primitive.TN.reshape(v, shape=sub[:pos] + (1,) + sub[pos:])
            else:
                v = move_bdim(_value_batched(v, bv, size, sub), 0, pos)
        return bind(setitem_p, (x, v) + tuple(idx), {"key": (slice(None),) + key}), 0
    # Batched index tensors: See NOTE [Batched index tensors]. The value is laid out like
    # the batched ``x[new_key]``, i.e. ``(B, *bshape, *pre, *post)``.
    new_key, arrays, n_pre, nb = batched_index_key(key, idx, bidx, size, x.ndim - 1)
    if isinstance(v, Tensor):
        target = _indexed_shape(x.shape, new_key, arrays)
        perm = batched_index_perm(len(target), n_pre, nb) if n_pre and nb else range(len(target))
        v = _value_batched(v, bv, size, tuple(target[p] for p in perm)[1:])
        if n_pre and nb:
            v = primitive.TN.transpose(v, axes=batched_index_perm(v.ndim, n_pre, nb, inverse=True))
    return bind(setitem_p, (x, v) + arrays, {"key": new_key}), 0


# ``x`` with ``x[key] = v``, out of place. The values of ``x`` and ``v`` are not needed
# by the backward (only the index tensors are saved).
setitem_p = defprim("setitem", _setitem_impl, vjp=_setitem_vjp, jvp=_setitem_jvp,
                    batch=_setitem_batch, save_inputs=2)


def index_put_value(input, key, value):
    """``input`` with ``input[key] = value``, out of place and differentiable in both.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ops.inplace import index_put_value
    >>> index_put_value(lucid.zeros(3), 1, 5.0).tolist()
    [0.0, 5.0, 0.0]
    """
    template, idx = split_key(key)
    value = _numpy_order_value(input, template, idx, _value_for(input, value))
    return bind(setitem_p, (input, value) + idx, {"key": template})


def _scalar_for(arr, value):
    """A non-tensor right-hand side for ``arr[k] = value``: Python numbers as they are, array-likes
    made on arr's device (a host array can't be written into device memory implicitly)."""
    if isinstance(value, (bool, int, float, complex)) or arr.__class__ is np.ndarray:
        return value
    return namespace_of(arr).asarray(value, dtype=arr.dtype)


def _value_for(x, value):
    """The right-hand side of ``x[key] = value`` in x's dtype (scalars stay scalars)."""
    if isinstance(value, Tensor):
        return value if value.dtype == x.dtype else value.to(x.dtype)
    if isinstance(value, (bool, int, float)):
        return value
    if isinstance(value, complex) and not x.dtype.is_complex:  # PyTorch's check (NumPy's float() TypeError otherwise)
        raise RuntimeError(f"setitem: value {value!r} cannot be converted to type {x.dtype} without overflow")
    return _wrap(namespace_of(x).asarray(value, dtype=np.dtype(x.dtype)))


# --------------------------------------------------------------- the machinery

# While ``autograd.graph.allow_mutation_on_saved_tensors`` is active: its callable, run with
# each tensor just before an in-place op writes into it (it clones saved tensors that share
# the memory, so their backward still sees the old values). None otherwise: one check.
BEFORE_MUTATION = [None]


def _bump(x, name):
    """Record one in-place change: version + 1, remember the op (See NOTE [In-place semantics])."""
    v = x._version
    v[0] += 1
    if len(v) == 1:
        v.append(name)
    else:
        v[1] = name


def _needs_graph(x, args):
    if not STATE.grad_enabled:
        return False
    if x._rg:
        return True
    if any(isinstance(a, Tensor) and a._rg for a in args):
        return True
    base = x._base  # a view made under no_grad of a tensor that requires grad: PyTorch's does too
    return base is not None and base._rg


def _inplace(name, x, args, fn, direct=None, needs_old=True):
    """Run the in-place op ``name`` on ``x``; See NOTE [In-place semantics].

    ``fn(x, *args)`` computes the new value out of place with lucid ops; ``direct(arr,
    *arrays)`` writes it into ``arr`` (None: use ``fn`` under no_grad). ``needs_old``:
    whether ``fn``'s backward needs x's old values (else no snapshot copy is made).
    """
    if BEFORE_MUTATION[0] is not None:
        BEFORE_MUTATION[0](x)
    if primitive.ACTIVE_TRACES[0]:
        if DEVICE_GUARD[0]:  # raw writes below run on x's device: NOTE [Several devices]
            guard = guard_for((x,) + tuple(args), name)
            if guard is not None:
                with guard:
                    return _inplace(name, x, args, fn, direct, needs_old)
        trace = primitive._owning_trace((x,) + tuple(args)) if STATE.traces else None
        if trace is not None:
            return _inplace_traced(name, x, args, fn, trace)
    if _needs_graph(x, args):
        return _inplace_graph(name, x, args, fn, needs_old)
    _check_writeable(name, x)
    if direct is not None:
        arrays = [_operand_array(x, a) if isinstance(a, Tensor) else a for a in args]
        try:  # quiet: x += inf where x is -inf is nan, silently (NOTE [Silent floating-point errors])
            quiet_apply(direct, x._data, *arrays)
        except (TypeError, ValueError) as e:  # numpy's casting errors are TypeErrors
            if isinstance(e, TypeError) and "cast" in str(e):
                # NumPy's same_kind refuses int16 -> uint8, PyTorch casts between integer types:
                # the generic path decides by PyTorch's rule (and names the op if it can't)
                return _inplace_generic(name, x, args, fn)
            moved = primitive._cpu_numbers_moved((x,) + tuple(args))  # NOTE [CPU numbers on a device]
            if moved is None:
                raise _direct_error(name, x, args, e) from None
            try:
                quiet_apply(direct, x._data, *[a._data if isinstance(a, Tensor) else a for a in moved[1:]])
            except (TypeError, ValueError) as e2:
                raise _direct_error(name, x, args, e2) from None
    else:
        return _inplace_generic(name, x, args, fn)
    _bump(x, name)
    return x


def _operand_array(x, a):
    """The array of tensor operand ``a`` of an in-place op on ``x``: a 0-dim one of a wider dtype of
    ``x``'s kind cast to ``x``'s dtype first, as PyTorch's promotion has a 0-dim tensor take the
    other operand's dtype (``x.add_(float64 scalar tensor)`` on float32 adds in float32, as ``x + t``
    does; NumPy would add in float64 and round)."""
    arr = a._data
    if arr.ndim == 0 and arr.dtype != x._data.dtype and kind_of(arr.dtype) == kind_of(x._data.dtype):
        return arr.astype(x._data.dtype)
    return arr


def _inplace_generic(name, x, args, fn):
    with no_grad():
        res = _out_of_place(name, fn, x, args)
    _check_result(name, x, res)
    x._data[...] = res._data
    _bump(x, name)
    return x


def _check_writeable(name, x):
    if not writeable(x._data):
        raise RuntimeError(
            f"{name}: unsupported operation: the tensor (shape {tuple(x.shape)}) is a read-only view "
            "(its elements share memory, from expand/broadcast_to) or read-only memory (frombuffer of "
            "bytes); clone() it first"
        )


def _out_of_place(name, fn, x, args):
    """``fn(x, *args)`` (the op's out-of-place value), its errors reported under ``name``."""
    try:
        return fn(x, *args)
    except (ValueError, TypeError, NotImplementedError) as e:
        head, sep, rest = str(e).partition(": ")
        msg = f"{name}: {rest if sep and head.isidentifier() else e}"
        err = _same_class(e, msg) if isinstance(e, NotImplementedError) else None
        raise (err or RuntimeError(msg)) from None


def _direct_error(name, x, args, err):
    if isinstance(err, TypeError) and "cast" in str(err):
        return RuntimeError(f"{name}: result type can't be cast to the desired output type "
                            f"{x._data.dtype} ({err})")
    shapes = [tuple(a.shape) if hasattr(a, "shape") else a for a in args]
    msg = f"{name}: {err} (tensor shape {tuple(x.shape)}, arguments {shapes})"
    return (_same_class(err, msg) if isinstance(err, NotImplementedError) else None) or RuntimeError(msg)


def _same_class(err, msg):
    """``err``'s class with ``msg`` (an op with no kernel for a dtype raises NotImplementedError
    in PyTorch, in place too), or None if that class takes other arguments."""
    try:
        return type(err)(msg)
    except TypeError:
        return None


def _check_result(name, x, res):
    if tuple(res.shape) != tuple(x.shape):
        raise RuntimeError(
            f"{name}: output with shape {tuple(x.shape)} doesn't match the broadcast shape "
            f"{tuple(res.shape)}"
        )
    if res.dtype != x.dtype and _CAST_ORDER[res.dtype.kind] > _CAST_ORDER[x.dtype.kind]:
        raise RuntimeError(f"{name}: result type {res.dtype} can't be cast to the desired "
                           f"output type {x.dtype}")


def _snapshot(x, copy):
    """x's value and history as a separate tensor (copied if the backward may read it)."""
    old = _wrap(x._data.copy() if copy else x._data)
    if x._rg:
        old.grad_fn, old._out_idx, old._rg = x.grad_fn, x._out_idx, True
    return old


def _keep_in_graph(old, res):
    """``res`` as a function of ``old`` with zero derivative (x keeps requiring grad)."""
    from .elementwise import where

    return where(_wrap(namespace_of(old).zeros(tuple(old.shape), np.bool_)), old, res)


def _fit(name, x, old, res, args, owned=None):
    """The op's result as x's new value: same shape and dtype, on a node of its own."""
    from .elementwise import cast, clone

    res = _as_tensor(res)
    _check_result(name, x, res)
    if res.dtype != x.dtype:
        res = cast(res, x.dtype)
    if any(res is a for a in args) or res is old:  # an operand as is (copy_): a node of its own
        res = clone(res)
    if owned is not None:  # under a transform: the result must be a tracer of that trace
        return res if owned(res) else _keep_in_graph(old, res)
    if old._rg and not res._rg:
        res = _keep_in_graph(old, res)
    if res.grad_fn is None:
        res = clone(res)
    return res


def _check_leaf(name, x):
    if x.grad_fn is None and x._rg:
        raise RuntimeError(
            f"{name}: a leaf Variable that requires grad is being used in an in-place operation "
            f"(shape {tuple(x.shape)}). Use an out-of-place op, or change it under lucid.no_grad()."
        )
    base = x._base
    if base is not None and base.grad_fn is None and base._rg:
        raise RuntimeError(
            f"{name}: a view of a leaf Variable that requires grad is being used in an in-place "
            f"operation (view shape {tuple(x.shape)}, leaf shape {tuple(base.shape)})."
        )
    if base is not None and "_view_src" not in x.__dict__:
        # made under no_grad (bind records how a view was made only in grad mode; code that
        # re-points a tensor, as set_, writes None): PyTorch forbids it, the history is ambiguous
        raise RuntimeError(
            f"{name}: a view was created in no_grad mode and is being modified inplace with grad "
            f"mode enabled (view shape {tuple(x.shape)}); create the view and change it both in "
            "grad mode or both under no_grad, or clone() it"
        )
    _check_multi_output(name, x)


def _check_multi_output(name, x):
    made = _multi_output_of(x)
    if made is not None:  # See NOTE [Multi-output views] (ops/shape/slicing.py)
        fn, i = made
        raise RuntimeError(
            f"{name}: output {i} of {fn} is a view (or a view of it: shape {tuple(x.shape)}) and is being "
            "modified inplace. This view is the output of a function that returns multiple views, "
            "which do not allow their outputs to be modified inplace; use an out-of-place op, or "
            "clone() the output first"
        )


def _multi_output_of(x):
    """``(function, index)`` if ``x`` or a view it was made from is an output of split/unbind."""
    v = x
    while v is not None:
        if v._multi_out is not None:
            return v._multi_out
        src = v._view_src
        v = src[2][0] if src is not None else None
    return None


def _inplace_graph(name, x, args, fn, needs_old):
    _check_leaf(name, x)
    _check_writeable(name, x)
    old = _snapshot(x, copy=needs_old) if x._base is None else _view_snapshot(x, needs_old)
    res = _fit(name, x, old, _out_of_place(name, fn, old, args), args)
    x._data[...] = res._data
    _rebase_changed(x, res)
    _bump(x, name)
    return x


def _view_chain(x):
    """The ``_view_src`` entries from x's base down to x, or None if a link is missing."""
    chain, v, root = [], x, x._base
    while v is not root:
        src = v._view_src
        if src is None:
            return None
        chain.append(src)
        v = src[2][0]
    return chain[::-1]


def _view_snapshot(x, copy):
    """x's old value with the history of a fresh view of its base, not x's own node.

    NOTE [Changed views are fresh views]: PyTorch computes an in-place change of a view from the
    base (CopySlices) and afterwards regenerates the view from the base's new node, so hooks
    registered on the view before the change see no gradient through the change, and a
    retained ``.grad`` of the view is that of the view of the new base. Lucid does the same: the
    old value is re-derived from the base here, and ``_rebase_changed`` replays x itself.
    """
    chain = _view_chain(x)
    if chain is None:
        return _snapshot(x, copy)
    h = _snapshot(x._base, copy=False)
    for prim, params, args in chain:
        h = bind(prim, (h,) + tuple(args[1:]), params)
    old = _wrap(x._data.copy() if copy else x._data)
    if h._rg:
        old.grad_fn, old._out_idx, old._rg = h.grad_fn, h._out_idx, True
    return old


def _rebase_changed(x, res):
    """After an in-place change in a graph: x, its base and every other view of the base get
    their new histories (x's new value is already in its memory)."""
    base = x._base
    if base is not None:
        _rebase_base(base, x, res)
        if x._view_src is not None and x._base is base:  # See NOTE [Changed views are fresh views]
            _rebase(x, res)  # a fallback if x is missing from the registry
            _replay_views(base, None)
            return
    _rebase(x, res)
    _replay_views(x if base is None else base, x)


def _replay_views(root, changed):
    """Regenerate the history of every live view of ``root`` but ``changed``. See NOTE [View replay]."""
    if not root._views:
        return
    for ref in list(root._views):
        view = ref()
        if view is None or view is changed or view._view_src is None:
            continue
        prim, params, args = view._view_src
        fresh = bind(prim, args, params)  # args[0], the parent, already has its new history
        if fresh._rg:
            made = _multi_output_of(view)
            if made is not None:  # PyTorch refuses to regenerate it: differentiating it raises
                fresh = _stale_multi_output(view, fresh, made)
            _rebase(view, fresh)


def _stale_multi_output(view, fresh, made):
    """``fresh`` behind a node whose backward raises PyTorch's error (NOTE [Multi-output views])."""
    from .misc import delayed_error_p

    fn, i = made
    msg = (f"backward: output {i} of {fn} (or a view of it, shape {tuple(view.shape)}) is a view and its base or "
           "another view of its base has been modified inplace. This view is the output of a function "
           "that returns multiple views, which do not allow the base to be modified inplace while "
           "their outputs are used; use an out-of-place op, or clone() the outputs")
    return bind(delayed_error_p, (fresh.detach(), fresh), {"msg": msg})


def _rebase(x, res):
    """Give ``x`` the history of ``res`` (its value was already written into ``x._data``)."""
    if x._retains:  # .grad is the new value's gradient (PyTorch): the old node stops retaining x
        old = x.grad_fn.retains if x.grad_fn is not None else None
        if old is not None and old.get(x._out_idx) is not None and old[x._out_idx]() is x:
            del old[x._out_idx]
    x.grad_fn, x._out_idx, x._rg = res.grad_fn, res._out_idx, True
    if x._retains and res.grad_fn is not None:
        res.grad_fn.add_retain(res._out_idx, x)


def _addresses(a):
    """Byte address of every element of ``a``."""
    addr = np.full(a.shape, data_pointer(a), dtype=np.int64)  # host metadata arithmetic
    for d, (n, s) in enumerate(zip(a.shape, a.strides)):
        shp = [1] * a.ndim
        shp[d] = n
        addr = addr + np.arange(n, dtype=np.int64).reshape(shp) * s
    return addr


def _view_positions(base, view):
    """Flat (C-order) index into ``base`` of every element of ``view`` (which aliases it)."""
    b = _addresses(base).reshape(-1)
    v = _addresses(view).reshape(-1)
    order = np.argsort(b, kind="stable")
    sb = b[order]
    i = np.clip(np.searchsorted(sb, v), 0, max(len(sb) - 1, 0))
    if base.dtype != view.dtype or (v.size and (sb.size == 0 or not np.array_equal(sb[i], v))):
        raise RuntimeError("in-place operation on a view: can't locate the view's elements in its base")
    return order[i]


def _rebase_base(base, x, res):
    """The base of a changed view gets the history ``setitem(base_old, where x is, x_new)``."""
    from .shape import reshape

    old = _snapshot(base, copy=False)
    real_view = base.dtype.kind == "c" and x.dtype.kind != "c"
    if real_view:  # x is (part of) .real / .imag: locate it among the (re, im) pairs of the base
        from .complex import view_as_real

        old = view_as_real(old)
    pos = _wrap(on_device_of(_view_positions(old._data, x._data), x._data))
    new = bind(setitem_p, (reshape(old, -1), reshape(res, -1), pos), {"key": (IDX,)})
    new = reshape(new, tuple(old.shape))
    if real_view:
        from .complex import view_as_complex

        new = view_as_complex(new)
    _rebase(base, new)


# NOTE [Lifting a plain tensor]
# Under grad/vjp/jvp (and jacrev/jacfwd/hessian, made of them) a plain tensor that takes a
# transformed value in place -- ``o = zeros(3); o[1:] = x[:2]``, PyG's
# ``src.new_zeros(n).scatter_add_(0, index, src)`` -- joins the transform, as in torch.func (whose
# factories make values of the current level). A plain Tensor object can't become a tracer (the
# tracer classes have other slots), so it is lifted in place: it gets the tracer's state as
# instance attributes (``_level``/``_trace`` route every later op on it to the trace, ``_primal``,
# ``grad_fn``/``_tangent`` carry the value), and its own array takes the new values, so shape,
# dtype and host reads stay right. Only a tensor made inside the transform is lifted: a
# factory's (zeros, empty, full, tensor, arange, the *_like and new_* forms: ``creation._finish``
# stamps ``_born`` with the innermost active transform) or a plain op's result (``zeros(3) + 1``,
# ``captured.to(dtype)``: ``bind`` stamps it when a transform is active and no operand is a
# tracer -- the transforms' own binds of primal values get the stamp too, one attribute, unused).
# A lifted tensor takes an array of its own, so one that shared a captured tensor's memory
# (``captured.detach()``) never writes into it. A captured tensor is refused, as torch.func
# refuses to mutate one, and so are one that requires grad, a view or a tensor with views, and
# any plain tensor under vmap (as torch.func.vmap refuses an unbatched tensor taking batched
# values).
def _lift_plain(name, x, args, fn, trace):
    """Lift the plain tensor ``x`` into ``trace`` with the in-place result; False if it can't be."""
    born = x.__dict__.get("_born")  # the innermost transform active when a factory made x
    if (trace.kind not in ("grad", "jvp") or x.__class__ is not Tensor or x._level or x._rg
            or x._base is not None or x._views or born is None or not born.active or born.level < trace.level):
        return False
    res = _out_of_place(name, fn, x, args)
    if not trace.owns(res):
        return False
    res = _fit(name, x, x, res, args, owned=trace.owns)
    if _eager_value(res._primal) is None:  # batched values underneath: no array of x's shape holds them
        return False
    x._trace, x._level = trace, trace.level
    _adopt(x, res)
    # An array of its own from here on: a derived tensor may share its operand's (``detach()``, an
    # op that returned its operand's array), and the syncs must never write into a captured tensor.
    x._data = _eager_value(x._primal)._data.copy()
    x._version = [x._version[0]]
    _bump(x, name)
    return True


def _eager_value(value):
    """The plain tensor under a chain of grad/jvp tracers' primals; None under a vmap tracer."""
    from ..func._traces import BatchTracer, _Tracer

    while isinstance(value, _Tracer):
        if isinstance(value, BatchTracer):
            return None
        value = value._inner_value()
    return value


def _sync_lifted(x):
    """A lifted plain tensor's own array takes its traced value (NOTE [Lifting a plain tensor])."""
    x._data[...] = _eager_value(x._primal)._data


def _inplace_traced(name, x, args, fn, trace):
    if not trace.owns(x):
        if _lift_plain(name, x, args, fn, trace):
            return x
        raise RuntimeError(
            f"{name}: can't change a tensor in place with a value of an active {trace.kind} "
            f"transform (the tensor of shape {tuple(x.shape)} is not a {trace.kind} tracer: only a tensor a "
            "factory or an op made inside a grad or jvp transform joins it, not a captured one, a view, "
            "one that requires grad, or any under vmap); use the "
            "out-of-place op instead, e.g. x = x + y"
        )
    if trace.kind == "grad":  # as torch.func.grad; vmap and jvp allow it
        _check_multi_output(name, x)
    res = _fit(name, x, x, _out_of_place(name, fn, x, args), args, owned=trace.owns)
    _adopt(x, res)
    if x.__class__ is Tensor:  # a lifted plain tensor (NOTE [Lifting a plain tensor])
        _sync_lifted(x)
    root = x._base
    if root is not None and trace.owns(root):
        _adopt(root, _scatter_into_base(root, x))
    _replay_traced_views(x if root is None else root, x, trace)
    _bump(x, name)
    return x


def _adopt(x, res):
    """Rebind the tracer ``x`` to the value of ``res`` (functional in-place under a transform)."""
    for slot in ("_primal", "_tangent", "_val", "_bdim", "grad_fn", "_out_idx", "_rg"):
        if hasattr(res, slot):
            setattr(x, slot, getattr(res, slot))


def _scatter_into_base(root, view):
    """``root`` with the elements that ``view`` aliases replaced by ``view``'s current value.

    Tracers have no memory addresses to compare, so the positions are found by replaying the
    view's chain of view primitives (recorded in ``_view_src``) on the flat indices of root.
    """
    from .shape import reshape

    chain = []
    v = view
    while v is not root:
        chain.append(v._view_src)
        v = v._view_src[2][0]
    shape = tuple(root.shape)
    n = int(np.prod(shape))
    if root.dtype.kind == "c" and view.dtype.kind != "c":
        # A real view of complex memory (.real, .imag, view_as_real): replay the chain on complex
        # positions ``2k + (2k+1)j``, so each real element of the view learns which real slot of
        # root's (re, im) pairs it is, and scatter into root seen as reals.
        from .complex import view_as_complex, view_as_real

        slots = np.arange(n, dtype=np.float64) * 2
        pos = _wrap((slots + 1j * (slots + 1)).reshape(shape))
        for prim, params, args in reversed(chain):
            pos = bind(prim, (pos,) + tuple(args[1:]), params)
        pos = _wrap(np.asarray(pos._data, dtype=np.int64))
        flat = reshape(view_as_real(root), -1)
        new = bind(setitem_p, (flat, reshape(view, -1), reshape(pos, -1)), {"key": (IDX,)})
        return view_as_complex(reshape(new, shape + (2,)))
    pos = _wrap(np.arange(n, dtype=np.int64).reshape(shape))
    for prim, params, args in reversed(chain):
        pos = bind(prim, (pos,) + tuple(args[1:]), params)
    new = bind(setitem_p, (reshape(root, -1), reshape(view, -1), reshape(pos, -1)), {"key": (IDX,)})
    return reshape(new, shape)


def _replay_traced_views(root, changed, trace):
    """Re-derive every other view of ``root`` made under this transform. See NOTE [View replay]."""
    if not root._views:
        return
    for ref in list(root._views):
        view = ref()
        if view is None or view is changed or view._view_src is None or not trace.owns(view):
            continue
        prim, params, args = view._view_src
        _adopt(view, bind(prim, args, params))


# ------------------------------------------------------------------- setitem


def _strip_leading_ones(value, target):
    """Drop leading size-1 dims the indexing result doesn't have (PyTorch allows ``x[0] = t[None]``)."""
    shape = tuple(value.shape)
    k = 0
    while len(shape) - k > len(target) and shape[k] == 1:
        k += 1
    return value.reshape(shape[k:]) if k else value


def _numpy_order_value(x, template, idx, value):
    """A tensor ``value`` laid out for NumPy's ``x[template]`` where PyTorch orders the
    indexed dims differently (see NOTE [Ints beside index tensors]); others as they are."""
    perm = torch_order(template, idx, x.ndim) if isinstance(value, Tensor) else None
    if perm is None:
        return value
    from .shape import broadcast_to

    shape = _indexed_shape(x.shape, template, idx)
    target = tuple(shape[p] for p in perm)
    value = _strip_leading_ones(value, target)
    try:
        np.broadcast_shapes(tuple(value.shape), target)
    except ValueError:
        # PyTorch refuses such a value; one laid out in NumPy's order is still accepted as before
        # (tests/test_indexing.py relies on it), so only PyTorch's answers change
        return value
    return broadcast_to(value, target).permute(tuple(np.argsort(perm)))


def _value_to_device(self, value, idx):
    """A value on another device than ``self``, copied to it (one explicit, differentiable
    transfer) where PyTorch copies: a basic index (``self[0:2] = v`` is ``copy_``, which moves
    between devices) or a 0-dim value; an advanced index with a value of another device is
    PyTorch's error (``index_put_``)."""
    if not idx or not value.ndim:
        return value.to(self.device)
    raise RuntimeError(f"setitem: Expected all tensors to be on the same device, but found at least two devices, "
                       f"{self.device} and {value.device}! (move one with .to(device))")


def _setitem_index_error(e, self, idx, value):
    """NumPy's IndexError (an index out of range, a mask of the wrong shape) naming the op and the shapes."""
    return IndexError(f"setitem: {e} (tensor shape {tuple(self.shape)}, index tensor shapes "
                      f"{[tuple(i.shape) for i in idx]}, value shape {tuple(getattr(value, 'shape', ()))})")


@tensor_method("__setitem__")
def setitem(self, key, value):
    """``self[key] = value``: in place, with gradients for both sides in a graph.

    The overwritten positions of the old ``self`` get zero gradient; ``value`` gets the
    gradient at the positions it was written to (summed over broadcasting).

    Examples
    --------
    >>> import lucid
    >>> w = lucid.tensor([2.0], requires_grad=True)
    >>> x = lucid.zeros(3)
    >>> x[1] = w * 3
    >>> x.sum().backward()
    >>> w.grad
    tensor([3.])
    """
    template, idx = split_key(key)
    if isinstance(value, Tensor) and not (value._level or self._level) and (  # (traced ones hold no data)
            value._data.__class__ is not np.ndarray or self._data.__class__ is not np.ndarray) \
            and value.device != self.device:
        value = _value_to_device(self, value, idx)
    raw, value = value, _numpy_order_value(self, template, idx, _value_for(self, value))
    if isinstance(value, Tensor) and value.ndim and value.shape[0] == 1:
        try:
            target = _indexed_shape(self.shape, template, idx)
        except IndexError as e:
            raise _setitem_index_error(e, self, idx, value) from None
        value = _strip_leading_ones(value, target)
    if primitive.ACTIVE_TRACES[0]:
        if DEVICE_GUARD[0]:  # NOTE [Several devices]
            guard = guard_for((self, value), "setitem")
            if guard is not None:
                with guard:
                    return setitem(self, key, raw)
        trace = primitive._owning_trace((self, value) + idx) if STATE.traces else None
        if trace is not None:
            return _inplace_traced(
                "setitem", self, (value,) + idx,
                lambda x, v, *i: bind(setitem_p, (x, v) + i, {"key": template}), trace)
    _check_writeable("setitem", self)
    graph = _needs_graph(self, (value,))
    if graph:
        _check_leaf("setitem", self)
    k = fill_key(template, [i._data for i in idx])
    if BEFORE_MUTATION[0] is not None:
        BEFORE_MUTATION[0](self)
    try:
        self._data[k] = value._data if isinstance(value, Tensor) else _scalar_for(self._data, value)
    except ValueError as e:
        raise RuntimeError(
            f"setitem: shape mismatch: a value of shape {tuple(getattr(value, 'shape', ()))} can't "
            f"be assigned to the indexing result of shape "
            f"{_indexed_shape(self.shape, template, idx)} ({e})"
        ) from None
    except IndexError as e:  # an index out of range, a mask of the wrong shape
        raise _setitem_index_error(e, self, idx, value) from None
    if graph:
        # The write is done in place (O(size of value)); the node records the functional
        # setitem so gradients flow to the old self and to value.
        res = primitive._record(setitem_p, (_snapshot(self, copy=False), value) + idx,
                                {"key": template}, self._data)
        _rebase_changed(self, res)
    _bump(self, "setitem")


__all__ = []


from . import inplace_ops  # noqa: E402,F401  (registers the in-place methods; they use the machinery above)
