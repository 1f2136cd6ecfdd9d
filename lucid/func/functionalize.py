"""``functionalize`` (``torch.func.functionalize``)."""
from __future__ import annotations

import functools

_REMOVE = ("mutations", "mutations_and_views")


def functionalize(func, *, remove="mutations"):
    """``func`` with its in-place ops replaced by out-of-place ones, as ``torch.func.functionalize``.

    PyTorch's functionalization rewrites a traced program; its observable contract is that the
    function returns the same values and still applies the mutations of its *inputs* to them
    when it returns. Lucid's transforms already run in-place ops functionally on the values
    they trace (NOTE [In-place semantics], case 3), and eager calls keep Lucid's in-place
    semantics, so the function is returned wrapped, its results and input mutations unchanged.
    ``remove`` is checked as PyTorch checks it.

    Examples
    --------
    >>> import lucid
    >>> f = lucid.func.functionalize(lambda x: x.add_(1) * 2)
    >>> x = lucid.zeros(2)
    >>> f(x), x
    (tensor([2., 2.]), tensor([1., 1.]))
    """
    if remove not in _REMOVE:
        raise RuntimeError(f"functionalize(f, remove='mutations'): received invalid argument for remove={remove}. "
                           f"Valid options are: {', '.join(repr(r) for r in _REMOVE)}")
    if not callable(func):
        raise TypeError(f"functionalize: expected a callable, got {type(func).__name__}")

    @functools.wraps(func)
    def functionalized(*args, **kwargs):
        return func(*args, **kwargs)

    return functionalized
