"""Per-example calls under ``vmap`` for the functions that read their arguments' values
(NOTE [Per-example functions under vmap])."""
from __future__ import annotations

import warnings

from ..._core.tensor import Tensor
from ...func._traces import BatchTracer, _new_batch_tracer, _Tracer

# NOTE [Per-example functions under vmap]
# A few functions build index tables on the host from the *values* of some arguments:
# embedding_bag's bags (its indices and offsets), ctc_loss's alignment tables (its targets and
# lengths), embedding's ``max_norm`` renormalisation (which rows were looked up). Under
# ``vmap`` such an argument is a BatchTracer, which has no single value. When the innermost
# trace among all the arguments is a vmap that batches one of those value arguments, the
# function runs once per example on the level below (each batched argument's slice for that
# example, the others as they are) and the results are stacked along a new batch dim 0, as
# PyTorch's batched fallback does; gradients flow through the select and the stack, and an
# in-place change of an example's slice (embedding's renormalisation) lands in the batched
# tensor, whose slices are views. A RuntimeWarning says so once per function, as the
# primitives' per-example fallback (``ops/indexing.py: _loop_batch``) does. Arguments whose
# values are not read may be batched without this: the vectorised path runs.
# ``grad(vmap(f))`` and nested vmaps work (each level loops). A transform inside the vmap whose
# tracers reach the function (``vmap(grad(f))``, per-example gradients) can't loop: the innermost
# trace is then not the vmap and the examples' slices are out of reach at its level. There the
# functions take a path that reads no value (``is_tracer`` says when): embedding_bag's bags and
# ctc_loss's tables are built with Lucid ops from the index tensors, which every transform
# batches; ``scale_grad_by_freq`` counts with a scatter-add. Embedding's ``max_norm`` is a side
# effect (an in-place renormalisation under no_grad, no gradient of its own), done on the
# arrays under the tracers (``values_under_tracers``): each example's looked-up rows of its
# weight slice, as the loop would; the lookup itself is then an ordinary batched gather.
_WARNED = set()


def looping_trace(values, others):
    """The vmap trace to loop over, or None: the innermost trace among ``values`` and
    ``others`` (all the tensor arguments) when it is a vmap batching one of ``values``.

    One attribute test per argument: nothing on the eager path."""
    level, trace = 0, None
    for v in (*values, *others):
        lv = getattr(v, "_level", 0)
        if lv > level:
            level, trace = lv, v._trace
    if trace is None or not any(v.__class__ is BatchTracer and v._trace is trace for v in values):
        return None
    return trace


def is_tracer(*values):
    """True when one of ``values`` is a transform's tracer, whose values can't be read as data."""
    return any(isinstance(v, _Tracer) for v in values)


def values_under_tracers(t):
    """``(array, dims, batch)``: the array holding ``t``'s values under all its transforms' tracers,
    the axes of that array that are ``t``'s own dims (in order), and ``{vmap level: axis}`` for the
    vmaps batching it. Only for a side effect on those values (see NOTE [Per-example functions
    under vmap]), never to compute a result.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.functional._per_example import values_under_tracers
    >>> seen = []
    >>> _ = lucid.func.vmap(lambda x: seen.append(values_under_tracers(x)) or x, in_dims=1)(lucid.zeros(2, 3))
    >>> arr, dims, batch = seen[0]
    >>> arr.shape, dims, list(batch.values())
    ((2, 3), [0], [1])
    """
    dims, batch = list(range(t.ndim)), {}
    while isinstance(t, _Tracer):
        if t.__class__ is BatchTracer:
            b = t._bdim
            dims = [d + (d >= b) for d in dims]
            batch = {lv: a + (a >= b) for lv, a in batch.items()}
            batch[t._level] = b
        t = t._inner_value()
    if not isinstance(t, Tensor):
        raise TypeError(f"values_under_tracers: expected a Tensor, got {type(t).__name__}")
    return t._data, dims, batch


def _example(value, trace, i):
    if getattr(value, "_trace", None) is trace and value.__class__ is BatchTracer:
        return value._val.select(value._bdim, i)
    if isinstance(value, (list, tuple)):
        return type(value)(_example(v, trace, i) for v in value)
    return value


def call_per_example(trace, fn, name, args, kwargs):
    """``fn(*args, **kwargs)`` once per example of ``trace``'s batch, results stacked at dim 0.

    Parameters
    ----------
    trace : BatchTrace
        The vmap level to loop over (:func:`looping_trace`).
    fn : callable
        The public function (called again on each example: a nested vmap loops again).
    name : str
        For the warning and the errors.
    args, kwargs : tuple, dict
        ``fn``'s arguments, BatchTracers of ``trace`` among them (also inside lists).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> w = lucid.arange(6.0).reshape(3, 2)
    >>> idx = lucid.tensor([[0, 2], [1, 1]])  # two examples of a bag of two indices
    >>> lucid.func.vmap(lambda i: F.embedding_bag(i, w, lucid.tensor([0]), mode="sum"))(idx).tolist()
    [[[4.0, 6.0]], [[4.0, 6.0]]]
    """
    from ...ops.shape import stack

    if name not in _WARNED:
        _WARNED.add(name)
        warnings.warn(f"vmap: {name} reads the values of batched arguments; it runs once per example "
                      "(a Python loop, slow)", RuntimeWarning, stacklevel=3)
    if trace.size == 0:
        raise RuntimeError(f"{name}: vmap over a batch of size 0 has no example to read values from")
    results = []
    for i in range(trace.size):
        piece_args = tuple(_example(a, trace, i) for a in args)
        piece_kwargs = {k: _example(v, trace, i) for k, v in kwargs.items()}
        results.append(fn(*piece_args, **piece_kwargs))
    if isinstance(results[0], tuple):
        return tuple(_new_batch_tracer(stack(list(r), 0), 0, trace) for r in zip(*results))
    return _new_batch_tracer(stack(results, 0), 0, trace)
