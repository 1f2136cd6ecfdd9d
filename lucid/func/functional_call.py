"""``functional_call``: run a module with parameters and buffers given by name.

The module's own tensors are swapped out for the given ones for the duration of the
call and put back afterwards, even if the call raises; the caller's dicts get back what the
module held under each given name at the end (a reassigned buffer), as in PyTorch. Combined with ``grad``/``vmap``
this gives per-sample gradients over a module's parameters.
"""
from __future__ import annotations

from contextlib import contextmanager

from .._core.tensor import Tensor

__all__ = ["functional_call", "stack_module_state"]


def _slots(module):
    """Every ``(dotted name, owner module, local name, dict)`` for parameters and buffers (tied names too)."""
    out = {}
    # a submodule reachable by two names (``self.b = self.a``) has a slot under each, so giving
    # both names different values is caught as a tie instead of silently using one of them
    for prefix, mod in module.named_modules(remove_duplicate=False):
        for kind in ("_parameters", "_buffers"):
            store = getattr(mod, "__dict__", {}).get(kind)
            if not store:
                continue
            for name, t in store.items():
                if t is not None:
                    full = f"{prefix}.{name}" if prefix else name
                    out[full] = (mod, name, store, t)
    return out


class _DictsError(TypeError, ValueError):
    """``parameter_and_buffer_dicts`` is not a dict or a sequence of dicts (PyTorch: ValueError;
    Lucid raised TypeError before)."""


def _merge(dicts, api):
    if isinstance(dicts, dict):
        dicts = (dicts,)
    if not isinstance(dicts, (tuple, list)) or not all(isinstance(d, dict) for d in dicts):
        raise _DictsError(f"{api}: expected a dict or a tuple of dicts of tensors, got {type(dicts).__name__}"
                          + (f" of {', '.join(sorted({type(d).__name__ for d in dicts}))}"
                             if isinstance(dicts, (tuple, list)) else ""))
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
    if strict:  # after tying: a tied alias of a given name is not missing (as in PyTorch)
        missing = sorted(set(slots) - set(values))
        unexpected = sorted(set(values) - set(slots))
        if missing or unexpected:
            raise RuntimeError(f"{api}: strict=True and the names do not match the module's parameters and "
                               f"buffers; missing keys: {missing}, unexpected keys: {unexpected}")
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
    held = {}
    try:
        with _reparametrize(module, values, tie_weights, strict, api):
            try:
                return module(*args, **(kwargs or {}))
            finally:
                held = {k: current_tensor(module, k) for k in values}
    finally:
        write_back(parameter_and_buffer_dicts, held)


def current_tensor(module, name):
    """The tensor ``module`` holds under the dotted ``name`` now (None where it holds none)."""
    *path, leaf = name.split(".")
    mod = module
    for p in path:
        mod = getattr(mod, "_modules", {}).get(p)
        if mod is None:
            return None
    for store in (mod.__dict__.get("_parameters"), mod.__dict__.get("_buffers"), mod.__dict__):
        if store is not None and store.get(leaf) is not None:
            return store[leaf]
    return None


def write_back(dicts, held):
    """Each given name's entry becomes what the module held under it when the call ended (as
    PyTorch's functional_call does, so a forward that reassigns a buffer, ``self.b = self.b + 1``,
    hands the new tensor back to the caller), even if the call raised."""
    for d in (dicts,) if isinstance(dicts, dict) else dicts:
        d.update({k: held[k] for k in d if held.get(k) is not None})


def stack_module_state(models):
    """Stack the parameters and buffers of same-shaped models along a new leading dim.

    For model ensembling with :func:`vmap` over :func:`functional_call`, as
    ``torch.func.stack_module_state``. Each stacked parameter is a new leaf that requires
    grad where the models' parameters do (a gradient of the ensemble lands on it, not on the
    models); buffers are stacked as they are.

    Parameters
    ----------
    models : sequence of Module
        Models of one class, all in training or all in eval mode, with the same names and shapes.

    Returns
    -------
    params, buffers : dict of str to Tensor
        By dotted name, each of shape ``(len(models), *shape)``.

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.func import functional_call, stack_module_state, vmap
    >>> models = [nn.Linear(3, 2) for _ in range(4)]
    >>> params, buffers = stack_module_state(models)
    >>> params["weight"].shape
    (4, 2, 3)
    >>> out = vmap(lambda p, b, x: functional_call(models[0], (p, b), (x,)), in_dims=(0, 0, None))(
    ...     params, buffers, lucid.ones(5, 3))
    >>> out.shape
    (4, 5, 2)
    """
    from ..ops.shape.joining import stack

    models = list(models)
    api = "stack_module_state"
    if not models:
        raise RuntimeError(f"{api}: Expected at least one model, got 0.")
    if len({m.training for m in models}) > 1:
        raise RuntimeError(f"{api}: Expected all models to have the same training/eval mode.")
    if len({type(m) for m in models}) > 1:
        raise RuntimeError(f"{api}: Expected all models to be of the same class.")

    def stacked(named, kind, leaf):
        tables = [dict(named(m)) for m in models]
        out = {}
        for name in tables[0]:
            values = []
            for i, table in enumerate(tables):
                if name not in table:
                    raise RuntimeError(f"{api}: model {i} has no {kind} {name!r} (model 0 has)")
                values.append(table[name])
            shapes = {tuple(v.shape) for v in values}
            if len(shapes) > 1:
                raise RuntimeError(f"{api}: {kind} {name!r} has different shapes across models: {sorted(shapes)}")
            grads = {v.requires_grad for v in values}
            if leaf and len(grads) > 1:
                raise RuntimeError(f"{api}: Expected {name} from each model to have the same .requires_grad")
            out[name] = stack([v.detach() for v in values])
            if leaf and grads == {True}:
                out[name].requires_grad_()
        for i, table in enumerate(tables[1:], 1):
            extra = sorted(set(table) - set(tables[0]))
            if extra:
                raise RuntimeError(f"{api}: model {i} has {kind}s model 0 lacks: {extra}")
        return out

    return (stacked(lambda m: m.named_parameters(), "parameter", True),
            stacked(lambda m: m.named_buffers(), "buffer", False))


def replace_all_batch_norm_modules_(root):
    """Make every batch norm in ``root`` use batch statistics always, in place (``torch.func``).

    Sets ``running_mean``, ``running_var`` and ``num_batches_tracked`` to None and
    ``track_running_stats`` to False, so a ``vmap`` over the model (model ensembling,
    per-sample gradients) does not write one running statistic for every example. Returns
    ``root``.

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> net = lucid.func.replace_all_batch_norm_modules_(nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3)))
    >>> net[1].running_mean is None, net[1].track_running_stats
    (True, False)
    """
    from ..nn.normalization import _BatchNorm

    for module in root.modules():
        if isinstance(module, _BatchNorm):
            module.running_mean = module.running_var = module.num_batches_tracked = None
            module.track_running_stats = False
    return root
