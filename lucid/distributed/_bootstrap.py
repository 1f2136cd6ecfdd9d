"""One rank of a ``lucid-run`` job: run the user's script, abort the whole job if it fails.

``python -m lucid.distributed._bootstrap script.py args...`` (or ``-m module args...``).

NOTE [Abort on failure]
MPI ends a job when a process dies, but a rank that raises and exits cleanly (or is
still finalizing) leaves the others blocked in a collective forever. So an uncaught
exception, a ``sys.exit`` with a non-zero status, or Ctrl-C prints this rank's
traceback (prefixed by its rank) and calls ``MPI.COMM_WORLD.Abort(status)``, which ends
every rank at once; ``mpiexec`` then exits non-zero.
"""
from __future__ import annotations

import os
import runpy
import sys
import time
import traceback


def _rank():
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if key in os.environ:
            return os.environ[key]
    return "?"


def _abort(status, message):
    sys.stderr.write(message)
    sys.stderr.flush()
    sys.stdout.flush()
    # Give mpiexec's I/O proxy a moment to forward the traceback before the abort tears the
    # job down: on a loaded machine the message was occasionally lost (an empty log in the
    # fault tests).
    time.sleep(0.25)
    try:
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(status)
    finally:
        os._exit(status)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv:
        sys.stderr.write("usage: python -m lucid.distributed._bootstrap (script.py | -m module) [args...]\n")
        return 2
    as_module = argv[0] == "-m"
    if as_module:
        argv = argv[1:]
    target = argv[0]
    sys.argv = argv
    if not as_module:
        sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code in (None, 0):
            return 0
        status = code if isinstance(code, int) else 1
        if not isinstance(code, int):
            sys.stderr.write(f"{code}\n")
        _abort(status, f"[rank {_rank()}] exited with status {status}; aborting the job\n")
    except BaseException:  # noqa: BLE001  (KeyboardInterrupt too: see NOTE [Abort on failure])
        tb = traceback.format_exc()
        lines = "".join(f"[rank {_rank()}] {line}\n" for line in tb.rstrip("\n").split("\n"))
        _abort(1, lines + f"[rank {_rank()}] uncaught exception; aborting the job\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
