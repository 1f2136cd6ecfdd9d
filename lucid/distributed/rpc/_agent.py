"""The RPC agent: one listening TCP socket per worker, requests and responses, timeouts, shutdown.

NOTE [RPC transport]
Each worker listens on one TCP socket; an accept thread gives every incoming connection a
reader thread, and every request read runs in a thread of its own (a request may block: a
nested RPC, a barrier, an RRef value not made yet), which writes its response back on the
connection it came from. For its own requests a worker opens one connection per peer
(itself included) on first use, read by a thread that completes the waiting futures. A frame
is two 8-byte big-endian lengths, a small pickled head (the message kind, its id, the
autograd context info) and the payload, pickled apart by ``_serialize`` (NOTE [RPC pickling])
so the tensors it carries are known before the head is written; the payload is written and
read without extra copies.

Timeouts: each request has a deadline (none for timeout 0); one watcher thread fails the
futures whose deadline passed with PyTorch's RuntimeError; a late response is then dropped.
A lost connection fails every request waiting on it.

NOTE [Graceful shutdown]
``shutdown(graceful=True)`` waits until this worker has no request waiting for a response,
then meets every worker in a barrier served by worker 0: when the barrier opens, no worker
has work left for any other (a request still being served is some worker's pending request,
and that worker has not arrived). The server then waits for its request threads to finish
writing (the barrier's own answers) and closes every socket.
"""
from __future__ import annotations

import heapq
import itertools
import pickle
import socket
import struct
import threading
import time
import traceback

from lucid.futures import Future

from . import _serialize

_AGENT = [None]
_LENS = struct.Struct(">QQ")


class WorkerInfo:
    """A worker's ``name`` and ``id`` (its rank), as :func:`get_worker_info` returns.

    Examples
    --------
    >>> from lucid.distributed.rpc import WorkerInfo
    >>> WorkerInfo("worker1", 1)
    WorkerInfo(id=1, name=worker1)
    """

    __slots__ = ("name", "id")

    def __init__(self, name, id):  # noqa: A002  (PyTorch's field name)
        self.name, self.id = name, id

    def __eq__(self, other):
        return isinstance(other, WorkerInfo) and (self.name, self.id) == (other.name, other.id)

    def __hash__(self):
        return hash((self.name, self.id))

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, name={self.name})"

    def __reduce__(self):
        return (WorkerInfo, (self.name, self.id))


def current(api):
    """The running agent, or PyTorch's RuntimeError when ``init_rpc`` has not run."""
    agent = _AGENT[0]
    if agent is None:
        raise RuntimeError(f"{api}: RPC has not been initialized. Call lucid.distributed.rpc.init_rpc first.")
    return agent


class AsyncResult:
    """A handler's answer that is a Future still running (``@async_execution``)."""

    __slots__ = ("future",)

    def __init__(self, future):
        self.future = future


def _send_frame(sock, lock, head, data):
    """One message: the lengths, the small pickled ``head`` tuple, then the payload bytes (not copied)."""
    head = pickle.dumps(head, protocol=pickle.HIGHEST_PROTOCOL)
    with lock:
        sock.sendall(_LENS.pack(len(head), len(data)) + head)
        sock.sendall(data)


def _recv_exact(sock, n):
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:], min(n - got, 1 << 22))
        if not k:
            return None
        got += k
    return buf


def _recv_frame(sock):
    """``(head, payload)`` of the next message, or None when the peer closed the connection."""
    lens = _recv_exact(sock, _LENS.size)
    if lens is None:
        return None
    n_head, n_data = _LENS.unpack(lens)
    head = _recv_exact(sock, n_head)
    data = _recv_exact(sock, n_data) if head is not None else None
    if data is None:
        return None
    return pickle.loads(head), data


def _timeout_error(seconds):
    return RuntimeError(f"RPC ran for more than set timeout ({int(round(seconds * 1000))} ms) and will now be "
                        "marked with an error")


def remote_exception(worker, exc, tb_text):
    """``(type, message)`` of an exception raised while serving a request: the caller raises the same
    type with PyTorch's message (the worker, the exception and its traceback)."""
    msg = getattr(exc, "_rpc_message", None)  # raised by a nested RPC: keep where it first happened
    if msg is None:
        msg = f"On {worker}:\n{exc!r}\n{tb_text}"
    cls = type(exc)
    try:
        pickle.loads(pickle.dumps(cls))
    except Exception:  # noqa: BLE001  (a class the caller can't load: RuntimeError instead)
        cls = None
    return cls, msg


def rebuild_exception(cls, msg):
    """The caller's copy of a remote exception (:func:`remote_exception`)."""
    err = None
    if cls is not None:
        try:
            err = cls(msg)
        except Exception:  # noqa: BLE001  (an exception class with another signature)
            err = None
    if err is None:
        err = RuntimeError(msg)
    try:
        err._rpc_message = msg
    except AttributeError:
        pass
    return err


class _Pending:
    __slots__ = ("future", "dest", "seconds")

    def __init__(self, future, dest, seconds):
        self.future, self.dest, self.seconds = future, dest, seconds


class Agent:
    """This worker's end of the RPC network (NOTE [RPC transport])."""

    def __init__(self, name, rank, world_size, options, handlers):
        self.name, self.worker_id, self.world_size = name, rank, world_size
        self.options, self.handlers = options, handlers
        self.default_timeout = options.rpc_timeout
        self._server = socket.create_server((options._bind_host, 0), backlog=128)
        self.host, self.port = options._bind_host, self._server.getsockname()[1]
        self.workers, self.by_name, self.addresses = {}, {}, {}
        self._lock = threading.Condition()
        self._pending, self._ids = {}, itertools.count()
        self._out = {}  # dest id -> (socket, write lock)
        self._incoming = []
        self._active = 0  # request threads running
        self._deadlines = []
        self._closed = False
        self._barrier = [0, threading.Condition()]
        self.owned = {}  # rref id -> owner RRef (see rref.py)
        self._rref_ids = itertools.count()
        self._threads = [threading.Thread(target=self._accept, name="lucid-rpc-accept", daemon=True),
                         threading.Thread(target=self._watch_timeouts, name="lucid-rpc-timeouts", daemon=True)]
        for t in self._threads:
            t.start()

    # ------------------------------------------------------------------ workers
    def set_workers(self, entries):
        """``entries[rank] = (name, host, port)`` from the rendezvous."""
        for rank, (name, host, port) in enumerate(entries):
            if name in self.by_name:
                raise RuntimeError(f"init_rpc: worker name {name!r} is used by ranks {self.by_name[name].id} and "
                                   f"{rank}; names must be unique")
            info = WorkerInfo(name, rank)
            self.workers[rank], self.by_name[name] = info, info
            self.addresses[rank] = (host, port)

    @property
    def info(self):
        return self.workers[self.worker_id]

    def resolve(self, to, api):
        """The WorkerInfo of ``to`` (a name, a rank or a WorkerInfo); PyTorch's RuntimeError when unknown."""
        if isinstance(to, WorkerInfo):
            known = self.workers.get(to.id)
            if known != to:
                raise RuntimeError(f"{api}: name:{self.name},rank:{self.worker_id} could not find destination {to}")
            return known
        if isinstance(to, str):
            info = self.by_name.get(to)
            if info is None:
                raise RuntimeError(f"{api}: name:{self.name},rank:{self.worker_id} could not find destination "
                                   f"name {to}")
            return info
        if isinstance(to, int) and not isinstance(to, bool):
            info = self.workers.get(to)
            if info is None:
                raise RuntimeError(f"{api}: name:{self.name},rank:{self.worker_id} could not find destination "
                                   f"id {to} (world_size={self.world_size})")
            return info
        raise TypeError(f"{api}: 'to' must be a worker name (str), a rank (int) or a WorkerInfo, "
                        f"got {type(to).__name__}")

    def new_rref_id(self):
        return (self.worker_id, next(self._rref_ids))

    # ------------------------------------------------------------------ requests
    def _connection(self, dest):
        with self._lock:
            conn = self._out.get(dest)
            if conn is not None:
                return conn
            if self._closed:
                raise RuntimeError("rpc: the RPC agent has been shut down")
            sock = socket.create_connection(self.addresses[dest], timeout=30)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.settimeout(None)
            conn = self._out[dest] = (sock, threading.Lock())
        threading.Thread(target=self._read_responses, args=(dest, sock), name=f"lucid-rpc-from-{dest}",
                         daemon=True).start()
        return conn

    def request(self, dest, kind, payload, timeout, context=None):
        """Send ``payload`` to worker ``dest`` for handler ``kind``; a Future of the answer.

        ``context``: the distributed autograd context the request runs in (NOTE [Send and recv]).
        """
        from .rref import RRef

        seconds = self.default_timeout if timeout is None or timeout < 0 else float(timeout)
        data, table = _serialize.dumps(payload, RRef)
        autograd_info = self._record_send(context, dest, table)
        fut = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("rpc: the RPC agent has been shut down")
            msg_id = next(self._ids)
            self._pending[msg_id] = _Pending(fut, dest, seconds)
            if seconds > 0:
                heapq.heappush(self._deadlines, (time.monotonic() + seconds, msg_id))
                self._lock.notify_all()
        try:
            sock, lock = self._connection(dest)
            _send_frame(sock, lock, ("req", msg_id, self.worker_id, kind, autograd_info), data)
        except OSError as e:
            self._complete(msg_id, error=RuntimeError(f"rpc: could not send to {self.workers[dest]}: {e}"))
        return fut

    @staticmethod
    def _record_send(context, dest, table):
        if context is None:
            return None
        sent = table.requiring_grad()
        return (context.context_id, context.record_send(dest, sent) if sent else None)

    def _complete(self, msg_id, value=None, error=None):
        with self._lock:
            pending = self._pending.pop(msg_id, None)
            self._lock.notify_all()
        if pending is None:  # timed out already: the late answer is dropped
            return
        if error is not None:
            pending.future.set_exception(error)
        else:
            pending.future.set_result(value)

    def _read_responses(self, dest, sock):
        while True:
            try:
                frame = _recv_frame(sock)
            except OSError:
                frame = None
            if frame is None:
                break
            (_, msg_id, ok, autograd_info), data = frame
            try:
                value = self.decode(data, dest, autograd_info)
            except Exception as e:  # noqa: BLE001  (the caller gets it)
                self._complete(msg_id, error=RuntimeError(f"rpc: could not read the answer of {self.workers[dest]}: "
                                                          f"{type(e).__name__}: {e}"))
                continue
            if ok:
                self._complete(msg_id, value)
            else:
                self._complete(msg_id, error=rebuild_exception(*value))
        with self._lock:
            lost = [k for k, p in self._pending.items() if p.dest == dest]
        for k in lost:
            self._complete(k, error=RuntimeError(f"rpc: the connection to {self.workers[dest]} was closed while a "
                                                 "request was waiting for its answer"))

    def _watch_timeouts(self):
        with self._lock:
            while not self._closed:
                now = time.monotonic()
                while self._deadlines and self._deadlines[0][0] <= now:
                    _, msg_id = heapq.heappop(self._deadlines)
                    pending = self._pending.get(msg_id)
                    if pending is not None:
                        self._lock.release()
                        try:
                            self._complete(msg_id, error=_timeout_error(pending.seconds))
                        finally:
                            self._lock.acquire()
                wait = self._deadlines[0][0] - now if self._deadlines else None
                self._lock.wait(wait)

    # ------------------------------------------------------------------ serving
    def decode(self, data, src, autograd_info):
        """The payload of a message from worker ``src``; its grad-requiring tensors become recvs of the
        context it came with (NOTE [Send and recv])."""
        from lucid.distributed.autograd import _context

        from .rref import _rref_from_wire

        ctx = None
        if autograd_info is not None and autograd_info[1] is not None:
            ctx = _context.get_or_create(autograd_info[0])
        position = itertools.count()

        def on_tensor(i, array, requires_grad, is_param):
            t = _serialize.make_tensor(array, requires_grad, is_param)
            if ctx is not None and requires_grad:
                ctx.record_recv(src, autograd_info[1], next(position), t)
            return t

        return _serialize.loads(data, on_tensor, lambda owner, rid, tn: _rref_from_wire(self, owner, rid))

    def _accept(self):
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._incoming.append(conn)
            threading.Thread(target=self._read_requests, args=(conn,), name="lucid-rpc-serve", daemon=True).start()

    def _read_requests(self, conn):
        lock = threading.Lock()
        while True:
            try:
                frame = _recv_frame(conn)
            except OSError:
                return
            if frame is None:
                return
            with self._lock:
                self._active += 1
            threading.Thread(target=self._serve, args=(conn, lock, frame), name="lucid-rpc-request",
                             daemon=True).start()

    def _serve(self, conn, lock, frame):
        try:
            (_, msg_id, src, kind, autograd_info), data = frame
            context_id = None if autograd_info is None else autograd_info[0]

            def reply(ok, value):
                self._reply(conn, lock, msg_id, src, ok, value, context_id)

            try:
                from lucid.distributed.autograd import _context

                if context_id is not None:
                    _context.get_or_create(context_id).known_workers.add(src)
                    with _context.running_in(context_id):
                        result = self.handlers[kind](self, src, self.decode(data, src, autograd_info))
                else:
                    result = self.handlers[kind](self, src, self.decode(data, src, autograd_info))
            except Exception as e:  # noqa: BLE001  (sent back to the caller)
                reply(False, remote_exception(self.info, e, traceback.format_exc()))
                return
            if isinstance(result, AsyncResult):
                result.future.add_done_callback(lambda f: self._reply_future(f, reply))
            else:
                reply(True, result)
        finally:
            with self._lock:
                self._active -= 1
                self._lock.notify_all()

    def _reply_future(self, fut, reply):
        try:
            value = fut.value()
        except Exception as e:  # noqa: BLE001
            reply(False, remote_exception(self.info, e, "".join(traceback.format_exception(e))))
            return
        reply(True, value)

    def _reply(self, conn, lock, msg_id, dest, ok, value, context_id):
        from lucid.distributed.autograd import _context

        from .rref import RRef

        try:
            data, table = _serialize.dumps(value, RRef)
        except Exception as e:  # noqa: BLE001  (an answer that can't be pickled is an error for the caller)
            ok, (data, table) = False, _serialize.dumps(remote_exception(self.info, e, traceback.format_exc()), RRef)
        ctx = None if context_id is None else _context.get_or_create(context_id)
        try:
            _send_frame(conn, lock, ("resp", msg_id, ok, self._record_send(ctx, dest, table)), data)
        except OSError:
            pass  # the caller is gone: its futures fail on its side

    # ------------------------------------------------------------------ shutdown
    def wait_idle(self):
        """Block until no request of this worker waits for an answer."""
        with self._lock:
            while self._pending:
                self._lock.wait(0.1)

    def barrier_arrive(self):
        """Worker 0's side of the shutdown barrier: return once every worker has arrived."""
        cond = self._barrier[1]
        with cond:
            self._barrier[0] += 1
            cond.notify_all()
            while self._barrier[0] < self.world_size:
                cond.wait()

    def close(self, graceful):
        with self._lock:
            if graceful:
                deadline = time.monotonic() + 30
                while self._active and time.monotonic() < deadline:
                    self._lock.wait(0.05)
            self._closed = True
            socks = [s for s, _ in self._out.values()] + self._incoming
            pending = list(self._pending)
            self._lock.notify_all()
        try:
            self._server.close()
        except OSError:
            pass
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
        for k in pending:
            self._complete(k, error=RuntimeError("rpc: RPC was shut down before this request was answered"))
