"""Per-example calls under ``vmap`` for the functions that read their arguments' values
(NOTE [Per-example functions under vmap])."""
from __future__ import annotations

import warnings

from ...func._traces import BatchTracer, _new_batch_tracer

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
# Not covered: a transform inside the vmap whose tracers reach the function (``vmap(grad(f))``
# with f calling ctc_loss): the innermost trace is then not the vmap, the examples' slices are
# out of reach at that level, and the usual vmap error is raised. ``grad(vmap(f))`` and nested
# vmaps work (each level loops).
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
