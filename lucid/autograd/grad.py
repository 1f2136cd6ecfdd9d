"""``lucid.autograd.grad`` (seed 004): gradients returned, ``.grad`` left untouched; and
``lucid.autograd.backward``, PyTorch's functional form of ``Tensor.backward``."""
from __future__ import annotations

import functools
import warnings

import numpy as np

from .._core.backend import namespace_of, on_device

from .._core.grad_mode import SUBCLASS_DISPATCH, enable_grad, no_grad
from .._core.tensor import Tensor, _wrap
from . import engine
from .engine import FUNCTION_BACKWARDS, UnusedInputError, _check_seed_dtype, _edge_of, _seed, run_backward


# How many ``grad`` calls are running their backward: a reentrant checkpoint refuses to run
# inside one (its backward accumulates into every leaf's ``.grad``, which ``grad`` must not touch).
_GRAD_DEPTH = [0]


def _as_list(x, what):
    if isinstance(x, Tensor) or _is_edge(x):
        return [x], True
    try:
        return list(x), False
    except TypeError:
        raise TypeError(f"grad: {what} must be a Tensor or a sequence of Tensors, got {type(x).__name__}") from None


def _is_edge(x):
    """A ``graph.GradientEdge`` (a named tuple, so tested by class name: graph imports this module)."""
    return type(x).__name__ == "GradientEdge" and isinstance(x, tuple)


def _input_edge(i, t):
    """The engine edge of ``inputs[i]`` and the tensor whose dtype the gradient takes (None for
    a ``GradientEdge`` of a node: the gradient keeps the dtype it arrives in)."""
    if _is_edge(t):
        node, nr = t
        leaf = getattr(node, "variable", None)  # a leaf's AccumulateGrad
        return (leaf, leaf) if isinstance(leaf, Tensor) else ((node, nr), None)
    if not isinstance(t, Tensor) or not t._rg:
        raise RuntimeError(f"grad: inputs[{i}] does not require grad")
    return _edge_of(t), t


def _unused_error(i, t):
    if not isinstance(t, Tensor):
        return RuntimeError(f"grad: inputs[{i}] (a GradientEdge) is not reachable from the outputs. Set "
                            "allow_unused=True if this is the desired behavior.")
    return RuntimeError(
        f"grad: one of the differentiated Tensors (inputs[{i}], shape {tuple(t.shape)}) is not "
        "reachable from the outputs (it appears to not have been used in the graph). Set "
        "allow_unused=True if this is the desired behavior."
    )


def _seeds_in(grad_outputs, outs):
    if grad_outputs is None:
        seeds = [None] * len(outs)
    elif isinstance(grad_outputs, Tensor) or not hasattr(grad_outputs, "__len__") or len(outs) == 1 and not isinstance(grad_outputs, (list, tuple)):
        seeds = [grad_outputs]
    else:
        seeds = list(grad_outputs)
    if len(seeds) != len(outs):
        raise RuntimeError(f"grad: got {len(seeds)} grad_outputs for {len(outs)} outputs")
    return seeds


def _is_layout_output(o):
    return isinstance(o, Tensor) and getattr(o, "_grad_output", None) is not None


def _layout_outputs(outs, seeds, api, batched=False, dense=True):
    """A sparse output is differentiated through the dense tensor it was converted from (when
    ``dense`` and it has one) or its values. See NOTE [Sparse outputs] in lucid/sparse/_base.py."""
    pairs = []
    for i, (o, g) in enumerate(zip(outs, seeds)):
        if not _is_layout_output(o):
            pairs.append((o, g))
            continue
        if not o.requires_grad:
            what = "tensors" if api == "backward" else "outputs"
            raise RuntimeError(f"{api}: element {i} of {what} does not require grad and does not have a "
                               f"grad_fn (a sparse tensor of shape {tuple(o.shape)})")
        pairs.append(o._grad_output(g, api, batched and g is not None, dense))
    return [p[0] for p in pairs], [p[1] for p in pairs]


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs``, without touching ``.grad``.

    Parameters
    ----------
    outputs : Tensor or sequence of Tensor
        Dense or sparse (through the dense tensor it was converted from, or its stored
        entries: NOTE [Sparse outputs]).
    inputs : Tensor, sequence of Tensor or dict of str to Tensor
    grad_outputs : Tensor, scalars or sequence, optional
        Seed cotangents; ones when omitted (for any output shape, as seed 004 says). A sparse
        output's may be dense or sparse.
    retain_graph : bool, optional
        Keep the graph (defaults to ``create_graph``).
    create_graph : bool
        Make the result differentiable (higher-order derivatives).
    only_inputs : bool
        Deprecated and ignored, as in PyTorch (a FutureWarning when given).
    allow_unused : bool, optional
        Return None for inputs the outputs do not depend on (else raise). Defaults to
        ``materialize_grads``; False together with ``materialize_grads=True`` is an error.
    is_grads_batched : bool
        The first dimension of every ``grad_outputs`` tensor is a batch: one vector-Jacobian
        product per row, computed in one pass under ``lucid.func.vmap``.
    materialize_grads : bool
        Zeros instead of None for unused inputs.

    Returns
    -------
    Tensor, tuple of Tensor or dict
        One gradient for a single Tensor input; a tuple aligned with a sequence; a dict with
        the keys of a dict.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, -2.0, 3.0], requires_grad=True)
    >>> lucid.autograd.grad(lucid.sum(x * x), x)
    tensor([ 2., -4.,  6.])
    >>> lucid.autograd.grad(x * 2, [x], grad_outputs=lucid.eye(3), is_grads_batched=True)[0]
    tensor([[2., 0., 0.],
            [0., 2., 0.],
            [0., 0., 2.]])
    """
    if not only_inputs:
        warnings.warn("grad: only_inputs argument is deprecated and is ignored now (defaults to True). "
                      "To accumulate gradient for other parts of the graph, please use "
                      "lucid.autograd.backward.", FutureWarning, stacklevel=2)
    if materialize_grads and allow_unused is False:
        raise ValueError("grad: expected allow_unused to be True or not passed when materialize_grads=True, "
                         "but got: allow_unused=False.")
    allow_unused = bool(allow_unused) or materialize_grads
    keys = None
    if isinstance(inputs, dict):
        keys, inputs = list(inputs), list(inputs.values())
    outs, _ = _as_list(outputs, "outputs")
    ins, single = _as_list(inputs, "inputs")
    if not ins:
        raise RuntimeError("grad: `inputs` argument to `grad()` cannot be empty.")
    # A sparse or nested input's gradient is that of the dense tensor carrying its graph (its
    # values or buffer), handed back in the input's layout, as its ``.grad`` is
    layouts = [t if getattr(t, "_grad_carrier", None) is not None else None for t in ins]
    if any(w is not None for w in layouts):
        ins = [t if w is None else w._grad_carrier() for t, w in zip(ins, layouts)]
    seeds_in = _seeds_in(grad_outputs, outs)
    if any(_is_layout_output(o) for o in outs):
        # with a sparse input, through the values, which its gradient must reach
        outs, seeds_in = _layout_outputs(outs, seeds_in, "grad", is_grads_batched,
                                         dense=not any(w is not None for w in layouts))
    if retain_graph is None:
        retain_graph = create_graph
    custom_before = FUNCTION_BACKWARDS[0]
    if is_grads_batched:
        result = _batched(outs, ins, seeds_in, retain_graph, create_graph, allow_unused, materialize_grads)
    else:
        result = _grad_impl(outs, ins, seeds_in, retain_graph, create_graph, allow_unused, materialize_grads)
    if create_graph and FUNCTION_BACKWARDS[0] == custom_before:
        result = [_joined(g, t) for g, t in zip(result, ins)]
    if any(w is not None for w in layouts):
        result = [g if w is None or g is None else w._grad_wrap(g) for g, w in zip(result, layouts)]
    if keys is not None:
        return dict(zip(keys, result))
    return result[0] if single else tuple(result)


def _grad_impl(outs, ins, seeds_in, retain_graph, create_graph, allow_unused, materialize_grads):
    roots, seeds = [], []
    for i, (o, g) in enumerate(zip(outs, seeds_in)):
        if _is_edge(o):  # the gradient flowing into an edge: its seed must be given
            if not isinstance(g, Tensor):
                raise RuntimeError(f"grad: outputs[{i}] is a GradientEdge; pass its gradient in grad_outputs")
            leaf = getattr(o.node, "variable", None)
            roots.append(leaf if isinstance(leaf, Tensor) else (o.node, o.output_nr))
            seeds.append(g if create_graph else g._data)
            continue
        if not isinstance(o, Tensor):
            raise TypeError(f"grad: outputs[{i}] is a {type(o).__name__}, not a Tensor")
        if not o._rg:  # as PyTorch: allow_unused is about inputs, not outputs
            raise RuntimeError(
                f"grad: element {i} of outputs does not require grad and does not have a grad_fn "
                f"(shape {tuple(o.shape)})"
            )
        roots.append(_edge_of(o))
        if create_graph and isinstance(g, Tensor) and tuple(g.shape) == tuple(o.shape):
            if g.dtype != o.dtype:  # an integer seed would truncate every cotangent it meets
                _check_seed_dtype(o, g.dtype, "grad")
                g = g.to(o.dtype)
            seeds.append(g)  # keep the seed's own graph: the result is differentiable in it
            continue
        if g is None and o.dtype.kind == "c":
            _seed(o, None, "grad")  # raises: a complex output needs a gradient. See NOTE [Complex gradients]
        with on_device(o):
            seed = namespace_of(o).ones(o.shape, o.dtype) if g is None else _seed(o, g, "grad")
        seeds.append(_wrap(seed) if create_graph else seed)
    edges, refs = zip(*[_input_edge(i, t) for i, t in enumerate(ins)])
    _GRAD_DEPTH[0] += 1
    try:  # unused inputs are found before anything runs, so a failed call frees nothing
        with (enable_grad() if create_graph else no_grad()):
            got = run_backward(roots, seeds, retain_graph=retain_graph, tensor_mode=create_graph,
                               capture=edges, require_all=not allow_unused)
            got = [_leaf_hooks(t, g, create_graph) for t, g in zip(ins, got)]
    except UnusedInputError as e:
        raise _unused_error(e.index, ins[e.index]) from None
    finally:
        _GRAD_DEPTH[0] -= 1
    return [_finish(i, t, g, ins, allow_unused, materialize_grads) for i, (t, g) in enumerate(zip(refs, got))]


def _joined(g, t):
    """NOTE [Constant gradients under create_graph]
    A gradient that does not depend on anything requiring grad (relu, hardtanh, padding,
    nll_loss ... of the input alone: their derivative masks are constants) comes out of the
    engine without a graph. PyTorch's comes out requiring grad (its backward ops take the input
    and have zero derivatives), so ``grad(grad(relu(x).sum(), x, create_graph=True).sum(), x)``
    is zeros there (a Hessian of a ReLU net with frozen weights, w.r.t. its input); here it
    would raise "does not require grad". Such a gradient is joined to its input's graph by a
    node whose derivative is zero: the same values, and PyTorch's second derivatives.
    Only where every backward that ran was a primitive's rule: those are written in Lucid ops,
    so a result without a graph has a truly zero derivative. A custom Function's backward (or
    reentrant checkpoint's) may compute a constant that is not (NumPy inside, a detached
    recomputation): if one ran, a constant gradient stays a constant, and differentiating it
    again raises as in PyTorch (engine.FUNCTION_BACKWARDS counts them).
    A gradient that requires grad through other tensors only (``relu(x) @ w`` with ``w``
    trainable: ``w`` times the mask) is joined too when its graph does not reach the input:
    PyTorch's Hessian of a ReLU net w.r.t. its input is zeros, not an error."""
    if g is None or not isinstance(t, Tensor) or not t._rg or (g._rg and _reaches(g, t)):
        return g
    return _zero_derivative_class().apply(g, t)


def _reaches(g, t):
    """Whether ``t`` (a leaf, or a node's output) is in the graph behind ``g`` (a walk that
    stops at the first sight of it)."""
    target = t if t.grad_fn is None else t.grad_fn
    if g.grad_fn is None:
        return g is t
    seen, stack = set(), [g.grad_fn]
    while stack:
        node = stack.pop()
        if node is target:
            return True
        if id(node) in seen:
            continue
        seen.add(id(node))
        for p in node.parents:
            if p is target:
                return True
            if isinstance(p, tuple) and id(p[0]) not in seen:
                stack.append(p[0])
    return False


@functools.lru_cache(maxsize=None)
def _zero_derivative_class():
    from .function import Function  # function.py imports the engine: made on first use

    class ZeroDerivative(Function):
        zero_derivative = True  # its backward's zeros are exact: later joins stay on
        @staticmethod
        def forward(ctx, g, t):
            ctx.like = (tuple(t.shape), t.dtype, t.device)
            return g.clone()

        @staticmethod
        def backward(ctx, dg):
            from .. import zeros

            shape, dtype, device = ctx.like
            return dg, zeros(shape, dtype=dtype, device=device)  # g may have a graph of its own

    return ZeroDerivative


def _leaf_hooks(t, g, tensor_mode):
    """The tensor hooks of a leaf input, which the engine's capture does not run (PyTorch runs a
    tensor's hooks before ``grad`` takes its gradient; its AccumulateGrad node's hooks it does not)."""
    hooks = getattr(t, "_hooks", None) if isinstance(t, Tensor) and t.grad_fn is None else None
    if g is None or not hooks:
        return g
    for h in list(hooks):
        if getattr(h, "_node_prehook", False):
            continue
        r = h(g if isinstance(g, Tensor) else _wrap(g))
        if r is not None:
            g = r if tensor_mode else r._data
    return g


def _finish(i, t, g, ins, allow_unused, materialize_grads):
    """One captured gradient: checked, materialised, in the input's dtype, as a Tensor."""
    if g is None:
        if not allow_unused:
            raise _unused_error(i, ins[i] if t is None else t)
        if materialize_grads:
            if t is None:
                raise RuntimeError(f"grad: materialize_grads can't make zeros for inputs[{i}], a "
                                   "GradientEdge whose node does not record its output's shape")
            g = namespace_of(t).zeros(t.shape, t.dtype)
    if t is None:  # a GradientEdge of a node: the gradient as it arrived
        return g if g is None or isinstance(g, Tensor) else _wrap(g)
    if g is not None and not isinstance(g, Tensor):
        with on_device(g):
            g = _wrap(g.astype(t.dtype, copy=True) if hasattr(g, "astype") else np.array(g, dtype=t.dtype))
    elif g is not None and g.dtype != t.dtype:
        g = g.to(t.dtype)
    return g


def _batched(outs, ins, seeds_in, retain_graph, create_graph, allow_unused, materialize_grads):
    """``is_grads_batched=True``: the backward of one row of the seeds, vmapped over the rows."""
    from ..func import vmap

    batched = [i for i, g in enumerate(seeds_in) if g is not None]
    for i in batched:
        g, o = seeds_in[i], outs[i]
        if not isinstance(g, Tensor) or g.ndim == 0 or tuple(g.shape[1:]) != tuple(o.shape):
            shape = tuple(g.shape) if isinstance(g, Tensor) else type(g).__name__
            raise RuntimeError(
                "grad: if `is_grads_batched=True`, we interpret the first dimension of each grad_output "
                "as the batch dimension. The sizes of the remaining dimensions are expected to match the "
                f"shape of corresponding output, but a mismatch was detected: grad_output[{i}] has a shape "
                f"of {shape} and output[{i}] has a shape of {tuple(o.shape)}. If you only want some "
                "tensors in `grad_output` to be considered batched, consider using vmap."
            )

    unused = []  # vmap returns Tensors only: the unused inputs' None are put back after it

    def one(*rows):
        seeds = list(seeds_in)
        for i, r in zip(batched, rows):
            seeds[i] = r
        # Tensor mode: the rows are vmap's tracers, which only a differentiable backward carries.
        got = _grad_impl(outs, ins, seeds, retain_graph, True, allow_unused, materialize_grads)
        unused[:] = [g is None for g in got]
        return tuple(g for g in got if g is not None)

    res = iter(vmap(one)(*[seeds_in[i] for i in batched]))
    return [None if u else next(res) if create_graph else next(res).detach() for u in unused]


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, grad_variables=None,
             inputs=None):
    """Accumulate the gradients of ``tensors`` into the ``.grad`` of graph leaves (PyTorch's
    ``torch.autograd.backward``; ``Tensor.backward`` for one tensor).

    Parameters
    ----------
    tensors : Tensor or sequence of Tensor
    grad_tensors : Tensor or sequence of (Tensor or None), optional
        The seeds; None for a one-element tensor.
    retain_graph : bool, optional
        Keep the graph (defaults to ``create_graph``).
    create_graph : bool
        Record the backward, for higher-order derivatives.
    grad_variables : optional
        Deprecated spelling of ``grad_tensors`` (a FutureWarning).
    inputs : Tensor or sequence of Tensor, optional
        Accumulate only into these (must not be empty).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> lucid.autograd.backward([x * x], grad_tensors=[lucid.tensor([1.0, 3.0])])
    >>> x.grad
    tensor([ 2., 12.])
    """
    if grad_variables is not None:
        warnings.warn("backward: `grad_variables` is deprecated. Use `grad_tensors` instead.",
                      FutureWarning, stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError("backward: `grad_tensors` and `grad_variables` (deprecated) arguments both "
                               "passed to `backward()`. Please only use `grad_tensors`.")
        grad_tensors = grad_variables
    if inputs is not None and not isinstance(inputs, Tensor):
        inputs = list(inputs)
        if not inputs:
            raise RuntimeError("backward: `inputs` argument to `backward()` cannot be empty.")
    if isinstance(tensors, Tensor):
        if isinstance(grad_tensors, (list, tuple)):
            if len(grad_tensors) != 1:
                raise RuntimeError(f"backward: got {len(grad_tensors)} grad_tensors for 1 tensor")
            grad_tensors = grad_tensors[0]
    else:
        tensors = list(tensors)
        if grad_tensors is None:
            grad_tensors = [None] * len(tensors)
        elif isinstance(grad_tensors, Tensor):
            grad_tensors = [grad_tensors]
        grad_tensors = list(grad_tensors)
        if len(grad_tensors) != len(tensors):
            raise RuntimeError(f"backward: got {len(grad_tensors)} grad_tensors for {len(tensors)} tensors")
    # sparse tensors: through their dense sources or values; sparse inputs: through their
    # values. See NOTE [Sparse outputs]
    if isinstance(tensors, Tensor) and _is_layout_output(tensors):
        tensors, grad_tensors = [tensors], [grad_tensors]
    some = [inputs] if isinstance(inputs, Tensor) else inputs or []
    if not isinstance(tensors, Tensor) and any(_is_layout_output(t) for t in tensors):
        tensors, grad_tensors = _layout_outputs(tensors, grad_tensors, "backward",
                                                dense=not any(_is_layout_output(t) for t in some))
    if any(_is_layout_output(t) for t in some):
        inputs = [t._grad_carrier() if _is_layout_output(t) else t for t in some]
    if SUBCLASS_DISPATCH[0]:  # a wrapper subclass's graph runs on Tensors, as Tensor.backward routes it
        from ..utils._python_dispatch import _subclass_backward  # NOTE [Subclass autograd]

        one, seed = (tensors, grad_tensors) if isinstance(tensors, Tensor) else (
            (tensors[0], grad_tensors[0]) if len(tensors) == 1 else (None, None))
        if one is not None and _subclass_backward(one, seed, retain_graph, create_graph, inputs):
            return
    engine.backward(tensors, grad_tensors, retain_graph, create_graph, inputs)
