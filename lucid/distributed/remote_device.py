"""``lucid.distributed.remote_device`` (``torch.distributed.remote_device``): ``_remote_device``,
a device on a named worker or a rank, parsed from ``"worker1/cuda:0"`` or ``"rank:1/cpu"``.

Examples
--------
>>> from lucid.distributed.remote_device import _remote_device
>>> d = _remote_device("rank:1/cpu")
>>> d.rank(), d.worker_name(), str(d.device())
(1, None, 'cpu')
"""
from __future__ import annotations

from .._core.backend import device as _device

__all__ = []  # as in PyTorch: _remote_device is imported by its private name


class _remote_device:  # noqa: N801 - PyTorch's name
    """A device of a remote worker: ``"<worker>/<device>"``, ``"rank:<r>/<device>"``, or a
    bare worker name / ``rank:<r>`` (device "cpu")."""

    def __init__(self, remote_device):
        if isinstance(remote_device, _remote_device):
            self._worker_name, self._rank, self._device = (remote_device._worker_name, remote_device._rank,
                                                           remote_device._device)
            return
        if not isinstance(remote_device, str):
            raise TypeError(f"_remote_device: expected a str, got {type(remote_device).__name__}")
        worker, sep, dev = remote_device.partition("/")
        if not worker or (sep and not dev) or "/" in dev:
            raise ValueError(f"_remote_device: could not parse remote_device {remote_device!r}; expected "
                             "'<workername>/<device>' or 'rank:<rank>/<device>'")
        self._device = _device(dev if sep else "cpu")
        self._worker_name, self._rank = worker, None
        if worker.startswith("rank:"):
            text = worker[5:]
            if not text.isdigit():
                raise ValueError(f"_remote_device: invalid rank {text!r} in {remote_device!r}")
            self._worker_name, self._rank = None, int(text)

    def worker_name(self):
        """The worker's name, or None when the device was given by rank."""
        return self._worker_name

    def rank(self):
        """The worker's rank, or None when it was given by name."""
        return self._rank

    def device(self):
        """The device on that worker."""
        return self._device

    def __repr__(self):
        who = self._worker_name if self._worker_name is not None else f"rank:{self._rank}"
        return f"{who}/{self._device}"

    def __eq__(self, other):
        return isinstance(other, _remote_device) and (self._worker_name, self._rank, self._device) == (
            other._worker_name, other._rank, other._device)

    def __hash__(self):
        return hash((self._worker_name, self._rank, str(self._device)))
