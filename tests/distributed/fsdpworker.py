"""The rank body of test_fsdp.py: FSDP, batched point-to-point, monitored_barrier, subgroups and
DeviceMesh on real MPI ranks (run under ``lucid-run -n N``; same protocol as mpiworker.py).

Every FSDP check trains a copy of the model in this process on the whole batch (the
reference) next to the FSDP model fed this rank's slice, and compares in float64.
"""
import datetime
import functools
import json
import os
import sys
import time
import traceback

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.nn as nn
from lucid.distributed.fsdp import (FullStateDictConfig, FullyShardedDataParallel as FSDP, MixedPrecision,
                                    ShardingStrategy as SS, StateDictType)
from lucid.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def rank_world():
    return dist.get_rank(), dist.get_world_size()


B, IN, OUT = 6, 5, 2
RNG = np.random.default_rng(7)
X, Y = RNG.standard_normal((B, IN)), RNG.standard_normal((B, OUT))


def make(seed=0):
    lucid.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN, 7), nn.Tanh(), nn.Sequential(nn.Linear(7, 3), nn.Tanh()),
                         nn.Linear(3, OUT)).double()


def loss_on(model, lo, hi, world):
    """This slice's share of the full-batch mean squared error (the ranks' average is the full loss)."""
    d = model(lucid.tensor(X[lo:hi])) - lucid.tensor(Y[lo:hi])
    return (d * d).sum() * (world / (B * OUT))


def my_slice():
    r, n = rank_world()
    return r * B // n, (r + 1) * B // n


def step_both(ref, model, o_ref, o_mod, clip=None):
    lo, hi = my_slice()
    o_ref.zero_grad(), o_mod.zero_grad()
    loss_on(ref, 0, B, 1).backward()
    loss_on(model, lo, hi, dist.get_world_size()).backward()
    if clip is not None:
        want = lucid.nn.utils.clip_grad_norm_(ref.parameters(), clip[0], norm_type=clip[1])
        got = model.clip_grad_norm_(clip[0], norm_type=clip[1])
        np.testing.assert_allclose(got.item(), want.item(), rtol=1e-12, err_msg=f"clip norm {clip}")
    o_ref.step(), o_mod.step()


def same_params(model, ref, what, tol=1e-12):
    sd, rsd = model.state_dict(), ref.state_dict()
    assert list(sd) == list(rsd), f"{what}: keys {list(sd)} != {list(rsd)}"
    for k in sd:
        np.testing.assert_allclose(sd[k].numpy(), rsd[k].numpy(), rtol=tol, atol=tol, err_msg=f"{what}: {k}")


def units(model):
    return [m for m in model.modules() if isinstance(m, FSDP)]


def assert_sharded(model, what):
    """Outside forward/backward a rank stores ceil(numel / world) elements per unit, nothing gathered."""
    n = dist.get_world_size()
    total = stored = 0
    for u in units(model):
        numel = sum(s.numel for s in u._slots)
        want = numel if u.sharding_strategy is SS.NO_SHARD else -(-numel // n)
        assert u._flat_param.numel() == want, f"{what}: shard of {u._flat_param.numel()}, want {want}"
        assert u._full is None or u.sharding_strategy is SS.NO_SHARD, f"{what}: a gathered vector is left"
        for s in u._slots:
            size = s.param._data.size
            assert size == (s.numel if u.sharding_strategy is SS.NO_SHARD else 0), f"{what}: original holds {size}"
        total, stored = total + numel, stored + u._flat_param.numel()
    assert stored == sum(p.numel() for p in model.parameters())
    return total, stored


POLICIES = {"flat": None, "nested": ModuleWrapPolicy({nn.Linear}),
            "size": functools.partial(size_based_auto_wrap_policy, min_num_params=20)}


@check
def fsdp_matches_single_process_training_for_each_strategy():
    r, n = rank_world()
    for strategy in (SS.FULL_SHARD, SS.SHARD_GRAD_OP, SS.NO_SHARD):
        for name, policy in POLICIES.items():
            what = f"{strategy.name}/{name}"
            ref, model = make(), FSDP(make(), sharding_strategy=strategy, auto_wrap_policy=policy)
            if name != "flat":
                assert len(units(model)) > 1, what
            o_ref = lucid.optim.SGD(ref.parameters(), lr=0.2, momentum=0.9)
            o_mod = lucid.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
            for _ in range(3):
                step_both(ref, model, o_ref, o_mod)
                total, stored = assert_sharded(model, what)
            assert total == sum(p.numel() for p in ref.parameters()), what
            if strategy is not SS.NO_SHARD:
                assert stored <= total / n + len(units(model)), f"{what}: {stored} of {total} stored"
            same_params(model, ref, what)


@check
def fsdp_frees_between_forward_and_backward_only_for_full_shard():
    lo, hi = my_slice()
    for strategy, held in ((SS.FULL_SHARD, False), (SS.SHARD_GRAD_OP, True)):
        model = FSDP(make(), sharding_strategy=strategy)
        seen = []
        model.module[0].register_forward_hook(lambda m, i, o: seen.append(m.weight.shape))
        loss = loss_on(model, lo, hi, dist.get_world_size())
        assert seen == [(7, IN)], seen  # the full weight inside the forward
        sizes = {s.param._data.size > 0 for s in model._slots}
        assert sizes == {held}, (strategy, sizes)
        loss.backward()
        assert_sharded(model, strategy.name)
        with lucid.no_grad():  # an evaluation forward leaves nothing gathered either
            loss_on(model, lo, hi, 1)
        assert_sharded(model, strategy.name + " no_grad")


@check
def fsdp_no_sync_accumulates_then_reduces():
    r, n = rank_world()
    lo, hi = my_slice()
    mid = (lo + hi) // 2
    for strategy in (SS.FULL_SHARD, SS.NO_SHARD):
        ref, model = make(), FSDP(make(), sharding_strategy=strategy, auto_wrap_policy=POLICIES["nested"])
        o_ref = lucid.optim.SGD(ref.parameters(), lr=0.3)
        o_mod = lucid.optim.SGD(model.parameters(), lr=0.3)
        loss_on(ref, 0, B, 1).backward()
        with model.no_sync():
            loss_on(model, lo, mid, n).backward()
        assert all(u._flat_param.grad is None for u in units(model)), "no_sync reduced something"
        loss_on(model, mid, hi, n).backward()
        o_ref.step(), o_mod.step()
        same_params(model, ref, f"no_sync {strategy.name}")
        assert_sharded(model, "after no_sync")


@check
def fsdp_clip_grad_norm_is_global():
    for norm_type in (2.0, float("inf")):
        ref, model = make(), FSDP(make(), auto_wrap_policy=POLICIES["size"])
        o_ref = lucid.optim.SGD(ref.parameters(), lr=0.5)
        o_mod = lucid.optim.SGD(model.parameters(), lr=0.5)
        for _ in range(2):
            step_both(ref, model, o_ref, o_mod, clip=(0.05, norm_type))
        same_params(model, ref, f"clip {norm_type}")


@check
def fsdp_full_state_dict_rank0_only_and_load():
    r, n = rank_world()
    ref = make(seed=3)
    model = FSDP(make(), auto_wrap_policy=POLICIES["nested"])
    full = ref.state_dict()
    model.load_state_dict(full)
    same_params(model, ref, "after load")
    cfg = FullStateDictConfig(offload_to_cpu=True, rank0_only=True)
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, cfg):
        sd = model.state_dict()
    assert (list(sd) == list(full)) if r == 0 else sd == {}, list(sd)
    assert model._sd_config == FullStateDictConfig(), "state_dict_type did not restore the config"
    before = [u._flat_param.numpy().copy() for u in units(model)]
    bad = dict(full)
    bad["2.0.weight"] = lucid.zeros(3, 8)
    for broken, msg in ((bad, "size mismatch for 2.0.weight"), ({k: full[k] for k in list(full)[1:]}, "Missing key")):
        try:
            model.load_state_dict(broken)
            raise AssertionError("a bad state dict loaded")
        except RuntimeError as e:
            assert msg in str(e), str(e)
        for b, u in zip(before, units(model)):
            np.testing.assert_array_equal(u._flat_param.numpy(), b, err_msg="a failed load changed a shard")
    with FSDP.state_dict_type(model, StateDictType.LOCAL_STATE_DICT):
        local = model.state_dict()
        assert list(local) == ["0._flat_param", "2.0._flat_param", "3._flat_param"], list(local)
        model.load_state_dict(local)
    same_params(model, ref, "after local round trip")
    # PyTorch's names (NOTE [FSDP names]): the prefixes stay outside summon_full_params, go inside
    w = "_fsdp_wrapped_module."
    assert [k for k, _ in model.named_parameters()] == [f"{w}0.{w}_flat_param", f"{w}2.0.{w}_flat_param",
                                                        f"{w}3.{w}_flat_param"], list(model.named_parameters())
    with FSDP.summon_full_params(model):
        assert [(k, tuple(p.shape)) for k, p in model.named_parameters()] == \
            [(k, tuple(p.shape)) for k, p in ref.named_parameters()], list(model.named_parameters())
        assert [tuple(p.shape) for p in model.parameters()] == [tuple(p.shape) for p in ref.parameters()]


@check
def fsdp_optimizer_state_round_trip():
    """Adam's moments, gathered by name, equal the single-process optimizer's; loading them back into a
    fresh FSDP model and optimizer continues the same training."""
    from lucid.distributed.fsdp import FullOptimStateDictConfig

    r, n = rank_world()
    ref, model = make(), FSDP(make(), auto_wrap_policy=POLICIES["nested"])
    o_ref, o_mod = lucid.optim.Adam(ref.parameters(), lr=0.05), lucid.optim.Adam(model.parameters(), lr=0.05)
    for _ in range(2):
        step_both(ref, model, o_ref, o_mod)
    full = FSDP.optim_state_dict(model, o_mod)
    names = [k for k, _ in ref.named_parameters()]
    want = o_ref.state_dict()
    assert sorted(full["state"]) == sorted(names) and full["param_groups"][0]["params"] == names
    for i, name in enumerate(names):
        for key, v in want["state"][i].items():
            got = full["state"][name][key]
            np.testing.assert_allclose(np.asarray(got.numpy() if hasattr(got, "numpy") else got),
                                       np.asarray(v.numpy() if hasattr(v, "numpy") else v),
                                       rtol=1e-12, atol=1e-15, err_msg=f"{name} {key}")
    with FSDP.state_dict_type(model, StateDictType.FULL_STATE_DICT, FullStateDictConfig(),
                              FullOptimStateDictConfig(rank0_only=True)):
        only0 = FSDP.optim_state_dict(model, o_mod)
    assert (only0 != {}) == (r == 0)
    sd = model.state_dict()
    fresh = FSDP(make(seed=5), auto_wrap_policy=POLICIES["nested"])
    fresh.load_state_dict(sd)
    o_new = lucid.optim.Adam(fresh.parameters(), lr=0.05)
    FSDP.optim_state_dict_to_load(fresh, o_new, full, load_directly=True)
    step_both(ref, fresh, o_ref, o_new)
    same_params(fresh, ref, "after resuming from the optimizer checkpoint")


@check
def fsdp_summon_full_params_and_writeback():
    ref = make()
    model = FSDP(make(), sharding_strategy=SS.FULL_SHARD, auto_wrap_policy=POLICIES["nested"])
    with FSDP.summon_full_params(model):
        np.testing.assert_array_equal(model.module[0].weight.numpy(), ref[0].weight.numpy())
        model.module[3].bias._data[...] = 5.0  # every rank edits its full copy the same way
    with FSDP.summon_full_params(model, writeback=False):
        np.testing.assert_array_equal(model.module[3].bias.numpy(), [5.0, 5.0])
        model.module[3].bias._data[...] = -1.0  # dropped on exit
    assert_sharded(model, "after summon")
    sd = model.state_dict()
    np.testing.assert_array_equal(sd["3.bias"].numpy(), [5.0, 5.0])


@check
def fsdp_mixed_precision_and_hybrid_shard():
    r, n = rank_world()
    ref = make()
    mp = MixedPrecision(param_dtype=lucid.float32, reduce_dtype=lucid.float32)
    model = FSDP(make(), mixed_precision=mp, auto_wrap_policy=POLICIES["nested"])
    o_ref = lucid.optim.SGD(ref.parameters(), lr=0.2)
    o_mod = lucid.optim.SGD(model.parameters(), lr=0.2)
    step_both(ref, model, o_ref, o_mod)
    assert all(p.dtype == lucid.float64 for p in model.parameters())  # the shards keep full precision
    same_params(model, ref, "mixed precision", tol=1e-5)
    meshes = [None, dist.init_device_mesh("cpu", (1, n), mesh_dim_names=("replicate", "shard"))]
    if n > 1:
        meshes.append(dist.init_device_mesh("cpu", (n, 1), mesh_dim_names=("replicate", "shard")))
    for mesh in meshes:
        ref = make()
        model = FSDP(make(), sharding_strategy=SS.HYBRID_SHARD, device_mesh=mesh,
                     auto_wrap_policy=POLICIES["nested"])
        o_ref = lucid.optim.SGD(ref.parameters(), lr=0.2)
        o_mod = lucid.optim.SGD(model.parameters(), lr=0.2)
        for _ in range(2):
            step_both(ref, model, o_ref, o_mod)
        same_params(model, ref, f"hybrid {mesh}")


@check
def fsdp_bad_arguments_say_so():
    def raises(fn, exc, text):
        try:
            fn()
        except exc as e:
            assert str(e).startswith(text), str(e)
            return
        raise AssertionError(f"no {exc.__name__} for {text}")

    mixed = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2).double())
    raises(lambda: FSDP(mixed), ValueError, "FullyShardedDataParallel: a unit's parameters must share one dtype")
    raises(lambda: FSDP(make(), use_orig_params=True), NotImplementedError, "FullyShardedDataParallel: use_orig")
    mesh = dist.init_device_mesh("cpu", (dist.get_world_size(),))
    raises(lambda: FSDP(make(), sharding_strategy=SS.HYBRID_SHARD, device_mesh=mesh), ValueError,
           "FullyShardedDataParallel: HYBRID_SHARD needs a 2-D device_mesh")
    r, n = rank_world()
    if n > 1:  # rank 1 built a wider first layer: every rank refuses, naming both ranks
        odd = make()
        if r == 1:
            odd[0], odd[2][0] = nn.Linear(IN, 8).double(), nn.Linear(8, 3).double()
        raises(lambda: FSDP(odd, auto_wrap_policy=POLICIES["nested"]), ValueError,
               "FullyShardedDataParallel: the module differs across ranks: rank 0 has parameter "
               "('0.weight', (7, 5), 'lucid.float64', True) where rank 1 has ('0.weight', (8, 5)")
        assert not any(isinstance(m, FSDP) for m in odd.modules()), "a refused wrap changed the module"
    half = nn.Sequential(nn.Linear(2, 2).double(), nn.Linear(2, 2), nn.Sequential(nn.Linear(2, 2)))
    raises(lambda: FSDP(half, auto_wrap_policy=ModuleWrapPolicy({nn.Sequential})), ValueError,
           "FullyShardedDataParallel: a unit's parameters must share one dtype")
    assert not any(isinstance(m, FSDP) for m in half.modules()), "a refused wrap wrapped a child"
    model = FSDP(make())
    raises(lambda: FSDP.set_state_dict_type(model, StateDictType.SHARDED_STATE_DICT), NotImplementedError,
           "FullyShardedDataParallel.set_state_dict_type: SHARDED_STATE_DICT")


# --------------------------------------------------------- point to point, groups


@check
def batch_isend_irecv_ring_and_objects():
    r, n = rank_world()
    if n == 1:
        return
    right, left = (r + 1) % n, (r - 1) % n
    out = lucid.tensor(np.full(3, float(r)))
    got = lucid.zeros(3, dtype=lucid.float64)
    works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got, left), dist.P2POp(dist.isend, out, right)])
    for w in works:
        w.wait()
    np.testing.assert_array_equal(got.numpy(), [left] * 3)
    try:
        dist.batch_isend_irecv([dist.P2POp(dist.isend, out, right), dist.P2POp(dist.irecv, got, r)])
        raise AssertionError("a self receive was accepted")
    except ValueError as e:
        assert "batch_isend_irecv: p2p_op_list[1]" in str(e), str(e)
    if r == 0:
        dist.send_object_list([{"lr": 0.1}, "x", 3], dst=1)
        dist.send_object_list([1, 2], dst=1)
    elif r == 1:
        objs = [None, None, None]
        assert dist.recv_object_list(objs, src=0) == 0 and objs == [{"lr": 0.1}, "x", 3], objs
        short = [None]
        try:
            dist.recv_object_list(short)
            raise AssertionError("a short object_list was filled")
        except ValueError as e:
            assert str(e).startswith("recv_object_list: rank 0 sent 2 objects") and short == [None], str(e)


@check
def monitored_barrier_names_the_late_rank():
    r, n = rank_world()
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    if n == 1:
        return
    late = n - 1
    if r == late:
        time.sleep(0.6)
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(milliseconds=150))
        raise AssertionError("the late rank went unnoticed")
    except RuntimeError as e:
        if r == late:
            assert "got no answer from rank 0" in str(e), str(e)
        else:
            assert str(e) == f"monitored_barrier: Rank {late} failed to pass monitoredBarrier in 150 ms", str(e)
    dist.barrier()
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))  # the late message is dropped


@check
def subgroups_and_device_mesh():
    r, n = rank_world()
    mine, groups = dist.new_subgroups(group_size=1)
    assert len(groups) == n and dist.get_process_group_ranks(mine) == [r]
    mine, groups = dist.new_subgroups()  # one machine: everyone
    assert dist.get_process_group_ranks(mine) == list(range(n))
    try:
        dist.new_subgroups_by_enumeration([[0], [0]])
        raise AssertionError("an overlap was accepted")
    except ValueError as e:
        assert str(e).startswith("new_subgroups_by_enumeration: rank 0 has appeared in both"), str(e)
    assert dist.get_node_local_rank() == r  # one machine
    mesh = dist.init_device_mesh("cpu", (n,), mesh_dim_names=("dp",))
    t = lucid.tensor([float(r)])
    dist.all_reduce(t, group=mesh.get_group())
    assert t.item() == n * (n - 1) / 2 and mesh.get_local_rank() == r
    for shape in {(1, n), (n, 1)}:
        m2 = dist.init_device_mesh("cpu", shape, mesh_dim_names=("dp", "tp"))
        np.testing.assert_array_equal(m2.mesh.numpy(), np.arange(n).reshape(shape))
        row, col = divmod(r, shape[1])
        assert (m2.get_local_rank("dp"), m2.get_local_rank(1)) == (row, col)
        assert m2["tp"].mesh.numpy().tolist() == list(range(row * shape[1], (row + 1) * shape[1]))
        assert m2["dp"].size() == shape[0] and m2.size() == n and m2.size(1) == shape[1]
        for dim in ("dp", "tp"):
            t = lucid.tensor([float(r)])
            dist.all_reduce(t, group=m2.get_group(dim))
            assert t.item() == sum(m2[dim].mesh.numpy().tolist()), (shape, dim)
    from lucid.distributed.device_mesh import DeviceMesh

    assert DeviceMesh is dist.DeviceMesh


def main():
    out_dir, names = sys.argv[1], sys.argv[2:] or list(CHECKS)
    dist.init_process_group("mpi")
    results = {}
    for name in names:
        try:
            CHECKS[name]()
            results[name] = "ok"
        except Exception:  # noqa: BLE001  (reported to pytest, as in mpiworker.py)
            results[name] = traceback.format_exc()
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
