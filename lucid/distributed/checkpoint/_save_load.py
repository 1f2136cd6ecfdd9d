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

from .storage import StorageReader, StorageWriter

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


class FileSystemWriter(StorageWriter):
    """Where :func:`save` writes: a directory (PyTorch's ``FileSystemWriter``; its tuning options
    are accepted: one file per rank is always written, synchronously, with fsync).

    As a :class:`StorageWriter` (NOTE [Checkpoint plans]): the coordinator names each rank's
    file ``__<rank>_<token>.distcp`` (a fresh token per save), each rank writes its items there
    with :func:`lucid.save`, and ``finish`` writes ``.metadata`` last, then removes the files of
    earlier saves (NOTE [Distributed checkpoints]).
    """

    def __init__(self, path, single_file_per_rank=True, sync_files=True, thread_count=1,
                 per_thread_copy_ahead=10_000_000, cache_staged_state_dict=False, overwrite=True):
        self.path = os.fspath(path)
        self.overwrite = bool(overwrite)

    def reset(self, checkpoint_id=None):
        # PyTorch resets the writer to the id, so one writer kept across steps writes each step
        # where it is told to
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def set_up_storage_writer(self, is_coordinator):
        self.is_coordinator = is_coordinator

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        token = secrets.token_hex(4)
        for i, plan in enumerate(plans):
            plan.storage_data = f"__{i}_{token}.distcp"
        return plans

    def write_data(self, plan, planner):
        from ... import serialization
        from .planner import WriteItemType, WriteResult

        fname, payload, results = plan.storage_data, {}, []
        for item in plan.items:
            key = item.index.fqn if item.type == WriteItemType.BYTE_IO else \
                f"{item.index.fqn}@{','.join(map(str, item.index.offset))}"
            payload[key] = planner.resolve_data(item)
            results.append(WriteResult(item.index, item.tensor_storage_size() or 0, {"file": fname, "key": key}))
        os.makedirs(self.path, exist_ok=True)
        if payload:
            serialization.save(payload, os.path.join(self.path, fname))
        return results

    def finish(self, metadata, results):
        where = {(r.index.fqn, r.index.offset): r.storage_data for rank in results for r in rank}
        for key, entry in metadata.state_dict_metadata.items():
            if entry["kind"] == "value":
                entry.update(where[(key, None)])
            for ch in entry.get("chunks", ()):
                ch.update(where[(key, tuple(ch["offsets"]))])
        _write_metadata(self.path, {"format": _FORMAT, "world_size": metadata.world_size,
                                    "entries": metadata.state_dict_metadata})
        tokens = {r.storage_data["file"][:-len(".distcp")].rsplit("_", 1)[-1] for rank in results for r in rank}
        _remove_stale(self.path, tokens)


class FileSystemReader(StorageReader):
    """Where :func:`load` reads: a directory written by :func:`save` (a :class:`StorageReader`)."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def reset(self, checkpoint_id=None):
        if checkpoint_id is not None:
            self.path = os.fspath(checkpoint_id)

    def read_metadata(self):
        """The checkpoint's :class:`Metadata`."""
        return Metadata._read(self.path)

    def set_up_storage_reader(self, metadata, is_coordinator):
        self.metadata = metadata

    def prepare_local_plan(self, plan):
        return plan

    def prepare_global_plan(self, plans):
        return plans

    def read_data(self, plan, planner):
        from ... import serialization
        from ... import tensor as make_tensor
        from .planner import LoadItemType

        files, meta = {}, self.metadata.state_dict_metadata

        def read(entry_file, entry_key):
            if entry_file not in files:
                files[entry_file] = serialization.load(os.path.join(self.path, entry_file), weights_only=True)
            return files[entry_file][entry_key]

        for item in plan.items:
            entry = meta[item.storage_index.fqn]
            if item.type == LoadItemType.BYTE_IO:
                planner.load_bytes(item, read(entry["file"], entry["key"]))
                continue
            chunk = next(c for c in entry["chunks"] if tuple(c["offsets"]) == item.storage_index.offset)
            piece = read(chunk["file"], chunk["key"]).numpy()
            src = tuple(slice(o, o + n) for o, n in zip(item.storage_offsets, item.lengths)) or Ellipsis
            target = planner.resolve_tensor(item)
            target.copy_(make_tensor(np.asarray(piece[src])).to(target.device))
            planner.commit_tensor(item, target)


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


class _NotAPlanner(TypeError, NotImplementedError):
    """A planner that is not a SavePlanner/LoadPlanner (Lucid raised NotImplementedError for
    every custom planner before they were supported: both keep callers working)."""


def _storage(api, checkpoint_id, storage, default, base):
    if storage is None:
        if checkpoint_id is None:
            raise _NoCheckpointId(f"{api}: pass checkpoint_id (a directory) or a storage writer/reader")
        return default(checkpoint_id)
    if not isinstance(storage, base):
        raise TypeError(f"{api}: expected a {base.__name__}, got {type(storage).__name__}")
    storage.reset(checkpoint_id)
    return storage


def _planner(api, planner, base, default):
    if planner is None:
        return default()
    if not isinstance(planner, base):
        raise _NotAPlanner(f"{api}: custom planners must be {base.__name__} instances "
                           f"(lucid.distributed.checkpoint.{base.__name__}), got {type(planner).__name__}")
    return planner


def _on_every_rank(api, group, world, step):
    """``step()`` on every rank; all raise together if any failed; returns every rank's result."""
    error = value = None
    try:
        value = step()
        if hasattr(value, "done") and hasattr(value, "wait"):  # a storage's Future: lucid.futures
            value = value.wait()
        elif hasattr(value, "done") and hasattr(value, "result"):  # or concurrent.futures
            value = value.result()
    except Exception as e:  # every rank must hear of it, or the others wait forever
        error = f"{type(e).__name__}: {e}"
    gathered = _gather_all(group, world, (error, value))
    _raise_if_any_failed(api, [g[0] for g in gathered])
    return [g[1] for g in gathered]


def _statefuls_resolved(state_dict, api):
    """``state_dict`` with each Stateful value replaced by its ``state_dict()`` (PyTorch's first step)."""
    if not isinstance(state_dict, dict):
        raise TypeError(f"{api}: state_dict must be a dict, got {type(state_dict).__name__}")
    from ..._core.tensor import Tensor

    return {k: v.state_dict() if not isinstance(v, Tensor) and _is_stateful(v) else v for k, v in state_dict.items()}


def _dtype_name(dtype):
    return str(dtype).split(".")[-1]


def save(state_dict, *, checkpoint_id=None, storage_writer=None, planner=None, process_group=None, no_dist=False):
    """Save a (possibly sharded) state dict into the directory ``checkpoint_id``, from every rank.

    Each rank writes the pieces it owns (NOTE [Distributed checkpoints]); DTensors are saved
    by their global value, so :func:`load` can read them back into other placements or another
    number of ranks. Without an initialised process group (or with ``no_dist=True``) it is a
    single-process save. ``planner`` (a :class:`SavePlanner`, default
    :class:`DefaultSavePlanner`) and ``storage_writer`` (a :class:`StorageWriter`, default
    :class:`FileSystemWriter` of ``checkpoint_id``) run PyTorch's protocol (NOTE [Checkpoint
    plans] in ``planner.py``).

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
    from .planner import DefaultSavePlanner, SavePlanner

    api = "dcp.save"
    planner = _planner(api, planner, SavePlanner, DefaultSavePlanner)
    writer = _storage(api, checkpoint_id, storage_writer, FileSystemWriter, StorageWriter)
    group, rank, world = _group_info(process_group, no_dist)
    coordinator = rank == 0

    def local_plan():
        planner.set_up_planner(_statefuls_resolved(state_dict, api), writer.storage_meta(), coordinator)
        writer.set_up_storage_writer(coordinator)
        return writer.prepare_local_plan(planner.create_local_plan())

    def global_plan():
        if not coordinator:
            return None
        plans, metadata = planner.create_global_plan(local_plans)
        return writer.prepare_global_plan(plans), metadata

    local_plans = _on_every_rank(api, group, world, local_plan)
    plans, metadata = _on_every_rank(api, group, world, global_plan)[0]
    results = _on_every_rank(api, group, world, lambda: writer.write_data(planner.finish_plan(plans[rank]), planner))
    _on_every_rank(api, group, world, lambda: writer.finish(metadata, results) if coordinator else None)
    return metadata


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


def _remove_stale(path, tokens):
    for name in os.listdir(path):
        if name.startswith("__") and name.endswith(".distcp") and name[:-len(".distcp")].rsplit("_", 1)[-1] not in tokens:
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
    shape or a file is wrong. ``planner`` is a :class:`LoadPlanner` (default
    :class:`DefaultLoadPlanner`, which writes the state dict only after every rank read
    everything), ``storage_reader`` a :class:`StorageReader` (NOTE [Checkpoint plans]).
    """
    from .planner import DefaultLoadPlanner, LoadPlanner

    api = "dcp.load"
    planner = _planner(api, planner, LoadPlanner, DefaultLoadPlanner)
    reader = _storage(api, checkpoint_id, storage_reader, FileSystemReader, StorageReader)
    group, rank, world = _group_info(process_group, no_dist)
    coordinator = rank == 0
    resolved = _statefuls_resolved(state_dict, api)
    statefuls = {k for k, v in state_dict.items() if resolved[k] is not v}

    def local_plan():
        metadata = reader.read_metadata()
        planner.set_up_planner(resolved, metadata, coordinator)
        reader.set_up_storage_reader(metadata, coordinator)
        return reader.prepare_local_plan(planner.create_local_plan())

    local_plans = _on_every_rank(api, group, world, local_plan)
    plans = _on_every_rank(api, group, world, lambda: reader.prepare_global_plan(
        planner.create_global_plan(local_plans)) if coordinator else None)[0]
    _on_every_rank(api, group, world, lambda: reader.read_data(planner.finish_plan(plans[rank]), planner))
    commit = getattr(planner, "_commit", None)  # the default planner writes the state dict only now
    if commit is not None:
        commit()
    for k, v in state_dict.items():
        if k in statefuls:
            v.load_state_dict(resolved[k])
        elif resolved[k] is not v:  # a top-level value replaced in the planner's copy
            state_dict[k] = resolved[k]


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
