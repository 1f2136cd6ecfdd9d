"""``FullyShardedDataParallel``: PyTorch's FSDP1 API on ``lucid.distributed`` (MPI).

NOTE [FSDP flat shards]
A unit (one ``FullyShardedDataParallel`` instance) owns the parameters of its module that
no nested unit owns. They are flattened, in registration order, into one vector padded
to a multiple of the group size ``W``; rank ``r`` keeps only elements ``[r*S, (r+1)*S)``
(``S = ceil(numel / W)``) as the unit's single ``Parameter`` (``_flat_param``), which is all
``parameters()`` shows, so an optimizer built on it updates the shard only. The original
``Parameter`` objects stay the module's attributes (moved from ``_parameters`` to the
instance ``__dict__``) but hold an empty array while the unit is sharded. Before the
unit's forward the shards are all-gathered and every original parameter's array becomes
a view of the gathered vector; autograd then records the original parameters as leaves.

NOTE [FSDP backward]
The forward registers a hook on each output of the unit. The first that fires in a
backward queues the root's end-of-backward callback and (FULL_SHARD) gathers the
parameters again, since they were freed after the forward: the graph saved the parameter
Tensors themselves, which read their array only when their rule runs. The callback runs
once every ``.grad`` is written (NOTE [Backward callbacks and post-accumulate hooks]): for
every unit, in the same order on every rank, the original parameters' gradients are
flattened (zeros for the ones with none), reduce-scattered with ``AVG`` (all-reduced for
NO_SHARD) and added to the shard's ``.grad``; then the unit frees its gathered vector.
Inside ``no_sync()`` the gradients stay on the original parameters and accumulate until a
synchronised backward reduces them.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from collections import OrderedDict, namedtuple

import numpy as np

from ..._core import backend
from ..._core.grad_mode import STATE, no_grad
from ..._core.tensor import Tensor, _wrap
from ...nn.module import Module
from ...nn.parameter import Parameter
from .api import (BackwardPrefetch, CPUOffload, FullStateDictConfig, LocalStateDictConfig, MixedPrecision,
                  ShardingStrategy, StateDictType)
from .wrap import recursive_wrap

_PREFIX = "_fsdp_wrapped_module."
_API = "FullyShardedDataParallel"
StateDictSettings = namedtuple("StateDictSettings", ["state_dict_type", "state_dict_config",
                                                     "optim_state_dict_config"])
_SHARDED = (ShardingStrategy.FULL_SHARD, ShardingStrategy.SHARD_GRAD_OP, ShardingStrategy.HYBRID_SHARD,
            ShardingStrategy._HYBRID_SHARD_ZERO2)
_FREE_AFTER_FORWARD = (ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD)


def _np_dtype(d):
    from ..._core.dtypes import to_dtype

    return None if d is None else to_dtype(d)


class _Slot:
    """One original parameter: where it sits in the flat vector and the attributes naming it."""

    __slots__ = ("param", "offset", "numel", "shape", "owners")

    def __init__(self, param, offset):
        self.param, self.offset = param, offset
        self.numel, self.shape = int(param._data.size), tuple(param._data.shape)
        self.owners = []  # (module, attribute name): several for a tied parameter


class FullyShardedDataParallel(Module):
    """Shard ``module``'s parameters, gradients and optimizer state across the ranks of a group.

    Each rank stores ``1/world`` of every unit's parameters (NOTE [FSDP flat shards]); the
    forward all-gathers them, the backward reduce-scatters the averaged gradients into each
    rank's shard (NOTE [FSDP backward]). Build the optimizer on ``fsdp_model.parameters()``
    after wrapping. Each rank feeds its own share of the batch, as with DDP.

    Parameters
    ----------
    module : Module
    process_group : ProcessGroup or (ProcessGroup, ProcessGroup), optional
        Default: the world. For the hybrid strategies, ``(shard_group, replicate_group)``.
    sharding_strategy : ShardingStrategy
        Default ``FULL_SHARD``.
    auto_wrap_policy : callable, optional
        Makes the selected submodules units of their own (``lucid.distributed.fsdp.wrap``).
    mixed_precision : MixedPrecision, optional
    ignored_modules : iterable of Module, optional
        Their parameters are neither flattened nor sharded (each rank keeps its own).
    sync_module_states : bool
        Broadcast rank 0's parameters and buffers before sharding.
    device_mesh : DeviceMesh, optional
        1-D: the group; 2-D (``HYBRID_SHARD``): dimension 0 replicates, dimension 1 shards.
    cpu_offload, backward_prefetch, forward_prefetch, limit_all_gathers, device_id, param_init_fn
        Accepted for PyTorch compatibility; Lucid's gathers are blocking and host-side.

    Notes
    -----
    Only ``use_orig_params=False`` exists: ``parameters()`` yields one flat shard per unit,
    named as PyTorch names it (``_fsdp_wrapped_module.<path>._fsdp_wrapped_module._flat_param``);
    inside :meth:`summon_full_params` they are the original parameters under their plain names
    (NOTE [FSDP names]). Under ``NO_SHARD`` every state-dict type gives the full state dict.
    A unit whose parameters got no gradient on a rank contributes zeros for them.

    Examples
    --------
    >>> import lucid, lucid.distributed as dist
    >>> from lucid.distributed.fsdp import FullyShardedDataParallel as FSDP
    >>> dist.init_process_group("mpi")                                   # doctest: +SKIP
    >>> model = FSDP(lucid.nn.Linear(4, 2))                              # doctest: +SKIP
    >>> opt = lucid.optim.SGD(model.parameters(), lr=0.1)                # doctest: +SKIP
    >>> model(lucid.randn(8, 4)).sum().backward(); opt.step()            # doctest: +SKIP
    """

    def __init__(self, module, process_group=None, sharding_strategy=None, cpu_offload=None,
                 auto_wrap_policy=None, backward_prefetch=BackwardPrefetch.BACKWARD_PRE, mixed_precision=None,
                 ignored_modules=None, param_init_fn=None, device_id=None, sync_module_states=False,
                 forward_prefetch=False, limit_all_gathers=True, use_orig_params=False, ignored_states=None,
                 device_mesh=None, _validated=False):
        super().__init__()
        from ... import distributed as dist

        if not isinstance(module, Module):
            raise TypeError(f"{_API}: module must be a lucid.nn.Module, got {type(module).__name__}")
        if isinstance(module, FullyShardedDataParallel):
            raise ValueError(f"{_API}: module is already a FullyShardedDataParallel unit")
        if use_orig_params:
            raise NotImplementedError(f"{_API}: use_orig_params=True is not supported; Lucid's FSDP "
                                      "exposes one flat shard per unit (use_orig_params=False)")
        strategy = ShardingStrategy.FULL_SHARD if sharding_strategy is None else sharding_strategy
        if not isinstance(strategy, ShardingStrategy):
            raise TypeError(f"{_API}: sharding_strategy must be a ShardingStrategy, got {strategy!r}")
        if mixed_precision is not None and not isinstance(mixed_precision, MixedPrecision):
            raise TypeError(f"{_API}: mixed_precision must be a MixedPrecision, got {mixed_precision!r}")
        if cpu_offload is not None and not isinstance(cpu_offload, CPUOffload):
            raise TypeError(f"{_API}: cpu_offload must be a CPUOffload, got {cpu_offload!r}")
        shard_pg, repl_pg = _groups(dist, strategy, process_group, device_mesh)
        ignored = list(ignored_modules or ()) + [m for m in (ignored_states or ()) if isinstance(m, Module)]
        d = self.__dict__
        d["_dist"], d["_strategy"], d["_mp"] = dist, strategy, mixed_precision
        d["_shard_pg"], d["_repl_pg"], d["_ignored"] = shard_pg, repl_pg, {id(m) for m in ignored}
        d["_world"] = dist.get_world_size(shard_pg)
        d["_rank"] = dist.get_rank(shard_pg)
        d["_root"], d["_full"], d["_bw_ready"], d["_bw_queued"] = None, None, False, False
        d["_sync"] = True
        d["_sd_type"], d["_sd_config"] = StateDictType.FULL_STATE_DICT, FullStateDictConfig()
        d["_summoned"] = 0  # summon_full_params contexts open on this unit (NOTE [FSDP names])
        d["_osd_config"] = None
        if not _validated:  # everything that can fail is checked before any module changes
            self._validate(module, auto_wrap_policy)
        if auto_wrap_policy is not None:
            if repl_pg is not None and device_mesh is None:  # the groups made once, shared by every unit
                process_group = (shard_pg, repl_pg)
            kw = dict(process_group=process_group, sharding_strategy=strategy, mixed_precision=mixed_precision,
                      ignored_modules=ignored, sync_module_states=sync_module_states, device_mesh=device_mesh,
                      _validated=True)
            recursive_wrap(module, auto_wrap_policy, lambda m: FullyShardedDataParallel(m, **kw),
                           only_wrap_children=True)
        self._fsdp_wrapped_module = module
        slots = self._collect_slots(module)
        if sync_module_states:
            self._sync_states([s.param for s in slots])
        if mixed_precision is not None and mixed_precision.buffer_dtype is not None:
            self._cast_buffers(_np_dtype(mixed_precision.buffer_dtype))
        self._flatten(slots)
        for m in module.modules():  # nested units report to this one (the outermost is the root)
            if isinstance(m, FullyShardedDataParallel):
                m.__dict__["_root"] = self

    # ------------------------------------------------------------ construction
    def _validate(self, module, policy):
        """Check every unit-to-be (a dry run of the wrap policy) and that all ranks hold the same model."""
        picked = []
        if policy is not None:
            recursive_wrap(module, policy, lambda m: picked.append(m) or m, only_wrap_children=True)
        stop, owner = {id(m) for m in picked}, {}
        for unit in picked + [module]:
            for s in self._collect_slots(unit, stop - {id(unit)}):
                if id(s.param) in owner and owner[id(s.param)] is not unit:
                    raise ValueError(f"{_API}: a parameter of shape {s.shape} is shared by two units-to-be "
                                     f"({type(owner[id(s.param)]).__name__} and {type(unit).__name__}); "
                                     "wrap their common parent instead")
                owner[id(s.param)] = unit
        from ..objects import all_gather_object

        mine = [(n, tuple(p.shape), str(p.dtype), bool(p.requires_grad)) for n, p in module.named_parameters()]
        layouts = [None] * self._world
        all_gather_object(layouts, mine, group=self._shard_pg)
        ranks = self._dist.get_process_group_ranks(self._shard_pg) if self._shard_pg is not None \
            else list(range(self._world))
        for r, other in zip(ranks, layouts):
            if other != layouts[0]:
                diff = next((a, b) for a, b in zip(layouts[0] + [None] * len(other), other + [None] * len(layouts[0]))
                            if a != b)
                raise ValueError(f"{_API}: the module differs across ranks: rank {ranks[0]} has parameter "
                                 f"{diff[0]} where rank {r} has {diff[1]} (name, shape, dtype, requires_grad)")

    def _local_modules(self, module, stop=()):
        """Modules whose parameters this unit owns: ``module``'s tree, minus nested units and ignored ones."""
        stack = [module]
        while stack:
            m = stack.pop(0)
            if id(m) in self._ignored or (m is not module and (isinstance(m, FullyShardedDataParallel)
                                                               or id(m) in stop)):
                continue
            yield m
            stack[:0] = [c for c in m._modules.values() if c is not None]

    def _collect_slots(self, module, stop=()):
        slots, by_id, offset = [], {}, 0
        for m in self._local_modules(module, stop):
            for name, p in list(m._parameters.items()):
                if p is None:
                    continue
                if id(p) not in by_id:
                    by_id[id(p)] = _Slot(p, offset)
                    slots.append(by_id[id(p)])
                    offset += int(p._data.size)
                by_id[id(p)].owners.append((m, name))
        dtypes = {s.param._data.dtype for s in slots}
        if len(dtypes) > 1:
            raise ValueError(f"{_API}: a unit's parameters must share one dtype, got {sorted(map(str, dtypes))}; "
                             "wrap the modules of each dtype as separate units")
        flags = {bool(s.param.requires_grad) for s in slots}
        if len(flags) > 1:
            raise ValueError(f"{_API}: a unit mixes parameters that require grad with frozen ones; "
                             "wrap the frozen modules as separate units or ignore them (ignored_modules)")
        return slots

    def _flatten(self, slots):
        d = self.__dict__
        numel = sum(s.numel for s in slots)
        world = 1 if self._strategy is ShardingStrategy.NO_SHARD else self._world
        shard = math.ceil(numel / world) if numel else 0
        if slots:
            dtype = slots[0].param._data.dtype
        else:  # a unit with no parameters of its own: its (empty) shard takes its children's dtype
            from ..._core.dtypes import get_default_dtype, to_dtype

            first = next(iter(self._fsdp_wrapped_module.parameters()), None)
            dtype = first._data.dtype if first is not None else to_dtype(get_default_dtype())
        flat = np.zeros(shard * world, dtype)
        for s in slots:
            flat[s.offset:s.offset + s.numel] = backend.host(s.param._data).reshape(-1)
        r = 0 if world == 1 else self._rank
        like = slots[0].param._data if slots else flat
        data = backend.on_device_of(flat[r * shard:(r + 1) * shard].copy(), like)
        fp = Parameter(_wrap(data), requires_grad=bool(slots) and slots[0].param.requires_grad)
        fp._fsdp_flat = True
        d["_slots"], d["_numel"], d["_shard_numel"], d["_flat_world"] = slots, numel, shard, world
        if slots:
            self._flat_param = fp
        else:  # as PyTorch, a unit with no parameters of its own has no FlatParameter in parameters()
            d["_flat_param"] = fp
        for s in slots:  # NOTE [FSDP flat shards]: the originals leave _parameters
            for m, name in s.owners:
                del m._parameters[name]
                m.__dict__[name] = s.param
            s.param._data = self._empty(s.param._data)

    def _empty(self, like):
        # a fresh array: a zero-size view would keep the gathered buffer alive through .base
        return backend.on_device_of(np.empty(0, like.dtype), like)

    def _sync_states(self, params):
        tensors = params + [b for m in self._local_modules(self._fsdp_wrapped_module) for b in m._buffers.values()
                            if b is not None]
        src = self._dist.get_process_group_ranks(self._shard_pg)[0] if self._shard_pg is not None else 0
        for t in tensors:
            buf = np.ascontiguousarray(backend.host(t._data))
            self._dist.broadcast(_wrap(buf), src=src, group=self._shard_pg)
            t._data = backend.on_device_of(buf.reshape(t._data.shape), t._data)

    def _cast_buffers(self, dtype):
        for m in self._local_modules(self._fsdp_wrapped_module):
            for k, b in m._buffers.items():
                if b is not None and b._data.dtype.kind == "f":
                    b._data = b._data.astype(dtype)

    # ------------------------------------------------------------ properties
    @property
    def module(self):
        """The wrapped module."""
        return self._fsdp_wrapped_module

    @property
    def sharding_strategy(self):
        return self._strategy

    @property
    def process_group(self):
        return self._shard_pg

    @property
    def rank(self):
        return self._rank

    @property
    def world_size(self):
        return self._world

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:  # as PyTorch's FSDP: the wrapped module's attributes show through
            inner = self.__dict__.get("_modules", {}).get("_fsdp_wrapped_module")
            if inner is None:
                raise
            return getattr(inner, name)

    def __getitem__(self, key):
        return self._fsdp_wrapped_module.__getitem__(key)

    def _root_unit(self):
        return self if self._root is None else self._root

    def _units(self):
        """Every unit under this one (itself first), in the same order on every rank."""
        return [m for m in self.modules() if isinstance(m, FullyShardedDataParallel)]

    # NOTE [FSDP names]
    # As PyTorch's FSDP (use_orig_params=False): outside summon_full_params the names keep every
    # ``_fsdp_wrapped_module.`` and a unit's shard is ``<unit>._fsdp_wrapped_module._flat_param``
    # (PyTorch registers it on the wrapped module; Lucid on the unit, so it is renamed here);
    # inside, named_parameters/parameters() are the original full parameters and the prefixes
    # go. State-dict keys never have the prefix.
    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        """``(name, parameter)``: the flat shards outside :meth:`summon_full_params`, the original
        full parameters (names without ``_fsdp_wrapped_module.``) inside (NOTE [FSDP names])."""
        if self._summoned:
            yield from self._original_parameters(prefix, recurse, remove_duplicate)
            return
        for n, p in super().named_parameters(prefix, recurse, remove_duplicate):
            if getattr(p, "_fsdp_flat", False) and n.endswith("_flat_param"):
                n = n[:-len("_flat_param")] + _PREFIX + "_flat_param"
            yield n, p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True, persistent=None):
        for n, b in super().named_buffers(prefix, recurse, remove_duplicate, persistent):
            yield (n.replace(_PREFIX, "") if self._summoned else n), b

    def _original_parameters(self, prefix, recurse, remove_duplicate):
        owned, memo = self._owned(), set()
        modules = self.named_modules(prefix=prefix) if recurse else [(prefix, self), (prefix, self._fsdp_wrapped_module)]
        for mod_prefix, mod in modules:
            if isinstance(mod, FullyShardedDataParallel):
                continue  # its shard is hidden; the wrapped module follows
            own = [(n, mod.__dict__[n]) for n in owned.get(id(mod), [])] + list(mod._parameters.items())
            for n, p in own:
                if p is None or (remove_duplicate and id(p) in memo):
                    continue
                memo.add(id(p))
                yield (mod_prefix + ("." if mod_prefix else "") + n).replace(_PREFIX, ""), p

    def _local_entries(self, prefix=""):
        """``(key, tensor)`` of the local state dict, in module order as PyTorch's: each unit's shard
        where the unit is, then the buffers of the modules under it."""
        for mod_prefix, mod in self.named_modules(prefix=prefix):
            for n, t in mod._local_state().items():
                yield (mod_prefix + ("." if mod_prefix else "") + n).replace(_PREFIX, ""), t

    # ------------------------------------------------------------ gather / free
    def _unshard(self, copy=False):
        """Make every original parameter a view of the gathered flat vector."""
        if self._full is not None and not copy and self._flat_world > 1:
            return
        fp = self._flat_param
        if self._flat_world == 1:
            full = backend.host(fp._data)
            full = full.copy() if copy else full
        else:
            full = np.empty(self._shard_numel * self._world, fp._data.dtype)
            self._dist.all_gather_into_tensor(_wrap(full), _wrap(fp._data), group=self._shard_pg)
        mp = self._mp
        if mp is not None and mp.param_dtype is not None and not copy:
            full = full.astype(_np_dtype(mp.param_dtype))
        self.__dict__["_full"] = full
        for s in self._slots:
            s.param._data = backend.on_device_of(full[s.offset:s.offset + s.numel].reshape(s.shape), fp._data)

    def _reshard(self):
        if self._full is None:
            return
        self.__dict__["_full"] = None
        for s in self._slots:
            s.param._data = self._empty(s.param._data)

    def _writeback(self):
        """Copy this rank's part of the (possibly edited) gathered vector into the shard."""
        fp = self._flat_param
        r = 0 if self._flat_world == 1 else self._rank
        flat = np.zeros(self._shard_numel * self._flat_world, fp._data.dtype)
        for s in self._slots:
            flat[s.offset:s.offset + s.numel] = backend.host(s.param._data).reshape(-1)
        with no_grad(), backend.on_device(fp):
            fp._data[...] = backend.on_device_of(flat[r * self._shard_numel:(r + 1) * self._shard_numel], fp._data)
        fp._version[0] += 1

    # ----------------------------------------------------------------- forward
    def forward(self, *args, **kwargs):
        root = self._root_unit()
        if root is self:
            root._check_idle()
            args, kwargs = self._cast_inputs(args, kwargs)
        self._unshard()
        try:
            out = self._fsdp_wrapped_module(*args, **kwargs)
        except BaseException:
            self._reshard() if self._strategy in _SHARDED else None
            raise
        training = STATE.grad_enabled and self._flat_param.requires_grad
        if training:
            self.__dict__["_bw_ready"] = False
            for t in _tensors(out):
                if t.requires_grad:
                    t.register_hook(self._pre_backward)
        if self._strategy in _FREE_AFTER_FORWARD or (not training and self._strategy in _SHARDED):
            self._reshard()
        return out

    def _cast_inputs(self, args, kwargs):
        mp = self._mp
        if mp is None or mp.param_dtype is None or not mp.cast_root_forward_inputs:
            return args, kwargs
        dt = _np_dtype(mp.param_dtype)

        def cast(x):
            if isinstance(x, Tensor) and x._data.dtype.kind == "f" and x._data.dtype != dt:
                return x.to(mp.param_dtype)
            if isinstance(x, (list, tuple)):
                return type(x)(cast(v) for v in x)
            if isinstance(x, dict):
                return {k: cast(v) for k, v in x.items()}
            return x
        return cast(args), cast(kwargs)

    def _check_idle(self):
        """Start every forward from the shards: a forward without its backward (or a backward
        that failed half-way) may have left gathered vectors the optimizer has since outdated."""
        self.__dict__["_bw_queued"] = False
        for u in self._units():
            if u._strategy in _SHARDED:
                u._reshard()

    # ---------------------------------------------------------------- backward
    def _pre_backward(self, grad):
        # See NOTE [FSDP backward]
        root = self._root_unit()
        if not root._bw_queued:
            from ...autograd.engine import queue_callback

            root.__dict__["_bw_queued"] = True
            queue_callback(root._post_backward)
        if not self._bw_ready:
            self.__dict__["_bw_ready"] = True
            self._unshard()
        return None

    def _post_backward(self):
        self.__dict__["_bw_queued"] = False
        sync = self._sync
        for u in self._units():
            u.__dict__["_bw_ready"] = False
            if sync:
                u._reduce_grads()
            if u._strategy in _SHARDED:
                u._reshard()

    def _reduce_grads(self):
        fp, S, W = self._flat_param, self._shard_numel, self._flat_world
        if not fp.requires_grad or not self._slots:
            return
        mp = self._mp
        rdt = fp._data.dtype
        if mp is not None and (mp.reduce_dtype or mp.param_dtype) is not None:
            rdt = _np_dtype(mp.reduce_dtype or mp.param_dtype)
        flat = np.zeros(S * W, rdt)
        for s in self._slots:
            g = s.param._grad
            if g is not None:
                flat[s.offset:s.offset + s.numel] = backend.host(g._data).reshape(-1)
                s.param._grad = None
        avg = self._dist.ReduceOp.AVG
        if W == 1:
            out = flat
            if self._world > 1 or self._repl_pg is None:
                self._dist.all_reduce(_wrap(out), op=avg, group=self._shard_pg)
        else:
            out = np.empty(S, rdt)
            self._dist.reduce_scatter_tensor(_wrap(out), _wrap(flat), op=avg, group=self._shard_pg)
        if self._repl_pg is not None:
            self._dist.all_reduce(_wrap(out), op=avg, group=self._repl_pg)
        keep_low = mp is not None and mp.keep_low_precision_grads
        out = out if keep_low else out.astype(fp._data.dtype, copy=False)
        out = backend.on_device_of(out, fp._data)
        if fp._grad is None or fp._grad._data.dtype != out.dtype:
            fp._grad = _wrap(out)
        else:
            fp._grad = _wrap(fp._grad._data + out)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside, backward keeps each rank's gradients unreduced on the original parameters;
        the first backward after the block reduces the accumulated sum into the shards.
        Call it on the root unit."""
        if self._root is not None:
            raise RuntimeError(f"{_API}.no_sync: call it on the root FSDP instance")
        old = self._sync
        self.__dict__["_sync"] = False
        try:
            yield
        finally:
            self.__dict__["_sync"] = old

    # ------------------------------------------------------------- utilities
    def clip_grad_norm_(self, max_norm, norm_type=2.0):
        """Scale every shard's gradient so the norm of the whole model's gradient is at most ``max_norm``.

        The norm is global (each rank's shard contributes its part; the padding's gradient is
        zero). Returns the total norm (before clipping) as a tensor, the same on every rank.
        Call it on the root, on every rank.
        """
        api = f"{_API}.clip_grad_norm_"
        if self._root is not None:
            raise RuntimeError(f"{api}: call it on the root FSDP instance")
        p = float(norm_type)
        sharded, replicated = [], []
        for u in self._units():
            g = u._flat_param._grad
            if g is not None:
                (replicated if u._flat_world == 1 else sharded).append(backend.host(g._data))
        for q in self.parameters():  # parameters of ignored modules
            if not getattr(q, "_fsdp_flat", False) and q._grad is not None:
                replicated.append(backend.host(q._grad._data))
        parts = np.zeros(2)
        for i, arrs in enumerate((sharded, replicated)):
            for a in arrs:
                a = np.abs(a.astype(np.float64))
                if a.size:
                    parts[i] = max(parts[i], a.max()) if math.isinf(p) else parts[i] + (a ** p).sum()
        total = np.array([parts[0]])
        op = self._dist.ReduceOp.MAX if math.isinf(p) else self._dist.ReduceOp.SUM
        self._dist.all_reduce(_wrap(total), op=op, group=self._shard_pg)
        norm = max(total[0], parts[1]) if math.isinf(p) else (total[0] + parts[1]) ** (1.0 / p)
        coef = float(max_norm) / (norm + 1e-6)
        if coef < 1.0:
            for q in self.parameters():
                if q._grad is not None:
                    q._grad = _wrap(q._grad._data * q._grad._data.dtype.type(coef))
        dtype = self._flat_param._data.dtype
        return _wrap(np.asarray(norm, dtype if dtype.kind == "f" else np.float64))

    @staticmethod
    @contextlib.contextmanager
    def summon_full_params(module, recurse=True, writeback=True, rank0_only=False, offload_to_cpu=False,
                           with_grads=False):
        """Inside, the original parameters of ``module``'s units hold their full values.

        With ``writeback=True`` changes made to them inside are written to the shards on exit
        (each rank keeps its part). Every rank must enter it.
        """
        api = f"{_API}.summon_full_params"
        if with_grads:
            raise NotImplementedError(f"{api}: with_grads=True is not supported")
        if rank0_only and writeback:
            raise ValueError(f"{api}: writeback=True and rank0_only=True can't be combined")
        units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        if not recurse:
            units = units[:1]
        if any(u._full is not None and u._strategy in _SHARDED for u in units):
            raise RuntimeError(f"{api}: can't be entered during a forward or backward")
        with no_grad():
            for u in units:
                u._unshard(copy=True)
        for u in units:
            u.__dict__["_summoned"] += 1
        try:
            yield
        finally:
            for u in units:
                u.__dict__["_summoned"] -= 1
            with no_grad():
                for u in units:
                    if writeback:
                        u._writeback()
                    u._reshard()
                    if u._strategy is ShardingStrategy.NO_SHARD:
                        u._unshard()

    # ------------------------------------------------------------ state dicts
    @staticmethod
    @contextlib.contextmanager
    def state_dict_type(module, state_dict_type, state_dict_config=None, optim_state_dict_config=None):
        """Within, ``state_dict()``/``load_state_dict()`` of ``module``'s units use ``state_dict_type``."""
        old = FullyShardedDataParallel.set_state_dict_type(module, state_dict_type, state_dict_config,
                                                           optim_state_dict_config)
        try:
            yield
        finally:
            FullyShardedDataParallel.set_state_dict_type(module, old.state_dict_type, old.state_dict_config,
                                                         old.optim_state_dict_config)

    @staticmethod
    def set_state_dict_type(module, state_dict_type, state_dict_config=None, optim_state_dict_config=None):
        """Set the state-dict type of every unit in ``module``; returns the previous settings."""
        api = f"{_API}.set_state_dict_type"
        if not isinstance(state_dict_type, StateDictType):
            raise TypeError(f"{api}: state_dict_type must be a StateDictType, got {state_dict_type!r}")
        if state_dict_type is StateDictType.SHARDED_STATE_DICT:
            raise NotImplementedError(f"{api}: SHARDED_STATE_DICT needs DTensor, which Lucid does not have; "
                                      "use FULL_STATE_DICT (a plain dict) or LOCAL_STATE_DICT (the flat shards)")
        units = [m for m in module.modules() if isinstance(m, FullyShardedDataParallel)]
        if not units:
            raise ValueError(f"{api}: module contains no FullyShardedDataParallel unit")
        if state_dict_config is None:
            state_dict_config = (FullStateDictConfig() if state_dict_type is StateDictType.FULL_STATE_DICT
                                 else LocalStateDictConfig())
        old = StateDictSettings(units[0]._sd_type, units[0]._sd_config, units[0]._osd_config)
        for u in units:
            u.__dict__["_sd_type"], u.__dict__["_sd_config"] = state_dict_type, state_dict_config
            u.__dict__["_osd_config"] = optim_state_dict_config
        return old

    def _walk(self, module, prefix, owned=None):
        """``(key, tensor, is an original parameter)`` of the full state dict, in the order of the
        unwrapped module's ``state_dict()``."""
        owned = self._owned() if owned is None else owned
        if isinstance(module, FullyShardedDataParallel):
            yield from self._walk(module._fsdp_wrapped_module, prefix, owned)
            return
        for name in owned.get(id(module), []):
            yield prefix + name, module.__dict__[name], True
        for name, t in module._local_state().items():
            yield prefix + name, t, False
        for name, child in module._modules.items():
            if child is not None:
                yield from self._walk(child, prefix + name + ".", owned)

    def _owned(self):
        owned = {}
        for u in self._units():
            for s in u._slots:
                for m, name in s.owners:
                    owned.setdefault(id(m), []).append(name)
        return owned

    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        """The wrapped module's state dict: full and unsharded (``FULL_STATE_DICT``, the default)
        or the flat shards (``LOCAL_STATE_DICT``). Every rank must call it."""
        if self._local_sd("state_dict"):
            out = OrderedDict() if destination is None else destination
            for n, t in self._local_entries(prefix):
                out[n] = t if keep_vars else t.detach().clone()
            return out
        cfg = self._sd_config
        keep = not (getattr(cfg, "rank0_only", False) and self._dist.get_rank() != 0)
        out = OrderedDict() if destination is None else destination
        with FullyShardedDataParallel.summon_full_params(self, writeback=False):
            if keep:
                for key, t, _ in self._walk(self, prefix):
                    out[key] = t.detach().clone()
        return out

    def _local_sd(self, api):
        """Whether this call uses the flat shards: LOCAL_STATE_DICT, except under NO_SHARD, where
        PyTorch gives the full state dict whatever the type (with this warning)."""
        if self._sd_type is not StateDictType.LOCAL_STATE_DICT:
            return False
        if self._strategy is ShardingStrategy.NO_SHARD:
            warnings.warn(f"{_API}.{api}: When using ``NO_SHARD`` for ``ShardingStrategy``, full_state_dict "
                          "will be returned.", UserWarning, stacklevel=3)
            return False
        return True

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Load a full (unsharded) state dict, or a local one under ``LOCAL_STATE_DICT``.

        Every key is checked (and every shape) before anything is written, so a failing
        load changes nothing. Each rank loads its own copy of the dict.
        """
        from ...nn.module import _IncompatibleKeys

        api = f"{_API}.load_state_dict"
        sd = {k.replace(_PREFIX, ""): v for k, v in state_dict.items()}
        local = self._local_sd("load_state_dict")
        if local:
            entries = [(n, t, False) for n, t in self._local_entries()]
        else:
            entries = []
            for key, t, is_slot in self._walk(self, ""):
                entries.append((key, t, is_slot))
        expect = {k for k, _, _ in entries}
        missing = [k for k, _, _ in entries if k not in sd]
        unexpected = [k for k in sd if k not in expect]
        if strict and (missing or unexpected):
            msg = []
            if missing:
                msg.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ".")
            if unexpected:
                msg.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in unexpected) + ".")
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t" + "\n\t".join(msg))
        slots = {id(s.param): s for u in self._units() for s in u._slots}
        for key, t, is_slot in entries:
            if key in sd:
                v = sd[key]
                shape = slots[id(t)].shape if is_slot else tuple(t.shape)
                vshape = tuple(v.shape) if hasattr(v, "shape") else tuple(np.shape(v))
                if vshape != shape:
                    raise RuntimeError(f"{api}: size mismatch for {key}: copying a param with shape {vshape}, "
                                       f"the shape in current model is {shape}")
        ctx = contextlib.nullcontext() if local else FullyShardedDataParallel.summon_full_params(self)
        with ctx, no_grad():
            for key, t, _ in entries:
                if key in sd:
                    v = sd[key]
                    arr = backend.host(v._data) if isinstance(v, Tensor) else np.asarray(v)
                    with backend.on_device(t):
                        t._data[...] = backend.on_device_of(np.asarray(arr, dtype=t._data.dtype), t._data)
                    t._version[0] += 1
        return _IncompatibleKeys(missing, unexpected)

    @staticmethod
    def optim_state_dict(model, optim, optim_state_dict=None, group=None):
        """``optim``'s state, unsharded and keyed by parameter name (NOTE [FSDP optimizer state]).

        Loads into the same model on any number of ranks (through
        :meth:`optim_state_dict_to_load`) or into a plain model's optimizer after mapping
        names to indices. With ``FullOptimStateDictConfig(rank0_only=True)`` (through
        :meth:`state_dict_type`) ranks other than 0 get ``{}``. Every rank must call it.
        """
        from ._optim_state import full_optim_state_dict

        cfg = getattr(model, "_osd_config", None)
        return full_optim_state_dict(model, optim, optim_state_dict, bool(getattr(cfg, "rank0_only", False)),
                                     f"{_API}.optim_state_dict")

    @staticmethod
    def full_optim_state_dict(model, optim, optim_input=None, rank0_only=True, group=None):
        """The deprecated spelling of :meth:`optim_state_dict` (``rank0_only`` by default)."""
        from ._optim_state import full_optim_state_dict

        return full_optim_state_dict(model, optim, None, rank0_only, f"{_API}.full_optim_state_dict")

    @staticmethod
    def optim_state_dict_to_load(model, optim, optim_state_dict, is_named_optimizer=False, load_directly=False,
                                 group=None):
        """Turn a dict from :meth:`optim_state_dict` into this rank's ``optim.load_state_dict`` argument
        (loaded at once with ``load_directly=True``)."""
        from ._optim_state import sharded_optim_state_dict

        out = sharded_optim_state_dict(model, optim, optim_state_dict, f"{_API}.optim_state_dict_to_load")
        if load_directly:
            optim.load_state_dict(out)
        return out

    def extra_repr(self):
        return (f"sharding_strategy={self._strategy.name}, world_size={self._world}, "
                f"numel={self._numel}, shard_numel={self._shard_numel}")


def _tensors(out):
    if isinstance(out, Tensor):
        yield out
    elif isinstance(out, (list, tuple)):
        for o in out:
            yield from _tensors(o)
    elif isinstance(out, dict):
        for o in out.values():
            yield from _tensors(o)


def _groups(dist, strategy, process_group, device_mesh):
    """``(shard group, replicate group or None)`` for ``strategy``."""
    hybrid = strategy in (ShardingStrategy.HYBRID_SHARD, ShardingStrategy._HYBRID_SHARD_ZERO2)
    if device_mesh is not None:
        if process_group is not None:
            raise ValueError(f"{_API}: pass process_group or device_mesh, not both")
        if device_mesh.ndim == 1:
            if hybrid:
                raise ValueError(f"{_API}: {strategy.name} needs a 2-D device_mesh (replicate, shard)")
            return device_mesh.get_group(0), None
        if device_mesh.ndim != 2 or not hybrid:
            raise ValueError(f"{_API}: a {device_mesh.ndim}-D device_mesh works only with HYBRID_SHARD "
                             "(2-D: dimension 0 replicates, dimension 1 shards)")
        return device_mesh.get_group(1), device_mesh.get_group(0)
    if isinstance(process_group, tuple):
        if not hybrid or len(process_group) != 2:
            raise ValueError(f"{_API}: a (shard_group, replicate_group) pair is for HYBRID_SHARD only")
        return process_group
    if hybrid:
        from ..extras import _node_groups

        return _node_groups("FullyShardedDataParallel")
    dist.get_world_size(process_group)  # checks the group and that the world is initialised
    return process_group, None
