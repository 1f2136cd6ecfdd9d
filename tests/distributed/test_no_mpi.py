"""lucid.distributed without starting MPI: imports stay lazy, the launcher's command line,
errors before init_process_group, DDP's bucket plan. Needs neither mpi4py nor mpiexec."""
import os
import subprocess
import sys

import pytest

import lucid
import lucid.distributed as dist
from lucid.distributed import run
from lucid.nn.parallel.distributed import _make_buckets


def test_importing_lucid_and_its_distributed_parts_never_imports_mpi4py():
    code = ("import sys, lucid, lucid.distributed, lucid.nn.parallel, lucid.utils.data.distributed, "
            "lucid.distributed.run; lucid.distributed.is_available(); print('mpi4py' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_calls_before_init_process_group_say_so():
    assert not dist.is_initialized()
    for fn in (dist.get_rank, dist.get_world_size, dist.barrier):
        with pytest.raises(ValueError, match="init_process_group"):
            fn()
    with pytest.raises(ValueError, match="init_process_group"):
        dist.all_reduce(lucid.zeros(2))
    with pytest.raises(ValueError, match="backend 'nccl' is not available"):
        dist.init_process_group("nccl")
    assert dist.get_backend.__name__ == "get_backend" and not dist.is_nccl_available()


def test_without_mpi4py_init_says_how_to_install(monkeypatch):
    from lucid.distributed import process_group as group

    if group._MPI[0] is not None:
        pytest.skip("MPI already started in this process")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py now fails
    with pytest.raises(ImportError, match=r"init_process_group: .*mpi4py.*\[distributed\]"):
        dist.init_process_group("mpi")
    assert not dist.is_initialized()
    for fn in (lambda: dist.all_reduce(lucid.zeros(1)), lambda: dist.broadcast(lucid.zeros(1), 0)):
        with pytest.raises(ValueError, match="init_process_group"):
            fn()


def opts(*argv):
    return run._parser().parse_args(list(argv))


def test_single_machine_command_pins_loopback_and_wraps_every_rank():
    env = {"FI_TCP_IFACE": "eth9"}  # the user's own setting wins
    cmd = run.build_command(opts("-n", "3", "--mpiexec", "/x/mpiexec", "train.py", "-n", "5", "--lr", "1"), env)
    assert cmd[:3] == ["/x/mpiexec", "-n", "3"]
    assert cmd[3:7] == [sys.executable, "-u", "-m", "lucid.distributed._bootstrap"]
    assert cmd[7:] == ["train.py", "-n", "5", "--lr", "1"]  # the script's own flags pass through
    assert env["FI_TCP_IFACE"] == "eth9"
    for k, v in run.LOOPBACK_ENV.items():
        if k != "FI_TCP_IFACE":
            assert env[k] == v
    assert env["HYDRA_IFACE"] == "lo" and env["FI_PROVIDER"] == "tcp"


def test_several_hosts_forward_hosts_and_pin_nothing():
    env = {}
    cmd = run.build_command(opts("--hosts", "a:2,b:3", "--mpiexec", "m", "--iface", "eth0", "-m", "pkg.train"), env)
    assert cmd[:7] == ["m", "-n", "5", "-hosts", "a:2,b:3", "-iface", "eth0"]
    assert cmd[-3:] == ["lucid.distributed._bootstrap", "-m", "pkg.train"]
    assert not set(run.LOOPBACK_ENV) & set(env)
    cmd = run.build_command(opts("--hostfile", "hf", "-n", "8", "--mpiexec", "m", "--timeout", "9", "t.py"), env)
    assert cmd[:5] == ["m", "-n", "8", "-f", "hf"] and env["MPIEXEC_TIMEOUT"] == "9"
    with pytest.raises(SystemExit):
        opts("--hosts", "a", "--hostfile", "hf", "t.py")  # one or the other


def test_missing_mpiexec_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(run, "find_mpiexec", lambda: None)
    with pytest.raises(SystemExit, match="no mpiexec found.*distributed"):
        run.build_command(opts("t.py"), {})


def test_bootstrap_runs_a_script_and_reports_its_failure_without_mpi(tmp_path):
    ok = tmp_path / "ok.py"
    ok.write_text("import sys; print('args', sys.argv[1:]); print(__name__)")
    out = subprocess.run([sys.executable, "-m", "lucid.distributed._bootstrap", str(ok), "a", "-b"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "args ['a', '-b']\n__main__" in out.stdout, out.stderr
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    raise KeyError('nope')\nf()\n")
    env = dict(os.environ, PMI_RANK="4")  # as mpiexec sets it; MPI_Abort runs as a singleton
    out = subprocess.run([sys.executable, "-m", "lucid.distributed._bootstrap", str(bad)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode != 0
    assert "[rank 4] KeyError: 'nope'" in out.stderr and "bad.py" in out.stderr


def test_buckets_reverse_order_first_small_one_dtype_each():
    ps = [lucid.nn.Parameter(lucid.zeros(n, dtype=dt)) for n, dt in
          [(300_000, lucid.float32), (10, lucid.float32), (100, lucid.float64), (5, lucid.float64),
           (262_144, lucid.float32)]]
    buckets = _make_buckets(ps[::-1], 25 * 2 ** 20)
    # 1 MiB first bucket holds exactly the last 262144 float32s; dtypes never mix.
    index = {id(p): i for i, p in enumerate(ps)}
    assert [[index[id(p)] for p in b.params] for b in buckets] == [[4], [3, 2], [1, 0]]
    assert [b.buf.dtype for b in buckets] == ["float32", "float64", "float32"]
    assert buckets[2].offsets == [0, 10, 300_010]
