"""The rank body of test_fsdp2.py: ``fully_shard`` (FSDP2), ``nn.Parameter(dtensor)`` and
``load_state_dict`` with DTensors on real MPI ranks (run under ``lucid-run -n N``; same
protocol as dtensorworker.py). ``--torch N OUT PORT`` runs PyTorch's FSDP2 on gloo instead.

The model has the shapes of PyTorch's ``common_fsdp.MLPStack(5)``: 15- and 20-row weights
and 5-row ones, uneven on 2 and 3 ranks. Each rank trains on its own rows of one global
batch; the reference is one process training on the whole batch, compared to 1e-12.
"""
import copy
import json
import os
import sys

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
from lucid.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from lucid.distributed.tensor.parameter import DTensorParameter

CHECKS = {}
DIM, ROWS = 5, 2  # rows per rank


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def close(a, b, tol=1e-12):
    a = a.detach().numpy() if isinstance(a, lucid.Tensor) else np.asarray(a)
    b = b.detach().numpy() if isinstance(b, lucid.Tensor) else np.asarray(b)
    assert a.shape == b.shape, (a.shape, b.shape)
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


class MLP(nn.Module):
    def __init__(self, dim, dim_multiplier=4):
        super().__init__()
        self.in_proj = nn.Linear(dim, dim_multiplier * dim)
        self.out_proj = nn.Linear(dim_multiplier * dim, dim)

    def forward(self, x):
        return F.relu(self.out_proj(F.relu(self.in_proj(x))))


def mlp_stack(seed=0):
    lucid.manual_seed(seed)
    return nn.Sequential(MLP(DIM, 3), MLP(DIM), MLP(DIM, 3)).double()


def batch(step, n):
    rng = np.random.default_rng(step)
    return rng.standard_normal((ROWS * n, DIM)), rng.standard_normal((ROWS * n, DIM))


def mine(a, r):
    return a[r * ROWS:(r + 1) * ROWS]


OPTIMIZERS = {"sgd": lambda p: lucid.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
              "adam": lambda p: lucid.optim.Adam(p, lr=0.05)}


def shard_all(model, **kw):
    for layer in model:
        fully_shard(layer, **kw)
    return fully_shard(model, **kw)


def one_process_training(opt_name, n, steps=3):
    """Losses and final parameters of training the stack on the whole batch in one process."""
    model = mlp_stack()
    opt = OPTIMIZERS[opt_name](model.parameters())
    losses = []
    for step in range(steps):
        x, t = batch(step, n)
        opt.zero_grad()
        loss = F.mse_loss(model(lucid.tensor(x)), lucid.tensor(t))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {f"{opt_name} losses": losses, f"{opt_name} params": [p.detach().tolist() for p in model.parameters()]}


def _train(opt_name, **kw):
    n, r = dist.get_world_size(), dist.get_rank()
    ref, model = mlp_stack(), shard_all(mlp_stack(), **kw)
    assert type(model).__name__ == "FSDPSequential" and type(model[0]).__name__ == "FSDPMLP"
    assert isinstance(model, FSDPModule) and isinstance(model[1], MLP) and isinstance(model, nn.Sequential)
    names = [k for k, _ in ref.named_parameters()]
    assert [k for k, _ in model.named_parameters()] == names
    for p in model.parameters():
        assert isinstance(p, DTensorParameter) and p.placements == (Shard(0),) and p.requires_grad
    o_ref, o_fs = OPTIMIZERS[opt_name](ref.parameters()), OPTIMIZERS[opt_name](model.parameters())
    for step in range(3):
        x, t = batch(step, n)
        o_ref.zero_grad()
        want = F.mse_loss(ref(lucid.tensor(x)), lucid.tensor(t))
        want.backward()
        o_ref.step()
        o_fs.zero_grad()
        loss = F.mse_loss(model(lucid.tensor(mine(x, r))), lucid.tensor(mine(t, r)))
        loss.backward()
        o_fs.step()
        total = loss.detach().clone()
        dist.all_reduce(total)
        close(total / n, want)
        for (k, p), q in zip(model.named_parameters(), ref.parameters()):
            assert isinstance(p, DTensorParameter), (step, k)  # resharded after the backward
            assert p.grad.placements == (Shard(0),), k
            close(p.grad.full_tensor(), q.grad)
            close(p.full_tensor(), q)
    sd = model.state_dict()
    assert list(sd) == names and all(isinstance(v, DTensor) for v in sd.values())
    for k, v in ref.state_dict().items():
        close(sd[k].full_tensor(), v)
    return model


@check
def fully_shard_trains_as_one_process_sgd():
    _train("sgd")
    _train("sgd", reshard_after_forward=False)


@check
def fully_shard_trains_as_one_process_adam():
    _train("adam")


@check
def reshard_after_forward_and_explicit_unshard():
    n, r = dist.get_world_size(), dist.get_rank()
    x, t = batch(7, n)
    x, t = lucid.tensor(mine(x, r)), lucid.tensor(mine(t, r))
    ref = mlp_stack()
    for flag, registered in ((True, DTensor), (False, lucid.Tensor)):
        model = shard_all(mlp_stack(), reshard_after_forward=flag)
        out = model(x)
        w = model[1].in_proj.weight
        assert isinstance(w, registered) and (flag or not isinstance(w, DTensor)), (flag, type(w))
        F.mse_loss(out, t).backward()
        assert all(isinstance(p, DTensor) for p in model.parameters())
    # the default: non-root modules reshard, the root keeps its (here: no) parameters
    model = shard_all(mlp_stack())
    model(x)
    assert isinstance(model[0].in_proj.weight, DTensor)
    assert model.__dict__["_fsdp_group"].reshard_after_forward is False
    assert model[0].__dict__["_fsdp_group"].reshard_after_forward is True
    # unshard(): the whole values stay registered until reshard()
    model[2].unshard()
    w = model[2].out_proj.weight
    assert not isinstance(w, DTensor)
    close(w, ref[2].out_proj.weight)
    out = model(x)
    assert model[2].out_proj.weight is w
    F.mse_loss(out, t).backward()
    model[2].reshard()
    assert isinstance(model[2].out_proj.weight, DTensor)
    assert model[1].unshard(async_op=True).wait() is None
    model[1].reshard()
    # a module called twice in one forward, resharded in between: both gathers refilled in backward
    twice = fully_shard(nn.Linear(DIM, DIM).double(), reshard_after_forward=True)
    twice_ref = nn.Linear(DIM, DIM).double()
    twice_ref.load_state_dict({k: v.full_tensor() for k, v in twice.state_dict().items()})
    for m, inp in ((twice, x), (twice_ref, lucid.tensor(np.asarray(batch(7, n)[0])))):
        (m(m(inp)) ** 2).mean().backward()
    close(twice.weight.grad.full_tensor(), twice_ref.weight.grad)


@check
def activation_checkpointing_gathers_again():
    # a checkpointed layer runs its forward (and the gather) again inside the backward
    from lucid.utils.checkpoint import checkpoint

    n, r = dist.get_world_size(), dist.get_rank()
    ref, model = mlp_stack(), shard_all(mlp_stack())
    x, t = batch(8, n)
    F.mse_loss(ref(lucid.tensor(x)), lucid.tensor(t)).backward()
    h = lucid.tensor(mine(x, r))
    for layer in model:
        h = checkpoint(layer, h, use_reentrant=False)
    F.mse_loss(h, lucid.tensor(mine(t, r))).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad.full_tensor(), q.grad)


@check
def gradient_sync_off_accumulates_until_on():
    n, r = dist.get_world_size(), dist.get_rank()
    ref, model = mlp_stack(), shard_all(mlp_stack())
    for step, sync in ((0, False), (1, False), (2, True)):
        x, t = batch(step, n)
        F.mse_loss(ref(lucid.tensor(x)), lucid.tensor(t)).backward()
        model.set_requires_gradient_sync(sync)
        F.mse_loss(model(lucid.tensor(mine(x, r))), lucid.tensor(mine(t, r))).backward()
        if not sync:
            assert all(p.grad is None for p in model.parameters())
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad.full_tensor(), q.grad)
    # a sum divided by 2n instead of the mean
    model = shard_all(mlp_stack())
    model.set_gradient_divide_factor(2.0 * n)
    ref.zero_grad()
    x, t = batch(3, n)
    F.mse_loss(ref(lucid.tensor(x)), lucid.tensor(t)).backward()
    F.mse_loss(model(lucid.tensor(mine(x, r))), lucid.tensor(mine(t, r))).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad.full_tensor(), q.grad / 2)


@check
def mixed_precision_casts_gathers_and_outputs():
    n, r = dist.get_world_size(), dist.get_rank()
    ref = mlp_stack()
    mp = MixedPrecisionPolicy(param_dtype=lucid.float32, reduce_dtype=lucid.float64, output_dtype=lucid.float64)
    model = shard_all(mlp_stack(), mp_policy=mp)
    x, t = batch(4, n)
    out = model(lucid.tensor(mine(x, r)))
    assert out.dtype == lucid.float64
    F.mse_loss(out, lucid.tensor(mine(t, r))).backward()
    F.mse_loss(ref(lucid.tensor(x)), lucid.tensor(t)).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.dtype == lucid.float64 and p.grad.dtype == lucid.float64
        close(p.grad.full_tensor(), q.grad, 1e-5)
    inner = shard_all(mlp_stack(), mp_policy=MixedPrecisionPolicy(param_dtype=lucid.float32))
    assert inner(lucid.tensor(mine(x, r))).dtype == lucid.float32


@check
def forward_methods_state_dicts_and_errors():
    n, r = dist.get_world_size(), dist.get_rank()

    class Head(nn.Linear):
        def project(self, x):
            return x @ self.weight.T

    head = fully_shard(Head(DIM, 3).double(), reshard_after_forward=True)  # a root keeps them by default
    register_fsdp_forward_method(head, "project")
    x = lucid.tensor(batch(5, n)[0])
    full_w = head.weight.full_tensor()
    close(head.project(x), x @ full_w.T)
    assert isinstance(head.weight, DTensor)
    # load a sharded state dict into a fresh sharded model; a plain one is refused, as PyTorch's
    src, dst = shard_all(mlp_stack(0)), shard_all(mlp_stack(1))
    # a deep copy (DeviceMesh.deepcopy raised on the communicator) is a second sharded model
    twin = copy.deepcopy(src)
    F.mse_loss(twin(x), x).backward()
    assert all(p.grad is None for p in src.parameters()) and type(twin) is type(src)
    for p, q in zip(twin.parameters(), src.parameters()):
        assert p is not q and p.grad is not None and p.placements == (Shard(0),)
        close(p.full_tensor(), q.full_tensor())
    dst.load_state_dict(src.state_dict())
    for p, q in zip(dst.parameters(), src.parameters()):
        assert isinstance(p, DTensorParameter) and p.placements == (Shard(0),)
        close(p.full_tensor(), q.full_tensor())
    plain = mlp_stack(2).state_dict()
    try:
        dst.load_state_dict(plain)
    except RuntimeError as e:
        assert "got mixed Tensor and DTensor" in str(e), str(e)
    else:
        raise AssertionError("a plain state dict loaded into DTensor parameters")
    full = {k: distribute_tensor(v, dst.state_dict()[k].device_mesh, [Replicate()]) for k, v in plain.items()}
    dst.load_state_dict(full)  # Replicate values moved to the parameters' Shard(0)
    for (k, p) in dst.named_parameters():
        assert p.placements == (Shard(0),)
        close(p.full_tensor(), plain[k])
    try:
        fully_shard(dst)
    except AssertionError as e:  # PyTorch's type (and a RuntimeError)
        assert isinstance(e, RuntimeError) and str(e).startswith("fully_shard: fully_shard can only be applied"), e
    else:
        raise AssertionError("fully_shard twice")
    try:
        fully_shard(nn.Linear(2, 2), mesh=dist.init_device_mesh("cpu", (1, n)))
    except NotImplementedError as e:
        assert str(e).startswith("fully_shard: only 1-D meshes") and f"(1, {n})" in str(e), str(e)
    else:
        raise AssertionError("a 2-D mesh")
    # clip_grad_norm_ reads the whole gradient of the shards
    model, ref = shard_all(mlp_stack()), mlp_stack()
    xb, tb = batch(6, n)
    F.mse_loss(model(lucid.tensor(mine(xb, r))), lucid.tensor(mine(tb, r))).backward()
    F.mse_loss(ref(lucid.tensor(xb)), lucid.tensor(tb)).backward()
    close(nn.utils.clip_grad_norm_(model.parameters(), 0.1), nn.utils.clip_grad_norm_(ref.parameters(), 0.1))
    for p, q in zip(model.parameters(), ref.parameters()):
        close(p.grad.full_tensor(), q.grad)


class Net(nn.Module):
    """Root-owned, frozen, unused, ignored and tied parameters beside two sharded layers."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(4, 2), nn.Linear(2, 4), nn.Linear(4, 3)
        self.unused = nn.Linear(3, 3)
        self.e, self.f = nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)
        self.f.weight = self.e.weight
        self.register_buffer("buf", lucid.arange(4.0, dtype=lucid.float64))

    def forward(self, x):
        return self.c(self.f(self.e(self.b(self.a(x)) + self.buf)))


def net():
    m = Net().double()
    with lucid.no_grad():
        for i, p in enumerate(m.parameters()):
            p.copy_(lucid.tensor(np.cos(np.arange(p.numel()) + i).reshape(tuple(p.shape))))
    m.b.weight.requires_grad_(False)
    return m


@check
def frozen_unused_ignored_and_tied_parameters():
    # the root keeps its gathered parameters after the forward; the end of the backward puts
    # every shard back (an unused layer's too, which no gradient reaches), as PyTorch's
    n, r = dist.get_world_size(), dist.get_rank()
    ref, model = net(), net()
    fully_shard(model.a)
    fully_shard(model.c, shard_placement_fn=lambda p: Shard(1) if p.ndim == 2 else None)
    fully_shard(model, ignored_params={model.unused.bias})
    assert model.c.weight.placements == (Shard(1),) and model.e.weight is model.f.weight
    assert type(model.unused.bias) is nn.Parameter and type(model.buf) is lucid.Tensor
    x = np.sin(np.arange(8.0 * n)).reshape(2 * n, 4)
    (ref(lucid.tensor(x)) ** 2).mean().backward()
    (model(lucid.tensor(x[2 * r:2 * r + 2])) ** 2).mean().backward()
    assert all(isinstance(p, DTensorParameter) for k, p in model.named_parameters() if k != "unused.bias")
    for (k, p), q in zip(model.named_parameters(), ref.parameters()):
        assert (p.grad is None) == (q.grad is None), k
        if q.grad is not None:
            close(p.grad.full_tensor(), q.grad)
    lucid.optim.SGD(model.parameters(), lr=0.1).step()
    lucid.optim.SGD(ref.parameters(), lr=0.1).step()
    with lucid.no_grad():
        model(lucid.tensor(x[:2]))  # a root's gathered values stay registered, state_dict shows shards
    sd = model.state_dict()
    assert sorted(k for k, v in sd.items() if not isinstance(v, DTensor)) == ["buf", "unused.bias"]
    for k, v in ref.state_dict().items():
        close(sd[k].full_tensor() if isinstance(sd[k], DTensor) else sd[k], v)


@check
def parameter_of_dtensor_and_load_state_dict():
    m = dist.init_device_mesh("cpu", (dist.get_world_size(),))
    full = np.arange(10.0).reshape(5, 2)
    x = distribute_tensor(lucid.tensor(full), m, [Shard(0)])
    p = nn.Parameter(x)
    assert type(p) is DTensorParameter and p.shape == (5, 2) and p.requires_grad and p.is_leaf
    assert p.placements == (Shard(0),) and not nn.Parameter(x, requires_grad=False).requires_grad
    x.to_local().add_(100.0)  # shares the local storage, as PyTorch's
    close(p.full_tensor(), full + 100)
    lin = nn.Linear(2, 5, bias=False).double()
    cases = [(distribute_tensor(lucid.ones(5, 2, dtype=lucid.float64), m, [Shard(0)]), np.ones((5, 2))),
             (distribute_tensor(lucid.full((5, 2), 2.0, dtype=lucid.float64), m, [Replicate()]), np.full((5, 2), 2.0)),
             (distribute_tensor(lucid.full((5, 2), 4.0, dtype=lucid.float64), m, [Shard(1)]), np.full((5, 2), 4.0))]
    for value, want in cases:
        for assign in (False, True):
            lin.weight = nn.Parameter(distribute_tensor(lucid.zeros(5, 2, dtype=lucid.float64), m, [Shard(0)]))
            lin.load_state_dict({"weight": value}, assign=assign)
            w = lin.weight
            assert isinstance(w, DTensorParameter) and w.requires_grad
            assert w.placements == (value.placements if assign else (Shard(0),)), (assign, w.placements)
            close(w.full_tensor(), want)
    # a plain value: refused without assign (PyTorch: mixed Tensor and DTensor), taken with it
    lin.weight = nn.Parameter(distribute_tensor(lucid.zeros(5, 2, dtype=lucid.float64), m, [Shard(0)]))
    try:
        lin.load_state_dict({"weight": lucid.ones(5, 2)})
    except RuntimeError as e:
        assert "got mixed Tensor and DTensor" in str(e), str(e)
    else:
        raise AssertionError("a plain value loaded into a DTensor parameter")
    lin.load_state_dict({"weight": lucid.full((5, 2), 3.0)}, assign=True)
    assert type(lin.weight) is nn.Parameter and lin.weight.requires_grad
    close(lin.weight, np.full((5, 2), 3.0))
    for assign in (False, True):  # sizes are compared globally
        lin.weight = nn.Parameter(distribute_tensor(lucid.zeros(5, 2, dtype=lucid.float64), m, [Shard(0)]))
        try:
            lin.load_state_dict({"weight": distribute_tensor(lucid.ones(4, 2), m, [Shard(0)])}, assign=assign)
        except RuntimeError as e:
            assert "size mismatch for weight: copying a param with shape (4, 2)" in str(e), str(e)
        else:
            raise AssertionError("a wrong global shape loaded")


def main():
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:])

# ------------------------------------------------------------------ PyTorch's run of the same training


def _torch_rank(rank, n, out_dir, port):
    import torch
    import torch.distributed as tdist
    from torch.distributed.fsdp import fully_shard as torch_fully_shard
    from torch.testing._internal.common_fsdp import MLPStack

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    tdist.init_process_group("gloo", rank=rank, world_size=n)
    res = {}
    for opt_name in ("sgd", "adam"):
        src = mlp_stack()
        model = MLPStack(DIM).double()
        with torch.no_grad():
            for p, q in zip(model.parameters(), src.parameters()):
                p.copy_(torch.tensor(q.detach().numpy()))
        for layer in model:
            torch_fully_shard(layer)
        torch_fully_shard(model)
        opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01) if opt_name == "sgd"
               else torch.optim.Adam(model.parameters(), lr=0.05))
        losses = []
        for step in range(3):
            x, t = batch(step, n)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(torch.tensor(mine(x, rank))), torch.tensor(mine(t, rank)))
            loss.backward()
            opt.step()
            total = loss.detach().clone()
            tdist.all_reduce(total)
            losses.append(total.item() / n)
        res[f"{opt_name} losses"] = losses
        res[f"{opt_name} params"] = [p.full_tensor().tolist() for p in model.parameters()]
    with open(os.path.join(out_dir, f"torch{rank}.json"), "w") as f:
        json.dump(res, f)
    tdist.destroy_process_group()


def torch_main():
    """``python fsdp2worker.py --torch N OUT PORT``: PyTorch's gloo ranks, forked from this fresh process."""
    import torch.multiprocessing as mp

    n, out_dir, port = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    mp.start_processes(_torch_rank, args=(n, out_dir, port), nprocs=n, start_method="fork")


if __name__ == "__main__":
    torch_main() if sys.argv[1] == "--torch" else main()
