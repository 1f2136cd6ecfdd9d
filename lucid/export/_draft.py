"""``draft_export``, ``AdditionalInputs`` and ``Constraint`` (torch.export's).

NOTE [Draft export]
``draft_export`` exports where ``export`` would refuse, and says what it did instead, as
torch's does: Python control flow on tensor data is answered from the example (the branch
taken is baked in, with a runtime check, ``assert_scalar``, that later inputs take it too: a
``DATA_DEPENDENT_ERROR`` failure), and a dimension marked dynamic that
the model specialises is made static (a ``GUARD_ADDED`` failure). The report is
``ep._report``, a ``DraftExportReport`` (``failures``, ``successful()``). Lucid has no fake
kernels, so ``op_profiles`` and ``expressions_created`` stay empty, as torch's do for a
model without custom ops.
"""
from __future__ import annotations

import dataclasses
from enum import IntEnum

__all__ = ["draft_export", "DraftExportReport", "FailureReport", "FailureType", "AdditionalInputs", "Constraint"]


class FailureType(IntEnum):
    MISSING_FAKE_KERNEL = 1
    DATA_DEPENDENT_ERROR = 2
    GUARD_ADDED = 3
    MISMATCHED_FAKE_KERNEL = 4

    def __str__(self):
        return self.name


@dataclasses.dataclass
class FailureReport:
    """One thing ``draft_export`` did instead of failing: its ``failure_type`` and ``data``."""

    failure_type: FailureType
    data: dict
    xfail: bool = False

    def print(self, str_to_filename=None):
        return f"{self.failure_type}: {self.data.get('message', '')}"


class DraftExportReport:
    """What :func:`draft_export` found (NOTE [Draft export])."""

    def __init__(self, failures, str_to_filename=None, expressions_created=None, op_profiles=None):
        self.failures = list(failures)
        self.str_to_filename = dict(str_to_filename or {})
        self.expressions_created = dict(expressions_created or {})
        self.op_profiles = dict(op_profiles or {})

    def successful(self):
        return all(f.xfail for f in self.failures)

    def apply_suggested_fixes(self):
        raise NotImplementedError("DraftExportReport.apply_suggested_fixes is not implemented (torch's is not either)")

    def __str__(self):
        if not self.failures:
            return ("Congratulations: No issues are found during export, and it was able to soundly produce a "
                    "graph.\nYou can now change back to lucid.export.export()")
        lines = [f"{len(self.failures)} issue(s) found during export, and it was not able to soundly produce a graph."]
        lines += [f"{i + 1}. {f.print()}" for i, f in enumerate(self.failures)]
        return "\n".join(lines)

    __repr__ = __str__


def assert_scalar(value, expected, expression):
    """The runtime check a draft export puts where it answered a data-dependent question
    from the example (torch's ``_assert_scalar``): the program refuses inputs that would
    have taken the other branch."""
    got = bool(value) if isinstance(expected, bool) else int(value)
    if got != expected:
        raise RuntimeError(f"Runtime assertion failed for expression {expression} == {expected!r}: the "
                           "program was draft-exported with the other answer (NOTE [Draft export])")
    return None


def _register():
    from ..fx.node import has_side_effect

    has_side_effect(assert_scalar)


_register()


class _Draft:
    """The failures of the draft export running now (None outside ``draft_export``)."""

    failures = None


def record(failure_type, message, **data):
    """Called where ``export`` would raise: in a draft export, note it and go on (True)."""
    if _Draft.failures is None:
        return False
    _Draft.failures.append(FailureReport(failure_type, {"message": message, **data}))
    return True


def draft_export(mod, args, kwargs=None, *, dynamic_shapes=None, preserve_module_call_signature=(), strict=False,
                 prefer_deferred_runtime_asserts_over_guards=False):
    """Export as :func:`export` does, but where it would fail go on and report why
    (``torch.export.draft_export``; NOTE [Draft export] in ``lucid/export/_draft.py``).

    Returns
    -------
    ExportedProgram
        With the report as ``ep._report`` (a ``DraftExportReport``).

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.export import draft_export
    >>> class M(nn.Module):
    ...     def forward(self, x):
    ...         return x * 2 if x.sum() > 0 else x
    >>> ep = draft_export(M(), (lucid.ones(3),))
    >>> ep._report.successful(), [str(f.failure_type) for f in ep._report.failures]
    (False, ['DATA_DEPENDENT_ERROR'])
    """
    from . import export

    outer, _Draft.failures = _Draft.failures, []
    try:
        ep = export(mod, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict,
                    preserve_module_call_signature=preserve_module_call_signature)
        failures = _Draft.failures
    finally:
        _Draft.failures = outer
    seen, unique = set(), []
    for f in failures:  # (export traces more than once)
        key = (f.failure_type, f.data.get("message"))
        if key not in seen:
            seen.add(key)
            unique.append(f)
    ep._report = DraftExportReport(unique)
    return ep


class AdditionalInputs:
    """Dynamic shapes inferred from more example inputs (``torch.export.AdditionalInputs``):
    a dimension whose size differs between the inputs given to ``export`` and any added ones is
    ``Dim.DYNAMIC``, the others are static. Pass it as ``export``'s ``dynamic_shapes``; the
    exported program is then checked on each added input (``verify``).

    Examples
    --------
    >>> import lucid
    >>> from lucid import nn
    >>> from lucid.export import export, AdditionalInputs
    >>> extra = AdditionalInputs()
    >>> extra.add((lucid.ones(5, 3),))
    >>> ep = export(nn.Linear(3, 2), (lucid.ones(2, 3),), dynamic_shapes=extra)
    >>> ep.module()(lucid.ones(7, 3)).shape
    (7, 2)
    """

    def __init__(self):
        self._examples = []

    def add(self, args, kwargs=None):
        if type(args) is not tuple:
            raise AssertionError(f"Representative args {args} must be a tuple")
        if kwargs is not None and type(kwargs) is not dict:
            raise AssertionError(f"Representative kwargs {kwargs} must be None or a dict")
        self._examples.append((args, kwargs))

    def dynamic_shapes(self, m, args, kwargs=None):
        """``{forward parameter: spec}``, each tensor's spec a tuple with ``Dim.DYNAMIC`` where
        its size varies over the examples and None where it does not."""
        import lucid
        from ..utils._pytree import tree_flatten, tree_unflatten
        from ._trace import bind_examples
        from .dynamic_shapes import Dim

        bound = [bind_examples(type(m).forward, a, dict(k or {}))[1] for a, k in [(args, kwargs), *self._examples]]
        names = list(bound[0])
        flat = [tree_flatten([b[n] for n in names]) for b in bound]
        spec = flat[0][1]
        if any(s != spec for _, s in flat[1:]):
            raise ValueError("AdditionalInputs: the added inputs differ in structure from the example inputs")
        out = []
        for values in zip(*(leaves for leaves, _ in flat)):
            v = values[0]
            if not all(type(o) is type(v) for o in values):
                raise ValueError("The following inputs were found to have differing types, "
                                 f"so they cannot be marked as dynamic: {values}.")
            if isinstance(v, lucid.Tensor):
                shapes = [tuple(o.shape) for o in values]
                if any(len(s) != len(shapes[0]) for s in shapes):
                    raise ValueError(f"AdditionalInputs: inputs of different ranks cannot share a program: {shapes}")
                out.append(tuple(Dim.DYNAMIC if len({s[d] for s in shapes}) > 1 else None
                                 for d in range(len(shapes[0]))))
            else:
                if not all(o == v for o in values):
                    raise ValueError("The following inputs were found to have differing values, "
                                     f"but they cannot be marked as dynamic: {values}.")
                out.append(None)
        return dict(zip(names, tree_unflatten(out, spec)))

    def verify(self, ep):
        """Check that each added input passes the program's input guards."""
        from .dynamic_shapes import check_inputs

        for args, kwargs in self._examples:
            check_inputs(ep._guards, ep.range_constraints, args, kwargs or {}, ep._in_trees)


class Constraint:
    """The type of torch's constraint objects (``torch.export.Constraint``), which only its
    removed ``dynamic_dim`` API made: as in torch, a :class:`Dim` is not one, and Lucid makes
    none. Kept so that annotations and ``isinstance`` checks written against it work."""

    def __init__(self, *args, **kwargs):
        raise TypeError("Constraint: constraints are not built directly; describe dynamic dimensions with "
                        "lucid.export.Dim in export's dynamic_shapes")
