"""lucid.masked's functions: dtype rules, errors, gradients at masked-out elements, MaskedTensor
inputs, and (when PyTorch is installed) a parity sweep against torch.masked.

Values on float samples are checked by the op database (tests/ops/db_masked.py).
"""
import math
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.masked as M

X = [[-3.0, -2.0, -1.0, 4.0], [0.0, 1.0, 2.0, 3.0], [5.0, -6.0, 7.0, 0.5]]
MASK = [[True, False, True, True], [False, False, False, False], [True, True, False, True]]


def _x(dtype=lucid.float64, requires_grad=False):
    return lucid.tensor(X, dtype=dtype, requires_grad=requires_grad)


def _m():
    return lucid.tensor(MASK)


def test_import_lucid_does_not_load_the_package():
    code = "import sys, lucid; assert 'lucid.masked' not in sys.modules; import lucid.masked; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_all_of_torch_masked_functions_exist():
    names = ["sum", "prod", "cumsum", "cumprod", "amax", "amin", "argmax", "argmin", "mean", "median", "logsumexp",
             "norm", "var", "std", "softmax", "log_softmax", "softmin", "normalize", "logaddexp"]
    assert all(callable(getattr(M, n)) for n in names)


# ------------------------------------------------------------------ values and dtypes

def test_fully_masked_rows_give_the_identity_or_nan():
    x, m = _x(), _m()
    ma = np.ma.masked_array(np.array(X), ~np.array(MASK))  # NumPy's masked arrays as the reference
    kept = [ma[i].compressed() for i in range(3)]
    np.testing.assert_array_equal(M.sum(x, 1, mask=m).numpy(), ma.sum(1).filled(0.0))
    np.testing.assert_array_equal(M.prod(x, 1, mask=m).numpy(), ma.prod(1).filled(1.0))
    np.testing.assert_array_equal(M.amax(x, 1, mask=m).numpy(), ma.max(1).filled(-math.inf))
    np.testing.assert_array_equal(M.amin(x, 1, mask=m).numpy(), ma.min(1).filled(math.inf))
    np.testing.assert_allclose(M.mean(x, 1, mask=m).numpy(), ma.mean(1).filled(np.nan))
    np.testing.assert_allclose(M.var(x, 1, mask=m).numpy(), ma.var(1, ddof=1).filled(np.nan))
    np.testing.assert_allclose(M.median(x, 1, mask=m).numpy(), [np.sort(k)[(len(k) - 1) // 2] if len(k) else np.nan
                                                                for k in kept])
    np.testing.assert_allclose(M.logsumexp(x, 1, mask=m).numpy(),
                               [np.log(np.exp(k).sum()) if len(k) else -math.inf for k in kept])
    np.testing.assert_allclose(M.norm(x, 2.0, 1, mask=m).numpy(), [np.linalg.norm(k) for k in kept])
    np.testing.assert_array_equal(M.norm(x, -math.inf, 1, mask=m).numpy(), [1.0, math.inf, 0.5])
    assert np.isnan(M.softmax(x, 1, mask=m).numpy()[1]).all()
    np.testing.assert_array_equal(M.softmax(x, 1, mask=m).numpy()[0, 1], 0.0)
    np.testing.assert_array_equal(M.log_softmax(x, 1, mask=m).numpy()[0, 1], -math.inf)
    np.testing.assert_array_equal(M.argmax(x, 1, mask=m).numpy(), [3.0, 0.0, 0.0])
    np.testing.assert_array_equal(M.argmin(x, 1, mask=m).numpy(), [0.0, 0.0, 1.0])


def test_dtype_rules_follow_pytorch():
    xi = lucid.tensor([[1, 2, 3], [4, 5, 6]], dtype=lucid.int32)
    m = lucid.tensor([[True, False, True], [False, False, False]])
    assert M.sum(xi, 1, mask=m).dtype == lucid.int64
    assert M.prod(lucid.tensor([[True, False]]), 1, mask=lucid.tensor([[True, True]])).dtype == lucid.int64
    assert M.cumsum(xi, 1, mask=m).dtype == lucid.int32  # scans don't widen
    np.testing.assert_array_equal(M.amax(xi, 1, mask=m).numpy(), [3, np.iinfo(np.int32).min])
    np.testing.assert_array_equal(M.amin(xi, 1, mask=m).numpy(), [1, np.iinfo(np.int32).max])
    assert M.argmax(xi, 1, mask=m).dtype == lucid.int32  # indices in the input's dtype, as PyTorch's
    assert M.argmax(_x(), 1, mask=_m()).dtype == lucid.float64
    v = M.var(xi, 1, mask=m)
    assert v.dtype == lucid.float32 and v.numpy()[0] == 2.0 and np.isnan(v.numpy()[1])
    assert M.sum(_x(), 1, mask=_m(), dtype=lucid.float32).dtype == lucid.float32
    np.testing.assert_array_equal(M.median(xi, 1, mask=lucid.tensor([True, False, True])).numpy(), [1, 4])
    np.testing.assert_array_equal(M.logsumexp(xi, 1, mask=m).numpy(), [3, np.iinfo(np.int32).min])


def test_masks_broadcast_and_cast_to_bool():
    x = _x()
    row = lucid.tensor([1, 0, 1, 1])  # an integer mask of one row
    np.testing.assert_array_equal(M.sum(x, 1, mask=row).numpy(), [0.0, 5.0, 12.5])
    np.testing.assert_array_equal(M.sum(x, mask=lucid.tensor(True)).numpy(), np.sum(X))
    np.testing.assert_array_equal(M.sum(x).numpy(), np.sum(X))  # no mask: everything counts
    np.testing.assert_allclose(M.mean(x, (0, 1), mask=_m()).numpy(), np.mean([-3, -1, 4, 5, -6, 0.5]))


def test_var_corrections():
    x, m = _x(), _m()
    kept = np.array([-3.0, -1.0, 4.0])
    assert M.var(x, 1, unbiased=False, mask=m).numpy()[0] == pytest.approx(np.var(kept))
    assert M.var(x, 1, correction=2, mask=m).numpy()[0] == pytest.approx(np.sum((kept - kept.mean()) ** 2))
    assert M.var(x, 1, correction=3, mask=m).numpy()[0] == math.inf  # divisor clamped at 0
    assert M.std(x, 1, mask=m, keepdim=True).shape == (3, 1)


def test_logaddexp_and_normalize():
    a = lucid.tensor([-100.0, -200, -300])
    b = lucid.tensor([-1.0, -2, -3])
    m = lucid.tensor([True, False, True])
    np.testing.assert_array_equal(M.logaddexp(a, b, input_mask=m, other_mask=m).numpy(), [-1.0, -math.inf, -3.0])
    np.testing.assert_allclose(M.logaddexp(a, b, input_mask=m).numpy(), [np.logaddexp(-100, -1), -2.0,
                                                                         np.logaddexp(-300, -3)])
    out = M.normalize(lucid.tensor([[3.0, 5.0, 4.0]]), 2.0, 1, mask=lucid.tensor([True, False, True]))
    np.testing.assert_allclose(out.numpy(), [[0.6, 0.0, 0.8]])
    tiny = M.normalize(lucid.tensor([[1e-14, 1.0]]), 2.0, 1, eps=1e-12, mask=lucid.tensor([True, False]))
    np.testing.assert_allclose(tiny.numpy(), [[1e-2, 0.0]])  # divided by eps, not the norm


# ------------------------------------------------------------------ gradients

def test_masked_out_elements_get_zero_gradient():
    for f in (lambda x, m: M.sum(x, 1, mask=m), lambda x, m: M.mean(x, 1, mask=m),
              lambda x, m: M.amax(x, 1, mask=m), lambda x, m: M.var(x[[0, 2]], 1, mask=m[[0, 2]]),
              lambda x, m: M.logsumexp(x, 1, mask=m), lambda x, m: M.softmax(x, 1, mask=m),
              lambda x, m: M.norm(x, 2.0, 1, mask=m), lambda x, m: M.median(x, 1, mask=m)):
        x = _x(requires_grad=True)
        out = f(x, _m())
        lucid.where(lucid.isfinite(out), out, lucid.zeros((), dtype=out.dtype)).sum().backward()
        g = x.grad.numpy()
        assert np.all(g[~np.array(MASK)] == 0), f
        assert np.isfinite(g).all()


def test_var_of_a_fully_masked_row_has_nan_gradients_as_in_pytorch():
    # PyTorch squares ``input - mean`` before masking, so a row with nothing kept (mean nan) sends
    # nan * 0 = nan to its masked-out elements, even when only another row's result is used
    x = _x(requires_grad=True)
    M.var(x, 1, mask=_m())[0].backward()
    g = x.grad.numpy()
    assert np.isnan(g[1]).all() and np.isfinite(g[[0, 2]]).all()
    np.testing.assert_allclose(g[0], [-3.0, 0.0, -1.0, 4.0])


def test_gradients_match_closed_forms():
    x = _x(requires_grad=True)
    M.mean(x, 1, mask=_m()).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.array(MASK) / np.maximum(np.sum(MASK, 1, keepdims=True), 1))
    x = _x(requires_grad=True)
    M.amax(x, 1, mask=_m())[0].backward()
    np.testing.assert_array_equal(x.grad.numpy()[0], [0.0, 0.0, 0.0, 1.0])


def test_an_infinite_masked_out_element_leaves_finite_gradients():
    # the fill comes before the op, so inf * 0 never reaches a kept element's derivative
    x = lucid.tensor([[1.0, math.inf, 2.0]], requires_grad=True)
    m = lucid.tensor([[True, False, True]])
    M.mean(x, 1, mask=m).backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[0.5, 0.0, 0.5]])


def test_masked_tensor_inputs_use_their_mask():
    mt = M.masked_tensor(_x(), _m())
    np.testing.assert_array_equal(M.sum(mt, 1).numpy(), [0.0, 0.0, -0.5])
    np.testing.assert_allclose(M.mean(mt, 1).numpy(), [0.0, np.nan, -0.5 / 3])
    # an explicit mask narrows it further
    only_first = lucid.tensor([True, False, False, False])
    np.testing.assert_array_equal(M.sum(mt, 1, mask=only_first).numpy(), [-3.0, 0.0, 5.0])
    assert type(M.sum(mt)) is lucid.Tensor  # a plain result, as PyTorch's


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("call,exc,start", [
    (lambda: M.sum(_x(), 2, mask=_m()), IndexError, "sum: Dimension out of range"),
    (lambda: M.amax(_x(), (0, 0), mask=_m()), RuntimeError, "amax: dim=0 appears multiple times"),
    (lambda: M.sum(_x(), 1, mask=lucid.ones(1, 3, 4, dtype=lucid.bool)), IndexError, "sum: expected broadcastable"),
    (lambda: M.sum(_x(), 1, mask=lucid.ones(2, 4, dtype=lucid.bool)), RuntimeError, "sum: the mask of shape"),
    (lambda: M.mean(lucid.tensor([1, 2]), mask=lucid.tensor([True, True])), ValueError, "mean(): Could not infer"),
    (lambda: M.amax(lucid.tensor([True]), mask=lucid.tensor([True])), NotImplementedError, "amax: masked amax"),
    (lambda: M.cumsum(lucid.tensor([True]), 0, mask=lucid.tensor([True])), NotImplementedError, "cumsum:"),
    (lambda: M.softmax(lucid.tensor([1, 2]), 0, mask=lucid.tensor([True, True])), NotImplementedError, "softmax:"),
    (lambda: M.norm(lucid.tensor([1, 2]), mask=lucid.tensor([True, True])), RuntimeError, "norm: expected"),
    (lambda: M.median(lucid.tensor([[1, 2]]), 1, mask=lucid.tensor([[False, False]])), ValueError, "median:"),
    (lambda: M.var(_x(), 1, unbiased=True, correction=1), AssertionError, "var: only one of"),
    (lambda: M.sum(_x(), mask=[True]), TypeError, "sum: mask must be a Tensor"),
    (lambda: M.sum(np.ones(3)), TypeError, "sum: input must be a Tensor"),
])
def test_errors_name_the_function(call, exc, start):
    with pytest.raises(exc) as info:
        call()
    assert str(info.value).startswith(start)


# ------------------------------------------------------------------ PyTorch parity (optional)

def test_values_dtypes_and_gradients_match_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4))
    masks = [np.array(MASK), np.array([[True], [False], [True]]), np.zeros((3, 4), bool),
             np.array([True, False, True, True])]
    calls = [("sum", dict(dim=1)), ("sum", {}), ("prod", dict(dim=0, keepdim=True)), ("amax", dict(dim=(0, 1))),
             ("amin", dict(dim=1)), ("argmax", dict(dim=1)), ("argmin", dict(dim=0)), ("mean", dict(dim=1)),
             ("median", dict(dim=1)), ("logsumexp", dict(dim=1)), ("var", dict(dim=1)),
             ("std", dict(dim=0, unbiased=False)), ("var", dict(dim=1, correction=2)), ("cumsum", dict(dim=1)),
             ("cumprod", dict(dim=0)), ("softmax", dict(dim=1)), ("log_softmax", dict(dim=1)),
             ("softmin", dict(dim=0)), ("normalize", dict(ord=2.0, dim=1)), ("norm", dict(ord=math.inf, dim=1)),
             ("norm", dict(ord=-math.inf, dim=1)), ("norm", dict(ord=3.0))]
    for m in masks:
        for name, kw in calls:
            tx = torch.tensor(x, requires_grad=True)
            lx = lucid.tensor(x, requires_grad=True)
            want = getattr(torch.masked, name)(tx, mask=torch.tensor(m), **kw)
            got = getattr(M, name)(lx, mask=lucid.tensor(m), **kw)
            assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
            np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12, atol=1e-12,
                                       err_msg=f"{name} {kw} {m.shape}")
            if want.requires_grad:
                seed = rng.standard_normal(tuple(want.shape))
                want.backward(torch.tensor(seed))
                got.backward(lucid.tensor(seed))
                np.testing.assert_allclose(np.nan_to_num(lx.grad.numpy(), nan=7.0),
                                           np.nan_to_num(tx.grad.numpy(), nan=7.0), rtol=1e-10, atol=1e-12,
                                           err_msg=f"grad {name} {kw} {m.shape}")


def test_integer_inputs_match_torch():
    torch = pytest.importorskip("torch")
    xi = np.random.default_rng(1).integers(-5, 5, (3, 4))
    for dt in ["int32", "int64", "int8", "uint8", "int16", "bool"]:
        arr = xi.astype(dt) if dt != "bool" else xi > 0
        for name in ["sum", "prod", "amax", "amin", "argmax", "argmin", "var", "std", "logsumexp", "cumsum",
                     "cumprod", "median", "mean"]:
            for m in (np.array(MASK), np.array([True, False, True, True])):
                try:
                    want = getattr(torch.masked, name)(torch.tensor(arr), 1, mask=torch.tensor(m))
                except Exception as e:  # noqa: BLE001  (the same kind of error is expected)
                    with pytest.raises(type(e)):
                        getattr(M, name)(lucid.tensor(arr), 1, mask=lucid.tensor(m))
                    continue
                got = getattr(M, name)(lucid.tensor(arr), 1, mask=lucid.tensor(m))
                assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], (name, dt)
                np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, err_msg=f"{name} {dt}")
