"""``fully_shard`` (PyTorch's FSDP2): parameters as ``Shard(0)`` DTensors, gathered per module.

NOTE [FSDP2 groups]
One ``fully_shard(module)`` call makes one group: the parameters of ``module`` that no
earlier call (on a submodule) took. Each becomes a ``DTensorParameter`` sharded on dim 0
(``shard_placement_fn`` may pick another dim) over a 1-D mesh, made from this rank's own
values (no broadcast, as PyTorch's). A forward pre-hook all-gathers the group through
``_Unshard`` (one differentiable Function per parameter: forward all-gather and the cast to
``param_dtype``, backward the reduce-scatter in ``reduce_dtype``, averaged over the mesh)
and registers the gathered tensors in the modules' ``_parameters`` for the forward; a
forward hook puts the sharded parameters back. The gradient reaches the local piece of each
sharded parameter, so ``p.grad`` is a ``Shard(0)`` DTensor and any optimizer steps on the
pieces. Every rank runs the same modules in the same order, so the collectives match.

NOTE [FSDP2 reshard after forward]
With ``reshard_after_forward`` the gathered arrays are dropped after the forward (the graph
keeps the gathered Tensors, which read their arrays only when a rule runs; see NOTE [FSDP
backward]) and a hook on the module's outputs gathers them again when the backward reaches
the module, before any rule inside it runs. A module called twice gathers twice; each call
refills its own tensors.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...autograd.engine import queue_callback
from ...autograd.function import Function
from ..._core.grad_mode import no_grad
from ..._core.tensor import Tensor
from ...nn.module import Module

# ``lucid.distributed.tensor`` is imported on first use only: loading DTensor switches on the
# ``__torch_function__`` wrappers for every call (NOTE [Torch function]), which FSDP1 users
# and plain imports of this package must not pay for.

__all__ = ["fully_shard", "FSDPModule", "MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy",
           "UnshardHandle", "register_fsdp_forward_method"]

_API = "fully_shard"


class FullyShardError(RuntimeError, AssertionError):
    """``fully_shard`` applied twice: PyTorch raises AssertionError; a RuntimeError by Lucid's habit."""


@dataclass(frozen=True)
class MixedPrecisionPolicy:
    """Dtypes of FSDP2's gathered parameters (``param_dtype``), of the gradient reduction
    (``reduce_dtype``) and of the forward's floating outputs (``output_dtype``); ``None`` keeps
    the dtype. ``cast_forward_inputs`` casts floating inputs to ``param_dtype``. The sharded
    parameters (what the optimizer updates) keep their own dtype.

    Examples
    --------
    >>> from lucid.distributed.fsdp import MixedPrecisionPolicy
    >>> MixedPrecisionPolicy(param_dtype=lucid.float32).reduce_dtype is None
    True
    """

    param_dtype: object = None
    reduce_dtype: object = None
    output_dtype: object = None
    cast_forward_inputs: bool = True


@dataclass
class OffloadPolicy:
    """No offloading (PyTorch's default policy)."""


@dataclass
class CPUOffloadPolicy(OffloadPolicy):
    """Accepted for PyTorch compatibility: Lucid's MPI ranks keep parameters in host memory already."""

    pin_memory: bool = True


class UnshardHandle:
    """What ``unshard(async_op=True)`` returns; the gather has finished already, ``wait()`` returns at once."""

    def wait(self):
        return None


class _Entry:
    """One sharded parameter: where it is registered, its shard dim and its pending unsynced gradient."""

    __slots__ = ("param", "owners", "dim", "pending")

    def __init__(self, param, owners, dim):
        self.param, self.owners, self.dim, self.pending = param, owners, dim, None

    def register(self, value):
        for module, name in self.owners:
            module._parameters[name] = value

    def gathered_array(self, dtype):
        from ..tensor._redistribute import Replicate, Shard, redistribute_local

        p = self.param
        full = redistribute_local(p._local_tensor.detach(), p.device_mesh, p._spec[2], Shard(self.dim), Replicate())
        return full if dtype is None else full.to(dtype)


class _Unshard(Function):
    """All-gather one parameter (cast to ``param_dtype``); backward: reduce-scatter its gradient (NOTE [FSDP2 groups])."""

    @staticmethod
    def forward(ctx, local, group, entry):
        ctx.group, ctx.entry = group, entry
        return entry.gathered_array(group.mp.param_dtype)

    @staticmethod
    def backward(ctx, grad):
        return ctx.group.reduce(ctx.entry, grad), None, None


class _Group:
    """The state of one ``fully_shard`` call (NOTE [FSDP2 groups])."""

    def __init__(self, module, mesh, entries, reshard_after_forward, mp):
        self.module, self.mesh, self.entries, self.mp = module, mesh, entries, mp
        self.reshard_after_forward = reshard_after_forward  # None: decided at the first forward
        self.reshard_after_backward, self.sync, self.divide = True, True, None
        self.is_root = None
        self.explicit = None  # the gathered tensors of a user's ``unshard()``

    # ------------------------------------------------------------ gathers
    def gather(self):
        return [_Unshard.apply(e.param._local_tensor, self, e) for e in self.entries]

    def reshard(self):
        self.explicit = None
        for e in self.entries:
            e.register(e.param)

    def show_shards(self, *hook_args):
        """Register the shards (also a state-dict and load pre-hook: bound, so deepcopy rebinds it)."""
        for e in self.entries:
            e.register(e.param)

    def refill(self, fulls):
        """Gather again the arrays dropped after the forward (NOTE [FSDP2 reshard after forward])."""
        with no_grad():
            for e, full in zip(self.entries, fulls):
                full._data = e.gathered_array(self.mp.param_dtype)._data

    def reduce(self, entry, grad):
        if entry.pending is not None:
            grad = grad + entry.pending
            entry.pending = None
        if self.reshard_after_backward and self.explicit is None:
            entry.register(entry.param)
        if not self.sync:
            entry.pending = grad  # accumulated unsharded until a synchronised backward
            return None
        from ..tensor._redistribute import Partial, Shard, redistribute_local

        p = entry.param
        if self.mp.reduce_dtype is not None:
            grad = grad.to(self.mp.reduce_dtype)
        op = Partial("avg") if self.divide is None else Partial("sum")
        out = redistribute_local(grad, p.device_mesh, p._spec[2], op, Shard(entry.dim))
        if self.divide is not None:
            out = out / self.divide
        return out.to(p.dtype)

    # ------------------------------------------------------------ hooks
    def pre_forward(self, module, args, kwargs):
        if self.is_root is None:
            self.is_root = not _FORWARD_DEPTH[0]
            if self.reshard_after_forward is None:
                self.reshard_after_forward = not self.is_root
        _FORWARD_DEPTH[0] += 1
        fulls = self.explicit if self.explicit is not None else self.gather()
        for e, full in zip(self.entries, fulls):
            e.register(full)
        module.__dict__["_fsdp_fulls"] = fulls
        dtype = self.mp.param_dtype
        if dtype is not None and self.mp.cast_forward_inputs:
            args, kwargs = _cast((args, kwargs), dtype)
        return args, kwargs

    def post_forward(self, module, args, kwargs, output):
        _FORWARD_DEPTH[0] -= 1
        fulls = module.__dict__.pop("_fsdp_fulls", None)
        if self.mp.output_dtype is not None:
            output = _cast(output, self.mp.output_dtype)
        on_backward = [lambda: queue_callback(self.finish_backward)] if self.is_root else []
        if self.explicit is None and self.reshard_after_forward:
            for e in self.entries:
                e.register(e.param)
            if fulls and any(f.requires_grad for f in fulls):
                empty = [f._data[:0].copy() for f in fulls]  # a copy: a view would keep the whole array
                for f, a in zip(fulls, empty):
                    f._data = a
                on_backward.insert(0, lambda: self.refill(fulls))
        if on_backward:
            _hook_outputs(output, lambda: [fn() for fn in on_backward])
        return output

    def finish_backward(self):
        """The root's end of backward: every group left gathered (unused parameters, a root that
        kept its parameters after the forward) registers its shards again, as PyTorch's."""
        for m in self.module.modules():
            g = m.__dict__.get("_fsdp_group")
            if g is not None and g.explicit is None and g.reshard_after_backward:
                g.reshard()


_FORWARD_DEPTH = [0]


def _cast(tree, dtype):
    if isinstance(tree, Tensor):
        return tree.to(dtype) if tree.is_floating_point() and tree.dtype != dtype else tree
    if isinstance(tree, (list, tuple)):
        out = [_cast(t, dtype) for t in tree]
        return type(tree)(*out) if hasattr(tree, "_fields") else type(tree)(out)
    if isinstance(tree, dict):
        return {k: _cast(v, dtype) for k, v in tree.items()}
    return tree


def _tensors(tree):
    if isinstance(tree, Tensor):
        yield tree
    elif isinstance(tree, (list, tuple)):
        for t in tree:
            yield from _tensors(t)
    elif isinstance(tree, dict):
        for t in tree.values():
            yield from _tensors(t)


def _hook_outputs(output, refill):
    """``refill()`` once, when the backward first reaches one of ``output``'s tensors."""
    done = []

    def hook(grad):
        if not done:
            done.append(True)
            refill()

    for t in _tensors(output):
        if t.requires_grad:
            t.register_hook(hook)


class FSDPModule:
    """The methods ``fully_shard`` adds to a module (its class becomes ``FSDP<Original>``).

    Examples
    --------
    >>> from lucid.distributed.fsdp import FSDPModule, fully_shard
    >>> model = fully_shard(lucid.nn.Linear(4, 2))   # doctest: +SKIP
    >>> isinstance(model, FSDPModule), type(model).__name__   # doctest: +SKIP
    (True, 'FSDPLinear')
    """

    def _groups(self, recurse):
        mods = self.modules() if recurse else [self]
        return [m.__dict__["_fsdp_group"] for m in mods if "_fsdp_group" in m.__dict__]

    def unshard(self, async_op=False):
        """Gather this module's parameters now and keep them registered until ``reshard()``."""
        group = self.__dict__["_fsdp_group"]
        if group.explicit is None:
            group.explicit = group.gather()
            for e, full in zip(group.entries, group.explicit):
                e.register(full)
        return UnshardHandle() if async_op else None

    def reshard(self):
        """Register the sharded parameters again (dropping the gathered ones)."""
        self.__dict__["_fsdp_group"].reshard()

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """``False``: gradients accumulate unsharded on each rank until a backward with sync on."""
        for g in self._groups(recurse):
            g.sync = bool(requires_gradient_sync)

    def set_reshard_after_backward(self, reshard_after_backward, *, recurse=True):
        for g in self._groups(recurse):
            g.reshard_after_backward = bool(reshard_after_backward)

    def set_reshard_after_forward(self, reshard_after_forward, recurse=True):
        for g in self._groups(recurse):
            g.reshard_after_forward = _check_reshard(reshard_after_forward, g.mesh)

    def set_gradient_divide_factor(self, factor):
        """Sum the gradients and divide by ``factor`` (instead of averaging over the mesh)."""
        for g in self._groups(True):
            g.divide = float(factor)

    def set_is_last_backward(self, is_last_backward):
        pass  # nothing is prefetched or deferred here

    def set_modules_to_forward_prefetch(self, modules):
        pass  # gathers are blocking: there is nothing to prefetch

    set_modules_to_backward_prefetch = set_modules_to_forward_prefetch


_CLASSES = {}


def _fsdp_class(cls):
    if issubclass(cls, FSDPModule):
        return cls
    if cls not in _CLASSES:
        _CLASSES[cls] = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {"__module__": cls.__module__})
    return _CLASSES[cls]


def _check_reshard(value, mesh):
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        n = mesh.size()
        if not (1 < value < n and n % value == 0):
            raise ValueError(f"{_API}: reshard_after_forward={value} must be a non-trivial divisor of the mesh "
                             f"size {n}")
        return True  # pieces of the smaller world are a memory choice; the values are the same
    raise TypeError(f"{_API}: reshard_after_forward must be a bool, an int or None, got {value!r}")


def _mesh(mesh):
    from ..device_mesh import DeviceMesh, init_device_mesh
    from ..process_group import get_world_size

    if mesh is None:
        return init_device_mesh("cpu", (get_world_size(),))
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"{_API}: mesh must be a DeviceMesh, got {type(mesh).__name__}")
    if mesh.ndim != 1:
        raise NotImplementedError(f"{_API}: only 1-D meshes are supported (HSDP needs a 2-D mesh), got a mesh of "
                                  f"shape {mesh.shape}")
    return mesh


def _entries(module, mesh, ignored, shard_placement_fn):
    """Shard every parameter of ``module`` not taken by an inner call (NOTE [FSDP2 groups])."""
    from ..tensor._api import DTensor
    from ..tensor._redistribute import Replicate, Shard, redistribute_local
    from ..tensor.parameter import DTensorParameter

    owners, order = {}, []
    for mod in module.modules():
        for name, p in mod._parameters.items():
            if p is None or id(p) in ignored or getattr(p, "_fsdp_managed", False):
                continue
            if isinstance(p, DTensor):
                raise NotImplementedError(f"{_API}: parameter {name!r} of {type(mod).__name__} is already a DTensor "
                                          f"(placements {p.placements} on {p.device_mesh!r}); FSDP over tensor "
                                          "parallelism (a 2-D mesh) is not supported")
            if id(p) not in owners:
                owners[id(p)] = (p, [])
                order.append(id(p))
            owners[id(p)][1].append((mod, name))
    entries = []
    for key in order:
        p, where = owners[key]
        dim = 0
        if shard_placement_fn is not None:
            got = shard_placement_fn(p)
            if got is not None:
                if not isinstance(got, Shard):
                    raise TypeError(f"{_API}: shard_placement_fn must return a Shard or None, got {got!r}")
                dim = got.dim % max(p.ndim, 1)
        if p.ndim == 0:
            raise ValueError(f"{_API}: can't shard the 0-d parameter {where[0][1]!r} on dim 0")
        local = redistribute_local(p.detach(), mesh, tuple(p.shape), Replicate(), Shard(dim))
        if p.requires_grad:
            local.requires_grad_(True)
        sharded = DTensor._make(local, mesh, [Shard(dim)], tuple(p.shape), cls=DTensorParameter)
        sharded._fsdp_managed = True  # an outer call leaves it to this group
        entry = _Entry(sharded, where, dim)
        entry.register(sharded)
        entries.append(entry)
    return entries


def fully_shard(module, *, mesh=None, reshard_after_forward=None, shard_placement_fn=None,
                mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy(), ignored_params=None):
    """Shard ``module``'s parameters over ``mesh`` as ``Shard(0)`` DTensors (PyTorch's FSDP2).

    Call it bottom-up (each layer, then the root): each call takes the parameters no earlier
    call took (NOTE [FSDP2 groups]). The forward gathers them, the backward averages the
    gradients over the mesh into sharded ``.grad``s; ``module``'s class becomes
    ``FSDP<Original>`` (see :class:`FSDPModule`), and ``state_dict()`` holds DTensors.

    Parameters
    ----------
    module : Module
        Changed in place and returned.
    mesh : DeviceMesh, optional
        A 1-D mesh (default: the whole world).
    reshard_after_forward : bool or int or None
        Drop the gathered parameters after the forward and gather again in the backward
        (``None``: True except for the root module; an int is taken as True).
    shard_placement_fn : callable, optional
        ``fn(param) -> Shard(dim) or None`` (None: ``Shard(0)``).
    mp_policy : MixedPrecisionPolicy
    offload_policy : OffloadPolicy
        Accepted; parameters are host memory already.
    ignored_params : set of Parameter, optional
        Left as they are (not sharded, gradients not reduced).

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> from lucid.distributed.fsdp import fully_shard
    >>> model = lucid.nn.Sequential(lucid.nn.Linear(4, 8), lucid.nn.Linear(8, 2))   # doctest: +SKIP
    >>> for layer in model:                                                      # doctest: +SKIP
    ...     fully_shard(layer)
    >>> fully_shard(model)                                                       # doctest: +SKIP
    >>> model[0].weight.placements                                               # doctest: +SKIP
    (Shard(dim=0),)

    Limitations: 1-D meshes only (no HSDP); gathers are blocking, so prefetching settings
    are accepted and ignored.
    """
    if isinstance(module, (list, tuple)):
        raise NotImplementedError(f"{_API}: a list of modules (one group for several) is not supported; "
                                  "call fully_shard on their common parent")
    if not isinstance(module, Module):
        raise TypeError(f"{_API}: module must be an nn.Module, got {type(module).__name__}")
    if "_fsdp_group" in module.__dict__:
        raise FullyShardError(f"{_API}: fully_shard can only be applied to a module once; it was already applied to "
                              f"this {type(module).__name__}")
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise TypeError(f"{_API}: mp_policy must be a MixedPrecisionPolicy, got {type(mp_policy).__name__}")
    if not isinstance(offload_policy, OffloadPolicy):
        raise TypeError(f"{_API}: offload_policy must be an OffloadPolicy, got {type(offload_policy).__name__}")
    mesh = _mesh(mesh)
    reshard_after_forward = _check_reshard(reshard_after_forward, mesh)
    ignored = {id(p) for p in (ignored_params or ())}
    group = _Group(module, mesh, _entries(module, mesh, ignored, shard_placement_fn), reshard_after_forward,
                   mp_policy)
    module.__dict__["_fsdp_group"] = group
    module.register_forward_pre_hook(group.pre_forward, with_kwargs=True)
    module.register_forward_hook(group.post_forward, with_kwargs=True, always_call=True)
    # state dicts read and load the shards even while the gathered values are registered
    module.register_state_dict_pre_hook(group.show_shards)
    module.register_load_state_dict_pre_hook(group.show_shards)
    module.__class__ = _fsdp_class(type(module))
    return module


def register_fsdp_forward_method(module, method_name):
    """Make ``module.<method_name>()`` gather and reshard as ``forward`` does (PyTorch's helper).

    Examples
    --------
    >>> from lucid.distributed.fsdp import register_fsdp_forward_method
    >>> register_fsdp_forward_method(model, "generate")   # doctest: +SKIP
    """
    if not isinstance(module, FSDPModule):
        return  # PyTorch: a no-op on a module fully_shard did not touch
    group = module.__dict__["_fsdp_group"]
    method = getattr(module, method_name)

    def wrapped(*args, **kwargs):
        args, kwargs = group.pre_forward(module, args, kwargs)
        out = None
        try:
            out = method(*args, **kwargs)
        finally:
            out = group.post_forward(module, args, kwargs, out)
        return out

    setattr(module, method_name, wrapped)
