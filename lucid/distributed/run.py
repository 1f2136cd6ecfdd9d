"""``lucid-run``: start a data-parallel job on MPI, like ``torchrun``.

::

    lucid-run -n 2 train.py --epochs 3          # 2 processes on this machine
    lucid-run --hosts a:2,b:2 train.py           # 4 processes on two machines
    lucid-run --hostfile hosts.txt -n 8 train.py
    python -m lucid.distributed.run -n 2 -m mypackage.train

It runs the ``mpiexec`` next to this Python (the ``mpich`` wheel puts it in the
environment's ``bin/``; else the first on ``PATH``), with every rank under
``lucid.distributed._bootstrap`` (NOTE [Abort on failure]): an uncaught exception on any
rank prints that rank's traceback and ends the whole job with a non-zero status. On one
machine a rank that dies without raising (``os._exit``, a signal) makes the others raise
``RankDiedError`` naming it (NOTE [Dead ranks]), and ``lucid-run`` names it again at the end.

NOTE [Loopback by default]
On one machine (no ``--hosts``/``--hostfile``) all traffic stays on the loopback
interface: Hydra's control connections (``-iface lo``) and MPICH's network module
(libfabric's tcp provider on ``lo``, UCX on ``lo``); ranks on one machine talk through
shared memory anyway. Variables already set in the environment win. With several hosts
nothing is pinned: pick the interface with ``--iface`` (and ``FI_TCP_IFACE``).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

LOOPBACK_ENV = {
    "MPIR_CVAR_CH4_NETMOD": "ofi",
    "FI_PROVIDER": "tcp",
    "FI_TCP_IFACE": "lo",
    "FI_SOCKETS_IFACE": "lo",
    "UCX_NET_DEVICES": "lo",
    "UCX_TLS": "self,sm,tcp",
    "HYDRA_IFACE": "lo",
}


def find_mpiexec():
    """The ``mpiexec`` beside this interpreter, else the one on ``PATH``, else None."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec")


def _parser():
    p = argparse.ArgumentParser(
        prog="lucid-run", description="Run a Lucid script on several processes (MPI).",
        epilog="Any uncaught exception on a rank aborts the whole job with that rank's traceback.")
    p.add_argument("-n", "--nproc-per-node", "--nproc", "--np", dest="nproc", type=int, default=None,
                   help="number of processes (default: 1, or the sum of --hosts slots)")
    hosts = p.add_mutually_exclusive_group()
    hosts.add_argument("--hosts", help="comma-separated host[:slots] list, e.g. a:2,b:2")
    hosts.add_argument("--hostfile", help="an MPICH hostfile (one 'host[:slots]' per line)")
    p.add_argument("--iface", help="network interface for several hosts (e.g. eth0, ib0)")
    p.add_argument("--mpiexec", default=None, help="the mpiexec to run (default: beside this Python)")
    p.add_argument("--timeout", type=int, default=None,
                   help="kill the job after this many seconds (MPIEXEC_TIMEOUT)")
    p.add_argument("--dry-run", action="store_true", help="print the command and exit")
    p.add_argument("-m", dest="module", action="store_true", help="run the target as a module (python -m)")
    p.add_argument("target", help="the script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    return p


def _slots(hosts):
    total = 0
    for h in hosts.split(","):
        _, _, n = h.partition(":")
        total += int(n) if n else 1
    return total


def build_command(opts, env):
    """The mpiexec command line for parsed ``opts``; fills loopback defaults into ``env``."""
    mpiexec = opts.mpiexec or find_mpiexec()
    if mpiexec is None:
        raise SystemExit("lucid-run: no mpiexec found; install the extra: "
                         "pip install 'lucid-autograd[distributed]'")
    nproc = opts.nproc or (_slots(opts.hosts) if opts.hosts else 1)
    if nproc < 1:
        raise SystemExit(f"lucid-run: -n must be at least 1, got {nproc}")
    cmd = [mpiexec, "-n", str(nproc)]
    if opts.hosts:
        cmd += ["-hosts", opts.hosts]
    elif opts.hostfile:
        cmd += ["-f", opts.hostfile]
    if env.get("LUCID_RUN_DIR") and not (opts.hosts or opts.hostfile):
        cmd += ["-disable-auto-cleanup"]  # the ranks' watchdogs end the job: NOTE [Dead ranks]
    if opts.iface:
        cmd += ["-iface", opts.iface]
    elif not (opts.hosts or opts.hostfile):  # See NOTE [Loopback by default]
        for k, v in LOOPBACK_ENV.items():
            env.setdefault(k, v)
    if opts.timeout:
        env["MPIEXEC_TIMEOUT"] = str(opts.timeout)
    if not (opts.hosts or opts.hostfile) and "OMP_NUM_THREADS" not in env:
        # Share this machine's cores between the ranks instead of each BLAS taking all.
        threads = str(max(1, (os.cpu_count() or 1) // nproc))
        env["OMP_NUM_THREADS"] = threads
        env.setdefault("OPENBLAS_NUM_THREADS", threads)
    target = ["-m", opts.target] if opts.module else [opts.target]
    cmd += [sys.executable, "-u", "-m", "lucid.distributed._bootstrap", *target, *opts.args]
    return cmd


def main(argv=None):
    opts = _parser().parse_args(argv)
    env = dict(os.environ)
    local = not (opts.hosts or opts.hostfile or opts.dry_run)
    status = tempfile.mkdtemp(prefix="lucid-run-") if local else None
    env.pop("LUCID_RUN_DIR", None)  # never an outer job's folder
    if status:
        env["LUCID_RUN_DIR"] = status
    try:
        cmd = build_command(opts, env)
        if opts.dry_run:
            print(" ".join(cmd))
            return 0
        proc = subprocess.Popen(cmd, env=env)
        try:
            rc, dead = _supervise(proc, status)
        except KeyboardInterrupt:
            proc.kill()  # as subprocess.call did
            proc.wait()
            return 130
        if rc and status:
            _report_dead(status, dead)
        return rc
    finally:
        if status:
            shutil.rmtree(status, ignore_errors=True)


def _supervise(proc, folder, backstop_s=5.0):
    """Wait for ``mpiexec``; if a rank died and the survivors' watchdogs have not ended the job
    ``backstop_s`` seconds later (a rank stuck outside Python), end it here (NOTE [Dead ranks]).
    Returns ``(exit status, the dead ranks first seen)``."""
    if folder is None:
        return proc.wait(), []
    from ._bootstrap import dead_ranks

    since, dead = None, []
    while True:
        try:
            return proc.wait(timeout=0.5), dead
        except subprocess.TimeoutExpired:
            pass
        if since is None:
            dead = dead_ranks(folder)
            since = time.monotonic() if dead else None
        if since is not None and time.monotonic() - since > backstop_s:
            proc.terminate()
            try:
                return proc.wait(timeout=5) or 1, dead
            except subprocess.TimeoutExpired:
                proc.kill()
                return proc.wait() or 1, dead


def _report_dead(folder, dead=()):
    """Name the ranks that died without finishing (NOTE [Dead ranks]); ``dead``: those seen first."""
    from ._bootstrap import _describe, dead_ranks

    dead = list(dead) or dead_ranks(folder)
    if dead:
        sys.stderr.write(f"lucid-run: {_describe(dead)}\n")


if __name__ == "__main__":
    sys.exit(main())
