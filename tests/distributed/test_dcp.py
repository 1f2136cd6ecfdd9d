"""Distributed checkpoints (``lucid.distributed.checkpoint``), the name-keyed state dicts, and
``lucid.distributed.optim.ZeroRedundancyOptimizer`` (sharded optimizer state).

The MPI part is one ``lucid-run`` launch per world size running every check of dcpworker.py;
a checkpoint it saved on 2 or 3 ranks is then loaded here, in one process. The rest runs
without MPI: single-process save/load, Stateful objects, the all-or-nothing load, an
interrupted save, the optimizer state under parameter names and the file converters.
"""
import importlib.util
import json
import os
import sys

import numpy as np
import pytest

import lucid
import lucid.distributed.checkpoint as dcp
import lucid.nn as nn
from lucid.distributed.checkpoint.format_utils import dcp_to_torch_save, torch_save_to_dcp
from lucid.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict, get_optimizer_state_dict,
                                                     get_state_dict, set_model_state_dict, set_optimizer_state_dict,
                                                     set_state_dict)
from lucid.distributed.run import find_mpiexec

from rankchecks import assert_checks_pass  # noqa: E402  (pytest puts this folder on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None
X = np.arange(35.0).reshape(7, 5) / 7 - 2


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}ranks")
def test_every_dcp_check_on_every_rank_then_load_in_one_process(n, tmp_path):
    sys.path.insert(0, HERE)
    import dcpworker

    assert_checks_pass("dcpworker.py", dcpworker.CHECKS, n, tmp_path, timeout=90)
    # the n-rank checkpoint of sharded values, read back whole by one process
    target = {"row": lucid.zeros(7, 5, dtype=lucid.float64), "col": lucid.zeros(7, 5, dtype=lucid.float64),
              "rep": lucid.zeros(7, 5, dtype=lucid.float64), "step": 0}
    dcp.load(target, checkpoint_id=tmp_path / "ckpt_dtensors")
    for key in ("row", "col", "rep"):
        np.testing.assert_array_equal(target[key].numpy(), X)
    assert target["step"] == 7
    # the FSDP2 model's sharded checkpoint loads into the plain model
    plain = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3)).double()
    sd = {"model": plain.state_dict()}
    dcp.load(sd, checkpoint_id=tmp_path / "ckpt_fsdp2")
    full = lucid.load(tmp_path / "fsdp2_full.pt")
    for k, v in sd["model"].items():
        np.testing.assert_array_equal(v.numpy(), full[k].numpy())
    meta = dcp.FileSystemReader(tmp_path / "ckpt_dtensors").read_metadata()
    assert meta.world_size == n and len(meta.state_dict_metadata["row"]["chunks"]) == min(n, 7)


# ------------------------------------------------------------------ without MPI


def _model(seed):
    lucid.manual_seed(seed)
    return nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))


def test_model_and_optimizer_round_trip(tmp_path):
    model = _model(0)
    opt = lucid.optim.Adam(model.parameters(), lr=0.1)
    model(lucid.randn(5, 3)).sum().backward()
    opt.step()
    dcp.save({"model": model.state_dict(), "optim": opt.state_dict()}, checkpoint_id=tmp_path)
    other = _model(1)
    oopt = lucid.optim.Adam(other.parameters(), lr=0.1)
    other(lucid.randn(5, 3)).sum().backward()
    oopt.step()  # gives the optimizer state entries to load into
    sd = {"model": other.state_dict(), "optim": oopt.state_dict()}
    dcp.load(sd, checkpoint_id=tmp_path)
    other.load_state_dict(sd["model"])
    oopt.load_state_dict(sd["optim"])
    for a, b in zip(model.parameters(), other.parameters()):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    for p, q in zip(model.parameters(), other.parameters()):
        np.testing.assert_array_equal(opt.state[p]["exp_avg_sq"].numpy(), oopt.state[q]["exp_avg_sq"].numpy())


def test_stateful_objects_go_through_their_methods(tmp_path):
    class Counter:
        def __init__(self, n):
            self.n = n

        def state_dict(self):
            return {"n": self.n, "t": lucid.full((2,), float(self.n))}

        def load_state_dict(self, sd):
            self.n = sd["n"] + 1000 * int(sd["t"][0].item())

    dcp.save({"c": Counter(3)}, checkpoint_id=tmp_path)
    c = Counter(0)
    dcp.load({"c": c}, checkpoint_id=tmp_path)
    assert c.n == 3003


def test_load_checks_everything_before_changing_anything(tmp_path):
    dcp.save({"a": lucid.ones(3), "b": lucid.ones(2, 2)}, checkpoint_id=tmp_path)
    a, b = lucid.zeros(3), lucid.zeros(2, 3)
    with pytest.raises(dcp.CheckpointException, match="size mismatch for 'b'"):
        dcp.load({"a": a, "b": b}, checkpoint_id=tmp_path)
    assert float(a.sum()) == 0.0  # a was not half-loaded
    with pytest.raises(dcp.CheckpointException, match="missing key"):
        dcp.load({"a": a, "zzz": lucid.zeros(1)}, checkpoint_id=tmp_path)
    assert float(a.sum()) == 0.0
    dcp.load({"a": a}, checkpoint_id=tmp_path)  # a checkpoint may hold more than is asked for
    assert float(a.sum()) == 3.0
    with pytest.raises(dcp.CheckpointException, match="holds no checkpoint"):
        dcp.load({"a": a}, checkpoint_id=tmp_path / "nothing")


def test_an_interrupted_save_keeps_the_previous_checkpoint(tmp_path):
    dcp.save({"a": lucid.ones(3), "n": 1}, checkpoint_id=tmp_path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("boom")

    with pytest.raises(dcp.CheckpointException, match="can.t save an object of type Unpicklable"):
        dcp.save({"a": lucid.full((3,), 2.0), "n": Unpicklable()}, checkpoint_id=tmp_path)
    sd = {"a": lucid.zeros(3), "n": 0}
    dcp.load(sd, checkpoint_id=tmp_path)
    assert sd["n"] == 1 and float(sd["a"].sum()) == 3.0
    # a later good save replaces it and leaves only its own data file
    dcp.save({"a": lucid.full((3,), 2.0), "n": 2}, checkpoint_id=tmp_path)
    names = sorted(os.listdir(tmp_path))
    assert names[0] == ".metadata" and sum(n.endswith(".distcp") for n in names) == 1, names
    assert not [n for n in names if "tmp" in n], names


def test_a_checkpoint_file_runs_no_code(tmp_path):
    # the data files are lucid.save files read with weights_only: a pickled callable is refused
    import pickle

    dcp.save({"a": lucid.ones(1)}, checkpoint_id=tmp_path)
    data = [n for n in os.listdir(tmp_path) if n.endswith(".distcp")][0]

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned > " + str(tmp_path / "pwned"),))

    with open(tmp_path / data, "wb") as f:
        pickle.dump({"a@0": Evil()}, f)
    with pytest.raises(dcp.CheckpointException):
        dcp.load({"a": lucid.zeros(1)}, checkpoint_id=tmp_path)
    assert not (tmp_path / "pwned").exists()


def test_optimizer_state_is_keyed_by_parameter_names():
    model = _model(0)
    opt = lucid.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    osd = get_optimizer_state_dict(model, opt)
    # PyTorch initialises missing state by a step with zero gradients and lr 0: nothing moves
    assert sorted(osd["state"]) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert osd["param_groups"][0]["params"] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert osd["param_groups"][0]["lr"] == 0.1 and all(p.grad is None for p in model.parameters())
    np.testing.assert_array_equal(osd["state"]["0.weight"]["momentum_buffer"].numpy(), np.zeros((4, 3)))
    # a trained optimizer's buffers land on the same-named parameters of another model
    model(lucid.randn(4, 3)).pow(2).sum().backward()
    opt.step()
    msd, osd = get_state_dict(model, opt)
    other = _model(5)
    oopt = lucid.optim.SGD(other.parameters(), lr=0.5, momentum=0.9)
    set_state_dict(other, oopt, model_state_dict=msd, optim_state_dict=osd)
    assert oopt.param_groups[0]["lr"] == 0.1
    for p, q in zip(model.parameters(), other.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())
        np.testing.assert_array_equal(opt.state[p]["momentum_buffer"].numpy(), oopt.state[q]["momentum_buffer"].numpy())


def test_model_state_dict_options_and_wrapper_names():
    from lucid.utils.checkpoint import checkpoint  # noqa: F401  (the wrapper name is what matters)

    class Wrapped(nn.Module):  # the names activation-checkpoint and compile wrappers insert
        def __init__(self):
            super().__init__()
            self._checkpoint_wrapped_module = nn.Linear(2, 2)
            self.head = nn.Linear(2, 1)

    m = Wrapped()
    m.head.bias.requires_grad_(False)
    assert sorted(get_model_state_dict(m)) == ["bias", "head.bias", "head.weight", "weight"]
    assert "head.bias" not in get_model_state_dict(m, options=StateDictOptions(ignore_frozen_params=True))
    assert sorted(get_model_state_dict(m, submodules={m.head}, options=StateDictOptions(keep_submodule_prefixes=False))) == ["bias", "weight"]
    sd = {k: v * 0 + 3 for k, v in get_model_state_dict(m).items()}
    keys = set_model_state_dict(m, sd)
    assert keys.missing_keys == [] and float(m._checkpoint_wrapped_module.weight.detach().sum()) == 12.0
    with pytest.raises(RuntimeError, match="missing keys"):
        set_model_state_dict(m, {"weight": lucid.zeros(2, 2)})
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        set_model_state_dict(m, dict(sd, weight=lucid.zeros(3, 2)))
    assert float(m._checkpoint_wrapped_module.weight.detach().sum()) == 12.0  # nothing half-loaded


def test_format_utils_convert_both_ways(tmp_path):
    # the single file keeps the saved nesting, as PyTorch's converter rebuilds it
    sd = {"m": {"w": lucid.tensor(X), "layers": [lucid.ones(2), {"b": lucid.zeros(1)}]}, "k": 5, "t": (lucid.ones(1), 3)}
    dcp.save(sd, checkpoint_id=tmp_path / "d")
    dcp_to_torch_save(tmp_path / "d", tmp_path / "full.pt")
    full = lucid.load(tmp_path / "full.pt")
    assert sorted(full) == ["k", "m", "t"] and sorted(full["m"]) == ["layers", "w"]
    np.testing.assert_array_equal(full["m"]["w"].numpy(), X)
    np.testing.assert_array_equal(full["m"]["layers"][0].numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(full["m"]["layers"][1]["b"].numpy(), [0.0])
    assert full["k"] == 5 and full["t"][1] == 3  # a tuple is one value, as PyTorch's planner keeps it
    torch_save_to_dcp(tmp_path / "full.pt", tmp_path / "d2")
    back = {"m": {"w": lucid.zeros(7, 5, dtype=lucid.float64), "layers": [lucid.zeros(2), {"b": lucid.ones(1)}]},
            "k": 0, "t": None}
    dcp.load(back, checkpoint_id=tmp_path / "d2")
    np.testing.assert_array_equal(back["m"]["w"].numpy(), X)
    assert float(back["m"]["layers"][0].sum()) == 2.0 and float(back["m"]["layers"][1]["b"].sum()) == 0.0
    assert back["k"] == 5 and back["t"][1] == 3


def test_async_save_returns_a_done_future(tmp_path):
    fut = dcp.async_save({"a": lucid.ones(2)}, checkpoint_id=tmp_path)
    assert fut.done() and "a" in fut.result().state_dict_metadata


def test_custom_planners_and_storage_are_refused_clearly(tmp_path):
    with pytest.raises(NotImplementedError, match="custom planners"):
        dcp.save({"a": lucid.ones(1)}, checkpoint_id=tmp_path, planner=object())
    dcp.save({"a": lucid.ones(1)}, storage_writer=dcp.FileSystemWriter(tmp_path), planner=dcp.DefaultSavePlanner())
    with pytest.raises(ValueError, match="checkpoint_id"):
        dcp.load({"a": lucid.ones(1)})


def test_zero_redundancy_optimizer_in_one_process_is_its_local_optimizer():
    from lucid.distributed.optim import ZeroRedundancyOptimizer

    model, ref = _model(0), _model(0)
    zero = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=lucid.optim.SGD, lr=0.1, momentum=0.9)
    plain = lucid.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    sched = lucid.optim.lr_scheduler.StepLR(zero, step_size=1, gamma=0.5)
    psched = lucid.optim.lr_scheduler.StepLR(plain, step_size=1, gamma=0.5)
    x = lucid.randn(4, 3)
    for _ in range(3):
        for m, o, s in ((model, zero, sched), (ref, plain, psched)):
            o.zero_grad()
            m(x).pow(2).sum().backward()
            o.step()
            s.step()
    # the scheduler's lr reached the local optimizer (0.1, 0.05, 0.025 were used)
    assert zero.param_groups[0]["lr"] == plain.param_groups[0]["lr"] == 0.0125
    for a, b in zip(model.parameters(), ref.parameters()):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-12)
    zero.add_param_group({"params": [lucid.zeros(2, requires_grad=True)], "lr": 1.0})
    assert len(zero.param_groups) == 2 and zero._local.param_groups[1]["lr"] == 1.0
    with pytest.raises(RuntimeError, match="consolidate_state_dict"):
        zero.state_dict()
    zero.consolidate_state_dict()
    assert sorted(zero.state_dict()["state"]) == [0, 1, 2, 3]
    with pytest.raises(NotImplementedError, match="overlap_with_ddp"):
        ZeroRedundancyOptimizer(model.parameters(), optimizer_class=lucid.optim.SGD, lr=0.1, overlap_with_ddp=True)
    with pytest.raises(TypeError, match="optimizer_class"):
        ZeroRedundancyOptimizer(model.parameters(), optimizer_class="SGD", lr=0.1)


def test_elastic_record_writes_the_error_file_and_reraises(tmp_path, monkeypatch):
    from lucid.distributed.elastic.multiprocessing.errors import record

    @record
    def main(x):
        raise ValueError(f"bad {x}")

    path = tmp_path / "err.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(path))
    with pytest.raises(ValueError, match="bad 3"):
        main(3)
    msg = json.loads(path.read_text())["message"]
    assert msg["message"] == "ValueError: bad 3" and "raise ValueError" in msg["extraInfo"]["py_callstack"]


def test_model_zoo_load_url_is_hubs_loader():
    import lucid.hub
    from lucid.utils import model_zoo

    assert model_zoo.load_url is lucid.hub.load_state_dict_from_url


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
def test_a_checkpoint_saved_on_3_ranks_loads_on_2_and_one_saved_on_2_loads_on_3(tmp_path):
    """Shard(0) pieces of 13 rows: 5,5,3 saved, 7,6 loaded (and back), into Shard(0), Replicate, Shard(1)."""
    sys.path.insert(0, HERE)
    import dcpreshardworker

    def launch(n, phase, other):
        (tmp_path / "phase").write_text(f"{phase} {other}")
        for r in range(n):
            (tmp_path / f"rank{r}.json").unlink(missing_ok=True)
        assert_checks_pass("dcpreshardworker.py", dcpreshardworker.CHECKS, n, tmp_path, timeout=90)

    launch(3, "save", 0)
    launch(2, "save", 0)
    launch(2, "load", 3)
    launch(3, "load", 2)
