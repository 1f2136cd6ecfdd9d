"""PyTorch checkpoints without torch: ``lucid.load`` reads ``torch.save``'s zip files, and
:func:`save_for_torch` writes files that ``torch.load`` reads.

NOTE [PyTorch checkpoints]
Since 1.6, ``torch.save`` writes a zip archive of stored (uncompressed) records under one
folder ``<name>/``: ``data.pkl`` (a protocol-2 pickle of the object), ``data/<key>`` (one raw
storage per key), ``byteorder`` ("little" or "big"), ``version`` and some bookkeeping. In the
pickle a tensor is ``torch._utils._rebuild_tensor_v2(storage, offset, size, stride,
requires_grad, hooks[, metadata])`` whose storage is a persistent id ``('storage',
torch.FloatStorage, key, location, numel)``; a Parameter wraps it in ``_rebuild_parameter``;
a state dict is an OrderedDict whose ``_metadata`` attribute BUILD sets. Quantized tensors
(``_rebuild_qtensor``: integers in a ``QInt8Storage``... and a per-tensor or per-channel affine
quantizer), meta tensors (``_rebuild_meta_tensor_no_storage``, no data; Lucid's are contiguous)
and layouts (``torch.serialization._get_layout``) are read too, as PyTorch's weights-only loader
reads them.

Reading runs pickle's pure-Python unpickler with its entry points restricted, so nothing named
by the file is imported or called: ``find_class`` maps a fixed whitelist (``_Archive.whitelist``)
to Lucid's own callables and refuses every other global (pickle.UnpicklingError naming it);
REDUCE calls only those callables; the opcodes that call methods of whatever object is on the
stack act on real lists, dicts and sets only (APPEND(S), SETITEM(S), ADDITEMS), BUILD only sets
attributes of an OrderedDict, and the opcodes that instantiate classes (INST, OBJ, NEWOBJ, EXT)
are refused. The one widening is the user's: objects registered with
``lucid.serialization.add_safe_globals`` answer their names too, and then REDUCE may call them,
NEWOBJ instantiate them and BUILD set the state of their instances (NOTE [Safe globals] in
``serialization.py``), as in PyTorch's weights-only unpickler. (The C unpickler's opcodes cannot be changed; data.pkl is small, as the tensors
are not in it.) Sizes are checked before memory is allocated: a storage's numel against its
record's length, the record against the archive's size, a view's offset and strides against
its storage. Each storage is read once, straight into its array; tensors are strided NumPy
views of it (of its one copy on the target device), so tensors that share a storage in the
file, such as tied weights, share memory when loaded. PyTorch's lazy conj and neg bits are
applied on loading, to the whole storage (one copy per storage and bits, which the views with
those bits share), never to a view: a view may repeat elements (stride 0), so materializing it
could take far more memory than the file holds. The records read may not overlap: zip entries
can nest one inside another, which would make a small file claim quadratically many bytes.

Writing emits the same layout, 64-byte aligned like PyTorch's, with only globals that
``torch.load(weights_only=True)`` allows. Tensors lying in the same owning array (same dtype,
non-negative strides) share one storage, written whole, as PyTorch writes a view's storage.
"""
from __future__ import annotations

import bisect
import collections
import io
import math
import pickle
import re
import zipfile
from collections import OrderedDict

import numpy as np

from ._core import backend
from ._core.tensor import Tensor, _wrap

__all__ = ["save_for_torch"]

# Storage classes (dtype markers in persistent ids) and the dtypes PyTorch pickles by name.
_STORAGES = {"FloatStorage": "f4", "DoubleStorage": "f8", "HalfStorage": "f2", "LongStorage": "i8",
             "IntStorage": "i4", "ShortStorage": "i2", "CharStorage": "i1", "ByteStorage": "u1",
             "BoolStorage": "b1", "ComplexFloatStorage": "c8", "ComplexDoubleStorage": "c16"}
_STORAGE_OF = {np.dtype(code): name for name, code in _STORAGES.items()}


def is_untyped(dt):
    """Whether PyTorch stores the NumPy dtype ``dt`` in an UntypedStorage (a dtype with no typed
    storage class: uint16/32/64, float8)."""
    from ._core import dtypes

    return dt in _UNTYPED or dt in dtypes.FLOAT8


def storage_name(dt):
    """PyTorch's storage class name for the NumPy dtype ``dt`` (bfloat16's too), or None."""
    from ._core import dtypes

    if dtypes.BF16 is not None and dt == dtypes.BF16:
        return "BFloat16Storage"
    return _STORAGE_OF.get(dt)
_DTYPES = ("float16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
           "uint64", "bool", "complex64", "complex128")
# Dtypes with no typed storage class: PyTorch writes them as an UntypedStorage of bytes and a
# ``_rebuild_tensor_v3`` naming the dtype.
_UNTYPED = frozenset(np.dtype(n) for n in ("uint16", "uint32", "uint64"))
# bfloat16 and float8 are not lacking: ``resolve`` reads them through ml_dtypes (NOTE [bfloat16],
# NOTE [float8]); float8 has no typed storage class either (an UntypedStorage, as uint16)
_BFLOAT16 = ("BFloat16Storage", "bfloat16")
_FLOAT8 = ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
_LACKS = {"complex32": "complex32", "float8_e8m0fnu": "float8_e8m0fnu", "quint4x2": "quint4x2",
          "quint2x4": "quint2x4", "QUInt4x2Storage": "quint4x2", "QUInt2x4Storage": "quint2x4"}
_TORCH_DEVICE_TYPES = frozenset(("cpu", "cuda", "mps", "meta", "xpu", "xla", "hip", "ipu", "vulkan", "mkldnn",
                                 "opengl", "opencl", "ideep", "ort", "hpu", "mtia", "privateuseone"))
_KEY = re.compile(r"[A-Za-z0-9_]{1,64}")  # PyTorch's keys are "0", "1", ...: no path can escape
_ALIGN = 64
_MAX_RATIO = 1100  # deflate expands at most ~1032x: a bigger claim is a lie (or a zip bomb)


# The globals REDUCE may call: each name's stand-in, a method of _Archive (None: OrderedDict itself).
_CALLS = {"collections.OrderedDict": None, "torch._utils._rebuild_tensor_v2": "rebuild_tensor_v2",
          "torch._utils._rebuild_tensor_v3": "rebuild_tensor_v3", "torch._utils._rebuild_parameter": "rebuild_parameter",
          "torch._utils._rebuild_parameter_with_state": "rebuild_parameter_with_state", "torch.Size": "size_",
          "torch.device": "device_", "_codecs.encode": "encode_", "builtins.bytes": "bytes_", "builtins.set": "set_",
          "builtins.frozenset": "frozenset_", "builtins.complex": "complex_", "collections.Counter": "counter_",
          "builtins.bytearray": "bytearray_", "torch._utils._rebuild_qtensor": "rebuild_qtensor",
          "torch._utils._rebuild_meta_tensor_no_storage": "rebuild_meta",
          "torch.serialization._get_layout": "layout_", "torch._utils._rebuild_tensor": "rebuild_tensor",
          "torch._tensor._rebuild_from_type_v2": "rebuild_from_type_v2"}
# Quantized storages: the integer element type, and the quantized dtype they hold.
_QSTORAGES = {"QInt8Storage": ("i1", "qint8"), "QUInt8Storage": ("u1", "quint8"), "QInt32Storage": ("i4", "qint32")}
_QSCHEMES = ("per_tensor_affine", "per_channel_affine", "per_tensor_symmetric", "per_channel_symmetric",
             "per_channel_affine_float_qparams")  # (quantized tensors: the first two, as torch.save writes)
_TYPES = ("torch.Tensor", "torch.nn.parameter.Parameter")  # only as _rebuild_from_type_v2's new_type
_LAYOUTS = ("strided", "sparse_coo", "sparse_csr", "sparse_csc", "sparse_bsr", "sparse_bsc", "_mkldnn", "jagged")


def _builtin_names():
    """Every name Lucid reads itself, and the dtypes it knows but lacks (refused as unsupported
    data, not as unsafe globals)."""
    return (set(_CALLS) | {f"torch.{n}" for n in _STORAGES} | {"torch.storage.UntypedStorage"}
            | {f"torch.{n}" for n in _QSTORAGES} | {f"torch.{n}" for n in _QSCHEMES}
            | {f"torch.{q}" for _, q in _QSTORAGES.values()} | set(_TYPES)
            | {f"torch.{n}" for n in _DTYPES} | {f"torch.{n}" for n in (*_LACKS, *_BFLOAT16, *_FLOAT8)})


# ---------------------------------------------------------------------------- read
class _Invalid(ValueError):
    """A corrupt, truncated or unsupported checkpoint (lucid.load's ValueError)."""


class _Refused(_Invalid, pickle.UnpicklingError):
    """A global outside the whitelist: refused, never imported."""


class _Unreadable(_Invalid, RuntimeError):
    """An archive or record that can't be read (truncated, corrupt): torch.load raises
    RuntimeError ("PytorchStreamReader failed reading zip archive"), Lucid ValueError; both."""


class _BadPickle(_Invalid, pickle.UnpicklingError):
    """A data.pkl that can't be unpickled (torch.load raises UnpicklingError)."""


class _Pass(Exception):
    """Carries an error of the caller's own making (map_location, placement) out unchanged."""

    def __init__(self, error):
        super().__init__(error)
        self.error = error


class _StorageType:
    """A storage class named in a persistent id: it only says the element type."""

    __slots__ = ("dtype", "name", "qdtype")

    def __init__(self, code, name, qdtype=None):
        self.dtype, self.name, self.qdtype = np.dtype(code), name, qdtype


class _Storage:
    """One ``data/<key>`` record, read once: the flat host array and, once placed, its device copy."""

    __slots__ = ("key", "stype", "numel", "host", "placed", "location", "retyped", "bitted")

    def __init__(self, key, stype, numel, host, location):
        self.key, self.stype, self.numel, self.host, self.location = key, stype, numel, host, location
        self.placed, self.retyped, self.bitted = None, {}, {}


def load_torch(dec, head, pos):
    """Load the PyTorch checkpoint open in ``dec.fh`` (a ``serialization_decode._Decoder``) whose first
    8 bytes, ``head``, were read from offset ``pos``. See NOTE [PyTorch checkpoints]."""
    zf, size, fail = _open_zip(dec, head, pos)
    with zf:
        return _Archive(zf, dec, size, fail).load()


def unsafe_globals(dec, head, pos):
    """The sorted names the checkpoint's data.pkl asks for that a load would refuse, found by
    scanning its opcodes (nothing is unpickled). See ``serialization.get_unsafe_globals_in_checkpoint``."""
    from .serialization_globals import _globals_in_pickle, _user_globals

    zf, size, fail = _open_zip(dec, head, pos)
    with zf:
        archive = _Archive(zf, dec, size, fail)
        raw = archive.read(f"{archive.prefix}/data.pkl")
    known = _builtin_names() | set(_user_globals())
    try:
        named = _globals_in_pickle(raw)
    except Exception as e:  # pickletools' ValueError for a bad opcode, a truncated stream ...
        raise fail(f"data.pkl can't be scanned ({type(e).__name__}: {e}); corrupt or truncated?") from None
    return sorted(n for n in named if n not in known or n.split(".", 1)[0] in _blocked())


def _blocked():
    from .serialization_globals import _BLOCKED_MODULES

    return _BLOCKED_MODULES


def _full_name(module, name):
    """The Python 3 name of a global, as pickle (and PyTorch's loader) map protocol-2 names: Python 3
    writes ``subprocess.call`` as ``commands.call``, ``builtins`` as ``__builtin__``."""
    import _compat_pickle

    if (module, name) in _compat_pickle.NAME_MAPPING:
        module, name = _compat_pickle.NAME_MAPPING[(module, name)]
    elif module in _compat_pickle.IMPORT_MAPPING:
        module = _compat_pickle.IMPORT_MAPPING[module]
    return f"{module}.{name}"


def _open_zip(dec, head, pos):
    """``(ZipFile, archive size, failer)`` of the checkpoint open in ``dec.fh``."""
    from .serialization_format import _TORCH_LEGACY

    fail = _failer(dec.where)
    if head == _TORCH_LEGACY:
        raise fail("it is a PyTorch checkpoint in the legacy format (torch < 1.6, or "
                   "_use_new_zipfile_serialization=False), which lucid.load does not read; re-save "
                   "it with torch.save(torch.load(path), path) on a current PyTorch")
    fh, size = dec.fh, dec.size()
    if size is None:  # not seekable: zip needs random access
        data = head + fh.read()
        fh, size, pos = io.BytesIO(data), len(data), 0
    else:
        fh.seek(pos)
    try:
        zf = zipfile.ZipFile(fh)
    except Exception as e:  # BadZipFile, EOFError, OSError, struct.error ...: not a readable zip
        raise fail(f"it starts like a zip archive but can't be read as one ({e}; truncated?)", _Unreadable) from None
    return zf, size, fail


def _failer(where):
    return lambda msg, kind=_Invalid: kind(f"lucid.load: {where!r} is not a valid PyTorch checkpoint: {msg}")


class _Archive:
    def __init__(self, zf, dec, size, fail):
        self.zf, self.dec, self.size, self.fail = zf, dec, size, fail
        self.storages = {}
        self.spans = []  # sorted (start, end) of the records read: a new one may overlap none
        self.globals, calls = self.whitelist()
        from .serialization_globals import _user_globals

        self.user = _user_globals()  # NOTE [Safe globals]: one snapshot per load
        self.callables = {id(f): f for f in calls + list(self.user.values())}  # what REDUCE may call
        self.user_types = {id(v): v for v in self.user.values() if isinstance(v, type)}  # NEWOBJ, BUILD
        self.prefix = self.find_prefix()
        self.order = self.byteorder()

    # -- records
    def find_prefix(self):
        names = self.zf.namelist()
        if not names:
            raise self.fail("an empty zip archive")
        prefix = names[0].split("/", 1)[0]  # as PyTorch's reader: the first record's folder
        if f"{prefix}/data.pkl" not in self.zf.NameToInfo:
            raise self.fail(f"a zip archive without {prefix + '/data.pkl'!r}; lucid.load reads lucid.save "
                            "(safetensors) files and torch.save checkpoints")
        return prefix

    def byteorder(self):
        name = f"{self.prefix}/byteorder"
        if name not in self.zf.NameToInfo:  # written since PyTorch 1.10
            from .serialization_options import fallback_byteorder

            return fallback_byteorder()  # native unless set_default_load_endianness says otherwise
        raw = self.read(name, limit=16)
        if raw not in (b"little", b"big"):
            raise self.fail(f"byteorder record is {raw[:16]!r}, not 'little' or 'big'")
        return "<" if raw == b"little" else ">"

    def info(self, name, what, want=None, limit=None):
        """The record's ZipInfo, its sizes checked against ``want`` and the archive."""
        info = self.zf.NameToInfo.get(name)
        if info is None:
            raise self.fail(f"{what} has no record {name!r} (truncated?)", _Unreadable)
        n = info.file_size
        if want is not None and n != want:
            raise self.fail(f"{what}: the record {name!r} holds {n} bytes, but {want} are declared")
        if limit is not None and n > limit:
            raise self.fail(f"{what}: the record {name!r} is {n} bytes (at most {limit} expected)")
        stored = info.compress_type == zipfile.ZIP_STORED
        if info.header_offset + info.compress_size > self.size or \
                (n != info.compress_size if stored else n > _MAX_RATIO * max(info.compress_size, 1)):
            raise self.fail(f"{what}: the record {name!r} claims {n} bytes, more than the archive of "
                            f"{self.size} bytes holds (truncated or tampered)")
        span = (info.header_offset, info.header_offset + 30 + info.compress_size)  # 30: the least local header
        at = bisect.bisect(self.spans, span)
        if (at and self.spans[at - 1][1] > span[0]) or (at < len(self.spans) and self.spans[at][0] < span[1]):
            raise self.fail(f"{what}: the record {name!r} overlaps another one in the archive (tampered)")
        self.spans.insert(at, span)
        return info

    def read(self, name, what=None, limit=None):
        info = self.info(name, what or f"record {name!r}", limit=limit)
        with self.zip_errors():
            return self.zf.read(info)

    def read_into(self, info, arr):
        view = memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else memoryview(b"")
        with self.zip_errors(), self.zf.open(info) as src:
            got = 0
            while got < len(view):
                chunk = src.read(min(len(view) - got, 1 << 24))
                if not chunk:
                    raise EOFError("the record ends early")
                view[got:got + len(chunk)] = chunk
                got += len(chunk)
            src.read(1)  # reach the end, so the CRC is checked

    def zip_errors(self):
        return _ZipErrors(self.fail)

    # -- the pickle
    def load(self):
        raw = self.read(f"{self.prefix}/data.pkl")
        try:
            return _Unpickler(raw, self).load()
        except _Invalid:
            raise
        except _Pass as p:
            raise p.error from None
        except RecursionError:
            raise self.fail("data.pkl is nested too deeply") from None
        except Exception as e:  # whatever the stream does to the pickle machinery: a corrupt file
            raise self.fail(f"data.pkl can't be read ({type(e).__name__}: {e}); corrupt or truncated?",
                            _BadPickle) from None

    def whitelist(self):
        from ._core import dtypes

        g = {name: OrderedDict if method is None else getattr(self, method) for name, method in _CALLS.items()}
        calls = list(g.values())
        for name, code in _STORAGES.items():
            g[f"torch.{name}"] = _StorageType(code, name)
        g["torch.storage.UntypedStorage"] = _StorageType("u1", "UntypedStorage")
        for name, (code, qdtype) in _QSTORAGES.items():
            g[f"torch.{name}"] = _StorageType(code, name, dtypes._QUANTIZED[qdtype])
            g[f"torch.{qdtype}"] = dtypes._QUANTIZED[qdtype]
        from ._core import quantized

        for name in _QSCHEMES:
            g[f"torch.{name}"] = quantized._SCHEMES[name]
        from .nn.parameter import Parameter

        g["torch.Tensor"], g["torch.nn.parameter.Parameter"] = Tensor, Parameter
        for name in _DTYPES:
            g[f"torch.{name}"] = dtypes.as_lucid(name)
        return g, calls

    def resolve(self, module, name):
        """``find_class``: a whitelisted name's Lucid stand-in; anything else is refused."""
        full, written = _full_name(module, name), f"{module}.{name}"
        if full.split(".", 1)[0] in _blocked() or module.split(".", 1)[0] in _blocked():
            raise _Refused(f"lucid.load: refusing to load {written!r} from the PyTorch checkpoint {self.dec.where!r}: "
                           f"its module {module!r} is blocked, even if allowlisted; nothing in the file is executed")
        got = self.globals.get(full)
        if got is not None:
            return got
        if full in self.user:
            return self.user[full]
        if module == "torch" and name in _BFLOAT16:  # NOTE [bfloat16]
            from ._core import dtypes

            try:
                bf16 = dtypes.enable_bfloat16()
            except AttributeError as e:
                raise self.fail(f"it holds bfloat16 data ({full}); {e}") from None
            return bf16 if name == "bfloat16" else _StorageType(bf16.dtype, name)
        if module == "torch" and name in _FLOAT8:  # NOTE [float8]
            from ._core import dtypes

            try:
                return dtypes.enable_ml_float(name)
            except AttributeError as e:
                raise self.fail(f"it holds {name} data ({full}); {e}") from None
        if module == "torch" and name in _LACKS:
            raise self.fail(f"it holds {_LACKS[name]} data ({full}), and Lucid has no {_LACKS[name]} dtype; "
                            "convert it in PyTorch first (e.g. t.float())")
        hint = (" (this is a TorchScript archive from torch.jit.save; lucid.load reads torch.save "
                "checkpoints)" if module.startswith("__torch__") else "")
        raise _Refused(f"lucid.load: refusing to load {written!r} from the PyTorch checkpoint {self.dec.where!r}: "
                       "only tensors, containers and numbers are read, and globals allowlisted with "
                       f"lucid.serialization.add_safe_globals([{full}]) or the lucid.serialization.safe_globals("
                       f"[{full}]) context manager if you trust this class/function; nothing in the file is "
                       f"executed{hint}{self.not_weights_only()}")

    def refuse_op(self, what):
        raise _Refused(f"lucid.load: refusing {what} in the PyTorch checkpoint {self.dec.where!r}: only "
                       "tensors, containers and numbers are read, and globals allowlisted with "
                       "lucid.serialization.add_safe_globals; nothing in the file is executed"
                       f"{self.not_weights_only()}")

    def not_weights_only(self):
        if getattr(self.dec, "weights_only", True):
            return ""
        return (" (weights_only=False does not change this: lucid.load never imports or runs what a file "
                "names)")

    # -- storages
    def storage(self, pid):
        """``persistent_load``: ``('storage', storage_type, key, location, numel)`` -> a _Storage."""
        if type(pid) is not tuple or len(pid) != 5 or pid[0] != "storage":
            raise self.fail(f"unknown persistent id {str(pid)[:80]}")
        _, stype, key, location, numel = pid
        if not isinstance(stype, _StorageType):
            raise self.fail(f"a storage's type is {str(stype)[:80]}, not a storage class")
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            raise self.fail(f"storage key {str(key)[:80]!r} is not a plain record name")
        if not isinstance(location, str) or not _is_uint(numel):
            raise self.fail(f"storage {key!r}: bad location {location!r} or numel {numel!r}")
        got = self.storages.get(key)
        if got is None:
            got = self.storages[key] = self.read_storage(stype, key, location, numel)
        elif got.stype is not stype or got.numel != numel or got.location != location:
            raise self.fail(f"storage {key!r} is declared twice, differently")
        return got

    def read_storage(self, stype, key, location, numel):
        dt = stype.dtype
        info = self.info(f"{self.prefix}/data/{key}", f"storage {key!r}", want=numel * dt.itemsize)
        raw = np.empty(numel, dtype=np.uint8 if dt == np.bool_ else dt.newbyteorder(self.order))
        self.read_into(info, raw)
        if not raw.dtype.isnative:
            raw = raw.astype(raw.dtype.newbyteorder("="))
        if dt == np.bool_:  # any nonzero byte is True, converted in place
            np.not_equal(raw, 0, out=raw.view(np.bool_))
            raw = raw.view(np.bool_)
        return _Storage(key, stype, numel, raw, location)

    def placed(self, s):
        """The storage on the device map_location assigns (one copy per storage)."""
        if s.placed is None:
            ml = self.dec.map_location
            try:
                if callable(ml) and not isinstance(ml, dict):  # f(storage as a 1-d tensor, location)
                    t = ml(_wrap(s.host), s.location)
                    arr = t._data if isinstance(t, Tensor) else s.host
                    if tuple(arr.shape) != (s.numel,) or arr.dtype != s.host.dtype:
                        raise TypeError(f"lucid.load: map_location returned shape {tuple(arr.shape)} dtype "
                                        f"{arr.dtype} for a storage of {s.numel} {s.host.dtype} elements")
                else:
                    arr = self.dec.place(s.host, s.location)
            except Exception as e:
                raise _Pass(e) from None
            s.placed = arr
        return s.placed

    # -- rebuilding (the whitelisted callables)
    def strided(self, s, flat, offset, size, stride):
        if not _is_uint(offset) or not isinstance(size, tuple) or not isinstance(stride, tuple) \
                or len(size) != len(stride) or len(size) > 64 or not all(map(_is_uint, size + stride)):
            raise self.fail(f"storage {s.key!r}: bad view offset={str(offset)[:40]} size={str(size)[:80]} "
                            f"stride={str(stride)[:80]}")
        n = len(flat)
        if 0 in size:
            ok = offset <= n
        else:
            ok = offset + sum((d - 1) * st for d, st in zip(size, stride)) < n
        if not ok:
            raise self.fail(f"storage {s.key!r}: a view (offset {offset}, size {size}, stride {stride}) "
                            f"reaches past its {n} elements")
        item = flat.dtype.itemsize
        repeats = any(st == 0 and d > 1 for d, st in zip(size, stride))  # read-only, as expand's
        with backend.on_device(flat):  # a storage on a device that is not the current one
            return backend.as_strided(flat[offset:], size, tuple(st * item for st in stride), writeable=not repeats)

    def view(self, s, flat_host, offset, size, stride, metadata, placed=None):
        bits = self.lazy_bits(metadata)
        placed = self.placed(s) if placed is None else placed
        if placed.__class__ is not np.ndarray and backend.backend_of(placed).type == "meta":
            return backend.to_device(self.strided(s, flat_host, offset, size, stride), backend.META)
        if bits:  # applied to the storage, not the view (NOTE [PyTorch checkpoints])
            key = (placed.dtype, bits)
            if key not in s.bitted:
                ns, flat = backend.namespace_of(placed), placed
                with backend.on_device(placed):
                    if "conj" in bits:  # PyTorch's lazy conjugate: the storage holds the unconjugated values
                        flat = ns.conj(flat)
                    if "neg" in bits:
                        flat = ns.negative(flat)
                s.bitted[key] = flat
            placed = s.bitted[key]
        return self.strided(s, placed, offset, size, stride)

    def lazy_bits(self, metadata):
        if not metadata:
            return ()
        if not isinstance(metadata, dict) or not set(metadata) <= {"conj", "neg"}:
            raise self.fail(f"unknown tensor metadata {str(metadata)[:80]}")
        return tuple(k for k in ("conj", "neg") if metadata.get(k))

    def finish(self, arr, requires_grad, hooks):
        if type(requires_grad) is not bool or not isinstance(hooks, (dict, type(None))):
            raise self.fail(f"a tensor has requires_grad={str(requires_grad)[:40]}, hooks={str(hooks)[:40]}")
        t = _wrap(arr)
        if requires_grad:
            if arr.dtype.kind not in "fc":
                raise self.fail(f"a {arr.dtype} tensor is marked requires_grad")
            t.requires_grad = True
        return t

    def rebuild_tensor_v2(self, storage, storage_offset, size, stride, requires_grad, backward_hooks,
                          metadata=None):
        if not isinstance(storage, _Storage) or storage.stype.name == "UntypedStorage" or storage.stype.qdtype:
            raise self.fail("_rebuild_tensor_v2 got no typed storage")
        arr = self.view(storage, storage.host, storage_offset, size, stride, metadata)
        return self.finish(arr, requires_grad, backward_hooks)

    def rebuild_tensor_v3(self, storage, storage_offset, size, stride, requires_grad, backward_hooks, dtype,
                          metadata=None):
        from ._core import dtypes

        if not isinstance(storage, _Storage) or storage.stype.name != "UntypedStorage" \
                or not isinstance(dtype, dtypes.dtype):
            raise self.fail("_rebuild_tensor_v3 got no untyped storage and dtype")
        dt = dtypes.to_dtype(dtype)
        if dt not in storage.retyped:  # the bytes as ``dt``, placed once
            if storage.numel % dt.itemsize:
                raise self.fail(f"storage {storage.key!r}: {storage.numel} bytes are no whole number of {dt}")
            host = storage.host != 0 if dt == np.bool_ else storage.host.view(dt)
            placed = self.placed(storage)
            if placed is not storage.host:
                with backend.on_device(placed):
                    placed = placed != 0 if dt == np.bool_ else placed.view(dt)
            storage.retyped[dt] = host, (host if placed is storage.host else placed)
        host, placed = storage.retyped[dt]
        arr = self.view(storage, host, storage_offset, size, stride, metadata, placed)
        return self.finish(arr, requires_grad, backward_hooks)

    def rebuild_qtensor(self, storage, storage_offset, size, stride, quantizer_params, requires_grad,
                        backward_hooks):
        """A quantized tensor: its integers viewed in a quantized storage, and its quantizer
        (``(scheme, scale, zero_point)`` or ``(scheme, scales, zero_points, axis)``)."""
        from ._core import quantized as Q

        if not isinstance(storage, _Storage) or storage.stype.qdtype is None:
            raise self.fail("_rebuild_qtensor got no quantized storage")
        ints = self.finish(self.view(storage, storage.host, storage_offset, size, stride, None), False,
                           backward_hooks)
        qp = quantizer_params
        scheme = qp[0] if isinstance(qp, tuple) and qp else None
        if scheme is Q.per_tensor_affine and len(qp) == 3 and isinstance(qp[1], (int, float)) \
                and math.isfinite(qp[1]) and _is_int(qp[2]):
            q = Q.make_quantized(ints, storage.stype.qdtype, scheme, scale=float(qp[1]), zero_point=qp[2])
        elif scheme is Q.per_channel_affine and len(qp) == 4 and isinstance(qp[1], Tensor) \
                and isinstance(qp[2], Tensor) and _is_uint(qp[3]) and qp[3] < max(ints.ndim, 1) \
                and tuple(qp[1].shape) == tuple(qp[2].shape) == ((ints.shape[qp[3]],) if ints.ndim else (1,)):
            scales, zps = qp[1].detach().to(dtype=np.float64), qp[2].detach()
            if zps.is_floating_point():  # torch.save writes float_qparams as per_channel_affine, float zero points
                scheme = Q.per_channel_affine_float_qparams
            else:
                zps = zps.to(dtype=np.int64)
            q = Q.make_quantized(ints, storage.stype.qdtype, scheme, scales=scales, zero_points=zps, axis=qp[3])
        else:
            raise self.fail(f"a quantized tensor's quantizer is {str(qp)[:80]} (Lucid reads "
                            f"{' and '.join(_QSCHEMES[:2])})")
        if requires_grad:
            raise self.fail("a quantized tensor is marked requires_grad")
        return q

    def rebuild_meta(self, dtype, size, stride, requires_grad):
        """A meta tensor (no data). Lucid's meta tensors keep no strides: it is contiguous."""
        from ._core import dtypes
        from .ops.creation import empty

        if not isinstance(dtype, dtypes.dtype) or not isinstance(size, tuple) or not all(map(_is_uint, size)):
            raise self.fail(f"a meta tensor of dtype {str(dtype)[:40]} and size {str(size)[:80]}")
        return self.finish(empty(size, dtype=dtype, device="meta")._data, requires_grad, None)

    def layout_(self, name):
        import lucid

        short = name[len("torch."):] if isinstance(name, str) and name.startswith("torch.") else None
        if short not in _LAYOUTS or not hasattr(lucid, short.lstrip("_")):
            raise self.fail(f"unknown layout {str(name)[:40]}")
        return getattr(lucid, short.lstrip("_"))

    def rebuild_parameter(self, data, requires_grad, backward_hooks):
        from .nn.parameter import Parameter

        if type(data) is not Tensor or type(requires_grad) is not bool:
            raise self.fail("_rebuild_parameter got no tensor")
        try:
            return Parameter(data, requires_grad=requires_grad)
        except RuntimeError as e:
            raise self.fail(f"a Parameter can't be rebuilt ({e})") from None

    def rebuild_parameter_with_state(self, data, requires_grad, backward_hooks, state):
        return self.set_state(self.rebuild_parameter(data, requires_grad, backward_hooks), state)

    def rebuild_from_type_v2(self, func, new_type, args, state):
        """A tensor with Python attributes (or a Parameter made by ``as_subclass``): ``func(*args)``
        for one of the tensor rebuilders above, as ``new_type``, then its attributes."""
        from .nn.parameter import Parameter

        rebuilders = (self.rebuild_tensor_v2, self.rebuild_tensor_v3, self.rebuild_parameter, self.rebuild_tensor)
        if func not in rebuilders or new_type not in (Tensor, Parameter) or type(args) is not tuple:
            raise self.fail(f"_rebuild_from_type_v2 of {str(func)[:40]} as {str(new_type)[:40]}")
        t = func(*args)
        if new_type is Parameter and type(t) is not Parameter:
            t = Parameter(t, requires_grad=t.requires_grad)
        return self.set_state(t, state)

    def rebuild_tensor(self, storage, storage_offset, size, stride):  # the pre-1.x spelling
        return self.rebuild_tensor_v2(storage, storage_offset, size, stride, False, None)

    def set_state(self, p, state):
        """A tensor's pickled ``__dict__`` (or ``(dict, slots)``), as PyTorch's ``_set_obj_state``."""
        parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
        for part in parts:
            if part is None:
                continue
            if not isinstance(part, dict):
                raise self.fail(f"a {type(p).__name__}'s state is {str(part)[:80]}")
            for k, v in part.items():
                # plain attributes only: nothing the class defines (properties, methods, internals)
                if not isinstance(k, str) or not k.isidentifier() or k.startswith("_") or hasattr(type(p), k):
                    raise self.fail(f"a {type(p).__name__}'s state sets {str(k)[:40]!r}, which Lucid does not restore")
                setattr(p, k, v)
        return p

    def size_(self, dims=()):
        from ._core.size import Size

        if not isinstance(dims, (tuple, list)) or not all(map(_is_int, dims)):
            raise self.fail(f"torch.Size of {str(dims)[:80]}")
        return Size(dims)

    def device_(self, kind, index=None):
        if not isinstance(kind, str) or not (index is None or _is_uint(index)):
            raise self.fail(f"torch.device({str(kind)[:40]}, {str(index)[:20]})")
        try:  # a device object, as torch.load gives (it compares equal to its string)
            return backend.device(kind, index)
        except RuntimeError as e:
            raise self.fail(f"torch.device: {e}") from None

    def encode_(self, text, encoding):
        if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
            raise self.fail("_codecs.encode is read only as pickle writes bytes")
        return text.encode("latin1")

    def bytes_(self):
        return b""  # pickle's empty bytes; nothing else (bytes(n) would allocate n bytes)

    def set_(self, items=()):
        if not isinstance(items, (list, tuple)):
            raise self.fail(f"a set of {type(items).__name__}")
        return set(items)

    def frozenset_(self, items=()):
        return frozenset(self.set_(items))

    def counter_(self, counts=None):
        if counts is not None and not isinstance(counts, dict):
            raise self.fail(f"a Counter of {type(counts).__name__}")
        return collections.Counter(counts or {})

    def bytearray_(self, data=b""):
        if not isinstance(data, bytes):  # pickle writes bytearray(b"...") (never bytearray(n): no allocation)
            raise self.fail(f"bytearray() of {type(data).__name__}")
        return bytearray(data)

    def complex_(self, real=0.0, imag=0.0):
        if not all(isinstance(v, (int, float)) for v in (real, imag)):
            raise self.fail("complex() of non-numbers")
        return complex(real, imag)


class _ZipErrors:
    """What zipfile raises for a corrupt or truncated record, as the loader's ValueError."""

    def __init__(self, fail):
        self.fail = fail

    def __enter__(self):
        return self

    def __exit__(self, kind, e, tb):
        # zipfile raises BadZipFile, EOFError, zlib.error, NotImplementedError (compression),
        # RuntimeError (encryption), struct.error ...: all mean a record that can't be read
        if kind is not None and issubclass(kind, Exception) and not issubclass(kind, (_Invalid, _Pass)):
            raise self.fail(f"a record can't be read ({type(e).__name__}: {e}); truncated or corrupt?",
                            _Unreadable) from None
        return False


class _Unpickler(pickle._Unpickler):
    """pickle's (pure-Python) unpickler, its entry points restricted (NOTE [PyTorch checkpoints])."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, data, archive):
        super().__init__(io.BytesIO(data), encoding="utf-8")
        self.archive = archive

    def find_class(self, module, name):
        return self.archive.resolve(module, name)

    def persistent_load(self, pid):
        return self.archive.storage(pid)

    def load_reduce(self):
        args = self.stack.pop()
        func = self.stack[-1]
        if self.archive.callables.get(id(func)) is not func or type(args) is not tuple:
            self.archive.refuse_op(f"a call of {type(func).__name__} object {str(func)[:60]!r}")
        self.stack[-1] = func(*args)

    def load_build(self):
        state = self.stack.pop()
        inst = self.stack[-1]
        if self.archive.user_types.get(id(type(inst))) is type(inst):
            return self.build_registered(inst, state)
        # PyTorch uses BUILD for a state dict's ``_metadata``; nothing else is given attributes, and
        # none that would shadow what the class defines (``sd.keys = ...`` would change sd.keys())
        if type(inst) is not OrderedDict or type(state) is not dict or \
                not all(isinstance(k, str) and not k.startswith("__") and not hasattr(OrderedDict, k) for k in state):
            self.archive.refuse_op(f"setting the state of a {type(inst).__name__}")
        inst.__dict__.update(state)

    def build_registered(self, inst, state):
        """BUILD on an instance of a registered class, as pickle and PyTorch do it (NOTE [Safe globals])."""
        setstate = getattr(inst, "__setstate__", None)
        if setstate is not None:
            setstate(state)
            return
        slotstate = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slotstate = state
        if state:
            if type(state) is not dict or not all(type(k) is str for k in state):
                raise self.archive.fail(f"the state of a {type(inst).__name__} is {str(state)[:80]}")
            inst.__dict__.update(state)
        if slotstate:
            # a slot state names slots: never a dunder (``__class__`` would retype the object)
            if type(slotstate) is not dict or not all(type(k) is str and not k.startswith("__") for k in slotstate):
                self.archive.refuse_op(f"setting the slot state {str(slotstate)[:60]} of a {type(inst).__name__}")
            for k, v in slotstate.items():
                setattr(inst, k, v)

    def load_newobj(self):
        args = self.stack.pop()
        cls = self.stack.pop()
        if not isinstance(cls, type) or self.archive.user_types.get(id(cls)) is not cls:
            self.refused()
        if type(args) is not tuple:
            raise self.archive.fail(f"NEWOBJ of {cls.__qualname__} with arguments {str(args)[:60]}")
        self.append(cls.__new__(cls, *args))

    def load_append(self):
        value = self.stack.pop()
        self.target(list).append(value)

    def load_appends(self):
        items = self.pop_mark()
        self.target(list).extend(items)

    def load_setitem(self):
        value = self.stack.pop()
        key = self.stack.pop()
        self.target(dict)[key] = value

    def load_setitems(self):
        items = self.pop_mark()
        d = self.target(dict)
        for i in range(0, len(items) - 1, 2):
            d[items[i]] = items[i + 1]

    def load_additems(self):
        items = self.pop_mark()
        self.target(set).update(items)

    def target(self, kind):
        obj = self.stack[-1]
        if type(obj) not in ((list,) if kind is list else (dict, OrderedDict) if kind is dict else (set,)):
            self.archive.refuse_op(f"adding items to a {type(obj).__name__}")
        return obj

    def refused(self):
        self.archive.refuse_op("an opcode that instantiates a class that is not allowlisted")

    def load_inst(self):  # protocol 0's INST names its class inline: refused by name if unlisted
        module = self.readline()[:-1].decode("ascii")
        name = self.readline()[:-1].decode("ascii")
        self.find_class(module, name)
        self.refused()

    for _op, _fn in ((pickle.REDUCE, load_reduce), (pickle.BUILD, load_build), (pickle.APPEND, load_append),
                     (pickle.APPENDS, load_appends), (pickle.SETITEM, load_setitem),
                     (pickle.SETITEMS, load_setitems), (pickle.ADDITEMS, load_additems),
                     (pickle.NEWOBJ, load_newobj)):
        dispatch[_op[0]] = _fn
    for _op in (pickle.OBJ, pickle.NEWOBJ_EX, pickle.EXT1, pickle.EXT2, pickle.EXT4):
        dispatch[_op[0]] = refused
    dispatch[pickle.INST[0]] = load_inst
    del _op, _fn


def _is_uint(x):
    return type(x) is int and x >= 0


def _is_int(x):
    return type(x) is int


def __getattr__(name):  # the writer moved to serialization_torch_write.py (file size)
    if name == "save_for_torch":
        from .serialization_torch_write import save_for_torch

        return save_for_torch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
