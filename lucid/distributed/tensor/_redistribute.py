"""Moving a DTensor's local piece between placements on a 1-D mesh, with gradients.

NOTE [DTensor gradients]
A DTensor's autograd graph is its local tensor's: every op on DTensors is Lucid ops on the
local pieces plus the collectives here. The gradient that reaches a local piece is read with
the piece's *gradient placement*: the forward placement, except that a ``Partial`` value gets
a ``Replicate`` gradient (every rank holds the whole cotangent: d(sum of pieces)/d(piece) is
it). So ``x.grad`` has ``x``'s placements and its local values update ``x``'s local values
elementwise, which is what an optimizer needs. Two rules keep it true:

* ``_Redistribute`` moves values forward and moves the gradient back from the output's
  gradient placement to the input's, with collectives (PyTorch's ``Redistribute.backward``:
  Shard <- Replicate is a local chunk, Replicate <- Shard an all-gather).
* a local op whose output is not ``Replicate`` but that reads a ``Replicate`` input gets, on
  each rank, only that rank's share of the input's gradient: ``_SumGrad`` (identity forward)
  all-reduces it (Megatron's ``f``), e.g. the weight of ``Shard(0) @ Replicate``.

PyTorch keeps gradient placements dynamic instead (the weight above gets a ``Partial``
gradient, the input of ``sum()`` a ``Replicate`` one): ``full_tensor()`` of every gradient is
the same; only those placements differ.
"""
from __future__ import annotations

from ...autograd.function import Function
from .. import collectives as C
from ..collectives import ReduceOp
from .placement_types import Partial, Replicate, Shard

__all__ = ["grad_placement", "redistribute_local", "redistribute_nd", "move_nd"]


def grad_placement(p):
    """The placement of the gradient of a value placed as ``p`` (NOTE [DTensor gradients])."""
    return Replicate() if p.is_partial() else p


def _chunk(local, dim, mesh):
    import lucid

    n, r = mesh.size(), mesh.get_local_rank()
    size = local.shape[dim]
    start, length = Shard.local_offset(size, n, r), Shard.local_size(size, n, r)
    return lucid.narrow(local, dim, start, length).contiguous().clone()


def _gather(local, dim, mesh, full):
    """Every rank's piece of dimension ``dim`` (``full`` long), concatenated (pieces padded to one size)."""
    import lucid

    n = mesh.size()
    c = Shard.chunk_size(full, n)
    pad = c - local.shape[dim]
    if pad:
        shape = list(local.shape)
        shape[dim] = pad
        local = lucid.cat([local, lucid.zeros(shape, dtype=local.dtype, device=local.device)], dim)
    parts = [lucid.zeros_like(local) for _ in range(n)]
    C.all_gather(parts, local.contiguous(), group=mesh.get_group())
    parts = [lucid.narrow(p, dim, 0, Shard.local_size(full, n, r)) for r, p in enumerate(parts)]
    return lucid.cat(parts, dim)


def _reduce(local, op, mesh):
    out = local.contiguous().clone()
    C.all_reduce(out, op=ReduceOp.SUM, group=mesh.get_group())
    return out / mesh.size() if op == "avg" else out


def redistribute_local(local, mesh, shape, src, dst):
    """``local`` (placed as ``src`` in a global value of ``shape``) placed as ``dst``; no autograd."""
    if src == dst:
        return local.clone()
    if src.is_partial():
        if dst.is_partial():
            raise RuntimeError(f"redistribute: can't go from {src} to {dst} (different reductions)")
        full = _reduce(local, src.reduce_op, mesh)
        return full if dst.is_replicate() else _chunk(full, dst.dim, mesh)
    if dst.is_partial():  # only ops ask for this: the value split so that the pieces reduce to it
        full = local if src.is_replicate() else _gather(local, src.dim, mesh, shape[src.dim])
        return full / mesh.size() if dst.reduce_op == "sum" else full.clone()
    full = local if src.is_replicate() else _gather(local, src.dim, mesh, shape[src.dim])
    return full.clone() if dst.is_replicate() else _chunk(full, dst.dim, mesh)


def _levels(mesh, shape, placements):
    """``out[k]``: the shape of the piece once mesh dims ``< k`` are applied (nested chunks)."""
    out, cur = [tuple(shape)], list(shape)
    for i, p in enumerate(placements):
        if p.is_shard():
            cur[p.dim] = Shard.local_size(cur[p.dim], mesh.size(i), mesh.get_local_rank(i))
        out.append(tuple(cur))
    return out


def _chain(local, mesh, shape, src, dst, step):
    """NOTE [Moves on n-D meshes]
    Mesh dim ``i`` splits the piece left by dims ``< i`` (PyTorch's default order), so a move
    unwinds, from the last mesh dim back to the first that changes, every non-Replicate
    placement (over that dim's group, with the shape of the piece at that level), then places
    the targets from that dim on. Each step is a 1-D move, so gradients follow NOTE [DTensor
    gradients] step by step."""
    changed = [i for i in range(mesh.ndim) if src[i] != dst[i]]
    if not changed:
        return step(local, mesh._line(0), shape, Replicate(), Replicate())
    k, cur = changed[0], list(src)
    before, after = _levels(mesh, shape, src), _levels(mesh, shape, dst)
    for i in reversed(range(k, mesh.ndim)):
        if not cur[i].is_replicate():
            local = step(local, mesh._line(i), before[i], cur[i], Replicate())
            cur[i] = Replicate()
    for i in range(k, mesh.ndim):
        if not dst[i].is_replicate():
            local = step(local, mesh._line(i), after[i], Replicate(), dst[i])
    return local


def redistribute_nd(local, mesh, shape, src, dst):
    """``redistribute_local`` with one placement per mesh dimension (tuples)."""
    if mesh.ndim == 1:
        return redistribute_local(local, mesh, shape, src[0], dst[0])
    return _chain(local, mesh, shape, src, dst, redistribute_local)


def move_nd(local, mesh, shape, src, dst):
    """``move`` with one placement per mesh dimension (tuples)."""
    if mesh.ndim == 1:
        return move(local, mesh, shape, src[0], dst[0])
    if tuple(src) == tuple(dst):
        return local
    return _chain(local, mesh, tuple(shape), src, dst, move)


class _Redistribute(Function):
    """``redistribute_local`` with the gradient moved back as NOTE [DTensor gradients] says."""

    @staticmethod
    def forward(ctx, local, mesh, shape, src, dst):
        ctx.mesh, ctx.shape, ctx.src, ctx.dst = mesh, shape, src, dst
        return redistribute_local(local.detach(), mesh, shape, src, dst)

    @staticmethod
    def backward(ctx, grad):
        src, dst = grad_placement(ctx.dst), grad_placement(ctx.src)
        if src == dst:
            return grad, None, None, None, None
        return _Redistribute.apply(grad, ctx.mesh, ctx.shape, src, dst), None, None, None, None


class _SumGrad(Function):
    """Identity forward; the backward all-reduces (a Replicate input of a non-Replicate local op)."""

    @staticmethod
    def forward(ctx, local, mesh):
        ctx.mesh = mesh
        return local.detach().clone()

    @staticmethod
    def backward(ctx, grad):
        return _Redistribute.apply(grad, ctx.mesh, tuple(grad.shape), Partial(), Replicate()), None


class _Regrad(Function):
    """Identity forward; the backward re-reads the gradient from ``src`` as ``dst`` (``to_local(grad_placements=)``;
    tuples, one placement per mesh dimension)."""

    @staticmethod
    def forward(ctx, local, mesh, shape, src, dst):
        ctx.mesh, ctx.shape, ctx.src, ctx.dst = mesh, shape, src, dst
        return local.detach().clone()

    @staticmethod
    def backward(ctx, grad):
        want = tuple(grad_placement(p) for p in ctx.dst)
        return move_nd(grad, ctx.mesh, ctx.shape, ctx.src, want), None, None, None, None


def shared_draw(draw, mesh):
    """``draw()`` (a whole random value) as made on the mesh's first rank, on every rank.

    NOTE [DTensor random values]
    A random DTensor is one global draw: every rank draws the whole value and takes rank 0's
    (a broadcast), then keeps its piece. Ranks seeded alike or not, the pieces fit together
    and a Replicate value agrees everywhere; the value is what one process holding rank 0's
    generator would draw (PyTorch's offset-based RNG tracker aims at the same).
    """
    full = draw().contiguous()
    C.broadcast(full, src=int(mesh.mesh[0]), group=mesh.get_group())
    return full


def move(local, mesh, shape, src, dst):
    """``local`` placed as ``dst``, differentiably (no-op when the placements agree)."""
    if src == dst:
        return local
    return _Redistribute.apply(local, mesh, tuple(shape), src, dst)


def sum_grad(local, mesh):
    """``local`` as is, its gradient summed over the mesh (only when it needs one)."""
    return _SumGrad.apply(local, mesh) if local.requires_grad else local
