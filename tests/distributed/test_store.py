"""Key-value stores (NOTE [Store semantics], NOTE [TCP store protocol]) and the distributed
error types. One table of operations runs on every kind of store (the values are PyTorch's,
and PyTorch's HashStore runs it too when installed); processes share a FileStore and a TCPStore
through subprocesses; the MPI test runs storeworker.py on 2 and 3 ranks.
"""
import datetime
import importlib.util
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

import lucid.distributed as dist
from lucid.distributed.run import find_mpiexec

from rankchecks import ENV, ROOT, assert_checks_pass  # noqa: E402  (pytest puts this folder on sys.path)

HERE = os.path.dirname(os.path.abspath(__file__))
HAVE_MPI = importlib.util.find_spec("mpi4py") is not None and find_mpiexec() is not None
SHORT = datetime.timedelta(seconds=0.2)


def _semantics(s, module):
    """The operations of NOTE [Store semantics]; returns what they gave."""
    out = []
    s.set("a", "x")
    out += [s.get("a"), s.add("c", 3), s.add("c", 2), s.get("c")]
    out += [s.compare_set("a", "x", "y"), s.compare_set("a", "zz", "w"), s.compare_set("new", "", "v"),
            s.compare_set("new2", "q", "v")]
    s.append("a", b"bc")
    out += [s.get("a"), s.check(["a", "zz"]), s.check(["a", "c"]), s.delete_key("a"), s.delete_key("a")]
    s.multi_set(["x", "y"], ["1", b"2"])
    out += [s.multi_get(["c", "new", "x", "y"]), s.num_keys()]
    s.set_timeout(SHORT)
    for call in (lambda: s.get("nokey"), lambda: s.wait(["nokey"], SHORT), lambda: s.multi_get(["x", "nokey"])):
        t0 = time.monotonic()
        with pytest.raises(module.DistStoreError):
            call()
        out.append(0.15 < time.monotonic() - t0 < 5)
    with pytest.raises(module.QueueEmptyError):
        s.queue_pop("q", False)
    s.queue_push("q", "1")
    s.queue_push("q", b"2")
    out += [s.queue_len("q"), s.queue_pop("q"), s.queue_pop("q", False), s.queue_len("q"), s.num_keys()]
    s.wait(["x", "y"])
    s.set("x2", "nan")
    with pytest.raises(ValueError):
        s.add("x2", 1)  # PyTorch: ValueError (stoll)
    return out


EXPECTED = [b"x", 3, 5, b"5", b"y", b"y", b"v", b"q", b"ybc", False, True, True, False,
            [b"5", b"v", b"1", b"2"], 4, True, True, True, 2, b"1", b"2", 0, 4]


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(params=["hash", "file", "tcp", "prefix"])
def store(request, tmp_path):
    kind = request.param
    if kind == "hash":
        yield dist.HashStore()
    elif kind == "file":
        yield dist.FileStore(str(tmp_path / "store"), 1)
    elif kind == "prefix":
        yield dist.PrefixStore("job", dist.HashStore())
    else:
        master = dist.TCPStore("127.0.0.1", 0, 1, True)
        yield dist.TCPStore("127.0.0.1", master.port, timeout=datetime.timedelta(seconds=10))
        del master


def test_every_store_has_the_same_semantics(store):
    assert _semantics(store, dist) == EXPECTED
    assert sorted(store.list_keys()) == ["c", "new", "x", "x2", "y"]


def test_the_table_is_pytorchs():
    torch = pytest.importorskip("torch")
    assert _semantics(torch.distributed.HashStore(), torch.distributed) == EXPECTED


def test_prefix_store_prefixes_keys_and_shares_the_timeout():
    base = dist.HashStore()
    p = dist.PrefixStore("pre", base)
    p.set("z", "1")
    p.multi_set(["u", "v"], ["2", "3"])
    assert base.get("pre/z") == b"1" and base.multi_get(["pre/u", "pre/v"]) == [b"2", b"3"]
    assert p.underlying_store is base and p.num_keys() == 3 and sorted(p.list_keys()) == ["u", "v", "z"]
    base.set("other", "x")
    assert p.num_keys() == 4 and not p.check(["other"])  # num_keys is the whole store's, as PyTorch
    p.set_timeout(SHORT)
    assert base.timeout == SHORT


def test_bad_arguments_name_the_store_and_the_call():
    s = dist.HashStore()
    with pytest.raises(TypeError, match="HashStore.get: keys are str, got int"):
        s.get(1)
    with pytest.raises(TypeError, match="HashStore.set: values are str or bytes, got float"):
        s.set("k", 1.5)
    with pytest.raises(TypeError, match="HashStore.add: amount must be an int"):
        s.add("k", "x")
    with pytest.raises(ValueError, match="2 keys but 1 values"):
        s.multi_set(["a", "b"], ["1"])
    with pytest.raises(TypeError, match="expected a list of keys"):
        s.wait("ab")
    with pytest.raises(TypeError, match="timeout must be a datetime.timedelta"):
        s.set_timeout("1s")
    assert s.num_keys() == 0  # nothing half-done
    with pytest.raises(TypeError, match="PrefixStore: store must be a Store"):
        dist.PrefixStore("p", {})


def test_a_blocking_get_is_released_by_a_set_from_another_thread():
    master = dist.TCPStore("127.0.0.1", 0, 1, True)
    client = dist.TCPStore("127.0.0.1", master.port, timeout=datetime.timedelta(seconds=10))
    for s, writer in ((dist.HashStore(),) * 2, (client, master)):
        threading.Timer(0.2, lambda w=writer: w.set("late", "here")).start()
        t0 = time.monotonic()
        assert s.get("late") == b"here" and time.monotonic() - t0 >= 0.15
        threading.Timer(0.1, lambda w=writer: w.queue_push("jobs", "7")).start()
        assert s.queue_pop("jobs") == b"7"


def test_tcp_store_master_waits_for_its_workers_and_clients_for_the_master():
    port = _free_port()
    later = []
    # the client starts first and retries until the master listens
    t = threading.Thread(target=lambda: later.append(dist.TCPStore("127.0.0.1", port, 2, False)))
    t.start()
    time.sleep(0.2)
    master = dist.TCPStore("127.0.0.1", port, 2, True, timeout=datetime.timedelta(seconds=20))
    t.join(20)
    assert master.port == port and later and later[0].port == port
    with pytest.raises(dist.DistStoreError, match=r"waiting for clients: 1/2"):
        dist.TCPStore("127.0.0.1", 0, 2, True, timeout=SHORT)
    with pytest.raises(dist.DistNetworkError, match=r"could not connect to \(127.0.0.1, 0\)"):
        dist.TCPStore("127.0.0.1", 0, timeout=SHORT)  # port 0: nothing listens there
    assert master.libuvBackend is False and master.host == "127.0.0.1"


CHILD = """
import sys, datetime, lucid.distributed as dist
kind, where, me = sys.argv[1], sys.argv[2], int(sys.argv[3])
t = datetime.timedelta(seconds=30)
s = dist.FileStore(where, 2) if kind == "file" else dist.TCPStore("127.0.0.1", int(where), 2, False, timeout=t)
s.set_timeout(t)
s.add("count", 10 * me)
s.set(f"child{me}", "in")
s.wait(["parent"])
s.append("log", str(me))
"""


@pytest.mark.parametrize("kind", ["file", "tcp"])
def test_processes_share_a_store(kind, tmp_path):
    if kind == "file":
        where = str(tmp_path / "shared")
        s = dist.FileStore(where, 3)
    else:
        s = dist.TCPStore("127.0.0.1", 0, 3, True, wait_for_workers=False)
        where = str(s.port)
    s.set_timeout(datetime.timedelta(seconds=30))
    kids = [subprocess.Popen([sys.executable, "-c", CHILD, kind, where, str(i)], env=ENV, cwd=ROOT)
            for i in (1, 2)]
    try:
        s.wait(["child1", "child2"])
        assert int(s.get("count")) == 30
        s.set("parent", "go")
        assert [k.wait(timeout=60) for k in kids] == [0, 0]
    finally:
        for k in kids:
            k.kill() if k.poll() is None else None
    assert sorted(s.get("log").decode()) == ["1", "2"]


def test_error_types_and_debug_level_are_pytorchs(monkeypatch):
    for name, base in [("DistError", RuntimeError), ("DistBackendError", dist.DistError),
                       ("DistNetworkError", dist.DistError), ("DistStoreError", dist.DistError),
                       ("QueueEmptyError", dist.DistStoreError)]:
        assert issubclass(getattr(dist, name), base)
    assert [m.name for m in dist.DebugLevel] == ["OFF", "INFO", "DETAIL"]
    old = dist.get_debug_level()
    try:
        dist.set_debug_level(dist.DebugLevel.DETAIL)
        assert dist.get_debug_level() is dist.DebugLevel.DETAIL
        monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "info")
        dist.set_debug_level_from_env()
        assert dist.get_debug_level() is dist.DebugLevel.INFO
        with pytest.raises(TypeError, match="set_debug_level: expected a DebugLevel"):
            dist.set_debug_level("INFO")
    finally:
        dist.set_debug_level(old)


def test_stores_are_not_imported_with_lucid():
    code = ("import sys, lucid, lucid.distributed; "
            "print(any(m in sys.modules for m in ('socket', 'lucid.distributed.store', 'lucid.distributed._tcp_store')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_init_process_group_checks_its_store():
    from lucid.distributed.process_group import _check_store

    with pytest.raises(TypeError, match="store must be a lucid.distributed.Store"):
        _check_store("init_process_group", {}, None, 2, 0)
    for args, msg in [((None, -1, 0), "world_size must be positive"), ((None, 2, -1), "rank must be non-negative"),
                      (("env://", 2, 0), "Cannot specify both init_method and store")]:
        with pytest.raises(AssertionError, match=msg):
            _check_store("init_process_group", dist.HashStore(), *args)


@pytest.mark.skipif(not HAVE_MPI, reason="needs mpi4py and mpiexec (pip install -e '.[distributed]')")
@pytest.mark.parametrize("n", [2, 3], ids=lambda n: f"{n}ranks")
def test_stores_across_the_ranks_of_an_mpi_job(n, tmp_path):
    sys.path.insert(0, HERE)
    import storeworker

    assert_checks_pass("storeworker.py", storeworker.CHECKS, n, tmp_path, timeout=90)
