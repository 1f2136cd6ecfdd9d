"""``loss_parallel`` and ``PrepareModuleInputOutput`` (``lucid.distributed.tensor.parallel``).

The MPI part is one ``lucid-run`` launch per world size running tpworker.py (2 ranks; 3 ranks
shard 7 classes unevenly); the argument checks need no MPI.
"""
import importlib.util
import os
import sys

import pytest

from lucid.distributed.run import find_mpiexec
from lucid.distributed.tensor import Replicate, Shard
from lucid.distributed.tensor.parallel import PrepareModuleInputOutput, loss_parallel
from lucid.distributed.tensor.parallel.loss import _ACTIVE

from rankchecks import assert_checks_pass  # noqa: E402  (pytest puts this folder on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}ranks")
def test_every_tensor_parallel_check_on_every_rank(n, tmp_path):
    sys.path.insert(0, HERE)
    import tpworker

    assert_checks_pass("tpworker.py", tpworker.CHECKS, n, tmp_path, timeout=90)


def test_loss_parallel_nests_and_resets_on_errors():
    assert _ACTIVE[0] == 0
    with pytest.raises(KeyError):
        with loss_parallel():
            with loss_parallel():
                assert _ACTIVE[0] == 2
            raise KeyError("x")
    assert _ACTIVE[0] == 0


def test_prepare_module_input_output_checks_both_halves():
    style = PrepareModuleInputOutput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(), None),
                                     output_layouts=Replicate(), desired_output_layouts=Shard(1))
    assert style.prepare_module_input.input_layouts == (Shard(0), None)
    assert style.prepare_module_output.desired_output_layouts == (Shard(1),)
    with pytest.raises(ValueError, match="same length"):
        PrepareModuleInputOutput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(),),
                                 output_layouts=Replicate(), desired_output_layouts=Shard(0))
    with pytest.raises(TypeError):
        PrepareModuleInputOutput(input_layouts=Shard(0), desired_input_layouts=Replicate())
