"""``lucid.export``: capture a Module as a graph with guards, save and load it (``torch.export``).

``export(model, args)`` traces ``model.forward`` on the example inputs with ``lucid.fx``
(NOTE [Export tracing] in ``_trace.py``), lifts parameters and buffers to graph inputs
(NOTE [Lifted state] in ``exported_program.py``), checks the graph against eager on the
example, and returns an ``ExportedProgram``. ``ep.module()`` runs it, checking that inputs
are like the example (NOTE [Export guards] in ``dynamic_shapes.py``); ``save``/``load``
write and read it without pickle (NOTE [Exported program format] in ``serde.py``).
``ep.run_decompositions()`` makes in-place state updates mutation outputs (NOTE [Functionalized
state updates] in ``_decomp.py``), ``unflatten(ep)`` rebuilds the module hierarchy (NOTE
[Unflattening] in ``_unflatten.py``), ``draft_export`` exports where ``export`` would refuse
and reports why (NOTE [Draft export] in ``_draft.py``).

Examples
--------
>>> import lucid
>>> from lucid import nn
>>> from lucid.export import export, Dim
>>> model = nn.Sequential(nn.Linear(3, 2), nn.ReLU())
>>> ep = export(model, (lucid.randn(4, 3),), dynamic_shapes={"input": {0: Dim("batch", max=16)}})
>>> [(s.kind.name, s.arg.name) for s in ep.graph_signature.input_specs]
[('PARAMETER', 'p_0_weight'), ('PARAMETER', 'p_0_bias'), ('USER_INPUT', 'input')]
>>> ep.module()(lucid.randn(7, 3)).shape
(7, 2)
>>> ep.range_constraints
{'batch': VR[0, 16]}
"""
from __future__ import annotations

from ._inputs import register_dataclass
from .dynamic_shapes import Dim, InputGuard, ShapesCollection, UserError, ValueRange, dims
from .exported_program import CallSpec, ExportedProgram, SpecViolationError, Verifier, default_decompositions
from .graph_signature import (ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
                              ModuleCallSignature, OutputKind, OutputSpec, TensorArgument)
from ._draft import AdditionalInputs, Constraint, DraftExportReport, FailureReport, FailureType, draft_export
from ._unflatten import FlatArgsAdapter, InterpreterModule, UnflattenedModule, unflatten
from .serde import load, save

__all__ = ["export", "save", "load", "Dim", "ShapesCollection", "ExportedProgram", "ExportGraphSignature",
           "InputKind", "OutputKind", "InputSpec", "OutputSpec", "TensorArgument", "ConstantArgument",
           "ModuleCallEntry", "ModuleCallSignature", "SpecViolationError", "default_decompositions",
           "ValueRange", "InputGuard", "dims", "UserError", "register_dataclass", "unflatten",
           "UnflattenedModule", "InterpreterModule", "FlatArgsAdapter", "CallSpec", "Verifier", "draft_export",
           "DraftExportReport", "FailureReport", "FailureType", "AdditionalInputs", "Constraint"]


def export(mod, args, kwargs=None, *, dynamic_shapes=None, strict=False, preserve_module_call_signature=()):
    """Capture ``mod.forward`` on example inputs as an :class:`ExportedProgram` (``torch.export.export``).

    Parameters
    ----------
    mod : nn.Module
        The model. Export it in the mode it will run in (``eval()`` for inference).
    args : tuple
        Example positional inputs: tensors, constants, or tuples, lists and dicts of them
        (flattened to one graph input per leaf, NOTE [Container inputs] in ``_inputs.py``).
    kwargs : dict, optional
        Example keyword inputs.
    dynamic_shapes : dict, tuple, list or ShapesCollection, optional
        Per input (by forward parameter name, or positionally), ``{dim: spec}`` or one spec per
        dimension, a spec being a ``Dim``, ``Dim.AUTO``/``Dim.DYNAMIC``/``Dim.STATIC``, an int
        or None (a derived ``2*dim`` or ``dim + 1`` too). A container input takes a spec of its
        structure. Unmarked dimensions are specialised to the example's size.
    strict : bool
        Must be False: strict mode is torch's TorchDynamo bytecode capture, which Lucid has not.
    preserve_module_call_signature : tuple of str
        Submodule paths whose call signature ``module_call_graph`` records.

    Returns
    -------
    ExportedProgram

    Raises
    ------
    RuntimeError
        The forward branches on tensor data, specialises a dimension marked dynamic, or the
        traced program disagrees with eager on the example.

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.export import export
    >>> ep = export(nn.Linear(2, 1), (lucid.ones(3, 2),))
    >>> print(ep.graph_signature)
    <BLANKLINE>
    # inputs
    p_weight: PARAMETER target='weight'
    p_bias: PARAMETER target='bias'
    input: USER_INPUT
    <BLANKLINE>
    # outputs
    linear: USER_OUTPUT
    <BLANKLINE>
    >>> ep.module()(lucid.ones(4, 2))
    Traceback (most recent call last):
        ...
    lucid.export.dynamic_shapes.GuardError: Expected input at *args[0].shape[0] to be equal to 3, but got 4. If you meant for this dimension to be dynamic, please re-export and specify dynamic_shapes (e.g. with Dim.DYNAMIC)

    Limitations: see NOTE [Export tracing] and NOTE [Exported graphs are not functionalized]
    in ``lucid/export/_trace.py``.
    """
    from ._export import export_impl

    return export_impl(mod, args, kwargs, dynamic_shapes, strict, preserve_module_call_signature)
