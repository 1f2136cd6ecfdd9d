"""DataPipes (lucid.utils.data.datapipes): each pipe against hand-computed lists, and against
PyTorch's same pipeline when torch is installed."""
import functools
import operator
import os
import pickle
import warnings

import pytest

import lucid
from lucid.utils.data import DataChunk, IterDataPipe, MapDataPipe
from lucid.utils.data.datapipes import iter as dpi
from lucid.utils.data.datapipes import map as dpm


def _double(x):
    return 2 * x


def _is_even(x):
    return x % 2 == 0


def _mod3(x):
    return x % 3


def _parity(x):
    return x % 2


def _add(a, b):
    return a + b


def _parity_but_zero(x):
    return None if x == 0 else x % 2


def W(xs):
    return dpi.IterableWrapper(xs)


# ------------------------------------------------------------------- hand-computed outputs
def test_iterable_wrapper_and_len():
    dp = W(range(4))
    assert list(dp) == [0, 1, 2, 3] and len(dp) == 4
    assert list(dp) == [0, 1, 2, 3]  # a second iteration restarts
    with pytest.raises(TypeError, match="IterableWrapperIterDataPipe instance doesn't have valid length"):
        len(W(x for x in range(3)))


def test_iterable_wrapper_deepcopies_each_iteration():
    src = [[1], [2]]
    for item in W(src):
        item.append(0)
    assert src == [[1], [2]]
    for item in dpi.IterableWrapper(src, deepcopy=False):
        item.append(0)
    assert src == [[1, 0], [2, 0]]


def test_map_columns():
    assert list(W(range(4)).map(_double)) == [0, 2, 4, 6]
    rows = [(1, 2), (3, 4)]
    assert list(W(rows).map(_add, input_col=[0, 1])) == [(3,), (7,)]
    assert list(W(rows).map(_add, input_col=[0, 1], output_col=-1)) == [(1, 2, 3), (3, 4, 7)]
    assert list(W(rows).map(_double, input_col=1)) == [(1, 4), (3, 8)]
    assert list(W([{"a": 1}]).map(_double, input_col="a", output_col="b")) == [{"a": 1, "b": 2}]
    assert len(W(range(4)).map(_double)) == 4
    with pytest.raises(ValueError, match="`output_col` must be None when `input_col` is None"):
        W(rows).map(_double, output_col=1)
    with pytest.raises(ValueError, match="takes 2 parameters, but 1 are required"):
        W(rows).map(_add, input_col=0)
    with pytest.raises(TypeError, match="A callable function is expected"):
        W(rows).map(3)


def test_filter():
    assert list(W(range(7)).filter(_is_even)) == [0, 2, 4, 6]
    assert list(W([(1, 2), (2, 3)]).filter(_is_even, input_col=0)) == [(2, 3)]
    with pytest.raises(ValueError, match="Boolean output is required for `filter_fn`"):
        list(W(range(3)).filter(_double))


def test_batch_unbatch():
    assert list(W(range(7)).batch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(W(range(7)).batch(3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert all(isinstance(b, DataChunk) for b in W(range(7)).batch(3))
    assert len(W(range(7)).batch(3)) == 3 and len(W(range(7)).batch(3, drop_last=True)) == 2
    assert list(W(range(7)).batch(3).unbatch()) == list(range(7))
    nested = [[[0, 1], [2]], [[3, 4]]]
    assert list(W(nested).unbatch(unbatch_level=1)) == [[0, 1], [2], [3, 4]]
    assert list(W(nested).unbatch(unbatch_level=2)) == [0, 1, 2, 3, 4]
    assert list(W(nested).unbatch(unbatch_level=-1)) == [0, 1, 2, 3, 4]
    with pytest.raises(IndexError, match="unbatch_level 3 exceeds the depth"):
        list(W(nested).unbatch(unbatch_level=3))
    with pytest.raises(ValueError, match="unbatch_level must be -1 or >= 0"):
        list(W(nested).unbatch(unbatch_level=-2))
    with pytest.raises(AssertionError, match="Batch size is required to be larger than 0"):
        W(range(3)).batch(0)


def test_collate():
    out = list(W(range(5)).batch(2).collate())
    assert [b.tolist() for b in out] == [[0, 1], [2, 3], [4]]
    assert isinstance(out[0], lucid.Tensor)
    assert list(W([[1, 2]]).collate(collate_fn=sum)) == [3]
    assert list(W([{"x": 1, "y": 2}]).collate({"x": _double})) == [{"x": 2, "y": 2}]


def test_groupby():
    assert list(W(range(7)).groupby(_mod3)) == [[0, 3, 6], [1, 4], [2, 5]]
    assert list(W(range(7)).groupby(_mod3, group_size=2)) == [[0, 3], [1, 4], [2, 5], [6]]
    assert list(W(range(7)).groupby(_mod3, keep_key=True, group_size=2))[0] == (0, [0, 3])
    # a full buffer yields its biggest group
    assert list(W([0, 3, 1, 6, 2]).groupby(_mod3, buffer_size=4)) == [[0, 3, 6], [1], [2]]
    with pytest.raises(RuntimeError, match="Failed to group items"):
        list(W([0, 1, 2, 4]).groupby(_mod3, buffer_size=3, group_size=2))
    # (the dropped group is the biggest at overflow; what is left at the end all comes out)
    assert list(W([0, 1, 2, 4]).groupby(_mod3, buffer_size=3, group_size=2, drop_remaining=True)) == [[1, 4], [2]]


def test_concat_zip_mux():
    assert list(W(range(2)).concat(W("ab"), W([9]))) == [0, 1, "a", "b", 9]
    assert len(W(range(2)).concat(W("ab"))) == 4
    assert list(W(range(3)).zip(W("ab"))) == [(0, "a"), (1, "b")]
    assert len(W(range(3)).zip(W("ab"))) == 2
    assert list(W([0, 1, 2]).mux(W([10, 11]), W([20, 21, 22]))) == [0, 10, 20, 1, 11, 21]
    assert len(W([0, 1, 2]).mux(W([10, 11]))) == 4
    with pytest.raises(ValueError, match="Expected at least one DataPipe"):
        dpi.Concater()
    with pytest.raises(TypeError, match="Expected all inputs to be `IterDataPipe`"):
        dpi.Zipper(W([1]), [2])


def test_sampler_and_sharding_filter():
    assert list(dpi.Sampler(W("abc"))) == [0, 1, 2]
    dp = W(range(10)).sharding_filter()
    shards = []
    for i in range(3):
        dp.apply_sharding(3, i)
        shards.append(list(dp))
        assert len(dp) == len(shards[-1])
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    with pytest.raises(ValueError, match=r"instance_id\(3\) should be smaller than num_of_instances\(3\)"):
        dp.apply_sharding(3, 3)


def test_sharding_groups_combine():
    from lucid.utils.data.datapipes.iter.sharding import SHARDING_PRIORITIES as P

    seen = []
    for rank in range(2):
        for worker in range(3):
            dp = W(range(12)).sharding_filter()
            dp.apply_sharding(2, rank, P.DISTRIBUTED)
            dp.apply_sharding(3, worker, P.MULTIPROCESSING)
            got = list(dp)
            assert got == [k for k in range(12) if k % 6 == worker + 3 * rank]
            seen += got
    assert sorted(seen) == list(range(12))
    dp = W(range(4)).sharding_filter()
    dp.apply_sharding(2, 0, P.DISTRIBUTED)
    with pytest.raises(RuntimeError, match="cannot mix DEFAULT and non DEFAULT groups"):
        dp.apply_sharding(2, 0)


def test_shuffle_is_a_seeded_permutation():
    dp = W(range(20)).shuffle()
    a = list(dp.set_seed(3))
    assert sorted(a) == list(range(20)) and a != list(range(20))
    assert list(dp.set_seed(3)) == a
    assert list(dp.set_seed(4)) != a
    lucid.manual_seed(7)
    b = list(dp)
    lucid.manual_seed(7)
    assert list(dp) == b
    assert list(dp.set_shuffle(False)) == list(range(20))
    # a small buffer cannot move an element ahead by more than its size
    small = list(W(range(50)).shuffle(buffer_size=2).set_seed(0))
    assert sorted(small) == list(range(50))
    assert all(small.index(k) >= k - 2 for k in range(50))
    with pytest.raises(AssertionError, match="buffer_size should be larger than 0"):
        W(range(3)).shuffle(buffer_size=0)


def test_in_batch_shuffle():
    out = list(W(range(9)).batch(3).in_batch_shuffle().set_seed(1))
    assert [sorted(b) for b in out] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert all(isinstance(b, DataChunk) for b in out)
    assert list(W(range(9)).batch(3).in_batch_shuffle().set_shuffle(False)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]


# ------------------------------------------------------------------- fork / demux
def test_fork_yields_everything_to_each_child():
    a, b, c = W(range(4)).fork(3)
    assert list(a) == list(b) == list(c) == [0, 1, 2, 3]
    assert len(a) == 4
    assert W(range(3)).fork(1).__class__ is dpi.IterableWrapper
    with pytest.raises(ValueError, match="Expected `num_instances` larger than 0"):
        W(range(3)).fork(0)


def test_fork_copy_modes():
    a, b = W([[1]]).fork(2, copy="deep")
    x, y = next(iter(a)), next(iter(b))
    assert x == y and x is not y
    with pytest.raises(ValueError, match="Unknown copy method"):
        W([1]).fork(2, copy="nope")


def test_fork_buffer_limit():
    a, b = W(range(10)).fork(2, buffer_size=3)
    it = iter(a)
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(BufferError, match="buffer size 3 is insufficient"):
        next(it)
    # read in lock step, a buffer of 1 is enough
    a, b = W(range(10)).fork(2, buffer_size=1)
    assert list(zip(a, b)) == [(k, k) for k in range(10)]


def test_fork_new_iterator_resets_and_invalidates():
    a, b = W(range(5)).fork(2)
    it_a, it_b = iter(a), iter(b)
    assert next(it_a) == 0 and next(it_b) == 0
    with pytest.warns(UserWarning, match="Some child DataPipes are not exhausted"):
        it_a2 = iter(a)
    assert next(it_a2) == 0
    with pytest.raises(RuntimeError, match="This iterator has been invalidated"):
        next(it_a)
    with pytest.raises(RuntimeError, match="This iterator has been invalidated"):
        next(it_b)
    it_b2 = iter(b)  # b had not started since the reset: no new reset
    assert next(it_b2) == 0 and next(it_a2) == 1


def test_demux():
    even, odd = W(range(7)).demux(2, _parity)
    assert list(even) == [0, 2, 4, 6] and list(odd) == [1, 3, 5]
    e, o = W(range(7)).demux(2, _parity_but_zero, drop_none=True)
    assert list(e) == [2, 4, 6] and list(o) == [1, 3, 5]
    e, o = W(range(4)).demux(2, functools.partial(max, 5))
    with pytest.raises(ValueError, match="Output of the classification fn should be between 0 and 1. 5 is returned"):
        list(e)
    e, o = W(range(10)).demux(2, _parity, buffer_size=2)
    with pytest.raises(BufferError, match="buffer size 2 is insufficient"):
        list(e)
    with pytest.raises(TypeError, match="doesn't have valid length"):
        len(W(range(3)).demux(2, _parity)[0])


# ------------------------------------------------------------------- the iterator rule
def test_second_iterator_invalidates_first():
    dp = W(range(5)).map(_double)
    it1 = iter(dp)
    assert next(it1) == 0
    it2 = iter(dp)
    assert next(it2) == 0
    with pytest.raises(RuntimeError, match="another iterator has been created from the same IterDataPipe"):
        next(it1)
    assert list(it2) == [2, 4, 6, 8]


def test_reset_is_called_per_iteration():
    class Counting(IterDataPipe):
        def __init__(self):
            self.resets = 0

        def reset(self):
            self.resets += 1

        def __iter__(self):
            yield from range(2)

    dp = Counting()
    list(dp)
    list(dp)
    assert dp.resets == 2


# ------------------------------------------------------------------- map pipes
def test_map_datapipes():
    seq = dpm.SequenceWrapper(range(5))
    assert [seq[i] for i in range(len(seq))] == [0, 1, 2, 3, 4]
    m = seq.map(_double)
    assert [m[i] for i in range(5)] == [0, 2, 4, 6, 8]
    b = seq.batch(2)
    assert [b[i] for i in range(len(b))] == [[0, 1], [2, 3], [4]]
    assert len(seq.batch(2, drop_last=True)) == 2
    with pytest.raises(IndexError, match="Index 2 is out of bound"):
        seq.batch(2, drop_last=True)[2]
    c = seq.concat(dpm.SequenceWrapper("ab"))
    assert [c[i] for i in range(len(c))] == [0, 1, 2, 3, 4, "a", "b"]
    with pytest.raises(IndexError, match="Index 7 is out of range"):
        c[7]
    z = seq.zip(dpm.SequenceWrapper("ab"))
    assert len(z) == 2 and z[1] == (1, "b")
    sh = seq.shuffle().set_seed(0)
    out = list(sh)
    assert sorted(out) == [0, 1, 2, 3, 4] and list(sh.set_seed(0)) == out
    assert list(seq.shuffle().set_shuffle(False)) == [0, 1, 2, 3, 4]
    assert isinstance(seq.shuffle(), IterDataPipe) and isinstance(seq, MapDataPipe)


# ------------------------------------------------------------------- files
def test_file_pipes(tmp_path):
    (tmp_path / "b.txt").write_text("bee")
    (tmp_path / "a.txt").write_text("ay")
    (tmp_path / "c.json").write_text('{"k": 1}')
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "d.txt").write_text("dee")
    names = [os.path.relpath(p, tmp_path) for p in dpi.FileLister(str(tmp_path), "*.txt")]
    assert names == ["a.txt", "b.txt"]
    names = [os.path.relpath(p, tmp_path) for p in dpi.FileLister(str(tmp_path), "*.txt", recursive=True)]
    assert names == ["a.txt", "b.txt", os.path.join("sub", "d.txt")]
    texts = list(dpi.FileLister(str(tmp_path), "*.txt").open_files().read_from_stream())
    assert [t for _, t in texts] == ["ay", "bee"]
    chunks = [d for _, d in dpi.FileLister(str(tmp_path), "b.txt").open_files(mode="b").read_from_stream(chunk=2)]
    assert chunks == [b"be", b"e"]
    decoded = dict(dpi.FileLister(str(tmp_path), ["*.json", "a.txt"]).open_files(mode="b").routed_decode())
    assert decoded == {str(tmp_path / "a.txt"): "ay", str(tmp_path / "c.json"): {"k": 1}}
    with pytest.raises(ValueError, match="Invalid mode w"):
        dpi.FileOpener(W([]), mode="w")
    with pytest.raises(ValueError, match="binary mode doesn't take an encoding argument"):
        dpi.FileOpener(W([]), mode="b", encoding="utf-8")
    with pytest.raises(TypeError, match="doesn't have valid length"):
        len(dpi.FileLister(str(tmp_path)))


# ------------------------------------------------------------------- registry, pickling
def test_functional_registry_errors():
    with pytest.raises(AttributeError, match="'IterableWrapperIterDataPipe' object has no attribute 'nope'"):
        W([1]).nope
    with pytest.raises(Exception, match="Unable to add DataPipe function name map as it is already taken"):
        IterDataPipe.register_datapipe_as_function("map", dpi.Mapper)
    assert "batch" in dir(W([1])) and "shuffle" in dir(dpm.SequenceWrapper([1]))


def test_pickle_round_trip_and_lambda_refusal():
    dp = W(range(6)).map(_double).filter(_is_even).batch(2).shuffle().set_seed(1)
    back = pickle.loads(pickle.dumps(dp))
    assert list(back.set_seed(1)) == list(dp.set_seed(1))
    with pytest.warns(UserWarning, match="Lambda function is not supported by pickle"):
        lam = W(range(3)).map(lambda x: x)
    with pytest.warns(UserWarning, match="Lambda function is not supported by pickle"):
        W(range(3)).map(functools.partial(lambda x, y: x, y=1))
    with pytest.raises((pickle.PicklingError, AttributeError), match="lambda"):
        pickle.dumps(lam)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        W(range(3)).map(functools.partial(operator.add, 1))  # no warning for a picklable partial


def test_reprs():
    assert str(W([1])) == "IterableWrapperIterDataPipe" and repr(W([1]).map(_double)) == "MapperIterDataPipe"


# ------------------------------------------------------------------- against PyTorch
def _torch_pipes():
    torch = pytest.importorskip("torch")
    from torch.utils.data.datapipes import iter as ti
    from torch.utils.data.datapipes import map as tm
    return torch, ti, tm


@pytest.mark.parametrize("build", [
    lambda I: I.IterableWrapper(range(11)).map(_double).filter(_is_even).batch(3),
    lambda I: I.IterableWrapper(range(11)).batch(4, drop_last=True).unbatch(),
    lambda I: I.IterableWrapper(range(11)).groupby(_mod3, group_size=2, keep_key=True),
    lambda I: I.IterableWrapper(range(11)).groupby(_mod3, buffer_size=5),
    lambda I: I.IterableWrapper(range(5)).concat(I.IterableWrapper("xyz")).zip(I.IterableWrapper(range(9))),
    lambda I: I.IterableWrapper(range(5)).mux(I.IterableWrapper("xyz"), I.IterableWrapper(range(9))),
    lambda I: I.IterableWrapper(range(30)).shuffle(buffer_size=7).set_seed(123),
    lambda I: I.IterableWrapper(range(30)).shuffle().set_seed(99),
    lambda I: I.IterableWrapper([(1, 2), (3, 4)]).map(_add, input_col=[0, 1], output_col=-1),
    lambda I: I.Sampler(I.IterableWrapper("abcd")),
], ids=["map-filter-batch", "unbatch", "groupby-size", "groupby-buffer", "concat-zip", "mux", "shuffle-buf",
        "shuffle", "map-cols", "sampler"])
def test_iter_pipelines_match_torch(build):
    _, ti, _ = _torch_pipes()
    assert [_plain(x) for x in build(dpi)] == [_plain(x) for x in build(ti)]


def test_fork_demux_sharding_match_torch():
    _, ti, _ = _torch_pipes()
    ours = [list(c) for c in W(range(9)).demux(3, _mod3)]
    theirs = [list(c) for c in ti.IterableWrapper(range(9)).demux(3, _mod3)]
    assert ours == theirs
    a1, b1 = W(range(5)).fork(2)
    a2, b2 = ti.IterableWrapper(range(5)).fork(2)
    assert list(a1.zip(b1)) == list(a2.zip(b2))
    for i in range(3):
        x, y = W(range(10)).sharding_filter(), ti.IterableWrapper(range(10)).sharding_filter()
        x.apply_sharding(3, i)
        y.apply_sharding(3, i)
        assert list(x) == list(y) and len(x) == len(y)


def test_map_pipes_match_torch():
    _, _, tm = _torch_pipes()

    def build(M):
        seq = M.SequenceWrapper(range(7))
        return seq, seq.map(_double).batch(3), seq.concat(M.SequenceWrapper("ab")).zip(seq)

    for ours, theirs in zip(build(dpm), build(tm)):
        assert len(ours) == len(theirs)
        assert [_plain(ours[i]) for i in range(len(ours))] == [_plain(theirs[i]) for i in range(len(theirs))]
    assert list(dpm.SequenceWrapper(range(9)).shuffle().set_seed(5)) == \
        list(tm.SequenceWrapper(range(9)).shuffle().set_seed(5))


def _plain(x):
    """Batches (DataChunk, tuples of them) as plain lists/tuples for comparison."""
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_plain(v) for v in x)
    return x


def test_fork_and_shuffle_pickle_mid_iteration():
    a, b = W(range(4)).fork(2)
    it = iter(a)
    assert next(it) == 0  # element 0 now sits in the fork buffer for b
    a2, b2 = pickle.loads(pickle.dumps((a, b)))
    assert a2.main_datapipe is b2.main_datapipe
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing of the copy was read: no "not exhausted" warning
        assert list(a2) == list(b2) == [0, 1, 2, 3]  # the copy starts afresh, with an empty buffer
    dp = W(range(8)).shuffle().set_seed(2)
    it = iter(dp)
    next(it)
    assert sorted(pickle.loads(pickle.dumps(dp))) == list(range(8))


def test_datachunk_and_self_iterating_pipe():
    chunk = DataChunk([1, 2])
    assert chunk == [1, 2] and chunk.as_str("> ") == "> [1, 2]" and list(chunk.raw_iterator()) == [1, 2]

    class Countdown(IterDataPipe):
        def __init__(self):
            self.n = 0

        def reset(self):
            self.n = 3

        def __iter__(self):
            return self

        def __next__(self):
            if self.n == 0:
                raise StopIteration
            self.n -= 1
            return self.n

    dp = Countdown()
    assert list(dp) == [2, 1, 0] and list(dp) == [2, 1, 0]  # reset() before each iteration
    assert list(dp.map(_double)) == [4, 2, 0]
