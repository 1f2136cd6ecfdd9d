"""Collectives with gradients, as ``torch.distributed.nn.functional``.

Each function returns new tensors (the inputs are left alone) and is differentiable: the
backward of a collective is its adjoint collective, run on every rank of the group, as the
forward was (NOTE [Adjoint collectives]). SyncBatchNorm is built on ``all_reduce``.

NOTE [Adjoint collectives]
PyTorch's pairs, kept exactly so gradients match it rank for rank: all_reduce <-> all_reduce
(same op), broadcast(src) <-> reduce(dst=src) (zero on the other ranks), gather(dst) <->
scatter(src=dst), all_gather <-> reduce_scatter (the sum of each rank's cotangent for this
rank's block), all_to_all <-> all_to_all, all_to_all_single <-> all_to_all_single with the
split sizes swapped. ``reduce``'s output on a rank other than ``dst`` is its own input (what the
collective leaves there); like PyTorch, its backward broadcasts ``dst``'s cotangent to every rank.
``src``/``dst`` are global ranks, as in the in-place collectives.
"""
from __future__ import annotations

from ...autograd.function import Function
from .. import collectives as C
from ..collectives import ReduceOp
from ..process_group import get_rank, get_world_size

__all__ = ["all_reduce", "broadcast", "reduce", "gather", "scatter", "all_gather", "reduce_scatter",
           "all_to_all", "all_to_all_single"]


def _zeros_like(t):
    import lucid

    return lucid.zeros_like(t)


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, op, group, tensor):
        ctx.op, ctx.group = op, group
        out = tensor.clone()
        C.all_reduce(out, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, None, _AllReduce.apply(ctx.op, ctx.group, grad)


class _Broadcast(Function):
    @staticmethod
    def forward(ctx, src, group, tensor):
        ctx.src, ctx.group = src, group
        out = tensor.clone()
        C.broadcast(out, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        g = _Reduce.apply(ctx.src, ReduceOp.SUM, ctx.group, grad)
        return None, None, (g if get_rank() == ctx.src else g * 0)


class _Reduce(Function):
    @staticmethod
    def forward(ctx, dst, op, group, tensor):
        ctx.dst, ctx.group = dst, group
        out = tensor.clone()
        C.reduce(out, dst=dst, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, None, None, _Broadcast.apply(ctx.dst, ctx.group, grad)


class _Gather(Function):
    @staticmethod
    def forward(ctx, dst, group, tensor):
        ctx.dst, ctx.group = dst, group
        outs = [_zeros_like(tensor) for _ in range(get_world_size(group))]
        C.gather(tensor.contiguous(), outs if get_rank() == dst else None, dst=dst, group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return None, None, _Scatter.apply(ctx.dst, ctx.group, *grads)


class _Scatter(Function):
    @staticmethod
    def forward(ctx, src, group, *tensors):
        ctx.src, ctx.group = src, group
        out = _zeros_like(tensors[0])
        C.scatter(out, [t.contiguous() for t in tensors] if get_rank() == src else None, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None) + tuple(_Gather.apply(ctx.src, ctx.group, grad))


class _AllGather(Function):
    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        outs = [_zeros_like(tensor) for _ in range(get_world_size(group))]
        C.all_gather(outs, tensor.contiguous(), group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        out = _zeros_like(grads[get_rank(ctx.group)])
        return None, _ReduceScatter.apply(ReduceOp.SUM, ctx.group, out, *grads)


class _ReduceScatter(Function):
    @staticmethod
    def forward(ctx, op, group, output, *inputs):
        ctx.group = group
        out = output.detach().clone()
        C.reduce_scatter(out, [t.contiguous() for t in inputs], op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None, None) + tuple(_AllGather.apply(ctx.group, grad))


class _AllToAll(Function):
    @staticmethod
    def forward(ctx, group, outputs, *inputs):
        ctx.group, ctx.shapes = group, [tuple(t.shape) for t in inputs]
        outs = [o.detach().clone() for o in outputs]
        C.all_to_all(outs, [t.contiguous() for t in inputs], group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        import lucid

        like = [lucid.zeros(s, dtype=grads[0].dtype, device=grads[0].device) for s in ctx.shapes]
        return (None, None) + tuple(_AllToAll.apply(ctx.group, like, *grads))


class _AllToAllSingle(Function):
    @staticmethod
    def forward(ctx, group, output, output_split_sizes, input_split_sizes, input):
        ctx.group, ctx.in_shape = group, tuple(input.shape)
        ctx.splits = (input_split_sizes, output_split_sizes)  # swapped for the backward
        out = output.detach().clone()
        C.all_to_all_single(out, input.contiguous(), output_split_sizes, input_split_sizes, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        import lucid

        out = lucid.zeros(ctx.in_shape, dtype=grad.dtype, device=grad.device)
        g = _AllToAllSingle.apply(ctx.group, out, ctx.splits[0], ctx.splits[1], grad.contiguous())
        return None, None, None, None, g


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


def broadcast(tensor, src, group=None):
    """Rank ``src``'s ``tensor`` on every rank, differentiably (NOTE [Adjoint collectives]).

    The gradient reaches ``src`` only: the sum of every rank's cotangent; other ranks get zeros.

    Examples
    --------
    >>> from lucid.distributed.nn.functional import broadcast
    >>> y = broadcast(x, src=0)          # doctest: +SKIP
    """
    return _Broadcast.apply(src, group, tensor)


def reduce(tensor, dst, op=ReduceOp.SUM, group=None):
    """``tensor`` reduced with ``op`` onto rank ``dst`` (other ranks get their input back), differentiably.

    The backward broadcasts ``dst``'s cotangent to every rank (NOTE [Adjoint collectives]).

    Examples
    --------
    >>> from lucid.distributed.nn.functional import reduce
    >>> total = reduce(x, dst=0)         # doctest: +SKIP
    """
    return _Reduce.apply(dst, op, group, tensor)


def gather(tensor, dst=0, group=None):
    """A tuple of every rank's ``tensor`` on rank ``dst`` (zeros elsewhere), differentiably.

    Examples
    --------
    >>> from lucid.distributed.nn.functional import gather
    >>> parts = gather(x, dst=0)         # doctest: +SKIP
    """
    return _Gather.apply(dst, group, tensor)


def scatter(tensors, src=0, group=None):
    """Rank ``src``'s ``tensors[r]`` on rank ``r``, differentiably.

    Every rank passes a list of ``world`` tensors of one shape (only ``src``'s values are sent),
    as PyTorch's; the gradient of ``src``'s list is the gathered cotangents, zeros elsewhere.

    Examples
    --------
    >>> from lucid.distributed.nn.functional import scatter
    >>> mine = scatter([a, b], src=0)    # doctest: +SKIP
    """
    tensors = list(tensors or ())
    if not tensors:
        raise ValueError("scatter (lucid.distributed.nn): pass a list of tensors (one per rank) on every rank")
    if any(tuple(t.shape) != tuple(tensors[0].shape) for t in tensors):
        raise ValueError("scatter (lucid.distributed.nn): the tensors must share one shape, got "
                         f"{[tuple(t.shape) for t in tensors]}")
    return _Scatter.apply(src, group, *tensors)


def all_gather(tensor, group=None):
    """A tuple of every rank's ``tensor``, differentiably (the backward reduce-scatters the cotangents).

    Examples
    --------
    >>> from lucid.distributed.nn.functional import all_gather
    >>> parts = all_gather(x)            # doctest: +SKIP
    """
    return _AllGather.apply(group, tensor)


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None):
    """The ``op``-reduction over ranks of ``input_list[rank]``, as a new tensor shaped like ``output``.

    ``output`` only gives the shape and dtype (it is not written). The backward all-gathers the
    cotangent: the gradient of ``input_list[r]`` is rank ``r``'s cotangent.

    Examples
    --------
    >>> from lucid.distributed.nn.functional import reduce_scatter
    >>> mine = reduce_scatter(lucid.zeros(3), [a, b])   # doctest: +SKIP
    """
    return _ReduceScatter.apply(op, group, output, *input_list)


def all_to_all(output_tensor_list, input_tensor_list, group=None):
    """A tuple whose ``r``-th entry is rank ``r``'s ``input_tensor_list[rank]``, differentiably.

    ``output_tensor_list`` gives the shapes (it is not written).

    Examples
    --------
    >>> from lucid.distributed.nn.functional import all_to_all
    >>> got = all_to_all([lucid.zeros(2), lucid.zeros(2)], [a, b])   # doctest: +SKIP
    """
    return _AllToAll.apply(group, list(output_tensor_list), *input_tensor_list)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None):
    """``all_to_all`` on blocks of dim 0 of one tensor (optional uneven split sizes), differentiably.

    ``output`` gives the shape (it is not written); the backward is the same exchange with the
    split sizes swapped.

    Examples
    --------
    >>> from lucid.distributed.nn.functional import all_to_all_single
    >>> got = all_to_all_single(lucid.zeros(4), x)   # doctest: +SKIP
    """
    return _AllToAllSingle.apply(group, output, output_split_sizes, input_split_sizes, input)
