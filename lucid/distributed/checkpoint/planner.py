"""Planners of distributed checkpoints (PyTorch's ``planner.py``/``default_planner.py``): what
each rank writes and reads, as plans of items that a storage writer/reader carries out.

NOTE [Checkpoint plans]
``dcp.save`` runs PyTorch's protocol: ``planner.set_up_planner(state_dict, ...)``; each rank's
``create_local_plan()`` lists :class:`WriteItem` s (one per piece this rank owns, NOTE
[Distributed checkpoints]); the coordinator's ``create_global_plan`` merges them into the
:class:`~lucid.distributed.checkpoint.Metadata` (its dict entries, without the storage
locations); ``finish_plan``; the storage writer's ``write_data(plan, planner)`` asks
``planner.resolve_data(item)`` for each item's value and returns :class:`WriteResult` s,
whose ``storage_data`` the coordinator's ``finish(metadata, results)`` records. ``dcp.load``:
``set_up_planner(state_dict, metadata, ...)``; ``create_local_plan()`` lists
:class:`ReadItem` s (for each target region, the overlapping saved pieces); the storage
reader's ``read_data(plan, planner)`` hands values to ``load_bytes`` and tensor pieces to
``resolve_tensor``/``commit_tensor``. The default load planner stages every piece and writes
the state dict only once every rank has read everything (``_commit``), so a failed load
changes nothing. A subclass overrides these steps as in PyTorch's DCP tutorial (rename keys in
``set_up_planner``, change dtypes in ``create_local_plan`` and ``resolve_data``).
"""
from __future__ import annotations

import abc
import enum
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

__all__ = ["MetadataIndex", "ChunkStorageMetadata", "TensorProperties", "TensorStorageMetadata",
           "BytesStorageMetadata", "WriteItemType", "LoadItemType", "TensorWriteData", "WriteItem", "ReadItem",
           "SavePlan", "LoadPlan", "WriteResult", "SavePlanner", "LoadPlanner", "DefaultSavePlanner",
           "DefaultLoadPlanner"]


# ------------------------------------------------------------------ records


@dataclass(frozen=True)
class MetadataIndex:
    """Names one saved piece: the flattened key and the piece's offsets (None for a value)."""

    fqn: str
    offset: Optional[tuple] = None
    index: Optional[int] = field(default=None, hash=False, compare=False)


@dataclass
class ChunkStorageMetadata:
    """Where a piece lies in its global tensor."""

    offsets: tuple
    sizes: tuple


@dataclass
class TensorProperties:
    """A saved tensor's dtype (a ``lucid.dtype``); PyTorch's layout fields are not kept."""

    dtype: Any = None


@dataclass
class TensorStorageMetadata:
    """A saved tensor: its properties, global size and pieces."""

    properties: TensorProperties
    size: tuple
    chunks: list


@dataclass
class BytesStorageMetadata:
    """A saved non-tensor value."""


class WriteItemType(enum.Enum):
    TENSOR = enum.auto()
    SHARD = enum.auto()
    BYTE_IO = enum.auto()


class LoadItemType(enum.Enum):
    TENSOR = enum.auto()
    BYTE_IO = enum.auto()


@dataclass
class TensorWriteData:
    chunk: ChunkStorageMetadata
    properties: TensorProperties
    size: tuple


@dataclass
class WriteItem:
    """One piece a rank writes."""

    index: MetadataIndex
    type: WriteItemType
    tensor_data: Optional[TensorWriteData] = None

    def tensor_storage_size(self):
        """Bytes of the piece (None for a value)."""
        if self.tensor_data is None:
            return None
        dtype = self.tensor_data.properties.dtype
        itemsize = np.dtype(getattr(dtype, "dtype", dtype)).itemsize
        return int(np.prod(self.tensor_data.chunk.sizes)) * itemsize


@dataclass
class ReadItem:
    """One copy a rank makes while loading: ``lengths`` elements from the saved piece
    ``storage_index`` at ``storage_offsets`` into the target ``dest_index`` at ``dest_offsets``."""

    type: LoadItemType
    dest_index: MetadataIndex
    dest_offsets: tuple
    storage_index: MetadataIndex
    storage_offsets: tuple
    lengths: tuple


@dataclass
class SavePlan:
    items: list
    storage_data: Any = None
    planner_data: Any = None
    usable: bool = True


@dataclass
class LoadPlan:
    items: list
    storage_data: Any = None
    planner_data: Any = None


@dataclass
class WriteResult:
    """What a storage writer did with one item: ``storage_data`` says where it lies."""

    index: MetadataIndex
    size_in_bytes: int
    storage_data: Any


# ------------------------------------------------------------------ the interfaces


class SavePlanner(abc.ABC):
    """What ``dcp.save`` asks, in order (NOTE [Checkpoint plans])."""

    @abc.abstractmethod
    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        """Receive the state dict to save."""

    @abc.abstractmethod
    def create_local_plan(self):
        """This rank's :class:`SavePlan`."""

    @abc.abstractmethod
    def create_global_plan(self, all_plans):
        """On the coordinator: ``(plans, Metadata)`` from every rank's plan."""

    @abc.abstractmethod
    def finish_plan(self, new_plan):
        """This rank's final plan."""

    @abc.abstractmethod
    def resolve_data(self, write_item):
        """The value (a tensor piece or an object) ``write_item`` writes."""


class LoadPlanner(abc.ABC):
    """What ``dcp.load`` asks, in order (NOTE [Checkpoint plans])."""

    @abc.abstractmethod
    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        """Receive the state dict to fill and the checkpoint's metadata."""

    @abc.abstractmethod
    def create_local_plan(self):
        """This rank's :class:`LoadPlan`."""

    @abc.abstractmethod
    def create_global_plan(self, global_plan):
        """On the coordinator: every rank's plan, possibly changed."""

    @abc.abstractmethod
    def finish_plan(self, central_plan):
        """This rank's final plan."""

    @abc.abstractmethod
    def load_bytes(self, read_item, value):
        """Take a saved non-tensor value (Lucid passes the object, PyTorch a ``BytesIO``)."""

    @abc.abstractmethod
    def resolve_tensor(self, read_item):
        """The tensor (of ``read_item.lengths``) to copy a saved piece into."""

    @abc.abstractmethod
    def commit_tensor(self, read_item, tensor):
        """``tensor`` (from ``resolve_tensor``) now holds the saved values."""


# ------------------------------------------------------------------ the defaults


class DefaultSavePlanner(SavePlanner):
    """The flattening and ownership of NOTE [Distributed checkpoints], as plans.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributed.checkpoint import DefaultSavePlanner
    >>> p = DefaultSavePlanner()
    >>> p.set_up_planner({"model": {"w": lucid.ones(2, 3)}, "step": 3}, None, True)
    >>> [(i.index.fqn, i.type.name) for i in p.create_local_plan().items]
    [('model.w', 'TENSOR'), ('step', 'BYTE_IO')]
    """

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, dedup_replicated_tensors=None,
                 dedup_save_to_lowest_rank=False, enable_plan_caching=False):
        if not flatten_state_dict:
            raise NotImplementedError("DefaultSavePlanner: flatten_state_dict=False is not supported")
        self.flatten_state_dict = True
        self.state_dict, self.is_coordinator = None, False

    def set_up_planner(self, state_dict, storage_meta=None, is_coordinator=False):
        from ._save_load import _flatten

        self.state_dict, self.is_coordinator = state_dict, is_coordinator
        self._flat, _, self._paths = _flatten(state_dict, "dcp.save")
        self._pieces = {}

    def create_local_plan(self):
        from ..._core.tensor import Tensor
        from ._save_load import _local_region

        rank0 = self.is_coordinator
        items, tensors = [], {}
        for key, value in self._flat.items():
            if not isinstance(value, Tensor):
                if rank0:
                    items.append(WriteItem(MetadataIndex(key), WriteItemType.BYTE_IO))
                continue
            shape, offsets, sizes, local, owner = _local_region(value, "dcp.save")
            writes = rank0 if owner is None else owner
            kind = WriteItemType.TENSOR if owner is None else WriteItemType.SHARD
            tensors[key] = (list(shape), value.dtype)  # known even where no rank writes a piece
            if writes and int(np.prod(sizes)) > 0:  # empty pieces need no item
                index = MetadataIndex(key, tuple(offsets))
                self._pieces[index] = local
                items.append(WriteItem(index, kind, TensorWriteData(
                    ChunkStorageMetadata(tuple(offsets), tuple(sizes)), TensorProperties(value.dtype), tuple(shape))))
        return SavePlan(items, planner_data={"paths": {k: list(p) for k, p in self._paths.items()},
                                             "tensors": tensors})

    def create_global_plan(self, all_plans):
        from ._save_load import Metadata, _dtype_name

        entries = {}
        for plan in all_plans:
            data = plan.planner_data or {}
            paths = data.get("paths", {})
            for key, (shape, dtype) in data.get("tensors", {}).items():
                have = entries.setdefault(key, {"kind": "tensor", "shape": list(shape), "dtype": _dtype_name(dtype),
                                                "chunks": [], "path": paths.get(key, [key])})
                if have["shape"] != list(shape):
                    raise ValueError(f"dcp.save: ranks disagree on the global shape of {key!r}: "
                                     f"{have['shape']} vs {list(shape)}")
            for item in plan.items:
                key = item.index.fqn
                if item.type == WriteItemType.BYTE_IO:
                    entries[key] = {"kind": "value", "path": paths.get(key, [key])}
                    continue
                td = item.tensor_data
                have = entries.setdefault(key, {"kind": "tensor", "shape": list(td.size), "chunks": [],
                                                "path": paths.get(key, [key])})
                have["dtype"] = _dtype_name(td.properties.dtype)  # a planner may have changed it
                have["chunks"].append({"offsets": list(td.chunk.offsets), "sizes": list(td.chunk.sizes)})
        return list(all_plans), Metadata(entries, len(all_plans))

    def finish_plan(self, new_plan):
        return new_plan

    def resolve_data(self, write_item):
        if write_item.type == WriteItemType.BYTE_IO:
            return self._flat[write_item.index.fqn]
        return self._pieces[write_item.index].detach().cpu().clone()

    def lookup_object(self, index):
        return self._flat[index.fqn]

    def lookup_tensor(self, index):
        return self._pieces[index]


class DefaultLoadPlanner(LoadPlanner):
    """Reads each target region from the saved pieces that overlap it; stages every value and
    writes the state dict at the end (NOTE [Checkpoint plans]).

    Examples
    --------
    >>> from lucid.distributed.checkpoint import DefaultLoadPlanner
    >>> DefaultLoadPlanner().allow_partial_load
    False
    """

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, allow_partial_load=False):
        if not flatten_state_dict:
            raise NotImplementedError("DefaultLoadPlanner: flatten_state_dict=False is not supported")
        self.allow_partial_load = bool(allow_partial_load)
        self.state_dict = self.metadata = None

    def set_up_planner(self, state_dict, metadata=None, is_coordinator=False):
        from ._save_load import _flatten

        self.state_dict, self.metadata, self.is_coordinator = state_dict, metadata, is_coordinator
        self._flat, self._where, _ = _flatten(state_dict, "dcp.load")
        self._staged, self._values = {}, {}

    def create_local_plan(self):
        from ..._core.tensor import Tensor
        from ._save_load import _local_region

        api, meta = "dcp.load", self.metadata.state_dict_metadata
        missing = [k for k in self._flat if k not in meta]
        if missing and not self.allow_partial_load:
            raise RuntimeError(f"{api}: missing key(s) in the checkpoint: {missing[:10]}")
        items = []
        for key, target in self._flat.items():
            if key not in meta:
                continue
            entry = meta[key]
            if entry["kind"] == "value":
                if isinstance(target, Tensor):
                    raise RuntimeError(f"{api}: {key!r} is a value in the checkpoint, the state dict holds a tensor")
                items.append(ReadItem(LoadItemType.BYTE_IO, MetadataIndex(key), (), MetadataIndex(key), (), ()))
                continue
            if isinstance(target, Tensor):
                shape, offsets, sizes, _, _ = _local_region(target, api)
                if list(shape) != entry["shape"]:
                    raise RuntimeError(f"{api}: size mismatch for {key!r}: the checkpoint holds "
                                       f"{tuple(entry['shape'])}, the state dict {shape}")
            else:  # a tensor saved where the state dict holds a value: the whole tensor replaces it
                shape = offsets = sizes = None
            shape = tuple(entry["shape"]) if shape is None else shape
            offsets = (0,) * len(shape) if offsets is None else offsets
            sizes = shape if sizes is None else sizes
            items += _read_items(api, key, entry, tuple(offsets), tuple(sizes))
        return LoadPlan(items)

    def create_global_plan(self, global_plan):
        return global_plan

    def finish_plan(self, central_plan):
        return central_plan

    def load_bytes(self, read_item, value):
        self._values[read_item.dest_index.fqn] = value

    def resolve_tensor(self, read_item):
        """A view of this key's staging buffer (a fresh array: the state dict is written at the end)."""
        from ..._core.tensor import Tensor, _wrap
        from ._save_load import _local_region

        fqn = read_item.dest_index.fqn
        if fqn not in self._staged:
            target = self._flat[fqn]
            entry = self.metadata.state_dict_metadata[fqn]
            if isinstance(target, Tensor):
                _, _, sizes, local, _ = _local_region(target, "dcp.load")
                dtype = np.dtype(local.dtype)  # no read of a device tensor's values
            else:
                sizes, dtype = tuple(entry["shape"]), _np_dtype(entry["dtype"])
            self._staged[fqn] = np.zeros(sizes, dtype=dtype)
        region = tuple(slice(o, o + n) for o, n in zip(read_item.dest_offsets, read_item.lengths)) or Ellipsis
        return _wrap(self._staged[fqn][region])  # a view (``[...]`` keeps a 0-d array a view too)

    def commit_tensor(self, read_item, tensor):
        pass  # staged: written by _commit

    def _commit(self):
        """Write the staged values into the state dict (every rank read everything)."""
        from ... import no_grad, tensor as make_tensor
        from ..._core.tensor import Tensor
        from ._save_load import _local_region

        with no_grad():
            for fqn, target in self._flat.items():
                if fqn in self._staged:
                    new = make_tensor(self._staged[fqn])
                    if isinstance(target, Tensor):
                        local = _local_region(target, "dcp.load")[3]
                        local.copy_(new.to(local.device))
                        continue
                elif fqn in self._values:
                    new = self._values[fqn]
                else:
                    continue
                container, k = self._where[fqn]
                if container is not None and not isinstance(container, tuple):
                    container[k] = new


def _np_dtype(name):
    import lucid

    return np.dtype(getattr(lucid, name).dtype)


def _read_items(api, key, entry, offsets, sizes):
    """The copies that fill region ``offsets``/``sizes`` of saved tensor ``key``; every element must be covered."""
    items, covered = [], 0
    for ch in entry["chunks"]:
        co, cs = tuple(ch["offsets"]), tuple(ch["sizes"])
        lo = [max(o, c) for o, c in zip(offsets, co)]
        hi = [min(o + s, c + n) for o, s, c, n in zip(offsets, sizes, co, cs)]
        if sizes and any(h <= lo_ for lo_, h in zip(lo, hi)):
            continue
        lengths = tuple(h - lo_ for lo_, h in zip(lo, hi))
        items.append(ReadItem(LoadItemType.TENSOR, MetadataIndex(key, offsets),
                              tuple(lo_ - o for lo_, o in zip(lo, offsets)), MetadataIndex(key, co),
                              tuple(lo_ - c for lo_, c in zip(lo, co)), lengths))
        covered += int(np.prod(lengths)) if lengths else 1
        if not sizes:
            break
    want = int(np.prod(sizes)) if sizes else 1
    if covered != want:
        raise RuntimeError(f"{api}: the checkpoint's pieces of {key!r} cover {covered} of the {want} "
                           "elements this rank needs")
    return items
