"""``TCPStore``: a store served over TCP by one process (the master), standard library only.

NOTE [TCP store protocol]
The master runs a server thread holding a :class:`HashStore`; it answers each connection in a
thread of its own, so a blocking ``get`` of one client never holds up another. Every message
is a 4-byte big-endian length and a JSON document; bytes travel as ``{"b": base64}`` (no
pickle: nothing a peer sends is executed). A request is ``{"op", "args", "timeout"}`` with
an operation of NOTE [Store semantics]; the server runs it with the client's timeout and
answers ``{"ok": result}`` or ``{"err": [kind, message]}``, which the client raises as the same
kind of error. With ``world_size`` and ``wait_for_workers`` every store counts itself on the
server and the master waits until ``world_size`` stores have, as PyTorch's.

NOTE [TCP store and MPI start-up]
MPI's start-up (mpi4py's import, in ``init_process_group``) blocks in C holding Python's
interpreter lock until every rank has started MPI, so the master's server threads stop
meanwhile: a client still waiting for an answer then waits forever. The master's constructor
with ``wait_for_workers=True`` (the default) returns only when every client has been counted,
and a client's count is answered before it becomes visible, so after it no client is waiting
on the server. Make the stores before ``init_process_group`` that way; once MPI runs, its
blocking calls let the server threads run.
"""
from __future__ import annotations

import base64
import json
import socket
import struct
import threading
import time

from .errors import DistNetworkError, DistStoreError, QueueEmptyError
from .store import _DEFAULT_TIMEOUT, _OPS, HashStore, Store, _seconds

__all__ = ["TCPStore"]

_ERRORS = {"DistStoreError": DistStoreError, "QueueEmptyError": QueueEmptyError, "ValueError": ValueError,
           "TypeError": TypeError}
_ARRIVED = "__arrived"  # the server's count of stores that connected (not a key)


def _encode(obj):
    if isinstance(obj, bytes):
        return {"b": base64.b64encode(obj).decode()}
    if isinstance(obj, (list, tuple)):
        return [_encode(o) for o in obj]
    return obj


def _decode(obj):
    if isinstance(obj, dict):
        return base64.b64decode(obj["b"])
    if isinstance(obj, list):
        return [_decode(o) for o in obj]
    return obj


def _send(sock, doc):
    raw = json.dumps(doc).encode()
    sock.sendall(struct.pack(">I", len(raw)) + raw)


def _recv_exact(sock, n):
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(sock):
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    raw = _recv_exact(sock, struct.unpack(">I", head)[0])
    return None if raw is None else json.loads(raw)


class _Server:
    """The master's side (NOTE [TCP store protocol])."""

    def __init__(self, host, port):
        self.store = HashStore()
        self.arrived = 0
        self.sock = socket.create_server((host, port), reuse_port=False)
        self.port = self.sock.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, name="lucid-tcpstore", daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            while True:
                try:
                    req = _recv(conn)
                except (OSError, ValueError):
                    return
                if req is None:
                    return
                if req.get("op") == _ARRIVED:
                    self._arrived(conn)
                    continue
                try:
                    reply = {"ok": _encode(self._answer(req))}
                except Exception as e:  # noqa: BLE001  (sent back to the client, raised there)
                    kind = type(e).__name__ if type(e).__name__ in _ERRORS else "DistStoreError"
                    reply = {"err": [kind, str(e)]}
                try:
                    _send(conn, reply)
                except OSError:
                    return

    def _arrived(self, conn):
        """Count a store in; its answer is sent before the count shows (NOTE [TCP store and MPI start-up])."""
        with self.store._cond:
            try:
                _send(conn, {"ok": self.arrived + 1})
            except OSError:
                return
            self.arrived += 1
            self.store._cond.notify_all()

    def _answer(self, req):
        op, args, timeout = req["op"], _decode(req["args"]), req["timeout"]
        if op not in _OPS:
            raise DistStoreError(f"TCPStore: unknown operation {op!r}")
        return self.store._transact(op, tuple(args), timeout)

    def wait_for(self, world_size, timeout):
        with self.store._cond:
            if not self.store._cond.wait_for(lambda: self.arrived >= world_size, timeout):
                raise DistStoreError(f"TCPStore: timed out after {timeout:g} s waiting for clients: "
                                     f"{self.arrived}/{world_size} clients joined")

    def close(self):
        self.closed = True
        self.sock.close()


class TCPStore(Store):
    """A store served by the master process over TCP; every process (the master too) is a
    client (NOTE [TCP store protocol]).

    Parameters
    ----------
    host_name : str
        The master's address (the clients connect to it; the master listens on it).
    port : int
        The master's port; 0 on the master picks a free one (read it back from ``port``).
    world_size : int, optional
        The number of stores, the master included; with ``wait_for_workers`` the master's
        constructor returns once all have connected.
    is_master : bool
    timeout : datetime.timedelta
        The limit of connecting and of every blocking operation (default 300 s).
    wait_for_workers : bool
    multi_tenant, master_listen_fd, use_libuv
        Accepted for PyTorch's signature (one server per store; no inherited socket).

    Raises
    ------
    DistNetworkError
        A client cannot connect within ``timeout``.

    Examples
    --------
    >>> import datetime, lucid.distributed as dist
    >>> master = dist.TCPStore("127.0.0.1", 0, world_size=1, is_master=True)
    >>> client = dist.TCPStore("127.0.0.1", master.port, timeout=datetime.timedelta(seconds=10))
    >>> client.set("rank0", "ready"); master.get("rank0")
    b'ready'
    """

    def __init__(self, host_name, port, world_size=None, is_master=False, timeout=_DEFAULT_TIMEOUT,
                 wait_for_workers=True, multi_tenant=False, master_listen_fd=None, use_libuv=True):
        super().__init__(timeout)
        if master_listen_fd is not None:
            raise NotImplementedError("TCPStore: master_listen_fd is not supported; pass host_name and port")
        if not isinstance(port, int) or not 0 <= port < 65536:
            raise ValueError(f"TCPStore: port must be an int in [0, 65535], got {port!r}")
        self.host, self.world_size = str(host_name), world_size
        self._server = _Server(self.host, port) if is_master else None
        self.port = self._server.port if is_master else port
        self._lock = threading.Lock()
        seconds = self._timeout.total_seconds()
        self._sock = self._connect(seconds)
        if world_size is not None:
            self._call(_ARRIVED, (), seconds)
            if is_master and wait_for_workers:
                self._server.wait_for(world_size, seconds)

    @property
    def libuvBackend(self):  # noqa: N802  (PyTorch's name)
        return False

    def _connect(self, seconds):
        deadline, delay = time.monotonic() + seconds, 0.01
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=max(0.1, seconds))
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(None)
                return sock
            except OSError as e:
                if time.monotonic() + delay >= deadline:
                    raise DistNetworkError(f"TCPStore: could not connect to ({self.host}, {self.port}) within "
                                           f"{seconds:g} s: {e}") from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _call(self, op, args, timeout):
        with self._lock:
            try:
                _send(self._sock, {"op": op, "args": _encode(list(args)), "timeout": timeout})
                reply = _recv(self._sock)
            except OSError as e:
                raise DistStoreError(f"TCPStore.{op}: the connection to the server broke: {e}") from None
        if reply is None:
            raise DistStoreError(f"TCPStore.{op}: the server at ({self.host}, {self.port}) closed the connection")
        if "err" in reply:
            kind, message = reply["err"]
            raise _ERRORS.get(kind, DistStoreError)(message.replace("HashStore.", "TCPStore.", 1))
        return _decode(reply["ok"])

    def _transact(self, name, args, timeout):
        return self._call(name, args, timeout)

    def set_timeout(self, timeout):
        self._timeout = type(self._timeout)(seconds=_seconds(timeout, "TCPStore.set_timeout"))

    def __del__(self):
        try:
            self._sock.close()
            if self._server is not None:
                self._server.close()
        except Exception:  # noqa: BLE001  (interpreter shutdown)
            pass
