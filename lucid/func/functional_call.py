"""``functional_call``: run a module with parameters and buffers given by name.

The module's own tensors are swapped out for the given ones for the duration of the
call and put back afterwards, even if the call raises. Combined with ``grad``/``vmap``
this gives per-sample gradients over a module's parameters.
"""
from __future__ import annotations

from contextlib import contextmanager

from .._core.tensor import Tensor

__all__ = ["functional_call"]


def _slots(module):
    """Every ``(dotted name, owner module, local name, dict)`` for parameters and buffers (tied names too)."""
    out = {}
    for prefix, mod in module.named_modules():
        for kind in ("_parameters", "_buffers"):
            store = getattr(mod, "__dict__", {}).get(kind)
            if not store:
                continue
            for name, t in store.items():
                if t is not None:
                    full = f"{prefix}.{name}" if prefix else name
                    out[full] = (mod, name, store, t)
    return out


def _merge(dicts, api):
    if isinstance(dicts, dict):
        dicts = (dicts,)
    if not isinstance(dicts, (tuple, list)) or not all(isinstance(d, dict) for d in dicts):
        raise TypeError(f"{api}: expected a dict or a tuple of dicts of tensors, got {type(dicts).__name__}")
    merged = {}
    for d in dicts:
        for k, v in d.items():
            if k in merged:
                raise ValueError(f"{api}: {k!r} appeared in multiple dictionaries; behavior of "
                                 "functional call is ambiguous")
            merged[k] = v
    return merged


def _resolve(module, name, api):
    """Owner module and local name for a dotted ``name`` that is not a registered slot."""
    *path, leaf = name.split(".")
    mod = module
    for p in path:
        sub = getattr(mod, "_modules", {}).get(p)
        if sub is None:
            raise AttributeError(f"{api}: {type(mod).__name__} has no submodule {p!r} (in {name!r})")
        mod = sub
    return mod, leaf


@contextmanager
def _reparametrize(module, values, tie_weights, strict, api):
    slots = _slots(module)
    if strict:
        missing = sorted(set(slots) - set(values))
        unexpected = sorted(set(values) - set(slots))
        if missing or unexpected:
            raise RuntimeError(f"{api}: strict=True and the names do not match the module's parameters and "
                               f"buffers; missing keys: {missing}, unexpected keys: {unexpected}")
    values = dict(values)
    if tie_weights:  # a name sharing a tensor with a given name gets the same substitute
        by_obj = {}
        for full, (_, _, _, t) in slots.items():
            by_obj.setdefault(id(t), []).append(full)
        for full in [k for k in values if k in slots]:
            for alias in by_obj[id(slots[full][3])]:
                if alias not in values:
                    values[alias] = values[full]
                elif values[alias] is not values[full]:
                    raise ValueError(f"{api}: got different values for {full!r} and {alias!r}, which are "
                                     "tied in the module; pass one of them or tie_weights=False")
    undo = []
    try:
        for full, v in values.items():
            if not isinstance(v, Tensor):
                raise TypeError(f"{api}: the value for {full!r} must be a Tensor, got {type(v).__name__}")
            if full in slots:
                _, local, store, old = slots[full]
                store[local] = v
                undo.append(lambda s=store, k=local, o=old: s.__setitem__(k, o))
            else:
                mod, local = _resolve(module, full, api)
                had = local in mod.__dict__
                old = mod.__dict__.get(local)
                object.__setattr__(mod, local, v)
                undo.append(lambda m=mod, k=local, h=had, o=old:
                            object.__setattr__(m, k, o) if h else m.__dict__.pop(k, None))
        yield
    finally:
        for fn in reversed(undo):
            fn()


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True,
                    strict=False):
    """Call ``module(*args, **kwargs)`` with its parameters/buffers replaced by the given tensors.

    Parameters
    ----------
    module : lucid.nn.Module
    parameter_and_buffer_dicts : dict or tuple of dicts
        Dotted names (``"0.weight"``, ``"fc.bias"``) to tensors; names not given keep the
        module's own tensors (unless ``strict``).
    args : Tensor or tuple, optional
        Positional arguments (a single non-tuple value is wrapped in a tuple).
    kwargs : dict, optional
    tie_weights : bool
        Names that share one tensor in the module (tied weights) all get the given value.
    strict : bool
        Require exactly the module's parameter and buffer names.

    Examples
    --------
    >>> import lucid, lucid.func as F
    >>> lin = lucid.nn.Linear(2, 1)
    >>> params = {"weight": lucid.ones(1, 2), "bias": lucid.zeros(1)}
    >>> F.functional_call(lin, params, (lucid.tensor([[1.0, 2.0]]),))
    tensor([[3.]])
    """
    api = "functional_call"
    values = _merge(parameter_and_buffer_dicts, api)
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize(module, values, tie_weights, strict, api):
        return module(*args, **(kwargs or {}))
