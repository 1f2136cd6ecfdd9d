"""RPC constants under PyTorch's module path (``torch.distributed.rpc.constants``)."""
from .options import DEFAULT_INIT_METHOD, DEFAULT_NUM_WORKER_THREADS, DEFAULT_RPC_TIMEOUT_SEC, UNSET_RPC_TIMEOUT

__all__ = ["DEFAULT_RPC_TIMEOUT_SEC", "DEFAULT_INIT_METHOD", "DEFAULT_NUM_WORKER_THREADS", "UNSET_RPC_TIMEOUT"]
