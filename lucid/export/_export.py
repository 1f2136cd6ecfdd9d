"""``export``'s implementation: trace, settle the dynamic dimensions, lift, check against eager."""
from __future__ import annotations

import math

from . import _trace
from .dynamic_shapes import Dim, InputGuard, ValueRange, _DimHint, normalize_dynamic_shapes
from .exported_program import ExportedProgram, lift, module_call_graph


def _check_call(mod, args, kwargs, strict):
    from ..nn import Module

    if not isinstance(mod, Module):
        raise ValueError(f"Expected `mod` to be an instance of `lucid.nn.Module`, got {type(mod)}.")
    if not isinstance(args, tuple):
        raise ValueError(f"Expected `args` to be a tuple of example positional inputs, got {type(args)}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise ValueError(f"Expected `kwargs` to be a dictionary of example keyword inputs, got {type(kwargs)}")
    if strict:
        raise NotImplementedError("export: strict=True is torch's TorchDynamo bytecode capture, which Lucid does not "
                                  "have; use strict=False (the default), which traces with lucid.fx")


def _check_inputs_supported(names, examples):
    import lucid
    from ..fx.node import map_aggregate

    for name in names:
        value = examples[name]
        if isinstance(value, lucid.Tensor):
            continue
        found = []
        map_aggregate(value, lambda v: found.append(v) if isinstance(v, lucid.Tensor) else None)
        if found:
            raise NotImplementedError(f"export: input {name!r} is a {type(value).__name__} holding tensors; "
                                      "pass each tensor as its own forward argument")


class _Symbol:
    """One dynamic size: the dims (input name, index) that share it and its bounds."""

    def __init__(self, name, lo, hi, kind):
        self.name, self.lo, self.hi, self.kind, self.dims = name, lo, hi, kind, []


def _symbols(specs, examples):
    """Dynamic dims grouped into symbols (a named Dim used twice is one symbol); static ints checked."""
    symbols, by_dim_obj, k = [], {}, 0
    for name, per_dim in specs.items():
        shape = tuple(examples[name].shape)
        for d, spec in sorted(per_dim.items()):
            where = f"dynamic_shapes[{name!r}][{d}]"
            if spec is None or (isinstance(spec, _DimHint) and spec.type == "STATIC"):
                continue
            if isinstance(spec, int) and not isinstance(spec, bool):
                if spec != shape[d]:
                    raise ValueError(f"export: {where} is {spec} but the example input has size {shape[d]}")
                continue
            if isinstance(spec, Dim):
                sym = by_dim_obj.get(id(spec))
                if sym is None:
                    sym = by_dim_obj[id(spec)] = _Symbol(spec.__name__, spec.min, spec.max, "named")
                    symbols.append(sym)
            elif isinstance(spec, _DimHint):
                lo = 0 if spec.min is None else spec.min
                sym = _Symbol(f"s{k}", lo, math.inf if spec.max is None else spec.max, spec.type)
                k += 1
                symbols.append(sym)
            else:
                raise TypeError(f"export: {where} must be a Dim, Dim.AUTO/DYNAMIC/STATIC, an int or None, "
                                f"got {type(spec).__name__}")
            if not sym.lo <= shape[d] <= sym.hi:
                raise ValueError(f"export: the example input {name!r} has size {shape[d]} at dimension {d}, outside "
                                 f"the range [{sym.lo}, {sym.hi}] of {sym.name}")
            sym.dims.append((name, d))
    names = [s.name for s in symbols if s.kind == "named"]
    if len(set(names)) != len(names):
        raise ValueError(f"export: two different Dims share a name among {names}")
    return symbols


def _resized(t, d, size):
    """``t`` with dimension ``d`` of length ``size`` (its own values repeated or cut)."""
    import lucid

    n = t.shape[d]
    if size <= n:
        return t.narrow(d, 0, size)
    reps = -(-size // max(n, 1))
    base = t if n else lucid.zeros(*[1 if i == d else s for i, s in enumerate(t.shape)], dtype=t.dtype, device=t.device)
    return lucid.cat([base] * reps, dim=d).narrow(d, 0, size)


def _depends_on(mod, examples, sym, key):
    """Whether tracing with ``sym``'s size changed gives another graph (NOTE [Export tracing])."""
    size = examples[sym.dims[0][0]].shape[sym.dims[0][1]]
    other = size + 1 if size + 1 <= sym.hi else size - 1
    if other < sym.lo or other < 0:
        return True
    changed = dict(examples)
    for name, d in sym.dims:
        changed[name] = _resized(changed[name], d, other)
    try:
        graph, _, answers = _trace.trace(mod, changed)
    except Exception:
        return True
    return _trace.graph_key(graph, answers) != key


def _settle(mod, examples, symbols, key):
    """Drop the symbols the model specialised on (``Dim.AUTO``) or refuse them."""
    kept = []
    for sym in symbols:
        if not _depends_on(mod, examples, sym, key):
            kept.append(sym)
            continue
        if sym.kind == "AUTO":
            continue
        name, d = sym.dims[0]
        raise RuntimeError(
            f"export: Constraints violated ({sym.name})! The model's Python code specialised {name}.shape[{d}] "
            f"to its example size {examples[name].shape[d]} (a branch, len() or int() on it gives a different "
            f"program for another size). Use Dim.AUTO, or leave the dimension static.")
    return kept


def _guards(names, examples, symbols, defaulted):
    import lucid

    sym_of = {dim: s.name for s in symbols for dim in s.dims}
    guards = []
    for name in names:
        v = examples[name]
        if isinstance(v, lucid.Tensor):
            dims = [sym_of.get((name, d), size) for d, size in enumerate(v.shape)]
            guards.append(InputGuard(name, "tensor", str(v.dtype).replace("lucid.", ""), dims))
        else:
            guards.append(InputGuard(name, "constant", value=v, optional=name in defaulted))
    return guards


def export_impl(mod, args, kwargs, dynamic_shapes, strict, preserve):
    from lucid import compiler

    # forward may branch on lucid.compiler.is_exporting(): every run export makes of it sees True,
    # the check against eager included (it checks the branch the program keeps)
    with compiler._exporting():
        return _export(mod, args, kwargs, dynamic_shapes, strict, preserve)


def _export(mod, args, kwargs, dynamic_shapes, strict, preserve):
    import lucid

    _check_call(mod, args, kwargs, strict)
    kwargs = dict(kwargs or {})
    names, examples, defaulted = _trace.bind_examples(type(mod).forward, args, kwargs)
    _check_inputs_supported(names, examples)
    specs = normalize_dynamic_shapes(dynamic_shapes, names, [examples[n] for n in names])
    symbols = _symbols(specs, examples)
    # The shadow evaluation draws random numbers (dropout): keep the caller's stream as it was.
    with lucid.random.fork_rng():
        graph, traced_constants, answers = _trace.trace(mod, examples)
        symbols = _settle(mod, examples, symbols, _trace.graph_key(graph, answers))
    _trace.lower_methods(graph)
    signature, state_dict, constants = lift(mod, graph, traced_constants, names, examples)
    ep = ExportedProgram(lucid.nn.Module(), graph, signature, state_dict,
                         {s.name: ValueRange(s.lo, s.hi) for s in symbols},
                         module_call_graph(mod, names, tuple(preserve)), (tuple(args), kwargs), constants,
                         guards=_guards(names, examples, symbols, defaulted), training=mod.training)
    _check_against_eager(mod, ep, args, kwargs)
    return ep


def _check_against_eager(mod, ep, args, kwargs):
    import lucid

    with lucid.random.fork_rng():
        state = lucid.get_rng_state()
        with lucid.no_grad():
            expected = mod(*args, **kwargs)
            lucid.set_rng_state(state)
            got = ep.module()(*args, **kwargs)
    if not _trace.same_values(expected, got):
        raise RuntimeError(f"export: the exported program of {type(mod).__name__} does not reproduce the eager "
                           "module on the example inputs (a Python side effect or a call lucid.fx could not see?)")
