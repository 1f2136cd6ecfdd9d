"""One rank of a ``lucid-run`` job: run the user's script, abort the whole job if it fails.

``python -m lucid.distributed._bootstrap script.py args...`` (or ``-m module args...``).

NOTE [Abort on failure]
MPI ends a job when a process dies, but a rank that raises and exits cleanly (or is
still finalizing) leaves the others blocked in a collective forever. So an uncaught
exception, a ``sys.exit`` with a non-zero status, or Ctrl-C prints this rank's
traceback (prefixed by its rank) and calls ``MPI.COMM_WORLD.Abort(status)``, which ends
every rank at once; ``mpiexec`` then exits non-zero.

NOTE [Dead ranks]
A rank that dies without raising (``os._exit``, a signal, a crash) cannot abort the job, and
MPICH has no working fault detection: the survivors would block in their next collective,
or (hydra's auto-cleanup) the job would just end with nobody saying which rank died. So on
one machine ``lucid-run`` starts ranks with ``-disable-auto-cleanup`` and a status folder
(``LUCID_RUN_DIR``): each rank writes its pid there first thing and an exit marker when it
ends on its own terms. A daemon thread of every rank polls its siblings; when one has gone
without a marker, it raises :class:`RankDiedError` in the main thread and, if the main thread
does not reach Python code within a grace period (it is blocked inside MPI), prints that
exception with the main thread's stack itself, then aborts the job — after the other survivors
have said so too (or a few seconds passed), so that every survivor names the dead rank.
``lucid-run`` names the dead rank again when the job has ended.
"""
from __future__ import annotations

import ctypes
import os
import runpy
import socket
import sys
import threading
import time
import traceback

POLL_S = 0.2  # how often a rank looks at its siblings (NOTE [Dead ranks])
GRACE_S = 1.0  # how long the main thread gets to raise RankDiedError itself


def _error_class(message):
    """A subclass of ``lucid.distributed.RankDiedError`` that carries ``message``: the main thread is
    interrupted with a class (``PyThreadState_SetAsyncExc``), so the message must come with it."""
    from lucid.distributed.process_group import RankDiedError

    def __init__(self, *args):
        RankDiedError.__init__(self, *(args or (message,)))

    return type("RankDiedError", (RankDiedError,), {"__init__": __init__, "__module__": "lucid.distributed"})


def _rank():
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if key in os.environ:
            return os.environ[key]
    return "?"


def _status_dir():
    return os.environ.get("LUCID_RUN_DIR") or None


def _mark(name, text):
    """Write ``LUCID_RUN_DIR/name`` atomically (a sibling may read it at any moment)."""
    folder = _status_dir()
    if folder is None or _rank() == "?":
        return
    tmp = os.path.join(folder, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(folder, name))


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:  # a zombie is dead too (Linux)
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def _running_ranks(folder, host=None):
    """``[(rank, pid, alive)]`` of the ranks in ``folder`` (on ``host``) without an exit marker."""
    host = host or socket.gethostname()
    found = []
    for name in sorted(os.listdir(folder)):
        if not (name.startswith("rank") and name.endswith(".pid")):
            continue
        rank = name[4:-4]
        try:
            with open(os.path.join(folder, name)) as f:
                pid, where = f.read().split(" ", 1)
        except (OSError, ValueError):
            continue
        if where == host and not os.path.exists(os.path.join(folder, f"rank{rank}.exit")):
            found.append((int(rank), int(pid), _alive(int(pid))))
    return found


def dead_ranks(folder, host=None):
    """``[(rank, pid)]`` of the ranks in ``folder`` (on ``host``) whose process is gone without an exit marker."""
    return sorted((rank, pid) for rank, pid, alive in _running_ranks(folder, host) if not alive)


def _describe(dead):
    who = ", ".join(f"rank {r} (pid {p})" for r, p in dead)
    return (f"{who} died without finishing (os._exit, a signal or a crash); the collectives of the "
            "other ranks can't complete")


def _watch(main_ident):
    folder, me = _status_dir(), _rank()
    while True:
        time.sleep(POLL_S)
        dead = [d for d in dead_ranks(folder) if str(d[0]) != me]
        if dead:
            break
    cls = _error_class(_describe(dead))
    err = cls()
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(main_ident), ctypes.py_object(cls))
    time.sleep(GRACE_S)  # the main thread raises if it runs Python code; else it is blocked in MPI
    stack = "".join(traceback.format_stack(sys._current_frames().get(main_ident)))
    lines = "Traceback (most recent call last):\n" + stack + f"lucid.distributed.RankDiedError: {err}"
    _abort(1, "".join(f"[rank {me}] {line}\n" for line in lines.split("\n")) +
           f"[rank {me}] a rank died; aborting the job\n", peer_died=True)


def _start_watchdog():
    if _status_dir() is None or _rank() == "?":
        return
    _mark(f"rank{_rank()}.pid", f"{os.getpid()} {socket.gethostname()}")
    threading.Thread(target=_watch, args=(threading.get_ident(),), name="lucid-rank-watchdog", daemon=True).start()


def _survivors_reported(folder, timeout):
    """Wait (at most ``timeout`` s) until every sibling rank on this host has ended on its own
    terms or died: when a rank died, each survivor names it before one of them aborts the job."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(alive for _, _, alive in _running_ranks(folder)):
            return True
        time.sleep(POLL_S / 4)
    return False


def _abort(status, message, peer_died=False):
    _mark(f"rank{_rank()}.exit", str(status))
    sys.stderr.write(message)
    sys.stderr.flush()
    sys.stdout.flush()
    folder = _status_dir()
    if peer_died and folder is not None:
        # The first survivor to notice must not tear the job down before the others have said
        # which rank died (on a loaded machine a sibling's watchdog can lag by a second).
        _survivors_reported(folder, timeout=POLL_S + GRACE_S + 2.0)
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
    _start_watchdog()
    try:
        if as_module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
    except SystemExit as e:
        code = e.code
        if code in (None, 0):
            _mark(f"rank{_rank()}.exit", "0")
            return 0
        status = code if isinstance(code, int) else 1
        if not isinstance(code, int):
            sys.stderr.write(f"{code}\n")
        _abort(status, f"[rank {_rank()}] exited with status {status}; aborting the job\n")
    except BaseException as e:  # noqa: BLE001  (KeyboardInterrupt too: see NOTE [Abort on failure])
        tb = traceback.format_exc()
        lines = "".join(f"[rank {_rank()}] {line}\n" for line in tb.rstrip("\n").split("\n"))
        _abort(1, lines + f"[rank {_rank()}] uncaught exception; aborting the job\n",
               peer_died=any(c.__name__ == "RankDiedError" for c in type(e).__mro__))
    _mark(f"rank{_rank()}.exit", "0")
    return 0


if __name__ == "__main__":
    sys.exit(main())
