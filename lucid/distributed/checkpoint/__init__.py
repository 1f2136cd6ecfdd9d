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
from . import format_utils, state_dict, state_dict_loader, state_dict_saver, stateful  # noqa: E402  (submodules PyTorch exposes here)


class DefaultSavePlanner:
    """PyTorch's default save planner: accepted by :func:`save`, whose flattening it describes."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, dedup_replicated_tensors=None,
                 dedup_save_to_lowest_rank=False, enable_plan_caching=False):
        if not flatten_state_dict:
            raise NotImplementedError("DefaultSavePlanner: flatten_state_dict=False is not supported")


class DefaultLoadPlanner:
    """PyTorch's default load planner: accepted by :func:`load`."""

    def __init__(self, flatten_state_dict=True, flatten_sharded_tensors=True, allow_partial_load=False):
        if not flatten_state_dict or allow_partial_load:
            raise NotImplementedError("DefaultLoadPlanner: only the default options are supported")


__all__ = ["save", "load", "async_save", "CheckpointException", "FileSystemReader", "FileSystemWriter",
           "Metadata", "Stateful", "DefaultSavePlanner", "DefaultLoadPlanner", "save_state_dict",
           "load_state_dict", "state_dict", "format_utils", "stateful", "state_dict_saver", "state_dict_loader"]
