"""``lucid.distributed.tensor`` (PyTorch's ``torch.distributed.tensor``): DTensor on a device mesh.

A :class:`DTensor` is one global value spread over the ranks of a
:class:`~lucid.distributed.DeviceMesh` by a placement: ``Shard(dim)`` (split as
``torch.chunk`` splits, so uneven sizes work), ``Replicate()`` or ``Partial()`` (pieces of a
sum). Ops on DTensors follow PyTorch's sharding rules and are differentiable (NOTE [DTensor
gradients]); ``lucid.distributed.tensor.parallel`` builds tensor parallelism on them. On an
n-D mesh a DTensor has one placement per mesh dimension (NOTE [Moves on n-D meshes], NOTE
[Ops on n-D meshes]); ``nn.Parameter(dtensor)`` is a DTensor parameter and
``load_state_dict`` moves DTensor values into DTensor parameters (``_state.py``).

Examples
--------
>>> from lucid.distributed.tensor import Replicate, Shard
>>> [Shard(0), Replicate()]
[Shard(dim=0), Replicate()]
"""
from ..device_mesh import DeviceMesh, init_device_mesh
from ._api import DTensor, distribute_module, distribute_tensor
from ._factory import empty, full, ones, rand, randn, zeros
from .placement_types import Partial, Placement, Replicate, Shard

__all__ = ["DTensor", "DeviceMesh", "init_device_mesh", "distribute_tensor", "distribute_module", "Placement",
           "Shard", "Replicate", "Partial", "zeros", "ones", "empty", "full", "rand", "randn"]
