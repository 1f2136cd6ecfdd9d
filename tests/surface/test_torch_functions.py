"""PyTorch's top-level functions (lucid/ops/torch_functions.py, torch_nn_functions.py):
values against closed forms and NumPy, errors, dtypes, views, warnings; PyTorch parity where
installed. Gradients, jvp and vmap are checked by the op database (db_torch_functions.py)."""
import inspect
import math
import warnings

import numpy as np
import pytest

import lucid
import lucid.func

RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _same_draws_in_any_order():
    """Each test sees the same random inputs however xdist orders the tests."""
    RNG.bit_generator.state = np.random.default_rng(0).bit_generator.state


def _np(t):
    return t.detach().cpu().numpy()


def _quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return fn(*args, **kwargs)


# ------------------------------------------------------------------ elementwise


def test_elementwise_values_and_dtypes():
    assert lucid.absolute(lucid.tensor([-2, 3])).tolist() == [2, 3]
    r = lucid.deg2rad(lucid.tensor([180, -90]))
    assert r.dtype is lucid.float32 and np.allclose(_np(r), [math.pi, -math.pi / 2])
    assert lucid.deg2rad(lucid.tensor([180.0], dtype=lucid.float16)).dtype is lucid.float16
    assert np.allclose(_np(lucid.rad2deg(lucid.tensor([math.pi / 4], dtype=lucid.float64))), [45.0], rtol=1e-15)
    assert lucid.rad2deg(lucid.tensor([True])).dtype is lucid.float32
    neg = lucid.tensor(np.array([-0.0, 0.0, -1.0, 2.0, -np.inf, np.nan, -np.nan]))
    assert lucid.signbit(neg).tolist() == [True, False, True, False, True, False, True]
    assert lucid.signbit(neg).dtype is lucid.bool
    assert lucid.signbit(lucid.tensor([-3, 0, 4])).tolist() == [True, False, False]
    assert lucid.signbit(lucid.tensor([True, False])).tolist() == [False, False]
    assert lucid.clamp_min(lucid.tensor([1, 2, 3]), 2.5).tolist() == [2.5, 2.5, 3.0]  # promoted like clamp
    assert lucid.clamp_max(lucid.tensor([1, 2, 3]), 2).tolist() == [1, 2, 2]
    b = lucid.clamp_min(lucid.tensor([1.0, 2.0, 3.0]), lucid.tensor([2.0, 0.0, 5.0]))
    assert b.tolist() == [2.0, 2.0, 5.0]
    assert math.isnan(lucid.clamp_min(lucid.tensor([float("nan")]), 1.0).item())
    assert lucid.tensor([-1.0, 4.0]).clamp_max(0.0).tolist() == [-1.0, 0.0]
    assert lucid.tensor([-1.0]).absolute().tolist() == [1.0] and lucid.tensor([-0.0]).signbit().item()


def test_elementwise_errors():
    with pytest.raises(RuntimeError, match="^deg2rad: not supported for complex"):
        lucid.deg2rad(lucid.tensor([1j]))
    with pytest.raises(RuntimeError, match="^rad2deg: not supported for complex"):
        lucid.rad2deg(lucid.tensor([1j]))
    with pytest.raises(NotImplementedError, match="^signbit: not implemented for complex"):
        lucid.signbit(lucid.tensor([1j]))
    with pytest.raises(NotImplementedError, match="^clamp_min: not supported for complex"):
        lucid.clamp_min(lucid.tensor([1j]), 0.0)
    with pytest.raises(TypeError, match="^clamp_max: the bound"):
        lucid.clamp_max(lucid.tensor([1.0]), None)


# ------------------------------------------------------------------ products and norms


def test_adjoint_is_a_view_for_real_and_conjugates_complex():
    x = lucid.arange(6.0).reshape(2, 3)
    a = lucid.adjoint(x)
    assert a.shape == (3, 2) and a.tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    a[2, 1] = 50.0  # a view writes through, as PyTorch's
    assert x[1, 2].item() == 50.0
    z = lucid.tensor([[1 + 2j, 3j]])
    assert np.array_equal(_np(z.adjoint()), np.array([[1 - 2j], [-3j]], dtype=np.complex64))
    with pytest.raises(RuntimeError, match="^adjoint: only supported on matrices"):
        lucid.adjoint(lucid.ones(3))


def test_inner():
    a, b = RNG.normal(size=(2, 3)), RNG.normal(size=(4, 3))
    assert np.allclose(_np(lucid.inner(lucid.tensor(a), lucid.tensor(b))), np.inner(a, b))
    assert lucid.inner(lucid.tensor([1.0, 2.0]), lucid.tensor([3.0, 4.0])).item() == 11.0
    assert lucid.inner(lucid.tensor(2.0), lucid.ones(2, 2)).tolist() == [[2.0, 2.0], [2.0, 2.0]]
    z = lucid.tensor([1j, 1.0])
    assert lucid.inner(z, z).item() == 0.0  # no conjugation: 1j*1j + 1
    with pytest.raises(RuntimeError, match="^inner: the last dimension must match"):
        lucid.inner(lucid.ones(3), lucid.ones(2))
    with pytest.raises(RuntimeError, match="^inner: both inputs should have the same dtype"):
        lucid.inner(lucid.ones(3, dtype=lucid.int64), lucid.ones(3))


def test_chain_matmul_warns_and_checks():
    a, b, c = (RNG.normal(size=s) for s in ((2, 3), (3, 4), (4, 2)))
    with pytest.warns(UserWarning, match="chain_matmul is deprecated"):
        out = lucid.chain_matmul(lucid.tensor(a), lucid.tensor(b), lucid.tensor(c))
    assert np.allclose(_np(out), a @ b @ c)
    one = lucid.tensor(a)
    single = _quiet(lucid.chain_matmul, one)
    assert single is not one and single.tolist() == one.tolist()  # a new tensor, as PyTorch's
    with pytest.raises(RuntimeError, match="^chain_matmul: expected one or more"):
        _quiet(lucid.chain_matmul)
    with pytest.raises(RuntimeError, match="^chain_matmul: tensor 1 has 1 dimensions"):
        _quiet(lucid.chain_matmul, lucid.ones(2, 2), lucid.ones(2))
    with pytest.raises(RuntimeError, match="^chain_matmul: tensors 0 and 1 with shapes"):
        _quiet(lucid.chain_matmul, lucid.ones(2, 3), lucid.ones(2, 3))
    with pytest.raises(RuntimeError, match="^chain_matmul: all tensors must have the same dtype"):
        _quiet(lucid.chain_matmul, lucid.ones(2, 2), lucid.ones(2, 2, dtype=lucid.float64))


def test_cross_default_dim():
    a, b = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    with pytest.warns(UserWarning, match="without specifying the dim"):
        out = lucid.cross(lucid.tensor(a), lucid.tensor(b))
    assert np.allclose(_np(out), np.cross(a, b, axis=0))  # the first dim of size 3
    c = _quiet(lucid.cross, lucid.tensor(a[:, :1]), lucid.tensor(b))  # input's dim 0; dim 1 broadcasts
    assert c.shape == (3, 4)
    # input's own first dim of size 3 (dim 1 here), not the broadcast shape's (dim 0), as PyTorch
    e = _quiet(lucid.cross, lucid.tensor(a[:1, :3]), lucid.tensor(b[:, :3]))
    assert np.allclose(_np(e), np.cross(a[:1, :3], b[:, :3], axis=1))
    with pytest.raises(RuntimeError, match="^cross: inputs dimension 0 must have length 3, got 3 and 1"):
        lucid.cross(lucid.ones(3, 3), lucid.ones(1, 3), dim=0)  # a size 1 there does not broadcast
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d = lucid.tensor([[1.0, 0.0, 0.0]]).cross(lucid.tensor([[0.0, 1.0, 0.0]]), dim=1)  # no warning with dim
    assert d.tolist() == [[0.0, 0.0, 1.0]]
    with pytest.raises(RuntimeError, match="^cross: no dimension of size 3"):
        _quiet(lucid.cross, lucid.ones(4, 2), lucid.ones(4, 2))
    with pytest.raises(RuntimeError, match="^cross: inputs must have the same number of dimensions"):
        _quiet(lucid.cross, lucid.ones(4, 3), lucid.ones(3))


def test_frobenius_and_nuclear_norms():
    x = lucid.tensor([[3.0, 0.0], [0.0, -4.0]])
    with pytest.warns(UserWarning, match="frobenius_norm is deprecated"):
        assert lucid.frobenius_norm(x, (0, 1)).item() == 5.0
    assert _quiet(lucid.frobenius_norm, x, 1).tolist() == [3.0, 4.0]
    assert _quiet(lucid.frobenius_norm, x, ()).item() == 5.0  # () means every dim
    assert _quiet(lucid.frobenius_norm, x, (0, 1), True).shape == (1, 1)
    with pytest.warns(UserWarning, match="nuclear_norm is deprecated"):
        assert lucid.nuclear_norm(x).item() == 7.0
    assert _quiet(lucid.nuclear_norm, x, True).shape == (1, 1)  # keepdim given positionally
    y = RNG.normal(size=(2, 3, 4))
    got = _quiet(lucid.nuclear_norm, lucid.tensor(y), (0, 2), True)
    want = np.linalg.svd(np.moveaxis(y, 1, 0), compute_uv=False).sum(-1)
    assert got.shape == (1, 3, 1) and np.allclose(_np(got).ravel(), want)
    with pytest.raises(RuntimeError, match="^frobenius_norm: expected at most 2 dims"):
        _quiet(lucid.frobenius_norm, lucid.ones(2, 2, 2), (0, 1, 2))
    with pytest.raises(RuntimeError, match="^frobenius_norm: dim 0 appears multiple times"):
        _quiet(lucid.frobenius_norm, x, (0, 0))
    with pytest.raises(RuntimeError, match="^frobenius_norm: input dtype should be floating"):
        _quiet(lucid.frobenius_norm, lucid.ones(2, dtype=lucid.int64), 0)
    with pytest.raises(RuntimeError, match="^nuclear_norm: dim must be a 2-tuple"):
        _quiet(lucid.nuclear_norm, x, (0,))
    with pytest.raises(RuntimeError, match="^nuclear_norm: the input must have at least 2 dimensions"):
        _quiet(lucid.nuclear_norm, lucid.ones(2))


# ------------------------------------------------------------------ shapes and splits


def test_diagflat_msort_trapz():
    assert lucid.diagflat(lucid.tensor([[1, 2], [3, 4]]), 1).tolist() == [
        [0, 1, 0, 0, 0], [0, 0, 2, 0, 0], [0, 0, 0, 3, 0], [0, 0, 0, 0, 4], [0, 0, 0, 0, 0]]
    assert lucid.diagflat(lucid.tensor(5.0)).tolist() == [[5.0]]
    assert lucid.diagflat(lucid.ones(0), 2).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert lucid.tensor([1.0, 2.0]).diagflat(-1).tolist() == [[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]
    assert lucid.msort(lucid.tensor([[3, 1], [1, 2]])).tolist() == [[1, 1], [3, 2]]
    assert lucid.msort(lucid.tensor(3.0)).item() == 3.0
    y = lucid.tensor([1.0, 2.0, 4.0])
    assert lucid.trapz(y).item() == 4.5 and lucid.trapz(y, dx=2.0).item() == 9.0
    assert lucid.trapz(y, lucid.tensor([0.0, 1.0, 3.0])).item() == 7.5
    with pytest.raises(TypeError, match="^trapz: pass the sample points x or the spacing dx"):
        lucid.trapz(y, lucid.tensor([0.0, 1.0, 2.0]), dx=1.0)
    with pytest.raises(TypeError, match="^trapz: x must be a Tensor"):
        lucid.trapz(y, 0.5)


def test_tensor_split_sections_indices_and_views():
    x = lucid.arange(7)
    parts = lambda *a, **k: [p.tolist() for p in lucid.tensor_split(*a, **k)]  # noqa: E731
    assert parts(x, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert parts(x, lucid.tensor(3)) == [[0, 1, 2], [3, 4], [5, 6]]
    assert parts(x, [1, 5, 10]) == [[0], [1, 2, 3, 4], [5, 6], []]
    assert parts(x, [5, 2]) == [[0, 1, 2, 3, 4], [], [2, 3, 4, 5, 6]]  # Python slicing of each pair
    assert parts(x, [-2]) == [[0, 1, 2, 3, 4], [5, 6]]
    assert parts(x, lucid.tensor([2, 4])) == [[0, 1], [2, 3], [4, 5, 6]]
    assert parts(x, 9) == [[0], [1], [2], [3], [4], [5], [6], [], []]
    m = lucid.zeros(2, 5)
    a, b = m.tensor_split(2, dim=-1)
    assert (a.shape, b.shape) == ((2, 3), (2, 2))
    b[1, 1] = 7.0  # views write through
    assert m[1, 4].item() == 7.0
    assert isinstance(lucid.tensor_split(x, 2), tuple)


def test_tensor_split_errors():
    with pytest.raises(RuntimeError, match="^tensor_split: number of sections must be larger than 0"):
        lucid.tensor_split(lucid.arange(3), 0)
    with pytest.raises(RuntimeError, match="^tensor_split: expected at least a 1-dimensional"):
        lucid.tensor_split(lucid.tensor(1), 2)
    with pytest.raises(RuntimeError, match="^tensor_split: expected tensor_indices_or_sections to have dtype int64"):
        lucid.tensor_split(lucid.arange(3), lucid.tensor([1.0]))
    with pytest.raises(RuntimeError, match="^tensor_split: expected tensor_indices_or_sections to be 0- or 1-dim"):
        lucid.tensor_split(lucid.arange(3), lucid.tensor([[1]]))
    with pytest.raises(IndexError, match="^tensor_split: dimension 2 is out of range"):
        lucid.tensor_split(lucid.ones(2, 5), 2, dim=2)
    with pytest.raises(TypeError, match="^tensor_split: indices_or_sections must be"):
        lucid.tensor_split(lucid.ones(4), [1.5])


def test_split_with_sizes_and_broadcasting():
    x = lucid.arange(5.0)
    a, b = lucid.split_with_sizes(x, [2, 3])
    assert a.tolist() == [0.0, 1.0] and b.tolist() == [2.0, 3.0, 4.0]
    b[0] = -1.0
    assert x[2].item() == -1.0
    assert [p.shape for p in x.split_with_sizes([0, 5])] == [(0,), (5,)]
    with pytest.raises(RuntimeError, match="^split_with_sizes: expects split_sizes to sum exactly to 5"):
        lucid.split_with_sizes(x, [2, 2])
    assert lucid.broadcast_shapes((2, 1), (3,), 1, lucid.Size([4, 1, 1])) == (4, 2, 3)
    assert lucid.broadcast_shapes() == () and isinstance(lucid.broadcast_shapes((2,)), lucid.Size)
    assert lucid.broadcast_shapes((0, 1), (3,)) == (0, 3)
    with pytest.raises(RuntimeError, match="^broadcast_shapes: shape \\(3,\\) \\(argument 1\\) does not broadcast"):
        lucid.broadcast_shapes((2,), (3,))
    with pytest.raises(ValueError, match="^broadcast_shapes: negative dimension"):
        lucid.broadcast_shapes((-1,), (3,))
    with pytest.raises(RuntimeError, match="^broadcast_shapes: shapes must be ints"):
        lucid.broadcast_shapes(lucid.ones(2))
    a, b = lucid.broadcast_tensors(lucid.tensor([[1], [2]]), lucid.tensor([10, 20, 30]))
    assert a.tolist() == [[1, 1, 1], [2, 2, 2]] and b.tolist() == [[10, 20, 30]] * 2
    assert lucid.broadcast_tensors() == ()
    with pytest.raises(RuntimeError, match="read-only view"):  # expanded views, as PyTorch's
        a[0, 0] = 5
    with pytest.raises(RuntimeError, match="^broadcast_tensors: shape"):
        lucid.broadcast_tensors(lucid.ones(2), lucid.ones(3))
    with pytest.raises(TypeError, match="^broadcast_tensors: expected Tensors"):
        lucid.broadcast_tensors([lucid.ones(2)])


def test_unravel_index():
    rows, cols = lucid.unravel_index(lucid.tensor([4, 1, -1, 6]), (2, 3))
    assert rows.tolist() == [1, 0, 1, 0] and cols.tolist() == [1, 1, 2, 0]  # wraps as (i // s) % n
    assert rows.dtype is lucid.int64
    out = lucid.unravel_index(lucid.tensor([[1234], [5678]], dtype=lucid.int32), (10, 10, 10, 10))
    assert [o.tolist() for o in out] == [[[1], [5]], [[2], [6]], [[3], [7]], [[4], [8]]]
    assert all(o.dtype is lucid.int64 for o in out)
    assert [t.item() for t in lucid.unravel_index(lucid.tensor(4), 3)] == [1]
    assert lucid.unravel_index(lucid.tensor(0), ()) == ()
    with pytest.raises(TypeError, match="^unravel_index: expected 'indices' to be an integer"):
        lucid.unravel_index(lucid.tensor([1.0]), (2, 3))
    with pytest.raises(TypeError, match="^unravel_index: expected 'indices' to be an integer"):
        lucid.unravel_index(lucid.tensor([True]), (2, 3))
    with pytest.raises(ValueError, match="^unravel_index: 'shape' cannot have negative values"):
        lucid.unravel_index(lucid.tensor([1]), (-1, 3))
    with pytest.raises(RuntimeError, match="^unravel_index: no index fits"):
        lucid.unravel_index(lucid.tensor([0]), (2, 0))


# ------------------------------------------------------------------ indexing


def _index_reduce_case(device=None):
    x = lucid.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], device=device)
    src = lucid.tensor([[10.0, 20.0], [30.0, 40.0], [50.0, 60.0], [70.0, 80.0]], device=device)
    return x, lucid.tensor([0, 2, 0, 1], device=device), src


@pytest.mark.parametrize("reduce,with_self,without_self", [
    ("prod", [[500, 2400], [210, 320], [150, 240]], [[500, 1200], [70, 80], [30, 40]]),
    ("mean", [[61 / 3, 82 / 3], [36.5, 42], [17.5, 23]], [[30, 40], [70, 80], [30, 40]]),
    ("amax", [[50, 60], [70, 80], [30, 40]], [[50, 60], [70, 80], [30, 40]]),
    ("amin", [[1, 2], [3, 4], [5, 6]], [[10, 20], [70, 80], [30, 40]]),
])
def test_index_reduce_values(reduce, with_self, without_self):
    x, idx, src = _index_reduce_case()
    assert np.allclose(_np(lucid.index_reduce(x, 0, idx, src, reduce)), with_self)
    assert np.allclose(_np(x.index_reduce(0, idx, src, reduce, include_self=False)), without_self)
    y = x.clone()
    assert y.index_reduce_(0, idx, src, reduce) is y and np.allclose(_np(y), with_self)


def test_index_reduce_edges_and_grad():
    ints = lucid.index_reduce(lucid.tensor([1, 2]), 0, lucid.tensor([0, 0]), lucid.tensor([2, 3]), "mean")
    assert ints.tolist() == [2, 2]  # integer means round down, as PyTorch's
    assert lucid.index_reduce(lucid.tensor(2.0), 0, lucid.tensor([0]), lucid.tensor(3.0), "prod").item() == 6.0
    x, idx, src = _index_reduce_case()
    assert lucid.index_reduce(x, 0, lucid.tensor([], dtype=lucid.int64), src[:0], "prod").tolist() == x.tolist()
    assert lucid.index_reduce(x, 1, lucid.tensor([1, 1], dtype=lucid.int32), x, "mean").shape == (3, 2)
    # d/dsrc of prod at row 0 (1 * 10 * 50): the other factors
    s = src.clone().requires_grad_()
    lucid.index_reduce(x, 0, idx, s, "prod")[0, 0].backward()
    assert s.grad[:, 0].tolist() == [50.0, 0.0, 10.0, 0.0]
    w = x.clone().requires_grad_()  # in place in a graph: gradient of the old values flows through
    y = w * 1.0
    y.index_reduce_(0, idx, src, "amax", include_self=True)
    y.sum().backward()
    assert w.grad.tolist() == [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]


def test_index_reduce_errors():
    x, idx, src = _index_reduce_case()
    with pytest.raises(RuntimeError, match="^index_reduce: expected reduce to be one of"):
        lucid.index_reduce(x, 0, idx, src, "sum")
    cx, _, csrc = _index_reduce_case("cpu")  # the range is checked on the CPU (a device would read back)
    with pytest.raises(IndexError, match="^index_reduce: index out of range"):
        lucid.index_reduce(cx, 0, lucid.tensor([5], device="cpu"), csrc[:1], "prod")
    with pytest.raises(IndexError, match="^index_reduce: index out of range"):
        lucid.index_reduce(cx, 0, lucid.tensor([-1], device="cpu"), csrc[:1], "prod")
    with pytest.raises(IndexError, match="^index_reduce: index is supposed to be a vector"):
        lucid.index_reduce(x, 0, lucid.tensor([[0]]), src[:1], "prod")
    with pytest.raises(RuntimeError, match="^index_reduce: expected an int32 or int64 index"):
        lucid.index_reduce(x, 0, lucid.tensor([0.0]), src[:1], "prod")
    with pytest.raises(RuntimeError, match="^index_reduce: source shape"):
        lucid.index_reduce(x, 0, idx, src[:, :1], "prod")
    with pytest.raises(RuntimeError, match="^index_reduce: number of indices \\(2\\)"):
        lucid.index_reduce(x, 0, idx[:2], src, "prod")
    with pytest.raises(RuntimeError, match="^index_reduce: self .* must have the same dtype"):
        lucid.index_reduce(x, 0, idx, src.double(), "prod")


def test_nonzero_static():
    x = lucid.tensor([[0, 1], [2, 0]])
    assert lucid.nonzero_static(x, size=3).tolist() == [[0, 1], [1, 0], [-1, -1]]
    assert x.nonzero_static(size=1, fill_value=7).tolist() == [[0, 1]]
    assert lucid.nonzero_static(x, size=0).shape == (0, 2)
    assert lucid.nonzero_static(lucid.tensor(5), size=2).shape == (2, 0)
    assert lucid.nonzero_static(lucid.tensor([0.0, float("nan"), -0.0]), size=2).tolist() == [[1], [-1]]
    assert lucid.nonzero_static(lucid.zeros(0, 3), size=2).tolist() == [[-1, -1]] * 2
    assert lucid.nonzero_static(x, size=3).dtype is lucid.int64
    # a fixed shape, so it runs under vmap: per-example rows
    batch = lucid.tensor([[0, 3, 0], [4, 5, 0]])
    got = lucid.func.vmap(lambda r: lucid.nonzero_static(r, size=2))(batch)
    assert got.tolist() == [[[1], [-1]], [[0], [1]]]
    with pytest.raises(RuntimeError, match="^nonzero_static: 'size' must be a non-negative integer"):
        lucid.nonzero_static(x, size=-1)
    with pytest.raises(TypeError):
        lucid.nonzero_static(x, 2)  # size is keyword-only, as in PyTorch


def test_as_strided_scatter():
    a = lucid.arange(6.0).reshape(2, 3)
    out = lucid.as_strided_scatter(a, lucid.tensor([10.0, 20.0]), (2,), (3,), 1)
    assert out.tolist() == [[0.0, 10.0, 2.0], [3.0, 20.0, 5.0]] and a[0, 1].item() == 1.0  # input unchanged
    # a transposed (dense) input keeps its memory order in the clone, so the strides count a's memory
    assert lucid.as_strided_scatter(a.T, lucid.tensor([10.0, 20.0]), (2,), (3,), 1).tolist() == [
        [0.0, 3.0], [10.0, 20.0], [2.0, 5.0]]
    # a view with an offset is cloned to a fresh buffer: strides count from its own first element
    assert lucid.as_strided_scatter(a[1], lucid.tensor([10.0, 20.0]), (2,), (1,)).tolist() == [10.0, 20.0, 5.0]
    assert a.as_strided_scatter(lucid.ones(2, 2), (2, 2), (1, 2), 0).tolist() == [[1.0, 1.0, 1.0], [1.0, 4.0, 5.0]]
    assert lucid.as_strided_scatter(a, lucid.tensor([7, 8]), (2,), (3,)).dtype is lucid.float32
    assert lucid.as_strided_scatter(a, lucid.ones(0), (0,), (1,)).tolist() == a.tolist()
    x, s = a.clone().requires_grad_(), lucid.tensor([1.0, 2.0], requires_grad=True)
    (lucid.as_strided_scatter(x, s, (2,), (3,), 1) * lucid.arange(6.0).reshape(2, 3)).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 2.0], [3.0, 0.0, 5.0]] and s.grad.tolist() == [1.0, 4.0]
    with pytest.raises(RuntimeError, match="^as_strided_scatter: size .* out of bounds"):
        lucid.as_strided_scatter(a, lucid.ones(2), (2,), (6,), 1)
    with pytest.raises(RuntimeError, match="^as_strided_scatter: expected src of the view's size"):
        lucid.as_strided_scatter(a, lucid.ones(3), (2,), (3,), 1)
    with pytest.raises(RuntimeError, match="^as_strided_scatter: more than one element"):
        lucid.as_strided_scatter(a, lucid.ones(2), (2,), (0,), 1)
    with pytest.raises(RuntimeError, match="^as_strided_scatter: negative"):
        lucid.as_strided_scatter(a, lucid.ones(2), (2,), (-1,), 1)


def test_constant_pad_nd():
    assert lucid.constant_pad_nd(lucid.ones(2, 2), [1, 1, 1, 0], 5.0).tolist() == [
        [5.0, 5.0, 5.0, 5.0], [5.0, 1.0, 1.0, 5.0], [5.0, 1.0, 1.0, 5.0]]
    assert lucid.constant_pad_nd(lucid.tensor([1.0, 2.0, 3.0]), (-1, 2)).tolist() == [2.0, 3.0, 0.0, 0.0]
    assert lucid.constant_pad_nd(lucid.ones(2, dtype=lucid.int64), [1, 1], 2.5).tolist() == [2, 1, 1, 2]
    assert lucid.constant_pad_nd(lucid.tensor([True]), [1, 0], 0).tolist() == [False, True]
    assert lucid.constant_pad_nd(lucid.tensor(3.0), []).item() == 3.0
    with pytest.raises(RuntimeError, match="^constant_pad_nd: length of pad must be even"):
        lucid.constant_pad_nd(lucid.ones(2, 2), [1])
    with pytest.raises(RuntimeError, match="^constant_pad_nd: pad of length 6 is longer"):
        lucid.constant_pad_nd(lucid.ones(2, 2), [1] * 6)
    with pytest.raises(RuntimeError, match="^constant_pad_nd: pad .* crops more than"):
        lucid.constant_pad_nd(lucid.ones(2), [-3, 1])


# ------------------------------------------------------------------ histogramdd


def test_histogramdd_matches_numpy():
    pts = RNG.normal(size=(50, 2))
    weights = RNG.uniform(size=50)
    for kwargs, np_kwargs in [({}, {}), ({"range": [-1.0, 1.0, -2.0, 0.5]}, {"range": [(-1.0, 1.0), (-2.0, 0.5)]}),
                              ({"density": True}, {"density": True})]:
        h = lucid.histogramdd(lucid.tensor(pts), bins=[3, 4], weight=lucid.tensor(weights), **kwargs)
        want, edges = np.histogramdd(pts, bins=[3, 4], weights=weights, **np_kwargs)
        assert np.allclose(_np(h.hist), want) and all(np.allclose(_np(e), w) for e, w in zip(h.bin_edges, edges))
        assert h.hist.dtype is lucid.float64 and isinstance(h.bin_edges, tuple)
    edges = [lucid.tensor([-3.0, 0.0, 3.0], dtype=lucid.float64), lucid.tensor([-1.0, 1.0], dtype=lucid.float64)]
    got = lucid.histogramdd(lucid.tensor(pts), bins=edges).hist
    assert np.allclose(_np(got), np.histogramdd(pts, bins=[[-3.0, 0.0, 3.0], [-1.0, 1.0]])[0])


def test_histogramdd_closed_forms_and_edges():
    pts = lucid.tensor([[0.0, 0.0], [1.0, 1.0], [1.0, 0.5], [2.0, 2.0]])
    h = lucid.histogramdd(pts, bins=2, weight=lucid.tensor([1.0, 2.0, 3.0, 4.0]), density=True)
    assert np.allclose(_np(h.hist), [[0.1, 0.0], [0.3, 0.6]])  # the last bin is closed on the right
    h = lucid.histogramdd(lucid.zeros(0, 2), bins=2)
    assert h.hist.tolist() == [[0.0, 0.0], [0.0, 0.0]] and h.bin_edges[0].tolist() == [0.0, 0.5, 1.0]
    h = lucid.histogramdd(lucid.ones(3, 2), bins=2)  # a constant coordinate spans [v - 0.5, v + 0.5]
    assert h.hist.tolist() == [[0.0, 0.0], [0.0, 3.0]] and h.bin_edges[1].tolist() == [0.5, 1.0, 1.5]
    assert lucid.histogramdd(lucid.rand(2, 3, 2), bins=2).hist.sum().item() == 6.0
    x = lucid.tensor([[0.5, 0.5]], requires_grad=True)
    assert not lucid.histogramdd(x, bins=2).hist.requires_grad


def test_histogramdd_errors():
    pts = lucid.tensor([[0.0, 0.0], [1.0, 1.0]])
    with pytest.raises(RuntimeError, match="^histogramdd: input should have at least 2 dimensions"):
        lucid.histogramdd(lucid.tensor([0.0, 1.0]), bins=2)
    with pytest.raises(NotImplementedError, match="^histogramdd: not implemented for"):
        lucid.histogramdd(lucid.tensor([[1, 2]]), bins=2)
    with pytest.raises(RuntimeError, match="^histogramdd: expected 2 bin specifications"):
        lucid.histogramdd(pts, bins=[2, 2, 2])
    with pytest.raises(RuntimeError, match="^histogramdd: for a 2-dimensional histogram range should have 4"):
        lucid.histogramdd(pts, bins=2, range=[0.0, 1.0])
    with pytest.raises(RuntimeError, match="^histogramdd: min should not exceed max"):
        lucid.histogramdd(pts, bins=2, range=[1.0, 0.0, 0.0, 1.0])
    with pytest.raises(RuntimeError, match="^histogramdd: dimension 0's range \\[nan, nan\\] is not finite"):
        lucid.histogramdd(lucid.tensor([[float("nan"), 1.0]]), bins=2)
    with pytest.raises(RuntimeError, match="^histogramdd: bins must be > 0"):
        lucid.histogramdd(pts, bins=0)
    with pytest.raises(RuntimeError, match="^histogramdd: weight should have"):
        lucid.histogramdd(pts, bins=2, weight=lucid.ones(3))
    with pytest.raises(RuntimeError, match="^histogramdd: input and weight should have the same dtype"):
        lucid.histogramdd(pts, bins=2, weight=lucid.ones(2, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match="^histogramdd: input and bin edges should have the same dtype"):
        lucid.histogramdd(pts, bins=[lucid.tensor([0.0, 1.0], dtype=lucid.float64), lucid.tensor([0.0, 1.0])])
    with pytest.raises(RuntimeError, match="^histogramdd: the bin edges of dimension 0 must be non-decreasing"):
        lucid.histogramdd(pts.cpu(), bins=[lucid.tensor([1.0, 0.0], device="cpu"),
                                           lucid.tensor([0.0, 1.0], device="cpu")])
    with pytest.raises(RuntimeError, match="^histogramdd: the bin edges of dimension 0 should be a non-empty 1-d"):
        lucid.histogramdd(pts, bins=[lucid.tensor([[0.0, 1.0]]), lucid.tensor([0.0, 1.0])])


# ------------------------------------------------------------------ binomial and convolution


def test_binomial_distribution():
    lucid.manual_seed(0)
    n, p = 20.0, 0.3
    draws = _np(lucid.binomial(lucid.full((20000,), n), lucid.full((20000,), p)))
    assert np.all(draws == np.round(draws)) and draws.min() >= 0 and draws.max() <= n
    # mean n p = 6 and variance n p (1 - p) = 4.2; standard errors 0.0145 and about 0.05
    assert abs(draws.mean() - n * p) < 0.06 and abs(draws.var() - n * p * (1 - p)) < 0.2
    freq = np.bincount(draws.astype(int), minlength=21) / draws.size
    pmf = np.array([math.comb(20, k) * p ** k * (1 - p) ** (20 - k) for k in range(21)])
    assert np.abs(freq - pmf).max() < 0.01


def test_binomial_edges_and_errors():
    n = lucid.tensor([10.0, 10.0, 10.0, 0.0, -1.0, 3.5, 10.0, float("inf")])
    p = lucid.tensor([0.0, 1.0, 1.5, 0.5, 0.5, 1.0, float("nan"), 0.5])
    out = lucid.binomial(n, p).tolist()
    assert out[:6] == [0.0, 10.0, 10.0, 0.0, 0.0, 3.5] and all(math.isnan(v) for v in out[6:])
    assert lucid.binomial(lucid.tensor([[3.0], [4.0]]), lucid.tensor([1.0, 0.0])).tolist() == [[3.0, 0.0], [4.0, 0.0]]
    c, q = lucid.tensor([5.0, 9.0], dtype=lucid.float64), lucid.tensor([0.5, 0.5], dtype=lucid.float64)
    assert lucid.binomial(c, q).dtype is lucid.float64
    g1, g2 = lucid.Generator().manual_seed(3), lucid.Generator().manual_seed(3)
    big = lucid.full((50,), 100.0)
    assert lucid.binomial(big, big * 0.005, g1).tolist() == lucid.binomial(big, big * 0.005, g2).tolist()
    assert not lucid.binomial(lucid.tensor([3.0], requires_grad=True), lucid.tensor([0.5])).requires_grad
    with pytest.raises(TypeError, match="^binomial: count and prob must be Tensors"):
        lucid.binomial(lucid.tensor([3.0]), 0.5)
    with pytest.raises(ValueError, match="^binomial: only floating point"):
        lucid.binomial(lucid.tensor([3]), lucid.tensor([0.5]))
    with pytest.raises(RuntimeError, match="^binomial: count and prob must have the same dtype"):
        lucid.binomial(lucid.tensor([3.0]), lucid.tensor([0.5], dtype=lucid.float64))


def test_binomial_under_vmap_randomness():
    counts = lucid.full((3, 4), 50.0)
    with pytest.raises(RuntimeError, match="binomial|rand"):
        lucid.func.vmap(lambda c: lucid.binomial(c, c * 0.01))(counts)
    same = lucid.func.vmap(lambda c: lucid.binomial(c, c * 0.01), randomness="same")(counts)
    assert (same[0] == same[1]).all().item() and (same[1] == same[2]).all().item()


def test_convolution_matches_conv_functions():
    x, w, b = lucid.tensor(RNG.normal(size=(2, 2, 5, 5))), lucid.tensor(RNG.normal(size=(4, 1, 3, 3))), lucid.ones(4)
    got = lucid.convolution(x, w, b, [2, 1], [1], [1], False, [0], 2)
    assert np.allclose(_np(got), _np(lucid.conv2d(x, w, b, stride=(2, 1), padding=1, groups=2)))
    wt = lucid.tensor(RNG.normal(size=(2, 3, 3)))
    x1 = lucid.tensor(RNG.normal(size=(1, 2, 4)))
    got = lucid.convolution(x1, wt, None, [2], [1], [1], True, [1], 1)
    assert got.shape == (1, 3, 8)
    assert np.allclose(_np(got), _np(lucid.conv_transpose1d(x1, wt, stride=2, padding=1, output_padding=1)))
    with pytest.raises(RuntimeError, match="^convolution: expected a 3-dimensional input"):
        lucid.convolution(x1[0], wt, None, [1], [0], [1], False, [0], 1)
    with pytest.raises(RuntimeError, match="^convolution: expected stride to be a single integer value or a list of 2"):
        lucid.convolution(x, w, None, [1, 1, 1], [0], [1], False, [0], 2)


# ------------------------------------------------------------------ legacy linear algebra


def test_svd_returns_v():
    a = RNG.normal(size=(2, 4, 3))
    U, S, V = lucid.svd(lucid.tensor(a))
    assert (U.shape, S.shape, V.shape) == ((2, 4, 3), (2, 3), (2, 3, 3))
    assert np.allclose(_np(U @ lucid.diag_embed(S) @ V.mT), a)
    U, S, V = lucid.tensor(a).svd(some=False)
    assert (U.shape, V.shape) == ((2, 4, 4), (2, 3, 3))
    U, S, V = lucid.svd(lucid.tensor(a), compute_uv=False)
    assert (U.shape, V.shape) == ((2, 4, 4), (2, 3, 3)) and not _np(U).any() and not _np(V).any()
    assert np.allclose(_np(S), np.linalg.svd(a, compute_uv=False))
    z = lucid.tensor(RNG.normal(size=(3, 2)) + 1j * RNG.normal(size=(3, 2)))
    U, S, V = lucid.svd(z)
    assert np.allclose(_np(U * S.to(z.dtype).unsqueeze(0) @ V.mT.conj()), _np(z), atol=1e-6)
    with pytest.raises(RuntimeError, match="^svd: expected input to have at least 2 dimensions"):
        lucid.svd(lucid.ones(2))
    with pytest.raises(RuntimeError, match="^svd: expected input to be a floating point"):
        lucid.svd(lucid.ones(2, 2, dtype=lucid.int64))


def test_qr_lu_and_lu_unpack():
    a = RNG.normal(size=(4, 3))
    with pytest.warns(UserWarning, match="qr is deprecated"):
        Q, R = lucid.qr(lucid.tensor(a), some=False)
    assert (Q.shape, R.shape) == ((4, 4), (4, 3)) and np.allclose(_np(Q @ R), a)
    for shape in ((3, 3), (2, 3, 3), (4, 2), (2, 4)):
        m = RNG.normal(size=shape)
        with pytest.warns(UserWarning, match="lu is deprecated"):
            LU, piv, info = lucid.lu(lucid.tensor(m), get_infos=True)
        assert piv.dtype is lucid.int32 and info.shape == shape[:-2] and not _np(info).any()
        P, L, U = lucid.lu_unpack(LU, piv)
        assert np.allclose(_np(P @ L @ U), m)
        k = min(shape[-2:])
        assert (P.shape[-1], L.shape[-1], U.shape[-2]) == (shape[-2], k, k)
        P2, L2, U2 = lucid.lu_unpack(LU, piv, unpack_data=False)
        assert L2.shape == (0,) and U2.shape == (0,) and np.array_equal(_np(P2), _np(P))
        assert lucid.lu_unpack(LU, piv, unpack_pivots=False).P.shape == (0,)
    assert len(_quiet(lucid.lu, lucid.eye(2))) == 2  # (LU, pivots) without get_infos
    with pytest.raises(RuntimeError, match="^lu: LU without pivoting"):
        _quiet(lucid.lu, lucid.eye(2), pivot=False)
    LU, piv = lucid.linalg.lu_factor(lucid.eye(2))
    with pytest.raises(RuntimeError, match="^lu_unpack: LU_pivots should be an int32"):
        lucid.lu_unpack(LU, piv.long())
    with pytest.raises(RuntimeError, match="^lu_unpack: pivots must be between 1 and"):  # checked on the CPU
        lucid.lu_unpack(LU.cpu(), lucid.tensor([3, 2], dtype=lucid.int32, device="cpu"))
    with pytest.raises(RuntimeError, match="^lu_unpack: LU_pivots of shape"):
        lucid.lu_unpack(LU, lucid.tensor([1], dtype=lucid.int32))


def test_solves():
    a = RNG.normal(size=(3, 3)) + 3 * np.eye(3)
    b = RNG.normal(size=(2, 3, 2))
    LU, piv = lucid.linalg.lu_factor(lucid.tensor(a))
    with pytest.warns(UserWarning, match="lu_solve is deprecated"):
        x = lucid.tensor(b).lu_solve(LU, piv)
    assert np.allclose(_np(x), np.linalg.solve(a, b))
    spd = a @ a.T + np.eye(3)
    with pytest.warns(UserWarning, match="cholesky is deprecated"):
        low = lucid.cholesky(lucid.tensor(spd))
    assert np.allclose(_np(low), np.linalg.cholesky(spd))
    up = _quiet(lucid.cholesky, lucid.tensor(spd), True)
    assert np.allclose(_np(up), np.linalg.cholesky(spd).T)
    assert np.allclose(_np(lucid.cholesky_solve(lucid.tensor(b), low)), np.linalg.solve(spd, b))
    assert np.allclose(_np(lucid.tensor(b).cholesky_solve(up, upper=True)), np.linalg.solve(spd, b))
    junk = low + lucid.tensor(np.triu(np.ones((3, 3)), 1) * 9)  # only the lower triangle is read
    assert np.allclose(_np(lucid.cholesky_inverse(junk)), np.linalg.inv(spd))
    assert np.allclose(_np(up.cholesky_inverse(upper=True)), np.linalg.inv(spd))
    tri = np.triu(a) + np.tril(np.ones((3, 3)), -1) * 5
    with pytest.warns(UserWarning, match="triangular_solve is deprecated"):
        sol, coef = lucid.triangular_solve(lucid.tensor(b), lucid.tensor(tri))
    assert np.allclose(_np(sol), np.linalg.solve(np.triu(a), b))
    assert coef.shape == (2, 3, 3) and np.array_equal(_np(coef)[1], tri)
    sol = _quiet(lucid.tensor(b).triangular_solve, lucid.tensor(tri), False, True, True)[0]
    unit_lower = np.tril(tri, -1) + np.eye(3)
    assert np.allclose(_np(sol), np.linalg.solve(unit_lower.T, b))
    with pytest.raises(RuntimeError, match="^triangular_solve: expected b to have at least 2 dimensions"):
        _quiet(lucid.triangular_solve, lucid.ones(3), lucid.eye(3))
    with pytest.raises(RuntimeError, match="^triangular_solve: expected b and A to have the same dtype"):
        _quiet(lucid.triangular_solve, lucid.ones(3, 1, dtype=lucid.float64), lucid.eye(3))
    with pytest.raises(RuntimeError, match="^cholesky_solve: incompatible shapes"):
        lucid.cholesky_solve(lucid.ones(2, 1), lucid.eye(3))
    with pytest.raises(RuntimeError, match="^cholesky_inverse: expected square"):
        lucid.cholesky_inverse(lucid.ones(2, 3))


def test_determinants_and_inverses():
    assert math.isnan(lucid.logdet(lucid.tensor([[-1.0, 0.0], [0.0, 2.0]])).item())
    assert lucid.logdet(lucid.zeros(2, 2)).item() == -math.inf
    assert np.isclose(lucid.tensor([[2.0, 0.0], [0.0, 3.0]]).logdet().item(), math.log(6.0))
    z = lucid.logdet(lucid.tensor([[-1.0 + 0j, 0.0], [0.0, 2.0]])).item()
    assert np.isclose(z, math.log(2.0) + 1j * math.pi)
    a = RNG.normal(size=(3, 3)) * 0.3 + 3 * np.eye(3)  # diagonally dominant: det > 0, so logdet is finite
    t = lucid.tensor(a)
    assert np.isclose(lucid.det(t).item(), np.linalg.det(a))
    assert np.allclose(_np(lucid.inverse(t)), np.linalg.inv(a))
    sign, logabs = lucid.slogdet(t)
    assert np.isclose(sign.item(), np.sign(np.linalg.det(a))) and np.isclose(logabs.item(), np.linalg.slogdet(a)[1])
    assert np.allclose(_np(lucid.matrix_power(t, -2)), np.linalg.matrix_power(a, -2))
    m = RNG.normal(size=(3, 4))
    assert np.allclose(_np(lucid.pinverse(lucid.tensor(m))), np.linalg.pinv(m))
    # rcond drops singular values below rcond * the largest
    d = lucid.tensor([[2.0, 0.0], [0.0, 0.1]])
    assert lucid.pinverse(d, 0.1).tolist() == [[0.5, 0.0], [0.0, 0.0]]
    g = t.clone().requires_grad_()
    lucid.logdet(g).backward()  # d logdet / dA = A^-T
    assert np.allclose(_np(g.grad), np.linalg.inv(a).T)


def test_tensor_methods_are_attached_without_replacing():
    for name in ("absolute", "adjoint", "clamp_min", "clamp_max", "deg2rad", "rad2deg", "signbit", "inner",
                 "diagflat", "msort", "tensor_split", "split_with_sizes", "cross", "nonzero_static",
                 "as_strided_scatter", "index_reduce", "index_reduce_", "lu", "qr", "svd", "logdet",
                 "cholesky_inverse", "cholesky_solve", "triangular_solve", "lu_solve"):
        assert callable(getattr(lucid.Tensor, name)), name
    # methods Lucid had stay Lucid's; pinverse is torch's (rcond), not linalg.pinv (atol/rtol)
    # (the namespaces' functions wrap the methods' for out=, NOTE [Out arguments])
    # (unwrapped on both sides: NOTE [Torch function] wraps both once a Tensor subclass exists)
    assert inspect.unwrap(lucid.Tensor.pinverse) is inspect.unwrap(lucid.pinverse)
    assert inspect.unwrap(lucid.Tensor.det) is inspect.unwrap(lucid.linalg.det)


# ------------------------------------------------------------------ nn.functional spellings


def _x(*shape):
    return RNG.normal(size=shape)


LOSS_INPUTS = {
    "bce": (_x(4, 3), RNG.uniform(size=(4, 3))),
    "pair": (_x(4, 3), _x(4, 3), np.array([1.0, -1.0, 1.0, -1.0])),
}


def _np_values():
    """``name -> (lucid call, NumPy closed form)`` for each spelling: checks without PyTorch."""
    x3, w = _x(2, 3, 4), _x(3)
    xl, tl = LOSS_INPUTS["bce"]
    a1, a2, y = LOSS_INPUTS["pair"]
    sig = 1 / (1 + np.exp(-xl))
    mean3 = x3.mean(axis=(0, 2), keepdims=True)
    var3 = x3.var(axis=(0, 2), keepdims=True)
    cos = (a1 * a2).sum(1) / np.linalg.norm(a1, axis=1) / np.linalg.norm(a2, axis=1)
    W, I = _x(5, 2), np.array([[0, 4], [2, 2]])
    tbc, tbc_w = x3.transpose(2, 0, 1), _x(2, 3, 2)  # (time 4, batch 2, channels 3); kernel 2 -> 2 channels
    return {
        "adaptive_avg_pool1d": (lambda: lucid.adaptive_avg_pool1d(lucid.tensor(x3), 2),
                                x3.reshape(2, 3, 2, 2).mean(-1)),
        "adaptive_max_pool1d": (lambda: lucid.adaptive_max_pool1d(lucid.tensor(x3), 2)[0],
                                x3.reshape(2, 3, 2, 2).max(-1)),
        "avg_pool1d": (lambda: lucid.avg_pool1d(lucid.tensor(x3), 2), x3.reshape(2, 3, 2, 2).mean(-1)),
        "max_pool1d": (lambda: lucid.max_pool1d(lucid.tensor(x3), 2), x3.reshape(2, 3, 2, 2).max(-1)),
        "max_pool1d_with_indices": (lambda: lucid.max_pool1d_with_indices(lucid.tensor(x3), 2)[1],
                                    x3.reshape(2, 3, 2, 2).argmax(-1) + np.array([0, 2])),
        "max_pool2d": (lambda: lucid.max_pool2d(lucid.tensor(x3[None]), 2), x3[:, :2, :].reshape(2, 1, 2, 2, 2)
                       .max(axis=(2, 4))[None]),
        "max_pool3d": (lambda: lucid.max_pool3d(lucid.tensor(x3[None, None, :, :2, :2]), 2),
                       x3[:, :2, :2].max().reshape(1, 1, 1, 1, 1)),
        "batch_norm": (lambda: lucid.batch_norm(lucid.tensor(x3), None, None, None, None, True, 0.1, 1e-5, False),
                       (x3 - mean3) / np.sqrt(var3 + 1e-5)),
        "instance_norm": (lambda: lucid.instance_norm(lucid.tensor(x3), None, None, None, None, True, 0.1, 1e-5,
                                                      False),
                          (x3 - x3.mean(-1, keepdims=True)) / np.sqrt(x3.var(-1, keepdims=True) + 1e-5)),
        "layer_norm": (lambda: lucid.layer_norm(lucid.tensor(x3), [4], eps=0.0),
                       (x3 - x3.mean(-1, keepdims=True)) / x3.std(-1, keepdims=True)),
        "group_norm": (lambda: lucid.group_norm(lucid.tensor(x3), 1, eps=0.0),
                       (x3 - x3.mean((1, 2), keepdims=True)) / x3.std((1, 2), keepdims=True)),
        "rms_norm": (lambda: lucid.rms_norm(lucid.tensor(x3), [4], lucid.tensor(w[:1].repeat(4)), 0.0),
                     x3 / np.sqrt((x3 ** 2).mean(-1, keepdims=True)) * w[0]),
        "bilinear": (lambda: lucid.bilinear(lucid.tensor(xl), lucid.tensor(tl), lucid.ones(2, 3, 3)),
                     np.repeat((xl.sum(1) * tl.sum(1))[:, None], 2, 1)),
        "binary_cross_entropy_with_logits": (
            lambda: lucid.binary_cross_entropy_with_logits(lucid.tensor(xl), lucid.tensor(tl)),
            -(tl * np.log(sig) + (1 - tl) * np.log(1 - sig))),
        "celu": (lambda: lucid.celu(lucid.tensor(xl), 2.0), np.maximum(xl, 0) + np.minimum(0, 2 * np.expm1(xl / 2))),
        # out[t, b, o] = bias[o] + sum_k,c x[t + k - pad, b, c] w[k, c, o]; pad 1 adds a zero step each side
        "conv_tbc": (lambda: lucid.conv_tbc(lucid.tensor(tbc), lucid.tensor(tbc_w), lucid.tensor(w[:2]), 1),
                     np.stack([sum(np.pad(tbc, ((1, 1), (0, 0), (0, 0)))[t + k] @ tbc_w[k] for k in range(2)) + w[:2]
                               for t in range(5)])),
        "selu": (lambda: lucid.selu(lucid.tensor(xl)),
                 1.0507009873554805 * np.where(xl > 0, xl, 1.6732632423543772 * np.expm1(xl))),
        "rrelu": (lambda: lucid.rrelu(lucid.tensor(xl), 0.1, 0.3), np.where(xl >= 0, xl, 0.2 * xl)),
        "channel_shuffle": (lambda: lucid.channel_shuffle(lucid.arange(4.0).reshape(1, 4, 1), 2),
                            np.array([0.0, 2.0, 1.0, 3.0])[None, :, None]),
        "cosine_embedding_loss": (lambda: lucid.cosine_embedding_loss(*map(lucid.tensor, (a1, a2, y)), 0.1, 1),
                                  np.where(y > 0, 1 - cos, np.maximum(0, cos - 0.1)).mean()),
        "dropout": (lambda: lucid.dropout(lucid.tensor(xl), 0.5, False), xl),
        "alpha_dropout": (lambda: lucid.alpha_dropout(lucid.tensor(xl), 0.5, False), xl),
        "feature_dropout": (lambda: lucid.feature_dropout(lucid.tensor(xl), 1.0, True), np.zeros_like(xl)),
        "feature_alpha_dropout": (lambda: lucid.feature_alpha_dropout(lucid.tensor(xl), 0.5, False), xl),
        "embedding": (lambda: lucid.embedding(lucid.tensor(W), lucid.tensor(I)), W[I]),
        "embedding_bag": (lambda: lucid.embedding_bag(lucid.tensor(W), lucid.tensor([0, 4, 2]),
                                                      lucid.tensor([0, 2]), False, 1)[0],
                          np.stack([W[[0, 4]].mean(0), W[2]])),
        "hardshrink": (lambda: lucid.hardshrink(lucid.tensor(xl)), np.where(np.abs(xl) > 0.5, xl, 0.0)),
        "hinge_embedding_loss": (lambda: lucid.hinge_embedding_loss(lucid.tensor(a1[:, 0]), lucid.tensor(y), 0.5, 2),
                                 np.where(y > 0, a1[:, 0], np.maximum(0, 0.5 - a1[:, 0])).sum()),
        "kl_div": (lambda: lucid.kl_div(lucid.tensor(xl), lucid.tensor(tl), 1), (tl * (np.log(tl) - xl)).mean()),
        "margin_ranking_loss": (lambda: lucid.margin_ranking_loss(*map(lucid.tensor, (a1[:, 0], a2[:, 0], y)), 0.2),
                                np.maximum(0, -y * (a1[:, 0] - a2[:, 0]) + 0.2)),
        "pairwise_distance": (lambda: lucid.pairwise_distance(lucid.tensor(a1), lucid.tensor(a2), 1.0, 0.0),
                              np.abs(a1 - a2).sum(1)),
        "pixel_shuffle": (lambda: lucid.pixel_shuffle(lucid.arange(4.0).reshape(1, 4, 1, 1), 2),
                          np.array([[[[0.0, 1.0], [2.0, 3.0]]]])),
        "pixel_unshuffle": (lambda: lucid.pixel_unshuffle(lucid.arange(4.0).reshape(1, 1, 2, 2), 2),
                            np.arange(4.0).reshape(1, 4, 1, 1)),
        "poisson_nll_loss": (lambda: lucid.poisson_nll_loss(lucid.tensor(xl), lucid.tensor(tl), True, False, 1e-8, 2),
                             (np.exp(xl) - tl * xl).sum()),
        "prelu": (lambda: lucid.prelu(lucid.tensor(x3), lucid.tensor(w)), np.where(x3 >= 0, x3, w[None, :, None] * x3)),
        "threshold": (lambda: lucid.threshold(lucid.tensor(xl), 0.1, 20.0), np.where(xl > 0.1, xl, 20.0)),
        "triplet_margin_loss": (lambda: lucid.triplet_margin_loss(*map(lucid.tensor, (a1, a2, tl)), 1.0, 2.0, 0.0),
                                np.maximum(np.linalg.norm(a1 - a2, axis=1) - np.linalg.norm(a1 - tl, axis=1) + 1, 0)),
        "ctc_loss": (lambda: lucid.ctc_loss(lucid.zeros(1, 1, 2).log_softmax(-1), lucid.tensor([[1]]), [1], [1]),
                     np.array([math.log(2.0)])),
    }


@pytest.mark.parametrize("name", sorted(_np_values()))
def test_nn_spelling_closed_forms(name):
    call, want = _np_values()[name]
    got = _np(call())
    assert got.shape == np.shape(want), name
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_every_listed_spelling_exists_and_keeps_nn_unloaded():
    import subprocess
    import sys

    names = sorted(_np_values())
    assert set(names) == set(lucid.ops.torch_nn_functions.__all__)
    code = ("import sys, lucid; lucid.celu; lucid.embedding_bag; "
            "print('lucid.nn' in sys.modules or 'lucid.nn.functional' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"


def test_nn_spelling_reductions_and_errors():
    xl, tl = (lucid.tensor(a) for a in LOSS_INPUTS["bce"])
    none = lucid.binary_cross_entropy_with_logits(xl, tl)  # the default is 0 (none), as PyTorch's binding
    assert none.shape == (4, 3)
    assert np.isclose(lucid.binary_cross_entropy_with_logits(xl, tl, reduction=1).item(), _np(none).mean())
    assert np.isclose(lucid.binary_cross_entropy_with_logits(xl, tl, reduction=2).item(), _np(none).sum())
    with pytest.raises(ValueError, match="^kl_div: reduction must be 0 \\(none\\), 1 \\(mean\\) or 2 \\(sum\\)"):
        lucid.kl_div(xl, tl, 3)
    with pytest.raises(TypeError, match="^triplet_margin_loss: reduction must be an int"):
        lucid.triplet_margin_loss(xl, tl, xl, reduction="mean")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyTorch's top-level kl_div gives no 'mean' warning
        lucid.kl_div(xl, tl, 1)
    with pytest.raises(RuntimeError, match="^dropout: dropout probability has to be between 0 and 1"):
        lucid.dropout(xl, 1.5, False)
    with pytest.raises(RuntimeError, match="^feature_dropout: requires at least 2 dimensions"):
        lucid.feature_dropout(lucid.ones(3), 0.5, True)
    with pytest.raises(RuntimeError, match="^feature_alpha_dropout: requires at least 2 dimensions"):
        lucid.feature_alpha_dropout(lucid.ones(3), 0.5, True)
    with pytest.raises(ValueError, match="^embedding_bag: mode must be 0"):
        lucid.embedding_bag(lucid.ones(3, 2), lucid.tensor([0]), lucid.tensor([0]), False, 3)
    with pytest.raises(ValueError, match="^embedding_bag: expected 1-d indices and a 1-d offsets tensor"):
        lucid.embedding_bag(lucid.ones(3, 2), lucid.tensor([[0]]), None)
    x = lucid.ones(3)
    assert lucid.dropout(x, 0.5, False) is x  # evaluation returns the input itself, as PyTorch


def test_nn_spelling_randomness():
    lucid.manual_seed(0)
    x = lucid.ones(200, 50, 4)
    y = _np(lucid.feature_dropout(x, 0.3, True))
    per_channel = y.reshape(200, 50, 4)
    assert np.all((per_channel == per_channel[..., :1]))  # whole channels are kept or dropped
    kept = per_channel[..., 0] != 0
    assert abs(kept.mean() - 0.7) < 0.02 and np.allclose(per_channel[kept], 1 / 0.7)
    d = _np(lucid.dropout(lucid.ones(20000), 0.25, True))
    assert abs((d == 0).mean() - 0.25) < 0.015 and np.allclose(d[d != 0], 1 / 0.75)
    g1, g2 = lucid.Generator().manual_seed(5), lucid.Generator().manual_seed(5)
    neg = -lucid.ones(1000)
    r1, r2 = lucid.rrelu(neg, 0.1, 0.3, True, g1), lucid.rrelu(neg, 0.1, 0.3, True, g2)
    assert r1.tolist() == r2.tolist() and -0.3 <= r1.min().item() and r1.max().item() <= -0.1
    assert abs(r1.mean().item() + 0.2) < 0.01


def test_embedding_bag_auxiliary_outputs():
    w = lucid.arange(12.0).reshape(4, 3)
    idx, off = lucid.tensor([0, 2, 1, 3, 3]), lucid.tensor([0, 2, 2])
    out, bag, size, maxi = lucid.embedding_bag(w, idx, off, False, 2, False, None, False, 3)
    assert out.tolist() == [[6.0, 7.0, 8.0], [0.0, 0.0, 0.0], [3.0, 4.0, 5.0]]
    assert bag.tolist() == [0, 0, 2, 2, 2] and size.tolist() == [2, 0, 1]
    assert maxi.tolist() == [[2, 2, 2], [0, 0, 0], [1, 1, 1]]
    out, bag, size, maxi = lucid.embedding_bag(w, idx, lucid.tensor([0, 2, 5]), False, 1, False, None, True)
    assert size.tolist() == [2, 3] and maxi.tolist() == [2, 3]
    assert np.allclose(_np(out), [[3.0, 4.0, 5.0], [7.0, 8.0, 9.0]])
    padded = lucid.embedding(w, lucid.tensor([1, 3]), 1)
    wg = w.clone().requires_grad_()
    lucid.embedding(wg, lucid.tensor([1, 3]), 1).sum().backward()
    assert padded.tolist() == [[3.0, 4.0, 5.0], [9.0, 10.0, 11.0]] and wg.grad[1].tolist() == [0.0, 0.0, 0.0]


# ------------------------------------------------------------------ on a device


def test_device_inputs_stay_on_their_device_and_read_nothing_back():
    from lucid.testing import strict_device

    strict_device.enable()
    dev = "strict"
    x = lucid.tensor([[0.0, 1.5], [-2.0, 0.0]], device=dev)
    eye = lucid.eye(2, device=dev) * 3
    calls = {
        "signbit": lambda: lucid.signbit(x), "nonzero_static": lambda: lucid.nonzero_static(x, size=3),
        "unravel_index": lambda: lucid.unravel_index(lucid.tensor([3], device=dev), (2, 2))[0],
        "as_strided_scatter": lambda: lucid.as_strided_scatter(x, lucid.ones(2, device=dev), (2,), (2,), 1),
        "index_reduce": lambda: lucid.index_reduce(x, 0, lucid.tensor([1], device=dev), lucid.ones(1, 2, device=dev),
                                                   "amax"),
        "binomial": lambda: lucid.binomial(lucid.full((3,), 4.0, device=dev), lucid.full((3,), 0.5, device=dev)),
        "inner": lambda: lucid.inner(x, x), "deg2rad": lambda: lucid.deg2rad(x),
        "constant_pad_nd": lambda: lucid.constant_pad_nd(x, [1, 1]),
        "feature_dropout": lambda: lucid.feature_dropout(lucid.ones(2, 2, 2, device=dev), 0.5, True),
        "lu_unpack": lambda: lucid.lu_unpack(*lucid.linalg.lu_factor(x + eye))[0],
        "svd": lambda: lucid.svd(x).V, "logdet": lambda: lucid.logdet(x + eye),
        "cholesky_inverse": lambda: lucid.cholesky_inverse(x.tril() + eye),
        "embedding_bag": lambda: lucid.embedding_bag(x, lucid.tensor([0, 1, 1], device=dev),
                                                     lucid.tensor([0, 1], device=dev), False, 2)[3],
        "convolution": lambda: lucid.convolution(lucid.ones(1, 1, 4, device=dev), lucid.ones(1, 1, 2, device=dev),
                                                 None, [1], [0], [1], False, [0], 1),
    }
    for name, call in calls.items():
        reads = strict_device.HOST_READS[0]
        out = call()
        assert strict_device.HOST_READS[0] == reads, f"{name}: a hidden device-to-host read"
        assert out.device.type == "strict", name
    # histogramdd reads the data's span to make its edges, as documented
    assert lucid.histogramdd(x, bins=2).hist.device.type == "strict"
    assert lucid.nonzero_static(x, size=3).cpu().tolist() == [[0, 1], [1, 0], [-1, -1]]


# ------------------------------------------------------------------ PyTorch parity


def test_matches_torch_group1():
    torch = pytest.importorskip("torch")
    m, v = _x(3, 4), _x(4)
    idx = np.array([0, 2, 0, 1])
    src = RNG.permutation(8).reshape(4, 2).astype(float) + 1

    def both(fn, *arrays):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            lo = fn(lucid, *[lucid.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays])
            th = fn(torch, *[torch.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays])
        flat = lambda r: [t for x in r for t in (flat(x) if isinstance(x, tuple) else [x])]  # noqa: E731
        lo, th = (flat(lo), flat(th)) if isinstance(lo, tuple) else ((lo,), (th,))
        assert len(lo) == len(th)
        for p, q in zip(lo, th):
            assert tuple(p.shape) == tuple(q.shape) and str(p.dtype).split(".")[1] == str(q.dtype).split(".")[1]
            assert np.allclose(_np(p), q.numpy(), equal_nan=True)

    both(lambda L, a: L.absolute(a), m)
    both(lambda L, a: L.adjoint(a), m)
    both(lambda L, a: L.clamp_min(a, 0.1), m)
    both(lambda L, a, b: L.clamp_max(a, b), m, v)
    both(lambda L, a: L.deg2rad(a), np.array([180, 90]))
    both(lambda L, a: L.rad2deg(a), m)
    both(lambda L, a: L.signbit(a), np.array([-0.0, 0.0, -1.0, np.nan, -np.nan]))
    both(lambda L, a, b: L.inner(a, b), m, m)
    both(lambda L, a: L.diagflat(a, -1), m)
    both(lambda L, a: L.msort(a), m)
    both(lambda L, a: L.trapz(a, dim=0), m)
    both(lambda L, a, b: L.trapz(a, b), m, np.sort(v))
    both(lambda L, a: L.tensor_split(a, 3, 1), m)
    both(lambda L, a: L.tensor_split(a, [1, -1, 7], 1), m)
    both(lambda L, a: L.split_with_sizes(a, [1, 3], 1), m)
    both(lambda L, a, b: L.broadcast_tensors(a, b), m[:, :1], v)
    both(lambda L, a: L.unravel_index(a, (3, 4)), np.array([[5, -1], [11, 13]]))
    both(lambda L, a, b: L.chain_matmul(a, b.T, a), m, m)
    both(lambda L, a, b: L.cross(a, b), m[:, :2], m[:, 2:])
    both(lambda L, a: L.frobenius_norm(a, (0, 1), True), m)
    both(lambda L, a: L.nuclear_norm(a), m)
    for r in ("prod", "mean", "amax", "amin"):
        both(lambda L, a, i, s: L.index_reduce(a, 0, i, s, r, include_self=False), _x(3, 2), idx, src)
        both(lambda L, a, i, s: a.index_reduce(0, i, s, r), _x(3, 2), idx, src)
    both(lambda L, a: L.nonzero_static(a, size=5, fill_value=-3), np.array([[0, 1, 2], [3, 0, 0]]))
    both(lambda L, a, s: L.as_strided_scatter(a, s, (2, 2), (1, 4), 1), m, _x(2, 2))
    both(lambda L, a, s: L.as_strided_scatter(a.T, s, (2, 2), (1, 4), 1), m, _x(2, 2))
    both(lambda L, a: L.constant_pad_nd(a, [2, -1, 0, 1], 3.0), m)
    both(lambda L, a: L.histogramdd(a, bins=[2, 3], range=[-1.0, 1.0, -2.0, 2.0]), m[:, :2].copy())
    both(lambda L, a, w: L.histogramdd(a, bins=3, weight=w, density=True), m[:, :2].copy(), v[:3].copy())
    both(lambda L, x, w, b: L.convolution(x, w, b, [2], [1], [2], False, [0], 1), _x(2, 2, 7), _x(3, 2, 2), _x(3))
    both(lambda L, x, w: L.convolution(x, w, None, [2, 1], [1, 0], [1], True, [1, 0], 2), _x(1, 4, 3, 3),
         _x(4, 1, 2, 2))
    assert lucid.broadcast_shapes((2, 1), (1, 3), 3) == tuple(torch.broadcast_shapes((2, 1), (1, 3), 3))


def test_matches_torch_legacy_linalg():
    torch = pytest.importorskip("torch")
    a = _x(2, 4, 3)
    sq = _x(3, 3) + 3 * np.eye(3)
    spd = sq @ sq.T
    b = _x(3, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for some in (True, False):
            lo, th = lucid.svd(lucid.tensor(a), some), torch.svd(torch.tensor(a), some)
            assert [tuple(t.shape) for t in lo] == [tuple(t.shape) for t in th]
            assert np.allclose(_np(lo.S), th.S.numpy())
            assert np.allclose(np.abs(_np(lo.V)), np.abs(th.V.numpy()))  # columns agree up to sign
            for p, q in zip(lucid.qr(lucid.tensor(a), some), torch.qr(torch.tensor(a), some)):
                assert np.allclose(_np(p), q.numpy())
        lo, th = lucid.lu(lucid.tensor(a), get_infos=True), torch.lu(torch.tensor(a), get_infos=True)
        for p, q in zip(lo, th):
            assert np.allclose(_np(p), q.numpy()) and str(p.dtype).split(".")[1] == str(q.dtype).split(".")[1]
        for p, q in zip(lucid.lu_unpack(lo[0], lo[1]), torch.lu_unpack(th[0], th[1])):
            assert np.allclose(_np(p), q.numpy())
        LU, piv = torch.linalg.lu_factor(torch.tensor(sq))
        assert np.allclose(_np(lucid.lu_solve(lucid.tensor(b), lucid.tensor(LU.numpy()), lucid.tensor(piv.numpy()))),
                           torch.lu_solve(torch.tensor(b), LU, piv).numpy())
        for up in (False, True):
            f = np.linalg.cholesky(spd)
            f = f.T if up else f
            assert np.allclose(_np(lucid.cholesky(lucid.tensor(spd), up)),
                               torch.cholesky(torch.tensor(spd), up).numpy())
            assert np.allclose(_np(lucid.cholesky_solve(lucid.tensor(b), lucid.tensor(f), up)),
                               torch.cholesky_solve(torch.tensor(b), torch.tensor(f), up).numpy())
            assert np.allclose(_np(lucid.cholesky_inverse(lucid.tensor(f), up)),
                               torch.cholesky_inverse(torch.tensor(f), up).numpy())
        for args in ((True, False, False), (False, True, True), (True, True, False)):
            lo = lucid.triangular_solve(lucid.tensor(b), lucid.tensor(sq), *args)
            th = torch.triangular_solve(torch.tensor(b), torch.tensor(sq), *args)
            assert all(np.allclose(_np(p), q.numpy()) for p, q in zip(lo, th))
    for m in (np.diag([-1.0, 2.0]), np.zeros((2, 2)), sq, np.diag([-1.0 + 0j, 2.0])):
        assert np.allclose(_np(lucid.logdet(lucid.tensor(m))), torch.logdet(torch.tensor(m)).numpy(), equal_nan=True)
    assert np.allclose(_np(lucid.pinverse(lucid.tensor(a), 0.3)), torch.pinverse(torch.tensor(a), 0.3).numpy())


def test_matches_torch_deprecation_warnings():
    torch = pytest.importorskip("torch")
    # the functions PyTorch 2.13 warns about (its own warning fires once per process, so only
    # ours is checked; the list is what torch warned for when this was written)
    m, spd = lucid.eye(3), lucid.eye(3) * 2
    calls = {"chain_matmul": lambda: lucid.chain_matmul(m, m), "cross": lambda: lucid.cross(m, m),
             "frobenius_norm": lambda: lucid.frobenius_norm(m, (0, 1)), "nuclear_norm": lambda: lucid.nuclear_norm(m),
             "qr": lambda: lucid.qr(m), "lu": lambda: lucid.lu(m), "cholesky": lambda: lucid.cholesky(spd),
             "triangular_solve": lambda: lucid.triangular_solve(m, m),
             "lu_solve": lambda: lucid.lu_solve(m, *lucid.linalg.lu_factor(m))}
    for name, call in calls.items():
        with pytest.warns(UserWarning, match="deprecated"):
            call()
        assert hasattr(torch, name)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning where PyTorch gives none
        lucid.svd(m), lucid.cholesky_solve(m, spd), lucid.cholesky_inverse(spd), lucid.lu_unpack(
            *lucid.linalg.lu_factor(m)), lucid.logdet(spd), lucid.pinverse(m), lucid.cross(m, m, dim=0)


@pytest.mark.parametrize("name", sorted(_np_values()))
def test_nn_spellings_match_torch(name):
    torch = pytest.importorskip("torch")
    x3, xl, tl = _x(2, 3, 5), *LOSS_INPUTS["bce"]
    a1, a2, y = LOSS_INPUTS["pair"]
    lp = np.log(RNG.dirichlet(np.ones(4), size=(6, 2)))
    W, w3 = _x(5, 3), _x(3)
    cases = {
        "adaptive_avg_pool1d": ((x3, 2), {}), "adaptive_max_pool1d": ((x3, 2), {}),
        "avg_pool1d": ((x3, 3, 2, 1, True, False), {}), "max_pool1d": ((x3, 2, 1, 1, 2, True), {}),
        "max_pool1d_with_indices": ((x3, 2), {}), "max_pool2d": ((_x(2, 4, 4, 4), 3, 2, 1, 1, True), {}),
        "max_pool3d": ((_x(1, 2, 4, 4, 4), 2), {}),
        "batch_norm": ((x3, w3, w3, w3, np.abs(w3) + 0.5, False, 0.1, 1e-5, False), {}),
        "instance_norm": ((x3, w3, w3, None, None, True, 0.1, 1e-5, False), {}),
        "layer_norm": ((x3, [3, 5], _x(3, 5)), {}), "group_norm": ((_x(2, 4, 3), 2, _x(4), _x(4)), {}),
        "rms_norm": ((x3, [5], _x(5)), {}), "bilinear": ((xl, tl, _x(2, 3, 3), _x(2)), {}),
        "binary_cross_entropy_with_logits": ((xl, tl, _x(3), np.abs(_x(3)), 1), {}),
        "celu": ((xl, 2.0), {}), "selu": ((xl,), {}), "rrelu": ((xl, 0.1, 0.2), {}),
        "conv_tbc": ((_x(5, 2, 3), _x(3, 3, 4), _x(4), 1), {}),
        "channel_shuffle": ((_x(1, 6, 2), 3), {}),
        "cosine_embedding_loss": ((a1, a2, y, 0.1, 2), {}),
        "ctc_loss": ((lp, np.array([[1, 2], [3, 3]]), [6, 5], [2, 2]), {}),
        "dropout": ((xl, 0.3, False), {}), "alpha_dropout": ((xl, 0.3, False), {}),
        "feature_dropout": ((x3, 0.0, True), {}), "feature_alpha_dropout": ((x3, 0.3, False), {}),
        "embedding": ((W, np.array([[0, 4], [2, 2]]), 2), {}),
        "embedding_bag": ((W, np.array([0, 2, 1, 3, 3, 4]), np.array([0, 2, 2]), False, 2, False, None, False, 3), {}),
        "hardshrink": ((xl, 1.0), {}), "hinge_embedding_loss": ((a1[:, 0], y, 0.5), {}),
        "kl_div": ((xl, tl, 1), {}), "margin_ranking_loss": ((a1[:, 0], a2[:, 0], y, 0.2, 1), {}),
        "pairwise_distance": ((a1, a2, 3.0, 0.1, True), {}), "pixel_shuffle": ((_x(2, 4, 2, 3), 2), {}),
        "pixel_unshuffle": ((_x(2, 1, 4, 2), 2), {}),
        "poisson_nll_loss": ((np.abs(xl), tl * 3, False, True, 1e-8, 0), {}),
        "prelu": ((x3, w3), {}), "threshold": ((xl, 0.1, 20.0), {}),
        "triplet_margin_loss": ((a1, a2, tl, 1.0, 1.0, 1e-6, True), {}),
    }
    args, kwargs = cases[name]
    lo = getattr(lucid, name)(*[lucid.tensor(a) if isinstance(a, np.ndarray) else a for a in args], **kwargs)
    th = getattr(torch, name)(*[torch.tensor(a) if isinstance(a, np.ndarray) else a for a in args], **kwargs)
    lo, th = (lo, th) if isinstance(lo, tuple) else ((lo,), (th,))
    assert len(lo) == len(th)
    for p, q in zip(lo, th):
        assert tuple(p.shape) == tuple(q.shape), name
        np.testing.assert_allclose(_np(p), q.detach().numpy(), rtol=1e-6, atol=1e-8, err_msg=name)


def test_tensor_pinverse_takes_rcond_as_torch():
    d = lucid.tensor([[2.0, 0.0], [0.0, 1e-3]])
    assert d.pinverse(1e-2).tolist() == [[0.5, 0.0], [0.0, 0.0]]  # rcond positional, as torch's method
    np.testing.assert_allclose(d.pinverse().numpy(), [[0.5, 0.0], [0.0, 1000.0]], rtol=1e-5)


def test_copysign_reads_the_sign_bit_of_nan_and_zero():
    got = lucid.copysign(lucid.tensor([1.0, 2.0, 3.0, 4.0]),
                         lucid.tensor([-float("nan"), float("nan"), -0.0, 0.0]))
    assert got.tolist() == [-1.0, 2.0, -3.0, 4.0]  # C's copysign, as PyTorch
