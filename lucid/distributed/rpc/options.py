"""The backend options of ``init_rpc`` (PyTorch's names) and RPC constants."""
from __future__ import annotations

import enum
import os

DEFAULT_RPC_TIMEOUT_SEC = 60.0
UNSET_RPC_TIMEOUT = -1.0
DEFAULT_INIT_METHOD = "env://"
DEFAULT_NUM_WORKER_THREADS = 16


class BackendType(enum.Enum):
    """Lucid has one backend; the name is PyTorch's default one."""

    TENSORPIPE = "TENSORPIPE"


class RpcBackendOptions:
    """``rpc_timeout`` (seconds; 0 = never) and ``init_method`` (``env://``, ``tcp://host:port``)."""

    def __init__(self, rpc_timeout=DEFAULT_RPC_TIMEOUT_SEC, init_method=DEFAULT_INIT_METHOD):
        self.rpc_timeout = float(rpc_timeout)
        self.init_method = init_method

    @property
    def _bind_host(self):
        """Where this worker listens: the loopback when the rendezvous is on this machine, else every
        interface (several machines: LUCID_RPC_HOST names this machine's address)."""
        explicit = os.environ.get("LUCID_RPC_HOST")
        if explicit:
            return explicit
        host = _rendezvous_host(self.init_method)
        return "127.0.0.1" if host in (None, "localhost", "127.0.0.1", "::1") else "0.0.0.0"


def _rendezvous_host(init_method):
    if init_method in (None, "env://"):
        return os.environ.get("MASTER_ADDR")
    if isinstance(init_method, str) and init_method.startswith("tcp://"):
        return init_method[len("tcp://"):].rsplit(":", 1)[0]
    return None


class TensorPipeRpcBackendOptions(RpcBackendOptions):
    """PyTorch's options class, accepted as is: ``num_worker_threads`` is unused (each request runs
    in a thread of its own, NOTE [RPC transport]); ``device_maps``/``devices`` must be empty (Lucid's
    RPC sends CPU tensors only).

    Examples
    --------
    >>> from lucid.distributed.rpc import TensorPipeRpcBackendOptions
    >>> TensorPipeRpcBackendOptions(rpc_timeout=20).rpc_timeout
    20.0
    """

    def __init__(self, *, num_worker_threads=DEFAULT_NUM_WORKER_THREADS, rpc_timeout=DEFAULT_RPC_TIMEOUT_SEC,
                 init_method=DEFAULT_INIT_METHOD, device_maps=None, devices=None, _transports=None,
                 _channels=None):
        super().__init__(rpc_timeout, init_method)
        self.num_worker_threads = int(num_worker_threads)
        self.device_maps = dict(device_maps or {})
        self.devices = list(devices or [])
        if self.device_maps or self.devices:
            raise NotImplementedError("TensorPipeRpcBackendOptions: device_maps and devices are not supported; "
                                      "Lucid's RPC sends CPU tensors only (move them with .cpu())")

    def set_device_map(self, to, device_map):
        raise NotImplementedError("TensorPipeRpcBackendOptions.set_device_map: Lucid's RPC sends CPU tensors "
                                  "only (move them with .cpu())")

    def set_devices(self, devices):
        raise NotImplementedError("TensorPipeRpcBackendOptions.set_devices: Lucid's RPC sends CPU tensors only")
