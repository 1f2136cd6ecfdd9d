"""Regressions from a differential sweep of the reductions, sorting, searching, scans and
statistics against PyTorch 2.13: options and shapes (``dim=()``, ``dtype=``, weights, empty
dims), exception types, and gradients routed through NaN selections.

Each expectation is written out (closed forms or NumPy); the PyTorch parity checks at the end
skip cleanly without torch.
"""
import numpy as np
import pytest

import lucid

NAN = float("nan")


def _grad(f, x):
    x = lucid.tensor(x, requires_grad=True)
    (g,) = lucid.autograd.grad(f(x), [x])
    return g.numpy()


# ------------------------------------------------------------------ dtype= keeps the dtype


# by name: other suites may wrap lucid's functions, so identity tests on them are unreliable
@pytest.mark.parametrize("name, ref, flags", [("sum", np.sum, [True, True]), ("prod", np.prod, [False, True]),
                                              ("nansum", np.sum, [True, True])])
def test_reduction_dtype_int32_and_bool_are_kept(name, ref, flags):
    op, x = getattr(lucid, name), lucid.tensor([[1, 2, 0], [3, 4, 5]])
    out = op(x, 1, dtype=lucid.int32)
    assert out.dtype == lucid.int32 and out.tolist() == ref(np.array([[1, 2, 0], [3, 4, 5]]), axis=1).tolist()
    got = op(x, 1, dtype=lucid.bool)  # a bool sum is an "any", a bool prod an "all"
    assert got.dtype == lucid.bool and got.tolist() == flags


def test_int32_sum_wraps_as_int32():
    big = lucid.tensor([2 ** 31 - 1, 1], dtype=lucid.int32)
    assert lucid.sum(big, dtype=lucid.int32).item() == -2 ** 31


@pytest.mark.parametrize("name, ref, flags", [("cumsum", np.cumsum, [True, True, True]),
                                              ("cumprod", np.cumprod, [True, False, False])])
def test_scan_dtype_int32_and_bool_are_kept(name, ref, flags):
    op, x = getattr(lucid, name), lucid.tensor([[1, 2, 0], [3, 1, 2]])
    out = op(x, 1, dtype=lucid.int32)
    assert out.dtype == lucid.int32 and out.tolist() == ref(x.numpy(), axis=1).tolist()
    assert op(x, 1, dtype=lucid.bool).dtype == lucid.bool
    assert op(lucid.tensor([True, False, True]), 0, dtype=lucid.bool).tolist() == flags


# --------------------------------------------------------------- dim=() reduces every dim


X23 = np.array([[1.0, -2.0, 0.5], [3.0, 0.25, -1.0]])


@pytest.mark.parametrize("op, ref", [
    (lambda x, **k: lucid.sum(x, (), **k), lambda a, kd: np.sum(a, keepdims=kd)),
    (lambda x, **k: lucid.mean(x, [], **k), lambda a, kd: np.mean(a, keepdims=kd)),
    (lambda x, **k: lucid.nansum(x, (), **k), lambda a, kd: np.sum(a, keepdims=kd)),
    (lambda x, **k: lucid.nanmean(x, (), **k), lambda a, kd: np.mean(a, keepdims=kd)),
    (lambda x, **k: lucid.var(x, (), **k), lambda a, kd: np.var(a, ddof=1, keepdims=kd)),
    (lambda x, **k: lucid.std(x, (), **k), lambda a, kd: np.std(a, ddof=1, keepdims=kd)),
    (lambda x, **k: lucid.norm(x, 2, (), **k), lambda a, kd: np.sqrt(np.sum(a * a, keepdims=kd))),
    (lambda x, **k: lucid.logsumexp(x, (), **k), lambda a, kd: np.log(np.sum(np.exp(a), keepdims=kd))),
    (lambda x, **k: lucid.var_mean(x, (), **k)[0], lambda a, kd: np.var(a, ddof=1, keepdims=kd)),
    (lambda x, **k: lucid.std_mean(x, (), **k)[1], lambda a, kd: np.mean(a, keepdims=kd)),
])
@pytest.mark.parametrize("keepdim", [False, True])
def test_empty_dim_tuple_reduces_everything(op, ref, keepdim):
    out = op(lucid.tensor(X23), keepdim=keepdim)
    want = ref(X23, keepdim)
    assert tuple(out.shape) == want.shape
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)


def test_empty_dim_tuple_count_nonzero_and_the_gradient():
    assert lucid.count_nonzero(lucid.tensor([[0, 1], [2, 3]]), ()).item() == 3
    np.testing.assert_allclose(_grad(lambda x: lucid.mean(x, ()), X23), np.full((2, 3), 1 / 6))
    # any/all read () as "reduce nothing", as PyTorch does: unchanged
    assert lucid.any(lucid.tensor([[0, 1]]), ()).shape == (1, 2)


# ------------------------------------------------------------------ empty reduced dims


@pytest.mark.parametrize("call", [
    lambda: lucid.amax(lucid.zeros(2, 0), 1),
    lambda: lucid.amin(lucid.zeros(0)),
    lambda: lucid.argmax(lucid.zeros(2, 0), 1),
    lambda: lucid.argmin(lucid.zeros(0)),
    lambda: lucid.argmax(lucid.zeros(2, 0)),
    lambda: lucid.max(lucid.zeros(2, 0), 1),
    lambda: lucid.max(lucid.zeros(0)),
    lambda: lucid.aminmax(lucid.zeros(2, 0), dim=1),
    lambda: lucid.aminmax(lucid.zeros(0)),
    lambda: lucid.kthvalue(lucid.zeros(2, 0), 1),
    lambda: lucid.median(lucid.zeros(2, 0), 1),
    lambda: lucid.mode(lucid.zeros(2, 0), 1),
    lambda: lucid.norm(lucid.zeros(2, 0), -1),
    lambda: lucid.norm(lucid.zeros(2, 0), -0.5, 1),
    lambda: lucid.norm(lucid.zeros(2, 0), float("inf"), 1),
])
def test_reducing_an_empty_dim_raises_index_and_runtime_error(call):
    # PyTorch: IndexError naming the empty dim, RuntimeError for the whole tensor; both here
    with pytest.raises(IndexError):
        call()
    with pytest.raises(RuntimeError):
        call()


def test_only_an_empty_reduced_dim_raises():
    with pytest.raises(IndexError):
        lucid.argmax(lucid.zeros(2, 0), 1)
    assert lucid.argmax(lucid.zeros(2, 0), 0).shape == (0,)
    assert lucid.aminmax(lucid.zeros(2, 0), dim=0).min.shape == (0,)
    assert lucid.kthvalue(lucid.zeros(3, 0), 1, dim=0).values.shape == (0,)
    assert lucid.norm(lucid.zeros(2, 0), -0.5, 0).shape == (0,)
    with pytest.raises(RuntimeError, match="kthvalue: k \\(5\\)"):  # k out of range stays RuntimeError
        lucid.kthvalue(lucid.zeros(3), 5)


# ------------------------------------------------------------------ argument errors


def test_var_with_both_unbiased_and_correction_is_a_type_error():
    for op in (lucid.var, lucid.std, lucid.var_mean, lucid.std_mean):
        with pytest.raises(TypeError, match="pass only one of 'unbiased' and 'correction'"):
            op(lucid.tensor([1.0, 2.0]), 0, unbiased=True, correction=1)


def test_nanmean_refuses_an_integer_dtype():
    with pytest.raises(RuntimeError, match="nanmean: could not infer output dtype"):
        lucid.nanmean(lucid.tensor([1.0, NAN]), dtype=lucid.int64)


@pytest.mark.parametrize("call, exc, words", [
    (lambda: lucid.bincount(lucid.tensor([1.0, 2.0])), NotImplementedError, "bincount: expected a 1-d integer"),
    (lambda: lucid.bincount(lucid.tensor([True])), NotImplementedError, "bincount: expected a 1-d integer"),
    (lambda: lucid.bincount(lucid.tensor([1, 2]), minlength=-1), RuntimeError, "bincount: minlength should be >= 0"),
    (lambda: lucid.bincount(lucid.tensor([1, 2]), lucid.ones(3)), RuntimeError, "bincount: weights should be 1-d"),
    (lambda: lucid.histc(lucid.tensor([1, 2])), NotImplementedError, "histc: expected a floating point"),
    (lambda: lucid.logcumsumexp(lucid.tensor([1, 2]), 0), NotImplementedError, "logcumsumexp: not implemented"),
    (lambda: lucid.quantile(lucid.zeros(2, 0), 0.5, dim=0), RuntimeError, "quantile: input tensor must be non-empty"),
    (lambda: lucid.cov(lucid.zeros(2, 3), fweights=lucid.ones(3)), RuntimeError, "cov: expected fweights to have an"),
])
def test_errors_have_pytorchs_type(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_cov_refuses_negative_weights_on_the_cpu():
    x = lucid.zeros(2, 3, device="cpu")
    with pytest.raises(RuntimeError, match="cov: fweights cannot be negative"):
        lucid.cov(x, fweights=lucid.tensor([1, -1, 2], device="cpu"))
    with pytest.raises(RuntimeError, match="cov: aweights cannot be negative"):
        lucid.cov(x, aweights=lucid.tensor([1.0, -1.0, 2.0], device="cpu"))


# ------------------------------------------------------------------ NaN selections


def test_median_with_a_nan_gives_the_nans_gradient():
    x = np.array([[2.0, NAN, 1.0, NAN], [3.0, 1.0, 2.0, 0.0]])
    v, i = lucid.median(lucid.tensor(x), 1)
    assert np.isnan(v[0].item()) and i.tolist() == [1, 1]
    g = _grad(lambda t: lucid.median(t, 1).values.sum(), x)
    np.testing.assert_array_equal(g, [[0, 1, 0, 0], [0, 1, 0, 0]])  # the first NaN; the lower median 1.0
    np.testing.assert_array_equal(_grad(lambda t: lucid.median(t, 0).values, np.array(NAN)), 1.0)


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_with_a_nan_gives_the_last_nans_gradient(interpolation):
    # PyTorch's rank for a slice with a NaN is the last sorted position: the last NaN
    x = np.array([[NAN, 1.0, NAN, 0.0], [3.0, 1.0, 2.0, 0.0]])
    q = lambda t: lucid.quantile(t, 0.4, dim=1, interpolation=interpolation)  # noqa: E731
    out = q(lucid.tensor(x))
    assert np.isnan(out[0].item()) and not np.isnan(out[1].item())
    g = _grad(lambda t: q(t).sum(), x)
    np.testing.assert_array_equal(g[0], [0, 0, 1, 0])
    np.testing.assert_allclose(g[1].sum(), 1.0)
    # nanquantile skips them: position 0.25 * 1 between the sorted non-NaN values 1 and 3
    g = _grad(lambda t: lucid.nanquantile(t, 0.25, interpolation=interpolation), np.array([NAN, 1.0, 3.0, NAN]))
    assert g[0] == g[3] == 0 and g.sum() == pytest.approx(1.0)


def test_quantile_reads_a_python_q_in_the_inputs_precision():
    # q=0.3 was made a float32 tensor first: 0.30000001192..., off in the 8th digit for float64
    x = np.array([3.0, 1.0, 2.0, 0.0, 7.0])
    for q in (0.3, [0.1, 0.7]):
        np.testing.assert_allclose(lucid.quantile(lucid.tensor(x), q).numpy(), np.quantile(x, q), rtol=1e-15)
    np.testing.assert_allclose(lucid.nanquantile(lucid.tensor(x), 0.3).item(), np.quantile(x, 0.3), rtol=1e-15)


# ------------------------------------------------------------------ searching


def test_searchsorted_rows_with_no_values():
    seq = lucid.tensor([[1.0, 2.0, 3.0], [0.0, 5.0, 6.0]])
    out = lucid.searchsorted(seq, lucid.zeros(2, 0))
    assert out.shape == (2, 0) and out.dtype == lucid.int64
    assert lucid.searchsorted(lucid.zeros(0, 3), lucid.zeros(0, 2)).shape == (0, 2)


# ------------------------------------------------------------------ covariance


def test_cov_with_weights_on_complex_input():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5)) + 1j * rng.normal(size=(2, 5))
    f, a = np.array([1, 2, 1, 3, 1]), rng.uniform(0.5, 2, 5)
    got = lucid.cov(lucid.tensor(x), fweights=lucid.tensor(f), aweights=lucid.tensor(a))
    assert got.dtype == lucid.complex128
    np.testing.assert_allclose(got.numpy(), np.cov(x, fweights=f, aweights=a), rtol=1e-12)


def test_cov_float64_aweights_promote_a_float32_input():
    x = lucid.tensor([[0.0, 1.0, 3.0], [1.0, 1.0, 0.0]], dtype=lucid.float32)
    a = np.array([1.0, 0.5, 2.0])
    got = lucid.cov(x, aweights=lucid.tensor(a))
    assert got.dtype == lucid.float64
    np.testing.assert_allclose(got.numpy(), np.cov(x.numpy().astype(np.float64), aweights=a), rtol=1e-6)
    assert lucid.cov(x, fweights=lucid.tensor([1, 2, 1])).dtype == lucid.float32


def test_cov_and_corrcoef_of_one_variable_are_0d():
    x = np.array([[0.0, 1.0, 3.0, 2.0]])
    got = lucid.cov(lucid.tensor(x))
    assert got.shape == () and got.item() == pytest.approx(np.var(x, ddof=1))
    assert lucid.corrcoef(lucid.tensor(x)).shape == () and lucid.corrcoef(lucid.tensor(x)).item() == 1.0
    assert lucid.cov(lucid.tensor(np.ones((3, 1))), correction=0).shape == (3, 3)


# ------------------------------------------------------------------ PyTorch parity


def test_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    x = np.array([[1.0, NAN, 2.0, NAN], [3.0, 1.0, 2.0, 0.0]])
    for f in (lambda M, t: M.median(t, 1).values.sum(),
              lambda M, t: M.quantile(t, 0.3, dim=1).sum(),
              lambda M, t: M.quantile(t, 0.5, dim=1, interpolation="midpoint").sum()):
        tt = torch.tensor(x, requires_grad=True)
        (tg,) = torch.autograd.grad(f(torch, tt), [tt])
        np.testing.assert_array_equal(_grad(lambda t: f(lucid, t), x), tg.numpy())
    xi = np.array([[1, 2, 0], [3, 4, 5]])
    for f in (lambda M, t: M.sum(t, 1, dtype=M.int32), lambda M, t: M.cumprod(t, 0, dtype=M.int32),
              lambda M, t: M.sum(t.double(), ()), lambda M, t: M.cov(t.double(), aweights=M.tensor([1.0, 2.0, 0.5]))):
        a, b = f(torch, torch.tensor(xi)), f(lucid, lucid.tensor(xi))
        assert str(a.dtype).split(".")[-1] == str(b.dtype).split(".")[-1] and a.shape == tuple(b.shape)
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-12)
