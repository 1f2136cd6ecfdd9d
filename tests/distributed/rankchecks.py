"""The protocol the MPI test files share: a worker script runs named checks on every rank and
writes ``rank<r>.json`` ({check: "ok" or its traceback}); the test launches it once per world
size with ``lucid-run`` and fails with every rank's tracebacks."""
import json
import os
import subprocess
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
ENV = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), OMP_NUM_THREADS="1",
           OPENBLAS_NUM_THREADS="1")


def assert_checks_pass(worker, checks, n, tmp_path, timeout=110):
    """Run every check of ``worker`` (a file in this folder) on ``n`` ranks; all must pass."""
    cmd = [sys.executable, "-m", "lucid.distributed.run", "-n", str(n), "--timeout", str(timeout),
           os.path.join(HERE, worker), str(tmp_path)]
    p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout + 10,
                       env=ENV, cwd=ROOT)
    log = p.stdout + p.stderr
    failures = []
    for r in range(n):
        path = tmp_path / f"rank{r}.json"
        assert path.exists(), f"rank {r} wrote no results (exit status {p.returncode}):\n{log[-3000:]}"
        res = json.loads(path.read_text())
        assert set(res) == set(checks)
        failures += [f"{name} on rank {r}:\n{tb}" for name, tb in res.items() if tb != "ok"]
    assert not failures, "\n".join(failures)
    assert p.returncode == 0, log[-3000:]


def rank_main(checks, argv, setup=None):
    """A worker's entry point: ``argv`` is ``[out_dir, check names...]`` (none: all)."""
    import lucid.distributed as dist

    out_dir, names = argv[0], argv[1:] or list(checks)
    if setup is not None:
        setup(out_dir)
    dist.init_process_group("mpi")
    results = {}
    for name in names:
        try:
            checks[name]()
            results[name] = "ok"
        except Exception:  # noqa: BLE001  (reported to pytest with every rank's traceback)
            results[name] = traceback.format_exc()
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()
