"""pytorch/examples ``distributed/tensor_parallelism`` run on Lucid (``import lucid as torch``):
``tensor_parallel_example.py`` (``ColwiseParallel``/``RowwiseParallel`` on the toy MLP, replicated
input) and ``sequence_parallel_example.py`` (``ColwiseParallel(input_layouts=Shard(0))`` /
``RowwiseParallel(output_layouts=Shard(0))``, a different batch per rank), each with the example's
``AdamW(lr=0.25, foreach=True)`` loop (no ``zero_grad``, as written), on a 1-d mesh of two CPU
ranks launched by ``python -m lucid.distributed.run`` (this file as a script). The ``cuda`` device
becomes ``cpu``; weights and inputs come from NumPy so that a single-process model trained on the
same (for SP: the concatenated) batches is the reference, and PyTorch on two gloo ranks, where
installed, must give the same numbers. Skipped without mpi4py and mpiexec; the ranks start from a
fresh interpreter with stdin closed, never forked from a pytest-xdist worker.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.abspath(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
STEPS = 3


def _rand(torch, seed, *shape):
    """``torch.rand(*shape)`` after ``torch.manual_seed(seed)``, drawn by NumPy (same data in both libraries)."""
    return torch.tensor(np.random.default_rng(seed).random(shape), dtype=torch.float32)


def _toy_model(torch):
    nn = torch.nn

    class ToyModel(nn.Module):
        """MLP based model"""

        def __init__(self):
            super(ToyModel, self).__init__()
            self.in_proj = nn.Linear(10, 32)
            self.relu = nn.ReLU()
            self.out_proj = nn.Linear(32, 5)

        def forward(self, x):
            return self.out_proj(self.relu(self.in_proj(x)))

    model = ToyModel()
    rng = np.random.default_rng(5)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.tensor(rng.uniform(-0.5, 0.5, tuple(p.shape)), dtype=torch.float32))
    return model


def examples(torch):
    """Both scripts, on this rank; returns what they print plus the full trained parameters."""
    import importlib

    tp = importlib.import_module(torch.__name__ + ".distributed.tensor.parallel")
    Shard = importlib.import_module(torch.__name__ + ".distributed.tensor").Shard
    init_device_mesh = importlib.import_module(torch.__name__ + ".distributed.device_mesh").init_device_mesh

    _world_size = int(os.environ.get("WORLD_SIZE", "2"))
    device_mesh = init_device_mesh(device_type="cpu", mesh_shape=(_world_size,))
    _rank = device_mesh.get_rank()
    out = {"rank": _rank, "world": _world_size}

    def full(p):
        return p.full_tensor().detach().reshape(-1).tolist()

    # ---- tensor_parallel_example.py
    tp_model = tp.parallelize_module(module=_toy_model(torch), device_mesh=device_mesh, parallelize_plan={
        "in_proj": tp.ColwiseParallel(), "out_proj": tp.RowwiseParallel()})
    lr = 0.25
    optimizer = torch.optim.AdamW(tp_model.parameters(), lr=lr, foreach=True)
    out["tp_local_shapes"] = [list(p.to_local().shape) for p in tp_model.parameters()]
    out["tp_placements"] = [str(p.placements[0]) for p in tp_model.parameters()]
    out["tp_out"] = []
    for i in range(STEPS):
        torch.manual_seed(i)
        inp = _rand(torch, i, 20, 10)  # For TP, input needs to be same across all TP ranks.
        output = tp_model(inp)
        out["tp_out"].append([isinstance(output, torch.Tensor), list(output.shape), output.detach().sum().item()])
        output.sum().backward()
        optimizer.step()
    out["tp_params"] = [full(p) for p in tp_model.parameters()]

    # ---- sequence_parallel_example.py
    sp_model = tp.parallelize_module(module=_toy_model(torch), device_mesh=device_mesh, parallelize_plan={
        "in_proj": tp.ColwiseParallel(input_layouts=Shard(0)),
        "out_proj": tp.RowwiseParallel(output_layouts=Shard(0))})
    optimizer = torch.optim.AdamW(sp_model.parameters(), lr=lr, foreach=True)
    out["sp_out"] = []
    for i in range(STEPS):
        inp = _rand(torch, 100 * i + _rank, 20, 10)  # For SP, input can be different across all ranks.
        output = sp_model(inp)
        out["sp_out"].append([isinstance(output, torch.Tensor), list(output.shape), output.detach().sum().item()])
        output.sum().backward()
        optimizer.step()
    out["sp_params"] = [full(p) for p in sp_model.parameters()]
    return out


def _single_process(inputs):
    """The toy model trained in one process on whole batches: what TP/SP must reproduce."""
    import lucid
    import lucid.optim  # noqa: F401

    model = _toy_model(lucid)
    opt = lucid.optim.AdamW(model.parameters(), lr=0.25)
    sums = []
    for inp in inputs:
        out = model(inp)
        sums.append(out.detach().sum().item())
        out.sum().backward()
        opt.step()
    return sums, [p.detach().reshape(-1).tolist() for p in model.parameters()]


def _lucid_rank(out_dir):
    import lucid
    import lucid.distributed as dist
    import lucid.nn  # noqa: F401
    import lucid.optim  # noqa: F401

    dist.init_process_group("mpi")
    res = examples(lucid)
    with open(os.path.join(out_dir, f"lucid{res['rank']}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _torch_rank(rank, out_dir, port):
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    res = examples(torch)
    with open(os.path.join(out_dir, f"torch{rank}.json"), "w") as f:
        json.dump(res, f)
    dist.destroy_process_group()


def _have_mpi():
    import importlib.util

    from lucid.distributed.run import find_mpiexec

    return importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.fixture(scope="module")
def lucid_ranks(tmp_path_factory):
    if not _have_mpi():
        pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')")
    out = tmp_path_factory.mktemp("tensor_parallel")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "lucid.distributed.run", "-n", "2", "--timeout", "90", HERE, str(out)]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=150, env=env, cwd=ROOT)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    return [json.loads((out / f"lucid{r}.json").read_text()) for r in range(2)]


def test_tensor_parallel_example(lucid_ranks):
    import lucid

    sums, params = _single_process([_rand(lucid, i, 20, 10) for i in range(STEPS)])
    for r, res in enumerate(lucid_ranks):
        assert (res["rank"], res["world"]) == (r, 2)
        # in_proj: rows split (Shard(0)); out_proj: weight columns split (Shard(1)), bias replicated
        assert res["tp_local_shapes"] == [[16, 10], [16], [5, 16], [5]]
        assert res["tp_placements"] == ["S(0)", "S(0)", "S(1)", "R"]
        assert [o[:2] for o in res["tp_out"]] == [[True, [20, 5]]] * STEPS
        np.testing.assert_allclose([o[2] for o in res["tp_out"]], sums, rtol=1e-5, atol=1e-4)
        for got, want in zip(res["tp_params"], params):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_sequence_parallel_example(lucid_ranks):
    import lucid

    batches = [lucid.cat([_rand(lucid, 100 * i, 20, 10), _rand(lucid, 100 * i + 1, 20, 10)]) for i in range(STEPS)]
    sums, params = _single_process(batches)
    r0, r1 = lucid_ranks
    for res in lucid_ranks:
        assert [o[:2] for o in res["sp_out"]] == [[True, [20, 5]]] * STEPS  # each rank keeps its rows
        for got, want in zip(res["sp_params"], params):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose([a[2] + b[2] for a, b in zip(r0["sp_out"], r1["sp_out"])], sums, rtol=1e-5, atol=1e-3)


def test_tensor_parallel_matches_torch_gloo(lucid_ranks, tmp_path):
    torch = pytest.importorskip("torch")
    import socket

    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch without gloo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (f"import sys; sys.path.insert(0, {os.path.dirname(HERE)!r}); "
            f"import torch.multiprocessing as tmp, {os.path.splitext(os.path.basename(HERE))[0]} as t; "
            f"tmp.start_processes(t._torch_rank, args=({str(tmp_path)!r}, {port}), nprocs=2, join=True, "
            "start_method='fork')")
    done = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    for r in range(2):
        lo, to = lucid_ranks[r], json.loads((tmp_path / f"torch{r}.json").read_text())
        assert lo.keys() == to.keys()
        for k in lo:
            if k.endswith("params"):
                for a, b in zip(lo[k], to[k]):
                    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6, err_msg=f"rank {r} {k}")
            elif k.endswith("out"):
                assert [o[:2] for o in lo[k]] == [o[:2] for o in to[k]]
                np.testing.assert_allclose([o[2] for o in lo[k]], [o[2] for o in to[k]], rtol=1e-5, err_msg=k)
            else:
                assert lo[k] == to[k], (r, k)


if __name__ == "__main__":
    _lucid_rank(sys.argv[1])
