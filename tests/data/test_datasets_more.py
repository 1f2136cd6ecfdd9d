"""ChainDataset, StackDataset, worker_init_fn / get_worker_info, prefetch_factor."""
import numpy as np
import pytest

import lucid
from lucid.utils.data import (ChainDataset, DataLoader, Dataset, IterableDataset, StackDataset, TensorDataset,
                              get_worker_info)


class Count(IterableDataset):
    def __init__(self, start, n):
        self.start, self.n = start, n

    def __iter__(self):
        return iter(range(self.start, self.start + self.n))

    def __len__(self):
        return self.n


def test_chain_dataset():
    ds = ChainDataset([Count(0, 3), Count(10, 2)])
    assert list(ds) == [0, 1, 2, 10, 11] and len(ds) == 5
    assert [b.tolist() for b in DataLoader(ds, batch_size=2)] == [[0, 1], [2, 10], [11]]
    bad = ChainDataset([Count(0, 1), TensorDataset(lucid.arange(2))])
    with pytest.raises(TypeError, match="ChainDataset: only supports IterableDataset, got TensorDataset at index 1"):
        list(bad)


def test_stack_dataset_tuple_and_dict():
    a, b = TensorDataset(lucid.arange(4)), [10, 11, 12, 13]
    t = StackDataset(a, b)
    assert len(t) == 4 and t[2][1] == 12 and t[2][0][0].item() == 2
    d = StackDataset(x=a, y=b)
    batch = next(iter(DataLoader(d, batch_size=3)))
    assert batch["x"][0].tolist() == [0, 1, 2] and batch["y"].tolist() == [10, 11, 12]
    with pytest.raises(ValueError, match="size mismatch"):
        StackDataset(a, [1, 2])
    with pytest.raises(ValueError, match="either tuple-like"):
        StackDataset(a, y=b)


class WhoAmI(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        info = get_worker_info()
        return np.array([i, info.id, info.num_workers, info.seed % 1000, WhoAmI.init_mark])

    init_mark = -1


def _init(worker_id):
    WhoAmI.init_mark = 100 + worker_id
    info = get_worker_info()
    assert info.id == worker_id and isinstance(info.dataset, WhoAmI)


@pytest.mark.parametrize("prefetch_factor", [1, 3])
def test_worker_info_and_init_fn_in_workers(prefetch_factor):
    gen = lucid.Generator().manual_seed(3)
    rows = np.concatenate([b.numpy() for b in DataLoader(WhoAmI(), batch_size=2, num_workers=2, generator=gen,
                                                         worker_init_fn=_init, prefetch_factor=prefetch_factor)])
    assert rows[:, 0].tolist() == list(range(6))
    assert rows[:, 1].tolist() == [0, 0, 1, 1, 0, 0]  # batches go round-robin
    assert set(rows[:, 2]) == {2} and rows[:, 4].tolist() == [100, 100, 101, 101, 100, 100]
    seeds = {int(r[1]): int(r[3]) for r in rows}
    assert (seeds[1] - seeds[0]) % 1000 == 1  # base_seed + worker id, as PyTorch
    assert get_worker_info() is None
