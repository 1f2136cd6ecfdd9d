"""``init_rpc``, ``shutdown``, ``rpc_sync``/``rpc_async``/``remote`` and the requests a worker serves."""
from __future__ import annotations

import json
import os
import re
import socket
import traceback

from lucid.futures import Future

from . import _agent
from .options import DEFAULT_INIT_METHOD, UNSET_RPC_TIMEOUT, BackendType, RpcBackendOptions, TensorPipeRpcBackendOptions
from .rref import RRef, _check_future, owned_entry

_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


def _context():
    from lucid.distributed.autograd import _context

    return _context


# ---------------------------------------------------------------------- setup
def init_rpc(name, backend=None, rank=-1, world_size=None, rpc_backend_options=None):
    """Start this process's RPC agent as worker ``name`` (rank ``rank`` of ``world_size``).

    Addresses are exchanged through a :class:`~lucid.distributed.TCPStore` at ``init_method``
    (``env://``: ``MASTER_ADDR``/``MASTER_PORT``; or ``tcp://host:port``), hosted by rank 0; with
    no ``MASTER_ADDR`` in a process that has run ``init_process_group`` (``lucid-run``), through MPI.
    Blocks until every worker has joined.

    Examples
    --------
    >>> import os, lucid.distributed.rpc as rpc
    >>> os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")   # doctest: +SKIP
    >>> rpc.init_rpc("worker0", rank=0, world_size=1)                     # doctest: +SKIP
    >>> rpc.rpc_sync("worker0", max, args=(1, 2))                         # doctest: +SKIP
    2
    >>> rpc.shutdown()                                                    # doctest: +SKIP
    """
    api = "init_rpc"
    _check_init_args(api, name, backend, rank, world_size, rpc_backend_options)
    if _agent._AGENT[0] is not None:
        raise RuntimeError(f"{api}: RPC is already initialized")
    options = rpc_backend_options if rpc_backend_options is not None else TensorPipeRpcBackendOptions()
    agent = _agent.Agent(name, rank, world_size, options, _HANDLERS)
    try:
        agent.set_workers(_rendezvous(api, agent, options))
    except BaseException:
        agent.close(graceful=False)
        raise
    _agent._AGENT[0] = agent


def _check_init_args(api, name, backend, rank, world_size, options):
    if not isinstance(name, str) or not _NAME.match(name) or len(name) > 128:
        raise ValueError(f"{api}: worker name must match ^[A-Za-z0-9_-]+$ and have at most 128 characters, "
                         f"got {name!r}")
    if backend not in (None, BackendType.TENSORPIPE):
        raise ValueError(f"{api}: backend {backend!r} is not available; Lucid has BackendType.TENSORPIPE only")
    if world_size is None or isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"{api}: world_size must be a positive int, got {world_size!r} (Lucid's RPC has no "
                         "dynamic membership)")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < world_size:
        raise ValueError(f"{api}: rank must be an int in [0, {world_size}), got {rank!r}")
    if options is not None and not isinstance(options, RpcBackendOptions):
        raise TypeError(f"{api}: rpc_backend_options must be a TensorPipeRpcBackendOptions, got "
                        f"{type(options).__name__}")


def _advertised_host(agent):
    if agent.host != "0.0.0.0":
        return agent.host
    return socket.gethostbyname(socket.gethostname())


def _rendezvous(api, agent, options):
    """``[(name, host, port)]`` of every rank (see :func:`init_rpc`)."""
    mine = (agent.name, _advertised_host(agent), agent.port)
    init = options.init_method
    if init in (None, DEFAULT_INIT_METHOD) and "MASTER_ADDR" not in os.environ:
        import lucid.distributed as dist

        if not dist.is_initialized():
            raise ValueError(f"{api}: environment variable MASTER_ADDR expected, but not set (set MASTER_ADDR and "
                             "MASTER_PORT, pass init_method='tcp://host:port', or run under lucid-run after "
                             "init_process_group)")
        if dist.get_world_size() != agent.world_size:
            raise ValueError(f"{api}: world_size={agent.world_size}, but the process group has "
                             f"{dist.get_world_size()} processes")
        out = [None] * agent.world_size
        dist.all_gather_object(out, mine)
        return [tuple(e) for e in out]
    return _store_rendezvous(api, agent, init, mine)


def _store_rendezvous(api, agent, init, mine):
    import datetime

    from lucid.distributed._tcp_store import TCPStore

    if init in (None, DEFAULT_INIT_METHOD):
        if "MASTER_PORT" not in os.environ:
            raise ValueError(f"{api}: environment variable MASTER_PORT expected, but not set")
        host, port = os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"]
    elif isinstance(init, str) and init.startswith("tcp://"):
        host, _, port = init[len("tcp://"):].rpartition(":")
    else:
        raise ValueError(f"{api}: init_method must be 'env://' or 'tcp://host:port', got {init!r}")
    seconds = max(agent.default_timeout, 60.0) if agent.default_timeout > 0 else 600.0
    store = TCPStore(host, int(port), agent.world_size, is_master=agent.worker_id == 0,
                     timeout=datetime.timedelta(seconds=seconds))
    agent._store = store  # rank 0 serves it: kept alive until shutdown
    store.set(f"lucid_rpc/{agent.worker_id}", json.dumps(list(mine)))
    return [tuple(json.loads(store.get(f"lucid_rpc/{r}"))) for r in range(agent.world_size)]


def shutdown(graceful=True, timeout=0):
    """Stop this worker's agent. ``graceful``: first wait for every request this worker made to be
    answered and for every other worker to reach ``shutdown`` too (NOTE [Graceful shutdown]).

    Examples
    --------
    >>> import lucid.distributed.rpc as rpc
    >>> rpc.shutdown()                  # doctest: +SKIP
    """
    agent = _agent.current("shutdown")
    try:
        if graceful:
            agent.wait_idle()
            if agent.worker_id == 0:
                agent.barrier_arrive()
            else:
                agent.request(0, "barrier", None, 0).wait()
            agent.wait_idle()
    finally:
        agent.close(graceful)
        store = getattr(agent, "_store", None)
        if store is not None:
            del agent._store
        _agent._AGENT[0] = None
        _context().release_all()


def get_worker_info(worker_name=None):
    """The :class:`WorkerInfo` of ``worker_name`` (default: this worker).

    Examples
    --------
    >>> import lucid.distributed.rpc as rpc
    >>> rpc.get_worker_info()           # doctest: +SKIP
    WorkerInfo(id=0, name=worker0)
    """
    agent = _agent.current("get_worker_info")
    return agent.info if worker_name is None else agent.resolve(worker_name, "get_worker_info")


def get_rpc_timeout():
    """The default timeout of this worker's RPCs, in seconds (``rpc_timeout`` of the backend options)."""
    return _agent.current("get_rpc_timeout").default_timeout


def _set_rpc_timeout(rpc_timeout):
    """Change the default timeout (seconds) of the RPCs made from now on (PyTorch's private helper)."""
    _agent.current("_set_rpc_timeout").default_timeout = float(rpc_timeout)


# ---------------------------------------------------------------------- calls
def _check_call(api, to, func, args, kwargs):
    agent = _agent.current(api)
    info = agent.resolve(to, api)
    if not callable(func):
        raise TypeError(f"{api}: func must be callable, got {type(func).__name__}")
    args = () if args is None else tuple(args)
    kwargs = {} if kwargs is None else dict(kwargs)
    return agent, info, args, kwargs


def rpc_async(to, func, args=None, kwargs=None, timeout=UNSET_RPC_TIMEOUT):
    """Run ``func(*args, **kwargs)`` on worker ``to`` (a name, rank or WorkerInfo); a
    :class:`lucid.futures.Future` of its result. An exception raised there is raised by ``wait()``
    (same type, message with the remote traceback); after ``timeout`` seconds (default: the
    backend's ``rpc_timeout``; 0: never) the Future fails with RuntimeError.

    Examples
    --------
    >>> import lucid, lucid.distributed.rpc as rpc
    >>> fut = rpc.rpc_async("worker1", lucid.add, args=(lucid.ones(2), 3))   # doctest: +SKIP
    >>> fut.wait()                                                           # doctest: +SKIP
    tensor([4., 4.])
    """
    agent, info, args, kwargs = _check_call("rpc_async", to, func, args, kwargs)
    return agent.request(info.id, "call", (func, args, kwargs), timeout, _context().current())


def rpc_sync(to, func, args=None, kwargs=None, timeout=UNSET_RPC_TIMEOUT):
    """:func:`rpc_async` and wait: the result of ``func(*args, **kwargs)`` run on worker ``to``.

    Examples
    --------
    >>> import lucid, lucid.distributed.rpc as rpc
    >>> rpc.rpc_sync("worker1", lucid.add, args=(lucid.ones(2), 3))          # doctest: +SKIP
    tensor([4., 4.])
    """
    agent, info, args, kwargs = _check_call("rpc_sync", to, func, args, kwargs)
    return agent.request(info.id, "call", (func, args, kwargs), timeout, _context().current()).wait()


def remote(to, func, args=None, kwargs=None, timeout=UNSET_RPC_TIMEOUT):
    """Run ``func(*args, **kwargs)`` on worker ``to`` and keep the result there: an :class:`RRef`
    to it, returned at once. ``to_here()`` fetches the value (raising the call's exception if it
    failed); ``_get_future()`` completes when the owner has it.

    Examples
    --------
    >>> import lucid, lucid.distributed.rpc as rpc
    >>> rref = rpc.remote("worker1", lucid.add, args=(lucid.ones(2), 3))     # doctest: +SKIP
    >>> rref.to_here()                                                       # doctest: +SKIP
    tensor([4., 4.])
    """
    agent, info, args, kwargs = _check_call("remote", to, func, args, kwargs)
    rref_id = agent.new_rref_id()
    rref = owned_entry(agent, rref_id) if info.id == agent.worker_id else RRef._make(agent, info.id, rref_id, False)
    fut = agent.request(info.id, "remote", (rref_id, func, args, kwargs), timeout, _context().current())
    fut.add_done_callback(lambda f: _settle(rref._created, f))
    return rref


def _settle(target, source):
    """Complete ``target`` as ``source`` completed, unless something else already did."""
    if target.done():
        return
    try:
        if source._error is not None:
            target.set_exception(source._error)
        else:
            target.set_result(True)
    except RuntimeError:  # completed by the owner's own value meanwhile
        pass


# ---------------------------------------------------------------------- serving
def _run(func, args, kwargs):
    result = func(*args, **kwargs)
    if getattr(func, "_wrapped_async_rpc_function", None) is not None:
        return _agent.AsyncResult(_check_future(result, getattr(func, "__name__", "func")))
    return result


def _serve_call(agent, src, payload):
    func, args, kwargs = payload
    return _run(func, args, kwargs)


def _serve_remote(agent, src, payload):
    rref_id, func, args, kwargs = payload
    entry = owned_entry(agent, rref_id)
    try:
        result = _run(func, args, kwargs)
    except Exception as e:
        entry._value.set_exception(_agent.rebuild_exception(*_agent.remote_exception(agent.info, e,
                                                                                       traceback.format_exc())))
        raise
    if not isinstance(result, _agent.AsyncResult):
        entry._value.set_result(result)
        return None
    done = Future()

    def finish(f):
        if f._error is not None:
            err = f._error
            entry._value.set_exception(_agent.rebuild_exception(*_agent.remote_exception(
                agent.info, err, "".join(traceback.format_exception(err)))))
            done.set_exception(err)
        else:
            entry._value.set_result(f._value)
            done.set_result(None)

    result.future.add_done_callback(finish)
    return _agent.AsyncResult(done)


def _serve_fetch(agent, src, rref_id):
    return _agent.AsyncResult(owned_entry(agent, rref_id)._value)


def _serve_barrier(agent, src, payload):
    agent.barrier_arrive()


def _serve_grads(agent, src, payload):
    from lucid.distributed.autograd import _propagate_from_sends

    _propagate_from_sends(*payload)


def _serve_cleanup(agent, src, context_id):
    from lucid.distributed.autograd import _release_everywhere

    _release_everywhere(context_id, skip=src)


_HANDLERS = {"call": _serve_call, "remote": _serve_remote, "fetch": _serve_fetch, "barrier": _serve_barrier,
             "grads": _serve_grads, "cleanup": _serve_cleanup}
