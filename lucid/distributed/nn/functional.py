"""Collectives with gradients, as ``torch.distributed.nn.functional``.

``all_reduce(x)`` returns a new tensor (the input is left alone) and is differentiable: each
rank's output depends on every rank's input, so the backward all-reduces the cotangents the
same way (SUM: sum of them; AVG: their average). Every rank must run the backward, as every
rank runs the forward (it is a collective too). SyncBatchNorm is built on it.
"""
from __future__ import annotations

from ...autograd.function import Function
from ..collectives import ReduceOp, all_reduce as _all_reduce_in_place

__all__ = ["all_reduce"]


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, op, group, tensor):
        ctx.op, ctx.group = op, group
        out = tensor.clone()
        _all_reduce_in_place(out, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        g = grad.clone()
        _all_reduce_in_place(g, op=ctx.op, group=ctx.group)
        return None, None, g


def all_reduce(tensor, op=ReduceOp.SUM, group=None):
    """``tensor`` combined over the ranks of ``group`` with ``op`` (SUM or AVG), differentiably.

    Parameters
    ----------
    tensor : Tensor
        This rank's contribution (floating point or complex); not modified.
    op : ReduceOp
        ``ReduceOp.SUM`` or ``ReduceOp.AVG`` (the ones with a gradient that is a collective too).
    group : ProcessGroup, optional
        Default: the world.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributed.nn.functional import all_reduce
    >>> x = lucid.ones(2, requires_grad=True)
    >>> all_reduce(x * 3).sum().backward()   # doctest: +SKIP
    >>> x.grad                               # doctest: +SKIP
    tensor([6., 6.])
    >>> # (with 2 ranks: each rank's sum depends on both ranks' x)
    """
    if op not in (ReduceOp.SUM, ReduceOp.AVG):
        raise RuntimeError(f"all_reduce (lucid.distributed.nn): only ReduceOp.SUM and ReduceOp.AVG have a "
                           f"gradient, got {op}")
    return _AllReduce.apply(op, group, tensor)
