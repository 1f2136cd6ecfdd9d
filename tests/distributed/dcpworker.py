"""The rank body of test_dcp.py: distributed checkpoints saved and loaded, and the sharded
optimizer state of ZeroRedundancyOptimizer, on real MPI ranks
(run under ``lucid-run -n N``; same protocol as fsdpworker.py). The checkpoint directory is
shared: ``<out_dir>/ckpt_<check>``; a checkpoint saved here is also read back by the test in
one process (another world size) afterwards.
"""
import os
import sys

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.distributed.checkpoint as dcp
import lucid.nn as nn
from lucid.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from lucid.distributed.tensor import Partial, Replicate, Shard, distribute_tensor

CHECKS = {}
OUT = None
X = np.arange(35.0).reshape(7, 5) / 7 - 2


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def mesh():
    return dist.init_device_mesh("cpu", (dist.get_world_size(),))


def ckpt(name):
    return os.path.join(OUT, f"ckpt_{name}")


@check
def dtensors_round_trip_into_other_placements():
    m = mesh()
    sd = {"row": distribute_tensor(lucid.tensor(X), m, [Shard(0)]),
          "col": distribute_tensor(lucid.tensor(X), m, [Shard(1)]),
          "rep": distribute_tensor(lucid.tensor(X), m, [Replicate()]),
          "plain": lucid.tensor(X[0]), "step": 7, "nested": {"lr": [0.1, 0.2]}}
    meta = dcp.save(sd, checkpoint_id=ckpt("dtensors"))
    # every element is written once: the pieces of the sharded values tile them
    for key in ("row", "col", "rep"):
        sizes = [int(np.prod(c["sizes"])) for c in meta.state_dict_metadata[key]["chunks"]]
        assert sum(sizes) == X.size, (key, sizes)
    # load into swapped placements: every rank gets exactly its new piece
    target = {"row": distribute_tensor(lucid.zeros(7, 5, dtype=lucid.float64), m, [Shard(1)]),
              "col": distribute_tensor(lucid.zeros(7, 5, dtype=lucid.float64), m, [Replicate()]),
              "rep": distribute_tensor(lucid.zeros(7, 5, dtype=lucid.float64), m, [Shard(0)]),
              "plain": lucid.zeros(5, dtype=lucid.float64), "step": 0, "nested": {"lr": None}}
    dcp.load(target, checkpoint_id=ckpt("dtensors"))
    for key in ("row", "col", "rep"):
        np.testing.assert_array_equal(target[key].full_tensor().numpy(), X)
    np.testing.assert_array_equal(target["plain"].numpy(), X[0])
    assert target["step"] == 7 and target["nested"] == {"lr": [0.1, 0.2]}


@check
def partial_values_are_saved_reduced():
    m = mesh()
    local = lucid.tensor(X) * (dist.get_rank() + 1)
    p = lucid.distributed.tensor.DTensor.from_local(local, m, [Partial()])
    dcp.save({"p": p}, checkpoint_id=ckpt("partial"))
    target = {"p": lucid.zeros(7, 5, dtype=lucid.float64)}
    dcp.load(target, checkpoint_id=ckpt("partial"))
    n = dist.get_world_size()
    np.testing.assert_allclose(target["p"].numpy(), X * n * (n + 1) / 2)


def _model():
    lucid.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)).double()


@check
def ddp_training_resumes_from_a_checkpoint():
    # train 2 steps, checkpoint (DDP names lose "module."), train 2 more: a fresh job that
    # loads the checkpoint and trains 2 steps ends with the same parameters
    from lucid.nn.parallel import DistributedDataParallel as DDP

    def steps(model, opt, k, seed):
        rng = np.random.default_rng(seed + dist.get_rank())
        for _ in range(k):
            x = lucid.tensor(rng.standard_normal((6, 5)))
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()

    model = DDP(_model())
    opt = lucid.optim.Adam(model.parameters(), lr=0.05)
    steps(model, opt, 2, 0)
    msd, osd = get_state_dict(model, opt)
    assert sorted(msd) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert sorted(osd["state"]) == sorted(msd) and osd["param_groups"][0]["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt("ddp"))
    steps(model, opt, 2, 10)
    want = [p.detach().numpy().copy() for p in model.parameters()]

    lucid.manual_seed(123)
    fresh = DDP(nn.Sequential(nn.Linear(5, 4), nn.ReLU(), nn.Linear(4, 3)).double())
    fopt = lucid.optim.Adam(fresh.parameters(), lr=0.05)
    msd, osd = get_state_dict(fresh, fopt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=ckpt("ddp"))
    set_state_dict(fresh, fopt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    steps(fresh, fopt, 2, 10)
    for a, b in zip(want, fresh.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a, rtol=1e-12, atol=1e-12)


@check
def a_failure_on_one_rank_raises_on_every_rank():
    class Bad:
        def __reduce__(self):
            raise RuntimeError("cannot be saved")

    sd = {"x": lucid.ones(2)}
    if dist.get_rank() == 0:
        sd["bad"] = Bad()
    try:
        dcp.save(sd, checkpoint_id=ckpt("fail"))
    except dcp.CheckpointException as e:
        assert 0 in e.failures and "rank(s) [0]" in str(e)
    else:
        raise AssertionError("no CheckpointException")
    assert not os.path.exists(os.path.join(ckpt("fail"), ".metadata"))


@check
def zero_redundancy_optimizer_steps_as_the_plain_optimizer():
    # every rank sees the same gradients (the whole batch); ZeRO's sharded Adam must give
    # plain Adam's parameters, hold state only for its share, and consolidate to plain Adam's
    # state dict, which loads back into a fresh ZeRO (another sharding of the same state)
    from lucid.distributed.optim import ZeroRedundancyOptimizer

    rng = np.random.default_rng(3)
    data = [lucid.tensor(rng.standard_normal((6, 5))) for _ in range(3)]

    def run(opt_factory, model, k):
        opt = opt_factory(model)
        for x in data[:k]:
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        return opt

    plain_model = _model()
    plain = run(lambda m: lucid.optim.Adam(m.parameters(), lr=0.05, weight_decay=0.01), plain_model, 3)
    zero_model = _model()
    zero = run(lambda m: ZeroRedundancyOptimizer(m.parameters(), optimizer_class=lucid.optim.Adam, lr=0.05,
                                                 weight_decay=0.01), zero_model, 3)
    for a, b in zip(plain_model.parameters(), zero_model.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-12, atol=1e-12)
    n, r = dist.get_world_size(), dist.get_rank()
    # the greedy partition: sizes 20, 12, 4, 3 over n ranks, largest first to the smallest share
    owners = {tuple(p.shape): zero._owner[id(p)] for p in zero_model.parameters()}
    want = {2: {(4, 5): 0, (3, 4): 1, (4,): 1, (3,): 1}, 3: {(4, 5): 0, (3, 4): 1, (4,): 2, (3,): 2}}[n]
    assert owners == want, owners
    assert {id(p) for p in zero.state} == {id(p) for p in zero_model.parameters() if zero._owner[id(p)] == r}
    zero.consolidate_state_dict(to=0)
    if r == 0:
        sd = zero.state_dict()
        ref = plain.state_dict()
        assert sorted(sd["state"]) == sorted(ref["state"])
        for i in ref["state"]:
            for key in ("exp_avg", "exp_avg_sq"):
                np.testing.assert_allclose(sd["state"][i][key].numpy(), ref["state"][i][key].numpy(), rtol=1e-12)
        assert sd["param_groups"][0]["lr"] == 0.05
    else:
        try:
            zero.state_dict()
        except RuntimeError as e:
            assert "consolidate_state_dict" in str(e)
        else:
            raise AssertionError("state_dict on a rank without the consolidated state")
    box = [zero.state_dict() if r == 0 else None]
    dist.broadcast_object_list(box, src=0)
    again = ZeroRedundancyOptimizer(zero_model.parameters(), optimizer_class=lucid.optim.Adam, lr=0.3)
    again.load_state_dict(box[0])
    assert again.param_groups[0]["lr"] == 0.05
    plain.zero_grad()
    plain_model(data[0]).pow(2).mean().backward()
    plain.step()
    again.zero_grad()
    zero_model(data[0]).pow(2).mean().backward()
    again.step()
    for a, b in zip(plain_model.parameters(), zero_model.parameters()):
        np.testing.assert_allclose(b.detach().numpy(), a.detach().numpy(), rtol=1e-12, atol=1e-12)


@check
def fully_shard_model_and_adam_state_round_trip():
    # the PyTorch DCP recipe: an FSDP2 model and its optimizer, state dicts of DTensors,
    # saved by every rank; a fresh sharded job loads them and steps on as the first would
    from lucid.distributed.fsdp import fully_shard

    def build(seed):
        lucid.manual_seed(seed)
        m = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
        for layer in (m[0], m[2]):
            fully_shard(layer)
        fully_shard(m)
        return m, lucid.optim.Adam(m.parameters(), lr=0.05)

    rng = np.random.default_rng(7)
    xs = [lucid.tensor(rng.standard_normal((4, 5))) for _ in range(3)]

    def step(m, opt, x):
        opt.zero_grad()
        m(x).pow(2).mean().backward()
        opt.step()

    model, opt = build(0)
    for x in xs[:2]:
        step(model, opt, x)
    msd, osd = get_state_dict(model, opt)
    assert isinstance(msd["0.weight"], lucid.distributed.tensor.DTensor)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=ckpt("fsdp2"))
    full = {k: v.full_tensor() for k, v in msd.items()}
    if dist.get_rank() == 0:  # for the test's one-process load of this checkpoint
        lucid.save(full, os.path.join(OUT, "fsdp2_full.pt"))
    step(model, opt, xs[2])
    want = {k: v.full_tensor().numpy() for k, v in model.state_dict().items()}

    fresh, fopt = build(1)
    msd, osd = get_state_dict(fresh, fopt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=ckpt("fsdp2"))
    set_state_dict(fresh, fopt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    step(fresh, fopt, xs[2])
    for k, v in fresh.state_dict().items():
        np.testing.assert_allclose(v.full_tensor().numpy(), want[k], rtol=1e-12, atol=1e-12)



def _set_out(out_dir):
    global OUT
    OUT = out_dir


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:], setup=_set_out)
