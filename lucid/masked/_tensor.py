"""``MaskedTensor``: a tensor whose elements a bool mask marks valid, and its constructors.

See NOTE [Masked tensors] in ``lucid/masked/__init__.py``.
"""
from __future__ import annotations

import warnings

import lucid

from .. import overrides
from .._core.tensor import Tensor
from ..ops.shape.views import alias as _alias

_DTYPES = ("float16", "float32", "float64", "bool", "int8", "int16", "int32", "int64")


def is_masked_tensor(obj, /):
    """Whether ``obj`` is a :class:`MaskedTensor`.

    Examples
    --------
    >>> import lucid
    >>> mt = lucid.masked.masked_tensor(lucid.arange(3.), lucid.tensor([True, False, True]))
    >>> lucid.masked.is_masked_tensor(mt), lucid.masked.is_masked_tensor(lucid.ones(2))
    (True, False)
    """
    return isinstance(obj, MaskedTensor)


def _validate(name, data, mask):
    if is_masked_tensor(data) or not isinstance(data, Tensor):
        raise TypeError(f"{name}: data must be a Tensor, got {type(data).__name__}")
    if is_masked_tensor(mask) or not isinstance(mask, Tensor):
        raise TypeError(f"{name}: mask must be a Tensor, got {type(mask).__name__}")
    if getattr(data, "layout", lucid.strided) is not lucid.strided:
        raise TypeError(f"{name}: data layout {data.layout} is not supported (strided tensors only)")
    if mask.dtype != lucid.bool:
        raise TypeError(f"{name}: mask must have dtype bool, got {mask.dtype}")
    if data.dtype.name not in _DTYPES:
        raise TypeError(f"{name}: {data.dtype} is not supported in MaskedTensor")
    if data.ndim != mask.ndim:
        raise ValueError(f"{name}: data.dim() must equal mask.dim() (got {data.ndim} and {mask.ndim})")
    if tuple(data.shape) != tuple(mask.shape):
        raise ValueError(f"{name}: data.size() must equal mask.size() (got {tuple(data.shape)} and "
                         f"{tuple(mask.shape)})")


def _as_masked(tensor, mask):
    """``tensor`` (plain, made by this call's caller) turned into a MaskedTensor with ``mask``."""
    overrides._activate()  # the protocol may have been switched off since the class was made
    tensor.__class__ = MaskedTensor
    tensor._masked_mask = mask
    return tensor


def wrap(data, mask):
    """A MaskedTensor over ``data`` (a view: gradients flow back to ``data``)."""
    return _as_masked(_alias(data), mask)


def plain(mt):
    """``mt``'s data as a plain tensor (a view: gradients flow back to ``mt``)."""
    # bind can re-enter itself through its public name (operands on a device that is not the
    # current one), which would hand the MaskedTensor to the dispatcher
    with overrides.DisableTorchFunctionSubclass():
        return _alias(mt)


def _leaf(name, data, mask, requires_grad):
    _validate(name, data, mask)
    if data.requires_grad:
        warnings.warn("It is not recommended to create a MaskedTensor with a tensor that requires_grad. "
                      "To avoid this, you can use data.detach().clone()", UserWarning, stacklevel=3)
    out = _as_masked(data.detach().clone(), mask.detach().clone())
    if requires_grad:
        out.requires_grad = True
    return out


class MaskedTensor(Tensor):
    """A tensor with a bool mask of the same shape: True marks an element as specified.

    Operations skip the masked-out elements (PyTorch's ``torch.masked.MaskedTensor``):
    elementwise ops keep the mask, binary ops need operands with equal masks (or a plain
    tensor or number), reductions ignore masked-out elements and mask out the slices that
    had none (NOTE [Masked tensors]). Build one with :func:`masked_tensor` (a leaf) or
    :func:`as_masked_tensor` (differentiable in its data).

    Examples
    --------
    >>> import lucid
    >>> from lucid.masked import masked_tensor
    >>> mt = masked_tensor(lucid.tensor([[1., 2., 3.], [4., 5., 6.]]),
    ...                    lucid.tensor([[True, False, True], [False, False, False]]))
    >>> mt.sum(1)
    MaskedTensor(
      [  4.0000,       --]
    )
    >>> (mt * 2).to_tensor(0.0)
    tensor([[2., 0., 6.],
            [0., 0., 0.]])
    """

    _masked_mask = None

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if not all(issubclass(cls, t) for t in types):
            return NotImplemented  # another tensor subclass (a nested tensor ...) takes part: let it answer
        from ._dispatch import dispatch

        return dispatch(func, args, kwargs or {})

    def __new__(cls, data, mask, requires_grad=False):
        return _leaf("MaskedTensor", data, mask, requires_grad)

    def __init__(self, data=None, mask=None, requires_grad=False):
        pass  # __new__ built it

    # ----------------------------------------------------------- components
    def get_data(self):
        """The data (masked-out elements hold arbitrary values), differentiable to this tensor."""
        return plain(self)

    def get_mask(self):
        """The bool mask: True where an element is specified."""
        return self._masked_mask

    def to_tensor(self, value):
        """A plain tensor with the masked-out elements set to ``value`` (differentiable)."""
        return lucid.masked_fill(plain(self), ~self._masked_mask, value)

    # ----------------------------------------------------------- autograd
    @property
    def grad(self):
        """The leaf's gradient as a MaskedTensor with this tensor's mask (None before a backward)."""
        g = self._grad
        if g is None:
            return Tensor.grad.fget(self)  # None, with the plain tensor's warning for a non-leaf
        return wrap(g.detach(), self._masked_mask)

    @grad.setter
    def grad(self, value):
        if is_masked_tensor(value):
            value = plain(value).detach()
        Tensor.grad.fset(self, value)

    # ----------------------------------------------------------- printing
    def __repr__(self):
        data = plain(self).detach().tolist()
        mask = self._masked_mask.tolist()
        if self.ndim == 0:
            text = "--" if not mask else _format(data)
            return f"MaskedTensor({text}, {mask})"
        body = "\n".join("  " + line for line in _rows(data, mask).split("\n"))
        return "MaskedTensor(\n" + body + "\n)"

    __str__ = __repr__

    def __reduce_ex__(self, protocol):
        return (_rebuild, (plain(self).detach(), self._masked_mask, self.requires_grad))


def _rebuild(data, mask, requires_grad):
    return masked_tensor(data, mask, requires_grad)


def _format(v):
    return f"{v:8.4f}" if isinstance(v, float) else str(v)


def _rows(data, mask):
    """PyTorch's layout: one bracketed row per innermost slice, ``--`` right-aligned in 8."""
    if not data or not isinstance(data[0], list):
        items = [_format(v) for v in data]
        width = max([8 if not m else len(s) for s, m in zip(items, mask)], default=0)
        return "[" + ", ".join("--".rjust(width) if not m else s for s, m in zip(items, mask)) + "]"
    subs = ["\n".join("  " + line for line in _rows(d, m).split("\n")) for d, m in zip(data, mask)]
    return "[\n" + ",\n".join(subs) + "\n]"


def masked_tensor(data, mask, requires_grad=False):
    """A MaskedTensor leaf holding copies of ``data`` and ``mask`` (as ``lucid.tensor``).

    Parameters
    ----------
    data : Tensor
        float16/32/64, bool or int8/16/32/64 values.
    mask : Tensor
        A bool tensor of ``data``'s shape; True marks specified elements.
    requires_grad : bool
        Make the result a leaf that requires grad (its ``.grad`` is a MaskedTensor).

    Examples
    --------
    >>> import lucid
    >>> from lucid.masked import masked_tensor
    >>> mt = masked_tensor(lucid.tensor([1., 2., 3.]), lucid.tensor([True, False, True]), requires_grad=True)
    >>> mt
    MaskedTensor(
      [  1.0000,       --,   3.0000]
    )
    >>> mt.sum().backward()
    >>> mt.grad
    MaskedTensor(
      [  1.0000,       --,   1.0000]
    )
    """
    return _leaf("masked_tensor", data, mask, requires_grad)


def as_masked_tensor(data, mask):
    """A MaskedTensor of a copy of ``data`` that keeps its autograd history (as ``lucid.as_tensor``):
    gradients flow back to ``data``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.masked import as_masked_tensor
    >>> x = lucid.tensor([1., 2., 3.], requires_grad=True)
    >>> as_masked_tensor(x * 2, lucid.tensor([True, False, True])).sum().backward()
    >>> x.grad
    tensor([2., 0., 2.])
    """
    _validate("as_masked_tensor", data, mask)
    return _as_masked(data.clone(), mask.clone())
