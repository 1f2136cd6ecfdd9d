"""``rendezvous`` and ``register_rendezvous_handler`` (PyTorch's ``torch.distributed.rendezvous``):
turn an ``init_method`` URL into ``(store, rank, world_size)``.

Built-in schemes: ``env://`` (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``; rank 0
hosts a :class:`TCPStore`), ``tcp://host:port?rank=r&world_size=n`` and
``file:///path?rank=r&world_size=n`` (a :class:`FileStore`). Lucid's process groups still
start from MPI; a rendezvous gives a script its own store.

Examples
--------
>>> import lucid.distributed as dist
>>> store, rank, world = next(dist.rendezvous("tcp://127.0.0.1:0?rank=0&world_size=1"))
>>> rank, world, store.port > 0
(0, 1, True)
"""
from __future__ import annotations

import datetime
import os
from urllib.parse import parse_qs, urlparse

__all__ = ["rendezvous", "register_rendezvous_handler"]

_HANDLERS = {}
_DEFAULT_TIMEOUT = datetime.timedelta(seconds=300)


def register_rendezvous_handler(scheme, handler):
    """Make ``rendezvous(url)`` call ``handler(url, **kwargs)`` for URLs of ``scheme``; the
    handler yields ``(store, rank, world_size)``. A scheme can be registered once."""
    if scheme in _HANDLERS:
        raise RuntimeError(f"Rendezvous handler for {scheme}:// already registered")
    _HANDLERS[scheme] = handler


def rendezvous(url, rank=-1, world_size=-1, **kwargs):
    """An iterator of ``(store, rank, world_size)`` for ``url`` (see the module docstring).

    ``rank``/``world_size`` given here are added to the URL's query, as PyTorch does.
    """
    if not isinstance(url, str):
        raise RuntimeError(f"`url` must be a string. {type(url)}: {url}")
    if not isinstance(rank, int) or not isinstance(world_size, int):
        raise RuntimeError(f"`rank` and `world_size` must be int: got {rank!r}, {world_size!r}")
    result = urlparse(url)
    query = {k: v[-1] for k, v in parse_qs(result.query).items()}
    if rank != -1 or world_size != -1:
        if "rank" in query or "world_size" in query:
            raise ValueError(f"The url: {url} has node-specific arguments(rank, world_size) already.")
        if rank != -1:
            query["rank"] = str(rank)
        if world_size != -1:
            query["world_size"] = str(world_size)
        url = result._replace(query="&".join(f"{k}={v}" for k, v in query.items())).geturl()
    if result.scheme not in _HANDLERS:
        raise RuntimeError(f"No rendezvous handler for {result.scheme}://")
    return _HANDLERS[result.scheme](url, **kwargs)


def _query(url, names, api):
    q = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    missing = [n for n in names if n not in q]
    if missing:
        raise ValueError(f"{api}: the url {url!r} lacks {', '.join(missing)}")
    return [int(q[n]) for n in names]


def _tcp_handler(url, timeout=_DEFAULT_TIMEOUT, **kwargs):
    from ._tcp_store import TCPStore

    result = urlparse(url)
    if not result.port and result.port != 0:
        raise ValueError(f"tcp:// rendezvous: port number missing in {url!r}")
    rank, world_size = _query(url, ["rank", "world_size"], "tcp:// rendezvous")
    store = TCPStore(result.hostname, result.port, world_size, rank == 0, timeout,
                     wait_for_workers=rank == 0 and result.port != 0)
    yield store, rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using tcp:// method")


def _file_handler(url, **kwargs):
    from .store import FileStore

    result = urlparse(url)
    if not result.path:
        raise ValueError(f"file:// rendezvous: the path is missing in {url!r}")
    rank, world_size = _query(url, ["rank", "world_size"], "file:// rendezvous")
    yield FileStore(result.path, world_size), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using file:// method")


def _env(name, given=None):
    if given is not None:
        return given
    value = os.environ.get(name)
    if value is None:
        raise ValueError(f"Error initializing torch.distributed using env:// rendezvous: environment variable "
                         f"{name} expected, but not set")
    return value


def _env_handler(url, timeout=_DEFAULT_TIMEOUT, **kwargs):
    from ._tcp_store import TCPStore

    q = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    rank = int(_env("RANK", q.get("rank")))
    world_size = int(_env("WORLD_SIZE", q.get("world_size")))
    host, port = _env("MASTER_ADDR"), int(_env("MASTER_PORT"))
    yield TCPStore(host, port, world_size, rank == 0, timeout), rank, world_size
    raise RuntimeError("Unable to perform re-rendezvous using env:// method")


register_rendezvous_handler("tcp", _tcp_handler)
register_rendezvous_handler("file", _file_handler)
register_rendezvous_handler("env", _env_handler)
