"""Distributed checkpoints (PyTorch's ``torch.distributed.checkpoint``, "DCP").

``save(state_dict, checkpoint_id=dir)`` on every rank writes each rank's pieces and one
metadata file; ``load(state_dict, checkpoint_id=dir)`` fills a state dict in place, resharding
DTensors to whatever placements and world size the loading job has (NOTE [Distributed
checkpoints] in ``_save_load.py``). ``state_dict`` has ``get_state_dict``/``set_state_dict``,
which name model and optimizer state by the plain model's names; ``format_utils`` converts to
and from a single ``lucid.save`` file.

Examples
--------
>>> import tempfile, lucid.nn as nn
>>> import lucid.distributed.checkpoint as dcp
>>> path = tempfile.mkdtemp()
>>> _ = dcp.save({"w": nn.Linear(2, 2).weight}, checkpoint_id=path)
>>> sorted(dcp.FileSystemReader(path).read_metadata().state_dict_metadata)
['w']
"""
from ._save_load import (CheckpointException, FileSystemReader, FileSystemWriter, Metadata, Stateful, async_save,
                         load, load_state_dict, save, save_state_dict)
from .planner import (BytesStorageMetadata, ChunkStorageMetadata, DefaultLoadPlanner, DefaultSavePlanner, LoadItemType,
                      LoadPlan, LoadPlanner, MetadataIndex, ReadItem, SavePlan, SavePlanner, TensorProperties,
                      TensorStorageMetadata, TensorWriteData, WriteItem, WriteItemType, WriteResult)
from .storage import StorageReader, StorageWriter
from .optimizer import load_sharded_optimizer_state_dict
from . import format_utils, optimizer, planner, state_dict, state_dict_loader, state_dict_saver, stateful, storage  # noqa: E402,F811  (submodules PyTorch exposes here)


__all__ = ["save", "load", "async_save", "CheckpointException", "FileSystemReader", "FileSystemWriter",
           "Metadata", "Stateful", "DefaultSavePlanner", "DefaultLoadPlanner", "save_state_dict",
           "load_state_dict", "state_dict", "format_utils", "stateful", "state_dict_saver", "state_dict_loader",
           "SavePlanner", "LoadPlanner", "SavePlan", "LoadPlan", "WriteItem", "ReadItem", "WriteItemType",
           "LoadItemType", "MetadataIndex", "ChunkStorageMetadata", "TensorProperties", "TensorStorageMetadata",
           "BytesStorageMetadata", "TensorWriteData", "WriteResult", "StorageWriter", "StorageReader",
           "load_sharded_optimizer_state_dict"]
