"""``DeviceMesh``: the ranks laid out as an n-D array, with one process group per dimension.

NOTE [Mesh groups]
For each dimension ``d`` every 1-D slice of the mesh along ``d`` becomes a group; every
rank calls ``new_group`` for every slice, in the same order (MPI's group creation is
collective over the world), and keeps the one it belongs to. A sub-mesh (``mesh["dp"]``)
reuses its parent's groups, so slicing makes no collective call.
"""
from __future__ import annotations

import numpy as np

from .process_group import _world, get_rank, init_process_group, is_initialized, new_group

__all__ = ["DeviceMesh", "init_device_mesh"]


class MeshError(RuntimeError, ValueError):
    """A bad mesh description: PyTorch's RuntimeError, and the ValueError Lucid raised before."""


class DeviceMesh:
    """Global ranks arranged as an n-D mesh (``mesh``), with named dimensions and a group per dimension.

    Build it with :func:`init_device_mesh`; ``DeviceMesh(device_type, mesh)`` works too (every
    rank of the world must make it). ``device_type`` is recorded only: Lucid's collectives
    run on MPI, on host memory.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> mesh = dist.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))  # doctest: +SKIP
    >>> mesh["dp"].size(), mesh.get_local_rank("tp")                             # doctest: +SKIP
    (2, 1)
    """

    def __init__(self, device_type, mesh, *, mesh_dim_names=None, _init_backend=True, _groups=None):
        api = "DeviceMesh"
        arr = np.asarray(mesh.numpy() if hasattr(mesh, "numpy") else mesh)
        if arr.dtype.kind not in "iu" or arr.ndim == 0:
            raise ValueError(f"{api}: mesh must be an n-D array of integer ranks, got {arr!r}")
        arr = arr.astype(np.int64)
        if len(set(arr.ravel().tolist())) != arr.size:
            raise ValueError(f"{api}: mesh {arr.tolist()} has a repeated rank")
        names = None if mesh_dim_names is None else tuple(mesh_dim_names)
        if names is not None and (len(names) != arr.ndim or len(set(names)) != len(names)):
            # PyTorch raises RuntimeError for a repeated name; ValueError kept for earlier callers
            raise MeshError(f"{api}: mesh_dim_names {names} must be {arr.ndim} distinct names, one per dimension")
        self.device_type, self._mesh, self.mesh_dim_names = str(device_type), arr, names
        if _groups is not None:
            self._groups = list(_groups)
            return
        world = _world(api)
        if arr.max() >= world.size() or arr.min() < 0:
            raise ValueError(f"{api}: mesh {arr.tolist()} names ranks outside the world of {world.size()}")
        self._groups = [_dim_group(arr, d) for d in range(arr.ndim)]

    @property
    def mesh(self):
        """The global ranks, as an int64 tensor."""
        from .. import tensor

        return tensor(self._mesh.copy())

    @property
    def ndim(self):
        return self._mesh.ndim

    @property
    def shape(self):
        return tuple(self._mesh.shape)

    def size(self, mesh_dim=None):
        """The number of ranks in the mesh, or along ``mesh_dim``."""
        return int(self._mesh.size) if mesh_dim is None else int(self._mesh.shape[self._dim(mesh_dim, "size")])

    def _dim(self, mesh_dim, api):
        if isinstance(mesh_dim, str):
            if not self.mesh_dim_names or mesh_dim not in self.mesh_dim_names:
                raise KeyError(f"DeviceMesh.{api}: no dimension named {mesh_dim!r}; the names are "
                               f"{self.mesh_dim_names}")
            return self.mesh_dim_names.index(mesh_dim)
        if isinstance(mesh_dim, bool) or not isinstance(mesh_dim, int) or not -self.ndim <= mesh_dim < self.ndim:
            raise IndexError(f"DeviceMesh.{api}: mesh_dim {mesh_dim!r} is out of range for a {self.ndim}-D mesh")
        return mesh_dim % self.ndim

    def get_group(self, mesh_dim=None):
        """The process group along ``mesh_dim`` (an index or a name; optional for a 1-D mesh)."""
        if mesh_dim is None:
            if self.ndim != 1:
                raise RuntimeError(f"DeviceMesh.get_group: the mesh has {self.ndim} dimensions; pass mesh_dim")
            mesh_dim = 0
        return self._groups[self._dim(mesh_dim, "get_group")]

    def get_all_groups(self):
        return list(self._groups)

    def get_rank(self):
        """This process's global rank."""
        return get_rank()

    def get_coordinate(self):
        """This rank's index in the mesh, a tuple as PyTorch's (None when it is not in it)."""
        where = np.argwhere(self._mesh == get_rank())
        return None if not len(where) else tuple(int(i) for i in where[0])

    def get_local_rank(self, mesh_dim=None):
        """This rank's position along ``mesh_dim`` (its rank in that dimension's group)."""
        if mesh_dim is None:
            if self.ndim != 1:
                raise RuntimeError(f"DeviceMesh.get_local_rank: the mesh has {self.ndim} dimensions; pass mesh_dim")
            mesh_dim = 0
        coord = self.get_coordinate()
        if coord is None:
            raise RuntimeError(f"DeviceMesh.get_local_rank: rank {get_rank()} is not in the mesh")
        return coord[self._dim(mesh_dim, "get_local_rank")]

    def __getitem__(self, names):
        """The sub-mesh of this rank along the named dimension(s) (NOTE [Mesh groups])."""
        names = (names,) if isinstance(names, str) else tuple(names)
        if not self.mesh_dim_names:
            raise RuntimeError("DeviceMesh: can't slice a mesh without mesh_dim_names")
        dims = [self._dim(n, "__getitem__") for n in names]
        if len(set(dims)) != len(dims):
            raise ValueError(f"DeviceMesh: repeated dimension in {names}")
        coord = self.get_coordinate()
        if coord is None:
            raise RuntimeError(f"DeviceMesh: rank {get_rank()} is not in the mesh")
        index = tuple(slice(None) if d in dims else coord[d] for d in range(self.ndim))
        kept = [d for d in range(self.ndim) if d in dims]
        sub = np.transpose(self._mesh[index], [kept.index(d) for d in dims])
        return DeviceMesh(self.device_type, sub, mesh_dim_names=names, _groups=[self._groups[d] for d in dims])

    def _line(self, dim):
        """The 1-D mesh of this rank's slice along dimension ``dim`` (its group; no collective call)."""
        if self.ndim == 1:
            return self
        lines = self.__dict__.setdefault("_lines", {})
        if dim not in lines:
            coord = self.get_coordinate()
            index = tuple(slice(None) if d == dim else coord[d] for d in range(self.ndim))
            names = None if self.mesh_dim_names is None else (self.mesh_dim_names[dim],)
            lines[dim] = DeviceMesh(self.device_type, self._mesh[index], mesh_dim_names=names,
                                    _groups=[self._groups[dim]])
        return lines[dim]

    def __deepcopy__(self, memo):
        return self  # its groups are communicators: a copied module or DTensor shares them

    def __repr__(self):
        names = "" if self.mesh_dim_names is None else f", mesh_dim_names={self.mesh_dim_names}"
        return f"DeviceMesh('{self.device_type}', {self._mesh.tolist()}{names})"

    def __eq__(self, other):
        return (isinstance(other, DeviceMesh) and np.array_equal(self._mesh, other._mesh)
                and self.mesh_dim_names == other.mesh_dim_names)

    def __hash__(self):
        return hash((tuple(self._mesh.ravel().tolist()), self._mesh.shape, self.mesh_dim_names))


def _dim_group(arr, d):
    """Every rank makes the group of every slice along ``d``; keeps its own (NOTE [Mesh groups])."""
    me, mine = get_rank(), None
    lines = np.moveaxis(arr, d, -1).reshape(-1, arr.shape[d])
    for line in lines:
        g = new_group([int(r) for r in line])
        if me in line:
            mine = g
    return mine


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, backend_override=None):
    """A :class:`DeviceMesh` of ``mesh_shape`` over ranks ``0 .. world-1`` in row-major order.

    Starts the default process group first if needed. ``prod(mesh_shape)`` must be the world size.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> mesh = dist.init_device_mesh("cpu", (1,), mesh_dim_names=("dp",))   # doctest: +SKIP
    >>> mesh                                                               # doctest: +SKIP
    DeviceMesh('cpu', [0], mesh_dim_names=('dp',))
    """
    api = "init_device_mesh"
    shape = tuple(int(s) for s in ((mesh_shape,) if isinstance(mesh_shape, int) else mesh_shape))
    if mesh_dim_names is not None and len(tuple(mesh_dim_names)) != len(shape):
        raise RuntimeError(f"{api}: mesh_dim_names {tuple(mesh_dim_names)} must have one name per dimension "
                           f"of mesh_shape {shape}")
    if not is_initialized():
        init_process_group("mpi")
    n = _world(api).size()
    if int(np.prod(shape)) != n:
        raise RuntimeError(f"{api}: mesh_shape {shape} holds {int(np.prod(shape))} ranks, but the world has {n}")
    return DeviceMesh(device_type, np.arange(n).reshape(shape), mesh_dim_names=mesh_dim_names)
