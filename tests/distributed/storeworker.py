"""The rank body of test_store.py's MPI test: a ``TCPStore`` hosted by rank 0 and a ``FileStore``
shared through a file, across the ranks of one ``lucid-run`` job, and ``init_process_group``
given the store. Rank 0 publishes its server's port in the FileStore (the rendezvous MPI does
not need) and waits for every client before MPI starts. Writes ``rank<r>.json`` as
rankchecks.py's protocol.
"""
import datetime
import json
import os
import socket
import sys
import traceback

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _store_barrier(store, key, n):
    """Every rank adds one; the last one to arrive sets the flag the others wait for."""
    if store.add(key, 1) == n:
        store.set(key + "/go", "1")
    store.wait([key + "/go"])


@check
def tcp_store_is_shared_by_every_rank(r, n, tcp, files):
    assert tcp.add("sum", r + 1) >= r + 1
    tcp.set(f"rank{r}", f"hello from {r}")
    _store_barrier(tcp, "b1", n)
    assert tcp.get("sum") == str(n * (n + 1) // 2).encode()
    assert tcp.multi_get([f"rank{q}" for q in range(n)]) == [f"hello from {q}".encode() for q in range(n)]
    # exactly one rank wins the compare-and-set race; all see the winner's value
    won = tcp.compare_set("leader", "", str(r)) == str(r).encode()
    _store_barrier(tcp, "b2", n)
    leader = int(tcp.get("leader"))
    import lucid.distributed as dist
    from lucid import tensor

    wins = tensor([int(won)])
    dist.all_reduce(wins)
    assert wins.item() == 1 and 0 <= leader < n
    # a queue: every rank pushes, rank 0 pops them all
    tcp.queue_push("q", str(r))
    _store_barrier(tcp, "b3", n)
    if r == 0:
        assert sorted(int(tcp.queue_pop("q")) for _ in range(n)) == list(range(n))
        assert tcp.queue_len("q") == 0
    _store_barrier(tcp, "b4", n)
    # a blocking get released by another rank's set
    if r == n - 1:
        tcp.set("late", "x")
    assert tcp.get("late") == b"x"


@check
def file_store_is_shared_by_every_rank(r, n, tcp, files):
    files.append("log", f"{r};")
    _store_barrier(files, "fb1", n)
    assert sorted(files.get("log").decode().split(";")[:-1]) == [str(q) for q in range(n)]
    assert files.add("fsum", 2 * r) >= 0
    _store_barrier(files, "fb2", n)
    assert int(files.get("fsum")) == n * (n - 1)


@check
def init_process_group_keeps_the_store(r, n, tcp, files):
    from lucid.distributed.process_group import _get_default_store

    assert _get_default_store() is tcp


@check
def a_missing_key_times_out_with_dist_store_error(r, n, tcp, files):
    import lucid.distributed as dist

    try:
        tcp.wait(["never"], datetime.timedelta(seconds=0.2))
    except dist.DistStoreError as e:
        assert "TCPStore.wait" in str(e) and "never" in str(e), str(e)
    else:
        raise AssertionError("wait for a missing key returned")


def main(out_dir):
    import lucid.distributed as dist

    r, n = int(os.environ["PMI_RANK"]), int(os.environ["PMI_SIZE"])
    files = dist.FileStore(os.path.join(out_dir, "rendezvous"), n)
    timeout = datetime.timedelta(seconds=60)
    if r == 0:  # the master waits for every client before MPI starts (NOTE [TCP store and MPI start-up])
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        files.set("port", str(port))
        tcp = dist.TCPStore("127.0.0.1", port, n, True, timeout=timeout)
    else:
        tcp = dist.TCPStore("127.0.0.1", int(files.get("port")), n, False, timeout=timeout)
    dist.init_process_group("mpi", store=tcp, world_size=n, rank=r)
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn(r, n, tcp, files)
            results[name] = "ok"
        except Exception:  # noqa: BLE001  (reported to pytest with every rank's traceback)
            results[name] = traceback.format_exc()
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{r}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
