"""Writing PyTorch checkpoints: ``save_for_torch`` (NOTE [PyTorch checkpoints] in
``serialization_torch.py``, which reads them). A protocol-2 pickle written by hand, so only
globals ``torch.load(weights_only=True)`` accepts can appear, plus one record per storage.
"""
from __future__ import annotations

import math
import os
import pickle
import struct
import zipfile
from collections import OrderedDict

import numpy as np

from ._atomic_file import atomic_write
from ._core import backend
from ._core.tensor import Tensor
from .serialization_torch import _ALIGN, _TORCH_DEVICE_TYPES, is_untyped, storage_name


class _Writer:
    """Writes the protocol-2 pickle by hand, so that only whitelisted globals can appear, and
    gathers the storages (NOTE [PyTorch checkpoints])."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")  # PROTO 2
        self.memo = {}  # id(tensor) -> memo index: one tensor object written once
        self.storages = {}  # (device, owner's memory span, dtype) -> (key, storage class, location, numel)
        self.records = []  # (key, flat little-endian host array)
        self.keep = []  # keeps objects alive while their ids are keys

    def dump(self, obj):
        try:
            self.save(obj, "")
        except RecursionError:
            raise ValueError("save_for_torch: the object is nested too deeply (or contains itself)") from None
        self.out += b"."  # STOP
        return bytes(self.out)

    def op(self, code, *parts):
        self.out += code
        for p in parts:
            self.out += p

    def glob(self, module, name):
        self.op(b"c", f"{module}\n{name}\n".encode("ascii"))

    def save(self, obj, path):
        if obj is None:
            self.op(b"N")
        elif obj is True or obj is False or isinstance(obj, np.bool_):
            self.op(b"\x88" if obj else b"\x89")
        elif isinstance(obj, Tensor):
            self.tensor(obj, path)
        elif isinstance(obj, (int, np.integer)):
            self.int(int(obj))
        elif isinstance(obj, (float, np.floating)):
            self.op(b"G", struct.pack(">d", float(obj)))
        elif isinstance(obj, str):
            self.str(obj)
        else:
            self.save_other(obj, path)

    def save_other(self, obj, path):
        from ._core import dtypes
        from ._core.size import Size

        if isinstance(obj, bytes):
            self.glob("_codecs", "encode")
            self.str(obj.decode("latin1"))
            self.str("latin1")
            self.op(b"\x86R")  # TUPLE2 REDUCE
        elif isinstance(obj, complex):
            self.glob("builtins", "complex")
            self.op(b"G", struct.pack(">d", obj.real), b"G", struct.pack(">d", obj.imag), b"\x86R")
        elif isinstance(obj, Size):
            self.glob("torch", "Size")
            self.tuple([int(d) for d in obj], path)
            self.op(b"\x85R")  # TUPLE1 REDUCE
        elif isinstance(obj, tuple):
            self.tuple(obj, path)
        elif isinstance(obj, list):
            self.op(b"]")
            self.items(list(enumerate(obj)), path, keyed=False)
        elif isinstance(obj, dict):
            self.dict(obj, path)
        elif isinstance(obj, set):
            self.glob("builtins", "set")
            self.op(b"]")
            self.items(list(enumerate(obj)), path, keyed=False)
            self.op(b"\x85R")
        elif isinstance(obj, backend.device):
            self.device(obj, path)
        elif isinstance(obj, dtypes.dtype):
            self.glob("torch", str(np.dtype(dtypes.to_dtype(obj))))
        elif isinstance(obj, np.ndarray):
            raise TypeError(f"save_for_torch: can't save a NumPy array at {path or '<root>'!r}: torch.load "
                            "(weights_only=True) reads no NumPy arrays; save lucid.tensor(array) instead")
        else:
            raise TypeError(
                f"save_for_torch: can't save an object of type {type(obj).__name__} at {path or '<root>'!r}; "
                "supported: Tensor, Parameter, None, bool, int, float, complex, str, bytes, Size, device, "
                "dtype, and lists, tuples, sets and dicts of them")

    def int(self, v):
        if 0 <= v < 256:
            self.op(b"K", bytes((v,)))
        elif 0 <= v < 65536:
            self.op(b"M", struct.pack("<H", v))
        elif -2 ** 31 <= v < 2 ** 31:
            self.op(b"J", struct.pack("<i", v))
        else:
            enc = pickle.encode_long(v)
            self.op(b"\x8a", bytes((len(enc),)), enc) if len(enc) < 256 else \
                self.op(b"\x8b", struct.pack("<i", len(enc)), enc)

    def str(self, s):
        raw = s.encode("utf-8", "surrogatepass")
        self.op(b"X", struct.pack("<I", len(raw)), raw)

    def tuple(self, items, path):
        if len(items) == 0:
            self.op(b")")
            return
        if len(items) > 3:
            self.op(b"(")
        for i, v in enumerate(items):
            self.save(v, _join(path, i))
        self.op(b"t" if len(items) > 3 else b"\x85\x86\x87"[len(items) - 1:len(items)])

    def items(self, entries, path, keyed=True):
        for start in range(0, len(entries), 1000):  # batched, as pickle does
            self.op(b"(")
            for k, v in entries[start:start + 1000]:
                if keyed:
                    self.key(k, path)
                self.save(v, _join(path, k))
            self.op(b"u" if keyed else b"e")  # SETITEMS / APPENDS

    def key(self, k, path):
        if isinstance(k, (Tensor, np.ndarray, list, dict, set)):
            raise TypeError(f"save_for_torch: dict keys can't be {type(k).__name__}s (at {path or '<root>'!r})")
        self.save(k, path)

    def dict(self, obj, path):
        if isinstance(obj, OrderedDict):
            self.glob("collections", "OrderedDict")
            self.op(b")R")  # OrderedDict()
        else:
            self.op(b"}")
        self.items(list(obj.items()), path)
        meta = getattr(obj, "_metadata", None) if isinstance(obj, OrderedDict) else None
        if isinstance(meta, dict):  # a state dict's per-module versions, as torch.save keeps them
            self.op(b"}")
            self.str("_metadata")
            self.save(meta, _join(path, "_metadata"))
            self.op(b"sb")  # SETITEM BUILD

    def device(self, d, path):
        if d.type not in _TORCH_DEVICE_TYPES:
            raise TypeError(f"save_for_torch: PyTorch has no device {str(d)!r} (at {path or '<root>'!r})")
        self.glob("torch", "device")
        self.str(d.type)
        if d.index is None:
            self.op(b"\x85R")
        else:
            self.int(d.index)
            self.op(b"\x86R")

    def tensor(self, t, path):
        if id(t) in self.memo:
            idx = self.memo[id(t)]
            self.op(b"h", bytes((idx,))) if idx < 256 else self.op(b"j", struct.pack("<I", idx))
            return
        if type(t).__name__.endswith("Tracer"):
            raise TypeError(f"save_for_torch: can't save a transform tracer at {path or '<root>'!r}")
        from .nn.parameter import Parameter

        param = isinstance(t, Parameter)
        if param:
            self.glob("torch._utils", "_rebuild_parameter")
            self.op(b"(")
        key, stype, location, numel, offset, size, stride = self.storage(t, path)
        untyped = stype == "UntypedStorage"
        self.glob("torch._utils", "_rebuild_tensor_v3" if untyped else "_rebuild_tensor_v2")
        self.op(b"((")
        self.str("storage")
        self.glob("torch.storage" if untyped else "torch", stype)
        self.str(key)
        self.str(location)
        self.int(numel)
        self.op(b"tQ")  # TUPLE BINPERSID
        self.int(offset)
        self.tuple(size, path)
        self.tuple(stride, path)
        self.op(b"\x88" if t.requires_grad and not param else b"\x89")
        self.glob("collections", "OrderedDict")
        self.op(b")R")  # OrderedDict()
        if untyped:
            self.glob("torch", t._data.dtype.name)
        self.op(b"tR")  # TUPLE REDUCE
        if param:
            self.op(b"\x88" if t.requires_grad else b"\x89")
            self.glob("collections", "OrderedDict")
            self.op(b")RtR")
        idx = self.memo[id(t)] = len(self.memo)
        self.keep.append(t)
        self.op(b"q", bytes((idx,))) if idx < 256 else self.op(b"r", struct.pack("<I", idx))

    def storage(self, t, path):
        """(key, storage class, location, numel, offset, size, stride) of ``t``'s storage."""
        from .ops.shape.strided import _byte_span, _owner, storage_geometry

        arr = t._data
        if storage_name(arr.dtype) is None and not is_untyped(arr.dtype):
            raise TypeError(f"save_for_torch: unsupported dtype {arr.dtype} at {path or '<root>'!r}")
        dev = t.device
        location = str(dev) if dev.type == "cuda" else "cpu"  # data goes through the host (below)
        owner = _owner(arr)
        if owner.dtype != arr.dtype and owner.dtype == np.uint8 and owner.ndim == 1 \
                and not isinstance(owner, np.memmap) and owner.nbytes % arr.dtype.itemsize == 0 \
                and backend.has_values(owner):
            with backend.on_device(owner):  # an untyped storage's bytes as lucid.load reads one (not a mapped file)
                owner = owner.view(arr.dtype)
        geom = storage_geometry(arr) if owner.dtype == arr.dtype else None
        if geom is not None and all(s >= 0 for s in geom[1]) and (owner.flags.c_contiguous or owner.flags.f_contiguous):
            # the owner's memory names it (a device array's .base may be a new wrapper each time);
            # every tensor is kept alive while writing, so no address is reused
            ident = (str(dev), _byte_span(owner), arr.dtype.str)
            if ident not in self.storages:
                with backend.on_device(owner):
                    flat = owner.reshape(-1) if owner.flags.c_contiguous else owner.T.reshape(-1)  # memory order
                self.storages[ident] = self.record(flat, location)
            return self.storages[ident] + geom[2:3] + (tuple(arr.shape), geom[1])
        # a layout PyTorch can't express (negative strides, a reinterpreting view): its own copy
        with backend.on_device(arr):
            flat = backend.xp.ascontiguousarray(arr).reshape(-1)
        strides = tuple(int(math.prod(arr.shape[i + 1:])) for i in range(arr.ndim))
        return self.record(flat, location) + (0, tuple(arr.shape), strides)

    def record(self, flat, location):
        host = backend.host(flat)  # the one explicit device-to-host copy of a device storage
        host = np.ascontiguousarray(host, dtype=host.dtype.newbyteorder("<")).reshape(-1)
        key = str(len(self.records))
        self.records.append((key, host))
        dt = host.dtype.newbyteorder("=")
        if is_untyped(dt):  # an UntypedStorage counts bytes
            return key, "UntypedStorage", location, host.nbytes
        return key, storage_name(dt), location, host.size


def _join(path, k):
    return f"{path}.{k}" if path else str(k)


def _write_archive(fh, pkl, records):
    """The zip layout torch.save writes (NOTE [PyTorch checkpoints]); each record 64-byte aligned."""
    with zipfile.ZipFile(fh, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        _record(zf, "archive/data.pkl", pkl)
        _record(zf, "archive/.format_version", b"1")
        _record(zf, "archive/.storage_alignment", str(_ALIGN).encode())
        _record(zf, "archive/byteorder", b"little")
        for key, arr in records:
            _record(zf, f"archive/data/{key}", memoryview(arr.view(np.uint8)) if arr.size else b"")
        _record(zf, "archive/version", b"3\n")
        _record(zf, "archive/.data/serialization_id", b"%040d" % int.from_bytes(os.urandom(16), "little"))


def _record(zf, name, data):
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    n = len(data)
    info.file_size = n
    zip64 = n * 1.05 > zipfile.ZIP64_LIMIT  # zipfile's own rule: it then adds a 20-byte extra field
    head = 30 + len(name.encode("ascii")) + 4 + (20 if zip64 else 0)
    pad = -(zf.start_dir + head) % _ALIGN
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad  # PyTorch's padding field ("FB")
    with zf.open(info, "w", force_zip64=zip64) as out:
        for start in range(0, n, 1 << 24):
            out.write(data[start:start + (1 << 24)])


def save_for_torch(obj, f):
    """Save ``obj`` as a PyTorch checkpoint: the zip format of ``torch.save``, readable by
    ``torch.load(f)`` with its default ``weights_only=True``, and by :func:`lucid.load`.

    Parameters
    ----------
    obj : Tensor, dict, list, tuple, ...
        Tensors and Parameters (``requires_grad`` kept; device tensors are copied to the host,
        a CUDA tensor's device is recorded, as PyTorch does), nested in dicts, OrderedDicts
        (a state dict's ``_metadata`` is kept), lists, tuples and sets, with ``None``, bools,
        ints, floats, complex numbers, strings, bytes, ``Size``, devices and dtypes. Tensors
        that view one array share one storage, written whole, as in ``torch.save``.
    f : str, os.PathLike or binary file object
        A path is written atomically (temporary file beside it + fsync + ``os.replace``), as
        :func:`lucid.save` does: a failure never leaves a truncated file.

    Examples
    --------
    >>> import lucid, io
    >>> from lucid.serialization import save_for_torch
    >>> buf = io.BytesIO()
    >>> save_for_torch({"w": lucid.ones(2), "step": 3}, buf)
    >>> _ = buf.seek(0)
    >>> lucid.load(buf)      # torch.load(buf) reads it too
    {'w': tensor([1., 1.]), 'step': 3}

    Limitations: NumPy arrays, modules and other objects are refused with a TypeError (they
    would need globals that ``torch.load(weights_only=True)`` refuses). bfloat16 tensors are written
    as ``BFloat16Storage``, as ``torch.save`` writes them.
    """
    w = _Writer()
    pkl = w.dump(obj)  # fails before any file is touched
    if hasattr(f, "write"):
        _write_archive(f, pkl, w.records)
        return
    atomic_write(f, lambda fh: _write_archive(fh, pkl, w.records), api="save_for_torch")
