"""Storage writers and readers of distributed checkpoints (PyTorch's ``StorageWriter`` and
``StorageReader``): where the pieces that the plans name go (NOTE [Checkpoint plans]).

A subclass implements the abstract methods; ``dcp.save``/``dcp.load`` call them in PyTorch's
order. ``write_data``/``read_data`` may return a finished ``Future`` (as PyTorch's) or the
value itself. ``FileSystemWriter``/``FileSystemReader`` are the file implementations.

Examples
--------
>>> from lucid.distributed.checkpoint import FileSystemWriter, StorageWriter
>>> issubclass(FileSystemWriter, StorageWriter)
True
"""
from __future__ import annotations

import abc

__all__ = ["StorageWriter", "StorageReader"]


class StorageWriter(abc.ABC):
    """Writes the items of a save plan; the coordinator's ``finish`` records the metadata."""

    def reset(self, checkpoint_id=None):
        """Start a new checkpoint (``dcp.save``'s ``checkpoint_id``)."""

    @abc.abstractmethod
    def set_up_storage_writer(self, is_coordinator):
        ...

    @abc.abstractmethod
    def prepare_local_plan(self, plan):
        """This rank's plan, possibly annotated (``plan.storage_data``)."""

    @abc.abstractmethod
    def prepare_global_plan(self, plans):
        """On the coordinator: every rank's plan, possibly annotated."""

    @abc.abstractmethod
    def write_data(self, plan, planner):
        """Write ``planner.resolve_data(item)`` for each item; returns a list of ``WriteResult``."""

    @abc.abstractmethod
    def finish(self, metadata, results):
        """On the coordinator, after every rank wrote: record ``metadata`` (``results``: one list per rank)."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return True

    def storage_meta(self):
        return None


class StorageReader(abc.ABC):
    """Reads the items of a load plan into the planner."""

    def reset(self, checkpoint_id=None):
        """Read another checkpoint (``dcp.load``'s ``checkpoint_id``)."""

    @abc.abstractmethod
    def read_metadata(self):
        """The checkpoint's ``Metadata``."""

    @abc.abstractmethod
    def set_up_storage_reader(self, metadata, is_coordinator):
        ...

    @abc.abstractmethod
    def prepare_local_plan(self, plan):
        ...

    @abc.abstractmethod
    def prepare_global_plan(self, plans):
        ...

    @abc.abstractmethod
    def read_data(self, plan, planner):
        """For each item: ``planner.load_bytes(item, value)`` or copy the piece into
        ``planner.resolve_tensor(item)`` and call ``planner.commit_tensor``."""

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id):
        return True
