"""``lucid.load``'s decoder: validates a safetensors header, reads the arrays and rebuilds the
saved structure; hands a ``torch.save`` checkpoint to ``serialization_torch.py`` (NOTE
[Checkpoint format] in ``serialization.py``, NOTE [Load memory])."""
from __future__ import annotations

import io
import json
import math
import mmap
import os
import pickle
import struct
from collections import OrderedDict

import numpy as np

from ._core import backend as _backend
from ._core.backend import check_device, to_device
from ._core.tensor import Tensor, _wrap
from .serialization_format import (_DTYPES, _MAX_HEADER, _ML_CODE_OF, _ML_CODES, _STRUCT_KEY, _TORCH_LEGACY,
                                   _code_of, _dtype_of_code, _little)
from .serialization_globals import _BLOCKED_MODULES, _user_globals
from .serialization_options import get_default_mmap_options


class _EmptyFile(ValueError, EOFError):
    """An empty file: torch.load raises EOFError ("Ran out of input"), Lucid ValueError; both."""


# NOTE [Load memory]
# Loading reads the 8-byte length and the JSON header, validates the whole header against
# the file size, and only then reads each tensor's bytes straight into the array that the
# Tensor will own (``readinto``, in storage order): every byte is copied once, and the
# peak is the size of the tensors, not twice the file. (This beats a memory map, which
# would still need one copy per tensor for Tensors to own writable memory.)
class _Decoder:
    def __init__(self, fh, where, map_location=None, weights_only=True, mmap=False):
        self.fh, self.where, self.map_location, self.mmap = fh, where, map_location, mmap
        self.weights_only = weights_only is not False  # (None: PyTorch's default, True)
        self.cache = {}
        self.versions = {}  # storage name -> the version counter its views share

    def place(self, arr, saved):
        """``arr`` (host) on the device ``map_location`` assigns to one saved from ``saved``."""
        where = self.map_location
        if where is None:
            target = saved
        elif isinstance(where, dict):
            target = where.get(saved, saved)
        else:
            target = where
        if target == "cpu" or target is None:
            return arr
        try:
            return to_device(arr, check_device(target))
        except RuntimeError as e:
            raise RuntimeError(
                f"lucid.load: {self.where!r} holds a tensor saved on {saved!r}, which this machine "
                f"can't place ({e}). If you are running on a CPU-only machine, use "
                "lucid.load(..., map_location='cpu') to map it to the CPU.") from None

    def fail(self, msg):
        return ValueError(f"lucid.load: {self.where!r} is not a valid checkpoint: {msg}")

    def run(self):
        try:
            return self._run()
        except RecursionError:
            raise self.fail("the header or structure is nested too deeply") from None

    def _run(self):
        header, start, size = self.header()
        if header is None:  # a torch.save checkpoint: NOTE [PyTorch checkpoints] in serialization_torch.py
            from .serialization_torch import load_torch

            return load_torch(self, head=start, pos=size)  # (header() returned what it read, and where)
        meta = header.pop("__metadata__", None) or {}
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise self.fail("__metadata__ must map strings to strings")
        self.entries = self.validate(header, None if size is None else size - start)
        self.arrays = self.read_arrays(start)
        if _STRUCT_KEY not in meta:
            return {name: self.tensor({"t": name, "rg": False}) for name in self.entries}
        try:
            structure = json.loads(meta[_STRUCT_KEY])
        except ValueError as e:
            raise self.fail(f"the structure metadata is not valid JSON ({e})") from None
        return self.decode(structure)

    def size(self):
        """The stream's total size, or None when it cannot seek."""
        try:
            return os.fstat(self.fh.fileno()).st_size
        except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
            pass
        try:
            if self.fh.seekable():
                pos = self.fh.tell()
                end = self.fh.seek(0, os.SEEK_END)
                self.fh.seek(pos)
                return end
        except (AttributeError, OSError, ValueError):
            pass
        return None

    def read_exact(self, n, what):
        data = self.fh.read(n)
        if len(data) != n:
            raise self.fail(f"file ends inside the {what} (truncated?)")
        return data

    def json_follows(self, head, size, pos):
        """Whether ``head``, read as a safetensors header length, is followed by a JSON object.

        The length's 8 bytes can spell another format's magic: a header of 0x480 bytes starts
        with b"\x80\x04", pickle protocol 4's, and one of 0x4B50 with b"PK". A safetensors
        header is a JSON object, so its first byte is "{", which neither a pickle nor a zip has
        there. A stream that can't seek keeps the magic's verdict."""
        if size is None:
            return False
        (n,) = struct.unpack("<Q", head)
        if not 2 <= n <= min(_MAX_HEADER, size - pos - 8):
            return False
        first = self.fh.read(1)
        self.fh.seek(pos + 8)
        return first == b"{"

    def header(self):
        size = self.size()
        pos = self.fh.tell() if size is not None else 0
        head = self.fh.read(8)
        if len(head) < 8:
            e = self.fail(f"file is {len(head)} bytes, too short for a safetensors header (truncated?)")
            raise _EmptyFile(str(e)) if not head else e
        is_pickle = head[:2] in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05") and head != _TORCH_LEGACY
        if (head[:2] == b"PK" or head == _TORCH_LEGACY or is_pickle) and not self.json_follows(head, size, pos):
            if is_pickle:
                raise self.fail("it looks like a pickle (e.g. from pickle.dump); lucid.load reads safetensors "
                                "files and torch.save checkpoints, and never runs code from a file")
            return None, head, pos  # PyTorch's formats: serialization_torch reads them
        (n,) = struct.unpack("<Q", head)
        avail = _MAX_HEADER if size is None else min(_MAX_HEADER, size - pos - 8)
        if n > avail:
            raise self.fail(f"header length {n} exceeds the file size {size} (truncated or not safetensors)")
        raw = self.read_exact(n, "header")
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise self.fail(f"the header is not valid UTF-8 JSON ({e})") from None
        if not isinstance(header, dict):
            raise self.fail("the header is not a JSON object")
        return header, pos + 8 + n, None if size is None else size

    def validate(self, header, size):
        spans = []
        for name, e in header.items():
            if not isinstance(e, dict) or set(e) != {"dtype", "shape", "data_offsets"}:
                raise self.fail(f"tensor {name!r}: entry must have exactly dtype, shape and data_offsets")
            dt, shape, offs = e["dtype"], e["shape"], e["data_offsets"]
            if dt not in _DTYPES and dt not in _ML_CODES:
                raise self.fail(f"tensor {name!r}: unsupported dtype {dt!r} (supported: {sorted(_DTYPES)})")
            if not isinstance(shape, list) or not all(_is_uint(s) for s in shape):
                raise self.fail(f"tensor {name!r}: bad shape {shape!r}")
            if not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs):
                raise self.fail(f"tensor {name!r}: bad data_offsets {offs!r}")
            b, end = offs
            if not b <= end or (size is not None and end > size):
                raise self.fail(f"tensor {name!r}: data_offsets {offs} out of range for {size} data bytes (truncated?)")
            want = math.prod(shape) * ((2 if dt == "BF16" else 1) if dt in _ML_CODES else np.dtype(_DTYPES[dt]).itemsize)
            if end - b != want:
                raise self.fail(f"tensor {name!r}: {end - b} bytes for dtype {dt} and shape {shape} (needs {want})")
            spans.append((b, end, name))
        spans.sort()
        for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise self.fail(f"tensors {n0!r} and {n1!r} overlap")
        return {name: header[name] for _, _, name in spans}

    def mapped_arrays(self, start):
        """Every tensor as a view of one copy-on-write map of the file (``mmap=True``); bool
        tensors, whose bytes must be normalised, are copied out of it."""
        if not self.entries:
            return {}
        # a plain ndarray over the map: Lucid tells host arrays by their exact class; MAP_SHARED
        # (set_default_mmap_options) lets writes to the tensors reach the file, as in PyTorch
        shared = get_default_mmap_options() == mmap.MAP_SHARED
        whole = np.memmap(self.where, dtype=np.uint8, mode="r+" if shared else "c").view(np.ndarray)
        arrays = {}
        for name, e in self.entries.items():
            b, end = e["data_offsets"]
            dt = _dtype_of_code(e["dtype"])
            raw = whole[start + b:start + end]
            if dt == np.bool_:
                arrays[name] = np.not_equal(raw, 0).reshape(e["shape"])
            else:
                arrays[name] = raw.view(_little(dt)).reshape(e["shape"])
        return arrays

    def read_arrays(self, start):
        """Every tensor's bytes, read once into its final array. See NOTE [Load memory]."""
        if self.mmap:
            return self.mapped_arrays(start)
        arrays, pos = {}, 0
        for name, e in self.entries.items():  # in storage order
            b, end = e["data_offsets"]
            if b > pos:
                self.skip(b - pos)
            dt = _dtype_of_code(e["dtype"])
            arr = np.empty(e["shape"], dtype=np.uint8 if dt == np.bool_ else _little(dt))
            view = memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")
            got = 0
            while got < len(view):
                k = self.fh.readinto(view[got:])
                if not k:
                    raise self.fail(f"tensor {name!r}: file ends inside its data (truncated?)")
                got += k
            pos = end
            if arr.dtype.byteorder == ">":  # pragma: no cover - big-endian hosts
                arr = arr.byteswap(inplace=True).view(arr.dtype.newbyteorder("="))
            if dt == np.bool_:  # any nonzero byte is True, converted in place
                np.not_equal(arr, 0, out=arr.view(np.bool_))
                arr = arr.view(np.bool_)
            arrays[name] = arr
        return arrays

    def skip(self, n):
        while n:
            k = len(self.fh.read(min(n, 1 << 20)))
            if not k:
                raise self.fail("file ends inside the data (truncated?)")
            n -= k

    def tensor(self, node):
        name = node.get("t", node.get("nd"))
        if not isinstance(name, str) or name not in self.entries:
            raise self.fail(f"the structure refers to a missing tensor {name!r}")
        view = node.get("view")
        if view is not None:
            return self.view(name, view, node)
        if name not in self.cache:
            arr = self.arrays[name]
            if node.get("complex"):
                if arr.ndim == 0 or arr.shape[-1] != 2 or arr.dtype.kind != "f" or arr.dtype.itemsize < 4:
                    raise self.fail(f"tensor {name!r} is marked complex but has shape {list(arr.shape)}")
                arr = np.ascontiguousarray(arr).view(np.result_type(arr.dtype, np.complex64))[..., 0]
            self.cache[name] = self.build(arr, node)
        return self.cache[name]

    def view(self, name, view, node):
        """A tensor saved as a view of a shared storage (NOTE [Shared storage])."""
        key = (name, json.dumps(view), json.dumps([node.get(k) for k in ("id", "rg", "param", "device")]))
        if key in self.cache:
            return self.cache[key]
        flat = self.arrays[name]
        saved = node.get("device", "cpu")
        if isinstance(saved, str) and saved != "cpu" and not callable(self.map_location):
            placed = (name, "placed", saved)  # the storage goes to its device once, viewed there
            if placed not in self.cache:
                self.cache[placed] = self.place(flat, saved)
            flat = self.cache[placed]
        ok = (isinstance(view, list) and len(view) == 3 and _is_uint(view[0]) and isinstance(view[1], list)
              and isinstance(view[2], list) and len(view[1]) == len(view[2])
              and all(_is_uint(d) for d in view[1]) and all(isinstance(st, int) for st in view[2]))
        if ok:
            off, shape, strides = view
            lo = off + sum(st * (d - 1) for d, st in zip(shape, strides) if st < 0 and d)
            hi = off + sum(st * (d - 1) for d, st in zip(shape, strides) if st > 0 and d)
            ok = flat.ndim == 1 and (0 in shape or (lo >= 0 and hi < flat.size))
        if not ok:
            raise self.fail(f"tensor {name!r}: bad view {str(view)[:80]}")
        if 0 in shape:
            arr = flat[:0].reshape(shape)
        else:
            size = flat.dtype.itemsize
            with _backend.on_device(flat):
                arr = _backend.as_strided(flat[off:], tuple(shape), tuple(st * size for st in strides))
        t = self.cache[key] = self.build(arr, node)
        if t._data is arr:  # still sharing memory (not moved again): share the version counter too
            t._version = self.versions.setdefault((name, saved), t._version)
        return t

    def build(self, arr, node):
        if "nd" in node:
            return arr
        saved = node.get("device", "cpu")
        if not isinstance(saved, str):
            raise self.fail(f"a tensor's device must be a string, got {saved!r}")
        if callable(self.map_location) and not isinstance(self.map_location, dict):
            t = self.map_location(_wrap(arr), saved)
            arr = t._data if isinstance(t, Tensor) else arr
        else:
            arr = self.place(arr, saved)
        if node.get("param"):
            from .nn.parameter import Parameter

            return Parameter(_wrap(arr), requires_grad=bool(node.get("rg")))
        t = _wrap(arr)
        if node.get("rg"):
            t.requires_grad = True
        return t

    def decode(self, node):
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if isinstance(node, dict) and len(node) >= 1:
            if "t" in node or "nd" in node:
                return self.tensor(node)
            if "q" in node:
                return self.quantized(node)
            if "dtype" in node and len(node) == 1:
                return self.dtype(node["dtype"])
            if "list" in node and isinstance(node["list"], list):
                return [self.decode(v) for v in node["list"]]
            if "tuple" in node and isinstance(node["tuple"], list):
                return tuple(self.decode(v) for v in node["tuple"])
            for tag, cls in (("dict", dict), ("odict", OrderedDict)):
                if tag in node and isinstance(node[tag], list):
                    if not all(isinstance(kv, list) and len(kv) == 2 for kv in node[tag]):
                        raise self.fail("a dict entry in the structure is not a [key, value] pair")
                    d = cls((self.decode_key(k), self.decode(v)) for k, v in node[tag])
                    if tag == "odict" and "meta" in node:
                        d._metadata = self.metadata(node["meta"])
                    return d
            if node.get("float") in ("nan", "inf", "-inf"):
                return float(node["float"])
            if isinstance(node.get("obj"), str) and isinstance(node.get("state"), dict) and len(node) == 2:
                return self.config_object(node["obj"], node["state"])
        raise self.fail(f"unknown node in the structure: {str(node)[:80]}")

    def config_object(self, name, state_node):
        """A dataclass / Namespace instance, rebuilt only from a registered class (NOTE [Config objects])."""
        if not hasattr(self, "user"):  # the registry, read once per load (NOTE [Safe globals])
            self.user = _user_globals()
        cls = self.user.get(name)
        if not isinstance(cls, type) or name.split(".", 1)[0] in _BLOCKED_MODULES:
            raise _RefusedObject(
                f"lucid.load: {self.where!r} holds an object of class {name!r}, which is rebuilt only from a "
                f"class allowlisted with lucid.serialization.add_safe_globals([{name.rsplit('.', 1)[-1]}]) or the "
                "lucid.serialization.safe_globals([...]) context manager, if you trust it; nothing is imported "
                "from the file" + ("" if self.weights_only else " (weights_only=False does not change this)"))
        state = self.decode(state_node)
        if not isinstance(state, dict) or not all(isinstance(k, str) and not k.startswith("__") for k in state):
            raise self.fail(f"the attributes of a {name} are {str(state_node)[:80]}")
        inst = cls.__new__(cls)
        # the attributes as saved (vars or fields), not through ``__setstate__``: a frozen slotted
        # dataclass's takes a tuple of field values, the form its ``__getstate__`` gives pickle
        if hasattr(inst, "__dict__"):
            inst.__dict__.update(state)
        else:  # a slotted dataclass (frozen ones too)
            for k, v in state.items():
                object.__setattr__(inst, k, v)
        return inst

    def metadata(self, node):
        """A state dict's ``_metadata``: a dict, the only attribute a loaded dict is given."""
        meta = self.decode(node)
        if not isinstance(meta, dict):
            raise self.fail(f"a state dict's _metadata is {str(node)[:80]}, not a dict")
        return meta

    def dtype(self, name):
        from ._core.dtypes import _QUANTIZED, as_lucid

        if name in _QUANTIZED:
            return _QUANTIZED[name]
        try:  # (np.dtype only parses the name: nothing from the file runs)
            d = ((_dtype_of_code(_ML_CODE_OF[name]) if name in _ML_CODE_OF else np.dtype(name))
                 if isinstance(name, str) else None)
        except TypeError:
            d = None
        if d is None or (_code_of(d) is None and d.kind != "c"):
            raise self.fail(f"bad dtype in the structure: {str(name)[:40]}")
        return as_lucid(d)

    def quantized(self, node):
        """Rebuild a quantized tensor from known parts only (nothing named in the file is called)."""
        from ._core import quantized as Q
        from ._core.dtypes import _QUANTIZED

        dtype, scheme = _QUANTIZED.get(node.get("q")), Q._SCHEMES.get(node.get("scheme"))
        ints = self.decode(node.get("ints"))
        if dtype is None or scheme is None or not isinstance(ints, Tensor) or ints.dtype != dtype.storage:
            raise self.fail(f"bad quantized tensor in the structure: {str(node)[:80]}")
        if scheme in Q.PER_TENSOR:
            scale, zero_point = node.get("scale"), node.get("zero_point")
            if not isinstance(scale, float) or not math.isfinite(scale) or not _is_int(zero_point):
                raise self.fail(f"bad quantizer of a quantized tensor: {str(node)[:80]}")
            return Q.make_quantized(ints, dtype, scheme, scale=scale, zero_point=zero_point)
        scales, zero_points, axis = self.decode(node.get("scales")), self.decode(node.get("zero_points")), node.get("axis")
        if not (isinstance(scales, Tensor) and isinstance(zero_points, Tensor) and _is_int(axis)
                and 0 <= axis < max(ints.ndim, 1) and scales.shape == zero_points.shape
                and tuple(scales.shape) == (ints.shape[axis] if ints.ndim else 1,)):
            raise self.fail(f"bad per-channel quantizer of a quantized tensor: {str(node)[:80]}")
        return Q.make_quantized(ints, dtype, scheme, scales=scales, zero_points=zero_points, axis=axis)

    def decode_key(self, k):
        key = self.decode(k)
        if isinstance(key, (list, dict, Tensor, np.ndarray)):
            raise self.fail(f"unhashable dict key in the structure: {str(k)[:80]}")
        return key


class _RefusedObject(ValueError, pickle.UnpicklingError):
    """A saved config object whose class is not allowlisted (torch.load's UnpicklingError)."""


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _is_uint(x):
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0
