"""``RRef``: a reference to a value that lives on one worker (its owner).

NOTE [RRef identity]
An RRef is named by ``(creator worker id, counter)``. The owner keeps, per id, one owner RRef
holding a Future of the value (``Agent.owned``); ``remote()`` makes a user RRef on the caller
at once and the owner's entry when the request arrives, and a ``to_here`` that overtakes the
``remote`` request finds (or makes) the same pending entry and waits on it. An RRef sent in an
RPC travels as its id (NOTE [RPC pickling]); arriving at its owner it *is* the owner RRef
again, so ``local_value()`` works there. Lucid keeps owned values until ``shutdown``: PyTorch's
distributed reference counting (deleting a value when the last user RRef dies) is not built.
"""
from __future__ import annotations

from lucid.futures import Future

from . import _agent


class RRef:
    """A remote reference (``torch.distributed.rpc.RRef``).

    ``RRef(value)`` makes an RRef owned by this worker; ``rpc.remote`` returns one owned by the
    callee. ``to_here()`` copies the value to the caller, ``local_value()`` gives it on the owner,
    and ``rref.rpc_sync().method(*args)`` (``rpc_async``, ``remote``) call a method of the value
    on its owner.

    Examples
    --------
    >>> import lucid.distributed.rpc as rpc
    >>> rref = rpc.remote("worker1", lucid.add, args=(lucid.ones(2), 1))   # doctest: +SKIP
    >>> rref.to_here()                                                     # doctest: +SKIP
    tensor([2., 2.])
    """

    def __init__(self, value, type_hint=None):
        agent = _agent.current("RRef")
        self._init(agent, agent.worker_id, agent.new_rref_id(), True)
        self._value.set_result(value)
        self._type_hint = type_hint
        agent.owned[self._rref_id] = self

    def __class_getitem__(cls, item):  # ``RRef[Tensor]`` in type annotations
        return cls

    def _init(self, agent, owner_id, rref_id, is_owner):
        self._agent, self._owner_id, self._rref_id, self._is_owner = agent, owner_id, rref_id, is_owner
        self._value = Future() if is_owner else None  # the owner's value
        self._created = Future()  # completes when the owner has the value (confirmed_by_owner)
        self._type_hint = None
        self._type_name = None
        if is_owner:
            self._value.add_done_callback(lambda f: _confirm(self._created))

    @classmethod
    def _make(cls, agent, owner_id, rref_id, is_owner):
        self = cls.__new__(cls)
        self._init(agent, owner_id, rref_id, is_owner)
        return self

    # ------------------------------------------------------------------ queries
    def owner(self):
        """The owner's :class:`WorkerInfo`."""
        return self._agent.workers[self._owner_id]

    def owner_name(self):
        return self.owner().name

    def is_owner(self):
        return self._is_owner

    def confirmed_by_owner(self):
        """Whether the owner is known to hold this RRef's value (always True on the owner)."""
        return self._is_owner or (self._created.done() and self._created._error is None)

    def _get_future(self):
        """The Future of the ``remote`` call that made this RRef (fails as it did)."""
        return self._created

    def local_value(self):
        """The value, on the owner; blocks until it is computed."""
        if not self._is_owner:
            raise RuntimeError(f"For {self!r}, can't call localValue() on user {self._agent.info}. Call it on owner "
                               f"{self.owner()}")
        return self._value.wait()

    def to_here(self, timeout=-1.0):
        """A copy of the value on this worker (the value itself on the owner); raises the remote
        call's exception if it failed, RuntimeError after ``timeout`` seconds."""
        if self._is_owner:
            return self._value.wait()
        return self._agent.request(self._owner_id, "fetch", self._rref_id, timeout, _current_context()).wait()

    def _get_type(self, timeout=-1.0):
        """The type of the value (asked of the owner when this RRef is a user's)."""
        if self._is_owner:
            return type(self._value.wait())
        if self._type_hint is None:
            self._type_hint = self._agent.request(self._owner_id, "call", (_value_type, (self,), {}), timeout,
                                                  _current_context()).wait()
        return self._type_hint

    def backward(self, dist_autograd_ctx_id=-1, retain_graph=False):
        """Run the backward from this RRef's value (a scalar tensor) on its owner: a local
        ``backward`` with ``dist_autograd_ctx_id=-1``, else a distributed one in that context."""
        from . import api

        api.rpc_sync(self.owner(), _backward_on_owner, args=(self, dist_autograd_ctx_id, retain_graph))

    # ------------------------------------------------------------------ proxies
    def rpc_sync(self, timeout=-1.0):
        """A proxy: ``rref.rpc_sync().f(*args)`` runs ``value.f(*args)`` on the owner and returns its result."""
        return _Proxy(self, "rpc_sync", timeout)

    def rpc_async(self, timeout=-1.0):
        """As :meth:`rpc_sync`, returning a Future."""
        return _Proxy(self, "rpc_async", timeout)

    def remote(self, timeout=-1.0):
        """As :meth:`rpc_sync`, returning an RRef of the result (owned by this RRef's owner)."""
        return _Proxy(self, "remote", timeout)

    def __reduce__(self):
        raise RuntimeError("RRef: an RRef can only be pickled by RPC (pass it as an argument of rpc_sync, rpc_async "
                           "or remote)")

    def __repr__(self):
        kind = "OwnerRRef" if self._is_owner else "UserRRef"
        return f"{kind}(rref_id=GloballyUniqueId(created_on={self._rref_id[0]}, local_id={self._rref_id[1]}))"


def _confirm(created):
    """The owner has the value: ``created`` completes, unless ``remote``'s answer already did it."""
    try:
        created.set_result(True)
    except RuntimeError:
        pass


class _Proxy:
    def __init__(self, rref, mode, timeout):
        self._rref, self._mode, self._timeout = rref, mode, timeout

    def __getattr__(self, name):
        from . import api

        call, rref, timeout = getattr(api, self._mode), self._rref, self._timeout

        def method(*args, **kwargs):
            return call(rref.owner(), _invoke_method, args=(rref, name, args, kwargs), timeout=timeout)

        return method


def _invoke_method(rref, name, args, kwargs):
    """On the owner: ``rref.local_value().name(*args, **kwargs)``; a method made with
    ``@async_execution`` answers when its Future completes."""
    value = rref.local_value()
    result = getattr(value, name)(*args, **kwargs)
    if getattr(getattr(type(value), name, None), "_wrapped_async_rpc_function", None) is not None:
        return _agent.AsyncResult(_check_future(result, name))
    return result


def _value_type(rref):
    return type(rref.local_value())


def _backward_on_owner(rref, context_id, retain_graph):
    value = rref.local_value()
    if context_id == -1:
        value.backward(retain_graph=retain_graph)
        return
    from lucid.distributed import autograd as dist_autograd

    dist_autograd.backward(context_id, [value], retain_graph=retain_graph)


def _check_future(result, name):
    if not isinstance(result, Future):
        raise TypeError(f"async_execution: '{name}' must return a lucid.futures.Future, got "
                        f"{type(result).__name__}")
    return result


def _current_context():
    from lucid.distributed.autograd import _context

    return _context.current()


def owned_entry(agent, rref_id):
    """The owner RRef of ``rref_id`` on this worker, made pending if its ``remote`` has not arrived."""
    with agent._lock:
        rref = agent.owned.get(rref_id)
        if rref is None:
            rref = agent.owned[rref_id] = RRef._make(agent, agent.worker_id, rref_id, True)
        return rref


def _rref_from_wire(agent, owner_id, rref_id):
    if owner_id == agent.worker_id:
        return owned_entry(agent, rref_id)
    rref = RRef._make(agent, owner_id, rref_id, False)
    rref._created.set_result(True)  # a fork: the RRef it came from was the owner's or confirmed
    return rref
