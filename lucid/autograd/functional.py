"""``torch.autograd.functional``: jacobian, hessian, vjp, jvp, hvp, vhp on the eager API.

Thin wrappers over the ``lucid.func`` transforms (true forward mode for ``jvp``/``hvp``),
with PyTorch's arguments and tuple conventions: a Tensor in gives a Tensor out, a tuple
in gives a tuple out, and Jacobian blocks are ``[output][input]`` of shape
``output.shape + input.shape``.

* ``create_graph=False`` (default): inputs are detached first and results are plain
  tensors. ``create_graph=True``: inputs keep their history, so results can be
  differentiated again with ``backward``/``autograd.grad``.
* ``strict=True``: raise when an output is independent of an input (instead of
  returning zeros). Not supported together with ``vectorize=True`` (as in PyTorch).
* ``vectorize=True``: Jacobians via ``vmap`` over the basis (one batched pass) instead of
  one backward per output element; ``strategy="forward-mode"`` (needs ``vectorize``) uses
  ``jacfwd``.
"""
from __future__ import annotations

from .._core.backend import namespace_of
from .._core.tensor import Tensor, _wrap
from ..func import api as _fapi
from ..func.pytree import tree_map

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


# ----------------------------------------------------------------- helpers


def _as_tuple(x, what, api):
    is_tuple = isinstance(x, (tuple, list))
    xs = tuple(x) if is_tuple else (x,)
    for i, t in enumerate(xs):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"{api}: the {what} must be a Tensor or a tuple of Tensors, but {what}[{i}] is a "
                f"{type(t).__name__}"
            )
    if what == "inputs":
        _fapi._check_differentiable(xs, api)
    return is_tuple, xs


def _prep(inputs, create_graph):
    """Detach unless a differentiable result is wanted. See the module docstring."""
    return inputs if create_graph else tuple(x.detach() for x in inputs)


def _finish(tree, create_graph):
    if create_graph:
        return tree
    return tree_map(lambda t: t.detach() if isinstance(t, Tensor) else t, tree)


def _pack(xs, is_tuple):
    return tuple(xs) if is_tuple else xs[0]


def _tuple_fn(func, api, holder):
    """``func`` returning a tuple of Tensors always; remembers whether it returned a tuple."""

    def f(*xs):
        is_tuple, outs = _as_tuple(func(*xs), "outputs of the user-provided function", api)
        holder["tuple"] = is_tuple
        return outs

    return f


def _check_v(v, ref, api, what):
    """Validate (or default) the vector ``v`` against the Tensors ``ref``."""
    if v is None:
        if len(ref) != 1 or ref[0].numel() != 1:
            raise RuntimeError(
                f"{api}: the vector v can only be None if the {what} is a single Tensor with a single "
                f"element; got {what} of shapes {[tuple(r.shape) for r in ref]}"
            )
        return (_wrap(namespace_of(ref[0]).ones(ref[0].shape, ref[0].dtype)),)
    _, vs = _as_tuple(v, "v", api)
    if len(vs) != len(ref):
        raise RuntimeError(f"{api}: v has {len(vs)} Tensor(s) but the {what} has {len(ref)}")
    for i, (a, r) in enumerate(zip(vs, ref)):
        if tuple(a.shape) != tuple(r.shape):
            raise RuntimeError(
                f"{api}: mismatch in shape: v[{i}] has shape {tuple(a.shape)} but the {what}[{i}] "
                f"has shape {tuple(r.shape)}"
            )
    return tuple(a if a.dtype == r.dtype else a.to(r.dtype) for a, r in zip(vs, ref))


def _fill_none(vals, refs, strict, api, message):
    out = []
    for i, (g, r) in enumerate(zip(vals, refs)):
        if g is None:
            if strict:
                raise RuntimeError(f"{api}: {message.format(i=i)}. This is not allowed in strict mode.")
            g = _wrap(namespace_of(r).zeros(r.shape, r.dtype))
        out.append(g)
    return tuple(out)


def _scalar_fn(func, api):
    def f(*xs):
        out = func(*xs)
        if not isinstance(out, (Tensor, tuple)):  # PyTorch's types: TypeError, tuple RuntimeError
            raise TypeError(f"{api}: the outputs of the user-provided function must be either a Tensor or "
                            f"a tuple of Tensors, but they have type {type(out).__name__}")
        if not isinstance(out, Tensor):
            raise RuntimeError(f"{api}: the function given to {api} should return a single Tensor, got "
                               f"a {type(out).__name__}")
        if out.numel() != 1:
            raise RuntimeError(
                f"{api}: the Tensor returned by the function must contain a single element, "
                f"got shape {tuple(out.shape)}"
            )
        return out.reshape(())

    return f


# --------------------------------------------------------------- products


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T J)``; the product has the structure of ``inputs``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.functional import vjp
    >>> vjp(lambda x: x ** 2, lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 1.0]))[1]
    tensor([2., 4.])
    """
    api = "vjp"
    in_tuple, ins = _as_tuple(inputs, "inputs", api)
    ins = _prep(ins, create_graph)
    holder = {}
    outs, vjp_fn, _ = _fapi._vjp_impl(_tuple_fn(func, api, holder), ins, False, api)
    vs = _check_v(v, outs, api, "output of the user-provided function")
    grads = vjp_fn(vs, _keep_none=True)
    grads = _fill_none(grads, ins, strict, api, "the output of the user-provided function is independent of input {i}")
    return _finish((_pack(outs, holder["tuple"]), _pack(grads, in_tuple)), create_graph)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), J v)`` by true forward mode; the product has the outputs' structure.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.functional import jvp
    >>> jvp(lambda x: x ** 2, lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 0.0]))[1]
    tensor([2., 0.])
    """
    api = "jvp"
    in_tuple, ins = _as_tuple(inputs, "inputs", api)
    ins = _prep(ins, create_graph)
    vs = _check_v(v, ins, api, "inputs")
    holder = {}
    f = _tuple_fn(func, api, holder)
    if strict:
        _check_all_inputs_used(f, ins, api)
    outs, tans = _fapi._jvp_impl(f, ins, vs, False, api, keep_none=True)
    tans = _fill_none(tans, outs, strict, api, "output {i} of the user-provided function is independent of the inputs")
    return _finish((_pack(outs, holder["tuple"]), _pack(tans, holder["tuple"])), create_graph)


def _check_all_inputs_used(f, ins, api):
    """``jvp(strict=True)``: as PyTorch's, every input must reach some output (one extra vjp)."""
    outs, vjp_fn, _ = _fapi._vjp_impl(f, ins, False, api)
    ones = tuple(_wrap(namespace_of(o).ones(o.shape, o.dtype)) for o in outs)
    for i, g in enumerate(vjp_fn(ones, _keep_none=True)):
        if g is None:
            raise RuntimeError(f"{api}: the output of the user-provided function is independent of input "
                               f"{i}. This is not allowed in strict mode.")


class _StrategyError(ValueError, AssertionError):
    """A ``strategy`` that is not a mode: PyTorch asserts (AssertionError); Lucid raised ValueError."""


def _second_order_args(func, inputs, v, create_graph, api):
    """Shared by hvp/vhp: (inputs were a tuple, inputs, v, the function ``x -> (grad, value)``)."""
    in_tuple, ins = _as_tuple(inputs, "inputs", api)
    ins = _prep(ins, create_graph)
    vs = _check_v(v, ins, api, "inputs")
    gv = _fapi.grad_and_value(_scalar_fn(func, api), argnums=tuple(range(len(ins))))
    return in_tuple, ins, vs, gv


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), H v)`` by forward-over-reverse; ``func`` returns one element.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.functional import hvp
    >>> hvp(lambda x: (x ** 3).sum(), lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 1.0]))[1]
    tensor([ 6., 12.])
    """
    api = "hvp"
    in_tuple, ins, vs, gv = _second_order_args(func, inputs, v, create_graph, api)
    _, tans, value = _fapi._jvp_impl(gv, ins, vs, True, api, keep_none=True)
    tans = _fill_none(tans, ins, strict, api, "the hessian of the user-provided function is independent of input {i}")
    return _finish((value, _pack(tans, in_tuple)), create_graph)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """``(func(inputs), v^T H)`` by reverse-over-reverse; ``func`` returns one element.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.functional import vhp
    >>> vhp(lambda x: (x ** 3).sum(), lucid.tensor([1.0, 2.0]), lucid.tensor([1.0, 1.0]))[1]
    tensor([ 6., 12.])
    """
    api = "vhp"
    in_tuple, ins, vs, gv = _second_order_args(func, inputs, v, create_graph, api)
    _, vjp_fn, value = _fapi._vjp_impl(gv, ins, True, api)
    grads = vjp_fn(vs, _keep_none=True)
    grads = _fill_none(grads, ins, strict, api, "the hessian of the user-provided function is independent of input {i}")
    return _finish((value, _pack(grads, in_tuple)), create_graph)


# -------------------------------------------------------------- Jacobians


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """Jacobian of ``func`` at ``inputs``: blocks ``[output][input]`` of shape ``out.shape + in.shape``.

    A Tensor input and a Tensor output give one Tensor; a tuple on either side gives a
    tuple over that side (a tuple of tuples when both are tuples).

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.functional import jacobian
    >>> jacobian(lambda x: x ** 2, lucid.tensor([1.0, 2.0]))
    tensor([[2., 0.],
            [0., 4.]])
    """
    api = "jacobian"
    _check_strategy(strategy, vectorize, strict, api, "strategy")
    in_tuple, ins = _as_tuple(inputs, "inputs", api)
    ins = _prep(ins, create_graph)
    holder = {}
    f = _tuple_fn(func, api, holder)
    if vectorize:
        nums = tuple(range(len(ins)))  # complex allowed here, as in PyTorch (unlike func.jacrev/jacfwd)
        if strategy == "forward-mode":
            blocks = _fapi._jacfwd(f, nums, False, "error", real_only=False)(*ins)
        else:
            blocks = _fapi._jacrev(f, nums, False, None, real_only=False)(*ins)
    else:
        blocks = _jacobian_rows(f, ins, strict, api)
    res = [_pack(row, in_tuple) for row in blocks]
    return _finish(_pack(res, holder["tuple"]), create_graph)


def _check_strategy(strategy, vectorize, strict, api, name):
    if strategy not in ("forward-mode", "reverse-mode"):
        raise _StrategyError(f'{api}: expected {name} to be "forward-mode" or "reverse-mode", got {strategy!r}')
    if strategy == "forward-mode" and not vectorize:
        raise NotImplementedError(f'{api}: {name}="forward-mode" is only implemented for vectorize=True')
    if strict and vectorize:
        raise RuntimeError(f"{api}: strict=True and vectorize=True are not supported together; set "
                           "strict=False or vectorize=False")


def _jacobian_rows(f, ins, strict, api):
    """One vjp per output element (PyTorch's ``vectorize=False``), stacked into blocks."""
    from ..ops.shape import stack

    outs, vjp_fn, _ = _fapi._vjp_impl(f, ins, False, api)
    blocks = []
    for i, o in enumerate(outs):
        rows = [[] for _ in ins]
        used = [False] * len(ins)
        flat = namespace_of(o).eye(o.numel(), dtype=o.dtype).reshape((o.numel(),) + tuple(o.shape))
        for k in range(o.numel()):
            cts = tuple(_wrap(flat[k]) if j == i else _wrap(namespace_of(p).zeros(p.shape, p.dtype)) for j, p in enumerate(outs))
            for j, (g, x) in enumerate(zip(vjp_fn(cts, _keep_none=True), ins)):
                used[j] |= g is not None
                rows[j].append(g if g is not None else _wrap(namespace_of(x).zeros(x.shape, x.dtype)))
        block = []
        for j, x in enumerate(ins):
            if strict and not used[j]:
                raise RuntimeError(f"{api}: output {i} of the user-provided function is independent of "
                                   f"input {j}. This is not allowed in strict mode.")
            shape = tuple(o.shape) + tuple(x.shape)
            block.append(stack(rows[j]).reshape(shape) if rows[j] else _wrap(namespace_of(x).zeros(shape, x.dtype)))
        blocks.append(block)
    return blocks


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """Hessian of a single-element ``func``: a Tensor for one input, else a tuple of tuples.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.functional import hessian
    >>> hessian(lambda x: (x ** 3).sum(), lucid.tensor([1.0, 2.0]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    api = "hessian"
    _check_strategy(outer_jacobian_strategy, vectorize, strict, api, "outer_jacobian_strategy")
    in_tuple, ins = _as_tuple(inputs, "inputs", api)
    grad_fn = _fapi.grad(_scalar_fn(func, api), argnums=tuple(range(len(ins))))

    def gradient(*xs):
        g = grad_fn(*xs)
        return g if in_tuple else g[0]

    try:
        return jacobian(gradient, _pack(ins, in_tuple), create_graph, strict, vectorize, outer_jacobian_strategy)
    except RuntimeError as e:
        if strict and "independent" in str(e):
            j = str(e).split("input ")[-1].split(".")[0]
            raise RuntimeError(f"{api}: the hessian of the user-provided function with respect to input "
                               f"{j} is independent of the input. This is not allowed in strict mode.") from None
        raise
