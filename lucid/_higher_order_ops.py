"""PyTorch's eager higher-order ops (``torch._higher_order_ops``): ``scan``, ``associative_scan``,
``map``, ``foreach_map``, with ``cond`` and ``while_loop`` (``lucid/ops/torch_misc.py``) re-exported.

NOTE [Higher-order ops as compositions]
PyTorch runs these through ``torch.compile``; Lucid runs them eagerly as compositions of its
own ops (``select``, ``stack``, ``cat``, ``flip``, ``movedim``, ``func.vmap``), so gradients,
forward mode and ``vmap`` flow through them with no rules of their own. Arguments and results
are pytrees (tuples, lists, dicts of tensors) as in PyTorch; the body functions must be pure.
"""
from __future__ import annotations

import os

from ._core.tensor import Tensor
from .func.pytree import tree_flatten, tree_unflatten
from .ops.torch_misc import cond, while_loop

__all__ = ["scan", "associative_scan", "map", "foreach_map", "cond", "while_loop"]

# PyTorch's submodule paths (``from torch._higher_order_ops.scan import scan``) live in a folder:
# NOTE [Submodules of file modules]
__path__ = [os.path.join(os.path.dirname(__file__), "_module_paths", "_higher_order_ops")]


def _canonical_dim(api, dim, ndim, err):
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise err(f"{api}: dim must be an int, got {type(dim).__name__}")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise IndexError(f"{api}: dimension out of range (expected to be in range of [{-max(ndim, 1)}, "
                         f"{max(ndim, 1) - 1}], but got {dim})")
    return dim % max(ndim, 1)


def _stack_leaves(api, per_step, dim):
    """Per-step flat outputs -> one tensor per leaf, stacked along ``dim`` (0 when ``dim`` is past
    the stacked value's last dimension, as PyTorch)."""
    from .ops.shape import stack

    out = []
    for j, first in enumerate(per_step[0]):
        if not isinstance(first, Tensor):
            raise RuntimeError(f"{api}: the function must return tensors (or pytrees of them), got "
                               f"{type(first).__name__}")
        vals = [step[j] for step in per_step]
        out.append(stack(vals, dim=dim if dim <= first.ndim else 0))
    return out


def scan(combine_fn, init, xs, *, dim=0, reverse=False):
    """Inclusive scan with a carry, as ``torch._higher_order_ops.scan``.

    ``combine_fn(carry, x) -> (next_carry, y)`` runs once per slice ``x`` of ``xs`` along ``dim``
    (last to first with ``reverse=True``); the result is ``(final_carry, ys)`` with the ``y``
    slices stacked along ``dim`` in the positions of their ``x``. See NOTE [Higher-order ops as
    compositions]: differentiable in every mode.

    Parameters
    ----------
    combine_fn : callable
        ``(carry, x) -> (next_carry, y)``; ``next_carry`` must match ``init`` in structure,
        shapes and dtypes.
    init : Tensor or pytree of Tensors
        The initial carry.
    xs : Tensor or pytree of Tensors
        Scanned along ``dim``; every leaf needs the same length there (at least 1).
    dim : int
        The scanned dimension.
    reverse : bool
        Scan from the last slice to the first.

    Returns
    -------
    tuple
        ``(final_carry, ys)``; ``(init, [])`` when ``xs`` has no tensors.

    Examples
    --------
    >>> import lucid
    >>> from lucid._higher_order_ops import scan
    >>> carry, ys = scan(lambda c, x: (c + x, (c + x).clone()), lucid.zeros(1), lucid.arange(4.0).reshape(4, 1))
    >>> carry.tolist(), ys.flatten().tolist()
    ([6.0], [0.0, 1.0, 3.0, 6.0])
    """
    leaves_init, spec_init = tree_flatten(init)
    leaves_xs, spec_xs = tree_flatten(xs)
    if not leaves_xs:
        return init, []
    if not callable(combine_fn):
        raise RuntimeError(f"scan: combine_fn must be a callable, got {combine_fn!r}")
    if not isinstance(reverse, bool):
        raise RuntimeError(f"scan: reverse must be a bool, got {type(reverse).__name__}")
    if not leaves_init:
        raise RuntimeError("scan: init must contain at least one tensor")
    for what, leaves in (("init", leaves_init), ("xs", leaves_xs)):
        for t in leaves:
            if not isinstance(t, Tensor):
                raise RuntimeError(f"scan: all {what} leaves must be Tensors, got {type(t).__name__}")
    dim = _canonical_dim("scan", dim, leaves_xs[0].ndim, RuntimeError)
    if any(x.ndim <= dim or x.shape[dim] == 0 for x in leaves_xs):
        raise RuntimeError(f"scan: every xs leaf needs a dimension {dim} of length at least 1; got shapes "
                           f"{[tuple(x.shape) for x in leaves_xs]}")
    n = leaves_xs[0].shape[dim]
    if any(x.shape[dim] != n for x in leaves_xs):
        raise RuntimeError(f"scan: every xs leaf needs the same length along dim {dim}; got shapes "
                           f"{[tuple(x.shape) for x in leaves_xs]}")
    carry, per_step, spec_out = leaves_init, [], None
    for i in (range(n - 1, -1, -1) if reverse else range(n)):
        res = combine_fn(tree_unflatten(carry, spec_init), tree_unflatten([x.select(dim, i) for x in leaves_xs], spec_xs))
        if not isinstance(res, (tuple, list)) or len(res) != 2:
            raise RuntimeError("scan: combine_fn must return a pair (next_carry, y)")
        new, spec_new = tree_flatten(res[0])
        ys, spec_out = tree_flatten(res[1])
        _check_carry(new, spec_new, leaves_init, spec_init)
        carry = new
        per_step.append(ys)
    if reverse:
        per_step.reverse()
    if not per_step[0]:
        return tree_unflatten(carry, spec_init), tree_unflatten([], spec_out)
    return tree_unflatten(carry, spec_init), tree_unflatten(_stack_leaves("scan", per_step, dim), spec_out)


def _check_carry(new, spec_new, init, spec_init):
    if spec_new != spec_init:
        raise RuntimeError(f"scan: the carry returned by combine_fn has structure {spec_new}, but init has "
                           f"{spec_init}")
    for a, b in zip(init, new):
        if not isinstance(b, Tensor) or tuple(a.shape) != tuple(b.shape) or a.dtype != b.dtype:
            got = (tuple(b.shape), b.dtype) if isinstance(b, Tensor) else type(b).__name__
            raise RuntimeError(f"scan: the carry returned by combine_fn must match init in shape and dtype: "
                               f"expected {(tuple(a.shape), a.dtype)}, got {got}")


def associative_scan(combine_fn, xs, dim, reverse=False, combine_mode="pointwise"):
    """Inclusive scan with an associative ``combine_fn``, as ``torch._higher_order_ops.associative_scan``.

    Computed in ``O(log n)`` calls of ``combine_fn`` (the odd/even recursion PyTorch's generic mode
    and JAX's ``lax.associative_scan`` use). With ``combine_mode="generic"`` ``combine_fn`` sees one
    slice per call (it is ``vmap``-ed over the scanned dimension); with ``"pointwise"`` it gets
    whole tensors and must be elementwise. See NOTE [Higher-order ops as compositions].

    Parameters
    ----------
    combine_fn : callable
        ``(a, b) -> c`` on pytrees shaped like ``xs``; must be associative.
    xs : Tensor or pytree of Tensors
        All leaves of the same shape, scanned along ``dim`` (length at least 1).
    dim : int
        The scanned dimension.
    reverse : bool
        Scan from the last element to the first.
    combine_mode : {"pointwise", "generic"}
        See above.

    Returns
    -------
    Tensor or pytree of Tensors
        Shaped like ``xs``.

    Limitations
    -----------
    PyTorch's ``"pointwise"`` mode needs a CUDA or XPU device (it generates a kernel); Lucid's
    runs on every device.

    Examples
    --------
    >>> import lucid
    >>> from lucid._higher_order_ops import associative_scan
    >>> associative_scan(lambda a, b: a + b, lucid.arange(1.0, 6.0), 0).tolist()
    [1.0, 3.0, 6.0, 10.0, 15.0]
    """
    leaves, spec = tree_flatten(xs)
    if not callable(combine_fn):
        raise ValueError(f"associative_scan: combine_fn must be a callable, got {combine_fn!r}")
    if not isinstance(dim, int) or isinstance(dim, bool):
        raise ValueError(f"associative_scan: dim must be an int, got {type(dim).__name__}")
    if not isinstance(reverse, bool):
        raise RuntimeError(f"associative_scan: reverse must be a bool, got {type(reverse).__name__}")
    if combine_mode not in ("pointwise", "generic"):
        raise ValueError(f"associative_scan: combine_mode must be 'pointwise' or 'generic', got {combine_mode!r}")
    if not leaves:
        raise ValueError("associative_scan: expected at least one tensor in xs")
    if any(not isinstance(x, Tensor) for x in leaves):
        raise ValueError("associative_scan: all xs leaves must be Tensors")
    dim = _canonical_dim("associative_scan", dim, leaves[0].ndim, ValueError)
    if any(x.ndim <= dim or x.shape[dim] == 0 for x in leaves):
        raise ValueError(f"associative_scan: every xs leaf needs a dimension {dim} of length at least 1; got "
                         f"shapes {[tuple(x.shape) for x in leaves]}")
    if any(x.shape[dim] != leaves[0].shape[dim] for x in leaves):
        raise ValueError(f"associative_scan: every xs leaf needs the same length along dim {dim}")
    elems = [x.movedim(dim, 0) for x in leaves]
    if reverse:
        elems = [e.flip(0) for e in elems]
    fn = combine_fn
    if combine_mode == "generic":
        from .func import vmap

        fn = vmap(combine_fn, in_dims=(0, 0), out_dims=0)

    def op(a, b):
        out, spec_out = tree_flatten(fn(tree_unflatten(a, spec), tree_unflatten(b, spec)))
        if spec_out != spec or any(not isinstance(o, Tensor) for o in out):
            raise RuntimeError(f"associative_scan: combine_fn must return a pytree like xs ({spec}), got {spec_out}")
        return out

    out = _odd_even_scan(op, elems)
    if reverse:
        out = [o.flip(0) for o in out]
    return tree_unflatten([o.movedim(0, dim) for o in out], spec)


def _odd_even_scan(op, elems):
    """Prefix combination along dim 0: combine neighbouring pairs, scan those recursively, then
    fill in the even positions (Blelloch's odd/even recursion; ``O(log n)`` calls of ``op``)."""
    from .ops.shape import cat

    n = elems[0].shape[0]
    if n < 2:
        return elems
    odd = _odd_even_scan(op, op([e[0:-1:2] for e in elems], [e[1::2] for e in elems]))
    if n % 2 == 0:
        even = op([o[:-1] for o in odd], [e[2::2] for e in elems])
    else:
        even = op(odd, [e[2::2] for e in elems])
    even = [cat([e[:1], r]) for e, r in zip(elems, even)]
    return [_interleave(a, b) for a, b in zip(even, odd)]


def _interleave(a, b):
    """``a[0], b[0], a[1], b[1], ...`` along dim 0 (``a`` may be one longer than ``b``)."""
    from .ops.shape import cat, stack

    if a.shape[0] == b.shape[0] + 1:
        return cat([stack([a[:-1], b], dim=1).flatten(0, 1), a[-1:]])
    return stack([a, b], dim=1).flatten(0, 1)


def map(f, xs, *args):
    """``f`` applied to each slice of ``xs`` along dim 0, results stacked, as
    ``torch._higher_order_ops.map`` (``functorch.experimental.control_flow.map``).

    ``f(x, *args)`` runs once per slice ``x`` (a pytree like ``xs``); ``args`` are passed whole.
    See NOTE [Higher-order ops as compositions].

    Parameters
    ----------
    f : callable
        ``(x, *args) -> pytree of Tensors``.
    xs : Tensor or pytree of Tensors
        Mapped over dim 0; every leaf needs the same nonzero length there.
    *args
        Extra arguments given to every call.

    Returns
    -------
    Tensor or pytree of Tensors
        ``f``'s results stacked along a new dim 0.

    Examples
    --------
    >>> import lucid
    >>> from lucid._higher_order_ops import map
    >>> map(lambda x, y: x * y, lucid.ones(3, 2), lucid.tensor(2.0)).tolist()
    [[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]
    """
    leaves, spec = tree_flatten(xs)
    if not leaves or any(not isinstance(t, Tensor) for t in leaves):
        raise RuntimeError(f"map: mapped xs can only consist of tensors, got {leaves!r}"[:300])
    shapes = [tuple(t.shape) for t in leaves]
    if any(len(s) == 0 for s in shapes):
        raise RuntimeError(f"map: mapped xs need a leading dimension, got shapes {shapes}")
    n = shapes[0][0]
    if n == 0:
        raise RuntimeError("map: leading dimensions of mapped xs cannot be 0")
    if any(s[0] != n for s in shapes):
        raise RuntimeError(f"map: leading dimensions of mapped xs must be consistent, got shapes {shapes}")
    per_step, spec_out = [], None
    for i in range(n):
        out, spec_i = tree_flatten(f(tree_unflatten([t[i] for t in leaves], spec), *args))
        if spec_out is not None and spec_i != spec_out:
            raise RuntimeError(f"map: f returned {spec_i} for slice {i} but {spec_out} before")
        spec_out = spec_i
        per_step.append(out)
    if not per_step[0]:
        return tree_unflatten([], spec_out)
    return tree_unflatten(_stack_leaves("map", per_step, 0), spec_out)


def foreach_map(op, *operands, **kwargs):
    """Apply ``op`` elementwise across lists of operands, as ``torch._higher_order_ops.foreach_map``.

    The operands that are lists or tuples are zipped (to the shortest, as Python's ``zip``); the
    others (scalars, single tensors) are repeated for every position. The result is the list
    ``[op(*args_i) for args_i in zip(...)]``, or ``op(*operands)`` once when no operand is a list.
    PyTorch horizontally fuses the calls under ``torch.compile``; Lucid runs them eagerly, so
    autograd, forward mode and ``vmap`` flow through ``op`` as usual (NOTE [Higher-order ops as
    compositions]).

    ``kwargs`` are configuration options of the higher-order op and, as in eager PyTorch, are
    **not** passed to ``op``: bind them into ``op`` (``functools.partial`` or a ``lambda``).

    Parameters
    ----------
    op : callable
        Applied once per position.
    *operands
        Lists/tuples of operands (zipped) and other values (repeated).

    Returns
    -------
    list or object
        The per-position results, or ``op(*operands)`` when no operand is a list.

    Examples
    --------
    >>> import lucid
    >>> from lucid._higher_order_ops.foreach_map import foreach_map
    >>> xs = [lucid.tensor([1.0, 2.0]), lucid.tensor([3.0])]
    >>> [t.tolist() for t in foreach_map(lucid.lerp, xs, [lucid.zeros(2), lucid.zeros(1)], 0.5)]
    [[0.5, 1.0], [1.5]]
    """
    if not callable(op):
        raise TypeError(f"foreach_map: op must be a callable, got {op!r}")
    if not any(isinstance(a, (list, tuple)) for a in operands):
        return op(*operands)
    columns = [a if isinstance(a, (list, tuple)) else _Repeat(a) for a in operands]
    return [op(*args) for args in zip(*columns)]


class _Repeat:
    """An endless iterator of one value (a non-list ``foreach_map`` operand)."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value

    def __iter__(self):
        while True:
            yield self.value


def _load_submodules():
    # Importing ``lucid._higher_order_ops.map`` binds the *module* to this package's ``map``; load
    # the six submodules now and bind the functions back. See NOTE [Submodules of file modules]
    import importlib

    functions = {name: globals()[name] for name in __all__}
    for name in __all__:
        importlib.import_module(f"{__name__}.{name}")
    globals().update(functions)


_load_submodules()
