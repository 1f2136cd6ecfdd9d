"""``lucid.func``: grad, vjp, jvp, linearize, jacrev, jacfwd, hessian, vmap (torch.func signatures).

Every public transform validates its arguments, flattens pytrees and calls an ``_impl``;
errors start with the call, e.g. ``vjp(f, *primals): ...``.
"""
from __future__ import annotations

import functools

import numpy as np

from .._core.backend import namespace_of, on_device, to_device

from .._core.grad_mode import STATE, SUBCLASS_DISPATCH, enable_grad, pop_trace, push_trace
from .._core.primitive import TN
from .._core.tensor import Tensor, _wrap
from ..autograd.engine import run_backward
from ._traces import BatchTrace, BatchTracer, GradTrace, GradTracer, JVPTrace, JVPTracer, _new_batch_tracer, _Tracer
from ..ops._family import move_bdim
from .pytree import broadcast_prefix, tree_flatten, tree_map, tree_unflatten


class FuncTypeError(TypeError, RuntimeError, ValueError):
    """A transform got a non-Tensor, or a Tensor it can't differentiate (an integer one).

    PyTorch raises RuntimeError (grad, vjp, jacrev) or ValueError (jvp, jacfwd) here; Lucid
    raised TypeError before, so the class derives from all three.
    """


class FuncArgError(RuntimeError, ValueError):
    """A transform's own argument (``argnums``, ``randomness``) is invalid (PyTorch: RuntimeError)."""


class VmapDimError(ValueError, IndexError):
    """An ``out_dims`` entry is out of range for its output (PyTorch: IndexError)."""


def _check_tensors(leaves, api, what="input"):
    for x in leaves:
        if not isinstance(x, Tensor):
            raise FuncTypeError(f"{api}: expected every {what} to be a Tensor, got {type(x).__name__}")


def _check_differentiable(leaves, api):
    """Inputs to differentiate must be floating or complex Tensors (as in PyTorch and Lucid 3)."""
    _check_tensors(leaves, api)
    for i, x in enumerate(leaves):
        if x.dtype.kind not in "fc":
            raise FuncTypeError(
                f"{api}: only floating point or complex Tensors can be differentiated, but input {i} "
                f"(shape {tuple(x.shape)}) has dtype {x.dtype}; convert it first, e.g. x.double()"
            )


def _error_if_complex(api, tree, is_input):
    """PyTorch's ``jacrev``/``jacfwd`` (and so ``hessian``) take real tensors only: every positional
    argument (differentiated or not) and every output leaf (not ``aux``). ``autograd.functional``'s
    vectorized Jacobians, which do accept complex, go through ``_jacrev``/``_jacfwd`` directly."""
    for idx, x in enumerate(tree_flatten(tree)[0]):
        if isinstance(x, Tensor) and x.dtype.kind == "c":
            side = "inputs" if is_input else "outputs"
            raise RuntimeError(f"{api}: Expected all {side} to be real but received complex tensor at flattened "
                               f"input idx: {idx} (shape {tuple(x.shape)}, dtype {x.dtype})")


def _argnums_tuple(argnums, nargs, api):
    if not isinstance(argnums, (int, tuple, list)) or isinstance(argnums, bool):
        raise FuncArgError(f"{api}: argnums must be an int or a tuple of ints, got {type(argnums).__name__}")
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise FuncArgError(f"{api}: argnums must be non-empty")
    for n in nums:
        if not isinstance(n, int) or isinstance(n, bool):
            raise FuncArgError(f"{api}: argnums must be an int or a tuple of ints, got element {n!r}")
        if not -nargs <= n < nargs:
            raise FuncArgError(f"{api}: got argnums={argnums} but only {nargs} positional inputs")
    out = tuple(n % nargs for n in nums)
    if len(set(out)) != len(out):
        raise FuncArgError(f"{api}: argnums elements must be unique, got {argnums}")
    return out


def _unwrap(tree, trace):
    """Replace this trace's tracers in ``tree`` by their primals."""
    return tree_map(lambda x: x._primal if trace.owns(x) else x, tree)


# NOTE [Transforms under no_grad]
# A transform runs ``f`` with grad mode on, so a tensor ``f`` closes over that requires grad (a
# parameter ``W``) gets eager graph nodes even when the call sits under ``no_grad``. In PyTorch a
# transform's result does not depend on grad mode outside it, and the outer ``no_grad`` still
# holds for the outer autograd: ``with no_grad(): grad(f)(x)`` gives gradients without a graph to
# ``W``. So where the outer mode is off, the plain tensors a transform returns are detached (its
# tracers belong to enclosing transforms and are left alone).
def _detached_outside_grad(tree):
    """``tree`` with each plain Tensor that requires grad detached (NOTE [Transforms under no_grad])."""
    return tree_map(lambda x: x.detach() if isinstance(x, Tensor) and x._rg and not isinstance(x, _Tracer)
                    else x, tree)


# --------------------------------------------------------------------- vjp


def _vjp_impl(f, primals, has_aux, api):
    leaves, treedef = tree_flatten(primals)
    _check_differentiable(leaves, api)
    outer_grad = STATE.grad_enabled
    with GradTrace() as trace, enable_grad():
        tracers = [GradTracer(x, trace) for x in leaves]
        out = f(*tree_unflatten(tracers, treedef))
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError(f"{api}: has_aux=True requires f to return a tuple (output, aux)")
            out, aux = out
            aux = _unwrap(aux, trace)
    out_leaves, out_def = tree_flatten(out)
    _check_tensors(out_leaves, api, "output of f")
    primal_out = [o._primal if trace.owns(o) else o for o in out_leaves]

    def vjp_fn(*cotangents, _keep_none=False):
        cts = cotangents[0] if len(cotangents) == 1 and out_def.kind == "leaf" else cotangents
        if len(cotangents) == 1 and out_def.kind != "leaf":
            cts = cotangents[0]
        ct_leaves, ct_def = tree_flatten(cts)
        if len(ct_leaves) != len(out_leaves):
            raise RuntimeError(
                f"vjp_fn: expected {len(out_leaves)} cotangent(s) matching the outputs, got {len(ct_leaves)}"
            )
        roots, seeds = [], []
        _check_tensors(ct_leaves, "vjp_fn", "cotangent")
        for o, c in zip(out_leaves, ct_leaves):
            if tuple(c.shape) != tuple(o.shape):
                raise RuntimeError(
                    f"vjp_fn: cotangent of shape {tuple(c.shape)} does not match output shape {tuple(o.shape)}"
                )
            if c.dtype != o.dtype and o.dtype.kind in "fc":  # the engine takes the output's dtype
                if c.dtype.kind == "c" and o.dtype.kind != "c":
                    raise RuntimeError(f"vjp_fn: got a complex cotangent (dtype {c.dtype}) for a real output "
                                       f"(dtype {o.dtype})")
                c = c.to(o.dtype)
            if trace.owns(o) and o.grad_fn is not None or trace.owns(o):
                roots.append(o if o.grad_fn is None else (o.grad_fn, o._out_idx))
                seeds.append(c)
        with enable_grad():
            grads = run_backward(roots, seeds, retain_graph=True, tensor_mode=True, capture=tracers,
                                 prune=False) \
                if roots else [None] * len(tracers)
        if _keep_none:  # None marks an input no output depends on (strict mode of autograd.functional)
            return tuple(tree_unflatten(grads, treedef))
        grads = [TN.zeros_like(x) if g is None else g for g, x in zip(grads, leaves)]
        grads = [g if g.dtype == x.dtype else g.to(x.dtype) for g, x in zip(grads, leaves)]
        if not (outer_grad and STATE.grad_enabled):  # See NOTE [Transforms under no_grad]
            grads = _detached_outside_grad(grads)
        return tuple(tree_unflatten(grads, treedef))

    out_val = tree_unflatten(primal_out, out_def)
    if not outer_grad:  # See NOTE [Transforms under no_grad]
        out_val, aux = _detached_outside_grad(out_val), _detached_outside_grad(aux)
    return out_val, vjp_fn, aux


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)``; ``vjp_fn(cotangents)`` returns one cotangent per primal.

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> out, vjp_fn = F.vjp(lambda x: x.sin(), lucid.tensor([0.0]))
    >>> vjp_fn(lucid.ones(1))
    (tensor([1.]),)
    """
    out, fn, aux = _vjp_impl(func, primals, has_aux, "vjp(f, *primals)")
    return (out, fn, aux) if has_aux else (out, fn)


# -------------------------------------------------------------------- grad


def _grad_impl(func, args, kwargs, argnums, has_aux, api="grad(f)(*args)"):
    """``(gradient, value, aux)``: forward under a GradTrace, then one backward from a ones seed.

    The same steps as ``_vjp_impl`` + ``vjp_fn(ones)`` without building the closure (this is
    the path every ``vmap(grad(f))`` example takes); pytrees and errors are handled alike.
    """
    nargs = len(args)
    if argnums.__class__ is int and -nargs <= argnums < nargs:
        nums = (argnums % nargs,)
    else:
        nums = _argnums_tuple(argnums, nargs, api)
    diff = tuple(args[n] for n in nums)
    treedef = None
    for x in diff:
        if not isinstance(x, Tensor) or x.dtype.kind not in "fc":
            leaves, treedef = tree_flatten(diff)
            _check_differentiable(leaves, api)
            break
    else:
        leaves = diff
    trace = GradTrace()
    trace.__enter__()
    prev = STATE.grad_enabled
    STATE.grad_enabled = True
    try:
        level = trace.level
        tracers = []
        for x in leaves:  # GradTracer(x, trace) without the call chain
            t = object.__new__(GradTracer)
            t._trace, t._level, t._primal, t._rg, t._version = trace, level, x, True, [0]
            tracers.append(t)
        full = list(args)
        for n, v in zip(nums, tracers if treedef is None else tree_unflatten(tracers, treedef)):
            full[n] = v
        out = func(*full, **kwargs)
        aux = None
        if has_aux:
            if not (isinstance(out, tuple) and len(out) == 2):
                raise RuntimeError(f"{api}: has_aux=True requires f to return a tuple (output, aux)")
            out, aux = out
            aux = _unwrap(aux, trace)
    finally:
        STATE.grad_enabled = prev
        trace.__exit__(None, None, None)
    if not isinstance(out, Tensor):
        _check_tensors(tree_flatten(out)[0], api, "output of f")
        raise RuntimeError(f"{api}: expected f to return a Tensor, got {type(out).__name__}")
    owned = trace.owns(out)
    value = out._primal if owned else out
    if len(value.shape):  # a shape-(1,) loss too, as PyTorch and JAX refuse it
        raise RuntimeError(
            f"{api}: expected f to return a scalar (0-dim) Tensor, got shape {tuple(value.shape)}; "
            "use vjp or jacrev for other outputs (or .sum() / .squeeze() the loss)"
        )
    if value.dtype.kind == "c":
        raise RuntimeError(f"{api}: expected f to return a real-valued scalar Tensor, got dtype {value.dtype} "
                           "(a complex loss has no gradient; See NOTE [Complex gradients])")
    if owned:
        fn = out.grad_fn
        STATE.grad_enabled = True
        try:
            grads = run_backward([out if fn is None else (fn, out._out_idx)], [_seed_like(value)],
                                 retain_graph=True, tensor_mode=True, capture=tracers,
                                 prune=False)
        finally:
            STATE.grad_enabled = prev
    else:
        grads = [None] * len(tracers)
    res = []
    for g, x in zip(grads, leaves):
        if g is None:
            g = _zeros_for(x)
        elif g.dtype != x.dtype:
            g = g.to(x.dtype)
        res.append(g)
    res = tuple(res) if treedef is None else tuple(tree_unflatten(res, treedef))
    if not prev:  # See NOTE [Transforms under no_grad]
        res, value, aux = _detached_outside_grad(res), _detached_outside_grad(value), _detached_outside_grad(aux)
    return (res[0] if isinstance(argnums, int) else res), value, aux


def _seed_like(value):
    """The all-ones cotangent of ``grad``'s loss. A Tensor subclass with ``__torch_dispatch__``
    makes its own through ``ones_like`` (PyTorch seeds so too), so a TwoTensor loss gives
    TwoTensor gradients (NOTE [Subclass autograd] in lucid/utils/_python_dispatch.py)."""
    if SUBCLASS_DISPATCH[0] and value.__class__ is not Tensor:
        from ..utils import _python_dispatch as pd

        if pd.is_dispatch_subclass_instance(value):
            return pd._ones_like(value)
    return TN.ones_like(value)


def _zeros_for(x):
    """The gradient of an input the loss does not depend on: ``zeros_like(x)``, through a
    dispatch subclass's handler where ``x`` is one (as :func:`_seed_like`)."""
    if SUBCLASS_DISPATCH[0] and x.__class__ is not Tensor:
        from ..utils import _python_dispatch as pd

        if pd.is_dispatch_subclass_instance(x):
            return pd._zeros_like(x)
    return TN.zeros_like(x)


def grad_and_value(func, argnums=0, has_aux=False):
    """Like :func:`grad` but returns ``(gradient, value)`` (``(gradient, (value, aux))`` with aux)."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value, aux = _grad_impl(func, args, kwargs, argnums, has_aux)
        return (g, (value, aux)) if has_aux else (g, value)

    return wrapper


def grad(func, argnums=0, has_aux=False):
    """Gradient of a scalar function, composable with every other transform.

    ``func`` must return a 0-dim real Tensor (or ``(loss, aux)`` with ``has_aux``); ``argnums``
    is an int or a tuple of distinct ints (negative ones count from the end).

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> F.grad(lambda x: (x ** 3).sum())(lucid.tensor([1.0, 2.0]))
    tensor([ 3., 12.])
    """

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value, aux = _grad_impl(func, args, kwargs, argnums, has_aux)
        return (g, aux) if has_aux else g

    return wrapper


# --------------------------------------------------------------------- jvp


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J @ tangents)`` by true forward mode.

    ``strict=True`` raises if an output does not depend on the inputs (as
    ``autograd.functional.jvp(strict=True)`` does) instead of giving it a zero tangent.

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> F.jvp(lambda x: x * x, (lucid.tensor([3.0]),), (lucid.tensor([1.0]),))[1]
    tensor([6.])
    """
    return _jvp_impl(func, primals, tangents, has_aux, "jvp(f, primals, tangents)", strict=strict)


def _jvp_impl(func, primals, tangents, has_aux, api, keep_none=False, strict=False):
    if not isinstance(primals, (tuple, list)) or not isinstance(tangents, (tuple, list)):
        raise RuntimeError(f"{api}: expected primals and tangents to be tuples, got "
                           f"{type(primals).__name__} and {type(tangents).__name__}")
    p_leaves, p_def = tree_flatten(tuple(primals))
    t_leaves, t_def = tree_flatten(tuple(tangents))
    _check_differentiable(p_leaves, api)
    _check_tensors(t_leaves, api, "tangent")
    if p_def != t_def:
        raise RuntimeError(f"{api}: tangents must have the same structure as primals, got {t_def} and {p_def}")
    for p, t in zip(p_leaves, t_leaves):
        if tuple(p.shape) != tuple(t.shape):
            raise RuntimeError(f"{api}: tangent shape {tuple(t.shape)} does not match primal shape {tuple(p.shape)}")
    with JVPTrace() as trace:
        tracers = [JVPTracer(p, t if t.dtype == p.dtype else t.to(p.dtype), trace)
                   for p, t in zip(p_leaves, t_leaves)]
        out = func(*tree_unflatten(tracers, p_def))
    for p, tr in zip(p_leaves, tracers):
        if tr._primal is not p:  # rebound in place; See NOTE [Input mutations under vmap and jvp]
            p.copy_(tr._primal)
    aux = None
    if has_aux:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise RuntimeError(f"{api}: has_aux=True requires f to return a tuple (output, aux)")
        out, aux = out
        aux = tree_map(lambda x: x._primal if trace.owns(x) else x, aux)
    o_leaves, o_def = tree_flatten(out)
    _check_tensors(o_leaves, api, "output of f")
    prim_out, tan_out = [], []
    for o in o_leaves:
        if trace.owns(o):
            prim_out.append(o._primal)
            tan = o._tangent
        else:
            prim_out.append(o)
            tan = None
        if tan is None and strict:
            raise RuntimeError(f"{api}: strict=True but output {len(tan_out)} does not depend on the "
                               "inputs (its tangent is identically zero)")
        tan_out.append(tan if tan is not None or keep_none else TN.zeros_like(prim_out[-1]))
    res = (tree_unflatten(prim_out, o_def), tree_unflatten(tan_out, o_def))
    return res + (aux,) if has_aux else res


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)``: ``jvp_fn(*tangents)`` reuses the recorded graph.

    The forward is evaluated once; each ``jvp_fn`` call transposes the recorded vjp
    (the "vjp of a vjp" identity), so ``func`` is not run again. Primals, tangents and
    outputs may be pytrees; ``jvp_fn`` returns the tangent in the structure of the output.

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> out, jvp_fn = F.linearize(lambda x: (x * x, x.sum()), lucid.tensor([1.0, 2.0]))
    >>> jvp_fn(lucid.tensor([1.0, 0.0]))
    (tensor([2., 0.]), tensor(1.))
    """
    api = "linearize(f, *primals)"
    out, vjp_fn = vjp(func, *primals)
    zero_ct = tree_map(TN.zeros_like, out)
    _, vjp_of_vjp = vjp(lambda ct: vjp_fn(ct), zero_ct)
    p_leaves, p_def = tree_flatten(primals)

    def jvp_fn(*tangents):
        t_leaves, t_def = tree_flatten(tangents)
        if t_def != p_def:
            raise RuntimeError(f"{api} jvp_fn: expected tangents with the structure of the primals, "
                               f"{p_def}, got {t_def}")
        _check_tensors(t_leaves, api + " jvp_fn", "tangent")
        for p, t in zip(p_leaves, t_leaves):
            if tuple(t.shape) != tuple(p.shape):
                raise RuntimeError(f"{api} jvp_fn: tangent shape {tuple(t.shape)} does not match primal "
                                   f"shape {tuple(p.shape)}")
            if t.dtype != p.dtype:
                raise RuntimeError(f"{api} jvp_fn: tangent dtype {t.dtype} does not match primal dtype "
                                   f"{p.dtype}")
        return vjp_of_vjp(tuple(tangents))[0]

    return out, jvp_fn


# -------------------------------------------------------------------- vmap

# NOTE [Input mutations under vmap and jvp]
# Inside a transform an in-place op is functional: the tracer is rebound to the out-of-place
# result (NOTE [In-place semantics], case 3). PyTorch's vmap and jvp still change the tensors
# the caller passed in, so when the function returns, every input tracer that was rebound (an
# in-place op on it, or on a view of it, which rebinds its base) has its final value copied
# into the caller's tensor with ``copy_`` (batch dim moved back to its in_dim). The copy is an
# ordinary op, so an outer transform sees it as its own in-place change, and a view input
# writes through to its base. grad and vjp do not copy back: PyTorch refuses an in-place
# change of their inputs (Lucid computes it functionally).


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None, strategy="auto"):
    """Vectorise ``func`` over a batch dimension; inside, each call sees one example.

    ``strategy``: ``"auto"``/``"vectorized"`` (default) run ``func`` once on batched
    tracers (every primitive has a batching rule); ``"isolated"`` calls ``func`` once per
    example on plain slices and stacks the results, for functions with data-dependent
    Python control flow (``if x.sum() > 0``). With ``"isolated"`` random ops draw
    independently per example (``"same"`` replays the random state for each example;
    ``"error"`` is not enforced).

    ``in_dims`` / ``out_dims`` are an int, None, or a prefix of the inputs' / outputs' pytree
    (tuples; dicts for dict outputs); a None output needs ``out_dims=None``. An in-place change
    of a batched input inside ``func`` reaches the caller's tensor, as in PyTorch (NOTE [Input
    mutations under vmap and jvp]). With ``chunk_size`` and ``randomness="same"`` every chunk
    replays the same draws.

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> F.vmap(lambda r: (r * r).sum())(lucid.tensor([[1.0, 2.0], [3.0, 4.0]]))
    tensor([ 5., 25.])
    """
    if randomness not in ("error", "different", "same"):
        raise FuncArgError(f"vmap: randomness must be 'error', 'different' or 'same', got {randomness!r}")
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size must be a positive int or None, got {chunk_size!r}")
    if strategy not in ("auto", "vectorized", "isolated"):
        raise ValueError(f"vmap: strategy must be 'auto', 'vectorized' or 'isolated', got {strategy!r}")
    if strategy == "isolated":
        @functools.wraps(func)
        def isolated(*args, **kwargs):
            return _vmap_isolated(func, args, kwargs, in_dims, out_dims, randomness)

        return isolated

    simple = in_dims.__class__ is int and in_dims >= 0 and out_dims.__class__ is int and chunk_size is None

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        if simple and len(args) == 1 and not kwargs and args[0].__class__ is Tensor \
                and in_dims < len(args[0]._data.shape):  # fast path: one plain Tensor, int dims
            x = args[0]
            out = _vmap_one(func, x, in_dims, x._data.shape[in_dims], out_dims, randomness)
        else:
            out = _vmap_impl(func, args, kwargs, in_dims, out_dims, randomness, chunk_size)
        return out if STATE.grad_enabled else _detached_outside_grad(out)  # NOTE [Transforms under no_grad]

    return wrapper


def _vmap_one(func, x, d, size, out_dims, randomness):
    """``_vmap_impl`` for one plain Tensor batched at a valid dim ``d`` (the per-call fixed
    cost of vmap on a small function; the argument checks passed in ``wrapper``)."""
    trace = object.__new__(BatchTrace)  # BatchTrace(size, randomness).__enter__(), inlined
    trace.size, trace.randomness = size, randomness
    level = trace.level = push_trace(trace)
    trace.active = True
    try:
        t = object.__new__(BatchTracer)  # _new_batch_tracer, inlined
        t._trace, t._level, t._val, t._bdim, t._version = trace, level, x, d, [0]
        out = func(t)
    finally:
        pop_trace(trace)
        trace.active = False
    if t._val is not x:  # rebound by an in-place op; See NOTE [Input mutations under vmap and jvp]
        x.copy_(move_bdim(t._val, t._bdim, d))
    if out.__class__ is BatchTracer and out._trace is trace:
        v = out._val
        b = out._bdim
        if b == out_dims:
            return v
        nd = len(v.shape)
        if -nd <= out_dims < nd:
            return move_bdim(v, b, out_dims % nd)
    return _unbatch_outputs(out, trace, size, out_dims, _VMAP_API)


_VMAP_API = "vmap(f, in_dims, out_dims)(*args)"


def _vmap_in_dims(in_dims, args, api):
    """One in_dim (int or None) per leaf of ``args``; errors name the API."""
    if in_dims is None or isinstance(in_dims, int):
        return [in_dims] * len(tree_flatten(args)[0])
    if not isinstance(in_dims, (tuple, list)):
        raise ValueError(f"{api}: expected in_dims to be an int, None or a (nested) tuple matching the "
                         f"structure of the inputs, got {type(in_dims).__name__}")
    try:
        return broadcast_prefix(tuple(in_dims), args, "in_dims")
    except ValueError as e:
        raise ValueError(f"{api}: {e}") from None


def _vmap_impl(func, args, kwargs, in_dims, out_dims, randomness, chunk_size):
    api = _VMAP_API
    fast = in_dims.__class__ is int  # fast path: an int in_dims and plain Tensors (no pytree)
    if fast:
        for a in args:
            if a.__class__ is not Tensor:
                fast = False
                break
    if fast:
        leaves, treedef, dims = args, None, (in_dims,) * len(args)
    else:
        leaves, treedef = tree_flatten(args)
        dims = _vmap_in_dims(in_dims, args, api)
    size = None
    norm = []
    for x, d in zip(leaves, dims):
        if d is None:
            norm.append(None)
            continue
        if d.__class__ is not int:
            raise ValueError(f"{api}: in_dims entries must be int or None, got {d!r}")
        if not isinstance(x, Tensor):
            raise ValueError(f"{api}: got in_dim={d} for an input that is not a Tensor ({type(x).__name__})")
        shape = x.shape
        nd = len(shape)
        if not -nd <= d < nd:
            raise ValueError(f"{api}: in_dim={d} is out of range for an input of shape {tuple(x.shape)} "
                             f"(expected -{nd} <= in_dim < {nd})")
        d %= nd
        n = shape[d]
        if size is not None and n != size:
            raise ValueError(
                f"{api}: inconsistent batch sizes: expected all tensors to have the same size in "
                f"the mapped dimension, "
                f"got sizes {size} and {n} (input shapes and in_dims: "
                f"{[(tuple(a.shape), b) for a, b in zip(leaves, dims) if b is not None]})"
            )
        size = n
        norm.append(d)
    if size is None:
        raise ValueError(f"{api}: at least one input must be batched (in_dims all None)")
    if chunk_size is not None and chunk_size < size:
        return _vmap_chunked(func, leaves, treedef, norm, kwargs, out_dims, randomness, chunk_size, size)
    # BatchTrace(size, randomness).__enter__() / __exit__, inlined (the fixed cost of every call).
    trace = object.__new__(BatchTrace)
    trace.size, trace.randomness = size, randomness
    trace.level = push_trace(trace)
    trace.active = True
    try:
        if len(leaves) == 1 and treedef is None:
            tracers = (leaves[0] if norm[0] is None else _new_batch_tracer(leaves[0], norm[0], trace),)
        else:
            tracers = [x if d is None else _new_batch_tracer(x, d, trace) for x, d in zip(leaves, norm)]
        out = func(*(tracers if treedef is None else tree_unflatten(tracers, treedef)), **kwargs)
    finally:
        pop_trace(trace)
        trace.active = False
    for x, d, t in zip(leaves, norm, tracers):
        if d is not None and t._val is not x:  # See NOTE [Input mutations under vmap and jvp]
            x.copy_(move_bdim(t._val, t._bdim, d))
    if out.__class__ is BatchTracer and out._trace is trace and out_dims.__class__ is int:  # fast path
        v = out._val
        b = out._bdim
        if b == out_dims:
            return v
        if -v.ndim <= out_dims < v.ndim:  # the batch dim counts: per-example ndim + 1 positions
            return move_bdim(v, b, out_dims % v.ndim)
    return _unbatch_outputs(out, trace, size, out_dims, api)


def _vmap_isolated(func, args, kwargs, in_dims, out_dims, randomness):
    """``vmap(strategy="isolated")``: one plain call per example, outputs stacked."""
    from ..ops.random import all_rng_states, set_all_rng_states
    from ..ops.shape import stack

    api = _VMAP_API
    leaves, treedef = tree_flatten(args)
    dims = _vmap_in_dims(in_dims, args, api)
    size = None
    for x, d in zip(leaves, dims):
        if d is None:
            continue
        if not isinstance(x, Tensor) or d.__class__ is not int or not -x.ndim <= d < x.ndim:
            raise ValueError(f"{api}: bad in_dim {d!r} for an input of type {type(x).__name__}"
                             f"{' and shape ' + str(tuple(x.shape)) if isinstance(x, Tensor) else ''}")
        n = x.shape[d]
        if size is not None and n != size:
            raise ValueError(f"{api}: inconsistent batch sizes: got sizes {size} and {n} in the mapped dimensions")
        size = n
    if size is None:
        raise ValueError(f"{api}: at least one input must be batched (in_dims all None)")
    if size == 0:  # no example to call f on: the vectorized run gives the empty outputs' shapes
        return _vmap_impl(func, args, kwargs, in_dims, out_dims, randomness, None)
    state = all_rng_states() if randomness == "same" else None  # the devices' generators too
    results = []
    for i in range(size):
        if state is not None:
            set_all_rng_states(state)
        piece = [x if d is None else x[(slice(None),) * (d % x.ndim) + (i,)] for x, d in zip(leaves, dims)]
        results.append(_mark_none(func(*tree_unflatten(piece, treedef), **kwargs)))
    first, o_def = tree_flatten(results[0])
    odims = _out_dims_per_leaf(out_dims, results[0], len(first), api)
    flat = [tree_flatten(r)[0] for r in results]
    outs = []
    for k, (o, d) in enumerate(zip(first, odims)):
        if o is _NO_OUTPUT or not isinstance(o, Tensor):
            outs.append(_unbatch_one(o, d, None, size, api))  # None passes with out_dims=None; else raises
        else:
            outs.append(o if d is None else stack([f[k] for f in flat], dim=d))
    return tree_unflatten(outs, o_def)


def _unbatch_one(o, d, trace, size, api):
    if o is _NO_OUTPUT:
        if d is not None:
            raise ValueError(f"{api}: f must return Tensors (or pytrees of Tensors), got None; give it "
                             "out_dims=None to pass a None output through")
        return None
    if not isinstance(o, Tensor):
        if d is None:  # a Python value passes through with out_dims=None, as in PyTorch
            return o
        raise ValueError(f"{api}: f must return Tensors (or pytrees of Tensors), got {type(o).__name__}; "
                         "give it out_dims=None to pass it through")
    if d is None:
        if trace.owns(o):
            raise ValueError(f"{api}: out_dims=None but the output of shape {tuple(o.shape)} is batched")
        return o
    if d.__class__ is not int:
        raise ValueError(f"{api}: out_dims entries must be int or None, got {d!r}")
    if trace.owns(o):
        v = o._val
    else:
        shape = tuple(o.shape)
        v = TN.broadcast_to(TN.reshape(o, shape=(1,) + shape), shape=(size,) + shape)
        o_bdim = 0
    nd = v.ndim
    if not -nd <= d < nd:
        raise VmapDimError(f"{api}: out_dim={d} is out of range for an output of per-example shape "
                           f"{tuple(o.shape)} (expected -{nd} <= out_dim < {nd})")
    return move_bdim(v, o._bdim if trace.owns(o) else o_bdim, d % nd)


def _unbatch_outputs(out, trace, size, out_dims, api):
    if isinstance(out, Tensor) and (out_dims is None or out_dims.__class__ is int):  # fast path
        return _unbatch_one(out, out_dims, trace, size, api)
    out = _mark_none(out)
    o_leaves, o_def = tree_flatten(out)
    odims = _out_dims_per_leaf(out_dims, out, len(o_leaves), api)
    return tree_unflatten([_unbatch_one(o, d, trace, size, api) for o, d in zip(o_leaves, odims)], o_def)


_NO_OUTPUT = object()  # stands for a None output while the outputs are matched with out_dims


def _mark_none(tree):
    """``tree`` with each None replaced by ``_NO_OUTPUT``, so that it is a leaf with an out_dim."""
    if tree is None:
        return _NO_OUTPUT
    if isinstance(tree, tuple):
        kids = [_mark_none(c) for c in tree]
        return type(tree)(*kids) if hasattr(tree, "_fields") else tuple(kids)
    if isinstance(tree, list):
        return [_mark_none(c) for c in tree]
    if isinstance(tree, dict):
        return {k: _mark_none(v) for k, v in tree.items()}
    return tree


def _out_dims_per_leaf(out_dims, out, n_leaves, api):
    """One out_dim per leaf of ``out``: an int/None for all, or a prefix of the output structure
    (a tuple or list for a tuple/list/single output, a dict for a dict output)."""
    if out_dims is None or out_dims.__class__ is int:
        return [out_dims] * n_leaves
    if isinstance(out_dims, dict):
        tree = out
    elif isinstance(out_dims, (tuple, list)):
        out_dims = tuple(out_dims)
        tree = out if isinstance(out, (tuple, list)) else (out,)
    else:
        raise ValueError(f"{api}: expected out_dims to be an int, None or a tuple (or dict) matching the "
                         f"outputs, got {type(out_dims).__name__}")
    try:
        return broadcast_prefix(out_dims, tree, "out_dims")
    except ValueError as e:
        raise ValueError(f"{api}: {e}") from None


def _vmap_chunked(func, leaves, treedef, dims, kwargs, out_dims, randomness, chunk_size, size):
    """Run ``vmap`` on slices of ``chunk_size`` examples and concatenate (bounded memory)."""
    from ..ops.random import all_rng_states, set_all_rng_states
    from ..ops.shape import cat

    def rebuild(xs):
        return tuple(xs) if treedef is None else tuple(tree_unflatten(list(xs), treedef))

    # randomness="same": every chunk replays the same draws, so all examples share them (as in
    # PyTorch), not only those of one chunk.
    state = all_rng_states() if randomness == "same" else None
    pieces = []
    for start in range(0, size, chunk_size):
        if state is not None:
            set_all_rng_states(state)
        sl = slice(start, min(start + chunk_size, size))
        chunk = [x if d is None else x[(slice(None),) * d + (sl,)] for x, d in zip(leaves, dims)]
        pieces.append(_vmap_impl(func, rebuild(chunk), kwargs, rebuild(dims), out_dims, randomness, None))
    first, o_def = tree_flatten(pieces[0])
    odims = _out_dims_per_leaf(out_dims, pieces[0], len(first), _VMAP_API)
    flat = [tree_flatten(p)[0] for p in pieces]
    outs = [first[k] if odims[k] is None else cat([f[k] for f in flat], dim=odims[k])
            for k in range(len(first))]
    return tree_unflatten(outs, o_def)


# --------------------------------------------------------------- Jacobians


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):
    """Jacobian by reverse mode: ``vmap`` of the vjp over the output basis.

    Result shape: ``output.shape + input.shape`` (tuples for tuple ``argnums``).
    ``chunk_size`` bounds how many basis vectors are processed at once (less memory).
    Complex arguments or outputs raise a RuntimeError, as in PyTorch (``aux`` may be complex).

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> F.jacrev(lambda x: x ** 2)(lucid.tensor([1.0, 3.0]))
    tensor([[2., 0.],
            [0., 6.]])
    """
    return _jacrev(func, argnums, has_aux, chunk_size, real_only=True)


def _jacrev(func, argnums, has_aux, chunk_size, real_only):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        api = "jacrev(f)(*args)"
        if real_only:
            _error_if_complex("jacrev", args, is_input=True)
        nums = _argnums_tuple(argnums, len(args), api)

        def partial_f(*d):
            full = list(args)
            for n, v in zip(nums, d):
                full[n] = v
            return func(*full, **kwargs)

        diff = tuple(args[n] for n in nums)
        out, vjp_fn, aux = _vjp_impl(partial_f, diff, has_aux, api)
        o_leaves, o_def = tree_flatten(out)
        if real_only:
            _error_if_complex("jacrev", o_leaves, is_input=False)
        in_leaves, _ = tree_flatten(diff)
        per_out = []
        for k, o in enumerate(o_leaves):
            def one(ct, k=k):
                cts = [ct if j == k else TN.zeros_like(oo) for j, oo in enumerate(o_leaves)]
                return tree_flatten(vjp_fn(tree_unflatten(cts, o_def)))[0]

            if o.numel() == 1:  # a one-row basis: one vjp, no vmap level (and no batched backward)
                rows = one(TN.ones_like(o))
            else:
                rows = _vmap_over_basis(one, o.numel(), tuple(o.shape), o.dtype, chunk_size, like=o)
            per_out.append([_reshape_to(r, tuple(o.shape) + tuple(x.shape)) for r, x in zip(rows, in_leaves)])
        jac = _assemble(per_out, o_def, diff, argnums)
        if not STATE.grad_enabled:  # See NOTE [Transforms under no_grad]
            jac = _detached_outside_grad(jac)
        return (jac, aux) if has_aux else jac

    return wrapper


def _reshape_to(t, shape):
    return t if tuple(t.shape) == shape else TN.reshape(t, shape=shape)


def _vmap_over_basis(fn, n, shape, dtype, chunk_size, like=None):
    """``vmap(fn)`` over the rows of the identity (as ``(n, *shape)``), ``chunk_size`` rows at a
    time; only one chunk of the basis and of the intermediates exists at once."""
    from ..ops.shape import cat

    step = n if chunk_size is None or chunk_size >= n else chunk_size
    pieces = []
    for start in range(0, max(n, 1), step or 1):
        m = min(step, n - start)
        eye = np.zeros((m, n), dtype=dtype)
        eye[np.arange(m), np.arange(start, start + m)] = 1
        if like is not None:  # the basis lives on the output's device (one explicit copy)
            eye = to_device(eye, like.device)
        with on_device(eye):  # reshaped where it lives (CuPy computes on the current device)
            basis = _wrap(eye.reshape((m,) + shape))
        pieces.append(vmap(fn)(basis))
    if len(pieces) == 1:
        return pieces[0]
    return [cat([p[i] for p in pieces], dim=0) for i in range(len(pieces[0]))]


def _assemble(per_out, o_def, diff, argnums):
    """Nest Jacobian blocks as ``out structure -> in structure`` (torch.func layout)."""
    in_def = tree_flatten(diff)[1]
    blocks = []
    for rows in per_out:
        tree = tree_unflatten(rows, in_def)
        blocks.append(tree[0] if isinstance(argnums, int) else tree)
    return tree_unflatten(blocks, o_def)


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """Jacobian by forward mode: ``vmap`` of the jvp over the input basis.

    Result shape: ``output.shape + input.shape``. Complex arguments or outputs raise a
    RuntimeError, as in PyTorch (``aux`` may be complex).

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> F.jacfwd(lambda x: x.sum() * x)(lucid.tensor([1.0, 2.0]))
    tensor([[4., 1.],
            [2., 5.]])
    """
    return _jacfwd(func, argnums, has_aux, randomness, real_only=True)


def _jacfwd(func, argnums, has_aux, randomness, real_only):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        api = "jacfwd(f)(*args)"
        if real_only:
            _error_if_complex("jacfwd", args, is_input=True)
        nums = _argnums_tuple(argnums, len(args), api)
        diff = tuple(args[n] for n in nums)
        in_leaves, in_def = tree_flatten(diff)
        _check_differentiable(in_leaves, api)
        sizes = [x.numel() for x in in_leaves]
        total = sum(sizes)
        dt = in_leaves[0].dtype
        eye = namespace_of(in_leaves[0]).eye(total, dtype=dt)
        basis, start = [], 0
        for x, n in zip(in_leaves, sizes):
            with on_device(eye):
                basis.append(_wrap(eye[:, start:start + n].reshape((total,) + tuple(x.shape)).astype(x.dtype)))
            start += n

        def partial_f(*d):
            full = list(args)
            for n_, v in zip(nums, d):
                full[n_] = v
            return func(*full, **kwargs)

        def push(*tans):
            res = jvp(partial_f, diff, tuple(tree_unflatten(list(tans), in_def)), has_aux=has_aux)
            if real_only:
                _error_if_complex("jacfwd", res[0], is_input=False)
            if has_aux:  # the aux leaves leave through vmap, which takes only Tensors
                _check_tensors(tree_flatten(res[2])[0], api, "leaf of aux")
            return (res[1], res[2]) if has_aux else res[1]

        pushed = vmap(push, randomness=randomness)(*basis)
        if has_aux:
            pushed, aux = pushed
            aux = tree_map(lambda a: a[0] if isinstance(a, Tensor) and a.ndim else a, aux)
        o_leaves, o_def = tree_flatten(pushed)
        per_out = []
        for p in o_leaves:
            # p: (total, *out_shape) -> out_shape + (total,), then split per input
            moved = p if p.ndim == 1 else TN.transpose(p, axes=tuple(range(1, p.ndim)) + (0,))
            oshape = tuple(moved.shape[:-1])
            rows, start = [], 0
            for x, n in zip(in_leaves, sizes):
                piece = moved if n == total else moved[(Ellipsis, slice(start, start + n))]
                xs = tuple(x.shape)
                rows.append(piece if oshape + xs == tuple(piece.shape) else TN.reshape(piece, shape=oshape + xs))
                start += n
            per_out.append(rows)
        jac = _assemble(per_out, o_def, diff, argnums)
        return (jac, aux) if has_aux else jac

    return wrapper


def hessian(func, argnums=0):
    """Hessian as ``jacfwd(jacrev(func))`` (forward-over-reverse).

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> F.hessian(lambda x: (x ** 3).sum())(lucid.tensor([1.0, 2.0]))
    tensor([[ 6.,  0.],
            [ 0., 12.]])
    """
    return jacfwd(jacrev(func, argnums), argnums)
