"""DTensor factories (PyTorch's ``torch.distributed.tensor.zeros`` ...): each rank makes only its piece."""
from __future__ import annotations

from ._api import DTensor, _broadcast_from, _check_mesh, _normalize
from ._redistribute import redistribute_local, redistribute_nd, shared_draw
from .placement_types import Replicate, Shard

__all__ = ["zeros", "ones", "empty", "full", "rand", "randn"]


def _sizes(api, size):
    if len(size) == 1 and isinstance(size[0], (list, tuple)):
        size = tuple(size[0])
    if not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in size):
        raise ValueError(f"{api}: size must be non-negative ints, got {size}")
    return tuple(size)


def _make(api, size, fill, dtype, requires_grad, device_mesh, placements, random=False):
    if device_mesh is None:
        raise ValueError(f"{api}: pass device_mesh")
    _check_mesh(api, device_mesh)
    size = _sizes(api, size)
    placements = _normalize(api, (Replicate(),) * device_mesh.ndim if placements is None else placements,
                            device_mesh, len(size))
    p = placements[0]
    if device_mesh.ndim > 1:  # the whole value made (one draw, sent from the mesh's first rank), then cut
        whole = fill(size, dtype)
        if random:
            whole = whole.contiguous()
            _broadcast_from(whole, device_mesh, 0)
        local = redistribute_nd(whole, device_mesh, size, (Replicate(),) * device_mesh.ndim, placements)
    elif random:  # See NOTE [DTensor random values]
        local = redistribute_local(shared_draw(lambda: fill(size, dtype), device_mesh), device_mesh, size,
                                   Replicate(), p)
    elif p.is_shard():
        local_size = list(size)
        local_size[p.dim] = Shard.local_size(size[p.dim], device_mesh.size(), device_mesh.get_local_rank())
        local = fill(local_size, dtype)
    else:  # a Partial value: its pieces add up to it (value / ranks)
        local = redistribute_local(fill(size, dtype), device_mesh, size, Replicate(), p)
    if requires_grad:
        local.requires_grad_(True)
    return DTensor._make(local, device_mesh, placements, size)


def zeros(*size, requires_grad=False, dtype=None, layout=None, device_mesh=None, placements=None):
    """A DTensor of zeros of global ``size``, laid out as ``placements`` (default Replicate).

    Examples
    --------
    >>> from lucid.distributed.tensor import Shard, zeros
    >>> zeros(5, 2, device_mesh=mesh, placements=[Shard(0)]).to_local().shape   # doctest: +SKIP
    lucid.Size([3, 2])
    """
    import lucid

    return _make("zeros", size, lambda s, d: lucid.zeros(s, dtype=d), dtype, requires_grad, device_mesh, placements)


def ones(*size, requires_grad=False, dtype=None, layout=None, device_mesh=None, placements=None):
    """A DTensor of ones of global ``size`` (a Partial one holds ``1 / ranks`` on every rank).

    Examples
    --------
    >>> from lucid.distributed.tensor import ones
    >>> ones(4, device_mesh=mesh).full_tensor()   # doctest: +SKIP
    tensor([1., 1., 1., 1.])
    """
    import lucid

    return _make("ones", size, lambda s, d: lucid.ones(s, dtype=d), dtype, requires_grad, device_mesh, placements)


def empty(*size, requires_grad=False, dtype=None, layout=None, device_mesh=None, placements=None):
    """A DTensor of global ``size`` with unset values.

    Examples
    --------
    >>> from lucid.distributed.tensor import empty
    >>> empty(2, 3, device_mesh=mesh).shape   # doctest: +SKIP
    lucid.Size([2, 3])
    """
    import lucid

    return _make("empty", size, lambda s, d: lucid.empty(s, dtype=d), dtype, requires_grad, device_mesh, placements)


def full(size, fill_value, *, dtype=None, layout=None, requires_grad=False, device_mesh=None, placements=None):
    """A DTensor of global ``size`` filled with ``fill_value``.

    Examples
    --------
    >>> from lucid.distributed.tensor import full
    >>> full((2,), 7.0, device_mesh=mesh).full_tensor()   # doctest: +SKIP
    tensor([7., 7.])
    """
    import lucid

    return _make("full", (tuple(size),), lambda s, d: lucid.full(s, fill_value, dtype=d), dtype, requires_grad,
                 device_mesh, placements)


def rand(*size, requires_grad=False, dtype=None, layout=None, device_mesh=None, placements=None):
    """Uniform ``[0, 1)`` draws of global ``size``: one global draw (NOTE [DTensor random values]).

    Examples
    --------
    >>> from lucid.distributed.tensor import rand
    >>> rand(3, 2, device_mesh=mesh).shape   # doctest: +SKIP
    lucid.Size([3, 2])
    """
    import lucid

    return _make("rand", size, lambda s, d: lucid.rand(s, dtype=d), dtype, requires_grad, device_mesh, placements,
                 random=True)


def randn(*size, requires_grad=False, dtype=None, layout=None, device_mesh=None, placements=None):
    """Standard normal draws of global ``size``: one global draw (NOTE [DTensor random values]).

    Examples
    --------
    >>> from lucid.distributed.tensor import randn
    >>> randn(3, 2, device_mesh=mesh).shape   # doctest: +SKIP
    lucid.Size([3, 2])
    """
    import lucid

    return _make("randn", size, lambda s, d: lucid.randn(s, dtype=d), dtype, requires_grad, device_mesh, placements,
                 random=True)
