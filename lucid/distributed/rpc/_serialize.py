"""How RPC messages become bytes: pickle, with tensors and RRefs taken out of the stream.

NOTE [RPC pickling]
A message (a function, its arguments, a return value, an exception) is pickled, so RPC
runs whatever functions the caller names, as PyTorch's RPC does: only connect workers that
trust each other. Two kinds of objects get a persistent id instead of their own pickling:

* tensors (plain ``Tensor`` and ``nn.Parameter``) travel by value as a host array plus the
  ``requires_grad`` flag, each once per message (a tensor named twice arrives as one object);
  the sender sees the list of them, so distributed autograd can record which of them it sent
  (NOTE [Send and recv] in ``lucid/distributed/autograd/_context.py``). A tensor on a device
  raises: the values must be moved to the CPU first (PyTorch's TensorPipe without device maps);
* RRefs travel as (owner id, RRef id): the receiver gets the owner's own RRef back when it is
  the owner, else a user RRef pointing at the owner. Pickled any other way an RRef raises,
  as PyTorch's.
"""
from __future__ import annotations

import importlib
import io
import pickle
import sys
import types

import numpy as np

_HEADER = b"LRPC1"  # guards against a foreign peer writing to a worker's port


class TensorTable:
    """The tensors of one message in first-seen order, with the ``requires_grad`` ones marked."""

    def __init__(self):
        self.tensors, self._index = [], {}

    def index_of(self, t):
        k = id(t)
        i = self._index.get(k)
        if i is None:
            i = self._index[k] = len(self.tensors)
            self.tensors.append(t)
            return i, True
        return i, False

    def requiring_grad(self):
        return [t for t in self.tensors if t._rg]


def _tensor_classes():
    from lucid._core.tensor import Tensor
    from lucid.nn.parameter import Parameter

    return Tensor, Parameter


class _Pickler(pickle.Pickler):
    def __init__(self, stream, table, rref_cls):
        super().__init__(stream, protocol=pickle.HIGHEST_PROTOCOL)
        self.table, self._rref_cls = table, rref_cls
        self._tensor, self._param = _tensor_classes()

    def persistent_id(self, obj):
        cls = obj.__class__
        if cls is self._tensor or cls is self._param:
            i, first = self.table.index_of(obj)
            if not first:
                return ("T", i)
            data = obj._data
            if data.__class__ is not np.ndarray:
                raise RuntimeError(
                    f"rpc: a tensor on device '{obj.device}' (shape {tuple(obj.shape)}) can't be sent over RPC: "
                    "Lucid's RPC sends CPU tensors only; move it with .cpu() first")
            return ("T", i, data, bool(obj._rg), cls is self._param)
        if isinstance(obj, self._rref_cls):
            return ("R", obj._owner_id, obj._rref_id, obj._type_name)
        return None

    def reducer_override(self, obj):
        if obj.__class__ is types.FunctionType and not _findable(obj):
            home = _public_home(obj)
            if home is not None:
                return (_public_function, home)
        return NotImplemented


# Lucid's public functions are wrappers (``lucid.add`` is not the ``add`` of its defining module),
# so pickle can't find them by their own name: they travel as (public module, name).
_PUBLIC_MODULES = ("lucid", "lucid.nn.functional", "lucid.linalg", "lucid.special", "lucid.fft")


def _findable(fn):
    mod = sys.modules.get(fn.__module__)
    obj = mod
    for part in fn.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is fn


def _public_home(fn):
    for name in _PUBLIC_MODULES:
        mod = sys.modules.get(name)
        if mod is not None and getattr(mod, fn.__name__, None) is fn:
            return (name, fn.__name__)
    return None


def _public_function(module, name):
    return getattr(importlib.import_module(module), name)


class _Unpickler(pickle.Unpickler):
    def __init__(self, stream, on_tensor, on_rref):
        super().__init__(stream)
        self._on_tensor, self._on_rref, self._seen = on_tensor, on_rref, {}

    def persistent_load(self, pid):
        if pid[0] == "T":
            if len(pid) == 2:
                return self._seen[pid[1]]
            _, i, data, requires_grad, is_param = pid
            t = self._seen[i] = self._on_tensor(i, data, requires_grad, is_param)
            return t
        if pid[0] == "R":
            return self._on_rref(pid[1], pid[2], pid[3])
        raise pickle.UnpicklingError(f"rpc: unknown persistent id {pid[0]!r}")


def dumps(obj, rref_cls):
    """``(bytes, TensorTable)`` of ``obj`` (see NOTE [RPC pickling])."""
    table = TensorTable()
    buf = io.BytesIO()
    buf.write(_HEADER)
    _Pickler(buf, table, rref_cls).dump(obj)
    return buf.getbuffer(), table  # a view: no copy of a large payload


def loads(data, on_tensor, on_rref):
    """The object of :func:`dumps`; ``on_tensor(index, array, requires_grad, is_param)`` makes each
    tensor and ``on_rref(owner_id, rref_id, type_name)`` each RRef."""
    if bytes(data[:len(_HEADER)]) != _HEADER:
        raise RuntimeError("rpc: received a message that is not a Lucid RPC message")
    stream = io.BytesIO(data)
    stream.seek(len(_HEADER))
    return _Unpickler(stream, on_tensor, on_rref).load()


def make_tensor(data, requires_grad, is_param):
    """A fresh leaf tensor of ``data`` (a received host array)."""
    from lucid._core.tensor import _wrap

    Tensor, Parameter = _tensor_classes()
    if is_param:
        return Parameter(_wrap(data), requires_grad=requires_grad)
    t = _wrap(data)
    t._rg = bool(requires_grad)
    return t
