"""Op differences found by the OpInfo differential sweep (scripts/torch_diff.py), fixed to PyTorch 2.13.

sum_to_size(()) sums (int64 for bool/int); take_along_dim wraps indices along ``dim``;
tensordot broadcasts a size-1 contracted dim; linalg.tensorsolve checks element counts only;
empty_permuted of a 0-d size; native_batch_norm / native_layer_norm statistics are
non-differentiable; var of an empty reduction has a zero tangent (std's stays NaN); histogramdd
keeps refusing edges that go down (deliberate); bool/integer einsum dtypes (NOTE [Integer einsum]); trace of
bool; scalar_tensor wraps negative ints into unsigned dtypes; scatter_reduce amax of uint8;
addbmm keeps an integer dtype; integer trapezoid sample points; max pooling of integers with padding.
Expected values are written out; the PyTorch comparisons skip without torch.
"""
import warnings

import numpy as np
import pytest

import lucid
from lucid.func import jvp, vmap

nan = float("nan")


def _np(t):
    return np.asarray(t.tolist())


def _jvp(f, x, t):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return jvp(f, (x,), (t,))


# ----------------------------------------------------------------- sum_to_size


@pytest.mark.parametrize("dtype", [lucid.bool, lucid.int32, lucid.uint8])
def test_sum_to_size_of_a_0d_tensor_to_0d_is_a_sum(dtype):
    x = lucid.tensor(1, dtype=dtype)
    out = x.sum_to_size(())
    assert out.dtype == lucid.int64 and out.item() == 1
    assert lucid.ones(2, 3, dtype=dtype).sum_to_size(()).item() == 6
    same = lucid.ones(2, 3, dtype=dtype)
    assert same.sum_to_size(2, 3) is same  # a non-empty size equal to the shape is no sum


def test_sum_to_size_to_0d_stays_differentiable():
    x = lucid.tensor(2.0, dtype=lucid.float64, requires_grad=True)
    (g,) = lucid.autograd.grad(x.sum_to_size(()) * 3.0, [x])
    assert g.item() == 3.0


# ----------------------------------------------------------------- take_along_dim


def test_take_along_dim_wraps_indices_modulo_the_dim_size():
    x = lucid.arange(15.0).reshape(3, 5)
    idx = lucid.tensor([[-1, 0], [1, -2], [-6, 7]])
    # -1 -> 4, -2 -> 3, -6 -> 4, 7 -> 2 (PyTorch 2.13 takes every index modulo the size)
    assert lucid.take_along_dim(x, idx, 1).tolist() == [[4.0, 0.0], [6.0, 8.0], [14.0, 12.0]]
    assert lucid.take_along_dim(x, lucid.tensor([[-1], [0]]), 0).tolist() == [[10.0, 11.0, 12.0, 13.0, 14.0],
                                                                            [0.0, 1.0, 2.0, 3.0, 4.0]]


def test_take_along_dim_flat_form_and_bad_dtypes_still_refuse():
    x = lucid.arange(6.0).reshape(2, 3)
    with pytest.raises(RuntimeError, match="out of bounds"):
        lucid.take_along_dim(x, lucid.tensor([-1]))
    for bad in (lucid.tensor([[True]]), lucid.tensor([[1.0]])):
        with pytest.raises(RuntimeError, match="integer index"):
            lucid.take_along_dim(x, bad, 1)


def test_take_along_dim_negative_indices_grad_and_vmap():
    x = lucid.tensor(np.arange(8.0).reshape(2, 4), dtype=lucid.float64, requires_grad=True)
    idx = lucid.tensor([[-1, -1], [0, -4]])
    (g,) = lucid.autograd.grad(lucid.take_along_dim(x, idx, 1).sum(), [x])
    assert g.tolist() == [[0.0, 0.0, 0.0, 2.0], [2.0, 0.0, 0.0, 0.0]]
    xs = lucid.tensor(np.arange(24.0).reshape(3, 2, 4))
    got = vmap(lambda v: lucid.take_along_dim(v, idx, 1))(xs)
    want = np.stack([np.take_along_axis(_np(v), np.mod(_np(idx), 4), 1) for v in xs])
    np.testing.assert_array_equal(_np(got), want)


# ----------------------------------------------------------------- tensordot / tensorsolve


def test_tensordot_broadcasts_a_size_one_contracted_dim():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((1, 1, 1)), rng.standard_normal((2, 1, 2))
    out = lucid.tensordot(lucid.tensor(a), lucid.tensor(b), dims=([0, 1], [2, 0]))
    want = np.einsum("kl,lk->", np.broadcast_to(a[:, :, 0], (2, 2)), b[:, 0, :]) * np.ones((1, 1))
    assert tuple(out.shape) == (1, 1)
    np.testing.assert_allclose(_np(out), want)
    a2, b2 = rng.standard_normal((2, 1)), rng.standard_normal((3, 2))
    x = lucid.tensor(a2, requires_grad=True)
    out = lucid.tensordot(x, lucid.tensor(b2), dims=1)
    np.testing.assert_allclose(_np(out), a2 @ b2.sum(0, keepdims=True))
    (g,) = lucid.autograd.grad(out.sum(), [x])
    np.testing.assert_allclose(_np(g), np.full((2, 1), b2.sum()))
    with pytest.raises(RuntimeError, match="contracted dimensions differ"):
        lucid.tensordot(lucid.ones(2, 3), lucid.ones(4, 3), dims=([0], [0]))


def test_tensorsolve_moves_dims_then_checks_element_counts():
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 3))
    X = lucid.linalg.tensorsolve(lucid.tensor(A), lucid.tensor(B), dims=(0, 2))
    # dims (0, 2) go to the end: A' has shape (3, 2, 6), read as a 6 x 6 matrix on B.flatten()
    Am = np.moveaxis(A, (0, 2), (1, 2)).reshape(6, 6)
    assert tuple(X.shape) == (6,)
    np.testing.assert_allclose(_np(X), np.linalg.solve(Am, B.reshape(6)))
    A2, B2 = rng.standard_normal((2, 3, 3, 2)), rng.standard_normal((3, 2))
    X2 = lucid.linalg.tensorsolve(lucid.tensor(A2), lucid.tensor(B2))
    np.testing.assert_allclose(_np(X2), np.linalg.tensorsolve(A2, B2))
    with pytest.raises(RuntimeError, match="tensorsolve"):
        lucid.linalg.tensorsolve(lucid.ones(2, 3, 3), lucid.ones(2, 3))


def test_tensorsolve_with_dims_matches_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    A, B = rng.standard_normal((2, 3, 6)), rng.standard_normal((2, 3))
    want = torch.linalg.tensorsolve(torch.tensor(A), torch.tensor(B), dims=(0, 2)).numpy()
    np.testing.assert_allclose(_np(lucid.linalg.tensorsolve(lucid.tensor(A), lucid.tensor(B), dims=(0, 2))), want)


# ----------------------------------------------------------------- empty_permuted


def test_empty_permuted_of_a_0d_size():
    out = lucid.empty_permuted((), (), dtype=lucid.int32)
    assert tuple(out.shape) == () and out.dtype == lucid.int32
    assert lucid.empty_permuted([], [], requires_grad=True).requires_grad
    assert lucid.empty_permuted((2, 3, 4), (0, 2, 1), device="cpu").stride() == (12, 1, 3)


# ----------------------------------------------------------------- batch / layer norm statistics


def _bn_inputs():
    rng = np.random.default_rng(3)
    return (lucid.tensor(rng.standard_normal((4, 3, 2))), lucid.tensor(rng.standard_normal((4, 3, 2))))


def test_native_batch_norm_statistics_have_no_tangent_or_gradient():
    x, t = _bn_inputs()
    (out, mean, invstd), (t_out, t_mean, t_invstd) = _jvp(
        lambda v: lucid.native_batch_norm(v, None, None, None, None, True, 0.5, 0.6), x, t)
    assert _np(t_mean).tolist() == [0.0] * 3 and _np(t_invstd).tolist() == [0.0] * 3
    np.testing.assert_allclose(_np(mean), _np(x).mean((0, 2)))
    xn, tn = _np(x), _np(t)
    mu, var = xn.mean((0, 2), keepdims=True), xn.var((0, 2), keepdims=True)
    dmu = tn.mean((0, 2), keepdims=True)
    dvar = (2 * (xn - mu) * (tn - dmu)).mean((0, 2), keepdims=True)
    want = (tn - dmu) / np.sqrt(var + 0.6) - 0.5 * (xn - mu) * dvar / (var + 0.6) ** 1.5
    np.testing.assert_allclose(_np(t_out), want, rtol=1e-5, atol=1e-6)
    xr = x.detach().requires_grad_()
    outs = lucid.native_batch_norm(xr, None, None, None, None, True, 0.5, 0.6)
    assert [o.requires_grad for o in outs] == [True, False, False]
    rm, rv = lucid.zeros(3), lucid.ones(3)
    outs = lucid.native_batch_norm(xr, None, None, rm, rv, True, 0.5, 0.6)
    assert [o.requires_grad for o in outs] == [True, False, False]
    np.testing.assert_allclose(_np(rm), 0.5 * _np(x).mean((0, 2)), rtol=1e-6)


def test_native_layer_norm_statistics_are_non_differentiable():
    x, t = _bn_inputs()
    outs, tans = _jvp(lambda v: lucid.native_layer_norm(v, (2,), None, None, 1e-5), x, t)
    assert not _np(tans[1]).any() and not _np(tans[2]).any()
    assert _np(tans[0]).any()
    xr = x.detach().requires_grad_()
    assert [o.requires_grad for o in lucid.native_layer_norm(xr, (2,), None, None, 1e-5)] == [True, False, False]


def test_native_batch_norm_jvp_matches_torch():
    torch = pytest.importorskip("torch")
    x, t = _bn_inputs()
    w = np.array([1.0, -2.0, 0.5])
    lo, lt = jvp(lambda v, ww: lucid.native_batch_norm(v, ww, None, None, None, True, 0.1, 1e-5),
                 (x, lucid.tensor(w)), (t, lucid.tensor(w)))
    to, tt = torch.func.jvp(lambda v, ww: torch.native_batch_norm(v, ww, None, None, None, True, 0.1, 1e-5),
                            (torch.tensor(_np(x)), torch.tensor(w)), (torch.tensor(_np(t)), torch.tensor(w)))
    for a, b in zip(lt, tt):
        np.testing.assert_allclose(_np(a), b.numpy(), rtol=1e-5, atol=1e-7)


# ----------------------------------------------------------------- var of nothing


@pytest.mark.parametrize("shape,kw", [((0,), dict(correction=0)), ((0,), dict(correction=1)),
                                      ((0, 5), dict(dim=0)), ((0, 5), dict(dim=0, correction=0))])
def test_var_of_an_empty_reduction_is_nan_with_zero_tangent(shape, kw):
    x, t = lucid.zeros(shape, dtype=lucid.float64), lucid.ones(shape, dtype=lucid.float64)
    val, tan = _jvp(lambda v: lucid.var(v, **kw), x, t)
    assert np.isnan(_np(val)).all() and (_np(tan) == 0).all()
    (v2, m2), (tv, tm) = _jvp(lambda v: lucid.var_mean(v, **kw), x, t)
    assert np.isnan(_np(v2)).all() and (_np(tv) == 0).all() and np.isnan(_np(tm)).all()
    sval, stan = _jvp(lambda v: lucid.std(v, **kw), x, t)  # d sqrt(v) = dv / (2 sqrt(v)): 0 / NaN
    assert np.isnan(_np(sval)).all() and np.isnan(_np(stan)).all()


def test_var_with_data_keeps_its_tangent_and_std_its_zero_subgradient():
    x = lucid.tensor([1.0, 2.0, 4.0], dtype=lucid.float64)
    t = lucid.tensor([1.0, 0.0, 0.0], dtype=lucid.float64)
    _, tan = _jvp(lambda v: lucid.var(v), x, t)
    # d var = 2 / (n - 1) * sum((x - mean) * t) = (1 - 7/3)
    np.testing.assert_allclose(tan.item(), 1.0 - 7.0 / 3.0)
    flat = lucid.ones(3, dtype=lucid.float64, requires_grad=True)
    (g,) = lucid.autograd.grad(lucid.std(flat), [flat])
    assert g.tolist() == [0.0, 0.0, 0.0]


# ----------------------------------------------------------------- histogramdd


def test_histogramdd_keeps_refusing_edges_that_go_down():
    # PyTorch does not check: edges ending below their start give an all-zero histogram (no
    # point has first <= x <= last), edges going down and up inside give binary-search counts over
    # an unsorted list. Its docs ask for increasing edges, so Lucid refuses both (a deliberate
    # difference: a silent empty histogram would hide the caller's bug).
    pts = lucid.tensor([[0.5, 1.0], [3.0, 1.0]], dtype=lucid.float64, device="cpu")
    other = lucid.tensor([0.0, 1.5, 3.0], dtype=lucid.float64, device="cpu")
    for down in ([3.0, -3.0], [0.0, 5.0, 2.0, 10.0]):
        with pytest.raises(RuntimeError, match="dimension 0 must be non-decreasing"):
            lucid.histogramdd(pts, [lucid.tensor(down, dtype=lucid.float64, device="cpu"), other])
    h = lucid.histogramdd(pts, [lucid.tensor([0.0, 2.0, 2.0, 10.0], dtype=lucid.float64, device="cpu"), other])
    assert _np(h.hist).tolist() == [[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]


# ----------------------------------------------------------------- einsum / trace dtypes


@pytest.mark.parametrize("eq,n,want", [("ij->", 1, "int64"), ("ij->i", 1, "int64"), ("ii->", 1, "int64"),
                                       ("ij->ji", 1, "bool"), ("ii->i", 1, "bool"), ("ij,ij->ij", 2, "bool"),
                                       ("i,j->", 2, "int64"), ("ij,j->j", 2, "int64"),
                                       ("i,j,k->ijk", 3, "bool")])
def test_bool_einsum_dtypes(eq, n, want):
    m = lucid.tensor([[True, False], [True, True]])
    ins = eq.split("->")[0].split(",")
    ops = [m if len(s) == 2 else m[1] for s in ins][:n]
    out = lucid.einsum(eq, *ops)
    assert str(out.dtype) == f"lucid.{want}"
    np.testing.assert_array_equal(_np(out), np.einsum(eq, *[_np(o).astype(np.int64) for o in ops]).astype(want))


@pytest.mark.parametrize("eq", ["ij,jk->ik", "ij,j->i", "i,i->", "i,i,i->"])
def test_bool_einsum_contractions_are_refused(eq):
    m = lucid.tensor([[True, False], [True, True]])
    ops = [m if len(s) == 2 else m[0] for s in eq.split("->")[0].split(",")]
    with pytest.raises(NotImplementedError, match="einsum: contracting bool"):
        lucid.einsum(eq, *ops)


@pytest.mark.parametrize("dtype", [lucid.int32, lucid.uint8, lucid.int8])
def test_integer_einsum_sums_widen_and_products_keep_the_dtype(dtype):
    a = lucid.tensor([[1, 2], [3, 4]], dtype=dtype)
    v = lucid.tensor([1, 2], dtype=dtype)
    for eq, ops, total in [("ij->", (a,), 10), ("ij,jk->", (a, a), 54)]:
        out = lucid.einsum(eq, *ops)
        assert out.dtype == lucid.int64 and out.item() == total
    for eq, ops, want in [("ij,jk->ik", (a, a), [[7, 10], [15, 22]]), ("ij,j->i", (a, v), [5, 11]),
                          ("ij->ji", (a,), [[1, 3], [2, 4]])]:
        out = lucid.einsum(eq, *ops)
        assert out.dtype == dtype and out.tolist() == want
    assert lucid.einsum("ij,j->j", a, v).tolist() == [4, 12]


def test_float_einsum_unchanged_and_trace_refuses_bool():
    a = lucid.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert lucid.einsum("ij->", a).dtype == lucid.float32 and lucid.einsum("ij->", a).item() == 10.0
    with pytest.raises(NotImplementedError, match="trace"):
        lucid.trace(lucid.ones(2, 2, dtype=lucid.bool))
    assert lucid.trace(lucid.ones(2, 2, dtype=lucid.int32)).dtype == lucid.int64


def test_einsum_dtypes_match_torch():
    torch = pytest.importorskip("torch")
    b = np.array([[True, False], [True, True]])
    i = np.array([[1, 2], [3, 4]], dtype=np.int32)
    for eq, ops in [("ij->", [b]), ("ii->i", [b]), ("i,j->i", [b[0], b[1]]), ("ij,j->j", [i, i[0]]),
                    ("ij,jk->", [i, i]), ("ij,jk->ik", [i, i]), ("ij->", [i.astype(np.uint8)])]:
        want = torch.einsum(eq, *[torch.tensor(o) for o in ops])
        got = lucid.einsum(eq, *[lucid.tensor(o) for o in ops])
        assert str(got.dtype).split(".")[1] == str(want.dtype).split(".")[1]
        assert got.tolist() == want.tolist()


# ----------------------------------------------------------------- smaller integer fixes


def test_scalar_tensor_wraps_negative_ints_into_unsigned_dtypes():
    assert lucid.scalar_tensor(-5, dtype=lucid.uint8).item() == 251
    assert lucid.scalar_tensor(-255, dtype=lucid.uint8).item() == 1
    assert lucid.scalar_tensor(np.int64(-3), dtype=lucid.uint8).item() == 253
    assert lucid.scalar_tensor(2.7, dtype=lucid.int8).item() == 2
    for bad, dtype in [(-256, lucid.uint8), (256, lucid.uint8), (-0.5, lucid.uint8), (-128.5, lucid.int8),
                       (-129, lucid.int8)]:
        with pytest.raises(RuntimeError, match="without overflow"):
            lucid.scalar_tensor(bad, dtype=dtype)


def test_scatter_reduce_amax_of_uint8_without_self():
    x = lucid.full((3,), 9, dtype=lucid.uint8)
    idx = lucid.tensor([0, 0, 1])
    src = lucid.tensor([0, 0, 4], dtype=lucid.uint8)
    assert x.scatter_reduce(0, idx, src, "amax", include_self=False).tolist() == [0, 4, 9]
    assert x.scatter_reduce(0, idx, src, "amin", include_self=False).tolist() == [0, 4, 9]
    s8 = lucid.tensor([-128, -128, 5], dtype=lucid.int8)
    assert lucid.full((3,), 1, dtype=lucid.int8).scatter_reduce(0, idx, s8, "amax", include_self=False).tolist() \
        == [-128, 5, 1]


def test_addbmm_keeps_an_integer_dtype():
    inp = lucid.ones(2, 3, dtype=lucid.int32)
    b1, b2 = lucid.ones(4, 2, 5, dtype=lucid.int32), lucid.ones(4, 5, 3, dtype=lucid.int32)
    out = lucid.addbmm(inp, b1, b2)
    assert out.dtype == lucid.int32 and out.tolist() == [[21] * 3] * 2
    assert lucid.addbmm(inp.to(lucid.int8), b1.to(lucid.int8), b2.to(lucid.int8)).dtype == lucid.int8


def test_trapezoid_with_integer_sample_points_is_exact():
    y = lucid.tensor([[250, 10, 200], [100, 255, 3]], dtype=lucid.uint8)
    x = lucid.tensor([[1, 200, 3], [0, 250, 5]], dtype=lucid.uint8)
    want = np.trapezoid(_np(y).astype(float), _np(x).astype(float)) if hasattr(np, "trapezoid") else \
        np.trapz(_np(y).astype(float), _np(x).astype(float))
    np.testing.assert_allclose(_np(lucid.trapezoid(y, x)), want)
    np.testing.assert_allclose(_np(lucid.cumulative_trapezoid(y, x))[:, -1], want)
    assert lucid.trapezoid(lucid.tensor([1.0, 2.0, 3.0], dtype=lucid.float64), lucid.tensor([0, 1, 3])).item() == 6.5


@pytest.mark.parametrize("dtype", [lucid.int8, lucid.uint8, lucid.int32, lucid.bool])
def test_max_pool_of_integers_with_padding(dtype):
    x = np.array([[[[-8, 6, 9, 0, 0, 5], [5, 7, 6, 5, 1, -5], [2, -1, 8, -4, 0, -6]]]])
    if dtype == lucid.uint8:
        x = x + 8
    if dtype == lucid.bool:
        x = x > 4
    vals, idx = lucid.nn.functional.max_pool2d(lucid.tensor(x, dtype=dtype), 3, 2, 1, ceil_mode=True,
                                               return_indices=True)
    # a plain loop over the padded windows (padding never wins; first maximum on ties)
    want_v, want_i = np.zeros((2, 4), dtype=x.dtype), np.zeros((2, 4), dtype=np.int64)
    for r in range(2):
        for c in range(4):
            cells = [(i, j) for i in range(2 * r - 1, 2 * r + 2) for j in range(2 * c - 1, 2 * c + 2)
                     if 0 <= i < 3 and 0 <= j < 6]
            best = max(cells, key=lambda p: (x[0, 0][p], -cells.index(p)))
            want_v[r, c], want_i[r, c] = x[0, 0][best], best[0] * 6 + best[1]
    np.testing.assert_array_equal(_np(vals)[0, 0], want_v)
    np.testing.assert_array_equal(_np(idx)[0, 0], want_i)
    lows = lucid.tensor(np.full((1, 1, 2, 2), np.iinfo(np.int8).min), dtype=lucid.int8)
    v2, i2 = lucid.nn.functional.max_pool2d(lows, 2, 1, 1, return_indices=True)
    assert (_np(v2) == -128).all() and _np(i2)[0, 0].tolist() == [[0, 0, 1], [0, 0, 1], [2, 2, 3]]
