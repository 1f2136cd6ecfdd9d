"""``lucid.distributed.launcher.api`` (``torch.distributed.launcher.api``): launching a function
or a script on ``nproc_per_node`` local processes from Python.

NOTE [Launching from Python]
PyTorch's ``elastic_launch`` starts an elastic agent that spawns workers and restarts them.
Lucid has no agent (``lucid-run`` is its launcher, over MPI), so here a *script* entrypoint (a
``str``) runs under ``lucid-run -n nproc_per_node`` (an MPI world: ``init_process_group``
works in it) and a *callable* runs in ``nproc_per_node`` processes of
``lucid.multiprocessing.start_processes`` with torchrun's variables set (``RANK``,
``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``MASTER_ADDR``,
``MASTER_PORT``, ``TORCHELASTIC_RUN_ID``); its return values come back as ``{rank: value}``.
One node only (``max_nodes == 1``); ``max_restarts`` re-runs a failed job that many times.
"""
from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field

__all__ = ["LaunchConfig", "elastic_launch", "launch_agent"]


@dataclass
class LaunchConfig:
    """What to launch: PyTorch's fields (those Lucid uses are ``nproc_per_node``, ``max_nodes``,
    ``run_id``, ``rdzv_endpoint`` (``host:port``, for ``MASTER_ADDR``/``MASTER_PORT``),
    ``max_restarts``, ``start_method``)."""

    min_nodes: int
    max_nodes: int
    nproc_per_node: int
    logs_specs: object = None
    run_id: str = ""
    role: str = "default_role"
    rdzv_endpoint: str = ""
    rdzv_backend: str = "etcd"
    rdzv_configs: dict = field(default_factory=dict)
    rdzv_timeout: int = -1
    max_restarts: int = 3
    monitor_interval: float = 0.1
    start_method: str = "spawn"
    log_line_prefix_template: str = None
    metrics_cfg: dict = field(default_factory=dict)
    local_addr: str = None
    event_log_handler: str = "null"
    numa_options: object = None
    signals_to_handle: str = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
    duplicate_stdout_filters: list = None
    duplicate_stderr_filters: list = None
    virtual_local_rank: bool = False

    def __post_init__(self):
        if self.rdzv_timeout != -1:
            self.rdzv_configs["timeout"] = self.rdzv_timeout
        if not self.run_id:
            self.run_id = str(uuid.uuid4().int)[:12]


class elastic_launch:  # noqa: N801 - PyTorch's name
    """``elastic_launch(config, entrypoint)(*args)``: run ``entrypoint`` on every local process.

    Returns ``{local rank: return value}`` for a callable entrypoint and ``{}`` for a script
    (its processes return nothing); a failure raises ``ChildFailedError``-like
    ``RuntimeError`` naming the failed rank. See NOTE [Launching from Python].

    Examples
    --------
    >>> from lucid.distributed.launcher.api import LaunchConfig, elastic_launch
    >>> config = LaunchConfig(min_nodes=1, max_nodes=1, nproc_per_node=2, max_restarts=0)
    >>> elastic_launch(config, "print")  # doctest: +ELLIPSIS
    <lucid.distributed.launcher.api.elastic_launch object at ...>
    """

    def __init__(self, config, entrypoint):
        if not isinstance(config, LaunchConfig):
            raise TypeError(f"elastic_launch: config must be a LaunchConfig, got {type(config).__name__}")
        if not (callable(entrypoint) or isinstance(entrypoint, str)):
            raise TypeError(f"elastic_launch: entrypoint must be a callable or a script path, got {entrypoint!r}")
        self._config, self._entrypoint = config, entrypoint

    def __call__(self, *args):
        return launch_agent(self._config, self._entrypoint, list(args))


def launch_agent(config, entrypoint, args):
    """Run ``entrypoint(*args)`` (or the script ``entrypoint`` with ``args``) per ``config``,
    retrying ``config.max_restarts`` times; see NOTE [Launching from Python]."""
    if config.max_nodes != 1 or config.min_nodes > 1:
        raise NotImplementedError(f"launch_agent: Lucid launches on one node only (min_nodes={config.min_nodes}, "
                                  f"max_nodes={config.max_nodes}); use lucid-run --hosts for several machines")
    if isinstance(config.nproc_per_node, bool) or not isinstance(config.nproc_per_node, int) \
            or config.nproc_per_node < 1:
        raise ValueError(f"launch_agent: nproc_per_node must be a positive int, got {config.nproc_per_node!r}")
    attempts = max(0, int(config.max_restarts)) + 1
    for attempt in range(attempts):
        try:
            if isinstance(entrypoint, str):
                return _run_script(config, entrypoint, args)
            return _run_callable(config, entrypoint, args)
        except RuntimeError:
            if attempt == attempts - 1:
                raise
    return {}  # pragma: no cover - the loop returns or raises


def _run_script(config, script, args):
    from ..run import main

    rc = main(["-n", str(config.nproc_per_node), script, *map(str, args)])
    if rc:
        raise RuntimeError(f"launch_agent: {script} failed with exit code {rc} "
                           f"({config.nproc_per_node} processes, run {config.run_id})")
    return {}


def _worker(local_rank, entrypoint, args, env, results):
    os.environ.update(env)
    os.environ["RANK"] = os.environ["LOCAL_RANK"] = str(local_rank)
    results.put((local_rank, entrypoint(*args)))


def _run_callable(config, entrypoint, args):
    import lucid.multiprocessing as mp

    host, _, port = (config.rdzv_endpoint or "127.0.0.1:29500").partition(":")
    n = config.nproc_per_node
    env = {"WORLD_SIZE": str(n), "LOCAL_WORLD_SIZE": str(n), "GROUP_RANK": "0", "ROLE_RANK": "0",
           "MASTER_ADDR": host, "MASTER_PORT": port or "29500", "TORCHELASTIC_RUN_ID": config.run_id}
    ctx = mp.get_context(config.start_method)
    results = ctx.SimpleQueue()
    try:
        mp.start_processes(_worker, (entrypoint, tuple(args), env, results), nprocs=n,
                           start_method=config.start_method)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        raise RuntimeError(f"launch_agent: local rank {e.error_index} (pid {e.pid}) failed "
                           f"(run {config.run_id}):{e}") from e
    out = {}
    while not results.empty():
        rank, value = results.get()
        out[rank] = value
    return dict(sorted(out.items()))
