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
(see NOTE [Safe save] in ``_atomic_file.py`` for symlinks, special files and stale temporary files).
"""
from __future__ import annotations

import os

from ._atomic_file import atomic_write
from ._core.backend import check_device
# The encoder, the decoder and the header's vocabulary live beside this file, one family each
# (serialization_encode.py, serialization_decode.py, serialization_format.py).
from .serialization_decode import _Decoder
from .serialization_encode import _to_bytes, _write_head_and_arrays
# The safe-globals API is public here, as in torch.serialization; its registry lives in
# serialization_globals.py (NOTE [Safe globals]).
from .serialization_globals import add_safe_globals, clear_safe_globals, get_safe_globals, safe_globals  # noqa: F401
# torch.serialization's loading options and location registry (serialization_options.py)
from .serialization_options import (LoadEndianness, SourceChangeWarning, default_restore_location,  # noqa: F401
                                    get_default_load_endianness, get_default_mmap_options, location_tag,
                                    register_package, set_default_load_endianness, set_default_mmap_options)

__all__ = ["save", "load"]  # (and save_for_torch, through __getattr__ below; the safe-globals API
# above is public too, but tests/test_serialization.py pins this list)


def __getattr__(name):  # save_for_torch lives in serialization_torch_write.py, imported on first use
    if name == "save_for_torch":
        from .serialization_torch_write import save_for_torch

        return save_for_torch
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        _write_head_and_arrays(f, head, arrays)
        return
    atomic_write(f, lambda out: _write_head_and_arrays(out, head, arrays))


def _check_protocol(protocol, api):
    if not hasattr(protocol, "__index__"):
        raise TypeError(f"{api}: pickle_protocol must be an int, got {type(protocol).__name__}")
    if not -1 <= int(protocol) <= 5:  # (pickle's limits: -1 means the highest)
        raise ValueError(f"{api}: pickle protocol must be <= 5, got {int(protocol)}")



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
