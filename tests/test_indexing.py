"""Indexing (``x[key]``) and the indexing/shape ops: values, gradients, vmap and errors."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as F


def _t(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def _grad_of(key, shape=(3, 4)):
    x = _t(np.arange(np.prod(shape)).reshape(shape), rg=True)
    x[key].sum().backward()
    return x.grad.detach().numpy()


X = np.arange(24.0).reshape(2, 3, 4)


# ----------------------------------------------------------------- getitem forward


@pytest.mark.parametrize("key", [
    1, -1, (1, 2), (0, -1, 3), slice(None, None, 2), (slice(None), slice(3, 0, -2)),
    (slice(None, None, -1),), None, (None, 1, None), Ellipsis, (Ellipsis, 1), (0, Ellipsis, None),
    [1, 0, 1], ([0, 1], [2, 0]), ([[0], [1]], slice(1, 3), [3, 0]), (slice(None), [2, 2]),
    (X > 10), (0, X[0] > 5), (slice(None), np.array([True, False, True])),
])
def test_getitem_matches_numpy(key):
    want = X[key]
    lkey = tuple(lucid.tensor(k) if isinstance(k, np.ndarray) else k for k in key) \
        if isinstance(key, tuple) else (lucid.tensor(key) if isinstance(key, np.ndarray) else key)
    got = _t(X)[lkey]
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.detach().numpy(), want)


def test_getitem_integer_tensor_index():
    idx = lucid.tensor([[2, 0], [1, 1]])
    np.testing.assert_array_equal(_t(X)[:, idx].detach().numpy(), X[:, [[2, 0], [1, 1]]])


def test_getitem_basic_is_a_view():
    x = _t(X)
    v = x[0, 1:]
    assert np.shares_memory(v.detach().numpy(), x.detach().numpy())


# ------------------------------------------------------------------- getitem grads


def test_grad_int_and_slice_steps():
    g = _grad_of((slice(None, None, 2), slice(3, 0, -2)))
    want = np.zeros((3, 4))
    want[::2, 3:0:-2] = 1
    np.testing.assert_array_equal(g, want)
    g = _grad_of((1, -1))
    assert g[1, 3] == 1 and g.sum() == 1


def test_grad_none_ellipsis():
    g = _grad_of((None, Ellipsis, 2))
    want = np.zeros((3, 4))
    want[:, 2] = 1
    np.testing.assert_array_equal(g, want)


def test_grad_bool_mask():
    x = _t([[1.0, -2.0], [-3.0, 4.0]], rg=True)
    (x[x > 0] * lucid.tensor([10.0, 20.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), [[10.0, 0.0], [0.0, 20.0]])


def test_grad_repeated_indices_accumulate():
    g = _grad_of(([0, 2, 0, 0],))
    np.testing.assert_array_equal(g[:, 0], [3.0, 0.0, 1.0])
    x = _t([1.0, 2.0, 3.0], rg=True)
    idx = lucid.tensor([2, 2, 0, 2])
    (x[idx] * lucid.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), [3.0, 0.0, 7.0])


def test_grad_of_grad_through_indexing():
    x = _t([1.0, 2.0, 3.0], rg=True)
    y = (x[[0, 0, 2]] ** 3).sum()
    (g,) = lucid.autograd.grad(y, [x], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [6.0, 0.0, 27.0])
    (h,) = lucid.autograd.grad(g.sum(), [x])
    np.testing.assert_allclose(h.detach().numpy(), [12.0, 0.0, 18.0])


def test_advanced_split_index_gradient():
    x = _t(X, rg=True)
    x[[0, 1], :, [3, 0]].sum().backward()
    want = np.zeros_like(X)
    want[0, :, 3] = 1
    want[1, :, 0] = 1
    np.testing.assert_array_equal(x.grad.detach().numpy(), want)


# --------------------------------------------------------------------- vmap


def _no_loop():
    return warnings.catch_warnings()


def test_vmap_indexing_sees_one_example():
    seen = []

    def f(x):
        seen.append(x.shape)
        return x[0] * 2 + x[:, 1].sum()

    xs = _t(np.arange(24.0).reshape(4, 2, 3))
    out = F.vmap(f)(xs)
    assert seen == [(2, 3)]
    want = np.stack([x[0] * 2 + x[:, 1].sum() for x in np.arange(24.0).reshape(4, 2, 3)])
    np.testing.assert_allclose(out.detach().numpy(), want)


def test_vmap_in_dim_1_indexing():
    xs = np.arange(24.0).reshape(2, 4, 3)
    out = F.vmap(lambda x: x[:, 1], in_dims=1)(_t(xs))
    np.testing.assert_allclose(out.detach().numpy(), np.stack([xs[:, b][:, 1] for b in range(4)]))


@pytest.mark.parametrize("fn", [
    lambda x, i: x[i],
    lambda x, i: x[:, i],
    lambda x, i: x[None, ..., i],
    lambda x, i: x[i, 1:, i],
    lambda x, i: x[1, :, i],
    lambda x, i: x[:, i, None, 0],
])
def test_vmap_batched_index_matches_loop_without_fallback(fn):
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((4, 3, 3, 3))
    idx = np.array([[0, 2], [1, 1], [2, 0], [0, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = F.vmap(fn)(_t(xs), lucid.tensor(idx))
    want = np.stack([fn(_t(x), lucid.tensor(i)).detach().numpy() for x, i in zip(xs, idx)])
    np.testing.assert_allclose(got.detach().numpy(), want)


def _put(key_of):
    def f(x, i, v):
        y = x * 1.0
        y[key_of(i)] = v
        return y

    return f


@pytest.mark.parametrize("key_of,vshape", [
    (lambda i: i, (2, 3, 3)),
    (lambda i: i, (3,)),                     # value broadcast over the indexed rows
    (lambda i: (slice(None), i), (3, 2, 3)),
    (lambda i: (i, slice(None), 1), (2, 3)),
    (lambda i: (1, slice(None), i), (2, 3)),  # int and index split: advanced dims go first
    (lambda i: (slice(None), i, i), (3, 2)),
])
def test_vmap_setitem_batched_index_matches_loop_without_fallback(key_of, vshape):
    """vmap of ``y[idx] = v`` with a per-example idx equals a loop (no per-example fallback)."""
    rng = np.random.default_rng(1)
    xs, vs = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal((4,) + vshape)
    idx = np.array([[0, 2], [1, 0], [2, 1], [0, 1]])
    f = _put(key_of)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        got = F.vmap(f)(_t(xs), lucid.tensor(idx), _t(vs))
        got_v0 = F.vmap(f, in_dims=(0, 0, None))(_t(xs), lucid.tensor(idx), _t(vs[0]))
    want = np.stack([f(_t(x), lucid.tensor(i), _t(v)).detach().numpy() for x, i, v in zip(xs, idx, vs)])
    want_v0 = np.stack([f(_t(x), lucid.tensor(i), _t(vs[0])).detach().numpy() for x, i in zip(xs, idx)])
    np.testing.assert_allclose(got.detach().numpy(), want)
    np.testing.assert_allclose(got_v0.detach().numpy(), want_v0)


def test_vmap_setitem_batched_index_grad():
    """Per-example gradients through ``y[idx] = v`` with batched idx: overwritten entries get none."""
    idx = lucid.tensor([[0, 2], [1, 1]])

    def loss(x, v, i):
        y = x * 1.0
        y[i] = v
        return (y * lucid.tensor([1.0, 2.0, 3.0])).sum()

    gx, gv = F.vmap(F.grad(loss, argnums=(0, 1)), in_dims=(None, None, 0))(lucid.ones(3), lucid.zeros(2), idx)
    np.testing.assert_allclose(gx.detach().numpy(), [[0, 2, 0], [1, 0, 3]])
    np.testing.assert_allclose(gv.detach().numpy(), [[1, 3], [2, 2]])


def test_vmap_batched_index_unbatched_data_and_grad():
    x = _t([1.0, 2.0, 3.0, 4.0])
    idx = lucid.tensor([[0, 1], [3, 3], [2, 0]])
    out = F.vmap(lambda i: x[i])(idx)
    np.testing.assert_array_equal(out.detach().numpy(), [[1, 2], [4, 4], [3, 1]])
    # per-example gradients through a batched index: repeated indices accumulate
    g = F.vmap(F.grad(lambda x, i: (x[i] ** 2).sum()), in_dims=(None, 0))(x, idx)
    np.testing.assert_allclose(g.detach().numpy(), [[2, 4, 0, 0], [0, 0, 0, 16], [2, 0, 6, 0]])


def test_vmap_bool_mask_unbatched_ok_batched_errors():
    mask = lucid.tensor([True, False, True])
    xs = _t(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(F.vmap(lambda x: x[mask])(xs).detach().numpy(), [[0, 2], [3, 5]])
    np.testing.assert_array_equal(F.vmap(lambda x: lucid.masked_select(x, mask))(xs).detach().numpy(), [[0, 2], [3, 5]])
    masks = lucid.tensor([[True, False, True], [False, True, True]])
    with pytest.raises(RuntimeError, match="getitem.*data-dependent"):
        F.vmap(lambda x, m: x[m])(xs, masks)
    with pytest.raises(RuntimeError, match="masked_select.*data-dependent"):
        F.vmap(lucid.masked_select)(xs, masks)
    with pytest.raises(RuntimeError, match="nonzero.*data-dependent"):
        F.vmap(lucid.nonzero)(xs)
    with pytest.raises(RuntimeError, match="nonzero"):
        F.vmap(lucid.argwhere)(xs)


def test_vmap_mask_with_batched_int_index():
    xs = np.arange(24.0).reshape(2, 3, 4)
    mask = np.array([True, False, False, True])
    idx = np.array([[2, 0], [1, 1]])
    got = F.vmap(lambda x, i: x[i, lucid.tensor(mask)])(_t(xs), lucid.tensor(idx))
    np.testing.assert_array_equal(got.detach().numpy(), np.stack([x[i, mask] for x, i in zip(xs, idx)]))


def test_vmap_gather_per_example_indices():
    xs = np.arange(12.0).reshape(2, 2, 3)
    idx = np.array([[[2], [0]], [[1], [1]]])
    got = F.vmap(lambda x, i: x.gather(1, i))(_t(xs), lucid.tensor(idx))
    np.testing.assert_array_equal(got.detach().numpy(), np.take_along_axis(xs, idx, 2))


def test_vmap_repeat_interleave_tensor_repeats():
    xs = _t(np.arange(6.0).reshape(2, 3))
    reps = lucid.tensor([2, 0, 1])
    got = F.vmap(lambda x: x.repeat_interleave(reps))(xs)
    np.testing.assert_array_equal(got.detach().numpy(), [[0, 0, 2], [3, 3, 5]])
    with pytest.raises(RuntimeError, match="repeat_interleave"):
        F.vmap(lambda x, r: x.repeat_interleave(r))(xs, lucid.tensor([[1, 1, 1], [1, 1, 1]]))


# --------------------------------------------------------------- op values / grads


def test_gather_scatter_closed_forms():
    x = _t([[1.0, 2.0], [3.0, 4.0]], rg=True)
    idx = lucid.tensor([[0, 0], [1, 0]])
    y = x.gather(1, idx)
    np.testing.assert_array_equal(y.detach().numpy(), [[1, 1], [4, 3]])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), [[2, 0], [1, 1]])
    src = _t([[5.0, 6.0]], rg=True)
    base = _t(np.zeros((2, 2)), rg=True)
    out = lucid.scatter(base, 0, lucid.tensor([[1, 0]]), src)
    np.testing.assert_array_equal(out.detach().numpy(), [[0, 6], [5, 0]])
    (out * _t([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    np.testing.assert_array_equal(src.grad.detach().numpy(), [[3, 2]])
    np.testing.assert_array_equal(base.grad.detach().numpy(), [[1, 0], [0, 4]])


def test_scatter_add_and_index_add_accumulate():
    out = lucid.scatter_add(lucid.zeros(3), 0, lucid.tensor([0, 0, 2]), lucid.tensor([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(out.detach().numpy(), [3, 0, 3])
    out = lucid.index_add(lucid.zeros(2, 2), 1, lucid.tensor([1, 1]), lucid.ones(2, 2), alpha=2)
    np.testing.assert_array_equal(out.detach().numpy(), [[0, 4], [0, 4]])


def test_masked_fill_grads_to_value_and_input():
    x = _t([1.0, 2.0, 3.0], rg=True)
    v = _t(5.0, rg=True)
    y = x.masked_fill(lucid.tensor([True, False, True]), v)
    np.testing.assert_array_equal(y.detach().numpy(), [5, 2, 5])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), [0, 1, 0])
    assert float(v.grad) == 2.0
    assert lucid.tensor([1, 2]).masked_fill(lucid.tensor([True, False]), 7.9).tolist() == [7, 2]


def test_nonzero_and_take():
    x = lucid.tensor([[0, 1], [2, 0]])
    assert x.nonzero().tolist() == [[0, 1], [1, 0]]
    r, c = x.nonzero(as_tuple=True)
    assert r.tolist() == [0, 1] and c.tolist() == [1, 0]
    assert lucid.nonzero(lucid.zeros(0, 3)).shape == (0, 2)
    assert lucid.where(x)[1].tolist() == [1, 0]
    assert lucid.take(x, lucid.tensor([3, -1, 1])).tolist() == [0, 0, 1]


def test_shape_ops_values():
    a = lucid.arange(7)
    assert [t.tolist() for t in a.split(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [t.shape for t in lucid.chunk(lucid.zeros(0), 3)] == [(0,), (0,), (0,)]
    assert [t.tolist() for t in a.chunk(4)] == [[0, 1], [2, 3], [4, 5], [6]]
    assert [t.tolist() for t in lucid.tensor([[1, 2], [3, 4]]).unbind(1)] == [[1, 3], [2, 4]]
    assert a.roll(-2).tolist() == [2, 3, 4, 5, 6, 0, 1]
    assert lucid.tensor([1, 2, 3]).repeat_interleave(lucid.tensor([1, 0, 2])).tolist() == [1, 3, 3]
    assert lucid.repeat_interleave(lucid.tensor([2, 1])).tolist() == [0, 0, 1]
    assert lucid.tensor([[1, 2]]).tile((2, 1, 1)).shape == (2, 1, 2)
    assert lucid.diag(lucid.tensor([1, 2]), 1).tolist() == [[0, 1, 0], [0, 0, 2], [0, 0, 0]]
    gx, gy = lucid.meshgrid(lucid.tensor([1, 2, 3]), lucid.tensor([4, 5]), indexing="xy")
    assert gx.shape == (2, 3) and gy.tolist() == [[4, 4, 4], [5, 5, 5]]
    assert lucid.pad(lucid.ones(1, 2), (1, 1), value=-1).tolist() == [[-1, 1, 1, -1]]
    assert lucid.pad(lucid.tensor([[1.0, 2.0]]), (2, 2), mode="circular").tolist() == [[1, 2, 1, 2, 1, 2]]
    assert lucid.ones(2, 3, dtype=lucid.bool).tril().dtype == lucid.bool
    assert lucid.zeros(0, 3).flip(0).shape == (0, 3)
    assert lucid.zeros(2, 0).diagonal().shape == (0,)


def test_narrow_select_are_views_flip_is_a_copy():
    x = lucid.arange(6.0).reshape(2, 3)
    assert np.shares_memory(x.narrow(1, 1, 2).detach().numpy(), x.detach().numpy())
    assert np.shares_memory(x.select(0, 1).detach().numpy(), x.detach().numpy())
    assert not np.shares_memory(x.flip(0).detach().numpy(), x.detach().numpy())


def test_pad_reflect_gradient_accumulates():
    x = _t([1.0, 2.0, 3.0], rg=True)
    lucid.pad(x, (2, 1), mode="reflect").sum().backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), [1, 3, 2])


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize("call,exc,match", [
    (lambda x: x.split([1, 1]), RuntimeError, r"split_with_sizes.*sum exactly to 3"),
    (lambda x: x.chunk(0), RuntimeError, "chunk.*greater than 0"),
    (lambda x: x.flip((0, -2)), RuntimeError, "flip.*multiple times"),
    (lambda x: x.flip(2), IndexError, "flip.*out of range"),
    (lambda x: x.roll((1, 2), 0), RuntimeError, "roll.*align"),
    (lambda x: x.repeat(2), RuntimeError, "repeat.*can not be smaller"),
    (lambda x: x.diagonal(0, 1, -1), RuntimeError, "diagonal.*identical"),
    (lambda x: lucid.diag(x.reshape(1, 3, 4)), RuntimeError, "diag.*1D or 2D"),
    (lambda x: x.narrow(1, 2, 3), RuntimeError, r"narrow.*exceeds"),
    (lambda x: x.select(0, 3), IndexError, "select.*out of range"),
    (lambda x: x.unbind(-3), IndexError, "unbind.*out of range"),
    (lambda x: lucid.pad(x, (1,)), RuntimeError, "pad.*divisible by 2"),
    (lambda x: lucid.pad(x, (4, 0), mode="reflect"), RuntimeError, "pad.*less than"),
    (lambda x: x.tril()[0].tril(), RuntimeError, "tril.*at least 2"),
    (lambda x: x.gather(1, lucid.tensor([0, 1])), RuntimeError, "gather.*same number of dimensions"),
    (lambda x: x.gather(1, lucid.tensor([[4]])), IndexError, "gather.*out of bounds"),
    (lambda x: x.gather(0, lucid.tensor([[0.5]])), RuntimeError, "gather.*integer index"),
    (lambda x: x.scatter(0, lucid.tensor([[5]]), 1.0), IndexError, "scatter.*out of bounds"),
    (lambda x: x.index_select(0, lucid.tensor([[0]])), IndexError, "index_select.*0-D or 1-D"),
    (lambda x: x.index_select(1, lucid.tensor([-1])), IndexError, "index_select.*out of bounds"),
    (lambda x: x.index_add(0, lucid.tensor([0]), lucid.ones(2, 4)), RuntimeError, "index_add.*shape"),
    (lambda x: x.masked_fill(x > 0, lucid.ones(2)), RuntimeError, "masked_fill.*0-dimensional"),
    (lambda x: x.masked_fill(lucid.ones(3, 4), 0.0), RuntimeError, "masked_fill.*boolean"),
    (lambda x: x.take(lucid.tensor([12])), IndexError, "take.*out of bounds"),
    (lambda x: x.take_along_dim(lucid.tensor([0]), 0), RuntimeError, "take_along_dim.*same number"),
    (lambda x: x[lucid.tensor([0.5])], IndexError, "getitem.*long, int or bool"),
])
def test_errors_name_the_op(call, exc, match):
    with pytest.raises(exc, match=match):
        call(lucid.arange(12.0).reshape(3, 4))


def test_range_indexes_as_a_list():
    # "What is torch.nn really?": -input[range(target.shape[0]), target].mean()
    a = np.arange(12.0).reshape(3, 4)
    x = lucid.tensor(a, requires_grad=True)
    picked = x[range(3), lucid.tensor([1, 3, 0])]
    assert picked.tolist() == [1.0, 7.0, 8.0]
    picked.sum().backward()
    want = np.zeros((3, 4))
    want[[0, 1, 2], [1, 3, 0]] = 1.0
    np.testing.assert_array_equal(x.grad.numpy(), want)
    y = lucid.tensor(a)
    y[range(2)] = 0.0
    assert y[:, 0].tolist() == [0.0, 0.0, 8.0] and lucid.tensor(a)[range(0)].shape == (0, 4)
