"""``export``'s implementation: trace, settle the dynamic dimensions, lift, check against eager."""
from __future__ import annotations

import math

from . import _trace
from .dynamic_shapes import Dim, InputGuard, UserError, UserTypeError, ValueRange, _DimHint, normalize_dynamic_shapes
from ._inputs import flatten_inputs
from ..utils._pytree import tree_structure
from ._draft import AdditionalInputs
from .exported_program import ExportedProgram, lift, module_call_graph, user_output


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


class _Symbol:
    """One dynamic size: the dims (input name, index) that share it, each as ``a*size + b``
    (a derived Dim; ``(1, 0)`` for the Dim itself), its bounds and its example value."""

    def __init__(self, name, lo, hi, kind):
        self.name, self.lo, self.hi, self.kind, self.dims = name, lo, hi, kind, []
        self.affine, self.value = {}, None

    def size_at(self, dim, value):
        a, b = self.affine.get(dim, (1, 0))
        return a * value + b

    def add(self, name, d, size, spec, where):
        a, b = (spec._a, spec._b) if isinstance(spec, Dim) else (1, 0)
        value, rem = divmod(size - b, a)
        if rem:
            raise UserError(f"export: Expected {where} = {size} of input {name!r} to be of the form "
                            f"{spec.__name__}, where {self.name} is an integer")
        if self.value is not None and value != self.value:
            first = self.dims[0]
            raise UserError(f"export: {where} = {size} does not match dynamic_shapes[{first[0]!r}][{first[1]}] = "
                            f"{self.size_at(first, self.value)}, which share the Dim {self.name}")
        if not self.lo <= value <= self.hi:
            raise UserError(f"export: the example input {name!r} has size {size} at dimension {d}, outside "
                            f"the range [{spec.min if isinstance(spec, Dim) else self.lo}, "
                            f"{spec.max if isinstance(spec, Dim) else self.hi}] of "
                            f"{spec.__name__ if isinstance(spec, Dim) else self.name}")
        self.value = value
        self.dims.append((name, d))
        self.affine[(name, d)] = (a, b)


def _symbols(specs, examples):
    """Dynamic dims grouped into symbols (a named Dim used twice, or through derived Dims, is
    one symbol); static ints checked."""
    symbols, by_dim_obj, k = [], {}, 0
    for name, per_dim in specs.items():
        shape = tuple(examples[name].shape)
        for d, spec in sorted(per_dim.items()):
            where = f"dynamic_shapes[{name!r}][{d}]"
            if spec is None or (isinstance(spec, _DimHint) and spec.type == "STATIC"):
                continue
            if isinstance(spec, int) and not isinstance(spec, bool):
                if spec != shape[d]:
                    raise UserError(f"export: {where} is {spec} but the example input has size {shape[d]}")
                continue
            if isinstance(spec, Dim):
                # Dims are one symbol by name, as in torch (two Dim("n") are the same n)
                root = spec._root
                sym = by_dim_obj.get(root.__name__)
                if sym is None:
                    sym = by_dim_obj[root.__name__] = _Symbol(root.__name__, root.min, root.max, "named")
                    symbols.append(sym)
                elif (sym.lo, sym.hi) != (root.min, root.max):
                    raise UserError(f"export: Found different definitions {root!r} and "
                                    f"{Dim(sym.name, min=sym.lo, max=sym.hi)!r} for the same symbolic dimension")
            elif isinstance(spec, _DimHint):
                lo = 0 if spec.min is None else spec.min
                sym = _Symbol(f"s{k}", lo, math.inf if spec.max is None else spec.max, spec.type)
                k += 1
                symbols.append(sym)
            else:
                raise UserTypeError(f"export: {where} must be a Dim, Dim.AUTO/DYNAMIC/STATIC, an int or None, "
                                    f"got {type(spec).__name__}")
            sym.add(name, d, shape[d], spec, where)
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


def _depends_on(mod, examples, trees, sym, key):
    """Whether tracing with ``sym``'s size changed gives another graph (NOTE [Export tracing])."""
    value = sym.value
    other = value + 1 if value + 1 <= sym.hi else value - 1
    if other < sym.lo or any(sym.size_at(dim, other) < 0 for dim in sym.dims):
        return True
    changed = dict(examples)
    for name, d in sym.dims:
        changed[name] = _resized(changed[name], d, sym.size_at((name, d), other))
    try:
        graph, _, answers = _trace.trace(mod, changed, trees)
    except Exception:
        return True
    return _trace.graph_key(graph, answers) != key


def _settle(mod, examples, trees, symbols, key):
    """Drop the symbols the model specialised on (``Dim.AUTO``) or refuse them. Hint symbols
    (AUTO, DYNAMIC) that cannot change alone but can together (``x + y``) become one, as
    torch's shape solver equates them."""
    kept, failed = [], []
    for sym in symbols:
        (failed if _depends_on(mod, examples, trees, sym, key) else kept).append(sym)
    for sym in _merged(mod, examples, trees, [s for s in failed if s.kind != "named"], key, kept):
        if sym.kind != "AUTO":
            _refuse(_violation(sym, examples, ""))
    for sym in failed:
        if sym.kind == "named":
            _refuse(_violation(sym, examples, ", or ties it to another dimension (one Dim for dimensions that "
                                              "must be equal)"))
    return sorted(kept, key=lambda s: symbols.index(getattr(s, "origin", s)))


def _refuse(error):
    """Raise, or in a draft export record the specialisation (NOTE [Draft export])."""
    from ._draft import FailureType, record

    if not record(FailureType.GUARD_ADDED, str(error)):
        raise error


def _violation(sym, examples, tied):
    name, d = sym.dims[0]
    return RuntimeError(
        f"export: Constraints violated ({sym.name})! The model's Python code specialised {name}.shape[{d}] "
        f"to its example size {examples[name].shape[d]} (a branch, len() or int() on it gives a different "
        f"program for another size){tied}. Use Dim.AUTO, or leave the dimension static.")


def _merged(mod, examples, trees, failed, key, kept):
    """Group the failed hint symbols of equal example size; keep (append to ``kept``) each group
    that can change as one; return the symbols still failing."""
    still = []
    for value in dict.fromkeys(s.value for s in failed):
        group = [s for s in failed if s.value == value]
        if len(group) > 1:
            one = _Symbol(group[0].name, max(s.lo for s in group), min(s.hi for s in group), group[0].kind)
            one.value = value
            for s in group:
                one.dims += s.dims
                one.affine.update(s.affine)
            if one.lo <= value <= one.hi and not _depends_on(mod, examples, trees, one, key):
                one.origin = group[0]
                kept.append(one)
                continue
        still += group
    return still


def _guards(names, examples, symbols, defaulted):
    import lucid

    # a dim of a derived Dim is guarded as ``[symbol, a, b]`` (JSON data, like the rest)
    sym_of = {dim: s.name if s.affine[dim] == (1, 0) else [s.name, *s.affine[dim]] for s in symbols for dim in s.dims}
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
    additional = dynamic_shapes if isinstance(dynamic_shapes, AdditionalInputs) else None
    if additional is not None:
        dynamic_shapes = additional.dynamic_shapes(mod, args, kwargs)
    names, params, defaulted = _trace.bind_examples(type(mod).forward, args, kwargs)
    trees, leaves, examples = flatten_inputs(names, params)  # NOTE [Container inputs]
    specs = normalize_dynamic_shapes(dynamic_shapes, names, [params[n] for n in names], trees, examples)
    symbols = _symbols(specs, examples)
    # The shadow evaluation draws random numbers (dropout): keep the caller's stream as it was.
    with lucid.random.fork_rng():
        calls = {}
        graph, traced_constants, answers = _trace.trace(mod, examples, trees, preserve, calls)
        symbols = _settle(mod, examples, trees, symbols, _trace.graph_key(graph, answers))
    _trace.lower_methods(graph)
    signature, state_dict, constants = lift(mod, graph, traced_constants, leaves, examples)
    root_specs = (tree_structure((tuple(args), kwargs)), tree_structure(user_output(graph, signature)))
    ep = ExportedProgram(lucid.nn.Module(), graph, signature, state_dict,
                         {s.name: ValueRange(s.lo, s.hi) for s in symbols},
                         module_call_graph(mod, names, tuple(preserve), calls, root_specs), (tuple(args), kwargs), constants,
                         guards=_guards(leaves, examples, symbols, defaulted), training=mod.training,
                         in_trees=[[n, trees[n]] for n in names])
    _check_against_eager(mod, ep, args, kwargs)
    if additional is not None:
        additional.verify(ep)
    return ep


def _check_against_eager(mod, ep, args, kwargs):
    """Run eager and the program from the same state; compare outputs and the state they leave.

    The program's state is the model's own tensors (as in torch), so both runs start from a
    snapshot, and the model is put back as it was: exporting updates no buffer."""
    import lucid

    state = [t for _, t in mod.named_parameters()] + [t for _, t in mod.named_buffers()]
    with lucid.random.fork_rng(), lucid.no_grad():
        before = [t.clone() for t in state]
        rng = lucid.get_rng_state()
        try:
            # each run on its own copy of the inputs: the forward may update an input in place
            expected = mod(*_copies(args), **_copies(kwargs))
            expected_state = _restore(state, before)
            lucid.set_rng_state(rng)
            got = ep.module()(*_copies(args), **_copies(kwargs))
            got_state = _restore(state, before)
        finally:
            _restore(state, before)
    if not _trace.same_values(expected, got):
        raise RuntimeError(f"export: the exported program of {type(mod).__name__} does not reproduce the eager "
                           "module on the example inputs (a Python side effect or a call lucid.fx could not see?)")
    if not _trace.same_values(expected_state, got_state):
        raise RuntimeError(f"export: the exported program of {type(mod).__name__} does not update its buffers as "
                           "the eager module does on the example inputs (state changed behind lucid.fx's back?)")


def _copies(tree):
    import lucid
    from ..utils._pytree import tree_map

    return tree_map(lambda v: v.clone() if isinstance(v, lucid.Tensor) else v, tree)


def _restore(state, before):
    """Put back the tensors a run changed (only those: the others keep their version counters);
    returns the values the run left."""
    after = [t.clone() for t in state]
    for t, old in zip(state, before):
        if not _trace.same_values(t, old):
            t.copy_(old)
    return after
