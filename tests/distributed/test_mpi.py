"""lucid.distributed, DistributedDataParallel and the sampler on real MPI processes.

Spawning is the expensive part, so each world size is one ``lucid-run`` launch that runs
every check of mpiworker.py (results come back as JSON per rank); the fault tests are one
small launch each. ``MPIEXEC_TIMEOUT`` (``--timeout``) and the subprocess timeout are the
backstops: a hang fails a test, it never blocks the suite. Skipped without mpi4py/mpiexec.
"""
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from lucid.distributed.run import find_mpiexec

if importlib.util.find_spec("mpi4py") is None or find_mpiexec() is None:
    pytest.skip("needs mpi4py and mpiexec (pip install -e '.[distributed]')", allow_module_level=True)

import mpiworker  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


CONSOLE = os.path.join(os.path.dirname(sys.executable), "lucid-run")


def launch(n, script, *args, timeout=60, form="function"):
    """Run ``script`` on ``n`` ranks; returns (returncode, stdout + stderr, seconds).

    ``form``: how lucid-run is called: its ``main()``, ``python -m lucid.distributed.run``
    or the installed console script.
    """
    runner = {"function": [sys.executable, "-c", "from lucid.distributed.run import main; raise SystemExit(main())"],
              "module": [sys.executable, "-m", "lucid.distributed.run"],
              "console": [CONSOLE]}[form if form != "console" or os.path.exists(CONSOLE) else "module"]
    cmd = [*runner, "-n", str(n), "--timeout", str(timeout), script, *args]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout + 30,
                       env=env, cwd=ROOT)
    return p.returncode, p.stdout + p.stderr, time.perf_counter() - t0


@pytest.mark.parametrize("n", [1, 2, 3], ids=lambda n: f"{n}ranks")
def test_every_check_on_every_rank(n, tmp_path):
    """All of mpiworker.CHECKS in one launch (one test, so no test runner splits a launch)."""
    rc, log, _ = launch(n, os.path.join(HERE, "mpiworker.py"), str(tmp_path),
                        form=["function", "module", "console"][n - 1])
    failures = []
    for r in range(n):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no results (exit status {rc}):\n{log[-3000:]}"
        res = json.loads(path.read_text())
        assert set(res) == set(mpiworker.CHECKS)
        failures += [f"{name} on rank {r}:\n{tb}" for name, tb in res.items() if tb != "ok"]
    assert not failures, "\n".join(failures)
    assert rc == 0, log[-3000:]


# ---------------------------------------------------------------------- faults

FAULT = r'''
import os, signal, sys
import numpy as np
import lucid, lucid.distributed as dist
from lucid.nn.parallel import DistributedDataParallel as DDP
mode = sys.argv[1]
dist.init_process_group("mpi")
r = dist.get_rank()
model = DDP(lucid.nn.Linear(4, 2))
opt = lucid.optim.SGD(model.parameters(), lr=0.1)
for step in range(1000):
    if step == 3 and r == 1:
        if mode == "raise":
            raise ValueError("injected failure on rank 1")
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if mode == "exit":
            sys.exit(3)
        if mode == "mismatch":
            dist.all_reduce(lucid.zeros(7))
    if step == 3 and mode == "mismatch":
        dist.all_reduce(lucid.zeros(3))
    opt.zero_grad()
    model(lucid.randn(8, 4)).sum().backward()
    opt.step()
    if step == 999:
        print("rank", r, "never stopped")
'''


@pytest.fixture(scope="module")
def fault_script(tmp_path_factory):
    path = tmp_path_factory.mktemp("fault") / "fault.py"
    path.write_text(FAULT)
    return str(path)


@pytest.mark.parametrize("mode", ["raise", "kill", "exit", "mismatch"])
def test_a_failing_rank_ends_the_job(fault_script, mode):
    rc, log, secs = launch(2, fault_script, mode, timeout=30)
    assert rc != 0, log
    assert secs < 10, f"the job took {secs:.1f} s to end:\n{log}"
    assert "never stopped" not in log
    if mode == "raise":
        assert "[rank 1] ValueError: injected failure on rank 1" in log, log
        assert "fault.py" in log  # that rank's traceback
    if mode == "exit":
        assert "[rank 1] exited with status 3" in log, log
