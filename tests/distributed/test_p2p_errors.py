"""send/recv/isend/irecv of mismatched sizes raise an error naming the op, the ranks and the
shapes (NOTE [Receive sizes]), on two real MPI processes (one launch: p2perrorworker.py).
Skipped without mpi4py/mpiexec."""
import importlib.util
import json
import os

import pytest

from lucid.distributed.run import find_mpiexec

if importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None:
    pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')", allow_module_level=True)

import p2perrorworker  # noqa: E402
from test_mpi import HERE, launch  # noqa: E402


def test_mismatched_sizes_name_op_ranks_and_shapes(tmp_path):
    rc, log, _ = launch(2, os.path.join(HERE, "p2perrorworker.py"), str(tmp_path))
    failures = []
    for r in range(2):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no results (exit status {rc}):\n{log[-3000:]}"
        res = json.loads(path.read_text())
        assert set(res) == set(p2perrorworker.CHECKS)
        failures += [f"{name} on rank {r}:\n{tb}" for name, tb in res.items() if tb != "ok"]
    assert not failures, "\n".join(failures)
    assert rc == 0, log[-3000:]
