"""DistributedSampler without MPI (explicit num_replicas/rank): PyTorch's partitioning."""
import math

import numpy as np
import pytest

import lucid
from lucid.utils.data.distributed import DistributedSampler

CASES = [(10, 3, False), (10, 3, True), (9, 3, False), (2, 5, False), (7, 2, True), (1, 4, False),
         (0, 2, False), (12, 4, True)]


def expected(n, replicas, rank, drop_last, order):
    """PyTorch's algorithm, written out: pad by repetition (or cut), then stride by rank."""
    num = math.ceil((n - replicas) / replicas) if drop_last and n % replicas else math.ceil(n / replicas)
    total = num * replicas
    idx = list(order)
    if drop_last:
        idx = idx[:total]
    else:
        while len(idx) < total:
            idx += list(order)[:total - len(idx)]
    return idx[rank:total:replicas]


@pytest.mark.parametrize("n,replicas,drop_last", CASES)
def test_partition_without_shuffle(n, replicas, drop_last):
    parts = [list(DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last))
             for r in range(replicas)]
    for r, part in enumerate(parts):
        assert part == expected(n, replicas, r, drop_last, range(n))
        assert len(part) == len(DistributedSampler(range(n), replicas, r, drop_last=drop_last))
    assert len({len(p) for p in parts}) == 1  # same length on every rank
    if not drop_last:
        assert set().union(*map(set, parts)) == set(range(n))  # the union covers the dataset
    else:
        assert sorted(sum(parts, [])) == list(range(sum(map(len, parts))))  # no repeats


def test_shuffle_is_a_seeded_permutation_partitioned_the_same_way():
    n, replicas = 11, 3
    order = lucid.randperm(n, generator=lucid.Generator().manual_seed(5 + 2)).tolist()  # seed + epoch
    for r in range(replicas):
        s = DistributedSampler(range(n), replicas, r, seed=5)
        s.set_epoch(2)
        assert list(s) == expected(n, replicas, r, False, order)
    a = DistributedSampler(range(n), replicas, 0, seed=5)
    first = list(a)
    assert list(a) == first  # same epoch, same order
    a.set_epoch(1)
    assert list(a) != first  # a new epoch reshuffles
    assert list(DistributedSampler(range(n), replicas, 0, seed=6)) != first


@pytest.mark.parametrize("n,replicas,drop_last", CASES)
def test_matches_pytorch_without_shuffle(n, replicas, drop_last):
    torch = pytest.importorskip("torch")
    from torch.utils.data.distributed import DistributedSampler as TorchSampler

    for r in range(replicas):
        want = list(TorchSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last))
        assert list(DistributedSampler(range(n), replicas, r, shuffle=False, drop_last=drop_last)) == want
        assert len(DistributedSampler(range(n), replicas, r, drop_last=drop_last)) == \
            len(TorchSampler(range(n), replicas, r, drop_last=drop_last))
    _ = torch


def test_bad_arguments():
    with pytest.raises(ValueError, match=r"invalid rank 3, rank should be in the interval \[0, 2\]"):
        DistributedSampler(range(4), num_replicas=3, rank=3)
    with pytest.raises(ValueError, match="num_replicas"):
        DistributedSampler(range(4), num_replicas=0, rank=0)
    with pytest.raises(ValueError, match="init_process_group"):
        DistributedSampler(range(4))  # no process group and no explicit rank
    _ = np
