"""``DTensor``: a global tensor laid out over a :class:`DeviceMesh`, and the ways to make one.

NOTE [DTensor layout]
A DTensor is a Tensor subclass that holds this rank's piece (``_local_tensor``, a plain
tensor carrying the autograd graph, NOTE [DTensor gradients]) and a spec: the mesh, one
placement per mesh dimension and the global shape. ``shape``/``size()``/``ndim``/``numel()``
are global; ``_data``, ``_version`` and ``_grad`` are the local tensor's, so code that works
on arrays in place (optimizers, ``zero_grad``) updates the piece, as PyTorch's DTensor
optimizers do. Every public function called with a DTensor comes to ``__torch_function__``
(NOTE [Torch function]), which ``_dispatch.py`` answers with the sharding rules.
"""
from __future__ import annotations

from ..._core.size import Size
from ..._core.tensor import Tensor
from ..device_mesh import DeviceMesh
from ._redistribute import _Regrad, grad_placement, move_nd, redistribute_nd
from .placement_types import Placement, Replicate, Shard

__all__ = ["DTensor", "distribute_tensor", "distribute_module"]


def _check_mesh(api, mesh):
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"{api}: device_mesh must be a DeviceMesh, got {type(mesh).__name__}")
    if mesh.get_coordinate() is None:
        raise RuntimeError(f"{api}: this rank is not in {mesh!r}")


def _normalize(api, placements, mesh, ndim):
    """``placements`` as a tuple with non-negative shard dims, checked against the mesh and ``ndim``."""
    if isinstance(placements, Placement):
        placements = (placements,)
    placements = tuple(placements)
    if len(placements) != mesh.ndim:
        raise ValueError(f"{api}: `placements` must have the same length as `device_mesh.ndim`! Found placements "
                         f"length: {len(placements)}, and device_mesh.ndim: {mesh.ndim}.")
    out = []
    for p in placements:
        if not isinstance(p, Placement):
            raise TypeError(f"{api}: placements must be Shard, Replicate or Partial, got {p!r}")
        if p.is_shard():
            if not -ndim <= p.dim < ndim:
                raise IndexError(f"{api}: {p!r} is out of range for a tensor of {ndim} dimensions "
                                 f"(placements {placements})")
            p = Shard(p.dim % ndim)
        out.append(p)
    return tuple(out)


class DTensor(Tensor):
    """A tensor whose value is spread over the ranks of a device mesh by its ``placements``.

    Make one with :func:`distribute_tensor` (from a global tensor) or :meth:`DTensor.from_local`
    (from this rank's piece). Ops on DTensors follow PyTorch's sharding rules (elementwise,
    ``matmul``/``mm``/``linear``, ``sum``/``mean``, ``view``/``reshape``/``transpose``); any other
    op gathers its DTensor arguments to ``Replicate`` first (correct, and slower). Gradients
    flow through ``from_local``, ``to_local``, ``redistribute`` and ``full_tensor``; ``x.grad``
    has ``x``'s placements (a ``Partial`` value's gradient is ``Replicate``; NOTE [DTensor
    gradients]). On an n-D mesh (one placement per mesh dim) ops follow NOTE [Ops on n-D meshes].

    Examples
    --------
    >>> import lucid, lucid.distributed as dist
    >>> from lucid.distributed.tensor import Shard, distribute_tensor
    >>> mesh = dist.init_device_mesh("cpu", (2,))                          # doctest: +SKIP
    >>> x = distribute_tensor(lucid.arange(10.0).reshape(5, 2), mesh, [Shard(0)])  # doctest: +SKIP
    >>> x.shape, x.to_local().shape                                       # doctest: +SKIP
    (lucid.Size([5, 2]), lucid.Size([3, 2]))
    """

    _local_tensor = None
    _spec = None  # (mesh, placements, global shape)

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        from ._dispatch import dispatch

        return dispatch(func, args, kwargs or {})

    def __init__(self, *args, **kwargs):
        raise TypeError("DTensor: build one with distribute_tensor(tensor, mesh, placements) or "
                        "DTensor.from_local(local, mesh, placements)")

    @staticmethod
    def _make(local, mesh, placements, shape, cls=None):
        from ... import overrides

        overrides._activate()  # the protocol may have been switched off since the class was made
        dt = object.__new__(cls or DTensor)
        dt._local_tensor = local
        dt._spec = (mesh, tuple(placements), tuple(int(s) for s in shape))
        return dt

    # ----------------------------------------------------------- layout
    @property
    def placements(self):
        return self._spec[1]

    @property
    def device_mesh(self):
        return self._spec[0]

    @property
    def shape(self):
        return Size(self._spec[2])

    def size(self, dim=None):
        if dim is None:
            return self.shape
        nd = len(self._spec[2])
        if not -nd <= dim < nd:
            raise IndexError(f"size: Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], "
                             f"but got {dim})")
        return self._spec[2][dim]

    @property
    def ndim(self):
        return len(self._spec[2])

    def dim(self):
        return self.ndim

    def numel(self):
        n = 1
        for s in self._spec[2]:
            n *= s
        return n

    nelement = numel

    def stride(self, dim=None):
        out, acc = [], 1
        for s in reversed(self._spec[2]):
            out.append(acc)
            acc *= max(s, 1)
        out = tuple(reversed(out))
        return out if dim is None else out[dim]

    def is_contiguous(self, memory_format=None):
        return True

    def __len__(self):
        if not self._spec[2]:
            raise TypeError("len() of a 0-d tensor")
        return self._spec[2][0]

    @property
    def dtype(self):
        return self._local_tensor.dtype

    @property
    def device(self):
        return self._local_tensor.device

    @property
    def is_cpu(self):
        return self._local_tensor.is_cpu

    # the local piece's array, version and gradient (NOTE [DTensor layout])
    @property
    def _data(self):
        return self._local_tensor._data

    @_data.setter
    def _data(self, value):
        self._local_tensor._data = value

    @property
    def _version(self):
        return self._local_tensor._version

    # ----------------------------------------------------------- autograd
    @property
    def requires_grad(self):
        return self._local_tensor.requires_grad

    @requires_grad.setter
    def requires_grad(self, flag):
        self._local_tensor.requires_grad = flag

    @property
    def _rg(self):
        return self._local_tensor._rg

    def requires_grad_(self, requires_grad=True):
        self.requires_grad = requires_grad
        return self

    @property
    def is_leaf(self):
        return self._local_tensor.is_leaf

    @property
    def grad_fn(self):
        return self._local_tensor.grad_fn

    @grad_fn.setter
    def grad_fn(self, value):
        if value is not None:
            raise RuntimeError("grad_fn: can't set the grad_fn of a DTensor")

    def _grad_spec(self):
        return tuple(grad_placement(p) for p in self.placements)

    @property
    def _grad(self):
        g = self._local_tensor._grad
        return None if g is None else DTensor._make(g, self.device_mesh, self._grad_spec(), self._spec[2])

    @_grad.setter
    def _grad(self, value):
        self.grad = value

    @property
    def grad(self):
        g = self._local_tensor.grad
        return None if g is None else DTensor._make(g, self.device_mesh, self._grad_spec(), self._spec[2])

    @grad.setter
    def grad(self, value):
        if value is None:
            self._local_tensor._grad = None
            return
        if not isinstance(value, DTensor) or value.device_mesh != self.device_mesh \
                or tuple(value.shape) != tuple(self.shape):
            raise RuntimeError(f"grad: assigned grad must be a DTensor of shape {tuple(self.shape)} on "
                               f"{self.device_mesh!r}")
        want = self._grad_spec()
        local = value._local_tensor
        if value.placements != want:
            local = redistribute_nd(local.detach(), self.device_mesh, self._spec[2], value.placements, want)
        self._local_tensor._grad = local

    # lucid.autograd.grad's protocol for layouts (lucid/autograd/grad.py): the local piece
    # carries the graph; the gradient comes back as a DTensor of the gradient placements
    def _grad_carrier(self):
        return self._local_tensor

    def _grad_wrap(self, g):
        return DTensor._make(g, self.device_mesh, self._grad_spec(), self._spec[2])

    @property
    def data(self):
        return DTensor._make(self._local_tensor.detach(), *self._spec)

    def retain_grad(self):
        self._local_tensor.retain_grad()

    def register_hook(self, hook):
        """``hook(grad)`` sees (and may replace) the gradient as a DTensor of the gradient placements."""
        mesh, spec, shape = self.device_mesh, self._grad_spec(), self._spec[2]

        def local_hook(g):
            out = hook(DTensor._make(g, mesh, spec, shape))
            return None if out is None else out.redistribute(placements=spec)._local_tensor

        return self._local_tensor.register_hook(local_hook)

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Backpropagate from this DTensor (a scalar, or with a DTensor ``gradient`` of its shape)."""
        import lucid

        if gradient is None:
            if self.numel() != 1:
                raise RuntimeError("backward: grad can be implicitly created only for scalar outputs")
            local = lucid.ones_like(self._local_tensor)  # a Shard piece holds the element or nothing
        else:
            if not isinstance(gradient, DTensor) or tuple(gradient.shape) != tuple(self.shape):
                raise RuntimeError(f"backward: the gradient of a DTensor must be a DTensor of shape "
                                   f"{tuple(self.shape)}")
            local = redistribute_nd(gradient._local_tensor, self.device_mesh, self._spec[2], gradient.placements,
                                    self._grad_spec())
        if inputs is not None:
            inputs = [i._local_tensor if isinstance(i, DTensor) else i for i in inputs]
        self._local_tensor.backward(local, retain_graph, create_graph, inputs)

    @staticmethod
    def _as_parameter_of(dt, requires_grad):
        """``nn.Parameter(dt)`` (``Parameter.__new__`` asks the data's class): a DTensor parameter."""
        from .parameter import as_parameter

        return as_parameter(dt, requires_grad)

    # ----------------------------------------------------------- conversions
    @staticmethod
    def from_local(local_tensor, device_mesh=None, placements=None, *, run_check=False, shape=None, stride=None):
        """A DTensor whose piece on this rank is ``local_tensor`` (no communication unless ``run_check``).

        Without ``shape`` the global shape assumes even shards (``local size * ranks`` along a
        sharded dimension), as PyTorch's; pass ``shape`` for uneven ones. Gradients reach
        ``local_tensor`` in ``placements`` (Replicate for Partial; NOTE [DTensor gradients]).

        Examples
        --------
        >>> x = DTensor.from_local(lucid.ones(2, 3), mesh, [Shard(0)])   # doctest: +SKIP
        >>> x.shape                                                      # doctest: +SKIP
        lucid.Size([4, 3])
        """
        api = "DTensor.from_local"
        if not isinstance(local_tensor, Tensor) or isinstance(local_tensor, DTensor):
            raise TypeError(f"{api}: local_tensor must be a plain Tensor, got {type(local_tensor).__name__}")
        if device_mesh is None:
            raise ValueError(f"{api}: pass device_mesh")
        _check_mesh(api, device_mesh)
        placements = (Replicate(),) * device_mesh.ndim if placements is None else placements
        placements = _normalize(api, placements, device_mesh, local_tensor.ndim)
        if shape is None:
            shape = list(local_tensor.shape)
            for i, p in enumerate(placements):
                if p.is_shard():
                    shape[p.dim] *= device_mesh.size(i)
        shape = tuple(int(s) for s in shape)
        _check_local_shape(api, local_tensor, device_mesh, placements, shape)
        local = local_tensor.view_as(local_tensor)  # a view: shares storage, joins the graph
        if run_check:
            from .. import collectives as C

            for i, p in enumerate(placements):
                if p.is_replicate():
                    line = device_mesh._line(i)
                    C.broadcast(local.detach(), src=int(line.mesh[0]), group=line.get_group())
        return DTensor._make(local, device_mesh, placements, shape)

    def to_local(self, *, grad_placements=None):
        """This rank's piece, a plain tensor in the graph.

        Its gradient is read as ``grad_placements`` (default: this DTensor's placements) and
        moved to the gradient placement of this DTensor (NOTE [DTensor gradients]).
        """
        want = self._grad_spec()
        given = self.placements if grad_placements is None else _normalize(
            "DTensor.to_local", grad_placements, self.device_mesh, self.ndim)
        if given == want or not self._local_tensor.requires_grad:
            return self._local_tensor.view_as(self._local_tensor)
        return _Regrad.apply(self._local_tensor, self.device_mesh, self._spec[2], given, self.placements)

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False, forward_dtype=None,
                     backward_dtype=None):
        """The same global value placed as ``placements`` (Shard/Replicate; Partial only where it already is).

        Examples
        --------
        >>> y = x.redistribute(mesh, [Replicate()])   # doctest: +SKIP
        """
        api = "DTensor.redistribute"
        mesh = self.device_mesh if device_mesh is None else device_mesh
        if mesh != self.device_mesh:
            raise NotImplementedError(f"{api}: moving between meshes ({self.device_mesh!r} -> {mesh!r}) is not "
                                      "supported")
        if placements is None:
            raise RuntimeError(f"{api}: placements is needed for redistribute!")
        placements = _normalize(api, placements, mesh, self.ndim)
        for src, dst in zip(self.placements, placements):
            if dst.is_partial() and src != dst:
                raise RuntimeError(f"{api}: Can not redistribute from {src} to {dst}, redistributing to Partial "
                                   "is for internal use only!")
        local = move_nd(self._local_tensor, mesh, self._spec[2], self.placements, placements)
        return DTensor._make(local, mesh, placements, self._spec[2])

    def full_tensor(self, *, grad_placements=None):
        """The whole global value on every rank, as a plain tensor (a differentiable all-gather/all-reduce)."""
        return self.redistribute(placements=[Replicate()] * self.device_mesh.ndim).to_local(
            grad_placements=grad_placements)

    # ----------------------------------------------------------- printing, copying
    def __repr__(self):
        return (f"DTensor(local_tensor={self._local_tensor!r}, device_mesh={self.device_mesh!r}, "
                f"placements={self.placements})")

    __str__ = __repr__

    def __deepcopy__(self, memo):
        import copy

        if id(self) in memo:
            return memo[id(self)]
        local = copy.deepcopy(self._local_tensor, memo)
        out = DTensor._make(local, *self._spec, cls=type(self))
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, protocol):
        raise TypeError("pickle: a DTensor can't be pickled; save full_tensor() or to_local()")

    def __array__(self, dtype=None, copy=None):
        raise RuntimeError("numpy: a DTensor has no single array; call full_tensor() or to_local() first")

    def numpy(self, *, force=False):
        raise RuntimeError("numpy: a DTensor has no single array; call full_tensor() or to_local() first")


def _broadcast_from(full, mesh, index):
    """Rank ``index`` of ``mesh`` (flat, row-major) sends ``full`` to every rank, one mesh dim at a
    time: after the step along dim ``d`` every rank that agrees with the source on the dims after
    ``d`` holds it (one broadcast on a 1-D mesh)."""
    from .. import collectives as C

    coord = [int(c) for c in __import__("numpy").unravel_index(index, mesh.shape)]
    for d in range(mesh.ndim):
        line = mesh._line(d)
        C.broadcast(full, src=int(line.mesh[coord[d]]), group=line.get_group())


def _check_local_shape(api, local, mesh, placements, shape):
    if len(shape) != local.ndim:
        raise ValueError(f"{api}: shape {tuple(shape)} has {len(shape)} dimensions, the local tensor {local.ndim}")


def _as_parameter(dt):
    from .parameter import DTensorParameter

    return DTensor._make(dt._local_tensor, *dt._spec, cls=DTensorParameter)


def distribute_tensor(tensor, device_mesh=None, placements=None, *, src_data_rank=0):
    """``tensor`` spread over ``device_mesh`` as ``placements`` (a new leaf DTensor).

    Parameters
    ----------
    tensor : Tensor
        The global value (every rank passes one of the same shape).
    device_mesh : DeviceMesh
        A 1-D mesh.
    placements : sequence of Placement, optional
        ``[Shard(d)]``, ``[Replicate()]`` (default) or ``[Partial()]`` (each rank holds
        ``tensor / ranks``, as PyTorch splits a value into pieces of a sum).
    src_data_rank : int or None
        The rank whose values are used (broadcast first, as PyTorch's); ``None`` uses each
        rank's own ``tensor`` without communicating.

    Examples
    --------
    >>> from lucid.distributed.tensor import Shard, distribute_tensor
    >>> x = distribute_tensor(lucid.ones(5, 2), mesh, [Shard(0)])   # doctest: +SKIP
    >>> x.to_local().shape   # on rank 1 of 3                       # doctest: +SKIP
    lucid.Size([2, 2])
    """
    api = "distribute_tensor"
    if isinstance(tensor, DTensor):  # PyTorch hands back a DTensor that is already laid out so
        if tensor.device_mesh != device_mesh or tensor.placements != _normalize(
                api, (Replicate(),) * tensor.device_mesh.ndim if placements is None else placements,
                tensor.device_mesh, tensor.ndim):
            raise ValueError(f"{api}: tensor is already a DTensor on {tensor.device_mesh!r} with placements "
                             f"{tensor.placements}; call redistribute to change them")
        return tensor
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{api}: tensor must be a Tensor, got {type(tensor).__name__}")
    if device_mesh is None:
        raise ValueError(f"{api}: pass device_mesh")
    _check_mesh(api, device_mesh)
    placements = (Replicate(),) * device_mesh.ndim if placements is None else placements
    placements = _normalize(api, placements, device_mesh, tensor.ndim)
    full = tensor.detach()
    if src_data_rank is not None:
        full = full.contiguous().clone()
        _broadcast_from(full, device_mesh, src_data_rank)
    local = redistribute_nd(full, device_mesh, tuple(tensor.shape), (Replicate(),) * device_mesh.ndim, placements)
    if tensor.requires_grad:
        local.requires_grad_(True)
    return DTensor._make(local, device_mesh, placements, tuple(tensor.shape))


def distribute_module(module, device_mesh=None, partition_fn=None, input_fn=None, output_fn=None):
    """Turn ``module``'s parameters into DTensors and hook its inputs and outputs, as PyTorch's.

    ``partition_fn(name, submodule, device_mesh)`` runs on every submodule (it replaces
    parameters with DTensors itself); without it every parameter and buffer becomes a
    ``Replicate`` DTensor. ``input_fn(module, inputs, device_mesh)`` runs before each forward
    (its result, if not None, replaces the inputs) and ``output_fn(module, outputs,
    device_mesh)`` after (its result replaces the outputs).

    Examples
    --------
    >>> from lucid.distributed.tensor import distribute_module
    >>> model = distribute_module(lucid.nn.Linear(3, 2), mesh)   # doctest: +SKIP
    >>> model.weight.placements                                 # doctest: +SKIP
    (Replicate(),)
    """
    api = "distribute_module"
    if device_mesh is None:
        raise ValueError(f"{api}: pass device_mesh")
    _check_mesh(api, device_mesh)
    if getattr(module, "_distribute_module_applied", False):
        raise RuntimeError(f"{api}: distribute_module should only be called once on a module, but it has "
                           "already been called on this module!")
    for name, sub in module.named_modules():
        if partition_fn is not None:
            partition_fn(name, sub, device_mesh)
        replicate_module_params(sub, device_mesh)  # PyTorch replicates what partition_fn left alone
    if input_fn is not None:
        module.register_forward_pre_hook(lambda mod, inputs: input_fn(mod, inputs, device_mesh))
    if output_fn is not None:
        module.register_forward_hook(lambda mod, inputs, outputs: output_fn(mod, outputs, device_mesh))
    module._distribute_module_applied = True
    return module


def replicate_module_params(sub, mesh):
    """Every direct parameter of ``sub`` that is not a DTensor yet becomes a ``Replicate`` one."""
    for key, p in list(sub._parameters.items()):
        if p is not None and not isinstance(p, DTensor):
            sub.register_parameter(key, _as_parameter(distribute_tensor(_param_value(p), mesh, [Replicate()])))
    for key, b in list(sub._buffers.items()):
        if b is not None and not isinstance(b, DTensor):
            sub._buffers[key] = distribute_tensor(b, mesh, [Replicate()])


def _param_value(p):
    """A parameter's value as a tensor that requires grad as the parameter does."""
    t = p.detach()
    if p.requires_grad:
        t.requires_grad_(True)
    return t
