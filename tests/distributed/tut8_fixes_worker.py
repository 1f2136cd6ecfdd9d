"""The rank body of tests/regressions/test_tutorials_batch8_fixes.py: what the eighth batch of
tutorials (the DCP and async-save recipes) found wrong with sharded models, on real MPI ranks
(run under ``lucid-run -n 2``; same protocol as dcpworker.py: one JSON of check results per rank).
"""
import json
import os
import sys
import traceback

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.distributed.checkpoint as dcp
import lucid.nn as nn
from lucid.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     get_state_dict, set_state_dict)
from lucid.distributed.fsdp import FullyShardedDataParallel as FSDP, fully_shard
from lucid.distributed.tensor import DTensor

CHECKS = {}
OUT = None


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _net(seed):
    lucid.manual_seed(seed)  # the same weights on every rank
    return nn.Sequential(nn.Linear(6, 4), nn.Tanh(), nn.Linear(4, 3))


def _stepped(wrap, seed=0):
    model = wrap(_net(seed))
    opt = lucid.optim.Adam(model.parameters(), lr=0.1)
    x = lucid.tensor(np.random.default_rng(10 + dist.get_rank()).normal(size=(5, 6)).astype(np.float32))
    model(x).pow(2).sum().backward()
    opt.step()
    return model, opt


def _full_state(model, opt):
    _, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    return {n: {k: v.numpy() for k, v in st.items() if hasattr(v, "numpy")} for n, st in osd["state"].items()}


@check
def fully_shard_optimizer_state_dict_round_trip():
    # the local state of a DTensor parameter has the local shape: loading it back was refused
    model, opt = _stepped(fully_shard)
    before = {p: {k: v.numpy().copy() for k, v in st.items() if hasattr(v, "numpy")} for p, st in opt.state.items()}
    opt.load_state_dict(opt.state_dict())
    for p, st in before.items():
        for k, v in st.items():
            np.testing.assert_array_equal(opt.state[p][k].numpy(), v)


@check
def fully_shard_optimizer_state_is_sharded_like_its_parameters():
    model, opt = _stepped(fully_shard)
    osd = get_optimizer_state_dict(model, opt)
    p = dict(model.named_parameters())["0.weight"]
    ea = osd["state"]["0.weight"]["exp_avg"]
    assert isinstance(ea, DTensor) and tuple(ea.shape) == (4, 6) and ea.placements == p.placements
    full = _full_state(model, opt)["0.weight"]["exp_avg"]
    # every rank's rows are there: the full moment holds this rank's local piece at its offset
    r = dist.get_rank()
    np.testing.assert_array_equal(full[2 * r:2 * r + 2], opt.state[p]["exp_avg"].numpy())
    assert not np.array_equal(full[:2], full[2:])


@check
def fully_shard_dcp_keeps_every_ranks_optimizer_shard():
    model, opt = _stepped(fully_shard)
    want = _full_state(model, opt)
    path = os.path.join(OUT, "ckpt_fsdp2")
    dcp.save({"model": get_model_state_dict(model), "optim": get_optimizer_state_dict(model, opt)}, checkpoint_id=path)
    other, oopt = _stepped(fully_shard, seed=5)
    msd, osd = get_state_dict(other, oopt)
    sd = {"model": msd, "optim": osd}
    dcp.load(sd, checkpoint_id=path)
    set_state_dict(other, oopt, model_state_dict=sd["model"], optim_state_dict=sd["optim"])
    got = _full_state(other, oopt)
    for name in want:
        for k in want[name]:
            np.testing.assert_array_equal(got[name][k], want[name][k], err_msg=f"{name} {k}")


@check
def fsdp_optimizer_state_is_named_per_parameter():
    model, opt = _stepped(FSDP)
    osd = get_optimizer_state_dict(model, opt)
    assert sorted(osd["state"]) == ["0.bias", "0.weight", "2.bias", "2.weight"], sorted(osd["state"])
    assert tuple(osd["state"]["0.weight"]["exp_avg"].shape) == (4, 6)
    assert osd["param_groups"][0]["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]


@check
def fsdp_set_state_dict_loads_model_and_optimizer():
    model, opt = _stepped(FSDP)
    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True))
    want_m = {k: v.numpy().copy() for k, v in msd.items()}
    want_o = _full_state(model, opt)
    other, oopt = _stepped(FSDP, seed=5)
    set_state_dict(other, oopt, model_state_dict=msd, optim_state_dict=osd)
    got_m = {k: v.numpy() for k, v in get_model_state_dict(other, options=StateDictOptions(full_state_dict=True)).items()}
    for k in want_m:
        np.testing.assert_array_equal(got_m[k], want_m[k], err_msg=k)
    got_o = _full_state(other, oopt)
    for name in want_o:
        for k in want_o[name]:
            np.testing.assert_array_equal(got_o[name][k], want_o[name][k], err_msg=f"{name} {k}")


def main(out_dir):
    global OUT
    OUT = out_dir
    dist.init_process_group("mpi")
    res = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            res[name] = "ok"
        except Exception:
            res[name] = traceback.format_exc()
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
