"""``dcp.save`` / ``dcp.load``: a checkpoint written by every rank, read back by any layout.

NOTE [Distributed checkpoints]
A checkpoint is a directory. Every rank writes the pieces it owns into its own file
(``__<rank>_<token>.distcp``, written by :func:`lucid.save`, so loading it executes nothing),
then the coordinator (rank 0) writes ``.metadata``: JSON naming, for every key of the
flattened state dict, its global shape and dtype and where each piece (offsets, sizes) lies.
Who writes what: a DTensor's piece is written by the ranks at coordinate 0 of every mesh
dimension it is not sharded over (a ``Partial`` value is reduced first); a plain tensor or a
Python value is taken to be the same on every rank, as PyTorch does, and only rank 0 writes it.

Loading reads ``.metadata``, works out which region of each global tensor this rank's target
holds (all of a plain tensor; a DTensor's local piece: Shard offsets nest over the mesh
dimensions as in PyTorch) and copies the overlapping parts of the saved pieces into it, in
place. So a checkpoint saved on 3 ranks loads on 2, on 1, or into other placements.

No half states: a save writes its data files under a fresh token and ``.metadata`` last, by
``os.replace``, and only then removes the previous save's files, so an interrupted save
leaves the previous checkpoint readable; every rank learns whether any rank failed (one
``all_gather_object``) and all raise :class:`CheckpointException` together. A load reads and
checks everything (keys, shapes) before it changes the first tensor.

Keys are flattened as PyTorch's default planner does: nested dicts join their keys with
dots (``"model.fc.weight"``, ``"optim.state.0.exp_avg"``); a list is walked into only when it
holds a tensor, a dict or such a list; any other value (a tuple, ``param_groups``, a step
count) is one item. Each entry records its path, so ``format_utils`` can rebuild the nesting.
An object with ``state_dict``/``load_state_dict`` (:class:`Stateful`) is saved through its
``state_dict()`` and loaded through its ``load_state_dict``.
"""
from __future__ import annotations

import json
import os
import secrets

import numpy as np

__all__ = ["save", "load", "async_save", "CheckpointException", "FileSystemWriter", "FileSystemReader",
           "Metadata", "Stateful", "save_state_dict", "load_state_dict"]

_METADATA = ".metadata"
_FORMAT = "lucid-dcp-1"


class CheckpointException(RuntimeError):
    """A save or load failed on one or more ranks; ``failures`` maps each rank to its error.

    PyTorch derives its class from ``BaseException``; here it is a ``RuntimeError`` so that
    ``except Exception`` handlers see it (README, "Differences from PyTorch").
    """

    def __init__(self, msg, failures):
        super().__init__(msg)
        self.failures = dict(failures)


class Stateful:
    """The protocol of objects that :func:`save`/:func:`load` go through: ``state_dict()`` and
    ``load_state_dict(sd)`` (any object with both methods counts; subclassing is optional)."""

    def state_dict(self):
        raise NotImplementedError

    def load_state_dict(self, state_dict):
        raise NotImplementedError


def _is_stateful(v):
    from ..._core.tensor import Tensor

    return (not isinstance(v, (Tensor, dict)) and callable(getattr(v, "state_dict", None))
            and callable(getattr(v, "load_state_dict", None)))


class FileSystemWriter:
    """Where :func:`save` writes: a directory (PyTorch's ``FileSystemWriter``; its tuning options
    are accepted: one file per rank is always written, synchronously, with fsync)."""

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, cache_staged_state_dict=False, overwrite=True):
        self.path = os.fspath(path)
        self.overwrite = bool(overwrite)


class FileSystemReader:
    """Where :func:`load` reads: a directory written by :func:`save`."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def read_metadata(self):
        """The checkpoint's :class:`Metadata`."""
        return Metadata._read(self.path)


class Metadata:
    """What ``.metadata`` records: ``state_dict_metadata`` maps each flattened key to
    ``{"kind": "tensor", "shape", "dtype", "chunks": [{"offsets", "sizes", "file", "key"}]}``
    or ``{"kind": "value", "file", "key"}``."""

    def __init__(self, state_dict_metadata, world_size):
        self.state_dict_metadata = state_dict_metadata
        self.world_size = world_size

    @staticmethod
    def _read(path):
        target = os.path.join(path, _METADATA)
        try:
            with open(target, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            raise FileNotFoundError(f"dcp.load: {path!r} holds no checkpoint (no {_METADATA} file)") from None
        except ValueError as e:
            raise RuntimeError(f"dcp.load: {target!r} is not a Lucid checkpoint's metadata ({e})") from None
        if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
            raise RuntimeError(f"dcp.load: {target!r} is not a Lucid checkpoint's metadata "
                               f"(format {raw.get('format') if isinstance(raw, dict) else None!r})")
        return Metadata(raw["entries"], raw["world_size"])


# ------------------------------------------------------------------ the process group

def _group_info(process_group, no_dist):
    from .. import process_group as pg_mod

    if no_dist or not pg_mod.is_initialized():
        return None, 0, 1
    return process_group, pg_mod.get_rank(process_group), pg_mod.get_world_size(process_group)


def _gather_all(group, world, obj):
    if world == 1:
        return [obj]
    from ..objects import all_gather_object

    out = [None] * world
    all_gather_object(out, obj, group=group)
    return out


def _broadcast(group, world, obj):
    if world == 1:
        return obj
    from ..objects import broadcast_object_list

    box = [obj]
    # group rank 0 is the coordinator (global rank 0 may not be in a subgroup)
    broadcast_object_list(box, group=group, group_src=0)
    return box[0]


def _raise_if_any_failed(api, errors):
    failures = {r: e for r, e in enumerate(errors) if e is not None}
    if failures:
        detail = "; ".join(f"rank {r}: {e}" for r, e in failures.items())
        raise CheckpointException(f"{api} failed on rank(s) {sorted(failures)}: {detail}", failures)


# ------------------------------------------------------------------ flattening

def _walked_list(v):
    """PyTorch's rule: a list is walked into when it holds a tensor, a dict or a walked list;
    any other list, and every tuple, is one value."""
    from ..._core.tensor import Tensor

    return isinstance(v, list) and any(isinstance(x, (Tensor, dict)) or _walked_list(x) for x in v)


def _flatten(state_dict, api, stateful_out=None):
    """``{dotted key: leaf}``, ``{dotted key: (container, key in it)}`` for writing back and
    ``{dotted key: path}`` (the nesting, recorded in the metadata); a Stateful value is walked
    through its ``state_dict()``, kept in ``stateful_out``."""
    from ..._core.tensor import Tensor

    flat, where, paths = {}, {}, {}

    def walk(container, key, value, prefix, path):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(value, k, v, f"{prefix}.{k}" if prefix else str(k), path + (str(k),))
        elif _walked_list(value):
            for i, v in enumerate(value):
                walk(value, i, v, f"{prefix}.{i}", path + (i,))
        else:
            if prefix in flat:
                raise ValueError(f"{api}: two entries flatten to the same key {prefix!r}")
            flat[prefix] = value
            where[prefix] = (container, key)
            paths[prefix] = path

    if not isinstance(state_dict, dict):
        raise TypeError(f"{api}: state_dict must be a dict, got {type(state_dict).__name__}")
    for k, v in state_dict.items():
        if isinstance(v, Tensor) or not _is_stateful(v):
            walk(state_dict, k, v, str(k), (str(k),))
        else:
            sub = v.state_dict()
            if stateful_out is not None:
                stateful_out[k] = sub
            walk(None, k, sub, str(k), (str(k),))
    return flat, where, paths


def _local_region(value, api):
    """(global shape, offsets, sizes, local tensor, writes?) of a tensor or DTensor on this rank."""
    from ..tensor import DTensor, Replicate

    if not isinstance(value, DTensor):
        shape = tuple(value.shape)
        return shape, (0,) * len(shape), shape, value, None
    if any(p.is_partial() for p in value.placements):
        if api == "dcp.load":
            raise RuntimeError(f"{api}: cannot load into a DTensor with Partial placements {value.placements}")
        value = value.redistribute(value.device_mesh, [Replicate() if p.is_partial() else p for p in value.placements])
    mesh, shape = value.device_mesh, tuple(value.shape)
    coord = mesh.get_coordinate()
    sizes, offsets = list(shape), [0] * len(shape)
    owner = True
    for i, p in enumerate(value.placements):
        n, c = mesh.size(i), coord[i]
        if p.is_shard():
            d = p.dim % len(shape)
            offsets[d] += p.local_offset(sizes[d], n, c)
            sizes[d] = p.local_size(sizes[d], n, c)
        elif c != 0:
            owner = False
    return shape, tuple(offsets), tuple(sizes), value.to_local(), owner


# ------------------------------------------------------------------ save

class _NoCheckpointId(ValueError, RuntimeError):
    """PyTorch raises RuntimeError where Lucid raised ValueError: both keep callers working."""


def _checkpoint_dir(api, checkpoint_id, storage):
    if storage is not None:
        if not hasattr(storage, "path"):
            raise NotImplementedError(f"{api}: only FileSystemWriter/FileSystemReader storage is supported, "
                                      f"got {type(storage).__name__}")
        if checkpoint_id is not None:
            # PyTorch resets the writer/reader to the id (its ``reset``), so one writer kept across
            # steps (the async recipe's pinned-memory loop) writes each step where it is told to
            storage.path = os.fspath(checkpoint_id)
        return storage.path
    if checkpoint_id is None:
        raise _NoCheckpointId(f"{api}: pass checkpoint_id (a directory) or a storage writer/reader")
    return os.fspath(checkpoint_id)


def _check_planner(api, planner):
    if planner is not None and type(planner).__name__ not in ("DefaultSavePlanner", "DefaultLoadPlanner"):
        raise NotImplementedError(f"{api}: custom planners are not supported (got {type(planner).__name__}); "
                                  "the default planner's flattening is always used")


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None, no_dist=False):
    """Save a (possibly sharded) state dict into the directory ``checkpoint_id``, from every rank.

    Each rank writes the pieces it owns (NOTE [Distributed checkpoints]); DTensors are saved
    by their global value, so :func:`load` can read them back into other placements or another
    number of ranks. Without an initialised process group (or with ``no_dist=True``) it is a
    single-process save.

    Returns
    -------
    Metadata
        What was written.

    Examples
    --------
    >>> import tempfile, lucid, lucid.nn as nn
    >>> import lucid.distributed.checkpoint as dcp
    >>> model = nn.Linear(3, 2)
    >>> path = tempfile.mkdtemp()
    >>> _ = dcp.save({"model": model.state_dict()}, checkpoint_id=path)
    >>> other = nn.Linear(3, 2)
    >>> sd = {"model": other.state_dict()}
    >>> dcp.load(sd, checkpoint_id=path)
    >>> bool((other.weight == model.weight).all())
    True
    """
    from ... import serialization

    api = "dcp.save"
    _check_planner(api, planner)
    path = _checkpoint_dir(api, checkpoint_id, storage_writer)
    group, rank, world = _group_info(process_group, no_dist)
    token = _broadcast(group, world, secrets.token_hex(4) if rank == 0 else None)
    fname = f"__{rank}_{token}.distcp"
    error, entries = None, {}
    try:
        flat, _, paths = _flatten(state_dict, api)
        payload = {}
        from ..._core.tensor import Tensor

        for key, value in flat.items():
            if isinstance(value, Tensor):
                shape, offsets, sizes, local, owner = _local_region(value, api)
                entries[key] = {"kind": "tensor", "shape": list(shape), "dtype": str(value.dtype).split(".")[-1],
                                "chunks": [], "path": list(paths[key])}
                writes = (rank == 0) if owner is None else owner
                if writes and int(np.prod(sizes)) > 0:  # empty pieces need no file entry
                    item = f"{key}@{','.join(map(str, offsets))}"
                    payload[item] = local.detach().cpu().clone()
                    entries[key]["chunks"].append({"offsets": list(offsets), "sizes": list(sizes),
                                                   "file": fname, "key": item})
            else:
                entries[key] = {"kind": "value", "path": list(paths[key])}
                if rank == 0:
                    payload[key] = value
                    entries[key].update(file=fname, key=key)
        os.makedirs(path, exist_ok=True)
        if payload:
            serialization.save(payload, os.path.join(path, fname))
    except Exception as e:  # every rank must hear of it, or the others wait forever below
        error = f"{type(e).__name__}: {e}"
    gathered = _gather_all(group, world, (error, entries))
    _raise_if_any_failed(api, [g[0] for g in gathered])
    merged = {}
    for _, ents in gathered:
        for key, e in ents.items():
            have = merged.setdefault(key, dict(e, chunks=[]) if e["kind"] == "tensor" else dict(e))
            if e["kind"] == "tensor":
                if have["shape"] != e["shape"]:
                    raise CheckpointException(f"{api}: ranks disagree on the global shape of {key!r}: "
                                              f"{have['shape']} vs {e['shape']}", {})
                have["chunks"].extend(e["chunks"])
            elif "file" in e:
                have.update(file=e["file"], key=e["key"])
    error = None
    if rank == 0:
        try:
            _write_metadata(path, {"format": _FORMAT, "world_size": world, "entries": merged})
            _remove_stale(path, token)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"
    _raise_if_any_failed(api, [g for g in _gather_all(group, world, error)])
    return Metadata(merged, world)


def _write_metadata(path, raw):
    target = os.path.join(path, _METADATA)
    tmp = os.path.join(path, f"{_METADATA}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(raw, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _remove_stale(path, token):
    for name in os.listdir(path):
        if name.startswith("__") and name.endswith(".distcp") and not name.endswith(f"_{token}.distcp"):
            os.unlink(os.path.join(path, name))


def async_save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None,
               async_checkpointer_type=None, async_stager=None, no_dist=False, use_collectives=True):
    """:func:`save` that returns a finished ``concurrent.futures.Future`` holding its Metadata.

    PyTorch stages the state dict and writes it in a background thread (or process, with
    ``async_checkpointer_type=AsyncCheckpointerType.PROCESS``); here the write runs before
    returning whichever is asked (collectives may not run on two threads at once over MPI),
    so the future is already done and a later change to the tensors cannot reach the
    checkpoint. ``async_stager`` is not supported (the copy is always the plain one).
    """
    from concurrent.futures import Future

    if async_stager is not None:
        raise NotImplementedError("dcp.async_save: custom async_stager objects are not supported")
    if async_checkpointer_type is not None and getattr(async_checkpointer_type, "value", None) not in (
            "thread", "process"):
        raise ValueError(f"dcp.async_save: async_checkpointer_type must be an AsyncCheckpointerType, "
                         f"got {async_checkpointer_type!r}")

    fut = Future()
    try:
        fut.set_result(save(state_dict, checkpoint_id=checkpoint_id, storage_writer=storage_writer,
                            planner=planner, process_group=process_group, no_dist=no_dist))
    except Exception as e:
        fut.set_exception(e)
    return fut


# ------------------------------------------------------------------ load

def load(state_dict, *, checkpoint_id=None, storage_reader=None, planner=None, process_group=None, no_dist=False):
    """Fill ``state_dict`` in place from the checkpoint in ``checkpoint_id``, on every rank.

    Tensors (and each rank's piece of a DTensor) are overwritten in place with their saved
    values, whatever placements or number of ranks saved them; other values are replaced in
    their dicts; :class:`Stateful` values get ``load_state_dict``. Every key of ``state_dict``
    must be in the checkpoint (the checkpoint may hold more). Nothing changes when a key, a
    shape or a file is wrong.
    """
    from ... import serialization
    from ... import no_grad
    from ..._core.tensor import Tensor

    api = "dcp.load"
    _check_planner(api, planner)
    path = _checkpoint_dir(api, checkpoint_id, storage_reader)
    group, rank, world = _group_info(process_group, no_dist)
    error, updates, sub = None, [], {}
    try:
        meta = Metadata._read(path).state_dict_metadata
        sub = {}
        flat, where, _ = _flatten(state_dict, api, sub)
        missing = [k for k in flat if k not in meta]
        if missing:
            raise RuntimeError(f"{api}: missing key(s) in the checkpoint: {missing[:10]}")
        files = {}

        def read(entry_file, entry_key):
            if entry_file not in files:
                files[entry_file] = serialization.load(os.path.join(path, entry_file), weights_only=True)
            return files[entry_file][entry_key]

        for key, target in flat.items():
            entry = meta[key]
            if isinstance(target, Tensor):
                if entry["kind"] != "tensor":
                    raise RuntimeError(f"{api}: {key!r} is a value in the checkpoint, the state dict holds a tensor")
                shape, offsets, sizes, local, _ = _local_region(target, api)
                if list(shape) != entry["shape"]:
                    raise RuntimeError(f"{api}: size mismatch for {key!r}: the checkpoint holds {tuple(entry['shape'])}, "
                                       f"the state dict {shape}")
                updates.append(("tensor", local, _assemble(api, key, entry, offsets, sizes, read)))
            else:
                if entry["kind"] == "tensor":
                    new = _assemble(api, key, entry, (0,) * len(entry["shape"]), tuple(entry["shape"]), read)
                else:
                    new = read(entry["file"], entry["key"])
                updates.append(("value", where[key], new))
    except Exception as e:
        error = f"{type(e).__name__}: {e}"
    _raise_if_any_failed(api, [g for g in _gather_all(group, world, error)])
    with no_grad():
        for kind, dest, new in updates:
            if kind == "tensor":
                dest.copy_(new.to(dest.device))
            else:
                container, k = dest
                if container is None:
                    continue
                if isinstance(container, tuple):  # immutable: the value stays (PyTorch cannot set it either)
                    continue
                container[k] = new
    for k, loaded in sub.items():
        state_dict[k].load_state_dict(loaded)


def _assemble(api, key, entry, offsets, sizes, read):
    """The region ``offsets``/``sizes`` of saved tensor ``key``, put together from its pieces."""
    from ... import tensor as make_tensor

    region = None
    covered = 0
    for ch in entry["chunks"]:
        lo = [max(o, co) for o, co in zip(offsets, ch["offsets"])]
        hi = [min(o + s, co + cs) for o, s, co, cs in zip(offsets, sizes, ch["offsets"], ch["sizes"])]
        if any(h <= l for l, h in zip(lo, hi)) and sizes:
            continue
        piece = read(ch["file"], ch["key"])
        if not sizes:  # 0-d
            return piece
        if region is None:
            region = np.zeros(sizes, dtype=piece.numpy().dtype)
        src = tuple(slice(l - co, h - co) for l, h, co in zip(lo, hi, ch["offsets"]))
        dst = tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, offsets))
        region[dst] = piece.numpy()[src]
        covered += int(np.prod([h - l for l, h in zip(lo, hi)]))
    want = int(np.prod(sizes)) if sizes else 1
    if region is None and want == 0:
        from ... import zeros

        return zeros(sizes, dtype=entry["dtype"])
    if covered != want:
        raise RuntimeError(f"{api}: the checkpoint's pieces of {key!r} cover {covered} of the {want} "
                           "elements this rank needs")
    return make_tensor(region)


def save_state_dict(state_dict, storage_writer, process_group=None, coordinator_rank=0, no_dist=False,
                    planner=None):
    """Deprecated alias of :func:`save` (PyTorch's older name)."""
    return save(state_dict, storage_writer=storage_writer, process_group=process_group, no_dist=no_dist,
                planner=planner)


def load_state_dict(state_dict, storage_reader, process_group=None, coordinator_rank=0, no_dist=False,
                    planner=None):
    """Deprecated alias of :func:`load` (PyTorch's older name)."""
    return load(state_dict, storage_reader=storage_reader, process_group=process_group, no_dist=no_dist,
                planner=planner)
