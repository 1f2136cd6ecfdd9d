"""lucid.utils.data: datasets, samplers and the DataLoader (including real worker processes)."""
import collections
import math

import numpy as np
import pytest

import lucid
from lucid.utils.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, IterableDataset,
                              RandomSampler, SequentialSampler, Subset, SubsetRandomSampler, TensorDataset,
                              WeightedRandomSampler, default_collate, get_worker_info, random_split)


def _gen(seed):
    return lucid.Generator().manual_seed(seed)


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if not 0 <= i < self.n:
            raise IndexError(i)
        return {"x": np.array([i, i * i], dtype=np.float32), "y": i}


class FailsAt(Dataset):
    def __init__(self, n, bad):
        self.n, self.bad = n, bad

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad:
            raise KeyError(f"no sample {i}")
        return i


class Stream(IterableDataset):
    """0..n-1, split between workers with get_worker_info (PyTorch's recipe)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        info = get_worker_info()
        if info is None:
            return iter(range(self.n))
        per = math.ceil(self.n / info.num_workers)
        return iter(range(info.id * per, min(self.n, (info.id + 1) * per)))


# --------------------------------------------------------------------- datasets
def test_tensor_dataset_and_errors():
    ds = TensorDataset(lucid.arange(5), lucid.arange(5) * 10)
    assert len(ds) == 5
    a, b = ds[3]
    assert a.item() == 3 and b.item() == 30
    with pytest.raises(ValueError, match="size mismatch"):
        TensorDataset(lucid.arange(3), lucid.arange(4))
    with pytest.raises(NotImplementedError):
        Dataset()[0]
    with pytest.raises(NotImplementedError):
        iter(IterableDataset())


def test_subset_and_concat():
    ds = TensorDataset(lucid.arange(6))
    sub = Subset(ds, [4, 0, 2])
    assert len(sub) == 3 and [sub[i][0].item() for i in range(3)] == [4, 0, 2]
    cat = ConcatDataset([Squares(3), Squares(2)])
    assert len(cat) == 5 and cat.cumulative_sizes == [3, 5]
    assert [cat[i]["y"] for i in range(5)] == [0, 1, 2, 0, 1]
    assert cat[-1]["y"] == 1 and cat[-5]["y"] == 0
    with pytest.raises(IndexError):
        cat[-6]
    assert len(Squares(2) + Squares(4)) == 6
    with pytest.raises(TypeError):
        ConcatDataset([Stream(3)])


def test_random_split_lengths_fractions_and_reproducibility():
    ds = TensorDataset(lucid.arange(10))
    a, b = random_split(ds, [7, 3], generator=_gen(0))
    idx = sorted(a.indices + b.indices)
    assert (len(a), len(b)) == (7, 3) and idx == list(range(10))
    a2, b2 = random_split(ds, [7, 3], generator=_gen(0))
    assert a2.indices == a.indices and b2.indices == b.indices
    c, _ = random_split(ds, [7, 3], generator=_gen(1))
    assert c.indices != a.indices
    parts = random_split(range(11), [0.5, 0.3, 0.2], generator=_gen(0))
    assert [len(p) for p in parts] == [6, 3, 2]  # floor 5, 3, 2 + remainder round robin
    with pytest.raises(ValueError, match="sum of input lengths"):
        random_split(ds, [5, 4])
    lucid.manual_seed(3)
    d1 = random_split(ds, [5, 5])[0].indices
    lucid.manual_seed(3)
    assert random_split(ds, [5, 5])[0].indices == d1


# --------------------------------------------------------------------- samplers
def test_sequential_and_random_sampler():
    assert list(SequentialSampler(range(4))) == [0, 1, 2, 3]
    s = RandomSampler(range(8), generator=_gen(0))
    perm = list(s)
    assert sorted(perm) == list(range(8)) and len(s) == 8
    assert list(RandomSampler(range(8), generator=_gen(0))) == perm
    assert list(s) != perm  # the generator advances between epochs
    many = list(RandomSampler(range(3), num_samples=7, generator=_gen(0)))
    assert len(many) == 7 and sorted(many[:3]) == [0, 1, 2] and sorted(many[3:6]) == [0, 1, 2]
    rep = list(RandomSampler(range(3), replacement=True, num_samples=50, generator=_gen(0)))
    assert len(rep) == 50 and set(rep) == {0, 1, 2}
    with pytest.raises(ValueError, match="num_samples"):
        RandomSampler(range(3), num_samples=0)


def test_batch_sampler():
    assert list(BatchSampler(range(7), 3, drop_last=False)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(BatchSampler(range(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(BatchSampler(range(7), 3, False)) == 3 and len(BatchSampler(range(7), 3, True)) == 2
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(3), 0, False)


def test_weighted_random_sampler_frequencies():
    w = [1.0, 0.0, 3.0, 6.0]
    draws = list(WeightedRandomSampler(w, num_samples=20000, generator=_gen(0)))
    freq = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(freq, np.array(w) / 10, atol=0.015)
    assert freq[1] == 0
    no_rep = list(WeightedRandomSampler(lucid.tensor(w), num_samples=3, replacement=False, generator=_gen(0)))
    assert sorted(no_rep) == [0, 2, 3]
    with pytest.raises(ValueError):
        WeightedRandomSampler([1.0, -1.0], 2)
    with pytest.raises(ValueError):
        WeightedRandomSampler(w, 4, replacement=False)


def test_subset_random_sampler():
    idx = [10, 20, 30, 40]
    out = list(SubsetRandomSampler(idx, generator=_gen(0)))
    assert sorted(out) == idx and len(SubsetRandomSampler(idx)) == 4
    assert list(SubsetRandomSampler(idx, generator=_gen(0))) == out


def test_generator_type_is_checked():
    with pytest.raises(TypeError, match="Generator"):
        list(RandomSampler(range(3), generator=np.random.default_rng(0)))


# ------------------------------------------------------------------- DataLoader
def test_batches_drop_last_and_len():
    ds = TensorDataset(lucid.arange(10.0), lucid.arange(10))
    dl = DataLoader(ds, batch_size=4)
    batches = list(dl)
    assert len(dl) == 3 and [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].dtype == lucid.float32 and batches[0][1].shape == (4,)
    dl = DataLoader(ds, batch_size=4, drop_last=True)
    assert len(dl) == 2 and [b[1].tolist() for b in dl] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_shuffle_with_generator_is_reproducible_and_a_permutation():
    ds = TensorDataset(lucid.arange(12))
    epoch = lambda g: [b[0].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True, generator=g)]  # noqa: E731
    a = epoch(_gen(7))
    assert sorted(sum(a, [])) == list(range(12)) and sum(a, []) != list(range(12))
    assert epoch(_gen(7)) == a
    g = _gen(7)
    first, second = epoch(g), epoch(g)
    assert first == a and second != first  # a new order each epoch
    lucid.manual_seed(0)
    d1 = [b[0].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)]
    lucid.manual_seed(0)
    assert [b[0].tolist() for b in DataLoader(ds, batch_size=5, shuffle=True)] == d1


def test_default_collate_structures():
    b = next(iter(DataLoader(Squares(5), batch_size=3)))
    assert set(b) == {"x", "y"}
    assert b["x"].shape == (3, 2) and b["x"].dtype == lucid.float32
    assert b["y"].tolist() == [0, 1, 2] and b["y"].dtype == lucid.int64
    out = default_collate([(1.0, "a", True, np.float32(2)), (2.0, "b", False, np.float32(3))])
    assert out[0].dtype == lucid.float64 and out[1] == ["a", "b"] and out[2].tolist() == [True, False]
    assert out[3].dtype == lucid.float32
    Pt = collections.namedtuple("Pt", "x y")
    pt = default_collate([Pt(1, 2), Pt(3, 4)])
    assert isinstance(pt, Pt) and pt.x.tolist() == [1, 3]
    with pytest.raises(TypeError, match="default_collate"):
        default_collate([object()])


def test_sampler_batch_sampler_collate_fn_and_no_batching():
    ds = Squares(6)
    dl = DataLoader(ds, batch_size=2, sampler=[5, 3, 1])
    assert [b["y"].tolist() for b in dl] == [[5, 3], [1]]
    dl = DataLoader(ds, batch_sampler=[[0, 5], [2], [1, 1, 1]])
    assert [b["y"].tolist() for b in dl] == [[0, 5], [2], [1, 1, 1]] and len(dl) == 3
    dl = DataLoader(ds, batch_size=3, collate_fn=lambda s: sum(d["y"] for d in s))
    assert list(dl) == [3, 12]
    dl = DataLoader(ds, batch_size=None)
    items = list(dl)
    assert len(items) == 6 and items[2]["y"] == 2 and isinstance(items[2]["x"], lucid.Tensor)
    assert items[2]["x"].tolist() == [2.0, 4.0]
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, batch_sampler=[[0]], batch_size=2)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(ds, sampler=[0], shuffle=True)
    with pytest.raises(ValueError, match="drop_last"):
        DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)


def test_iterable_dataset_single_process_and_pin_memory():
    dl = DataLoader(Stream(7), batch_size=3, pin_memory=True)
    assert [b.tolist() for b in dl] == [[0, 1, 2], [3, 4, 5], [6]] and len(dl) == 3
    assert [b.tolist() for b in DataLoader(Stream(7), batch_size=3, drop_last=True)] == [[0, 1, 2], [3, 4, 5]]
    assert list(DataLoader(Stream(3), batch_size=None)) == [0, 1, 2]
    with pytest.raises(ValueError, match="IterableDataset"):
        DataLoader(Stream(3), shuffle=True)


def test_training_loop_over_loader():
    X = lucid.tensor(np.linspace(-1, 1, 32).reshape(-1, 1))
    ds = TensorDataset(X, 3 * X + 1)
    w = lucid.zeros(1, 1, dtype=lucid.float64, requires_grad=True)
    b = lucid.zeros(1, dtype=lucid.float64, requires_grad=True)
    opt = lucid.optim.SGD([w, b], lr=0.3)
    for _ in range(30):
        for xb, yb in DataLoader(ds, batch_size=8, shuffle=True, generator=_gen(0)):
            opt.zero_grad()
            ((xb @ w + b - yb) ** 2).mean().backward()
            opt.step()
    assert w.item() == pytest.approx(3.0, abs=1e-3) and b.item() == pytest.approx(1.0, abs=1e-3)


# ---------------------------------------------------------------- worker processes
def test_workers_give_the_same_batches_in_the_same_order():
    ds = Squares(23)
    kw = dict(batch_size=4, shuffle=True)
    single = [(b["y"].tolist(), b["x"].tolist()) for b in DataLoader(ds, generator=_gen(5), **kw)]
    multi = [(b["y"].tolist(), b["x"].tolist()) for b in DataLoader(ds, generator=_gen(5), num_workers=2,
                                                                      pin_memory=True, **kw)]
    assert multi == single and len(single) == 6
    # sharded IterableDataset: workers interleave batch by batch, each yielding its shard
    got = [b.tolist() for b in DataLoader(Stream(10), batch_size=2, num_workers=2)]
    assert sorted(sum(got, [])) == list(range(10))
    assert got[:2] == [[0, 1], [5, 6]]


def test_worker_error_reports_type_and_index():
    with pytest.raises(KeyError) as info:
        list(DataLoader(FailsAt(8, bad=5), batch_size=2, num_workers=2))
    msg = str(info.value)
    assert "index 5" in msg and "worker process" in msg and "no sample 5" in msg
    with pytest.raises(KeyError, match="no sample 2"):  # and in this process: the plain error
        list(DataLoader(FailsAt(4, bad=2), batch_size=2))
