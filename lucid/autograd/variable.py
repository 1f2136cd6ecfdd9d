"""``Variable``: PyTorch's deprecated wrapper, kept because old code calls it everywhere."""
from __future__ import annotations

from .._core.tensor import Tensor
from .engine import queue_callback as _queue_callback


class _ExecutionEngine:
    """``Variable._execution_engine``: the engine methods PyTorch code reaches through it.

    Only ``queue_callback`` (what DistributedDataParallel-style code calls) is provided; it
    is :func:`lucid.autograd.queue_callback`.
    """

    __slots__ = ()

    @staticmethod
    def queue_callback(callback):
        """Run ``callback()`` once the running backward has finished (see
        :func:`lucid.autograd.queue_callback`)."""
        return _queue_callback(callback)

    def __repr__(self):
        return "<lucid autograd engine>"


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, Tensor)


class Variable(metaclass=_VariableMeta):
    """``Variable(t, requires_grad=False)`` returns a Tensor (PyTorch's legacy wrapper).

    As in PyTorch the result shares ``t``'s data, has no history, and requires grad if
    asked; every Tensor is an instance of ``Variable``. ``volatile=True`` has no effect and
    warns, as in PyTorch.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import Variable
    >>> v = Variable(lucid.tensor([1.0, 2.0]), requires_grad=True)
    >>> (v * v).sum().backward()
    >>> v.grad
    tensor([2., 4.])
    >>> isinstance(v, Variable)
    True

    ``Variable._execution_engine.queue_callback(fn)`` is PyTorch's spelling of
    :func:`lucid.autograd.queue_callback`.
    """

    _execution_engine = _ExecutionEngine()

    def __new__(cls, data=None, requires_grad=False, volatile=False):
        if data is None:
            data = Tensor([])
        if not isinstance(data, Tensor):
            raise TypeError(f"Variable: data must be a Tensor, got {type(data).__name__}")
        if volatile:
            import warnings

            warnings.warn("volatile was removed and now has no effect. Use `with lucid.no_grad():` instead.",
                          UserWarning, stacklevel=2)
        out = data.detach()
        if requires_grad:
            out.requires_grad_(True)
        return out
