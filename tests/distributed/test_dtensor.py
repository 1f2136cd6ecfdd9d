"""DTensor (``lucid.distributed.tensor``) and tensor parallelism.

The MPI part is one ``lucid-run`` launch per world size running every check of
dtensorworker.py (2 and 3 ranks: uneven shards, an empty piece); the PyTorch comparison forks
gloo ranks from a fresh interpreter (never from a pytest worker) and trains the same
tensor-parallel MLP; the rest runs here without MPI: placements, chunk sizes, styles and
argument checks.
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.distributed.run import find_mpiexec
from lucid.distributed.tensor import DTensor, Partial, Replicate, Shard
from lucid.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from lucid.distributed.tensor.parameter import DTensorParameter

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
           OPENBLAS_NUM_THREADS="1")


def _run_ranks(n, tmp_path, names=()):
    cmd = [sys.executable, "-m", "lucid.distributed.run", "-n", str(n), "--timeout", "110",
           os.path.join(HERE, "dtensorworker.py"), str(tmp_path), *names]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)
    log = p.stdout + p.stderr
    out = []
    for r in range(n):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no results (exit status {p.returncode}):\n{log[-3000:]}"
        out.append(json.loads(path.read_text()))
    assert p.returncode == 0, log[-3000:]
    return out


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}ranks")
def test_every_dtensor_check_on_every_rank(n, tmp_path):
    sys.path.insert(0, HERE)
    import dtensorworker

    results = _run_ranks(n, tmp_path)
    failures = []
    for r, res in enumerate(results):
        assert set(res) == set(dtensorworker.CHECKS)
        failures += [f"{name} on rank {r}:\n{tb}" for name, tb in res.items() if tb != "ok"]
    assert not failures, "\n".join(failures)


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
def test_two_dim_mesh_checks_on_four_ranks(tmp_path):
    # a 2x2 mesh (2 and 3 ranks only make 1xN and Nx1 ones): nested pieces, moves, ops, gradients
    sys.path.insert(0, HERE)
    import dtensorworker

    names = [k for k in dtensorworker.CHECKS if k.startswith("nd_mesh")]
    results = _run_ranks(4, tmp_path, names)
    failures = [f"{k} on rank {r}:\n{tb}" for r, res in enumerate(results) for k, tb in res.items() if tb != "ok"]
    assert len(names) == 2 and all(set(res) == set(names) for res in results)
    assert not failures, "\n".join(failures)


def test_tensor_parallel_training_matches_pytorch(tmp_path):
    # PyTorch's tensor-parallel MLP on 2 gloo ranks against this process's training of the same
    # model (which the MPI checks match to 1e-12 with Lucid's tensor parallelism)
    pytest.importorskip("torch")
    sys.path.insert(0, HERE)
    import dtensorworker

    n, port = 2, 29500 + os.getpid() % 1000
    p = subprocess.run([sys.executable, os.path.join(HERE, "dtensorworker.py"), "--torch", str(n), str(tmp_path),
                        str(port)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=ENV,
                       cwd=ROOT)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    ours = {**dtensorworker.one_process_training("sgd", 6), **dtensorworker.one_process_training("adam", 6)}
    for r in range(n):
        theirs = json.loads((tmp_path / f"torch{r}.json").read_text())
        assert set(theirs) == set(ours)
        for key, want in theirs.items():
            for a, b in (zip(ours[key], want) if "params" in key else [(ours[key], want)]):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=key)


# ------------------------------------------------------------------ without MPI


@pytest.mark.parametrize("size", range(0, 12))
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_shard_pieces_are_torch_chunk(size, ranks):
    # torch.chunk: pieces of ceil(size / ranks), the last ones shorter or empty
    c = -(-size // ranks) if size else 0
    want = [len(range(size)[k * c:(k + 1) * c]) if c else 0 for k in range(ranks)]
    got = [Shard.local_size(size, ranks, r) for r in range(ranks)]
    assert got == want and sum(got) == size
    assert [Shard.local_offset(size, ranks, r) for r in range(ranks)] == [min(size, r * c) for r in range(ranks)]


def test_placements_print_compare_and_check_as_pytorch():
    assert (repr(Shard(1)), str(Shard(1)), repr(Replicate()), str(Replicate())) == ("Shard(dim=1)", "S(1)",
                                                                                      "Replicate()", "R")
    assert (repr(Partial()), str(Partial("avg"))) == ("Partial(sum)", "P(avg)")
    assert Shard(0) == Shard(0) != Shard(1) and Replicate() == Replicate() and Partial() != Partial("avg")
    assert len({Shard(0), Shard(0), Replicate(), Partial()}) == 3
    assert Shard(2).is_shard() and Shard(2).is_shard(2) and not Shard(2).is_shard(1) and not Shard(0).is_partial()
    assert Partial().is_partial("sum") and not Partial().is_partial("avg") and Replicate().is_replicate()
    with pytest.raises(ValueError, match=r"^Partial: reduce_op must be 'sum' or 'avg'"):
        Partial("max")
    with pytest.raises(TypeError, match=r"^Shard: dim must be an int"):
        Shard(1.0)


def test_construction_errors_name_the_call():
    with pytest.raises(TypeError, match=r"^DTensor: build one with distribute_tensor"):
        DTensor(lucid.ones(2))
    with pytest.raises(TypeError, match=r"^ColwiseParallel: input_layouts must be a Placement"):
        ColwiseParallel(input_layouts=[Replicate()])
    with pytest.raises(TypeError, match=r"^parallelize_module: device_mesh must be a DeviceMesh"):
        parallelize_module(nn.Linear(2, 2), None, ColwiseParallel())


def test_parallel_styles_defaults_as_pytorch():
    c, r = ColwiseParallel(), RowwiseParallel(use_local_output=False)
    assert (c.input_layouts, c.output_layouts, c.desired_input_layouts, c.use_local_output) == (
        (Replicate(),), (Shard(-1),), (Replicate(),), True)
    assert (r.input_layouts, r.output_layouts, r.desired_input_layouts, r.use_local_output) == (
        (Shard(-1),), (Replicate(),), (Shard(-1),), False)


def test_dtensor_parameters_are_parameters():
    assert issubclass(DTensorParameter, nn.Parameter) and issubclass(DTensorParameter, DTensor)
    # a DTensor takes over the protocol even though Parameter opts out of it
    assert DTensorParameter.__torch_function__.__func__ is DTensor.__torch_function__.__func__
