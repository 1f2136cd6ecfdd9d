"""The rank body of test_c10d_extras.py (protocol in rankchecks.py): coalesced collectives,
``split_group``, ``get_pg_count`` and ``breakpoint`` on real MPI ranks."""
import sys
import warnings

import numpy as np

import lucid
import lucid.distributed as dist

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


@check
def all_reduce_coalesced_reduces_every_tensor():
    r, n = dist.get_rank(), dist.get_world_size()
    a = lucid.tensor(np.arange(6.0).reshape(2, 3) * (r + 1))
    b = lucid.tensor(np.array([r + 1, 10 * (r + 1)], dtype=np.int64))
    c = lucid.tensor(np.array([float(r)], dtype=np.float32))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert dist.all_reduce_coalesced([a, b, c]) is None
    assert any(issubclass(x.category, FutureWarning) for x in w)
    s = n * (n + 1) // 2
    np.testing.assert_array_equal(a.numpy(), np.arange(6.0).reshape(2, 3) * s)
    assert b.tolist() == [s, 10 * s] and b.dtype == lucid.int64 and c.dtype == lucid.float32
    assert c.item() == n * (n - 1) / 2
    work = dist.all_reduce_coalesced([a], op=dist.ReduceOp.MAX, async_op=True)
    assert work.wait() and work.is_completed()
    np.testing.assert_array_equal(a.numpy(), np.arange(6.0).reshape(2, 3) * s)


@check
def all_gather_coalesced_gathers_every_tensor():
    r, n = dist.get_rank(), dist.get_world_size()
    ins = [lucid.full((2,), float(r)), lucid.full((1, 3), 10.0 * r)]
    outs = [[lucid.zeros(2), lucid.zeros(1, 3)] for _ in range(n)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        dist.all_gather_coalesced(outs, ins)
    for q in range(n):
        assert outs[q][0].tolist() == [float(q)] * 2 and outs[q][1].tolist() == [[10.0 * q] * 3]


@check
def split_group_gives_each_rank_its_part_and_counts_groups():
    r, n = dist.get_rank(), dist.get_world_size()
    before = dist.get_pg_count()
    assert before >= 1
    parts = [list(range(0, n, 2)), list(range(1, n, 2))]
    pg = dist.split_group(split_ranks=parts)
    assert dist.get_pg_count() == before + 2
    mine = parts[r % 2]
    assert dist.get_process_group_ranks(pg) == mine and dist.get_rank(pg) == mine.index(r)
    t = lucid.tensor([float(r)])
    dist.all_reduce(t, group=pg)
    assert t.item() == sum(mine)
    solo = dist.split_group(split_ranks=[[0]])
    assert (solo is None) == (r != 0)
    try:
        dist.split_group(split_ranks=[[0], [0]])
    except ValueError as e:
        assert "more than one split" in str(e)
    else:
        raise AssertionError("overlapping splits accepted")


@check
def breakpoint_on_no_rank_is_a_barrier():
    dist.breakpoint(rank=dist.get_world_size() + 5)  # nobody stops; everybody meets
    for _ in range(2):
        dist.breakpoint(rank=0, skip=2)  # the first two calls from this line are skipped


if __name__ == "__main__":
    from rankchecks import rank_main

    rank_main(CHECKS, sys.argv[1:])
