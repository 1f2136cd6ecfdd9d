"""``lucid.return_types`` (``torch.return_types``): the named-tuple types ops return.

Each name is the very class the op returns, so ``isinstance(lucid.max(x, 0),
lucid.return_types.max)`` holds. PyTorch's ``*_out`` types (what the ``out=`` forms return) are
the same classes here: Lucid's ``out=`` forms return the op's own result type.

NOTE [return_types module]
Before this module is imported, ``lucid.return_types`` is the namespace class of
``lucid/ops/reduce/_common.py``; importing ``lucid.return_types`` (as code written for PyTorch
does) makes the attribute this module, which carries every name that class has, as the same
objects, so both spellings keep working.

Examples
--------
>>> import lucid
>>> from lucid.return_types import max as max_result
>>> isinstance(lucid.max(lucid.tensor([[1.0, 4.0]]), dim=1), max_result)
True
"""
from __future__ import annotations

from .linalg import EighResult, QRResult as _LinalgQR, SlogdetResult, SVDResult as _LinalgSVD
from .linalg._more import CholeskyExResult, EigResult, InvExResult, LstsqResult, SolveExResult
from .linalg._solvers import LDLFactorExResult, LDLFactorResult, LUFactorExResult, LUFactorResult, LUResult
from .ops.elementwise.extra import _Frexp
from .ops.reduce._common import return_types as _reduce_types
from .ops.reduce.robust import _aminmax, _histogram, _values_indices
from .ops.torch_functions import HistogramddResult
from .ops.torch_legacy_linalg import LUUnpackResult, QRResult as _LegacyQR, SVDResult as _LegacySVD, \
    TriangularSolveResult
from .ops.torch_more import _GeqrfResult

_TYPES = {
    "max": _reduce_types.max, "min": _reduce_types.min, "sort": _reduce_types.sort, "topk": _reduce_types.topk,
    "cummax": _reduce_types.cummax, "cummin": _reduce_types.cummin,
    "median": _values_indices["median"], "nanmedian": _values_indices["nanmedian"],
    "kthvalue": _values_indices["kthvalue"], "mode": _values_indices["mode"],
    "aminmax": _aminmax, "frexp": _Frexp, "geqrf": _GeqrfResult, "histogram": _histogram,
    "histogramdd": HistogramddResult, "qr": _LegacyQR, "svd": _LegacySVD, "slogdet": SlogdetResult,
    "lu_unpack": LUUnpackResult, "triangular_solve": TriangularSolveResult,
    "linalg_cholesky_ex": CholeskyExResult, "linalg_eig": EigResult, "linalg_eigh": EighResult,
    "linalg_inv_ex": InvExResult, "linalg_ldl_factor": LDLFactorResult, "linalg_ldl_factor_ex": LDLFactorExResult,
    "linalg_lstsq": LstsqResult, "linalg_lu": LUResult, "linalg_lu_factor": LUFactorResult,
    "linalg_lu_factor_ex": LUFactorExResult, "linalg_qr": _LinalgQR, "linalg_slogdet": SlogdetResult,
    "linalg_solve_ex": SolveExResult, "linalg_svd": _LinalgSVD,
}
_NO_OUT_FORM = {"histogramdd"}  # as in PyTorch

globals().update(_TYPES)
globals().update({f"{name}_out": cls for name, cls in _TYPES.items() if name not in _NO_OUT_FORM})

all_return_types = list(dict.fromkeys(_TYPES.values()))


def pytree_register_structseq(cls):
    """Make the result type ``cls`` a pytree node (flattening to its fields).

    Lucid's result types are named tuples, which ``lucid.utils._pytree`` already treats as
    nodes, so this registers only other tuple subclasses; it returns ``cls`` either way.

    Examples
    --------
    >>> import lucid
    >>> from lucid.return_types import pytree_register_structseq, topk
    >>> pytree_register_structseq(topk) is topk
    True
    """
    from .utils import _pytree

    if cls in _pytree.SUPPORTED_NODES or _pytree.is_namedtuple_class(cls):
        return cls
    if not (isinstance(cls, type) and issubclass(cls, tuple)):
        raise TypeError(f"pytree_register_structseq: expected a tuple subclass, got {cls!r}")
    _pytree.register_pytree_node(cls, lambda seq: (list(seq), None), lambda values, _: cls(values))
    return cls


__all__ = sorted([*_TYPES, *(f"{n}_out" for n in _TYPES if n not in _NO_OUT_FORM),
                  "all_return_types", "pytree_register_structseq"])
