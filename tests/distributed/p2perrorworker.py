"""The rank body of test_p2p_errors.py: send/recv of mismatched sizes, under ``lucid-run -n 2``.

``python p2perrorworker.py OUT_DIR`` writes ``OUT_DIR/rank<r>.json``: ``{check: "ok" | traceback}``.
Rank 0 sends, rank 1 receives into a tensor of another size and must get an error naming the
op, both ranks and the shapes (NOTE [Receive sizes] in lucid/distributed/collectives.py); a
matching exchange afterwards proves the ranks are still in step.
"""
import json
import os
import re
import sys
import traceback


import lucid
import lucid.distributed as dist

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def raises(fn, pattern):
    try:
        fn()
    except RuntimeError as e:
        assert re.search(pattern, str(e)), str(e)
        return
    raise AssertionError(f"no RuntimeError matching {pattern!r}")


def roundtrip_still_works(tag):
    if dist.get_rank() == 0:
        dist.send(lucid.tensor([1.5, 2.5]), dst=1, tag=tag)
    else:
        buf = lucid.zeros(2)
        assert dist.recv(buf, src=0, tag=tag) == 0
        assert buf.tolist() == [1.5, 2.5], buf.tolist()


@check
def recv_into_a_smaller_tensor():
    # 5 float32 into room for 3: MPI's truncation error, re-raised with the context
    if dist.get_rank() == 0:
        dist.send(lucid.arange(5, dtype=lucid.float32), dst=1, tag=11)
    else:
        buf = lucid.zeros(3, dtype=lucid.float32)
        raises(lambda: dist.recv(buf, src=0, tag=11),
               r"^recv: rank 1 got from rank 0 \(tag 11\) a message longer than the receive tensor "
               r"\(shape \(3,\), dtype float32, 12 bytes\)")
    roundtrip_still_works(12)


@check
def irecv_into_a_larger_tensor():
    # 2 float64 into room for 2 x 3: MPI would fill a third of it silently
    if dist.get_rank() == 0:
        dist.isend(lucid.tensor([1.0, 2.0], dtype=lucid.float64), dst=1, tag=21).wait()
    else:
        buf = lucid.zeros(2, 3, dtype=lucid.float64)
        work = dist.irecv(buf, src=0, tag=21)
        raises(work.wait, r"^irecv: rank 1 got from rank 0 \(tag 21\) a message of 16 bytes \(2 elements "
                          r"of float64\), but the receive tensor \(shape \(2, 3\), dtype float64, 48 bytes\) "
                          r"expects 6 elements")
        assert work.is_completed()  # the failed receive is over: waiting again does not hang
    roundtrip_still_works(22)


@check
def large_message_from_any_source():
    # past MPI's eager limit (a rendezvous transfer), received from any source
    if dist.get_rank() == 0:
        dist.send(lucid.zeros(100_000), dst=1, tag=31)
    else:
        buf = lucid.zeros(10)
        raises(lambda: dist.recv(buf, tag=31), r"^recv: rank 1 got from rank 0 \(tag 31\) a message longer")
    roundtrip_still_works(32)


@check
def is_completed_reports_the_error_too():
    if dist.get_rank() == 0:
        dist.send(lucid.tensor([1, 2, 3], dtype=lucid.int32), dst=1, tag=41)
    else:
        work = dist.irecv(lucid.zeros(4, dtype=lucid.int32), src=0, tag=41)

        def poll():
            while not work.is_completed():
                pass

        raises(poll, r"^irecv: .* a message of 12 bytes \(3 elements of int32\)")
    roundtrip_still_works(42)


def main():
    out_dir = sys.argv[1]
    dist.init_process_group("mpi")
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:  # noqa: BLE001  (reported to pytest)
            results[name] = traceback.format_exc()
        dist.barrier()
    with open(os.path.join(out_dir, f"rank{dist.get_rank()}.json"), "w") as f:
        json.dump(results, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
