"""Serialization: ``lucid.save`` / ``lucid.load`` in the safetensors format.

NOTE [Checkpoint format]
A checkpoint is a plain safetensors file: 8 bytes (little-endian u64) giving the header
length N, N bytes of a JSON header, then the raw little-endian tensor bytes. The header maps
each tensor name to ``{"dtype", "shape", "data_offsets"}`` (offsets relative to the end of
the header) and holds ``"__metadata__"``, a str -> str map; under ``"lucid.structure"`` it
keeps a JSON description of the saved container, in which every node is tagged:

    {"t": name, "rg": bool[, "param": true]}   a Tensor (Parameter), stored under ``name``
    {"nd": name}                               a NumPy array
    {"list": [...]}, {"tuple": [...]}          lists and tuples
    {"dict": [[key, value], ...]}              dicts (keys of any supported kind, in order;
                                               ``"odict"`` for an OrderedDict, with ``"meta"``
                                               holding a state dict's ``_metadata``)
    {"float": "nan" | "inf" | "-inf"}          non-finite floats
    {"q": dtype, "scheme": name, "ints": node, "scale": f, "zero_point": i}
                                               a quantized tensor (per channel: "scales" and
                                               "zero_points" tensor nodes and "axis")
    {"dtype": name}                            a dtype (``lucid.float32``, ``lucid.qint8`` ...)
    {"obj": "module.qualname", "state": node}  a dataclass / Namespace instance: its class's name
                                               and its attributes (NOTE [Config objects])
    null, true, 1, 1.5, "s"                    None, bools, ints, finite floats, strings

Loading parses JSON and copies bytes only — nothing from the file is ever executed (no
pickle) — and validates the header before touching the data. A file without the lucid
structure (written by another safetensors writer) loads as a dict ``name -> Tensor``.
Saving to a path writes a temporary file in the same directory, flushes and fsyncs it,
and ``os.replace``s it onto the target, so a crash never leaves a half-written checkpoint
(see NOTE [Safe save] for symlinks, special files and stale temporary files).
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import pickle
import stat
import struct
import sys
import tempfile
from collections import OrderedDict

import numpy as np

from ._core import backend as _backend
from ._core import dtypes as _dtypes
from ._core.backend import check_device, host, to_device
from ._core.dtypes import dtype as _dtype
from ._core.tensor import Tensor, _wrap

__all__ = ["save", "load"]  # (and save_for_torch, through __getattr__ below; the safe-globals API
# below is public too, but tests/test_serialization.py pins this list)


def __getattr__(name):  # save_for_torch lives in serialization_torch_write.py, imported on first use
    if name == "save_for_torch":
        from .serialization_torch_write import save_for_torch

        return save_for_torch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_FORMAT = "lucid"
_STRUCT_KEY = "lucid.structure"
_MAX_HEADER = 100 * 1024 * 1024  # 100 MB of JSON is certainly not a real header
_DTYPES = {"F16": np.float16, "F32": np.float32, "F64": np.float64, "I8": np.int8, "I16": np.int16,
           "I32": np.int32, "I64": np.int64, "U8": np.uint8, "U16": np.uint16, "U32": np.uint32,
           "U64": np.uint64, "BOOL": np.bool_}
_CODES = {np.dtype(v): k for k, v in _DTYPES.items()}


def _code_of(dt):
    """The file's name for a NumPy dtype ("BF16": safetensors' name; NOTE [bfloat16]), or None."""
    if _dtypes.BF16 is not None and dt == _dtypes.BF16:
        return "BF16"
    return _CODES.get(dt.newbyteorder("="))


def _little(dt):
    """``dt`` in little-endian order: ``dt`` itself where that is its order already (so an
    extension dtype such as bfloat16 keeps its identity, which the bfloat16 hook compares)."""
    little = dt.newbyteorder("<")
    return dt if little == dt else little


def _dtype_of_code(code):
    """The NumPy dtype a file's dtype name stands for (bfloat16 loads ml_dtypes)."""
    if code == "BF16":
        try:
            return _dtypes.enable_bfloat16().dtype
        except AttributeError as e:  # ml_dtypes missing: say so as a load error
            raise RuntimeError(f"lucid.load: the file holds bfloat16 tensors; {e}") from None
    return np.dtype(_DTYPES[code])
_TORCH_LEGACY = b"\x80\x02\x8a\x0al\xfc\x9cF"  # pickled magic number opening a torch < 1.6 file


# ---------------------------------------------------------------------------- save
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


def save(obj, f, pickle_module=None, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """Save ``obj`` (tensors, state dicts, nested containers of them) to a safetensors file.

    Parameters
    ----------
    obj : Tensor, dict, list, tuple, ...
        Tensors and NumPy arrays, nested in lists, tuples and dicts (any order-preserving
        mix) with ``None``, bools, ints, floats and strings, and dataclass, ``argparse.Namespace``
        and ``SimpleNamespace`` instances of them (a config saved beside the weights; loading
        rebuilds one only if its class was passed to ``add_safe_globals``, NOTE [Config
        objects]). ``requires_grad`` and the
        ``Parameter`` class are kept; one tensor object that appears twice is stored once,
        and tensors that view one array are saved with it and load as views of one array
        again, as in PyTorch (NOTE [Shared storage]; a lone view is saved compact).
    f : str, os.PathLike or binary file object
        A path is written atomically (temporary file + fsync + ``os.replace``); a symlink
        is followed and its target replaced; a path that is a FIFO, device, socket or
        directory is refused with a ValueError (pass an open file object to stream).
    pickle_module, pickle_protocol, _use_new_zipfile_serialization, _disable_byteorder_record
        ``torch.save``'s options, accepted so that PyTorch code runs unchanged; a Lucid file
        holds no pickle (and has one format), so they change nothing. ``pickle_protocol`` is
        still checked as PyTorch checks it.

    Examples
    --------
    >>> import lucid, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "ckpt.safetensors")
    >>> lucid.save({"w": lucid.ones(2), "step": 3}, path)
    >>> lucid.load(path)
    {'w': tensor([1., 1.]), 'step': 3}

    Limitations: the file is a safetensors file; objects of other types (modules,
    arbitrary classes) are refused with a TypeError instead of being pickled. To write a
    checkpoint that ``torch.load`` reads, use :func:`lucid.serialization.save_for_torch`.
    """
    _check_protocol(pickle_protocol, "lucid.save")
    head, arrays = _to_bytes(obj)  # fails before any file is touched
    if hasattr(f, "write"):
        f.write(head)
        for arr in arrays:
            f.write(memoryview(arr.reshape(-1).view(np.uint8)) if arr.size else b"")
        return
    _atomic_write(os.fspath(f), lambda out: _write_head_and_arrays(out, head, arrays))


def _check_protocol(protocol, api):
    if not hasattr(protocol, "__index__"):
        raise TypeError(f"{api}: pickle_protocol must be an int, got {type(protocol).__name__}")
    if not -1 <= int(protocol) <= 5:  # (pickle's limits: -1 means the highest)
        raise ValueError(f"{api}: pickle protocol must be <= 5, got {int(protocol)}")


# NOTE [Safe save]
# ``save(obj, path)`` never replaces anything but a regular file: a symlink is followed
# and its final target is replaced (atomically, in the target's directory), a FIFO, device,
# socket or directory is refused (saving to ``/dev/null`` as root must not replace the
# system's ``/dev/null``). The temporary file is named ``.<name>.lucid-tmp-<pid>-<random>``
# so a save that was killed can be recognised: the next save of the same target removes
# such files whose process is gone. Errors name the target, never the temporary file.
_TMP_TAG = ".lucid-tmp-"


def _resolve_target(path):
    """The regular file (existing or not) that saving to ``path`` should replace."""
    target = os.path.realpath(path) if os.path.islink(path) else os.path.abspath(path)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as e:
        raise _named(e, path) from None
    if not stat.S_ISREG(st.st_mode):
        kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        via = f" (via the symlink {os.fspath(path)!r})" if target != os.path.abspath(path) else ""
        raise ValueError(f"lucid.save: refusing to replace {target!r}{via}: it is {kind}, not a regular "
                         "file; to stream a checkpoint into it, open it and pass the file object")
    return target


def _named(e, path, what="writing"):
    """The same kind of OSError, naming the target instead of a temporary file."""
    text = f"lucid.save: {what} {os.fspath(path)!r} failed: {e.strerror or e}"
    try:
        return type(e)(e.errno, text) if e.errno else type(e)(text)
    except Exception:  # pragma: no cover - exotic OSError subclasses
        return OSError(text)


def _clean_stale_temps(target):
    """Remove temporary files of earlier saves of ``target`` whose process has died."""
    directory, base = os.path.split(target)
    prefix = "." + base + _TMP_TAG
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return
    for n in names:
        pid = n[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            try:
                os.unlink(os.path.join(directory, n))
            except OSError:
                pass


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists
        return True
    return True


def _write_head_and_arrays(out, head, arrays):
    out.write(head)
    for arr in arrays:
        if arr.size:
            out.write(memoryview(arr.reshape(-1).view(np.uint8)))


def _atomic_write(path, fill):
    """``fill(file)`` into a temporary file beside ``path``, renamed onto it once complete
    (NOTE [Safe save]); also ``serialization_torch_write.save_for_torch``'s writer."""
    target = _resolve_target(path)
    directory = os.path.dirname(target)
    _clean_stale_temps(target)
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(target) + f"{_TMP_TAG}{os.getpid()}-",
                                   suffix=".tmp")
    except OSError as e:
        raise _named(e, path) from None
    try:
        with os.fdopen(fd, "wb") as out:
            fill(out)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, _target_mode(target))
        os.replace(tmp, target)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(e, OSError):
            raise _named(e, path) from None
        raise
    _fsync_dir(directory)


def _target_mode(path):
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_dir(directory):
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. platforms without directory fds
        return
    try:
        os.fsync(dfd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(dfd)


# ---------------------------------------------------------------------------- safe globals
# The registry lives in serialization_globals.py (NOTE [Safe globals]).
from .serialization_globals import (_BLOCKED_MODULES, _globals_in_pickle, _user_globals,  # noqa: E402,F401
                                    add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals)


def get_unsafe_globals_in_checkpoint(f):
    """The globals a ``torch.save`` checkpoint names that ``lucid.load`` would refuse: neither read
    by Lucid itself nor registered with :func:`add_safe_globals`. Nothing is run: the pickle's
    opcodes are only scanned, as ``pickletools`` does.

    Parameters
    ----------
    f : str, os.PathLike or binary file object

    Returns
    -------
    list of str
        Sorted ``"module.name"`` strings; ``[]`` for a ``lucid.save`` (safetensors) file, which
        names no globals.

    Examples
    --------
    >>> import io, lucid
    >>> from lucid.serialization import save_for_torch, get_unsafe_globals_in_checkpoint
    >>> buf = io.BytesIO()
    >>> save_for_torch({"w": lucid.ones(2)}, buf)
    >>> _ = buf.seek(0)
    >>> get_unsafe_globals_in_checkpoint(buf)
    []

    Limitations: a name that a protocol-4 STACK_GLOBAL builds from strings computed on the
    stack is read from the last two strings pushed (``torch.save`` writes protocol 2, whose
    GLOBAL names its global inline).
    """
    def scan(dec):
        header, start, size = dec.header()
        if header is not None:
            return []
        from .serialization_torch import unsafe_globals

        return unsafe_globals(dec, head=start, pos=size)

    api = "get_unsafe_globals_in_checkpoint"
    try:
        if hasattr(f, "read"):
            return scan(_Decoder(f, str(getattr(f, "name", None) or repr(f))))
        with open(os.fspath(f), "rb") as fh:
            return scan(_Decoder(fh, str(os.fspath(f))))
    except ValueError as e:
        text = str(e)
        if text.startswith("lucid.load: "):
            raise type(e)(f"{api}: " + text[len("lucid.load: "):]) from None
        raise


# ---------------------------------------------------------------------------- load
_PICKLE_LOAD_ARGS = frozenset(("encoding", "errors", "fix_imports", "buffers"))


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
    """Load what :func:`save` wrote (or any safetensors file, or a ``torch.save`` checkpoint)
    without executing code.

    A PyTorch checkpoint (the zip format of ``torch.save`` since PyTorch 1.6) is unpickled with
    a whitelist: tensors, Parameters, containers, numbers and strings are rebuilt by Lucid's own
    code, classes and functions registered with :func:`add_safe_globals` (or :class:`safe_globals`)
    are used as PyTorch's weights-only loader uses them, anything else is refused (NOTE [PyTorch
    checkpoints] in ``serialization_torch.py``, NOTE [Safe globals]).

    Parameters
    ----------
    f : str, os.PathLike or binary file object
    map_location : None, str, device, dict or callable
        Where tensors go. None: the device each was saved from (a CUDA tensor needs a GPU
        here: pass ``map_location="cpu"`` on a CPU-only machine, as in PyTorch); a device:
        all there; a dict ``{"cuda:0": "cpu"}``: saved device -> device; a callable
        ``f(tensor, saved_location) -> tensor`` gets each tensor on the CPU (for a PyTorch
        checkpoint: each storage, as a 1-d tensor, as PyTorch passes storages).
    pickle_module : module, optional
        Accepted as ``torch.load`` accepts it, never used: Lucid unpickles with its own
        restricted unpickler. As in PyTorch, it can't be combined with ``weights_only=True``.
        (A bool here is read as ``weights_only``, Lucid's third argument before.)
    weights_only : bool or None
        Accepted for PyTorch compatibility. Lucid files never hold code, and PyTorch
        checkpoints are always read "weights only", even with ``weights_only=False`` (which
        never makes Lucid import or run what a file names; allowlist trusted classes with
        :func:`add_safe_globals` instead).
    mmap : bool, optional
        Map the file instead of reading it (``f`` must be a path): each tensor of a Lucid
        (safetensors) file is a view of a private, copy-on-write map of it, as PyTorch's
        ``mmap=True`` (``MAP_PRIVATE``) gives, so nothing is read until it is used and writes
        never reach the file. Bool tensors, tensors moved to another device and a
        ``torch.save`` checkpoint's tensors are read into memory as without ``mmap``.
    **pickle_load_args
        ``encoding``, ``errors``, ``fix_imports``, ``buffers``: accepted and, as in PyTorch's
        weights-only loading, without effect; any other keyword is a TypeError.

    Returns
    -------
    The saved object. A safetensors file written by another tool loads as a dict
    ``name -> Tensor`` in storage order.

    Raises
    ------
    ValueError
        The file is not a valid safetensors or PyTorch checkpoint (corrupt, truncated, a
        plain pickle, a legacy torch < 1.6 file, ...); the message names the file. Where
        ``torch.load`` raises another type, the error is also that type: ``EOFError`` for an
        empty file, ``RuntimeError`` for a zip archive that can't be read (truncated),
        ``pickle.UnpicklingError`` for a corrupt ``data.pkl``. A global outside the whitelist
        and not registered raises ``pickle.UnpicklingError`` (also a ValueError) naming it;
        :func:`get_unsafe_globals_in_checkpoint` lists them all.

    Examples
    --------
    >>> import lucid, io
    >>> buf = io.BytesIO()
    >>> lucid.save([lucid.tensor([1, 2]), (None, 2.5)], buf)
    >>> _ = buf.seek(0)
    >>> lucid.load(buf)
    [tensor([1, 2]), (None, 2.5)]
    """
    if isinstance(pickle_module, bool):
        pickle_module, weights_only = None, pickle_module
    unknown = sorted(set(pickle_load_args) - _PICKLE_LOAD_ARGS)
    if unknown:
        raise TypeError(f"load: got an unexpected keyword argument {unknown[0]!r}")
    if pickle_module is not None and weights_only is True:
        raise RuntimeError("load: Can not safely load weights when explicit pickle_module is specified")
    if pickle_module is not None and weights_only is None:
        weights_only = False  # PyTorch's default then (which still runs nothing here)
    if map_location is not None and not callable(map_location) and not isinstance(map_location, dict):
        map_location = check_device(map_location)
    if hasattr(f, "read"):
        if mmap:
            raise ValueError("load: f must be a file path in order to use the mmap argument")
        return _Decoder(f, str(getattr(f, "name", None) or repr(f)), map_location, weights_only).run()
    where = os.fspath(f)
    with open(where, "rb") as fh:
        return _Decoder(fh, str(where), map_location, weights_only, mmap=bool(mmap)).run()


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
            if dt not in _DTYPES and dt != "BF16":
                raise self.fail(f"tensor {name!r}: unsupported dtype {dt!r} (supported: {sorted(_DTYPES)})")
            if not isinstance(shape, list) or not all(_is_uint(s) for s in shape):
                raise self.fail(f"tensor {name!r}: bad shape {shape!r}")
            if not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs):
                raise self.fail(f"tensor {name!r}: bad data_offsets {offs!r}")
            b, end = offs
            if not b <= end or (size is not None and end > size):
                raise self.fail(f"tensor {name!r}: data_offsets {offs} out of range for {size} data bytes (truncated?)")
            want = math.prod(shape) * (2 if dt == "BF16" else np.dtype(_DTYPES[dt]).itemsize)
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
        # a plain ndarray over the map: Lucid tells host arrays by their exact class
        whole = np.memmap(self.where, dtype=np.uint8, mode="c").view(np.ndarray)
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
            d = (_dtype_of_code("BF16") if name == "bfloat16" else np.dtype(name)) if isinstance(name, str) else None
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

