"""``DistributedOptimizer``: one optimizer per worker owning parameters, stepped with the gradients
of a distributed autograd context (PyTorch's ``torch.distributed.optim.DistributedOptimizer``)."""
from __future__ import annotations

import threading

__all__ = ["DistributedOptimizer"]

_STEP_LOCK = threading.Lock()  # trainers stepping one owner's optimizers do so one at a time


class _LocalOptimizer:
    """Lives on a parameter owner: ``optimizer_class`` over the values of the RRefs it was given."""

    def __init__(self, optimizer_class, local_params_rref, *args, **kwargs):
        self.params = [rref.local_value() for rref in local_params_rref]
        self.optim = optimizer_class(self.params, *args, **kwargs)

    def step(self, context_id):
        from lucid.distributed import autograd as dist_autograd

        grads = dist_autograd.get_gradients(context_id)
        with _STEP_LOCK:
            for p in self.params:
                # a parameter this context's backward did not reach is left alone (no stale .grad)
                p.grad = grads.get(p)
            self.optim.step()


def _new_local_optimizer(optimizer_class, local_params_rref, args, kwargs):
    from lucid.distributed.rpc import RRef

    return RRef(_LocalOptimizer(optimizer_class, local_params_rref, *args, **kwargs))


def _local_step(local_optim_rref, context_id):
    local_optim_rref.local_value().step(context_id)


class DistributedOptimizer:
    """Step the parameters behind ``params_rref`` (RRefs, on any workers) with ``optimizer_class``.

    Each owner of some of the parameters gets one ``optimizer_class(params, *args, **kwargs)``;
    :meth:`step` runs them all (in parallel) with the gradients that
    ``lucid.distributed.autograd.backward`` left in context ``context_id`` on each owner.

    Examples
    --------
    >>> import lucid, lucid.distributed.autograd as dist_autograd
    >>> from lucid.distributed.optim import DistributedOptimizer          # doctest: +SKIP
    >>> opt = DistributedOptimizer(lucid.optim.SGD, param_rrefs, lr=0.05)   # doctest: +SKIP
    >>> with dist_autograd.context() as context_id:                          # doctest: +SKIP
    ...     loss = remote_model(x).sum()
    ...     dist_autograd.backward(context_id, [loss])
    ...     opt.step(context_id)
    """

    def __init__(self, optimizer_class, params_rref, *args, **kwargs):
        from lucid.distributed import rpc

        params_rref = list(params_rref)
        if not all(isinstance(r, rpc.RRef) for r in params_rref):
            raise TypeError("DistributedOptimizer: params_rref must be a list of RRefs to parameters, got "
                            f"{[type(r).__name__ for r in params_rref]}")
        by_owner = {}
        for rref in params_rref:
            by_owner.setdefault(rref.owner(), []).append(rref)
        futures = [rpc.rpc_async(owner, _new_local_optimizer, args=(optimizer_class, rrefs, args, kwargs))
                   for owner, rrefs in by_owner.items()]
        self.remote_optimizers = [f.wait() for f in futures]

    def step(self, context_id):
        """One step of every owner's optimizer, with the gradients of context ``context_id``."""
        from lucid.distributed import autograd as dist_autograd
        from lucid.distributed import rpc

        dist_autograd._context.retrieve(context_id, "DistributedOptimizer.step")
        futures = [rpc.rpc_async(r.owner(), _local_step, args=(r, context_id)) for r in self.remote_optimizers]
        errors = []
        for f in futures:
            try:
                f.wait()
            except Exception as e:  # noqa: BLE001  (every owner steps before the first error is raised)
                errors.append(e)
        if errors:
            raise errors[0]
