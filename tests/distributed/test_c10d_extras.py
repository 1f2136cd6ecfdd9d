"""The smaller pieces of ``torch.distributed``: rendezvous, coalesced collectives, split_group,
get_pg_count, breakpoint, supports_complex, the ``*Options`` records. MPI checks in
extrasworker.py (2 and 3 ranks)."""
import datetime
import importlib.util
import os
import sys

import pytest

import lucid.distributed as dist
from lucid.distributed.run import find_mpiexec

from rankchecks import assert_checks_pass  # noqa: E402  (pytest puts this folder on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}ranks")
def test_every_extras_check_on_every_rank(n, tmp_path):
    sys.path.insert(0, HERE)
    import extrasworker

    assert_checks_pass("extrasworker.py", extrasworker.CHECKS, n, tmp_path, timeout=90)


def test_supports_complex_and_options_are_pytorchs():
    R = dist.ReduceOp
    assert [dist.supports_complex(op) for op in (R.SUM, R.AVG, R.MAX, R.MIN, R.PRODUCT, R.BAND, R.BOR, R.BXOR)] == \
        [True, True, False, False, False, False, False, False]
    o = dist.AllreduceOptions()
    assert o.reduceOp is R.SUM and o.asyncOp and o.timeout == datetime.timedelta(milliseconds=-1)
    assert dist.BroadcastOptions(rootRank=2).rootRank == 2 and dist.BarrierOptions().device_ids == []
    assert isinstance(dist.AllreduceCoalescedOptions(), dist.AllreduceOptions)
    assert [m.name for m in dist.BuiltinCommHookType] == ["ALLREDUCE", "FP16_COMPRESS"]
    from lucid.nn.parallel.distributed import GradBucket

    assert dist.GradBucket is GradBucket


def test_rendezvous_tcp_file_and_env(tmp_path, monkeypatch):
    store, rank, world = next(dist.rendezvous("tcp://127.0.0.1:0?rank=0&world_size=1"))
    assert (rank, world) == (0, 1) and isinstance(store, dist.TCPStore)
    store.set("k", "v")
    assert store.get("k") == b"v"
    store, rank, world = next(dist.rendezvous(f"file://{tmp_path}/rdzv", rank=1, world_size=2))
    assert (rank, world) == (1, 2) and isinstance(store, dist.FileStore) and store.path == f"{tmp_path}/rdzv"
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(port))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    store, rank, world = next(dist.rendezvous("env://"))
    assert (rank, world, store.port) == (0, 1, port) and store.add("n", 2) == 2
    monkeypatch.delenv("MASTER_PORT")
    with pytest.raises(ValueError, match="MASTER_PORT expected"):
        next(dist.rendezvous("env://"))
    with pytest.raises(RuntimeError, match=r"No rendezvous handler for bogus://"):
        dist.rendezvous("bogus://x")
    with pytest.raises(ValueError, match="node-specific arguments"):
        dist.rendezvous("tcp://h:1?rank=0&world_size=1", rank=0)


def test_register_rendezvous_handler_once():
    def handler(url, **kwargs):
        yield dist.HashStore(), 3, 4

    dist.register_rendezvous_handler("mine-test", handler)
    store, rank, world = next(dist.rendezvous("mine-test://anything"))
    assert (rank, world) == (3, 4) and isinstance(store, dist.HashStore)
    with pytest.raises(RuntimeError, match="already registered"):
        dist.register_rendezvous_handler("mine-test", handler)


def test_split_group_and_pg_count_without_a_group():
    assert dist.get_pg_count() == 0 or dist.is_initialized()
    with pytest.raises(ValueError, match="split_group: default process group has not been initialized"):
        dist.split_group(split_ranks=[[0]])
