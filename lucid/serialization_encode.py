"""``lucid.save``'s encoder: an object tree -> the JSON structure and the arrays of a
safetensors file (NOTE [Checkpoint format] in ``serialization.py``, NOTE [Shared storage],
NOTE [Config objects])."""
from __future__ import annotations

import dataclasses
import json
import math
import struct
import sys
from collections import OrderedDict

import numpy as np

from ._core import backend as _backend
from ._core.backend import host
from ._core.dtypes import dtype as _dtype
from ._core.tensor import Tensor
from .serialization_format import _FORMAT, _STRUCT_KEY, _code_of


class _Encoder:
    """Turns a container into its JSON structure and an ordered ``name -> array`` table."""

    def __init__(self):
        self.arrays = {}
        self.names = {}  # id(tensor) -> name, so one tensor object is stored once
        self.keep = []  # keep encoded objects alive so their ids stay unique
        self.roots = {}  # (device, root address, bytes) -> (root, [(node, array)]): NOTE [Shared storage]

    def name_for(self, obj, path):
        if id(obj) in self.names:
            return self.names[id(obj)], False
        base = path or "tensor"
        name, k = base, 1
        while name in self.arrays or name == "__metadata__":
            name, k = f"{base}#{k}", k + 1
        self.names[id(obj)] = name
        self.keep.append(obj)
        return name, True

    def array(self, arr, obj, path):
        name, new = self.name_for(obj, path)
        if new:
            if arr.dtype.kind == "c":  # safetensors has no complex dtype: store (re, im) pairs
                arr = np.ascontiguousarray(arr).view(arr.real.dtype).reshape(arr.shape + (2,))
            if _code_of(arr.dtype) is None:
                raise TypeError(f"lucid.save: unsupported dtype {arr.dtype} at {path or '<root>'!r}")
            # (ascontiguousarray makes 0-d arrays 1-d, hence the reshape)
            self.arrays[name] = np.ascontiguousarray(arr, dtype=arr.dtype.newbyteorder("<")).reshape(arr.shape)
        return name

    def encode(self, obj, path=""):
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, Tensor) and obj.is_quantized is True:
            return self.quantized(obj, path)
        if isinstance(obj, _dtype):  # e.g. a quantized module's ``_packed_params.dtype``
            return {"dtype": obj.name}
        if isinstance(obj, Tensor):
            if type(obj).__name__.endswith("Tracer"):
                raise TypeError(f"lucid.save: can't save a transform tracer at {path or '<root>'!r}")
            # Values are written from the host (one explicit copy for a device tensor); the
            # device is recorded so load() puts them back there (PyTorch's default).
            node = {"t": self.array(host(obj._data), obj, path), "rg": bool(obj._rg)}
            if obj._data.dtype.kind != "c" and _backend.has_values(obj._data):
                root = _root(obj._data)
                key = (str(obj.device), _backend.data_pointer(root), root.nbytes)
                self.roots.setdefault(key, (root, []))[1].append((node, obj._data))
            if obj._data.__class__ is not np.ndarray:
                node["device"] = str(obj.device)
            if obj._data.dtype.kind == "c":
                node["complex"] = True
            if type(obj).__name__ == "Parameter":
                node["param"] = True
            return node
        if isinstance(obj, np.ndarray):
            node = {"nd": self.array(obj, obj, path)}
            if obj.dtype.kind == "c":
                node["complex"] = True
            return node
        if isinstance(obj, (int, np.integer)):
            return int(obj)
        if isinstance(obj, (float, np.floating)):
            f = float(obj)
            return f if math.isfinite(f) else {"float": repr(f)}
        if isinstance(obj, np.bool_):
            return bool(obj)
        if isinstance(obj, (list, tuple)):
            items = [self.encode(v, _join(path, i)) for i, v in enumerate(obj)]
            return {"tuple": items} if isinstance(obj, tuple) else {"list": items}
        if isinstance(obj, dict):
            tag = "odict" if isinstance(obj, OrderedDict) else "dict"
            node = {tag: [[self.key(k, path), self.encode(v, _join(path, k))] for k, v in obj.items()]}
            meta = getattr(obj, "_metadata", None) if tag == "odict" else None
            if isinstance(meta, dict):  # a state dict's per-module versions, as torch.save keeps them
                node["meta"] = self.encode(meta, _join(path, "_metadata"))
            return node
        state = _config_state(obj)
        if state is not None:  # See NOTE [Config objects]
            return {"obj": _class_name(type(obj)), "state": self.encode(state, path)}
        raise TypeError(
            f"lucid.save: can't save an object of type {type(obj).__name__} at {path or '<root>'!r}; "
            "supported: Tensor, ndarray, None, bool, int, float, str, lists, tuples and dicts of them, "
            "and dataclass / argparse.Namespace / SimpleNamespace instances of them"
        )

    def quantized(self, q, path):
        """A quantized tensor: its integers and its quantizer (NOTE [Quantized tensors])."""
        node = {"q": q.dtype.name, "scheme": q.qscheme().name, "ints": self.encode(q.int_repr(), path)}
        if q.qscheme().name.startswith("per_tensor"):
            node["scale"], node["zero_point"] = float(q.q_scale()), int(q.q_zero_point())
        else:
            node["scales"] = self.encode(q.q_per_channel_scales(), _join(path, "scales"))
            node["zero_points"] = self.encode(q.q_per_channel_zero_points(), _join(path, "zero_points"))
            node["axis"] = int(q.q_per_channel_axis())
        return node

    def key(self, k, path):
        if isinstance(k, Tensor) or isinstance(k, np.ndarray):
            raise TypeError(f"lucid.save: dict keys can't be tensors (at {path or '<root>'!r})")
        return self.encode(k, path)


# NOTE [Config objects]
# ``torch.save`` pickles any object, and training scripts keep their configuration beside the
# weights: a dataclass (build-nanogpt's ``{'model': ..., 'config': raw_model.config}``), the
# ``argparse.Namespace`` of their arguments. Lucid writes an instance of a dataclass,
# ``argparse.Namespace`` or ``types.SimpleNamespace`` as its class's name and its attributes
# (``vars(obj)``, or a slotted dataclass's fields), which must be savable themselves:
# ``{"obj": "module.qualname", "state": {"dict": ...}}``. Loading never imports anything: as
# PyTorch's weights-only ``torch.load``, it rebuilds the object only when its class is registered
# with ``add_safe_globals`` (found by that name, NOTE [Safe globals]), by ``cls.__new__(cls)``
# and the saved attributes set directly (no ``__init__`` or ``__setstate__`` runs); otherwise it raises
# pickle.UnpicklingError naming the class and the call that allows it.
def _config_state(obj):
    """The attribute dict to save for a config object, or None for any other object."""
    cls = type(obj)
    argparse = sys.modules.get("argparse")  # (not imported: nothing can be a Namespace)
    if cls.__name__ == "SimpleNamespace" and cls.__module__ == "types" or \
            argparse is not None and cls is argparse.Namespace:
        return dict(vars(obj))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "__dict__"):
            return dict(vars(obj))
        return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    return None


def _class_name(cls):
    return f"{cls.__module__}.{cls.__qualname__}"


# NOTE [Shared storage]
# PyTorch saves storages, so tensors that view one storage load as views of one storage again
# (``save([x, x[1:]])``: writing the loaded ``x[1:]`` changes the loaded ``x``). A safetensors
# file has no views, so when two or more saved host tensors view one NumPy array, that array
# (the root of their ``.base`` chain) is stored once, and each tensor's node says where it lies
# in it: ``"view": [offset, shape, strides]`` in elements, and ``"id"`` its own name, so that two
# tensor objects with one view (``x``, ``x.detach()``) load as two, each with its requires_grad.
# Loading builds them as strided views of one array sharing one version counter. A lone view is
# stored compact (PyTorch would save its whole storage), so files of ordinary state dicts stay
# plain safetensors tensors. Device
# tensors too: roots are told apart by device and address (a device array's ``.base`` may be a
# fresh wrapper each time), and loading puts the storage on the device once and views it there.
def _root(arr):
    while _backend.is_array(arr.base):
        arr = arr.base
    return arr


def _view_of(arr, root):
    """``[offset, shape, strides]`` in elements placing ``arr`` in ``root``, or None."""
    size = root.dtype.itemsize
    if arr.dtype != root.dtype or not root.flags.c_contiguous:
        return None
    off = _backend.data_pointer(arr) - _backend.data_pointer(root)
    if off % size or any(st % size for st in arr.strides):
        return None
    return [off // size, list(arr.shape), [st // size for st in arr.strides]]


def _share_storage(enc):
    """Rewrite the nodes of tensors that view one array as views of it (NOTE [Shared storage])."""
    for root, members in enc.roots.values():
        if len({n["t"] for n, _ in members}) < 2:
            continue
        views = [_view_of(arr, root) for _, arr in members]
        if any(v is None for v in views):
            continue
        name, k = members[0][0]["t"] + ".storage", 1
        while name in enc.arrays:
            name, k = f"{members[0][0]['t']}.storage#{k}", k + 1
        for node, _ in members:
            enc.arrays.pop(node["t"], None)
        enc.arrays[name] = np.ascontiguousarray(host(root).reshape(-1), dtype=root.dtype.newbyteorder("<"))
        for (node, _), view in zip(members, views):
            # "id" tells apart distinct tensors with one view (x and x.detach()): each loads as its own
            node["id"], node["t"], node["view"] = node["t"], name, view


def _join(path, k):
    return f"{path}.{k}" if path else str(k)


def _to_bytes(obj):
    enc = _Encoder()
    structure = enc.encode(obj)
    _share_storage(enc)
    header, offset = {}, 0
    for name, arr in enc.arrays.items():
        header[name] = {"dtype": _code_of(arr.dtype), "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    header["__metadata__"] = {"format": _FORMAT, _STRUCT_KEY: json.dumps(structure, allow_nan=False)}
    raw = json.dumps(header, allow_nan=False, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)  # pad so the data starts 8-byte aligned, like safetensors
    return struct.pack("<Q", len(raw)) + raw, enc.arrays.values()


def _write_head_and_arrays(out, head, arrays):
    out.write(head)
    for arr in arrays:
        if arr.size:
            out.write(memoryview(arr.reshape(-1).view(np.uint8)))
