"""``lucid.multiprocessing.queue`` (``torch.multiprocessing.queue``): queues whose items are
pickled with the ``ForkingPickler`` that shares tensors (NOTE [Shared memory]).

Importing :mod:`lucid.multiprocessing` registers the tensor reductions with
``multiprocessing.reduction.ForkingPickler``, which Python's own queues already use, so
:class:`Queue` and :class:`SimpleQueue` are Python's, constructible without a ``ctx``.
:class:`ConnectionWrapper` wraps a raw ``Connection`` so ``send``/``recv`` go through it too.

Examples
--------
>>> import multiprocessing
>>> import lucid
>>> from lucid.multiprocessing.queue import ConnectionWrapper
>>> a, b = multiprocessing.Pipe()
>>> ConnectionWrapper(a).send(lucid.tensor([1.0, 2.0]))
>>> ConnectionWrapper(b).recv().tolist()
[1.0, 2.0]
"""
from __future__ import annotations

import io
import multiprocessing
import multiprocessing.queues
import pickle

from . import ForkingPickler

__all__ = ["ConnectionWrapper", "Queue", "SimpleQueue", "ForkingPickler"]


class ConnectionWrapper:
    """A ``multiprocessing`` connection whose ``send``/``recv`` pickle with ``ForkingPickler``
    (so tensors go through shared memory); every other attribute is the connection's."""

    def __init__(self, conn):
        self.conn = conn

    def send(self, obj):
        buf = io.BytesIO()
        ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(obj)
        self.send_bytes(buf.getvalue())

    def recv(self):
        return pickle.loads(self.recv_bytes())

    def __getattr__(self, name):
        if "conn" in self.__dict__:
            return getattr(self.conn, name)
        raise AttributeError(f"'{type(self).__name__}' object has no attribute 'conn'")


class Queue(multiprocessing.queues.Queue):
    """Python's process queue; ``ctx`` defaults to the current start method's context."""

    def __init__(self, maxsize=0, *, ctx=None):
        super().__init__(maxsize, ctx=ctx or multiprocessing.get_context())


class SimpleQueue(multiprocessing.queues.SimpleQueue):
    """Python's simple process queue; ``ctx`` defaults to the current start method's context."""

    def __init__(self, *, ctx=None):
        super().__init__(ctx=ctx or multiprocessing.get_context())
