"""``ZeroRedundancyOptimizer``: each rank keeps the optimizer state of its share of the parameters.

NOTE [ZeRO partition]
As PyTorch's (ZeRO stage 1): the parameters of each group, largest first, go one by one to
the rank whose share is smallest so far (ties to the lowest rank), the running sizes
carrying over from group to group, so a group added later never moves earlier parameters.
Each rank runs a local optimizer of ``optimizer_class`` over its share only; after its step,
every parameter is broadcast from the rank that owns it, so all ranks hold the same values
(the gradients must already agree, as after DDP's all-reduce). Hyperparameters live in the
wrapper's ``param_groups`` (what LR schedulers change) and are copied into the local
optimizer before each step and back after it.

It is a :class:`~lucid.distributed.algorithms.join.Joinable` (NOTE [Generic join]): in a
``Join([model, optimizer])`` a rank whose inputs ran out keeps stepping its share with the
gradients it holds (none after ``zero_grad()``: the share stays) and broadcasting it, as
PyTorch's ZeRO join hook does.
"""
from __future__ import annotations

from ...optim.optimizer import Optimizer
from ..algorithms.join import Join, Joinable, JoinHook

__all__ = ["ZeroRedundancyOptimizer"]


class ZeroRedundancyOptimizer(Optimizer, Joinable):
    """Wrap ``optimizer_class`` so that its state is sharded over the ranks (NOTE [ZeRO partition]).

    Parameters
    ----------
    params : iterable of Tensor or of dict
        All parameters (the same on every rank), or parameter groups.
    optimizer_class : type
        The local optimizer, e.g. ``lucid.optim.Adam``.
    process_group : ProcessGroup, optional
        The ranks sharing the work (default: the world).
    parameters_as_bucket_view : bool
        Accepted for PyTorch's signature; parameters are broadcast one by one.
    overlap_with_ddp : bool
        Only False (PyTorch's DDP-communication-hook overlap is not built).
    **defaults
        The local optimizer's options (``lr=...``).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.distributed.optim import ZeroRedundancyOptimizer
    >>> model = nn.Linear(2, 1)
    >>> opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=lucid.optim.SGD, lr=0.1)
    >>> model(lucid.ones(3, 2)).sum().backward()
    >>> opt.step()          # without a process group it is the plain optimizer
    """

    def __init__(self, params, optimizer_class, process_group=None, parameters_as_bucket_view=False,
                 overlap_with_ddp=False, **defaults):
        if overlap_with_ddp:
            raise NotImplementedError("ZeroRedundancyOptimizer: overlap_with_ddp=True is not supported")
        if not isinstance(optimizer_class, type) or not issubclass(optimizer_class, Optimizer):
            raise TypeError(f"ZeroRedundancyOptimizer: optimizer_class must be an Optimizer class, "
                            f"got {optimizer_class!r}")
        from .. import process_group as pg

        self.optimizer_class, self.process_group = optimizer_class, process_group
        self.parameters_as_bucket_view = bool(parameters_as_bucket_view)
        self._local = None
        if pg.is_initialized():
            self.world_size = pg.get_world_size(process_group)
            self.rank = pg.get_rank(process_group)
            self._ranks = pg.get_process_group_ranks(process_group) if process_group is not None \
                else list(range(self.world_size))
        else:
            self.world_size, self.rank, self._ranks = 1, 0, [0]
        Optimizer.__init__(self, params, defaults)
        Joinable.__init__(self)
        self._local = optimizer_class(self._partition()[self.rank] or [{"params": []}], **defaults)
        self.state = self._local.state

    @property
    def optim(self):
        """The local optimizer over this rank's share (PyTorch's attribute of the same name)."""
        return self._local

    # ------------------------------------------------------------ the partition

    def _partition(self):
        """For each rank, its param groups (hyperparameters of the group, its share of the params)."""
        sizes = [0] * self.world_size
        self._owner = {}
        per_rank = [[] for _ in range(self.world_size)]
        for group in self.param_groups:
            shares = [[] for _ in range(self.world_size)]
            for p in sorted(group["params"], key=lambda t: t.numel(), reverse=True):
                r = sizes.index(min(sizes))
                shares[r].append(p)
                sizes[r] += p.numel()
                self._owner[id(p)] = r
            for r in range(self.world_size):
                per_rank[r].append({**{k: v for k, v in group.items() if k not in ("params", "param_names")},
                                    "params": shares[r]})
        return per_rank

    def add_param_group(self, param_group):
        """Add a group to every rank's partition (earlier parameters keep their owners)."""
        super().add_param_group(param_group)
        if self._local is not None:
            self._local.add_param_group(self._partition()[self.rank][-1])

    def _sync(self, src, dst):
        for s, d in zip(src, dst):
            for k, v in s.items():
                if k not in ("params", "param_names"):
                    d[k] = v

    # ------------------------------------------------------------ stepping

    def step(self, closure=None):
        """The local optimizer's step on this rank's share, then every parameter from its owner."""
        Join.notify_join_context(self)
        return self._step_and_broadcast(closure)

    def _step_and_broadcast(self, closure=None):
        self._sync(self.param_groups, self._local.param_groups)
        loss = self._local.step(closure) if closure is not None else self._local.step()
        self._sync(self._local.param_groups, self.param_groups)
        if self.world_size > 1:
            from ..collectives import broadcast

            for group in self.param_groups:
                for p in group["params"]:
                    broadcast(p.detach(), src=self._ranks[self._owner[id(p)]], group=self.process_group)
        return loss

    # ------------------------------------------------------------ join

    def join_hook(self, **_kwargs):
        """The hook of a rank whose inputs ran out: one step and broadcast per active iteration."""
        return _ZeROJoinHook(self)

    @property
    def join_device(self):
        params = [p for g in self.param_groups for p in g["params"]]
        return params[0].device if params else "cpu"

    @property
    def join_process_group(self):
        return self.process_group

    # ------------------------------------------------------------ state dicts

    def consolidate_state_dict(self, to=0):
        """Gather every rank's share of the state on rank ``to`` (call it on every rank)."""
        local = self._local.state_dict()
        order = [p for g in self._local.param_groups for p in g["params"]]
        index = {id(p): i for i, p in enumerate(p for g in self.param_groups for p in g["params"])}
        mine = {index[id(order[i])]: {k: (v.detach().cpu() if hasattr(v, "detach") else v) for k, v in st.items()}
                for i, st in local["state"].items()}
        if self.world_size == 1:
            self._consolidated = [mine]
            return
        from ..objects import gather_object

        got = [None] * self.world_size if self.rank == to else None
        gather_object(mine, got, dst=self._ranks[to], group=self.process_group)
        self._consolidated = got if self.rank == to else None

    def state_dict(self):
        """The whole optimizer's state dict, in the plain optimizer's format (on the rank that
        :meth:`consolidate_state_dict` gathered to)."""
        if getattr(self, "_consolidated", None) is None:
            raise RuntimeError(f"ZeroRedundancyOptimizer.state_dict: the optimizer state has not been "
                               f"consolidated on rank {self.rank}; call consolidate_state_dict(to=...) on "
                               "every rank first")
        out = Optimizer.state_dict(self)
        state = {}
        for share in self._consolidated:
            state.update(share)
        out["state"] = dict(sorted(state.items()))
        return out

    def load_state_dict(self, state_dict):
        """Load a whole-optimizer state dict (every rank passes the same one; each keeps its share)."""
        name = "ZeroRedundancyOptimizer.load_state_dict"
        groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
        if groups is None or "state" not in state_dict:
            raise TypeError(f"{name}: expected a dict with 'state' and 'param_groups'")
        if len(groups) != len(self.param_groups) or any(
                len(s["params"]) != len(m["params"]) for s, m in zip(groups, self.param_groups)):
            raise ValueError(f"{name}: the saved param groups do not match this optimizer's")
        params = {}
        for s, m in zip(groups, self.param_groups):
            params.update(zip(s["params"], m["params"]))
        local_order = {id(p): i for i, p in enumerate(p for g in self._local.param_groups for p in g["params"])}
        local_state = {local_order[id(params[int(k)])]: v for k, v in state_dict["state"].items()
                       if id(params[int(k)]) in local_order}
        local_groups = [{**{k: v for k, v in s.items() if k != "params"},
                         "params": [local_order[id(p)] for p in lg["params"]]}
                        for s, lg in zip(groups, self._local.param_groups)]
        self._local.load_state_dict({"state": local_state, "param_groups": local_groups})
        self.state = self._local.state
        self._sync(self._local.param_groups, self.param_groups)


class _ZeROJoinHook(JoinHook):
    def __init__(self, zero):
        self.zero = zero

    def main_hook(self):
        # the step without the notification: this rank has joined
        self.zero._step_and_broadcast()
