"""``rpc.functions.async_execution``: a function that answers an RPC with a Future."""
from __future__ import annotations

import functools


def async_execution(fn):
    """Mark ``fn`` as returning a :class:`lucid.futures.Future`: the callee answers the RPC when that
    Future completes, without holding a thread meanwhile (PyTorch's decorator). On a static method,
    put it under ``@staticmethod``; the RRef proxies (``rref.rpc_sync().f(...)``) honour it too.

    Examples
    --------
    >>> import lucid, lucid.distributed.rpc as rpc
    >>> @rpc.functions.async_execution
    ... def plus_one_later(x):
    ...     fut = lucid.futures.Future()
    ...     fut.set_result(x + 1)
    ...     return fut
    >>> plus_one_later(1).wait()
    2
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    wrapper._wrapped_async_rpc_function = fn
    return wrapper
