"""Optimizer state of FSDP models, unsharded and keyed by parameter name (``FSDP.optim_state_dict``).

NOTE [FSDP optimizer state]
An optimizer built on ``fsdp_model.parameters()`` holds state for the flat shards: each
rank a ``(S,)`` piece of every per-element state (momentum, moments). ``optim_state_dict``
all-gathers those pieces per unit (in the same unit and key order on every rank), cuts the
full vector back into the original parameters and keys the result by their names (as the
unwrapped model's ``named_parameters()``), so a checkpoint is independent of the world
size and loads into a plain model's optimizer too. ``optim_state_dict_to_load`` does the
reverse for this rank. Scalars (``step``) are copied to every name.
"""
from __future__ import annotations

import numpy as np

from ..._core import backend
from ..._core.tensor import Tensor, _wrap


def _layout(model):
    """``(units by id of their flat shard, name of every original parameter by id)``."""
    from .fully_sharded_data_parallel import _PREFIX, FullyShardedDataParallel

    units = {id(u._flat_param): u for u in model.modules() if isinstance(u, FullyShardedDataParallel)}
    names = {}
    for key, t, is_slot in model._walk(model, ""):
        if is_slot:
            names.setdefault(id(t), key)
    for n, p in model.named_parameters():  # parameters of ignored modules keep their own names
        if not getattr(p, "_fsdp_flat", False):
            names.setdefault(id(p), n.replace(_PREFIX, ""))
    return units, names


def _ordered(optim):
    seen, out = set(), []
    for g in optim.param_groups:
        for p in g["params"]:
            if id(p) not in seen:
                seen.add(id(p))
                out.append(p)
    return out


def _is_piece(v, unit):
    return isinstance(v, Tensor) and v.ndim == 1 and v.numel() == unit._shard_numel and unit._shard_numel > 0


def full_optim_state_dict(model, optim, osd, rank0_only, api):
    units, names = _layout(model)
    params = _ordered(optim)
    osd = optim.state_dict() if osd is None else osd
    state, out = osd["state"], {}
    for i, p in enumerate(params):
        st = state.get(i)
        u = units.get(id(p))
        if u is None:
            if st is not None:
                out[names[id(p)]] = {k: (v.detach().clone() if isinstance(v, Tensor) else v) for k, v in st.items()}
            continue
        if st is None:
            continue
        for s in u._slots:
            out.setdefault(names[id(s.param)], {})
        for key, v in st.items():
            if _is_piece(v, u):
                full = backend.host(v._data)
                if u._flat_world > 1:
                    full = np.empty(u._shard_numel * u._flat_world, v._data.dtype)
                    u._dist.all_gather_into_tensor(_wrap(full), _wrap(np.ascontiguousarray(backend.host(v._data))),
                                                   group=u._shard_pg)
                for s in u._slots:
                    out[names[id(s.param)]][key] = _wrap(full[s.offset:s.offset + s.numel].reshape(s.shape).copy())
            else:
                for s in u._slots:
                    out[names[id(s.param)]][key] = v.detach().clone() if isinstance(v, Tensor) else v
    groups = []
    for g in osd["param_groups"]:
        fqns = []
        for i in g["params"]:
            p = params[i]
            u = units.get(id(p))
            fqns += [names[id(s.param)] for s in u._slots] if u is not None else [names[id(p)]]
        groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": fqns})
    if rank0_only and model._dist.get_rank() != 0:
        return {}
    return {"state": out, "param_groups": groups}


def sharded_optim_state_dict(model, optim, full, api):
    """This rank's optimizer state dict (parameter indices) from a full one keyed by names."""
    if not isinstance(full, dict) or not {"state", "param_groups"} <= set(full):
        raise TypeError(f"{api}: expected a full optimizer state dict with 'state' and 'param_groups'")
    units, names = _layout(model)
    params = _ordered(optim)
    state, out = full["state"], {}
    for i, p in enumerate(params):
        u = units.get(id(p))
        if u is None:
            if names[id(p)] in state:
                out[i] = dict(state[names[id(p)]])
            continue
        have = [names[id(s.param)] in state for s in u._slots]
        if not any(have):
            continue
        if not all(have):
            missing = [names[id(s.param)] for s, h in zip(u._slots, have) if not h]
            raise KeyError(f"{api}: the state dict has no state for {missing}, but has it for other "
                           "parameters of the same FSDP unit")
        first = state[names[id(u._slots[0].param)]]
        entry = {}
        for key, v in first.items():
            if isinstance(v, Tensor) and tuple(v.shape) == u._slots[0].shape and key != "step":
                flat = np.zeros(u._shard_numel * u._flat_world, v._data.dtype)
                for s in u._slots:
                    t = state[names[id(s.param)]][key]
                    if tuple(t.shape) != s.shape:
                        raise ValueError(f"{api}: state {key!r} of {names[id(s.param)]} has shape "
                                         f"{tuple(t.shape)}, the parameter has {s.shape}")
                    flat[s.offset:s.offset + s.numel] = backend.host(t._data).reshape(-1)
                r = 0 if u._flat_world == 1 else u._rank
                entry[key] = _wrap(flat[r * u._shard_numel:(r + 1) * u._shard_numel].copy())
            else:
                entry[key] = v.detach().clone() if isinstance(v, Tensor) else v
        out[i] = entry
    if len(full["param_groups"]) != len(optim.param_groups):
        raise ValueError(f"{api}: the state dict has {len(full['param_groups'])} parameter groups, the "
                         f"optimizer {len(optim.param_groups)}")
    index = {id(p): i for i, p in enumerate(params)}
    groups = []
    for saved, mine in zip(full["param_groups"], optim.param_groups):
        groups.append({**{k: v for k, v in saved.items() if k != "params"},
                       "params": [index[id(p)] for p in mine["params"]]})
    return {"state": out, "param_groups": groups}
