"""``loss_parallel``: cross-entropy on logits sharded over the classes, without gathering them.

NOTE [Loss parallel]
Inside ``with loss_parallel():`` ``F.cross_entropy``, ``F.nll_loss`` and ``log_softmax`` of a
DTensor sharded on its class dimension (``Shard(1)``, or ``Shard(0)`` for one sample) run on
the local pieces (the dispatcher asks ``handler_for`` first, NOTE [DTensor layout]):

* ``log_softmax``: the row maximum is all-reduced (MAX, detached: it only shifts, the result
  does not depend on it), the local ``sum(exp(x - max))`` all-reduced (SUM), and each rank
  keeps ``x - logsumexp`` for its classes -- a ``Shard`` result, as the input;
* ``nll_loss``: each rank picks ``-w[t] * logp[t]`` for the targets among its classes (zero
  for the others) and the picks are summed over the mesh; the rest (ignore_index, weights,
  reduction, label smoothing as ``aten::cross_entropy`` does it) is on replicated rows.

The sums are ``Partial -> Replicate`` moves, whose gradient goes back unchanged (NOTE [DTensor
gradients]): the loss after them is computed alike on every rank, so their cotangents agree.
The logsumexp is the exception: each rank's own columns send it a share of its cotangent, so
its backward sums them over the mesh (``sum_grad``). Each rank's logits then get exactly their
columns of the whole gradient: the same numbers as gathering the logits first. The loss is a ``Replicate`` DTensor; call
``backward()`` inside the context too, as PyTorch asks. Targets are class indices (a plain or
replicated tensor); class probabilities are not supported.
"""
from __future__ import annotations

import contextlib

from .._api import DTensor
from ..placement_types import Partial, Replicate, Shard

__all__ = ["loss_parallel"]

_ACTIVE = [0]  # nesting depth of loss_parallel contexts; dispatch reads it (one list lookup)
_TABLE = {}


@contextlib.contextmanager
def loss_parallel():
    """Compute cross-entropy on class-sharded logits without gathering them (NOTE [Loss parallel]).

    Examples
    --------
    >>> import lucid.nn.functional as F
    >>> from lucid.distributed.tensor import Shard, distribute_tensor
    >>> from lucid.distributed.tensor.parallel import loss_parallel
    >>> logits = distribute_tensor(lucid.randn(4, 16, requires_grad=True), mesh, [Shard(1)])  # doctest: +SKIP
    >>> with loss_parallel():                                                                # doctest: +SKIP
    ...     loss = F.cross_entropy(logits, lucid.tensor([1, 5, 9, 15]))
    ...     loss.backward()
    """
    _ACTIVE[0] += 1
    try:
        yield
    finally:
        _ACTIVE[0] -= 1


def handler_for(func):
    """The loss-parallel rule of ``func`` while a context is active, else None."""
    if not _ACTIVE[0]:
        return None
    if not _TABLE:
        _build_table()
    from ....overrides import original

    return _TABLE.get(original(func))


# ------------------------------------------------------------------ the rules


def _class_dim(x, api):
    cdim = 1 if x.ndim >= 2 else 0
    p = x.placements
    if len(p) != 1 or not p[0].is_shard() or p[0].dim % x.ndim != cdim:
        raise ValueError(f"{api}: loss_parallel expects the input sharded on the class dimension {cdim} "
                         f"(Shard({cdim}) on a 1-D mesh), got {p}")
    return cdim


def _sum_over_mesh(local, mesh):
    """The sum of every rank's ``local`` (same shape everywhere), differentiably: Partial -> Replicate."""
    from .._redistribute import move

    return move(local, mesh, tuple(local.shape), Partial(), Replicate())


def _log_softmax_local(x, cdim):
    """This rank's columns of ``log_softmax(x, cdim)`` for a class-sharded DTensor ``x``."""
    import lucid

    from ...collectives import ReduceOp, all_reduce
    from .._redistribute import sum_grad

    local, mesh = x._local_tensor, x.device_mesh
    if local.shape[cdim]:
        shift = local.detach().amax(dim=cdim, keepdim=True)
    else:  # a rank without classes (more ranks than classes): it adds nothing
        shape = list(local.shape)
        shape[cdim] = 1
        shift = lucid.full(shape, float("-inf"), dtype=local.dtype, device=local.device)
    shift = shift.clone()
    all_reduce(shift, op=ReduceOp.MAX, group=mesh.get_group())
    total = _sum_over_mesh((local - shift).exp().sum(dim=cdim, keepdim=True), mesh)
    # each rank's columns reach the logsumexp's cotangent with their own share: summed over the mesh
    total = sum_grad(total, mesh)
    return local - (shift + total.log())


def _log_softmax(func, args, kwargs):
    from .._dispatch import _bind, _fallback

    a = _bind(func, args, kwargs)
    x, dim = a["input"] if "input" in a else a["self"], a.get("dim")
    if not isinstance(x, DTensor) or dim is None or a.get("dtype") is not None:
        return _fallback(func, args, kwargs)
    cdim = int(dim) % max(x.ndim, 1)
    p = x.placements[0]
    if not (len(x.placements) == 1 and p.is_shard() and p.dim % x.ndim == cdim):
        return _fallback(func, args, kwargs)
    return DTensor._make(_log_softmax_local(x, cdim), x.device_mesh, (Shard(cdim),), x.shape)


def _plain(value, api, what):
    """A replicated argument as a plain tensor (a Replicate DTensor gives its local value)."""
    if isinstance(value, DTensor):
        if any(not p.is_replicate() for p in value.placements):
            raise ValueError(f"{api}: loss_parallel expects {what} replicated, got {value.placements}")
        return value._local_tensor
    return value


def _nll_from_local(api, logp_local, x, target, weight, ignore_index, reduction, label_smoothing):
    """NOTE [Loss parallel]: the loss from this rank's log-probabilities ``logp_local``."""
    import lucid

    cdim = 1 if x.ndim >= 2 else 0
    mesh, n_classes = x.device_mesh, x.shape[cdim]
    target, weight = _plain(target, api, "the target"), _plain(weight, api, "the weight")
    if target.is_floating_point():
        raise NotImplementedError(f"{api}: loss_parallel supports class-index targets only (got {target.dtype})")
    if tuple(target.shape) != tuple(s for i, s in enumerate(x.shape) if i != cdim):
        raise ValueError(f"{api}: expected a target of shape {tuple(s for i, s in enumerate(x.shape) if i != cdim)} "
                         f"for input {tuple(x.shape)}, got {tuple(target.shape)}")
    n, r = mesh.size(), mesh.get_local_rank()
    start, width = Shard.local_offset(n_classes, n, r), logp_local.shape[cdim]
    keep = target != ignore_index
    safe = lucid.where(keep, target, lucid.zeros_like(target))
    mine = keep & (safe >= start) & (safe < start + width)
    index = (safe - start).clamp(0, max(width - 1, 0)).unsqueeze(cdim)
    local_w = None if weight is None else lucid.narrow(weight, 0, start, width)
    if width:
        picked = logp_local.gather(cdim, index).squeeze(cdim)
        picked = lucid.where(mine, picked, lucid.zeros_like(picked))
    else:
        picked = lucid.zeros(tuple(target.shape), dtype=logp_local.dtype, device=logp_local.device)
    picked = _sum_over_mesh(picked, mesh)  # logp[t] on every rank
    w_t = keep.to(picked.dtype) if weight is None else lucid.where(keep, weight[safe], lucid.zeros_like(picked))
    nll = -w_t * picked
    loss = _reduce(nll, w_t, reduction)
    if label_smoothing:
        shaped_w = None if local_w is None else local_w.reshape([-1] + [1] * (logp_local.ndim - cdim - 1))
        local_smooth = -(logp_local if shaped_w is None else logp_local * shaped_w).sum(dim=cdim)
        smooth = _sum_over_mesh(local_smooth, mesh)
        smooth = lucid.where(keep, smooth, lucid.zeros_like(smooth))
        loss = (1 - label_smoothing) * loss + _reduce(smooth, w_t, reduction) * (label_smoothing / n_classes)
    return DTensor._make(loss, mesh, (Replicate(),), tuple(loss.shape))


def _reduce(values, w_t, reduction):
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    if reduction == "mean":
        return values.sum() / w_t.sum()
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _reduction(a, api):
    if a.get("size_average") is not None or a.get("reduce") is not None:
        raise NotImplementedError(f"{api}: loss_parallel does not take the deprecated size_average/reduce; "
                                  "pass reduction=")
    return a["reduction"]


def _cross_entropy(func, args, kwargs):
    from .._dispatch import _bind

    api = "cross_entropy"
    a = _bind(func, args, kwargs)
    x = a["input"]
    cdim = _class_dim(x, api)
    return _nll_from_local(api, _log_softmax_local(x, cdim), x, a["target"], a.get("weight"), a["ignore_index"],
                           _reduction(a, api), float(a.get("label_smoothing") or 0.0))


def _nll_loss(func, args, kwargs):
    from .._dispatch import _bind

    api = "nll_loss"
    a = _bind(func, args, kwargs)
    x = a["input"]
    _class_dim(x, api)
    return _nll_from_local(api, x._local_tensor, x, a["target"], a.get("weight"), a["ignore_index"],
                           _reduction(a, api), 0.0)


def _build_table():
    import lucid
    import lucid.nn.functional as F

    from ....overrides import register_handlers

    register_handlers(_TABLE, _cross_entropy, (F,), ["cross_entropy"])
    register_handlers(_TABLE, _nll_loss, (F,), ["nll_loss"])
    register_handlers(_TABLE, _log_softmax, (lucid, lucid.Tensor, F), ["log_softmax"])
