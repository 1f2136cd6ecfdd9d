"""``fully_shard`` (FSDP2), ``nn.Parameter(dtensor)`` and ``load_state_dict`` with DTensors.

The MPI part is one ``lucid-run`` launch per world size running every check of
fsdp2worker.py (2 and 3 ranks shard the 15-, 20- and 5-row weights unevenly); the PyTorch
comparison forks gloo ranks from a fresh interpreter and trains the same MLP stack with
PyTorch's FSDP2; the rest runs here without MPI.
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

from rankchecks import assert_checks_pass  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
           OPENBLAS_NUM_THREADS="1")


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}ranks")
def test_every_fsdp2_check_on_every_rank(n, tmp_path):
    sys.path.insert(0, HERE)
    import fsdp2worker

    assert_checks_pass("fsdp2worker.py", fsdp2worker.CHECKS, n, tmp_path)


def test_fully_shard_training_matches_pytorch(tmp_path):
    # PyTorch's FSDP2 (fully_shard per MLP and on the root) on 2 gloo ranks against this
    # process's training on the whole batch (which the MPI checks match to 1e-12)
    pytest.importorskip("torch")
    sys.path.insert(0, HERE)
    import fsdp2worker

    n, port = 2, 30500 + os.getpid() % 1000
    p = subprocess.run([sys.executable, os.path.join(HERE, "fsdp2worker.py"), "--torch", str(n), str(tmp_path),
                        str(port)], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120, env=ENV,
                       cwd=ROOT)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    ours = {**fsdp2worker.one_process_training("sgd", n), **fsdp2worker.one_process_training("adam", n)}
    for r in range(n):
        theirs = json.loads((tmp_path / f"torch{r}.json").read_text())
        assert set(theirs) == set(ours)
        for key, want in theirs.items():
            for a, b in (zip(ours[key], want) if "params" in key else [(ours[key], want)]):
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=key)


# ------------------------------------------------------------------ without MPI


def test_fsdp2_names_as_pytorch():
    from lucid.distributed import fsdp

    for name in ("fully_shard", "FSDPModule", "MixedPrecisionPolicy", "OffloadPolicy", "CPUOffloadPolicy",
                 "register_fsdp_forward_method", "UnshardHandle"):
        assert name in fsdp.__all__ and hasattr(fsdp, name)
    mp = fsdp.MixedPrecisionPolicy()
    assert (mp.param_dtype, mp.reduce_dtype, mp.output_dtype, mp.cast_forward_inputs) == (None, None, None, True)
    assert fsdp.CPUOffloadPolicy().pin_memory and isinstance(fsdp.CPUOffloadPolicy(), fsdp.OffloadPolicy)
    for method in ("unshard", "reshard", "set_requires_gradient_sync", "set_reshard_after_backward",
                   "set_reshard_after_forward", "set_gradient_divide_factor"):
        assert callable(getattr(fsdp.FSDPModule, method))


def test_fully_shard_checks_arguments_before_communicating():
    from lucid.distributed.fsdp import MixedPrecision, fully_shard, register_fsdp_forward_method

    with pytest.raises(TypeError, match=r"^fully_shard: module must be an nn.Module"):
        fully_shard(lucid.ones(2))
    with pytest.raises(NotImplementedError, match=r"^fully_shard: a list of modules"):
        fully_shard([nn.Linear(2, 2), nn.Linear(2, 2)])
    with pytest.raises(TypeError, match=r"^fully_shard: mp_policy must be a MixedPrecisionPolicy"):
        fully_shard(nn.Linear(2, 2), mp_policy=MixedPrecision())  # FSDP1's config is another class
    lin = nn.Linear(2, 2)
    assert register_fsdp_forward_method(lin, "forward") is None  # a no-op off FSDP2, as PyTorch's
    assert type(lin) is nn.Linear


def test_importing_fsdp_leaves_dtensor_unloaded():
    # loading DTensor switches on the __torch_function__ wrappers for every call: FSDP1 users
    # and a plain import must not pay for it (a fresh interpreter: this one may have loaded it)
    code = ("import sys, lucid.distributed.fsdp as f; f.MixedPrecisionPolicy(); "
            "print('lucid.distributed.tensor' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "False", out.stdout + out.stderr


def test_parameter_of_a_plain_tensor_is_unchanged():
    # Parameter.__new__ asks the data's class for a parameter class only for layouts (DTensor)
    t = lucid.ones(3)
    p = nn.Parameter(t)
    assert type(p) is nn.Parameter and p.requires_grad and p._data is t._data
    assert type(nn.Parameter()) is nn.Parameter and type(nn.Parameter([1.0, 2.0], requires_grad=False)) is nn.Parameter
