"""Padding layers: ``ConstantPad{1,2,3}d``, ``ZeroPad{1,2,3}d``, ``ReflectionPad{1,2,3}d``,
``ReplicationPad{1,2,3}d`` and ``CircularPad{1,2,3}d``, thin wrappers over ``F.pad``.

``padding`` is an int (every side) or a tuple ``(left, right[, top, bottom[, front, back]])``
(last dim first), as PyTorch.
"""
from __future__ import annotations

from . import functional as F
from .._core.primitive import OpError
from .module import Module

__all__ = [f"{kind}Pad{n}d" for kind in ("Constant", "Zero", "Reflection", "Replication", "Circular")
           for n in (1, 2, 3)]


class _PadDimError(NotImplementedError, ValueError):
    """A reflect/replicate pad layer refused its input's rank (PyTorch: NotImplementedError)."""


class _PadNd(Module):
    _n = 1
    _mode = "constant"

    def __init__(self, padding, value=0.0):
        super().__init__()
        name = type(self).__name__
        if isinstance(padding, int):
            padding = (padding,) * (2 * self._n)
        padding = tuple(int(p) for p in padding)
        if len(padding) != 2 * self._n:
            raise ValueError(f"{name}: padding must be an int or a tuple of {2 * self._n} ints, got {padding}")
        self.padding, self.value = padding, value

    def forward(self, input):
        if self._mode == "constant":  # any input with enough dims, as PyTorch
            return F.pad(input, self.padding, mode="constant", value=self.value)
        nd = input.ndim
        # an int test: under fx tracing ndim is a Proxy, and the pad is recorded as PyTorch's
        if type(nd) is int and nd not in (self._n + 1, self._n + 2):
            self._refuse(input)
        return F.pad(input, self.padding, mode=self._mode, value=None)

    def _refuse(self, input):
        # PyTorch's types: ValueError (circular), NotImplementedError or, with fewer dims than
        # padded ones, RuntimeError (reflect, replicate); each class also a ValueError, as before
        msg = (f"{type(self).__name__}: expected a {self._n + 1}-D or {self._n + 2}-D input, "
               f"got shape {tuple(input.shape)}")
        if self._mode == "circular":
            raise ValueError(msg)
        if input.ndim < self._n:
            raise OpError(msg + " (padding length should be at most two times the input dim)")
        raise _PadDimError(msg)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    _mode = "constant"

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class _ReflectionPadNd(_PadNd):
    _mode = "reflect"


class _ReplicationPadNd(_PadNd):
    _mode = "replicate"


class _CircularPadNd(_PadNd):
    _mode = "circular"


_BASES = {"constant": _ConstantPadNd, "reflect": _ReflectionPadNd, "replicate": _ReplicationPadNd,
          "circular": _CircularPadNd}


def _make(kind, mode, n):
    name = f"{kind}Pad{n}d"
    dims = {1: "(N, C, W) or (C, W)", 2: "(N, C, H, W) or (C, H, W)", 3: "(N, C, D, H, W) or (C, D, H, W)"}[n]
    what = {"constant": "a constant ``value``", "zeros": "zeros", "reflect": "the reflection of the input "
            "at its border (edge not repeated)", "replicate": "copies of the border element",
            "circular": "the input wrapped around"}[mode]
    example = (f">>> nn.{name}(1{', 0.5' if mode == 'constant' else ''})(lucid.ones(1, 1{', 2' * n})).shape\n"
               f"(1, 1{', 4' * n})")
    doc = (f"Pad the last {n} dim(s) of a {dims} input with {what}.\n\nParameters\n----------\n"
           f"padding : int or tuple of {2 * n} ints\n    Widths, last dim first: (left, right, ...).\n")
    if mode == "constant":
        doc += "value : float\n    The fill value.\n"
    doc += f"\nExamples\n--------\n>>> import lucid, lucid.nn as nn\n{example}\n"
    body = {"_n": n, "__doc__": doc, "__module__": __name__}
    if mode != "constant":
        def __init__(self, padding):
            _PadNd.__init__(self, padding, 0.0)

        body["__init__"] = __init__
    if mode == "zeros":
        body["extra_repr"] = _PadNd.extra_repr
    # PyTorch's hierarchy: ZeroPad{n}d is a ConstantPad{n}d, the others have one base per mode
    base = globals()[f"ConstantPad{n}d"] if mode == "zeros" else _BASES[mode]
    return type(name, (base,), body)


for _kind, _mode in (("Constant", "constant"), ("Zero", "zeros"), ("Reflection", "reflect"),
                     ("Replication", "replicate"), ("Circular", "circular")):
    for _n in (1, 2, 3):
        globals()[f"{_kind}Pad{_n}d"] = _make(_kind, _mode, _n)
del _kind, _mode, _n
