"""``ExportedProgram``: a captured graph with its state lifted to inputs (``torch.export.ExportedProgram``).

NOTE [Lifted state]
As in torch.export, the graph of an ExportedProgram is a pure function of its inputs: every
parameter becomes a placeholder ``p_<name>``, every buffer ``b_<name>``, every other tensor
the forward reads (a plain tensor attribute, a tensor made during tracing) a lifted constant
``c_<name>``, in that order, followed by the user inputs under their forward names.
``graph_signature`` says which placeholder is which. ``ep.module()`` undoes the lifting: it
builds a GraphModule whose placeholders for state are ``get_attr`` reads of its own
parameters and buffers, installed module by module in the original's order, so its
``state_dict`` has the original's keys in the original's order.
"""
from __future__ import annotations

import collections
import copy
import types

from ..fx.graph_module import GraphModule
from ..fx.node import map_aggregate
from .dynamic_shapes import check_inputs
from .graph_signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                              ModuleCallSignature, OutputKind, OutputSpec, TensorArgument)

__all__ = ["ExportedProgram", "SpecViolationError", "default_decompositions", "CallSpec", "Verifier",
           "TrainingIRVerifier"]

_ALLOWED_OPS = frozenset({"placeholder", "call_function", "get_attr", "output"})


class SpecViolationError(Exception):
    """``ExportedProgram.validate`` found the program inconsistent (torch's ``SpecViolationError``)."""


CallSpec = collections.namedtuple("CallSpec", ["in_spec", "out_spec"])
CallSpec.__doc__ = "The input and output pytree structures of an exported program (``ep.call_spec``)."


class Verifier:
    """Checks an ExportedProgram's invariants: ``Verifier().check(ep)`` runs ``ep.validate()``.

    Its ``dialect`` is ``"ATEN"``: the programs ``run_decompositions`` gives, whose state
    updates are functional (NOTE [Functionalized state updates] in ``_decomp.py``)."""

    dialect = "ATEN"

    def check(self, ep):
        ep.validate()

    def __call__(self, ep):
        self.check(ep)


class TrainingIRVerifier(Verifier):
    """The verifier of the programs ``export`` gives (dialect ``"TRAINING"``: in-place state
    updates still in the graph), as torch 2.13's."""

    dialect = "TRAINING"


def default_decompositions():
    """The decomposition table ``run_decompositions`` uses by default: empty, since an exported
    Lucid graph already calls only Lucid's public functions (its core op set).

    Examples
    --------
    >>> from lucid.export import default_decompositions
    >>> default_decompositions()
    {}
    """
    return {}


def _module():
    from ..nn import Module

    return Module


class ExportedProgram:
    """A Module's forward captured by :func:`lucid.export.export`, with its state lifted.

    Attributes: ``graph_module`` and ``graph`` (the lifted graph), ``graph_signature``,
    ``state_dict`` (parameters and persistent buffers), ``constants`` (non-persistent buffers
    and lifted tensor constants), ``range_constraints`` (dynamic size symbol -> range),
    ``module_call_graph``, ``example_inputs`` (``(args, kwargs)``).
    Call ``module()`` to run it; an ExportedProgram itself is not callable, as in torch.
    """

    def __init__(self, root, graph, graph_signature, state_dict, range_constraints, module_call_graph,
                 example_inputs=None, constants=None, *, guards=(), training=True, in_trees=None, dialect="TRAINING"):
        self._graph_module = GraphModule(root if isinstance(root, _module()) else _module()(), graph, "GraphModule")
        self._graph_signature = graph_signature
        self._state_dict = state_dict
        self._constants = dict(constants or {})
        self._range_constraints = dict(range_constraints)
        self._module_call_graph = list(module_call_graph)
        self._example_inputs = example_inputs
        self._guards = list(guards)
        self._training = training
        if dialect not in ("TRAINING", "ATEN"):
            raise ValueError(f"ExportedProgram: unknown dialect {dialect!r}")
        self._dialect = dialect
        # forward parameter -> tree of input leaves (NOTE [Container inputs]); None: one leaf each
        self._in_trees = None if in_trees is None else [[n, t] for n, t in in_trees]

    graph_module = property(lambda self: self._graph_module, doc="The GraphModule of the lifted graph.")
    graph = property(lambda self: self._graph_module.graph, doc="The lifted Graph.")
    graph_signature = property(lambda self: self._graph_signature, doc="The ExportGraphSignature.")
    state_dict = property(lambda self: self._state_dict, doc="Parameters and persistent buffers by target.")
    constants = property(lambda self: self._constants, doc="Non-persistent buffers and lifted constants.")
    range_constraints = property(lambda self: self._range_constraints, doc="Dynamic size symbol -> ValueRange.")
    module_call_graph = property(lambda self: self._module_call_graph, doc="The root's and submodules' entries.")
    example_inputs = property(lambda self: self._example_inputs, doc="The ``(args, kwargs)`` given to export.")

    @property
    def call_spec(self):
        """``CallSpec(in_spec, out_spec)``: the pytree structures of ``(args, kwargs)`` and of the
        user's output (the root's entry of ``module_call_graph``, as in torch)."""
        sig = self._module_call_graph[0].signature if self._module_call_graph else None
        return CallSpec(None, None) if sig is None else CallSpec(sig.in_spec, sig.out_spec)

    @property
    def verifier(self):
        """The class whose ``check(ep)`` validates this program (torch's ``Verifier``)."""
        return Verifier if self._dialect == "ATEN" else TrainingIRVerifier

    @property
    def verifiers(self):
        return [self.verifier]

    dialect = property(lambda self: self._dialect, doc="``TRAINING`` from export, ``ATEN`` after run_decompositions.")

    @property
    def tensor_constants(self):
        """The lifted constants and non-persistent buffers, by target (``constants``)."""
        return self._constants

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Unable to call ExportedProgram directly. "
                           "You should use `exported_program.module()` instead.")

    # ---------------------------------------------------------------- state
    def _state_value(self, spec):
        if spec.kind == InputKind.PARAMETER or (spec.kind == InputKind.BUFFER and spec.persistent):
            return self._state_dict[spec.target]
        return self._constants[spec.target]

    def named_parameters(self):
        for spec in self._graph_signature.input_specs:
            if spec.kind == InputKind.PARAMETER:
                yield spec.target, self._state_dict[spec.target]

    def parameters(self):
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self):
        for spec in self._graph_signature.input_specs:
            if spec.kind == InputKind.BUFFER:
                yield spec.target, self._state_value(spec)

    def buffers(self):
        for _, b in self.named_buffers():
            yield b

    # ---------------------------------------------------------------- running
    def module(self):
        """A new Module that runs the program like the original: same call signature (the
        forward's inputs), its parameters and buffers (``state_dict`` keys equal the
        original's), and the input guards checked at its entry (NOTE [Export guards]).

        The parameters are this program's ``state_dict`` tensors themselves (shared, as in
        torch), so training the module trains the program.
        """
        graph = copy.deepcopy(self.graph)
        state_specs = self._state_order()
        placeholders = {n.name: n for n in graph.nodes if n.op == "placeholder"}
        state_names = {s.arg.name for s in state_specs}
        first = next(n for n in graph.nodes if n.name not in state_names)
        for spec in state_specs:
            ph = placeholders[spec.arg.name]
            with graph.inserting_before(first):
                ga = graph.get_attr(spec.target)
            ga.meta = dict(ph.meta)
            ph.replace_all_uses_with(ga)
            graph.erase_node(ph)
            placeholders[spec.arg.name] = ga
        _write_back_mutations(graph, self._graph_signature, placeholders)
        gm = GraphModule(self._state_root(state_specs), graph, "GraphModule")
        _constants_as_attributes(gm, [s.target for s in state_specs if s.kind == InputKind.CONSTANT_TENSOR])
        gm.training = self._training
        guards, ranges, trees = self._guards, self._range_constraints, self._in_trees

        def check_guards(module, args, kwargs):
            return tuple(check_inputs(guards, ranges, args, kwargs, trees)), {}

        gm.register_forward_pre_hook(check_guards, with_kwargs=True)
        # The graph holds the mode it was exported in (dropout's ``training=True`` is an argument
        # of its call): a mode switch would change nothing, so it is refused, as in torch.
        gm.train = types.MethodType(_train, gm)
        gm.eval = types.MethodType(_eval, gm)
        return gm

    def _state_order(self):
        """The state specs in the order the original's ``state_dict`` lists them: module by
        module (pre-order), each module's parameters before its buffers."""
        rank = {e.fqn: i for i, e in enumerate(self._module_call_graph)}
        kind_rank = {InputKind.PARAMETER: 0, InputKind.BUFFER: 1, InputKind.CONSTANT_TENSOR: 2}
        specs = [s for s in self._graph_signature.input_specs if s.kind in kind_rank]

        def key(item):
            i, s = item
            owner = s.target.rpartition(".")[0]
            return (s.kind == InputKind.CONSTANT_TENSOR, rank.get(owner, len(rank)), kind_rank[s.kind], i)

        return [s for _, s in sorted(enumerate(specs), key=key)]

    def _state_root(self, state_specs):
        from ..nn import Module, Parameter

        root = Module()
        for spec in state_specs:
            owner = root
            *prefix, field = spec.target.split(".")
            for atom in prefix:
                if atom not in owner._modules:
                    owner.add_module(atom, Module())
                owner = owner._modules[atom]
            value = self._state_value(spec)
            if spec.kind == InputKind.PARAMETER:
                owner.register_parameter(field, value if isinstance(value, Parameter) else Parameter(value))
            elif spec.kind == InputKind.BUFFER:
                owner.register_buffer(field, value, persistent=bool(spec.persistent))
            else:
                setattr(owner, field, value)
        return root

    def run_decompositions(self, decomp_table=None, decompose_custom_triton_ops=False):
        """An equivalent ExportedProgram with the calls of the functions in ``decomp_table``
        (``{function: replacement}``) replaced by the graph of their replacement, and the
        in-place updates of parameters, buffers and user inputs made functional: each becomes
        an output of the graph with a ``BUFFER_MUTATION`` (``PARAMETER_MUTATION``,
        ``USER_INPUT_MUTATION``) spec, as torch's functionalization gives (NOTE [Functionalized
        state updates] in ``_decomp.py``). ``module()`` of the result writes them back.

        torch lowers its graph to the core ATen op set here; an exported Lucid graph already
        calls only Lucid's public functions, its own op set, so the default table is empty.

        Examples
        --------
        >>> import lucid
        >>> from lucid import nn
        >>> from lucid.export import export
        >>> m = nn.BatchNorm1d(2).train()
        >>> ep = export(m, (lucid.randn(4, 2),)).run_decompositions()
        >>> dict(ep.graph_signature.buffers_to_mutate).values()
        dict_values(['running_mean', 'running_var', 'num_batches_tracked'])
        """
        from ._decomp import apply_table, functionalize

        table = default_decompositions() if decomp_table is None else dict(decomp_table)
        for key, fn in table.items():
            if not callable(key) or not callable(fn):
                raise TypeError(f"run_decompositions: decomp_table maps functions to functions, got {key!r}: {fn!r}")
        graph = copy.deepcopy(self.graph)
        apply_table(graph, table)
        signature = functionalize(graph, copy.deepcopy(self._graph_signature))
        graph.eliminate_dead_code()
        graph.lint()
        return ExportedProgram(_module()(), graph, signature, self._state_dict,
                               self._range_constraints, self._module_call_graph, self._example_inputs,
                               self._constants, guards=self._guards, training=self._training,
                               in_trees=self._in_trees, dialect="ATEN")

    # ---------------------------------------------------------------- checking
    def validate(self):
        """Check the program's invariants (node kinds, placeholders against the signature,
        state against ``state_dict``/``constants``); raise ``SpecViolationError`` if broken."""
        from ..nn import Parameter

        try:
            self.graph.lint()
        except RuntimeError as e:
            raise SpecViolationError(f"validate: {e}") from None
        bad = [n.name for n in self.graph.nodes if n.op not in _ALLOWED_OPS]
        if bad:
            raise SpecViolationError(f"validate: nodes {bad} are not placeholder/call_function/get_attr/output")
        names = [n.target for n in self.graph.nodes if n.op == "placeholder"]
        specs = self._graph_signature.input_specs
        if names != [s.arg.name for s in specs]:
            raise SpecViolationError(f"validate: placeholders {names} do not match the signature's "
                                     f"inputs {[s.arg.name for s in specs]}")
        for s in specs:
            if s.kind == InputKind.USER_INPUT:
                continue
            store = self._state_dict if s.kind == InputKind.PARAMETER or (s.kind == InputKind.BUFFER and s.persistent) \
                else self._constants
            if s.target not in store:
                raise SpecViolationError(f"validate: {s.kind.name} {s.target!r} is missing from the program's state")
            if s.kind == InputKind.PARAMETER and not isinstance(store[s.target], Parameter):
                raise SpecViolationError(f"validate: parameter {s.target!r} is not a Parameter")
        n_user = sum(s.kind == InputKind.USER_INPUT for s in specs)
        if n_user != len(self._guards):
            raise SpecViolationError(f"validate: {n_user} user inputs but {len(self._guards)} input guards")
        if len(_flat_outputs(self.graph)) != len(self._graph_signature.output_specs):
            raise SpecViolationError("validate: the output specs do not match the graph's outputs")

    # ---------------------------------------------------------------- printing
    def print_readable(self, print_output=True):
        """The lifted graph module as readable Python (``graph_module.print_readable``)."""
        return self._graph_module.print_readable(print_output)

    def __str__(self):
        code = self._graph_module.print_readable(print_output=False).replace("\n", "\n    ")
        sig = str(self._graph_signature).replace("\n", "\n    ")
        return f"ExportedProgram:\n    {code}\nGraph signature: {sig}\nRange constraints: {self._range_constraints}\n"

    def __repr__(self):
        return self.__str__()


def _train(self, mode=True):
    raise NotImplementedError("Calling train() is not supported yet. The exported graph holds the mode it was "
                              "exported in: export the model again after model.train() / model.eval()")


def _eval(self):
    raise NotImplementedError("Calling eval() is not supported yet. The exported graph holds the mode it was "
                              "exported in: export the model again after model.train() / model.eval()")


def _constants_as_attributes(gm, targets):
    """Lifted constants are plain attributes of ``module()``, as in torch: outside its
    ``state_dict`` and ``buffers()`` (the GraphModule copy makes tensor attributes buffers)."""
    for target in targets:
        prefix, _, field = target.rpartition(".")
        owner = gm.get_submodule(prefix) if prefix else gm
        if field in owner._buffers:
            value = owner._buffers.pop(field)
            owner._non_persistent_buffers_set.discard(field)
            setattr(owner, field, value)


def _write_back_mutations(graph, signature, nodes):
    """The unlifted graph copies each mutation output into its tensor and returns only the
    user's output, as torch's ``module()`` does (NOTE [Functionalized state updates])."""
    import lucid

    specs = signature.output_specs
    k = sum(s.kind != OutputKind.USER_OUTPUT for s in specs)
    if not k:
        return
    out = next(n for n in graph.nodes if n.op == "output")
    values, user = out.args[0][:k], out.args[0][k]
    by_target = {s.target: s.arg.name for s in signature.input_specs if s.target is not None}
    user_phs = {n.target: n for n in graph.nodes if n.op == "placeholder"}
    with graph.inserting_before(out):
        for spec, value in zip(specs[:k], values):
            name = spec.arg.name if spec.kind == OutputKind.USER_INPUT_MUTATION else by_target[spec.target]
            dest = user_phs[spec.target] if spec.kind == OutputKind.USER_INPUT_MUTATION else nodes[name]
            graph.call_function(lucid.Tensor.copy_, (dest, value)).meta["tensor_method"] = "copy_"
    out.args = (user,)


def user_output(graph, signature):
    """The user's part of the graph's output (after the mutation outputs, if any)."""
    out = next(n for n in graph.nodes if n.op == "output")
    k = sum(s.kind != OutputKind.USER_OUTPUT for s in signature.output_specs)
    return _plain(out.args[0][k] if k else out.args[0])


def _plain(value):
    """fx's immutable containers as plain ones (what the pytree functions know)."""
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_plain(v) for v in value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _leaves(value):
    flat = []
    map_aggregate(value, flat.append)
    return flat


def _flat_outputs(graph):
    out = [n for n in graph.nodes if n.op == "output"]
    return _leaves(out[0].args[0]) if out else []


# ------------------------------------------------------------------ lifting
def lift(mod, graph, traced_constants, user_names, examples):
    """Turn the traced graph's ``get_attr`` reads into placeholders (NOTE [Lifted state]);
    returns ``(graph_signature, state_dict, constants)``."""
    from ._trace import _resolve_attr

    params = list(mod.named_parameters())
    buffers = list(mod.named_buffers())
    non_persistent = {f"{prefix}.{b}" if prefix else b for prefix, m in mod.named_modules()
                      for b in m._non_persistent_buffers_set}
    placeholders_by_id, input_specs, state_dict, constants = {}, [], {}, {}
    first = next(iter(graph.nodes))

    def add(prefix, target, value, kind, persistent=None):
        with graph.inserting_before(first):
            ph = graph.placeholder(f"{prefix}_{target.replace('.', '_')}")
        ph.target = ph.name
        ph.meta["val"] = value
        placeholders_by_id[id(value)] = ph
        input_specs.append(InputSpec(kind, TensorArgument(ph.name), target, persistent))

    for target, p in params:
        add("p", target, p, InputKind.PARAMETER)
        state_dict[target] = p
    for target, b in buffers:
        add("b", target, b, InputKind.BUFFER, target not in non_persistent)
        (state_dict if target not in non_persistent else constants)[target] = b
    lifted = 0
    for node in list(graph.nodes):
        if node.op != "get_attr":
            continue
        value = traced_constants[node.target] if node.target in traced_constants else _resolve_attr(mod, node.target)
        if id(value) not in placeholders_by_id:
            target = node.target
            if target in traced_constants:
                target, lifted = f"lifted_tensor_{lifted}", lifted + 1
            add("c", target, value, InputKind.CONSTANT_TENSOR)
            constants[target] = value
        node.replace_all_uses_with(placeholders_by_id[id(value)])
        graph.erase_node(node)
    user = [n for n in graph.nodes if n.op == "placeholder" and n.target in user_names]
    for n in user:
        import lucid

        val = examples[n.target]
        # (named by the forward's parameter: ``input`` stays ``input`` where the node is ``input_1``)
        arg = TensorArgument(n.target) if isinstance(val, lucid.Tensor) else ConstantArgument(n.target, val)
        input_specs.append(InputSpec(InputKind.USER_INPUT, arg, None))
    output_specs = [OutputSpec(OutputKind.USER_OUTPUT,
                               TensorArgument(v.name) if hasattr(v, "op") else ConstantArgument("", v), None)
                    for v in _flat_outputs(graph)]
    return ExportGraphSignature(input_specs, output_specs), state_dict, constants


def module_call_graph(mod, user_names, preserve=(), calls=None, root_specs=(None, None)):
    """The root's entry and one per submodule; a preserved submodule's signature names the
    graph values its call took and gave (``TensorArgument``s, as torch's)."""
    fqns = [name for name, _ in mod.named_modules()]
    for fqn in preserve:
        if fqn not in fqns:
            raise ValueError(f"export: preserve_module_call_signature names {fqn!r}, which is not a submodule")
    calls = calls or {}

    def signature(f):
        ins, outs, in_spec, out_spec = calls.get(f, ([], [], None, None))
        return ModuleCallSignature([TensorArgument(n) for n in ins], [TensorArgument(n) for n in outs],
                                   in_spec, out_spec)

    entries = [ModuleCallEntry("", ModuleCallSignature([], [], root_specs[0], root_specs[1], list(user_names)))]
    entries += [ModuleCallEntry(f, signature(f) if f in preserve else None) for f in fqns if f]
    return entries
