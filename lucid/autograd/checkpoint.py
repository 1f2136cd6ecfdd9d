"""Activation checkpointing: trade compute for memory (``torch.utils.checkpoint``).

``checkpoint(fn, *args)`` runs ``fn`` without recording its intermediates and keeps
only its inputs; the backward runs ``fn`` again (under ``lucid.func.vjp``) to get the
gradients. Because the recomputation is itself a transform, the result composes with
``lucid.func.grad``/``vjp``/``jacrev`` and with ``create_graph=True`` (higher orders).
"""
from __future__ import annotations

from .._core.grad_mode import STATE
from .._core.tensor import Tensor
from .function import Function

__all__ = ["checkpoint"]


def _rng_state():
    import lucid

    get = getattr(lucid, "get_rng_state", None)
    return get() if callable(get) else None


def _set_rng_state(state):
    import lucid

    if state is not None and callable(getattr(lucid, "set_rng_state", None)):
        lucid.set_rng_state(state)


class _Checkpoint(Function):
    """Separate-style Function: forward keeps nothing but the inputs."""

    # Under vmap the forward is simply run batched (its gradient is plain autodiff anyway).
    generate_vmap_rule = True

    @staticmethod
    def forward(run, preserve, *args):
        # Eager: Function.apply already runs this under no_grad. Under a transform the
        # lower levels must still see the ops (their derivatives may be needed).
        return run(*args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        run, preserve, *args = inputs
        ctx.run, ctx.preserve = run, preserve
        ctx.rng = _rng_state() if preserve else None
        ctx.tensor_idx = [i for i, a in enumerate(args) if isinstance(a, Tensor)]
        ctx.args = list(args)
        ctx.save_for_backward(*[args[i] for i in ctx.tensor_idx])

    @staticmethod
    def backward(ctx, *grad_outs):
        from ..func.api import _vjp_impl

        tensors = ctx.saved_tensors
        if not STATE.grad_enabled:  # no graph of the backward wanted: recompute on plain values
            tensors = tuple(t.detach() for t in tensors)
        args = list(ctx.args)

        def rerun(*ts):
            for i, t in zip(ctx.tensor_idx, ts):
                args[i] = t
            return ctx.run(*args)

        saved_rng = _rng_state() if ctx.rng is not None else None
        _set_rng_state(ctx.rng)
        try:
            out, vjp_fn, _ = _vjp_impl(rerun, tensors, False, "checkpoint (recomputation)")
        finally:
            _set_rng_state(saved_rng)
        outs = out if isinstance(out, tuple) else (out,)
        cts = tuple(g if g is not None else o * 0 for g, o in zip(grad_outs, outs))
        grads = vjp_fn(cts if isinstance(out, tuple) else cts[0], _keep_none=True)
        res = [None] * len(args)
        for i, g in zip(ctx.tensor_idx, grads):
            res[i] = g
        return (None, None, *res)


    @staticmethod
    def jvp(ctx, *tangents):
        from ..func.api import _jvp_impl

        args = list(ctx.args)
        prims = tuple(args[i] for i in ctx.tensor_idx)
        tans = tuple(tangents[2 + i] for i in ctx.tensor_idx)

        def rerun(*ts):
            for i, t in zip(ctx.tensor_idx, ts):
                args[i] = t
            return ctx.run(*args)

        return _jvp_impl(rerun, prims, tans, False, "checkpoint (forward mode)")[1]


def checkpoint(function, *args, use_reentrant=None, preserve_rng_state=True, **kwargs):
    """Run ``function(*args, **kwargs)`` without keeping its intermediates; recompute them in backward.

    Parameters
    ----------
    function : callable
        Returns a Tensor or a tuple of Tensors.
    *args
        Its inputs; only these are kept for the backward.
    use_reentrant : bool, optional
        Accepted for PyTorch compatibility; Lucid always uses the non-reentrant
        implementation (``True`` behaves the same: gradients reach every input).
    preserve_rng_state : bool
        Replay the random state in the recomputation (when ``lucid`` exposes
        ``get_rng_state``/``set_rng_state``), so dropout masks match.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import checkpoint
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> checkpoint(lambda t: (t.sin() * t).sum(), x).backward()
    >>> x.grad.shape
    (2,)

    Limitations
    -----------
    ``function`` must be deterministic apart from random ops (it is run twice).
    """
    if not callable(function):
        raise TypeError(f"checkpoint: expected a callable, got {type(function).__name__}")
    run = (lambda *a: function(*a, **kwargs)) if kwargs else function
    return _Checkpoint.apply(run, bool(preserve_rng_state), *args)
