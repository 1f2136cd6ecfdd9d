"""Placements: how a DTensor's global value is laid out over one mesh dimension.

``Shard(dim)`` splits dimension ``dim`` into ``mesh.size()`` pieces as ``torch.chunk`` does
(every piece ``ceil(n / ranks)`` long but the last ones, which may be shorter or empty);
``Replicate()`` keeps the whole value on every rank; ``Partial(op)`` keeps a piece of a sum
(or average) on every rank: the global value is the reduction of the ranks' pieces.
"""
from __future__ import annotations

__all__ = ["Placement", "Shard", "Replicate", "Partial"]


class Placement:
    """The base of the placement types (PyTorch's ``torch.distributed.tensor.Placement``)."""

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self, reduce_op=None):
        return False


class Shard(Placement):
    """Dimension ``dim`` split over the ranks of the mesh dimension, as ``torch.chunk`` splits it.

    Examples
    --------
    >>> from lucid.distributed.tensor import Shard
    >>> Shard(0), str(Shard(1)), Shard(0) == Shard(0)
    (Shard(dim=0), 'S(1)', True)
    >>> Shard.local_size(5, 3, 2)   # 5 rows on 3 ranks: 2, 2, 1
    1
    """

    __slots__ = ("dim",)

    def __init__(self, dim=0):
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"Shard: dim must be an int, got {dim!r}")
        self.dim = dim

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    @staticmethod
    def chunk_size(size, num_chunks):
        return -(-size // num_chunks) if size else 0

    @staticmethod
    def local_offset(size, num_chunks, rank):
        """Where rank ``rank``'s piece starts along the sharded dimension."""
        return min(size, rank * Shard.chunk_size(size, num_chunks))

    @staticmethod
    def local_size(size, num_chunks, rank):
        """The length of rank ``rank``'s piece of a dimension of ``size`` (``torch.chunk``'s)."""
        c = Shard.chunk_size(size, num_chunks)
        return max(0, min(size, (rank + 1) * c) - rank * c)

    def __eq__(self, other):
        return type(other) is Shard and other.dim == self.dim

    def __hash__(self):
        return hash(("Shard", self.dim))

    def __repr__(self):
        return f"Shard(dim={self.dim})"

    def __str__(self):
        return f"S({self.dim})"


class Replicate(Placement):
    """The whole value on every rank.

    Examples
    --------
    >>> from lucid.distributed.tensor import Replicate
    >>> Replicate(), str(Replicate()), Replicate().is_replicate()
    (Replicate(), 'R', True)
    """

    __slots__ = ()

    def is_replicate(self):
        return True

    def __eq__(self, other):
        return type(other) is Replicate

    def __hash__(self):
        return hash("Replicate")

    def __repr__(self):
        return "Replicate()"

    def __str__(self):
        return "R"


class Partial(Placement):
    """A pending reduction: the global value is the ``reduce_op`` ("sum" or "avg") of the ranks' pieces.

    Examples
    --------
    >>> from lucid.distributed.tensor import Partial
    >>> Partial(), str(Partial("avg")), Partial().is_partial("sum")
    (Partial(sum), 'P(avg)', True)
    """

    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op="sum"):
        if reduce_op not in ("sum", "avg"):
            raise ValueError(f"Partial: reduce_op must be 'sum' or 'avg' (the reductions with a gradient), "
                             f"got {reduce_op!r}")
        self.reduce_op = reduce_op

    def is_partial(self, reduce_op=None):
        return reduce_op is None or reduce_op == self.reduce_op

    def __eq__(self, other):
        return type(other) is Partial and other.reduce_op == self.reduce_op

    def __hash__(self):
        return hash(("Partial", self.reduce_op))

    def __repr__(self):
        return f"Partial({self.reduce_op})"

    def __str__(self):
        return f"P({self.reduce_op})"
