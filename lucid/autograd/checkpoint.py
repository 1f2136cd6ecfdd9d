"""Activation checkpointing: trade compute for memory (``torch.utils.checkpoint``).

Two modes, as in PyTorch 2.x:

* **non-reentrant** (the default): the segment runs *with* recording, so its graph
  reaches every tensor it reads (arguments, closure variables, module parameters);
  then the values its nodes saved are dropped, and the first node of the segment the
  backward reaches runs the segment again and hands the recomputed values back to the
  original nodes. See NOTE [Checkpoint by recomputed saved values].
* **reentrant** (``use_reentrant=True``): the segment runs without recording; its
  backward reruns it and calls ``backward`` on the recomputed graph (PyTorch's
  documented behaviour: gradients only when a tensor argument requires grad).
"""
from __future__ import annotations

import warnings
import weakref

from .._core.grad_mode import STATE, enable_grad
from .._core.tensor import Tensor
from .engine import _SEQ
from .function import Function, FunctionNode

__all__ = ["checkpoint", "CheckpointError", "noop_context_fn"]


class CheckpointError(RuntimeError):
    """The recomputation of a checkpointed segment did not record what its forward recorded
    (``torch.utils.checkpoint.CheckpointError``)."""


def noop_context_fn():
    """``checkpoint``'s default ``context_fn``: two contexts that do nothing."""
    import contextlib

    return contextlib.nullcontext(), contextlib.nullcontext()


def _rng_state():
    from ..ops.random import all_rng_states

    return all_rng_states()


def _set_rng_state(state):
    from ..ops.random import set_all_rng_states

    set_all_rng_states(state)


# NOTE [Checkpoint by recomputed saved values]
# This is PyTorch's saved-tensor-hook design without hooking every save: after the
# segment ran, the nodes it recorded (reachable from its outputs, created after it
# started: ``Node.seq >= start``) lose their saved values and change class to a
# subclass whose ``apply`` first asks the segment's ``_Recompute`` to refill them. The
# recomputation runs the segment again under ``enable_grad`` on the very same inputs,
# collects its nodes the same way, and matches them one to one in creation order
# (the segment must record the same ops both times: it is deterministic apart from
# random ops, whose state is replayed). Only values move: the original nodes keep
# their parents (so every tensor the segment read gets its gradient, exactly as
# without checkpointing) and their version records (so an input changed in place
# between forward and backward is still reported). Under ``create_graph=True`` the
# recomputed values are Tensors connected to the same leaves, so higher orders work.
# A nested checkpoint's nodes stay stripped after the outer recomputation: its fresh
# ``_Recompute`` is retargeted at the original nodes.

_PENDING = weakref.WeakKeyDictionary()  # stripped node -> the _Recompute that refills it


class _Refill:
    """Mixin of checkpointed nodes: refill the saved values before running backward."""

    __slots__ = ()
    recomputes_saved = True  # every input's version counts: NOTE [Version checks of unread inputs]

    def apply(self, grads, tensor_mode):
        rec = _PENDING.get(self)
        while rec is not None:  # a nested segment may hand the node to its own recompute
            rec.run()
            rec = _PENDING.get(self)
        return super().apply(grads, tensor_mode)


def _segment_nodes(out, start):
    """Nodes recorded since ``start`` that the outputs ``out`` reach, in creation order."""
    from ..func.pytree import tree_flatten

    stack = [o.grad_fn for o in tree_flatten(out)[0]
             if isinstance(o, Tensor) and o.grad_fn is not None and o.grad_fn.seq >= start]
    seen, nodes = set(), []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        nodes.append(node)
        for p in node.parents:
            if p.__class__ is tuple and p[0].seq >= start and id(p[0]) not in seen:
                stack.append(p[0])
    nodes.sort(key=lambda n: n.seq)
    return nodes


def _value_meta(v):
    """(shape, dtype) of a saved value (a Tensor, an array or a shape-only Meta), else None."""
    shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
    return None if shape is None or dtype is None else (tuple(shape), str(dtype))


def _saved_meta(node):
    """What ``node`` saved, as metadata: compared with the recomputation's (determinism_check)."""
    if isinstance(node, FunctionNode):
        vals = tuple(node.ctx._saved)
    else:
        out = node.out
        vals = tuple(node.saved or ()) + (out if out.__class__ is tuple else (out,))
    return tuple(_value_meta(v) for v in vals)


def _strip(node, rec):
    from .graph import _mix

    if isinstance(node, FunctionNode):
        node.ctx._saved, node.ctx._packed = (), None
    else:
        node.saved = node.out = None
    _mix(node, _Refill)  # See NOTE [Node mixins] in autograd/graph.py
    _PENDING[node] = rec


class _Recompute:
    """Reruns one segment and moves the recomputed saved values into its original nodes."""

    def __init__(self, run, args, kwargs, rng, context=None, check=True):
        self.run_fn, self.args, self.kwargs, self.rng = run, args, kwargs, rng
        self.context = context  # the recomputation's context manager (checkpoint's context_fn)
        self.targets = []
        self.check = check  # determinism_check="default": compare the saved values' metadata
        self.meta = None

    def run(self):
        start = next(_SEQ)
        saved_rng = None
        if self.rng is not None:
            saved_rng = _rng_state()
            _set_rng_state(self.rng)
        # The recomputed values go straight into the original nodes: no saved-tensor hooks.
        hooks, STATE.saved_hooks = STATE.saved_hooks, []
        try:
            with enable_grad(), (self.context if self.context is not None else _NULL):
                out = self.run_fn(*self.args, **self.kwargs)
        finally:
            STATE.saved_hooks = hooks
            if saved_rng is not None:
                _set_rng_state(saved_rng)
        fresh = _segment_nodes(out, start)
        if len(fresh) != len(self.targets) or any(
                type(a.prim) is not type(b.prim) or a.op_name != b.op_name for a, b in zip(self.targets, fresh)):
            raise CheckpointError(
                "checkpoint: the recomputation recorded different operations than the forward "
                f"({len(fresh)} ops instead of {len(self.targets)}); the checkpointed function must "
                "run the same operations each time (random ops are replayed with "
                "preserve_rng_state=True)"
            )
        if self.check and self.meta is not None:
            self._check_meta(fresh)
        for old, new in zip(self.targets, fresh):
            inner = _PENDING.get(new)
            if inner is not None:  # a nested checkpoint: let its recompute fill the original
                inner.targets[inner.targets.index(new)] = old
                _PENDING[old] = inner
            elif isinstance(old, FunctionNode):
                old.ctx = new.ctx
                _PENDING.pop(old, None)
            else:
                old.saved, old.out = new.saved, new.out
                _PENDING.pop(old, None)
        self.targets = []
        self.args = self.kwargs = None

    def _check_meta(self, fresh):
        bad = []
        for k, (was, node) in enumerate(zip(self.meta, fresh)):
            now = _saved_meta(node) if _PENDING.get(node) is None else was  # nested: checked by its own
            # A value packed by saved-tensor hooks shows no metadata (None): nothing to compare.
            if len(now) != len(was) or any(a is not None and b is not None and a != b for a, b in zip(was, now)):
                bad.append(f"tensors saved by op {k} ({node.name()}):\nsaved metadata: {was}\n"
                           f"recomputed metadata: {now}")
        if bad:
            raise CheckpointError(
                "checkpoint: Recomputed values for the following tensors have different metadata than "
                "during the forward pass.\n" + "\n".join(bad) + "\n(pass determinism_check='none' to skip "
                "this check)"
            )


def _non_reentrant(function, args, kwargs, preserve, context_fn=None, check=True):
    rng = _rng_state() if preserve else None
    forward_ctx, recompute_ctx = context_fn() if context_fn is not None else (_NULL, None)
    start = next(_SEQ)
    with forward_ctx:
        out = function(*args, **kwargs)
    nodes = _segment_nodes(out, start)
    if nodes:
        rec = _Recompute(function, args, kwargs, rng, recompute_ctx, check)
        rec.targets = nodes
        if check:
            rec.meta = [_saved_meta(n) for n in nodes]
        for node in nodes:
            _strip(node, rec)
    return out


class _Reentrant(Function):
    """Separate-style Function: forward keeps nothing but the inputs."""

    @staticmethod
    def forward(run, rng, *args):
        return run(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        # ``rng`` is the state from before the forward ran (setup_context runs after it), so
        # the recomputation draws the same random numbers (dropout masks) as the forward.
        run, rng, *args = inputs
        ctx.run, ctx.args, ctx.rng = run, list(args), rng
        ctx.tensor_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.save_for_backward(*[args[i] for i in ctx.tensor_idx])

    @staticmethod
    def backward(ctx, *grad_outs):
        from .engine import backward as run_backward
        from .grad import _GRAD_DEPTH

        if _GRAD_DEPTH[0]:
            raise RuntimeError(
                "checkpoint: when use_reentrant=True, checkpoint is incompatible with autograd.grad() "
                "(its backward accumulates into the .grad of every leaf the segment reads). Use "
                "use_reentrant=False, or call .backward()."
            )

        args = list(ctx.args)
        inputs = []
        for i, t in zip(ctx.tensor_idx, ctx.saved_tensors):
            args[i] = t.detach().requires_grad_(t.requires_grad)
            inputs.append(args[i])
        saved_rng = None
        if ctx.rng is not None:
            saved_rng = _rng_state()
            _set_rng_state(ctx.rng)
        try:
            with enable_grad():
                out = ctx.run(*args)
        finally:
            if saved_rng is not None:
                _set_rng_state(saved_rng)
        outs = out if isinstance(out, tuple) else (out,)
        pairs = [(o, g) for o, g in zip(outs, grad_outs)
                 if isinstance(o, Tensor) and o.requires_grad and g is not None]
        if pairs:  # like torch: accumulate into every leaf of the recomputed graph
            run_backward([o for o, _ in pairs], [g for _, g in pairs], create_graph=STATE.grad_enabled)
        res = [None] * len(args)
        for i, t in zip(ctx.tensor_idx, inputs):
            # Under create_graph the gradient's history ends at the detached copy ``t``, not at
            # the argument: differentiating it again would silently give nothing. Detached, a
            # second backward through it raises instead, as PyTorch's reentrant mode does.
            res[i] = None if t.grad is None else t.grad.detach()
        return (None, None, *res)


class _NullContext:
    __slots__ = ()

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NULL = _NullContext()


def checkpoint(function, *args, use_reentrant=None, context_fn=None, determinism_check="default", debug=False,
               early_stop=True, preserve_rng_state=True, **kwargs):
    """Run ``function(*args, **kwargs)`` without keeping its intermediates; recompute them in backward.

    Parameters
    ----------
    function : callable
        The segment: returns a Tensor or a (nested) tuple of Tensors.
    *args
        Its inputs.
    use_reentrant : bool, optional
        ``False``/``None`` (default): every tensor the segment reads (arguments, closure
        variables, module parameters) gets the same gradient as without checkpointing.
        ``True``: PyTorch's reentrant mode: gradients flow only if a tensor argument
        requires grad (a warning otherwise); it works with ``backward()``, not ``grad()``,
        and takes no keyword arguments for ``function`` (a ValueError, as PyTorch's).
    context_fn : callable, optional
        Returns two context managers: the forward runs inside the first, the recomputation
        inside the second (PyTorch's; non-reentrant mode only). Default: neither does anything.
    determinism_check : {"default", "none"}
        ``"default"``: as PyTorch's, the values the recomputation saves must have the shapes
        and dtypes the forward's had (:class:`CheckpointError` otherwise). Lucid always
        checks that the recomputation recorded the same operations (it moves each
        recomputed value into its original node).
    debug : bool
        Accepted as PyTorch's (no extra trace is printed); non-reentrant mode only.
    early_stop : bool
        PyTorch's: whether the recomputation may stop once it has what the backward needs.
        Lucid always reruns the whole segment (same gradients); accepted for compatibility.
    preserve_rng_state : bool
        Replay the random state in the recomputation, so dropout masks match.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import checkpoint
    >>> W = lucid.tensor([[2.0]], requires_grad=True)
    >>> x = lucid.tensor([[1.0], [3.0]])
    >>> checkpoint(lambda t: (t @ W).sum(), x).backward()
    >>> W.grad
    tensor([[4.]])

    Limitations
    -----------
    ``function`` must record the same operations each time (it runs twice). Under a
    ``lucid.func`` transform it simply runs (same gradients, no memory saved).
    """
    if not callable(function):
        raise TypeError(f"checkpoint: expected a callable, got {type(function).__name__}")
    if use_reentrant not in (None, True, False):
        raise TypeError(f"checkpoint: use_reentrant must be a bool or None, got {use_reentrant!r}")
    if determinism_check not in ("default", "none"):
        raise ValueError(f"checkpoint: determinism_check should be one of ['default', 'none'], but got "
                         f"{determinism_check!r}")
    if use_reentrant and (context_fn is not None and context_fn is not noop_context_fn or debug):
        raise ValueError("checkpoint: passing context_fn or debug is only supported when use_reentrant=False")
    if context_fn is noop_context_fn:
        context_fn = None
    if STATE.traces or not STATE.grad_enabled:
        if context_fn is None:
            return function(*args, **kwargs)
        with context_fn()[0]:
            return function(*args, **kwargs)
    if not use_reentrant:
        return _non_reentrant(function, args, kwargs, bool(preserve_rng_state), context_fn,
                              determinism_check == "default")
    if kwargs:  # as PyTorch's reentrant checkpoint
        raise ValueError("checkpoint: Unexpected keyword arguments: " + ",".join(kwargs))
    if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
        warnings.warn("checkpoint: none of the inputs has requires_grad=True; with use_reentrant=True "
                      "the gradients of the checkpointed segment will be None", UserWarning, stacklevel=2)
    return _Reentrant.apply(function, _rng_state() if preserve_rng_state else None, *args)
