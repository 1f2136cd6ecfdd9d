"""DataPipes with the DataLoader (sharding across workers, shuffle settings and seeds), the
pipeline graph, graph settings, element typing and the decorators."""
import subprocess
import sys
import typing

import pytest
from conftest import deadline

import lucid
from lucid.utils.data import (DataLoader, IterDataPipe, argument_validation, functional_datapipe,
                              guaranteed_datapipes_determinism, non_deterministic, runtime_validation,
                              runtime_validation_disabled)
from lucid.utils.data.datapipes import iter as dpi
from lucid.utils.data.datapipes import map as dpm
from lucid.utils.data.graph import traverse_dps
from lucid.utils.data.graph_settings import (apply_random_seed, apply_sharding, apply_shuffle_settings,
                                             get_all_graph_pipes)


def _square(x):
    return x * x


def _flat(loader):
    return [v for batch in loader for v in batch.tolist()]


def _pipe(n=20):
    return dpi.IterableWrapper(range(n)).shuffle().sharding_filter().map(_square)


# ------------------------------------------------------------------- DataLoader
def test_loader_single_process_shuffle_switch_and_seed():
    dp = _pipe()
    assert _flat(DataLoader(dp, batch_size=4, shuffle=False)) == [k * k for k in range(20)]
    lucid.manual_seed(0)
    a = _flat(DataLoader(_pipe(), batch_size=4, shuffle=True))
    lucid.manual_seed(0)
    b = _flat(DataLoader(_pipe(), batch_size=4, shuffle=True))
    assert a == b and sorted(a) == [k * k for k in range(20)] and a != [k * k for k in range(20)]
    loader = DataLoader(_pipe(), batch_size=4, shuffle=True)
    assert _flat(loader) != _flat(loader)  # a new order each epoch
    g1, g2 = lucid.Generator().manual_seed(5), lucid.Generator().manual_seed(5)
    assert _flat(DataLoader(_pipe(), batch_size=4, generator=g1)) == _flat(DataLoader(_pipe(), batch_size=4,
                                                                                        generator=g2))


@pytest.mark.parametrize("persistent", [False, True])
def test_loader_two_workers_each_sample_once(persistent):
    with deadline(60):
        loader = DataLoader(_pipe(23), batch_size=3, num_workers=2, shuffle=True, persistent_workers=persistent)
        epochs = [_flat(loader) for _ in range(3)]
    for got in epochs:
        assert sorted(got) == [k * k for k in range(23)]  # each sample exactly once
    assert epochs[0] != epochs[1]
    with deadline(60):
        lucid.manual_seed(3)
        a = _flat(DataLoader(_pipe(23), batch_size=3, num_workers=2))
        lucid.manual_seed(3)
        b = _flat(DataLoader(_pipe(23), batch_size=3, num_workers=2))
    assert a == b


def test_loader_two_workers_unshuffled_order_and_user_init():
    def init(worker_id):
        from lucid.utils.data import get_worker_info
        info = get_worker_info()
        # sharding is applied before the user's init runs
        assert info.dataset.datapipe.num_of_instances == 2

    with deadline(60):
        out = _flat(DataLoader(dpi.IterableWrapper(range(8)).sharding_filter().map(_square), batch_size=2,
                               num_workers=2, worker_init_fn=init))
    # worker 0 holds 0, 2, 4, 6 and worker 1 holds 1, 3, 5, 7; batches alternate between them
    assert out == [0, 4, 1, 9, 16, 36, 25, 49]


def test_two_worker_batches_match_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data.datapipes.iter import IterableWrapper as TW
    with deadline(120):
        theirs = [b.tolist() for b in torch.utils.data.DataLoader(TW(range(11)).sharding_filter().map(_square),
                                                                  batch_size=2, num_workers=2)]
        ours = [b.tolist() for b in DataLoader(dpi.IterableWrapper(range(11)).sharding_filter().map(_square),
                                               batch_size=2, num_workers=2)]
    assert ours == theirs


def test_loader_without_sharding_filter_duplicates_like_torch():
    with deadline(60):
        out = _flat(DataLoader(dpi.IterableWrapper(range(4)), batch_size=2, num_workers=2))
    assert sorted(out) == [0, 0, 1, 1, 2, 2, 3, 3]


def test_loader_map_datapipe():
    dp = dpm.SequenceWrapper(range(6)).map(_square)
    assert _flat(DataLoader(dp, batch_size=4)) == [0, 1, 4, 9, 16, 25]
    lucid.manual_seed(1)
    out = _flat(DataLoader(dp, batch_size=4, shuffle=True))
    assert sorted(out) == [0, 1, 4, 9, 16, 25]
    with deadline(60):
        assert sorted(_flat(DataLoader(dp, batch_size=2, num_workers=2))) == [0, 1, 4, 9, 16, 25]


def test_loader_shuffle_true_without_shuffler_adds_one():
    with pytest.warns(UserWarning, match="does not contain a `Shuffler`. Adding one at the end"):
        loader = DataLoader(dpi.IterableWrapper(range(10)), batch_size=5, shuffle=True)
    assert isinstance(loader.dataset, dpi.Shuffler)
    assert sorted(_flat(loader)) == list(range(10))


def test_plain_iterable_dataset_still_refuses_shuffle():
    from lucid.utils.data import IterableDataset

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(ValueError, match="does not support shuffle"):
        DataLoader(Stream(), shuffle=True)


# ------------------------------------------------------------------- graph and settings
def test_traverse_dps_structure():
    src = dpi.IterableWrapper(range(3))
    a, b = src.fork(2)
    z = a.zip(b)
    g = traverse_dps(z)
    (zid, (zdp, children)), = g.items()
    assert zdp is z and set(children) == {id(a), id(b)}
    container = a.main_datapipe
    assert list(children[id(a)][1]) == [id(container)]
    assert list(children[id(a)][1][id(container)][1]) == [id(src)]
    pipes = get_all_graph_pipes(g)
    assert [id(p) for p in pipes] == [id(z), id(a), id(container), id(src), id(b)]


def test_traverse_dps_cycle_terminates():
    class Loop(IterDataPipe):
        def __init__(self):
            self.me = [self]
            self.src = dpi.IterableWrapper([1])
            self.src.back = self

        def __iter__(self):
            yield from self.src

    dp = Loop()
    g = traverse_dps(dp)
    inner = g[id(dp)][1][id(dp.src)][1]
    assert inner == {id(dp): (dp, {})}


def test_apply_sharding_refuses_two_on_one_path():
    dp = dpi.IterableWrapper(range(4)).sharding_filter().sharding_filter()
    with pytest.raises(RuntimeError, match="Sharding twice on a single pipeline"):
        apply_sharding(dp, 2, 0)
    a, b = dpi.IterableWrapper(range(6)).fork(2)
    z = a.sharding_filter().zip(b.sharding_filter())  # two branches: allowed
    assert list(apply_sharding(z, 2, 1)) == [(1, 1), (3, 3), (5, 5)]


def test_apply_random_seed_and_shuffle_settings():
    dp = dpi.IterableWrapper(range(10)).shuffle().batch(2).in_batch_shuffle()
    runs = [list(apply_random_seed(dp, lucid.Generator().manual_seed(s))) for s in (1, 1, 2)]
    assert runs[0] == runs[1] != runs[2]
    apply_shuffle_settings(dp, shuffle=False)
    assert list(dp) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert apply_shuffle_settings(dp, shuffle=None) is dp
    with pytest.raises(TypeError, match="generator must be a lucid.Generator"):
        apply_random_seed(dp, 3)


def test_shuffle_matches_torch_with_the_same_seed():
    torch = pytest.importorskip("torch")
    from torch.utils.data.datapipes.iter import IterableWrapper as TW
    ours = dpi.IterableWrapper(range(40)).shuffle(buffer_size=9).set_seed(2024)
    theirs = TW(range(40)).shuffle(buffer_size=9).set_seed(2024)
    assert list(ours) == list(theirs)
    t_loader = torch.utils.data.DataLoader(TW(range(9)).sharding_filter(), batch_size=2, shuffle=False)
    assert _flat(DataLoader(dpi.IterableWrapper(range(9)).sharding_filter(), batch_size=2)) == \
        [v for b in t_loader for v in b.tolist()]


# ------------------------------------------------------------------- typing and decorators
def test_generic_alias_and_element_type():
    alias = IterDataPipe[int]
    assert typing.get_origin(alias) is IterDataPipe and typing.get_args(alias) == (int,)

    class Ints(IterDataPipe[int]):
        def __iter__(self):
            yield from (1, 2)

    class Sub(Ints):
        pass

    assert Ints.type.param is int and Sub.type.param is int and Ints().type.param is int
    assert IterDataPipe.type.param is typing.Any
    bools = Ints().reinforce_type(bool)
    assert bools.type.param is bool
    with pytest.raises(TypeError, match="Expected 'expected_type' as subtype of int"):
        Ints().reinforce_type(str)


def test_argument_validation():
    class Ints(IterDataPipe[int]):
        def __iter__(self):
            yield 1

    class Strs(IterDataPipe[str]):
        def __iter__(self):
            yield "a"

    @argument_validation
    def first(dp: IterDataPipe[int]):
        return next(iter(dp))

    assert first(Ints()) == 1
    with pytest.raises(TypeError, match="Expected type of argument 'dp' as a subtype of hint int, but found str"):
        first(Strs())
    with pytest.raises(TypeError, match="Expected argument 'dp' as a IterDataPipe"):
        first([1])


def test_runtime_validation():
    class Ints(IterDataPipe[int]):
        def __init__(self, items):
            self.items = items

        @runtime_validation
        def __iter__(self):
            yield from self.items

    assert list(Ints([1, 2])) == [1, 2]
    with pytest.raises(RuntimeError, match="Expected an instance as subtype of int, but found a"):
        list(Ints([1, "a"]))
    with runtime_validation_disabled():
        assert list(Ints([1, "a"])) == [1, "a"]
    def f():
        pass

    with pytest.raises(TypeError, match="Can not decorate function f with 'runtime_validation'"):
        runtime_validation(f)


def test_non_deterministic_and_functional_registration():
    @non_deterministic
    class Racy(IterDataPipe):
        def __iter__(self):
            yield 1

    assert list(Racy()) == [1]
    with guaranteed_datapipes_determinism():
        with pytest.raises(TypeError, match="Racy is non-deterministic"):
            Racy()

    @non_deterministic(lambda flag: flag)
    class Maybe(IterDataPipe):
        def __init__(self, flag):
            self.flag = flag

        def __iter__(self):
            yield self.flag

    with guaranteed_datapipes_determinism():
        assert list(Maybe(False)) == [False]
        with pytest.raises(TypeError, match="Maybe is non-deterministic with the inputs"):
            Maybe(True)

    @functional_datapipe("_test_twice")
    class Twice(IterDataPipe):
        def __init__(self, dp):
            self.dp = dp

        def __iter__(self):
            for x in self.dp:
                yield x
                yield x

    assert list(dpi.IterableWrapper([1, 2])._test_twice()) == [1, 1, 2, 2]
    with pytest.raises(TypeError, match="can only decorate IterDataPipe or MapDataPipe"):
        functional_datapipe("_test_bad")(int)


def test_import_lucid_does_not_load_datapipes():
    code = ("import sys, lucid, lucid.utils.data as d\n"
            "assert not any('datapipes' in m or m.endswith('data.graph') for m in sys.modules), 'loaded early'\n"
            "d.IterDataPipe\n"
            "assert 'lucid.utils.data.datapipes' in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
