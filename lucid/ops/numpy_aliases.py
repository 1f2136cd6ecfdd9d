"""NumPy keyword aliases: ``axis`` for ``dim``, ``keepdims`` for ``keepdim``.

# NOTE [NumPy keyword aliases]
PyTorch's argument parser lets every native function and Tensor method take NumPy's names for
two parameters: ``axis`` for ``dim`` and ``keepdims`` for ``keepdim`` (``torch.sum(t, axis=0,
keepdims=True)``, ``t.softmax(axis=-1)``, ``torch.cat(ts, axis=0)``). Lucid's functions are plain
Python functions, so each public function with a ``dim``/``keepdim`` parameter declares the alias
itself as a keyword-only parameter defaulting to ``None`` and resolves it, first thing, with one
line guarded by ``is not None``::

    def logsumexp(input, dim=None, keepdim=False, *, axis=None, keepdims=None):
        if axis is not None:  # See NOTE [NumPy keyword aliases]
            dim = numpy_axis("logsumexp", dim, axis, None)
        if keepdims is not None:
            keepdim = numpy_keepdims("logsumexp", keepdim, keepdims)

A call that does not use the aliases pays two ``is None`` tests and the filling of two keyword
defaults (about 20 ns, below what ``timeit`` resolves on any op); a wrapper function around every
op would cost a Python frame per call. Giving both names is a ``TypeError``, as in PyTorch (one
blind spot: a ``dim`` passed explicitly *equal to its default* beside ``axis`` can't be told from
an absent one, and ``axis`` wins). A dim that the signature makes *required*
(``cumsum(input, dim)``, ``gather(input, dim, index)``) gets the default :data:`REQUIRED`
instead, and so do the required parameters after it, so that ``gather(x, axis=1, index=i)``
binds; the guard then also fires on a missing argument and :func:`numpy_axis` raises the
``TypeError`` Python would have raised. The aliases were added to the ~115 public functions
and methods of ``lucid/ops``, ``lucid.linalg``, ``lucid.special`` and ``lucid.fft`` by one
mechanical rewrite, so a new op with a ``dim`` should follow the pattern above.

Not covered, deliberately: PyTorch's ``x``/``a``/``x1`` aliases of ``input`` and ``x2`` of
``other``. They would turn every required ``input`` into an optional one (in every signature
and every error message) and cost the binary-op hot path four more keyword defaults per call;
the NumPy spellings people write are ``axis=`` and ``keepdims=``. Functions that PyTorch writes
in Python (``torch.split``, ``torch.unique``, ``torch.norm``, ``nn.functional``) refuse the
aliases there and are left alone here.
"""
from __future__ import annotations

__all__ = ["REQUIRED", "numpy_axis", "numpy_keepdims"]


class _Required:
    """The default of a parameter that is required unless its NumPy alias is given."""

    __slots__ = ()

    def __repr__(self):
        return "<required>"

    def __reduce__(self):
        return "REQUIRED"


REQUIRED = _Required()


def numpy_axis(op, dim, axis, dim_default, **later):
    """Resolve ``dim``/``axis`` for ``op``; ``later`` are the required parameters after ``dim``.

    Parameters
    ----------
    op : str
        The public name, for messages.
    dim, axis
        The two spellings as received.
    dim_default
        ``dim``'s default in the signature (:data:`REQUIRED` where it has none).
    **later
        Parameters after ``dim`` that are required: each must not be :data:`REQUIRED`.

    Returns
    -------
    The dim to use.

    Examples
    --------
    >>> from lucid.ops.numpy_aliases import numpy_axis
    >>> numpy_axis("sum", None, 1, None)
    1
    """
    for name, value in later.items():
        if value is REQUIRED:
            raise TypeError(f"{op}() missing required argument '{name}'")
    if axis is None:
        if dim is REQUIRED:
            raise TypeError(f"{op}() missing required argument 'dim' (or its NumPy alias 'axis')")
        return dim
    if dim is not dim_default and (dim is REQUIRED or dim_default is REQUIRED or dim != dim_default):
        raise TypeError(f"{op}() got values for both 'dim' and its NumPy alias 'axis'")
    return axis


def numpy_keepdims(op, keepdim, keepdims, keepdim_default=False):
    """Resolve ``keepdim``/``keepdims`` for ``op`` (``keepdims`` is not None here).

    Examples
    --------
    >>> from lucid.ops.numpy_aliases import numpy_keepdims
    >>> numpy_keepdims("sum", False, True)
    True
    """
    if keepdim is not keepdim_default:
        raise TypeError(f"{op}() got values for both 'keepdim' and its NumPy alias 'keepdims'")
    return keepdims
