"""``lucid.nn.utils.stateless``: PyTorch's first functional-call API, deprecated since PyTorch 2.0
in favour of :func:`lucid.func.functional_call`, which it runs on.

As in PyTorch, after the call each name given gets, in the caller's dict, the tensor the module
holds under that name at the end of the call (a module that reassigns a buffer, ``self.foo =
self.foo + 1``, hands the new tensor back there), and the module gets its own tensors back.
"""
from __future__ import annotations

import warnings
from contextlib import contextmanager

__all__ = ["functional_call"]

_DEPRECATED = ("functional_call: `lucid.nn.utils.stateless.functional_call` is deprecated (as "
               "`torch.nn.utils.stateless.functional_call` is since PyTorch 2.0) and will be removed. Please use "
               "`lucid.func.functional_call` instead which is a drop-in replacement.")


@contextmanager
def _reparametrize_module(module, parameters_and_buffers, tie_weights=False, strict=False, stack_weights=False):
    """Within the block, ``module`` holds the given tensors (by dotted name) instead of its own.

    On exit (even by an exception) the module gets its own tensors back and each given name's
    entry in ``parameters_and_buffers`` (a dict, or a tuple of dicts) becomes what the module
    held under it at the end, as PyTorch's. ``stack_weights`` (PyTorch's restore order) changes
    nothing here: the originals are always put back in reverse order.

    Examples
    --------
    >>> import lucid
    >>> from lucid.nn.utils.stateless import _reparametrize_module
    >>> lin = lucid.nn.Linear(2, 1)
    >>> with _reparametrize_module(lin, {"weight": lucid.ones(1, 2), "bias": lucid.zeros(1)}):
    ...     lin(lucid.tensor([[1.0, 2.0]]))
    tensor([[3.]])
    """
    from ...func.functional_call import _merge, _reparametrize, current_tensor, write_back

    values = _merge(parameters_and_buffers, "functional_call")
    held = {}
    try:
        with _reparametrize(module, values, tie_weights, strict, "functional_call"):
            try:
                yield
            finally:
                held = {k: current_tensor(module, k) for k in values}
    finally:
        write_back(parameters_and_buffers, held)


def functional_call(module, parameters_and_buffers, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """Call ``module(*args, **kwargs)`` with the given parameters and buffers in place of its own.

    Deprecated, with a ``FutureWarning``, as PyTorch's: use :func:`lucid.func.functional_call`
    (the same arguments). Here the caller's dict also gets back what the module holds at the
    end of the call under each given name (see the module docstring).

    Parameters
    ----------
    module : lucid.nn.Module
    parameters_and_buffers : dict of str to Tensor
        Dotted names (``"0.weight"``) to tensors; names not given keep the module's own.
    args : Tensor or tuple, optional
        Positional arguments (a single non-tuple value is wrapped in a tuple).
    kwargs : dict, optional
    tie_weights : bool
        Names that share one tensor in the module get the same given value.
    strict : bool
        Require exactly the module's parameter and buffer names.

    Examples
    --------
    >>> import lucid, warnings
    >>> from lucid.nn.utils import stateless
    >>> lin = lucid.nn.Linear(2, 1)
    >>> params = {"weight": lucid.ones(1, 2), "bias": lucid.zeros(1)}
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore", FutureWarning)
    ...     stateless.functional_call(lin, params, lucid.tensor([[1.0, 2.0]]))
    tensor([[3.]])
    """
    warnings.warn(_DEPRECATED, FutureWarning, stacklevel=2)
    from ..parallel import DataParallel

    if isinstance(module, DataParallel):
        raise RuntimeError("functional_call: The stateless API can't be used with nn.DataParallel module")
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(module, parameters_and_buffers, tie_weights=tie_weights, strict=strict):
        return module(*args, **(kwargs or {}))
