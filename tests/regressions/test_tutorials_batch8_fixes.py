"""Focused tests of what the eighth batch of tutorials (test_tutorials_batch8_*.py) fixed.

Without MPI: a storage writer/reader handed to ``dcp.save``/``dcp.load`` together with a
``checkpoint_id`` now goes where the id says (PyTorch resets the writer to it; the async recipe's
pinned-memory loop reuses one writer with a new id per step), the modules the pages import
(``checkpoint.stateful``, ``checkpoint.state_dict_saver.AsyncCheckpointerType``,
``state_dict_loader``), ``async_save(async_checkpointer_type=...)`` and
``ZeroRedundancyOptimizer.optim``, and ``nn.utils.skip_init`` really skipping the initialisation
(it built the module normally). On two MPI ranks (tests/distributed/tut8_fixes_worker.py): the
optimizer state of ``fully_shard`` models (a local-shaped state refused by ``load_state_dict``;
handed to DCP as a plain tensor, so only rank 0's shard was saved) and of FSDP models (named
``_flat_param`` by ``get_optimizer_state_dict``; ``set_model_state_dict`` silently loaded nothing).
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.distributed.checkpoint as dcp
import lucid.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORKER = os.path.join(ROOT, "tests", "distributed", "tut8_fixes_worker.py")


def test_storage_writer_and_reader_follow_checkpoint_id(tmp_path):
    writer = dcp.FileSystemWriter(tmp_path / "first", cache_staged_state_dict=True)
    for step in range(2):
        dcp.save({"w": lucid.full((2,), float(step))}, storage_writer=writer, checkpoint_id=tmp_path / f"step{step}")
    assert not (tmp_path / "first").exists()
    assert writer.path == os.fspath(tmp_path / "step1")  # PyTorch's writer keeps the id it was reset to
    reader = dcp.FileSystemReader(tmp_path / "step1")
    for step in range(2):
        sd = {"w": lucid.zeros(2)}
        dcp.load(sd, storage_reader=reader, checkpoint_id=tmp_path / f"step{step}")
        assert sd["w"].tolist() == [float(step)] * 2
    # without an id the writer's own directory is used
    dcp.save({"w": lucid.ones(2)}, storage_writer=dcp.FileSystemWriter(tmp_path / "own"))
    assert (tmp_path / "own" / ".metadata").exists()


def test_the_pages_imports_and_async_checkpointer_type(tmp_path):
    from lucid.distributed.checkpoint.state_dict_loader import load
    from lucid.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType, async_save
    from lucid.distributed.checkpoint.stateful import Stateful

    class AppState(Stateful):
        def __init__(self, model):
            self.model = model

        def state_dict(self):
            return {"model": self.model.state_dict()}

        def load_state_dict(self, state_dict):
            self.model.load_state_dict(state_dict["model"])

    lucid.manual_seed(0)
    a, b = nn.Linear(3, 2), nn.Linear(3, 2)
    for kind in (AsyncCheckpointerType.THREAD, AsyncCheckpointerType.PROCESS):
        fut = async_save({"app": AppState(a)}, checkpoint_id=tmp_path / kind.value, async_checkpointer_type=kind)
        assert sorted(fut.result().state_dict_metadata) == ["app.model.bias", "app.model.weight"]
        load({"app": AppState(b)}, checkpoint_id=tmp_path / kind.value)
        np.testing.assert_array_equal(b.weight.detach().numpy(), a.weight.detach().numpy())
    with pytest.raises(ValueError, match="^dcp.async_save: async_checkpointer_type"):
        dcp.async_save({"w": lucid.ones(1)}, checkpoint_id=tmp_path / "x", async_checkpointer_type="thread")
    assert dcp.stateful.Stateful is dcp.Stateful and dcp.state_dict_saver.save is dcp.save


def test_dcp_errors_have_pytorchs_types(tmp_path):
    from lucid.distributed.checkpoint.state_dict import get_optimizer_state_dict

    with pytest.raises(RuntimeError, match="^dcp.save: pass checkpoint_id"):
        dcp.save({"w": lucid.ones(1)})
    with pytest.raises(KeyError) as info:  # PyTorch's type (its name lookup fails)
        get_optimizer_state_dict(nn.Linear(2, 1), lucid.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1))
    assert str(info.value).startswith("get_optimizer_state_dict: the optimizer holds a parameter")
    assert isinstance(info.value, ValueError)  # what Lucid raised before


def test_zero_redundancy_optimizer_exposes_its_local_optimizer():
    from lucid.distributed.optim import ZeroRedundancyOptimizer

    model = nn.Linear(2, 2)
    opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=lucid.optim.Adam, lr=0.1)
    model(lucid.ones(1, 2)).sum().backward()
    opt.step()
    assert isinstance(opt.optim, lucid.optim.Adam)
    assert sorted(len(s) for s in opt.optim.state.values()) == [3, 3]  # step, exp_avg, exp_avg_sq


def test_skip_init_builds_on_meta_then_allocates_on_cpu():
    seen = []

    class MyModule(nn.Module):
        def __init__(self, n, device=None):
            super().__init__()
            self.w = nn.Parameter(lucid.empty((n, 2), device=device))
            nn.init.kaiming_uniform_(self.w)
            seen.append(self.w.device.type)  # where the initialiser ran

    m = nn.utils.skip_init(MyModule, 3)
    assert seen == ["meta"] and m.w.device.type == "cpu" and m.w.shape == (3, 2) and m.w.requires_grad

    class NoDevice(nn.Module):
        def __init__(self):
            super().__init__()

    with pytest.raises(RuntimeError, match="^skip_init: Module must support a 'device' arg"):
        nn.utils.skip_init(NoDevice)


def _have_mpi():
    from lucid.distributed.run import find_mpiexec

    return importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.mark.skipif(not _have_mpi(), reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
def test_sharded_optimizer_state_through_state_dicts_and_dcp(tmp_path):
    sys.path.insert(0, os.path.dirname(WORKER))
    import tut8_fixes_worker

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lucid.distributed.run", "-n", "2", "--timeout", "90", WORKER, str(tmp_path)]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    failures = []
    for r in range(2):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no results (exit status {p.returncode}):\n{(p.stdout + p.stderr)[-3000:]}"
        res = json.loads(path.read_text())
        assert set(res) == set(tut8_fixes_worker.CHECKS)
        failures += [f"{name} on rank {r}:\n{tb}" for name, tb in res.items() if tb != "ok"]
    assert not failures, "\n".join(failures)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
