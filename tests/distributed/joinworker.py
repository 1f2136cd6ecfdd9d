"""The rank body of test_join.py: the generic join context manager on real MPI ranks with
uneven inputs (run under ``lucid-run -n N``; protocol in rankchecks.py). Rank ``r`` has
``r + 1`` iterations; every expected value is replayed in one process from the rule of NOTE
[Generic join] (the numbers PyTorch's gloo run gives).
"""
import sys

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.nn as nn
from lucid.distributed.algorithms.join import Join, Joinable, JoinHook

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _active(k, W):
    """The ranks still training at iteration k (rank r has r + 1 iterations)."""
    return [q for q in range(W) if k < q + 1]


# ------------------------------------------------------------------ PyTorch's tutorial Counter


class CounterJoinHook(JoinHook):
    def __init__(self, counter, sync_max_count):
        self.counter, self.sync_max_count = counter, sync_max_count
        self.calls = []

    def main_hook(self):
        self.calls.append("main")
        dist.all_reduce(lucid.zeros(1))

    def post_hook(self, is_last_joiner):
        self.calls.append(("post", is_last_joiner))
        if not self.sync_max_count:
            return
        rank = dist.get_rank()
        common = lucid.tensor([rank if is_last_joiner else -1])
        dist.all_reduce(common, op=dist.ReduceOp.MAX)
        common = int(common.item())
        if rank == common:
            self.counter.max_count = self.counter.count.clone()
        dist.broadcast(self.counter.max_count, src=common)


class Counter(Joinable):
    def __init__(self):
        super().__init__()
        self.count, self.max_count = lucid.zeros(1), lucid.zeros(1)
        self.hook = None

    def __call__(self):
        Join.notify_join_context(self)
        t = lucid.ones(1)
        dist.all_reduce(t)
        self.count += t

    def join_hook(self, **kwargs):
        self.hook = CounterJoinHook(self, kwargs.get("sync_max_count", False))
        return self.hook

    @property
    def join_device(self):
        return "cpu"

    @property
    def join_process_group(self):
        return None


@check
def counter_counts_the_active_ranks_of_every_iteration():
    r, W = dist.get_rank(), dist.get_world_size()
    counter = Counter()
    with Join([counter], sync_max_count=True):
        for _ in range(r + 1):
            counter()
    # each own iteration k all-reduces a one from every rank still active
    assert counter.count.item() == sum(len(_active(k, W)) for k in range(r + 1)), counter.count
    assert counter.max_count.item() == sum(len(_active(k, W)) for k in range(W))  # the last joiner's count
    # rank r shadows the W - 1 - r iterations it no longer runs, then one post hook
    assert counter.hook.calls == ["main"] * (W - 1 - r) + [("post", r == W - 1)], counter.hook.calls
    assert not counter._join_config.enable  # the configuration is reset on exit


@check
def throw_on_early_termination_raises_on_every_rank_in_the_same_iteration():
    r, W = dist.get_rank(), dist.get_world_size()
    counter = Counter()
    done = 0
    try:
        with Join([counter], throw_on_early_termination=True):
            for _ in range(r + 1):
                counter()
                done += 1
    except RuntimeError as e:
        msg = str(e)
    else:
        raise AssertionError("throw_on_early_termination=True did not raise")
    # rank 0 runs out after one iteration: the others raise in their second notification
    assert done == 1, done
    assert ("exhausted all inputs" in msg) if r == 0 else ("Throwing across all ranks" in msg), msg
    dist.barrier()


@check
def disabled_join_makes_no_collectives():
    counter = Counter()
    with Join([counter], enable=False):
        counter()  # every rank: one iteration, no notification
    assert counter.count.item() == dist.get_world_size() and counter.hook.calls == []


# ------------------------------------------------------------------ DDP and ZeRO


def _model():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 2)).double()


def _batches(W):
    rng = np.random.default_rng(5)
    return rng.standard_normal((W, W, 2, 4)), rng.standard_normal((W, W, 2, 2))


def _loss(model, data, k, q):
    d = model(lucid.tensor(data[0][k, q])) - lucid.tensor(data[1][k, q])
    return (d * d).mean()


def _close(got, want, what):
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=what)


def _train_joined(joinables, model, opt, data, r, **kwargs):
    with Join(joinables, **kwargs):
        for k in range(r + 1):
            _loss(model, data, k, r).backward()
            opt.step()
            opt.zero_grad()


@check
def ddp_in_join_averages_over_the_world_or_the_active_ranks():
    from lucid.nn.parallel import DistributedDataParallel as DDP

    r, W = dist.get_rank(), dist.get_world_size()
    data = _batches(W)
    for divide in (True, False):
        model, ref = DDP(_model()), _model()
        opt = lucid.optim.SGD(model.parameters(), lr=0.1)
        _train_joined([model], model, opt, data, r, divide_by_initial_world_size=divide)
        ropt = lucid.optim.SGD(ref.parameters(), lr=0.1)
        for k in range(W):  # joined ranks add zeros to the sum
            active = _active(k, W)
            (sum(_loss(ref, data, k, q) for q in active) / (W if divide else len(active))).backward()
            ropt.step()
            ropt.zero_grad()
        for p, q in zip(model.module.parameters(), ref.parameters()):
            _close(p.detach().numpy(), q.detach().numpy(), f"Join([ddp], divide_by_initial_world_size={divide})")
        assert model._join is None and model._divisor == W


@check
def ddp_with_zero_redundancy_optimizer_on_uneven_inputs():
    # PyTorch's documented pairing: Join([model, optimizer]). A parameter is stepped by its owner;
    # an owner that has joined holds no gradient (zero_grad), so its share keeps its value
    from lucid.distributed.optim import ZeroRedundancyOptimizer
    from lucid.nn.parallel import DistributedDataParallel as DDP

    r, W = dist.get_rank(), dist.get_world_size()
    data = _batches(W)
    model = DDP(_model())
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=lucid.optim.SGD, lr=0.1)
    owner = {name: opt._owner[id(p)] for name, p in model.module.named_parameters()}
    _train_joined([model, opt], model, opt, data, r)
    ref = _model()
    for k in range(W):
        active = _active(k, W)
        ref.zero_grad()
        (sum(_loss(ref, data, k, q) for q in active) / W).backward()
        with lucid.no_grad():
            for name, p in ref.named_parameters():
                if owner[name] in active:
                    p -= 0.1 * p.grad
    for (name, p), q in zip(model.module.named_parameters(), ref.parameters()):
        _close(p.detach().numpy(), q.detach().numpy(), f"Join([ddp, zero]): {name} (owner {owner[name]})")
    if W > 1:
        assert set(owner.values()) != {0}  # the joined owners' rule is exercised


@check
def ddp_first_throws_on_early_termination_on_every_rank():
    from lucid.nn.parallel import DistributedDataParallel as DDP

    r, W = dist.get_rank(), dist.get_world_size()
    data = _batches(W)
    model = DDP(_model())
    opt = lucid.optim.SGD(model.parameters(), lr=0.1)
    try:
        _train_joined([model], model, opt, data, r, throw_on_early_termination=True)
    except RuntimeError as e:
        assert "exhausted" in str(e), str(e)
    else:
        if W > 1:
            raise AssertionError("throw_on_early_termination=True did not raise")
    assert model._join is None


if __name__ == "__main__":
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:])
