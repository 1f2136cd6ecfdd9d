"""Logic and bitwise ops: &, |, ^, ~, logical_and/or/xor/not (no gradients).
"""
from __future__ import annotations

from ..._core.backend import xp
from ..._core.primitive import bind
from ..._core.tensor import Tensor, tensor_method
from .._family import _as_tensor, nondiff

from .arithmetic import DtypeNotImplemented, _scalar_ok, promote
from .comparison import _BINARY_PARAMS


# -------------------------------------------------------------------- logic

def _logical(name, impl, dunder):
    prim = nondiff(name, impl)

    def fn(input, other):
        a, b = promote(input, other)
        ref = a if isinstance(a, Tensor) else b
        if getattr(ref, "dtype", None) is not None and ref.dtype.kind not in "biu":
            raise DtypeNotImplemented(f"{name}: not implemented for {ref.dtype} tensors (integer or bool only)")
        return bind(prim, (a, b), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` of integer or bool tensors.\n\n" + _BINARY_PARAMS
                  + "\n    Examples\n    --------\n    >>> import lucid\n"
                  f"    >>> lucid.{name}(lucid.tensor([12]), lucid.tensor([10])).tolist()\n"
                  f"    [{ {'and': 12 & 10, 'or': 12 | 10, 'xor': 12 ^ 10}[name.split('_')[1]] }]\n    ")
    for d in dunder:
        setattr(Tensor, d, fn)
    return prim, fn


bitwise_and_p, bitwise_and = _logical("bitwise_and", xp.bitwise_and, ("__and__", "bitwise_and"))
bitwise_or_p, bitwise_or = _logical("bitwise_or", xp.bitwise_or, ("__or__", "bitwise_or"))
bitwise_xor_p, bitwise_xor = _logical("bitwise_xor", xp.bitwise_xor, ("__xor__", "bitwise_xor"))
Tensor.__rand__ = lambda self, other: bitwise_and(other, self)
Tensor.__ror__ = lambda self, other: bitwise_or(other, self)
Tensor.__rxor__ = lambda self, other: bitwise_xor(other, self)
bitwise_not_p = nondiff("bitwise_not", xp.invert)
logical_not_p = nondiff("logical_not", xp.logical_not)


@tensor_method("__invert__", "bitwise_not")
def bitwise_not(input):
    """Elementwise bitwise NOT (``~``); logical NOT for bool tensors.

    Parameters
    ----------
    input : Tensor
        Integer or bool.

    Examples
    --------
    >>> import lucid
    >>> (~lucid.tensor([True, False])).tolist()
    [False, True]
    """
    x = _as_tensor(input)
    if x.dtype.kind not in "biu":
        raise DtypeNotImplemented(f"bitwise_not: not implemented for {x.dtype} tensors (integer or bool only)")
    return bind(bitwise_not_p, (x,), {})


@tensor_method("logical_not")
def logical_not(input):
    """Elementwise logical NOT (nonzero is True); bool result.

    Parameters
    ----------
    input : Tensor
        Any shape.

    Examples
    --------
    >>> import lucid
    >>> lucid.logical_not(lucid.tensor([0.0, 2.0])).tolist()
    [True, False]
    """
    return bind(logical_not_p, (_as_tensor(input),), {})


# --------------------------------------------------------------- logical ops

def _logical_binary(name, impl):
    prim = nondiff(name, impl)

    def fn(input, other):
        args = tuple(v if _scalar_ok(v) else _as_tensor(v) for v in (input, other))
        return bind(prim, args, {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = (f"Elementwise ``{name}`` of the truth values (nonzero is True); bool result.\n\n"
                  + _BINARY_PARAMS + f"\n    Examples\n    --------\n    >>> import lucid\n"
                  f"    >>> lucid.{name}(lucid.tensor([True, False]), lucid.tensor([True, True])).shape\n"
                  "    (2,)\n    ")
    setattr(Tensor, name, fn)
    return prim, fn


logical_and_p, logical_and = _logical_binary("logical_and", xp.logical_and)
logical_or_p, logical_or = _logical_binary("logical_or", xp.logical_or)
logical_xor_p, logical_xor = _logical_binary("logical_xor", xp.logical_xor)


__all__ = ['bitwise_and', 'bitwise_not', 'bitwise_or', 'bitwise_xor', 'logical_and', 'logical_not', 'logical_or', 'logical_xor']
