"""``lucid.autograd.grad`` (seed 004): gradients returned, ``.grad`` left untouched."""
from __future__ import annotations

import numpy as np

from .._core.backend import namespace_of, on_device

from .._core.grad_mode import enable_grad, no_grad
from .._core.tensor import Tensor, _wrap
from .engine import UnusedInputError, _edge_of, _seed, run_backward


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


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         allow_unused=False, materialize_grads=False):
    """Gradients of ``outputs`` with respect to ``inputs``, without touching ``.grad``.

    Parameters
    ----------
    outputs : Tensor or sequence of Tensor
    inputs : Tensor or sequence of Tensor
    grad_outputs : Tensor, scalars or sequence, optional
        Seed cotangents; ones when omitted (for any output shape, as seed 004 says).
    retain_graph : bool, optional
        Keep the graph (defaults to ``create_graph``).
    create_graph : bool
        Make the result differentiable (higher-order derivatives).
    allow_unused : bool
        Return None for inputs the outputs do not depend on (else raise).

    Returns
    -------
    Tensor or tuple of Tensor
        One gradient for a single Tensor input; a tuple aligned with a sequence.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, -2.0, 3.0], requires_grad=True)
    >>> lucid.autograd.grad(lucid.sum(x * x), x)
    tensor([ 2., -4.,  6.])
    """
    outs, _ = _as_list(outputs, "outputs")
    ins, single = _as_list(inputs, "inputs")
    if grad_outputs is None:
        seeds_in = [None] * len(outs)
    elif isinstance(grad_outputs, Tensor) or not hasattr(grad_outputs, "__len__") or len(outs) == 1 and not isinstance(grad_outputs, (list, tuple)):
        seeds_in = [grad_outputs]
    else:
        seeds_in = list(grad_outputs)
    if len(seeds_in) != len(outs):
        raise RuntimeError(f"grad: got {len(seeds_in)} grad_outputs for {len(outs)} outputs")
    if retain_graph is None:
        retain_graph = create_graph
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
        if not o._rg:
            if allow_unused:
                continue
            raise RuntimeError(
                f"grad: element {i} of outputs does not require grad and does not have a grad_fn "
                f"(shape {tuple(o.shape)})"
            )
        roots.append(_edge_of(o))
        if create_graph and isinstance(g, Tensor) and tuple(g.shape) == tuple(o.shape):
            seeds.append(g)  # keep the seed's own graph: the result is differentiable in it
            continue
        if g is None and o.dtype.kind == "c":
            _seed(o, None, "grad")  # raises: a complex output needs a gradient. See NOTE [Complex gradients]
        with on_device(o):
            seed = namespace_of(o).ones(o.shape, o.dtype) if g is None else _seed(o, g, "grad")
        seeds.append(_wrap(seed) if create_graph else seed)
    edges, refs = zip(*[_input_edge(i, t) for i, t in enumerate(ins)]) if ins else ((), ())
    try:  # unused inputs are found before anything runs, so a failed call frees nothing
        with (enable_grad() if create_graph else no_grad()):
            got = run_backward(roots, seeds, retain_graph=retain_graph, tensor_mode=create_graph,
                               capture=edges, require_all=not (allow_unused or materialize_grads)) \
                if roots else [None] * len(ins)
    except UnusedInputError as e:
        raise _unused_error(e.index, ins[e.index]) from None
    result = []
    for i, (t, g) in enumerate(zip(refs, got)):
        if g is None:
            if not allow_unused and not materialize_grads:
                raise _unused_error(i, ins[i] if t is None else t)
            if materialize_grads:
                if t is None:
                    raise RuntimeError(f"grad: materialize_grads can't make zeros for inputs[{i}], a "
                                       "GradientEdge whose node does not record its output's shape")
                g = namespace_of(t).zeros(t.shape, t.dtype)
        if t is None:  # a GradientEdge of a node: the gradient as it arrived
            result.append(g if g is None or isinstance(g, Tensor) else _wrap(g))
            continue
        if g is not None and not isinstance(g, Tensor):
            with on_device(g):
                g = _wrap(g.astype(t.dtype, copy=True) if hasattr(g, "astype") else np.array(g, dtype=t.dtype))
        elif g is not None and g.dtype != t.dtype:
            g = g.to(t.dtype)
        result.append(g)
    return result[0] if single else tuple(result)
