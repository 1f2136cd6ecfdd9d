"""``lucid.distributed.autograd``: backward through RPC calls (``torch.distributed.autograd``).

Inside ``with context() as context_id:`` every RPC records which tensors requiring grad it sent
and received (NOTE [Send and recv] in ``_context.py``); ``backward(context_id, roots)`` then runs
the backward on every worker the graph spans (NOTE [Distributed backward]) and each worker's
leaf gradients are kept in the context, read with ``get_gradients`` (``.grad`` is not touched).

Examples
--------
>>> import lucid, lucid.distributed.rpc as rpc, lucid.distributed.autograd as dist_autograd
>>> w = lucid.tensor([1.0, 2.0], requires_grad=True)                # doctest: +SKIP
>>> with dist_autograd.context() as context_id:                      # doctest: +SKIP
...     y = rpc.rpc_sync("worker1", lucid.mul, args=(w, 3.0))
...     dist_autograd.backward(context_id, [y.sum()])
...     dist_autograd.get_gradients(context_id)[w]
tensor([3., 3.])
"""
from __future__ import annotations

import numpy as np

from . import _context
from ._context import DistAutogradContext

__all__ = ["context", "backward", "get_gradients", "is_available", "DistAutogradContext"]


def is_available():
    """Distributed autograd needs only Lucid's RPC: always True."""
    return True


class context:
    """A distributed autograd context for this thread; ``with context() as context_id``.

    On exit the context is released here and on every worker it reached (asynchronously).
    Contexts can't be nested in one thread.
    """

    def __enter__(self):
        self._ctx = _context.new_context("context")
        return self._ctx.context_id

    def __exit__(self, *exc):
        _release_everywhere(self._ctx.context_id, skip=None)
        return False


def _release_everywhere(context_id, skip):
    """Release ``context_id`` here and tell the workers it involved (they tell theirs)."""
    from lucid.distributed.rpc import _agent

    known = _context.release(context_id)
    agent = _agent._AGENT[0]
    if not known or agent is None:
        return
    for w in sorted(known - {skip, agent.worker_id}):
        try:
            agent.request(w, "cleanup", context_id, 0)
        except RuntimeError:  # shutting down: nothing left to clean
            pass


def backward(context_id, roots, retain_graph=False):
    """Run the backward from the scalar tensors ``roots`` across every worker of context ``context_id``.

    Each root is seeded with 1. Gradients reaching a tensor received by RPC go back to the worker
    that sent it, which continues there (NOTE [Distributed backward]); leaf gradients are summed
    in the context on the worker owning the leaf. Returns when the whole pass is done. The graph
    is kept until the context ends, whatever ``retain_graph`` says (so a second ``backward`` in
    the same context adds to the gradients, as in PyTorch).
    """
    from lucid._core.tensor import Tensor
    from lucid.autograd.engine import _edge_of

    api = "dist_autograd.backward"
    ctx = _context.retrieve(context_id, api)
    roots = [roots] if isinstance(roots, Tensor) else list(roots)
    if not roots:
        raise RuntimeError(f"{api}: no roots given")
    edges, seeds = [], []
    for i, r in enumerate(roots):
        if not isinstance(r, Tensor):
            raise TypeError(f"{api}: roots must be tensors, got {type(r).__name__} at position {i}")
        if r.numel() != 1:
            raise RuntimeError(f"{api}: root {i} of shape {tuple(r.shape)} is not a scalar, all roots need to be "
                               "scalar")
        if not r._rg:
            raise RuntimeError(f"{api}: element {i} of tensors does not require grad and does not have a grad_fn")
        if r._data.__class__ is not np.ndarray:
            raise RuntimeError(f"{api}: root {i} is on device '{r.device}'; Lucid's RPC works on CPU tensors")
        edges.append(_edge_of(r))
        seeds.append(np.ones(r._data.shape, r._data.dtype))
    _propagate(ctx, edges, seeds)


def _propagate(ctx, edges, grads):
    """Run this worker's piece, then the pieces its recvs lead to; wait for all of them."""
    from lucid._core.tensor import _wrap
    from lucid.distributed.rpc import _agent

    outgoing = _context.run_local_piece(ctx, edges, grads)
    if not outgoing:
        return
    agent = _agent.current("dist_autograd.backward")
    futures = [agent.request(w, "grads", (ctx.context_id, [(sid, pos, _wrap(g)) for sid, pos, g in items]), -1.0)
               for w, items in sorted(outgoing.items())]
    errors = []
    for f in futures:
        try:
            f.wait()
        except Exception as e:  # noqa: BLE001  (every piece finishes before the first error is raised)
            errors.append(e)
    if errors:
        raise errors[0]


def _propagate_from_sends(context_id, items):
    """A worker's side of a gradient message: ``items`` are ``(send_id, position, gradient)`` of its sends."""
    from lucid.autograd.engine import _edge_of

    ctx = _context.retrieve(context_id, "dist_autograd.backward")
    edges, grads = [], []
    for send_id, position, g in items:
        t = ctx.sends[send_id][1][position]
        edges.append(_edge_of(t))
        grads.append(g._data.astype(t._data.dtype, copy=False))
    _propagate(ctx, edges, grads)


def get_gradients(context_id):
    """``{tensor: gradient}`` of the leaves on this worker that context ``context_id``'s backward reached.

    Examples
    --------
    >>> import lucid.distributed.autograd as dist_autograd
    >>> with dist_autograd.context() as cid:           # doctest: +SKIP
    ...     dist_autograd.get_gradients(cid)
    {}
    """
    return _context.retrieve(context_id, "get_gradients").gradients()
