"""``lucid.distributed.rpc``: remote calls and remote references (``torch.distributed.rpc``).

Workers join with :func:`init_rpc` and leave with :func:`shutdown`; :func:`rpc_sync`,
:func:`rpc_async` and :func:`remote` run a function on another worker (by name, rank or
:class:`WorkerInfo`); :class:`RRef` refers to a value living on one worker. Messages are
pickled (NOTE [RPC pickling]): RPC runs the functions its caller names, as PyTorch's does, so
connect only workers that trust each other. Transport: NOTE [RPC transport]. Gradients flow
through RPC calls with :mod:`lucid.distributed.autograd`.

Examples
--------
>>> import lucid, lucid.distributed.rpc as rpc
>>> rpc.init_rpc("worker0", rank=0, world_size=2)                 # doctest: +SKIP
>>> rpc.rpc_sync("worker1", lucid.add, args=(lucid.ones(2), 1))  # doctest: +SKIP
tensor([2., 2.])
>>> rpc.shutdown()                                                # doctest: +SKIP
"""
from . import constants, functions
from ._agent import WorkerInfo
from .api import (_set_rpc_timeout, get_rpc_timeout, get_worker_info, init_rpc, remote, rpc_async, rpc_sync,
                  shutdown)
from .options import (DEFAULT_RPC_TIMEOUT_SEC, UNSET_RPC_TIMEOUT, BackendType, RpcBackendOptions,
                      TensorPipeRpcBackendOptions)
from .rref import RRef

__all__ = ["init_rpc", "shutdown", "get_worker_info", "rpc_sync", "rpc_async", "remote", "RRef", "WorkerInfo",
           "BackendType", "RpcBackendOptions", "TensorPipeRpcBackendOptions", "functions", "is_available",
           "DEFAULT_RPC_TIMEOUT_SEC", "UNSET_RPC_TIMEOUT", "get_rpc_timeout", "constants"]


def is_available():
    """Lucid's RPC needs only the standard library: always True."""
    return True
