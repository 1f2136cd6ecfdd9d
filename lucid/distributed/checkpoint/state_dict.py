"""``get_state_dict`` / ``set_state_dict``: model and optimizer state by the model's own names.

PyTorch's ``torch.distributed.checkpoint.state_dict``: a wrapped model (DDP's ``module.``,
FSDP's ``_fsdp_wrapped_module.``, activation checkpointing's ``_checkpoint_wrapped_module.``,
``torch.compile``'s ``_orig_mod.``) gives the names of the plain model, and an optimizer's
state is keyed by parameter names instead of positions, so the same checkpoint loads into
a model wrapped another way. ``full_state_dict=True`` gathers DTensors into full tensors;
``cpu_offload=True`` moves values to the CPU.
"""
from __future__ import annotations

import dataclasses

__all__ = ["StateDictOptions", "get_model_state_dict", "get_optimizer_state_dict", "get_state_dict",
           "set_model_state_dict", "set_optimizer_state_dict", "set_state_dict"]

_WRAPPER_PARTS = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")


@dataclasses.dataclass
class StateDictOptions:
    """How the state dict functions behave (PyTorch's fields and defaults).

    ``full_state_dict``: DTensors become full tensors. ``cpu_offload``: values move to the
    CPU (with ``full_state_dict``, ranks other than 0 get an empty dict, as in PyTorch).
    ``ignore_frozen_params``: parameters with ``requires_grad=False`` are left out.
    ``keep_submodule_prefixes``: with ``submodules=``, keep the submodule's prefix.
    ``strict``: ``set_model_state_dict`` checks the keys. ``broadcast_from_rank0``: the
    ``set_*`` functions take rank 0's full values and place them into every rank's
    parameters (the others may pass empty dicts).
    """

    full_state_dict: bool = False
    cpu_offload: bool = False
    ignore_frozen_params: bool = False
    keep_submodule_prefixes: bool = True
    strict: bool = True
    broadcast_from_rank0: bool = False
    flatten_optimizer_state_dict: bool = False
    dsd_fqn_modifiers: str = "_fqn_modifiers"


def _plain_name(name):
    parts = [p for p in name.split(".") if p not in _WRAPPER_PARTS]
    return ".".join(parts)


def _unwrap(model):
    """The model DDP/DataParallel wrap (their ``module.`` prefix is not part of the names)."""
    from ...nn.parallel import DataParallel, DistributedDataParallel

    while isinstance(model, (DistributedDataParallel, DataParallel)):
        model = model.module
    return model


def _fsdp_root(model):
    """The FSDP (1) wrapper whose flat shards an optimizer over ``model`` holds, if any."""
    from ..fsdp import FullyShardedDataParallel

    model = _unwrap(model)
    return model if isinstance(model, FullyShardedDataParallel) else None


def _fsdp_full_params(model):
    from ..fsdp import FullyShardedDataParallel

    return any(isinstance(m, FullyShardedDataParallel) for m in model.modules())


def _rank():
    from .. import process_group as pg

    return pg.get_rank() if pg.is_initialized() else 0


def _finish_value(v, options):
    from ..._core.tensor import Tensor

    if not isinstance(v, Tensor):
        return v
    from ..tensor import DTensor

    if options.full_state_dict and isinstance(v, DTensor):
        v = v.full_tensor()
    if options.cpu_offload:
        v = v.cpu()
    return v


def _model_entries(model, submodules, options):
    model = _unwrap(model)
    if _fsdp_full_params(model):
        from ..fsdp import FullyShardedDataParallel as FSDP, StateDictType

        with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT):
            raw = model.state_dict()
    else:
        raw = model.state_dict()
    frozen = {_plain_name(n) for n, p in model.named_parameters() if not p.requires_grad}
    keep = None
    if submodules:
        names = {id(m): _plain_name(n) for n, m in model.named_modules()}
        keep = [names[id(m)] for m in submodules]
    out = {}
    for name, v in raw.items():
        name = _plain_name(name)
        if options.ignore_frozen_params and name in frozen:
            continue
        if keep is not None:
            prefix = next((k for k in keep if name == k or name.startswith(k + ".") or not k), None)
            if prefix is None:
                continue
            if not options.keep_submodule_prefixes and prefix:
                name = name[len(prefix) + 1:]
        out[name] = v
    return out


def get_model_state_dict(model, *, submodules=None, options=None):
    """The model's state dict under its plain names (see the module docstring).

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.distributed.checkpoint.state_dict import get_model_state_dict
    >>> sorted(get_model_state_dict(nn.Linear(2, 1)))
    ['bias', 'weight']
    """
    options = options or StateDictOptions()
    sd = {k: _finish_value(v, options) for k, v in _model_entries(model, submodules, options).items()}
    if options.full_state_dict and options.cpu_offload and _rank() != 0:
        return {}
    return sd


def _as_list(optimizers):
    from ...optim import Optimizer

    return [optimizers] if isinstance(optimizers, Optimizer) else list(optimizers)


def _param_names(model):
    """id(parameter) -> plain name, and plain name -> parameter."""
    model = _unwrap(model)
    by_id, by_name = {}, {}
    for name, p in model.named_parameters(remove_duplicate=False):
        name = _plain_name(name)
        by_id.setdefault(id(p), name)
        by_name.setdefault(name, p)
    return by_id, by_name


def _init_optim_state(optim):
    """Give an optimizer without state its state, as PyTorch does: one step with zero gradients
    and a learning rate of 0 (the parameters do not move; step counts become 1)."""
    from ... import zeros_like

    if optim.state:
        return
    made = []
    for group in optim.param_groups:
        for p in group["params"]:
            if p.requires_grad and p.grad is None:
                p.grad = zeros_like(p)
                made.append(p)
    lrs = [g["lr"] for g in optim.param_groups]
    try:
        for g in optim.param_groups:
            g["lr"] = 0.0 if not hasattr(g["lr"], "fill_") else g["lr"].fill_(0.0)
        optim.step()
    finally:
        for g, lr in zip(optim.param_groups, lrs):
            g["lr"] = lr
        for p in made:
            p.grad = None


class _ForeignParameter(ValueError, KeyError):
    """PyTorch raises KeyError (its name lookup fails) where Lucid raised ValueError: both work."""

    def __str__(self):  # KeyError's str() would quote the message
        return ValueError.__str__(self)


def _as_dtensor_like(v, p):
    """A DTensor parameter's state entry as a DTensor placed like it, as PyTorch holds it.

    Lucid's optimizers keep such state as the local piece (the update runs on local arrays);
    handed on as a plain tensor, ``dcp.save`` would take it for a value equal on every rank
    and keep rank 0's piece only."""
    from ..._core.tensor import Tensor
    from ..tensor import DTensor

    if (isinstance(p, DTensor) and isinstance(v, Tensor) and not isinstance(v, DTensor) and v.ndim
            and tuple(v.shape) == tuple(p.to_local().shape)):
        return DTensor.from_local(v, p.device_mesh, p.placements, shape=p.shape, stride=p.stride())
    return v


def _local_like(v, p):
    """The inverse of :func:`_as_dtensor_like`: this rank's piece of a state entry of ``p``."""
    from ..._core.tensor import Tensor
    from ..tensor import DTensor, distribute_tensor

    if not isinstance(p, DTensor) or not isinstance(v, Tensor):
        return v
    if isinstance(v, DTensor):
        return v.redistribute(p.device_mesh, p.placements).to_local()
    if v.ndim and tuple(v.shape) == tuple(p.shape):  # a full value (full_state_dict=True)
        return distribute_tensor(v.to(p.dtype), p.device_mesh, p.placements).to_local()
    return v


def get_optimizer_state_dict(model, optimizers, *, submodules=None, options=None):
    """The optimizers' state keyed by parameter names: ``{"state": {name: {...}}, "param_groups":
    [{..., "params": [name, ...]}]}`` (one dict for several optimizers, as PyTorch merges them).

    An optimizer that has not stepped yet is given its state first (see ``_init_optim_state``).
    """
    options = options or StateDictOptions()
    by_id, _ = _param_names(model)
    state, groups = {}, []
    for optim in _as_list(optimizers):
        _init_optim_state(optim)
        fsdp = _fsdp_root(model)
        if fsdp is not None:  # flat shards: name them per parameter, see NOTE [FSDP optimizer state]
            from ..fsdp._optim_state import full_optim_state_dict

            full = full_optim_state_dict(fsdp, optim, None, False, "get_optimizer_state_dict")
            for name, st in full["state"].items():
                state[_plain_name(name)] = {k: _finish_value(v, options) for k, v in st.items()}
            groups += [{**g, "params": [_plain_name(n) for n in g["params"]]} for g in full["param_groups"]]
            continue
        for group in optim.param_groups:
            names = []
            for p in group["params"]:
                if id(p) not in by_id:
                    raise _ForeignParameter("get_optimizer_state_dict: the optimizer holds a parameter the model does not")
                names.append(by_id[id(p)])
                if p in optim.state:
                    state[by_id[id(p)]] = {k: _finish_value(_as_dtensor_like(v, p), options)
                                           for k, v in optim.state[p].items()}
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": names})
    if options.full_state_dict and options.cpu_offload and _rank() != 0:
        return {}
    return {"state": state, "param_groups": groups}


def get_state_dict(model, optimizers, *, submodules=None, options=None):
    """``(get_model_state_dict(model), get_optimizer_state_dict(model, optimizers))``."""
    return (get_model_state_dict(model, submodules=submodules, options=options),
            get_optimizer_state_dict(model, optimizers, submodules=submodules, options=options))


def _broadcast_rank0(sd):
    from ._save_load import _broadcast, _group_info

    group, rank, world = _group_info(None, False)
    return _broadcast(group, world, sd if rank == 0 else None)


def _place_like(value, target):
    """A full value placed like ``target`` (a DTensor gets this rank's piece)."""
    from ..tensor import DTensor, distribute_tensor

    if isinstance(target, DTensor) and not isinstance(value, DTensor):
        return distribute_tensor(value.to(target.dtype), target.device_mesh, target.placements)
    return value


def set_model_state_dict(model, model_state_dict, *, options=None):
    """Load ``model_state_dict`` (plain names) into ``model``, however it is wrapped.

    Returns the ``(missing_keys, unexpected_keys)`` named tuple of ``load_state_dict``.
    """
    from ... import no_grad

    options = options or StateDictOptions()
    if options.broadcast_from_rank0:
        model_state_dict = _broadcast_rank0(model_state_dict)
    inner = _unwrap(model)
    current = _model_entries(model, None, StateDictOptions())
    missing = [k for k in current if k not in model_state_dict]
    unexpected = [k for k in model_state_dict if k not in current]
    if options.strict and (missing or unexpected):
        raise RuntimeError(f"set_model_state_dict: missing keys {missing}, unexpected keys {unexpected}")
    from ...nn.module import _IncompatibleKeys

    if _fsdp_full_params(inner):  # flat parameters: no per-name target to copy into
        from ..fsdp import FullyShardedDataParallel as FSDP, StateDictType

        with FSDP.state_dict_type(inner, StateDictType.FULL_STATE_DICT):
            raw = {_plain_name(n): n for n in inner.state_dict()}
            inner.load_state_dict({raw[k]: v for k, v in model_state_dict.items() if k in raw}, strict=False)
        return _IncompatibleKeys(missing, unexpected)
    targets = {}
    for name, t in list(inner.named_parameters(remove_duplicate=False)) + list(inner.named_buffers(remove_duplicate=False)):
        targets.setdefault(_plain_name(name), t)
    staged = []
    for name, value in model_state_dict.items():
        if name not in targets or targets[name] is None:
            continue
        t = targets[name]
        v = _place_like(value, t)
        if tuple(v.shape) != tuple(t.shape):
            raise RuntimeError(f"set_model_state_dict: size mismatch for {name}: the state dict holds "
                               f"{tuple(v.shape)}, the model {tuple(t.shape)}")
        staged.append((t, v))
    with no_grad():
        for t, v in staged:
            t.copy_(v)
    return _IncompatibleKeys(missing, unexpected)


def set_optimizer_state_dict(model, optimizers, optim_state_dict, *, options=None):
    """Load a name-keyed optimizer state dict (from :func:`get_optimizer_state_dict`) into ``optimizers``."""
    options = options or StateDictOptions()
    if options.broadcast_from_rank0:
        optim_state_dict = _broadcast_rank0(optim_state_dict)
    by_id, by_name = _param_names(model)
    saved_groups = list(optim_state_dict.get("param_groups", []))
    for optim in _as_list(optimizers):
        _init_optim_state(optim)
        fsdp = _fsdp_root(model)
        if fsdp is not None:  # back into this rank's flat shards (NOTE [FSDP optimizer state])
            from ..fsdp._optim_state import full_optim_state_dict, sharded_optim_state_dict

            layout = full_optim_state_dict(fsdp, optim, None, False, "set_optimizer_state_dict")
            names = {_plain_name(n): n for n in layout["state"]}
            full = {"state": {names.get(k, k): v for k, v in optim_state_dict.get("state", {}).items()},
                    "param_groups": [next((g for g in saved_groups if {_plain_name(n) for n in g["params"]}
                                           == {_plain_name(n) for n in mine["params"]}), mine)
                                     for mine in layout["param_groups"]]}
            optim.load_state_dict(sharded_optim_state_dict(fsdp, optim, full, "set_optimizer_state_dict"))
            continue
        groups, state, start = [], {}, 0
        for group in optim.param_groups:
            names = [by_id[id(p)] for p in group["params"]]
            match = next((g for g in saved_groups if set(g["params"]) == set(names)), None)
            if match is None:
                raise ValueError(f"set_optimizer_state_dict: no saved param group holds the parameters {names}")
            # load_state_dict pairs saved positions with the current parameters in order
            groups.append({**{k: v for k, v in match.items() if k != "params"},
                           "params": list(range(start, start + len(names)))})
            start += len(names)
        flat_names = [by_id[id(p)] for g in optim.param_groups for p in g["params"]]
        for i, name in enumerate(flat_names):
            if name in optim_state_dict.get("state", {}):
                p = by_name[name]
                target = optim.state.get(p, {})
                state[i] = {k: _local_like(_place_like(v, target[k]) if k in target else v, p)
                            for k, v in optim_state_dict["state"][name].items()}
        optim.load_state_dict({"state": state, "param_groups": groups})


def set_state_dict(model, optimizers, *, model_state_dict, optim_state_dict, options=None):
    """:func:`set_model_state_dict` then :func:`set_optimizer_state_dict`; returns the former's result."""
    keys = set_model_state_dict(model, model_state_dict, options=options)
    set_optimizer_state_dict(model, optimizers, optim_state_dict, options=options)
    return keys
