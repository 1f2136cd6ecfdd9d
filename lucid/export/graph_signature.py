"""The signature of an exported graph: which placeholder is a parameter, a buffer, a lifted
constant or a user input, and what each output is (``torch.export.graph_signature``)."""
from __future__ import annotations

import dataclasses
import types
from enum import Enum, auto

__all__ = ["InputKind", "OutputKind", "TensorArgument", "ConstantArgument", "InputSpec", "OutputSpec",
           "ExportGraphSignature", "ModuleCallSignature", "ModuleCallEntry"]


class InputKind(Enum):
    """What a placeholder of an exported graph stands for."""

    USER_INPUT = auto()
    PARAMETER = auto()
    BUFFER = auto()
    CONSTANT_TENSOR = auto()
    CUSTOM_OBJ = auto()
    TOKEN = auto()


class OutputKind(Enum):
    """What an output of an exported graph is."""

    USER_OUTPUT = auto()
    LOSS_OUTPUT = auto()
    BUFFER_MUTATION = auto()
    PARAMETER_MUTATION = auto()
    GRADIENT_TO_PARAMETER = auto()
    GRADIENT_TO_USER_INPUT = auto()
    USER_INPUT_MUTATION = auto()
    TOKEN = auto()


class _Names(tuple):
    """The name tuples of a signature (tuples, as torch's), equal to a list of the same names
    too: earlier Lucid returned lists, and callers compare them with list literals."""

    def __eq__(self, other):
        return tuple.__eq__(self, tuple(other) if isinstance(other, list) else other)

    def __ne__(self, other):
        return not self == other

    __hash__ = tuple.__hash__


@dataclasses.dataclass
class TensorArgument:
    """A graph value that is a tensor, by node name."""

    name: str


@dataclasses.dataclass
class ConstantArgument:
    """A non-tensor input or output, specialised to ``value``."""

    name: str
    value: object


@dataclasses.dataclass
class InputSpec:
    """One placeholder: its ``kind``, its argument and, for state, the ``target`` it is read from."""

    kind: InputKind
    arg: object
    target: str | None
    persistent: bool | None = None

    def __post_init__(self):
        if self.kind == InputKind.BUFFER and self.persistent is None:
            raise ValueError("InputSpec: a BUFFER input needs persistent=True or False")


@dataclasses.dataclass
class OutputSpec:
    """One (flattened) output: its ``kind``, its argument and, for mutations, the ``target``."""

    kind: OutputKind
    arg: object
    target: str | None


@dataclasses.dataclass
class ExportGraphSignature:
    """The ``input_specs`` (in placeholder order: parameters, buffers, constants, user inputs)
    and ``output_specs`` of an exported graph."""

    input_specs: list
    output_specs: list

    @property
    def parameters(self):
        """Targets (``"fc.weight"``) of the lifted parameters, in placeholder order."""
        return _Names(s.target for s in self.input_specs if s.kind == InputKind.PARAMETER)

    @property
    def buffers(self):
        """Targets of the lifted buffers, in placeholder order."""
        return _Names(s.target for s in self.input_specs if s.kind == InputKind.BUFFER)

    @property
    def non_persistent_buffers(self):
        return _Names(s.target for s in self.input_specs if s.kind == InputKind.BUFFER and s.persistent is False)

    @property
    def lifted_tensor_constants(self):
        return _Names(s.target for s in self.input_specs if s.kind == InputKind.CONSTANT_TENSOR)

    @property
    def lifted_custom_objs(self):
        return _Names(s.target for s in self.input_specs if s.kind == InputKind.CUSTOM_OBJ)

    @property
    def user_inputs(self):
        """Names of the user-input placeholders (and values of specialised constants)."""
        return _Names(s.arg.name if isinstance(s.arg, TensorArgument) else s.arg.value
                      for s in self.input_specs if s.kind == InputKind.USER_INPUT)

    @property
    def user_outputs(self):
        return _Names(s.arg.name if isinstance(s.arg, TensorArgument) else s.arg.value
                      for s in self.output_specs if s.kind == OutputKind.USER_OUTPUT)

    def _map(self, specs, kind):
        return types.MappingProxyType({s.arg.name: s.target for s in specs if s.kind == kind})

    @property
    def inputs_to_parameters(self):
        """Placeholder name -> parameter target."""
        return self._map(self.input_specs, InputKind.PARAMETER)

    @property
    def inputs_to_buffers(self):
        return self._map(self.input_specs, InputKind.BUFFER)

    @property
    def inputs_to_lifted_tensor_constants(self):
        return self._map(self.input_specs, InputKind.CONSTANT_TENSOR)

    @property
    def inputs_to_lifted_custom_objs(self):
        return self._map(self.input_specs, InputKind.CUSTOM_OBJ)

    @property
    def buffers_to_mutate(self):
        """Output name -> the buffer it is the new value of (only after ``run_decompositions``:
        NOTE [Exported graphs are not functionalized] in ``_trace.py``)."""
        return self._map(self.output_specs, OutputKind.BUFFER_MUTATION)

    @property
    def parameters_to_mutate(self):
        return self._map(self.output_specs, OutputKind.PARAMETER_MUTATION)

    @property
    def user_inputs_to_mutate(self):
        return self._map(self.output_specs, OutputKind.USER_INPUT_MUTATION)

    @property
    def input_tokens(self):
        return _Names(s.arg.name for s in self.input_specs if s.kind == InputKind.TOKEN)

    @property
    def output_tokens(self):
        return _Names(s.arg.name for s in self.output_specs if s.kind == OutputKind.TOKEN)

    backward_signature = property(lambda self: None, doc="None: an exported program holds no joint graph.")
    assertion_dep_token = property(lambda self: None, doc="None: Lucid's graphs carry no effect tokens.")

    def replace_all_uses(self, old, new):
        """Rename the argument ``old`` to ``new`` in every spec (after renaming a graph node)."""
        for s in (*self.input_specs, *self.output_specs):
            if isinstance(s.arg, TensorArgument) and s.arg.name == old:
                s.arg.name = new

    def __str__(self):
        lines = ["# inputs"]
        for s in self.input_specs:
            target = "" if s.target is None else f" target={s.target!r}"
            persistent = "" if s.persistent is None else f" persistent={s.persistent}"
            lines.append(f"{s.arg.name}: {s.kind.name}{target}{persistent}")
        lines += ["", "# outputs"]
        for s in self.output_specs:
            target = "" if s.target is None else f" target={s.target!r}"
            lines.append(f"{s.arg.name}: {s.kind.name}{target}")
        return "\n" + "\n".join(lines) + "\n"


@dataclasses.dataclass
class ModuleCallSignature:
    """A module call's inputs and outputs (graph values), the pytree structures of its
    ``(args, kwargs)`` and of its result (``TreeSpec``s of ``lucid.utils._pytree``; None where
    unknown) and, for the root, its forward's parameter names."""

    inputs: list
    outputs: list
    in_spec: object = None
    out_spec: object = None
    forward_arg_names: list | None = None


@dataclasses.dataclass
class ModuleCallEntry:
    """A submodule of the exported module (``fqn``; ``""`` is the root) and, for the root and
    the modules named in ``preserve_module_call_signature``, its call signature."""

    fqn: str
    signature: ModuleCallSignature | None = None
