"""DataLoader with worker processes and the less common pieces of lucid.utils.data, against
torch.utils.data 2.13 (a differential sweep; the expected values below are what torch gives).

Workers start with the default context (fork on Linux). Tests that could hang on a regression
run under a SIGALRM deadline."""
import collections
import multiprocessing
import sys
import time
import warnings

import numpy as np
import pytest
from conftest import deadline

import lucid
from lucid.utils.data import (ChainDataset, ConcatDataset, DataLoader, Dataset, IterableDataset, StackDataset,
                              Subset, TensorDataset, WeightedRandomSampler, get_worker_info, random_split)

posix = pytest.mark.skipif(sys.platform == "win32", reason="POSIX worker processes")


def lists(loader):
    return [b.tolist() for b in loader]


class Squares(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i * i


class Stream(IterableDataset):
    """``range(n)``; with ``shard`` each worker takes every ``num_workers``-th item."""

    def __init__(self, n, shard=False, length=None):
        self.n, self.shard, self.length = n, shard, length

    def __iter__(self):
        info = get_worker_info()
        if self.shard and info is not None:
            return iter(range(info.id, self.n, info.num_workers))
        return iter(range(self.n))

    def __len__(self):
        if self.length is None:
            raise TypeError("no length")
        return self.length


class FailsAt(Dataset):
    def __init__(self, exc, at=2, slow=None):
        self.exc, self.at, self.slow = exc, at, slow

    def __len__(self):
        return 4

    def __getitem__(self, i):
        if i == self.slow:
            time.sleep(0.3)
        if i == self.at:
            raise self.exc(f"no sample {i}")
        return i


class Batched(Dataset):
    """Has ``__getitems__``: the loader must use it (one call per batch), as torch's fetcher does."""

    def __len__(self):
        return 5

    def __getitem__(self, i):
        return ("single", i)

    def __getitems__(self, indices):
        return [("many", i) for i in indices]


class SlowFirst(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        time.sleep(0.5 if i == 0 else 0.0)
        return i


# ------------------------------------------------------------------ IterableDataset in workers
@posix
def test_iterable_drop_last_drops_each_workers_short_batch():
    # torch: each worker's fetcher drops its own short last batch
    with deadline(30):
        dup = lists(DataLoader(Stream(7), batch_size=2, drop_last=True, num_workers=2))
        assert dup == [[0, 1], [0, 1], [2, 3], [2, 3], [4, 5], [4, 5]]
        sharded = lists(DataLoader(Stream(7, shard=True), batch_size=2, drop_last=True, num_workers=2))
        assert sharded == [[0, 2], [1, 3], [4, 6]]
        assert lists(DataLoader(Stream(7), batch_size=3, drop_last=True, num_workers=1)) == [[0, 1, 2], [3, 4, 5]]
        # without drop_last the short batches stay (and duplicates when not sharded, as torch)
        assert lists(DataLoader(Stream(5, shard=True), batch_size=2, num_workers=2)) == [[0, 2], [1, 3], [4]]


def test_length_warning_after_len_of_an_iterable_loader():
    loader = DataLoader(Stream(7, length=3), batch_size=None)
    assert len(loader) == 3
    with pytest.warns(UserWarning, match="was reported to be 3"):
        assert list(loader) == list(range(7))
    quiet = DataLoader(Stream(7, length=3), batch_size=None)  # len() never asked: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(quiet) == list(range(7))
    # torch compares batches (not samples) with the reported length: 5 batches > 3
    batched = DataLoader(Stream(9, length=3), batch_size=2)
    assert len(batched) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert len(list(batched)) == 5
    assert [str(w.message).count(f"but {k} samples") for w, k in zip(caught, (4, 5))] == [1, 1]


def test_iterator_has_len_and_an_iterable_loader_keeps_torchs_samplers():
    it = iter(DataLoader(Squares(5), batch_size=2))
    assert len(it) == 3 and next(it).tolist() == [0, 1]
    assert len(iter(DataLoader(Squares(5), batch_size=2, drop_last=True))) == 2
    loader = DataLoader(Stream(3), batch_size=2)
    assert type(loader.sampler).__name__ == "_InfiniteConstantSampler"
    assert loader.batch_sampler.batch_size == 2
    assert lists(loader) == [[0, 1], [2]]


# ------------------------------------------------------------------ errors in workers
@posix
@pytest.mark.parametrize("exc", [ValueError, KeyError, ZeroDivisionError])
def test_a_worker_error_comes_in_its_turn_with_its_type_and_worker_id(exc):
    seen = []
    with deadline(30), pytest.raises(exc) as info:
        # worker 0 reports the error for batch 2 before worker 1 delivers batch 1
        for b in DataLoader(FailsAt(exc, slow=1), num_workers=2):
            seen.append(b.tolist())
    assert seen == [[0], [1]]  # the batches before the failing one come out first, as in torch
    assert "in DataLoader worker process 0" in str(info.value) and "no sample 2" in str(info.value)


@posix
def test_a_batch_in_a_graph_is_refused_by_the_worker_as_torch():
    x = lucid.ones(4, 2, requires_grad=True)
    with deadline(30), pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor"):
        list(DataLoader(TensorDataset(x), batch_size=2, num_workers=1))  # (stacked: part of x's graph)
    with deadline(30):  # data without a graph crosses, and a leaf keeps requires_grad, as in torch
        assert [b[0].tolist() for b in DataLoader(TensorDataset(x.detach()), batch_size=2, num_workers=1)] == \
            [[[1.0, 1.0]] * 2] * 2
        (leaf,) = DataLoader([x], batch_size=None, num_workers=1)
        assert leaf.requires_grad and leaf.is_leaf
    assert all(b[0].requires_grad for b in DataLoader(TensorDataset(x), batch_size=2))  # in-process: the graph stays


@posix
def test_stop_iteration_from_getitem_ends_the_epoch_quietly():
    assert lists(DataLoader(FailsAt(StopIteration))) == [[0], [1]]
    with deadline(30):
        assert lists(DataLoader(FailsAt(StopIteration), num_workers=2)) == [[0], [1]]


def test_timeout_needs_workers_and_prefetch_factor_zero_is_refused():
    loader = DataLoader(Squares(2), timeout=1)
    with pytest.raises(ValueError, match="timeout") as info:
        iter(loader)
    assert isinstance(info.value, AssertionError)  # torch's type
    with pytest.raises(ValueError, match="prefetch_factor") as info:  # torch: asserts when iterating
        DataLoader(Squares(2), num_workers=1, prefetch_factor=0)
    assert isinstance(info.value, AssertionError)


# ------------------------------------------------------------------ options
@posix
def test_in_order_false_lets_ready_batches_pass_a_slow_one():
    with deadline(30):
        ordered = [int(b) for b in DataLoader(SlowFirst(), batch_size=None, num_workers=2)]
        loose = [int(b) for b in DataLoader(SlowFirst(), batch_size=None, num_workers=2, in_order=False)]
    assert ordered == [0, 1, 2, 3]
    assert sorted(loose) == [0, 1, 2, 3] and loose[0] != 0
    assert DataLoader(Squares(2)).in_order is True


@posix
def test_a_new_iter_restarts_the_single_iterator_of_persistent_workers():
    loader = DataLoader(Squares(6), batch_size=2, num_workers=2, persistent_workers=True)
    try:
        with deadline(30):
            first = iter(loader)
            assert next(first).tolist() == [0, 1]
            second = iter(loader)  # torch: the same iterator, restarted (it used to hang here)
            assert second is first and next(second).tolist() == [0, 1]
            assert next(first).tolist() == [4, 9] and lists(second) == [[16, 25]]
            assert lists(loader) == [[0, 1], [4, 9], [16, 25]]
    finally:
        loader._pool.shutdown()


def _collect_in_child(loader):
    loader._pool.shutdown(grace=0.0)
    time.sleep(0.3)  # (a worker lives on: its queues' feeder threads get to write)


@posix
def test_a_forked_child_collecting_a_persistent_pool_leaves_the_parents_workers_alone():
    loader = DataLoader(Squares(4), batch_size=2, num_workers=1, persistent_workers=True)
    try:
        with deadline(30):
            assert lists(loader) == [[0, 1], [4, 9]]
            # what gc does in a worker of another loader that inherited this one
            child = multiprocessing.get_context("fork").Process(target=_collect_in_child, args=(loader,))
            child.start()
            child.join()
            assert lists(loader) == [[0, 1], [4, 9]]  # the workers were not told to stop
    finally:
        loader._pool.shutdown()


def test_multiprocessing_context_checks():
    with pytest.raises(ValueError, match="num_workers > 0"):
        DataLoader(Squares(3), multiprocessing_context="spawn")
    with pytest.raises(ValueError, match="valid start method"):
        DataLoader(Squares(3), num_workers=1, multiprocessing_context="bogus")
    with pytest.raises(TypeError, match="valid context object"):
        DataLoader(Squares(3), num_workers=1, multiprocessing_context=3)
    ctx = DataLoader(Squares(3), num_workers=1, multiprocessing_context="spawn").multiprocessing_context
    assert isinstance(ctx, multiprocessing.context.BaseContext) and ctx.get_start_method() == "spawn"


def test_loader_attributes_and_frozen_options():
    loader = DataLoader(Squares(4), batch_size=2)
    assert loader.prefetch_factor is None and DataLoader(Squares(4), num_workers=2).prefetch_factor == 2
    for name in ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset", "persistent_workers"):
        with pytest.raises(ValueError, match=f"{name} attribute should not be set"):
            setattr(loader, name, getattr(loader, name))
    loader.num_workers = 0  # not frozen in torch either
    assert lists(loader) == [[0, 1], [4, 9]]


def test_too_many_workers_warn(monkeypatch):
    import os

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    with pytest.warns(UserWarning, match="will create 2 worker processes"):
        DataLoader(Squares(2), num_workers=2)


@posix
def test_worker_info_is_frozen_with_torchs_fields():
    class Info(Dataset):
        def __len__(self):
            return 1

        def __getitem__(self, i):
            info = get_worker_info()
            try:
                info.id = 7
                frozen = False
            except AttributeError:
                frozen = True
            return frozen, info.rng, info.worker_method, info.id, info.num_workers, info.dataset is self

    assert get_worker_info() is None
    with deadline(30):
        (got,) = DataLoader(Info(), batch_size=None, num_workers=1)
    assert got == [True, None, "multiprocessing", 0, 1, True]  # (default_convert: a tuple becomes a list)


# ------------------------------------------------------------------ __getitems__
@posix
def test_loader_fetches_a_batch_through_getitems():
    assert DataLoader(Batched(), batch_size=2, collate_fn=list).__iter__().__next__() == [("many", 0), ("many", 1)]
    with deadline(30):
        batches = list(DataLoader(Batched(), batch_size=3, num_workers=2, collate_fn=list))
    assert batches == [[("many", 0), ("many", 1), ("many", 2)], [("many", 3), ("many", 4)]]
    # without automatic batching a sample is still read with __getitem__
    assert list(DataLoader(Batched(), batch_size=None, collate_fn=lambda s: s))[:1] == [("single", 0)]


def test_subset_and_stack_dataset_getitems():
    inner = Subset(list(range(10, 20)), [5, 3, 1, 0])
    outer = Subset(inner, [2, 0])
    assert outer.__getitems__([0, 1]) == [11, 15] and (outer[0], outer[1], len(outer)) == (11, 15, 2)
    assert Subset(Batched(), range(4)).__getitems__([3, 1]) == [("many", 3), ("many", 1)]
    assert type(Subset([1, 2, 3], range(2)).indices) is range  # kept as given, as torch
    tup = StackDataset(Squares(3), [1, 2, 3])
    assert tup.__getitems__([0, 2]) == [(0, 1), (4, 3)]
    named = StackDataset(a=Squares(5), b=Batched())
    assert named.__getitems__([1, 4]) == [{"a": 1, "b": ("many", 1)}, {"a": 16, "b": ("many", 4)}]
    batch = next(iter(DataLoader(StackDataset(a=Squares(3), b=[1.0, 2.0, 3.0]), batch_size=2)))
    assert batch["a"].tolist() == [0, 1] and batch["b"].tolist() == [1.0, 2.0]

    class Short(Dataset):
        def __len__(self):
            return 2

        def __getitems__(self, indices):
            return [0]

    with pytest.raises(ValueError, match="size mismatch"):
        StackDataset(Short(), [1, 2]).__getitems__([0, 1])


# ------------------------------------------------------------------ datasets and samplers
def test_random_split_warns_about_empty_parts():
    g = lucid.Generator().manual_seed(0)
    with pytest.warns(UserWarning, match="index 2 is 0"):
        parts = random_split(Squares(7), [0.7, 0.2, 0.1], generator=g)
    assert [len(p) for p in parts] == [5, 2, 0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [len(p) for p in random_split(Squares(10), [0.3, 0.3, 0.4], generator=g)] == [3, 3, 4]
        assert [len(p) for p in random_split(Squares(11), [0.1] * 10, generator=g)] == [2] + [1] * 9


def test_dataset_errors_keep_their_types_and_gain_torchs():
    class S(IterableDataset):
        def __iter__(self):
            return iter(())

    for make, types in [(lambda: ConcatDataset([Squares(2), S()]), (TypeError, AssertionError)),
                        (lambda: ConcatDataset([]), (ValueError, AssertionError)),
                        (lambda: ConcatDataset([Squares(2)])[-3], (IndexError, ValueError)),
                        (lambda: list(ChainDataset([Squares(2)])), (TypeError, AssertionError)),
                        (lambda: TensorDataset(lucid.zeros(2), lucid.zeros(3)), (ValueError, AssertionError)),
                        (lambda: TensorDataset(), (ValueError, IndexError)),
                        (lambda: WeightedRandomSampler([1.0, -2.0], 1), (ValueError, RuntimeError)),
                        (lambda: WeightedRandomSampler([0.0, 0.0], 1), (ValueError, RuntimeError)),
                        (lambda: WeightedRandomSampler([1.0, 2.0, 3.0], 4, replacement=False),
                         (ValueError, RuntimeError))]:
        with pytest.raises(types[0]) as info:
            make()
        assert isinstance(info.value, types[1])
    with pytest.raises(ValueError, match="1d sequence"):
        WeightedRandomSampler([[1.0, 2.0]], 1)
    from lucid.utils.data import DistributedSampler

    for kw in (dict(num_replicas=2, rank="1"), dict(num_replicas=2.0, rank=1)):
        with pytest.raises(TypeError, match="must be an int") as info:
            DistributedSampler(range(4), **kw)
        assert isinstance(info.value, ValueError)
    with pytest.warns(DeprecationWarning, match="renamed"):
        assert ConcatDataset([[1, 2], [3]]).cummulative_sizes == [2, 3]


def test_weighted_sampler_keeps_float64_weights_and_draws_without_replacement():
    s = WeightedRandomSampler([1, 2, 3, 0], 3, replacement=False, generator=lucid.Generator().manual_seed(0))
    assert isinstance(s.weights, lucid.Tensor) and s.weights.dtype == lucid.float64 and s.weights.tolist() == [1.0, 2.0, 3.0, 0.0]
    for _ in range(5):
        assert sorted(s) == [0, 1, 2]  # the zero-weight index is never drawn


def test_dataloader_module_names_tutorials_import():
    from lucid.utils.data import dataloader

    for name in ("DataLoader", "Dataset", "IterableDataset", "Sampler", "SequentialSampler", "RandomSampler",
                 "BatchSampler", "default_collate", "default_convert", "get_worker_info", "_DatasetKind",
                 "_InfiniteConstantSampler", "_BaseDataLoaderIter", "_SingleProcessDataLoaderIter",
                 "_MultiProcessingDataLoaderIter"):
        assert hasattr(dataloader, name), name
    assert isinstance(iter(DataLoader(Squares(2))), dataloader._SingleProcessDataLoaderIter)


# ------------------------------------------------------------------ torch parity (optional)
class Named(Dataset):
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return {"x": np.float32(i) / 2, "pair": (i, float(i))}


def _flat(x):
    if hasattr(x, "tolist") and hasattr(x, "dtype"):
        return ("T", str(x.dtype).split(".")[-1], x.tolist())
    if isinstance(x, dict):
        return {k: _flat(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return (type(x).__name__, [_flat(v) for v in x])
    return x


def _stream_class(data):
    """``Stream`` built on ``data``'s IterableDataset and get_worker_info (lucid's or torch's)."""

    class S(data.IterableDataset):
        def __init__(self, n, shard=False):
            self.n, self.shard = n, shard

        def __iter__(self):
            info = data.get_worker_info()
            if self.shard and info is not None:
                return iter(range(info.id, self.n, info.num_workers))
            return iter(range(self.n))

    return S


@posix
def test_worker_batches_match_torch():
    torch = pytest.importorskip("torch")
    import lucid.utils.data as ldata

    tdata = torch.utils.data
    configs = [(lambda S: Named(), dict(batch_size=2, num_workers=2)),
               (lambda S: S(5), dict(batch_size=2, drop_last=True, num_workers=2)),
               (lambda S: S(7, shard=True), dict(batch_size=None, num_workers=2))]
    with deadline(60):
        for make, kw in configs:
            ours = [_flat(b) for b in ldata.DataLoader(make(_stream_class(ldata)), **kw)]
            theirs = [_flat(b) for b in tdata.DataLoader(make(_stream_class(tdata)), **kw)]
            assert ours == theirs, kw
