"""The rank body of test_dcp.py's reshard test: a checkpoint saved on one world size is loaded
on another (NOTE [Distributed checkpoints]). The test writes the phase ("save" or "load")
and the world size of the other job into ``<out_dir>/phase`` before each launch; the
checkpoint of an n-rank job is ``<out_dir>/ckpt_w<n>``.
"""
import os
import sys

import numpy as np

import lucid
import lucid.distributed as dist
import lucid.distributed.checkpoint as dcp
from lucid.distributed.tensor import Replicate, Shard, distribute_tensor

CHECKS = {}
OUT = None
X = np.arange(91.0).reshape(13, 7) / 5 - 4  # 13 rows: pieces of 5,5,3 on 3 ranks, 7,6 on 2 (torch.chunk)


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _phase():
    with open(os.path.join(OUT, "phase")) as f:
        phase, other = f.read().split()
    return phase, int(other)


@check
def save_or_reshard_on_load():
    n, r = dist.get_world_size(), dist.get_rank()
    m = dist.init_device_mesh("cpu", (n,))
    phase, other = _phase()
    if phase == "save":
        sd = {"w": distribute_tensor(lucid.tensor(X), m, [Shard(0)]),
              "v": distribute_tensor(lucid.tensor(X.T.copy()), m, [Shard(0)]), "step": 11 * n,
              "optim": {"state": {"w": {"exp_avg": distribute_tensor(lucid.tensor(-X), m, [Shard(0)]),
                                        "step": lucid.tensor(float(n))}},
                        "param_groups": [{"lr": 0.1 * n, "params": ["w"]}]}}
        meta = dcp.save(sd, checkpoint_id=os.path.join(OUT, f"ckpt_w{n}"))
        assert len(meta.state_dict_metadata["w"]["chunks"]) == n
        return
    path = os.path.join(OUT, f"ckpt_w{other}")
    assert os.path.exists(os.path.join(path, ".metadata")), f"no {other}-rank checkpoint at {path}"
    zeros = lambda shape: lucid.zeros(*shape, dtype=lucid.float64)  # noqa: E731
    target = {"w": distribute_tensor(zeros((13, 7)), m, [Shard(0)]),
              "v": distribute_tensor(zeros((7, 13)), m, [Replicate()]), "step": 0}
    dcp.load(target, checkpoint_id=path)
    rows = np.array_split(np.arange(13), [Shard.local_offset(13, n, q) for q in range(1, n)])[r]
    local_w = target["w"].to_local().numpy()
    assert target["w"].placements == (Shard(0),) and local_w.shape == (len(rows), 7)
    np.testing.assert_array_equal(local_w, X[rows])  # this rank's rows of the new layout
    np.testing.assert_array_equal(target["v"].to_local().numpy(), X.T)
    assert target["step"] == 11 * other
    # the optimizer state by parameter names, laid out as the (new) parameter
    from lucid.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict

    optim = load_sharded_optimizer_state_dict({"w": target["w"]}, "optim", dcp.FileSystemReader(path))["optim"]
    avg = optim["state"]["w"]["exp_avg"]
    assert avg.placements == (Shard(0),) and avg.device_mesh == m
    np.testing.assert_array_equal(avg.to_local().numpy(), -X[rows])
    assert optim["state"]["w"]["step"].item() == other
    assert optim["param_groups"] == [{"lr": 0.1 * other, "params": ["w"]}]
    # and back into a Shard(1) layout of the row-sharded value
    cols = {"w": distribute_tensor(zeros((13, 7)), m, [Shard(1)])}
    dcp.load(cols, checkpoint_id=path)
    np.testing.assert_array_equal(cols["w"].full_tensor().numpy(), X)


def _set_out(out_dir):
    global OUT
    OUT = out_dir


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:], setup=_set_out)
