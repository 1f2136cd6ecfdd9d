"""Key-value stores (PyTorch's ``Store``, ``HashStore``, ``FileStore``, ``PrefixStore``; the
``TCPStore`` is in ``_tcp_store.py``): how processes exchange small values outside the
collectives, e.g. to agree on a port or count who has arrived.

NOTE [Store semantics]
Every store keeps one state: a map of keys (str) to values (bytes) and a map of queues.
The operations are written once, in ``_OPS``, as functions of that state; a store only says
how to run one atomically (``_transact``): under a condition variable in memory
(``HashStore``), under an exclusive ``flock`` of the file, re-read and re-written whole
(``FileStore``), or on the server that holds a ``HashStore`` (``TCPStore``). A blocking
operation (``get``, ``wait``, ``multi_get``, a blocking ``queue_pop``) waits, atomically
with its action, until its keys exist, at most the store's ``timeout`` (or ``wait``'s
own), then raises ``DistStoreError``. Values are bytes; a str value is stored as UTF-8.
"""
from __future__ import annotations

import base64
import datetime
import json
import os
import threading
import time

from .errors import DistStoreError, QueueEmptyError

__all__ = ["Store", "HashStore", "FileStore", "PrefixStore"]

_DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)


class _State:
    __slots__ = ("kv", "queues")

    def __init__(self, kv=None, queues=None):
        self.kv, self.queues = kv if kv is not None else {}, queues if queues is not None else {}


def _add(st, key, amount):
    old = st.kv.get(key, b"0")
    try:
        value = int(old) + amount
    except ValueError:
        raise ValueError(f"Store.add: the value of key {key!r} is not an integer: {old!r}") from None
    st.kv[key] = str(value).encode()
    return value


def _compare_set(st, key, expected, desired):
    if key not in st.kv:
        if expected == b"":
            st.kv[key] = desired
            return desired
        return expected
    if st.kv[key] == expected:
        st.kv[key] = desired
    return st.kv[key]


def _queue_pop(st, key):
    q = st.queues.get(key)
    value = q.pop(0)
    if not q:
        del st.queues[key]
    return value


def _has(keys):
    return lambda st: all(k in st.kv for k in keys)


# name -> (action(state, *args), changes state, what must hold first(*args) or None). See NOTE [Store semantics].
_OPS = {
    "set": (lambda st, k, v: st.kv.__setitem__(k, v), True, None),
    "get": (lambda st, k: st.kv[k], False, lambda k: _has([k])),
    "add": (_add, True, None),
    "compare_set": (_compare_set, True, None),
    "append": (lambda st, k, v: st.kv.__setitem__(k, st.kv.get(k, b"") + v), True, None),
    "delete_key": (lambda st, k: st.kv.pop(k, None) is not None, True, None),
    "num_keys": (lambda st: len(st.kv), False, None),
    "list_keys": (lambda st: list(st.kv), False, None),
    "check": (lambda st, ks: all(k in st.kv for k in ks), False, None),
    "wait": (lambda st, ks: None, False, lambda ks: _has(ks)),
    "multi_get": (lambda st, ks: [st.kv[k] for k in ks], False, lambda ks: _has(ks)),
    "multi_set": (lambda st, ks, vs: st.kv.update(zip(ks, vs)), True, None),
    "queue_push": (lambda st, k, v: st.queues.setdefault(k, []).append(v), True, None),
    "queue_pop": (_queue_pop, True, lambda k: (lambda st: bool(st.queues.get(k)))),
    "queue_len": (lambda st, k: len(st.queues.get(k, ())), False, None),
}


def _seconds(timeout, api):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        return float(timeout)
    raise TypeError(f"{api}: timeout must be a datetime.timedelta, got {type(timeout).__name__}")


def _key(key, api):
    if not isinstance(key, str):
        raise TypeError(f"{api}: keys are str, got {type(key).__name__}")
    return key


def _value(value, api):
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (list, tuple)) and all(isinstance(b, int) for b in value):
        return bytes(value)
    raise TypeError(f"{api}: values are str or bytes, got {type(value).__name__}")


class Store:
    """A key-value store shared by processes (NOTE [Store semantics]).

    Subclasses run the operations; this class checks arguments and names the errors.
    ``timeout`` bounds every blocking operation (default 300 s).

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> store = dist.HashStore()
    >>> store.set("first", "hello"); store.add("count", 2); store.add("count", 3)
    2
    5
    >>> store.get("first"), store.compare_set("first", "hello", "bye"), store.num_keys()
    (b'hello', b'bye', 2)
    """

    def __init__(self, timeout=_DEFAULT_TIMEOUT):
        self._timeout = datetime.timedelta(seconds=_seconds(timeout, type(self).__name__))

    # -- what a subclass provides
    def _transact(self, name, args, timeout):
        """Run ``_OPS[name]`` atomically on the state, waiting first for what it needs."""
        raise NotImplementedError(f"{type(self).__name__}: this store does not implement {name}")

    def _run(self, name, *args, timeout=None):
        seconds = self.timeout.total_seconds() if timeout is None else timeout
        return self._transact(name, args, seconds)

    def _timed_out(self, name, seconds, what):
        return DistStoreError(f"{type(self).__name__}.{name}: timed out after {seconds:g} s waiting for {what}")

    # -- the public API
    @property
    def timeout(self):
        """The limit of blocking operations (a ``datetime.timedelta``)."""
        return self._timeout

    def set_timeout(self, timeout):
        self._timeout = datetime.timedelta(seconds=_seconds(timeout, f"{type(self).__name__}.set_timeout"))

    def set(self, key, value):
        """Store ``value`` (str or bytes) under ``key``."""
        api = f"{type(self).__name__}.set"
        self._run("set", _key(key, api), _value(value, api))

    def get(self, key):
        """The value of ``key`` (bytes), waiting for it up to the timeout."""
        return self._run("get", _key(key, f"{type(self).__name__}.get"))

    def add(self, key, amount):
        """Add the integer ``amount`` to the integer stored under ``key`` (0 if absent); returns the sum."""
        if not isinstance(amount, int) or isinstance(amount, bool):
            raise TypeError(f"{type(self).__name__}.add: amount must be an int, got {type(amount).__name__}")
        return self._run("add", _key(key, f"{type(self).__name__}.add"), amount)

    def compare_set(self, key, expected_value, desired_value):
        """Set ``key`` to ``desired_value`` if it holds ``expected_value`` (or is absent and
        ``expected_value`` is empty); returns the value now stored (``expected_value`` when the
        key is absent and it is not empty)."""
        api = f"{type(self).__name__}.compare_set"
        return self._run("compare_set", _key(key, api), _value(expected_value, api), _value(desired_value, api))

    def append(self, key, value):
        """Append ``value`` to the bytes of ``key`` (creating it)."""
        api = f"{type(self).__name__}.append"
        self._run("append", _key(key, api), _value(value, api))

    def delete_key(self, key):
        """Delete ``key``; returns whether it existed."""
        return self._run("delete_key", _key(key, f"{type(self).__name__}.delete_key"))

    def num_keys(self):
        """The number of keys (queues not counted)."""
        return self._run("num_keys")

    def list_keys(self):
        """Every key (queues not listed)."""
        return self._run("list_keys")

    def check(self, keys):
        """Whether every key of ``keys`` exists (no waiting)."""
        return self._run("check", self._keys(keys, "check"))

    def wait(self, keys, timeout=None):
        """Block until every key of ``keys`` exists, at most ``timeout`` (default: the store's)."""
        api = f"{type(self).__name__}.wait"
        seconds = None if timeout is None else _seconds(timeout, api)
        self._run("wait", self._keys(keys, "wait"), timeout=seconds)

    def multi_get(self, keys):
        """The values of ``keys`` (waiting for all of them)."""
        return self._run("multi_get", self._keys(keys, "multi_get"))

    def multi_set(self, keys, values):
        """Set every key of ``keys`` to the value at the same position of ``values``, at once."""
        api = f"{type(self).__name__}.multi_set"
        keys, values = self._keys(keys, "multi_set"), list(values)
        if len(keys) != len(values):
            raise ValueError(f"{api}: {len(keys)} keys but {len(values)} values")
        self._run("multi_set", keys, [_value(v, api) for v in values])

    def queue_push(self, key, value):
        """Push ``value`` at the end of the queue ``key``."""
        api = f"{type(self).__name__}.queue_push"
        self._run("queue_push", _key(key, api), _value(value, api))

    def queue_pop(self, key, block=True):
        """Pop the first value of the queue ``key``; waits for one, or raises ``QueueEmptyError``
        at once with ``block=False``."""
        api = f"{type(self).__name__}.queue_pop"
        key = _key(key, api)
        if block:
            return self._run("queue_pop", key)
        try:
            return self._run("queue_pop", key, timeout=0.0)
        except QueueEmptyError:
            raise
        except DistStoreError:
            raise QueueEmptyError(f"{api}: queue {key!r} is empty") from None

    def queue_len(self, key):
        """The number of values in the queue ``key``."""
        return self._run("queue_len", _key(key, f"{type(self).__name__}.queue_len"))

    def has_extended_api(self):
        """Whether the compare/multi/queue operations are available (True for Lucid's stores)."""
        return True

    def _keys(self, keys, name):
        if isinstance(keys, str):
            raise TypeError(f"{type(self).__name__}.{name}: expected a list of keys, got a str")
        return [_key(k, f"{type(self).__name__}.{name}") for k in keys]


class HashStore(Store):
    """A store in this process's memory, shared by its threads.

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> s = dist.HashStore()
    >>> s.multi_set(["a", "b"], ["1", b"2"]); s.multi_get(["a", "b"])
    [b'1', b'2']
    """

    def __init__(self):
        super().__init__()
        self._state, self._cond = _State(), threading.Condition()

    def _transact(self, name, args, timeout):
        action, changes, needs = _OPS[name]
        with self._cond:
            if needs is not None and not self._cond.wait_for(lambda: needs(*args)(self._state), timeout):
                raise self._timed_out(name, timeout, f"keys {args[0]!r}")
            out = action(self._state, *args)
            if changes:
                self._cond.notify_all()
        return out


class FileStore(Store):
    """A store in a file that every process opens by its path (a shared file system).

    Each operation takes an exclusive ``flock`` of the file, reads it, and writes it back if it
    changed (NOTE [Store semantics]); waiting operations poll it. The file is not deleted when
    the last user finishes (PyTorch's reference counting is not built).

    Parameters
    ----------
    file_name : str
    world_size : int
        Accepted for PyTorch's signature.

    Examples
    --------
    >>> import os, tempfile, lucid.distributed as dist
    >>> path = os.path.join(tempfile.mkdtemp(), "store")
    >>> a, b = dist.FileStore(path, 2), dist.FileStore(path, 2)
    >>> a.set("port", "29500"); b.get("port")
    b'29500'
    """

    _POLL = 0.005

    def __init__(self, file_name, world_size=-1):
        super().__init__()
        try:
            import fcntl
        except ImportError as e:  # pragma: no cover  (Windows)
            raise RuntimeError("FileStore: needs fcntl file locks (POSIX)") from e
        self._fcntl = fcntl
        self.path = os.fspath(file_name)
        self.world_size = world_size
        open(self.path, "ab").close()

    def _load(self, f):
        f.seek(0)
        raw = f.read()
        if not raw:
            return _State()
        doc = json.loads(raw)
        dec = base64.b64decode
        return _State({k: dec(v) for k, v in doc["kv"].items()},
                      {k: [dec(v) for v in q] for k, q in doc["queues"].items()})

    def _dump(self, f, st):
        enc = lambda b: base64.b64encode(b).decode()  # noqa: E731
        f.seek(0)
        f.truncate()
        f.write(json.dumps({"kv": {k: enc(v) for k, v in st.kv.items()},
                            "queues": {k: [enc(v) for v in q] for k, q in st.queues.items()}}).encode())
        f.flush()

    def _transact(self, name, args, timeout):
        action, changes, needs = _OPS[name]
        deadline = time.monotonic() + timeout
        while True:
            with open(self.path, "r+b") as f:
                self._fcntl.flock(f, self._fcntl.LOCK_EX)
                try:
                    st = self._load(f)
                    if needs is None or needs(*args)(st):
                        out = action(st, *args)
                        if changes:
                            self._dump(f, st)
                        return out
                finally:
                    self._fcntl.flock(f, self._fcntl.LOCK_UN)
            if time.monotonic() >= deadline:
                raise self._timed_out(name, timeout, f"keys {args[0]!r}")
            time.sleep(self._POLL)


class PrefixStore(Store):
    """``store`` with every key prefixed by ``prefix + "/"`` (for example one namespace per group).

    Examples
    --------
    >>> import lucid.distributed as dist
    >>> base = dist.HashStore()
    >>> dist.PrefixStore("job1", base).set("x", "1"); base.get("job1/x")
    b'1'
    """

    def __init__(self, prefix, store):
        if not isinstance(store, Store):
            raise TypeError(f"PrefixStore: store must be a Store, got {type(store).__name__}")
        super().__init__(store.timeout)
        self.prefix, self._store = str(prefix), store

    @property
    def underlying_store(self):
        return self._store

    @property
    def timeout(self):
        return self._store.timeout

    def set_timeout(self, timeout):
        self._store.set_timeout(timeout)

    def _transact(self, name, args, timeout):
        p = self.prefix + "/"
        if name in ("num_keys",):
            return self._store._transact(name, args, timeout)
        if name == "list_keys":
            return [k[len(p):] for k in self._store._transact(name, args, timeout) if k.startswith(p)]
        key = args[0]
        key = [p + k for k in key] if isinstance(key, list) else p + key
        return self._store._transact(name, (key, *args[1:]), timeout)
