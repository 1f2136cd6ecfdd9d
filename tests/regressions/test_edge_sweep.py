"""Silent wrong answers found by a differential sweep against PyTorch 2.13 on edge-case inputs
(nan, +-inf, -0.0, empty and 0-d tensors, ties, integer and bool dtypes), fixed to PyTorch's values.

Forward: sign/sgn of nan is 0 and of bool is bool; angle of +-inf is 0/pi and keeps float16;
hardshrink/softshrink keep nan; lgamma(-inf) = inf; spherical_bessel_j0(+-inf) = 0; square of
bool is int64; round of bool is bool; hardtanh/relu6 keep an integer dtype; aminmax reduces a
non-empty dim of an empty tensor; median/nanmedian of no elements are nan; mode of an all-nan
slice no longer raises; unique keeps each nan distinct.
Gradients: max()/min() of a tensor holding nan send the gradient to the nan (not nan
everywhere); abs at nan is 0; fmax/fmin give a tie to ``input``; atan2 at the origin is 0;
xlogy/xlog1py at x == 0 are log(y)/log1p(y) where finite; hardtanh, relu6, hardsigmoid and
hardswish use PyTorch's one-sided values at their corners.
Expected values are written out; the PyTorch comparisons at the end skip without torch.
"""
import math

import numpy as np
import pytest

import lucid
import lucid.nn.functional as F

nan, inf = float("nan"), float("inf")


def _same(got, want):
    """Elementwise equality with nan == nan and the sign of zero checked."""
    g, w = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert g.shape == w.shape, (g, w)
    assert np.allclose(g, w, rtol=1e-6, atol=0, equal_nan=True), (g, w)
    z = (g == 0) & (w == 0)
    assert np.array_equal(np.signbit(g[z]), np.signbit(w[z])), (g, w)


def _grad(fn, *vals, dtype=lucid.float64):
    xs = [lucid.tensor(v, dtype=dtype, requires_grad=True) for v in vals]
    out = fn(*xs)
    (out if out.ndim == 0 else out.sum()).backward()
    return [x.grad.tolist() for x in xs]


# ------------------------------------------------------------------------------- forward


def test_sign_of_nan_is_zero_and_bool_passes_through():
    x = lucid.tensor([nan, -2.0, 0.0, 3.0, -inf])
    _same(lucid.sign(x).tolist(), [0.0, -1.0, 0.0, 1.0, -1.0])
    _same(lucid.sgn(x).tolist(), [0.0, -1.0, 0.0, 1.0, -1.0])
    _same(x.sign().tolist(), [0.0, -1.0, 0.0, 1.0, -1.0])
    b = lucid.sign(lucid.tensor([True, False]))
    assert b.dtype == lucid.bool and b.tolist() == [True, False]
    assert lucid.sign(lucid.tensor([-3, 0, 5])).tolist() == [-1, 0, 1]
    assert lucid.sign(lucid.tensor([nan], dtype=lucid.float16)).dtype == lucid.float16


@pytest.mark.parametrize("dt", ["float16", "float32", "float64"])
def test_angle_of_real_infinities_and_dtype(dt):
    x = lucid.tensor([0.0, -0.0, 2.0, -2.0, inf, -inf, nan], dtype=getattr(lucid, dt), requires_grad=True)
    y = lucid.angle(x)
    assert y.dtype == x.dtype
    pi = float(np.asarray(np.pi, dtype=dt))
    _same(y.tolist(), [0.0, 0.0, 0.0, pi, 0.0, pi, nan])
    y.sum().backward()
    _same(x.grad.tolist(), [0.0] * 7)


def test_hardshrink_softshrink_keep_nan():
    x = lucid.tensor([nan, 0.2, -0.0, 1.0, -1.0])
    _same(F.hardshrink(x).tolist(), [nan, 0.0, 0.0, 1.0, -1.0])
    _same(x.hardshrink().tolist(), [nan, 0.0, 0.0, 1.0, -1.0])
    _same(F.softshrink(x).tolist(), [nan, 0.0, -0.0, 0.5, -0.5])


def test_lgamma_at_minus_infinity_is_plus_infinity():
    x = lucid.tensor([-inf, inf, 1.0, -2.5, nan])
    want = [inf, inf, 0.0, math.lgamma(-2.5), nan]
    _same(lucid.lgamma(x).tolist(), [float(np.float32(v)) for v in want])
    _same(lucid.special.gammaln(x.double()).tolist(), want)


def test_spherical_bessel_j0_at_infinity_is_zero():
    x = lucid.tensor([inf, -inf, 0.0, 2.0], dtype=lucid.float64)
    _same(lucid.special.spherical_bessel_j0(x).tolist(), [0.0, 0.0, 1.0, math.sin(2.0) / 2.0])


def test_square_and_round_of_bool():
    b = lucid.tensor([True, False])
    sq = lucid.square(b)
    assert sq.dtype == lucid.int64 and sq.tolist() == [1, 0]
    r = lucid.round(b)
    assert r.dtype == lucid.bool and r.tolist() == [True, False]
    r = lucid.round(lucid.tensor([3, -4], dtype=lucid.int32))
    assert r.dtype == lucid.int32 and r.tolist() == [3, -4]
    assert lucid.round(lucid.tensor([0.5, 1.5, -2.5])).tolist() == [0.0, 2.0, -2.0]


@pytest.mark.parametrize("dt", ["int8", "int32", "int64"])
def test_hardtanh_relu6_keep_integer_dtypes(dt):
    x = lucid.tensor([-5, 0, 3, 7], dtype=getattr(lucid, dt))
    y = F.hardtanh(x)
    assert y.dtype == x.dtype and y.tolist() == [-1, 0, 1, 1]
    y = F.relu6(x)
    assert y.dtype == x.dtype and y.tolist() == [0, 0, 3, 6]


def test_hardtanh_of_unsigned_with_negative_limits_raises():
    u = lucid.tensor([0, 9], dtype=lucid.uint8)
    with pytest.raises(RuntimeError, match="^hardtanh: cannot do hardtanh on an unsigned type"):
        F.hardtanh(u)
    y = F.relu6(u)
    assert y.dtype == lucid.uint8 and y.tolist() == [0, 6]


def test_aminmax_over_a_nonempty_dim_of_an_empty_tensor():
    mn, mx = lucid.aminmax(lucid.zeros(2, 0), dim=0)
    assert mn.shape == (0,) and mx.shape == (0,)
    mn, mx = lucid.aminmax(lucid.zeros(0, 3), dim=-1, keepdim=True)
    assert mn.shape == (0, 1) and mx.shape == (0, 1)
    for kw in ({"dim": 1}, {}):
        with pytest.raises(RuntimeError, match="^aminmax: "):
            lucid.aminmax(lucid.zeros(2, 0), **kw)


@pytest.mark.parametrize("op", ["median", "nanmedian"])
@pytest.mark.parametrize("shape", [(0,), (2, 0), (0, 3)])
def test_median_of_no_elements_is_nan(op, shape):
    x = lucid.zeros(*shape, requires_grad=True)
    got = getattr(lucid, op)(x)
    assert got.shape == () and math.isnan(got.item())
    got.backward()
    assert x.grad.shape == shape
    assert getattr(lucid, op)(x, keepdim=True).shape == (1,) * len(shape)
    with pytest.raises(IndexError, match=f"^{op}: "):
        getattr(lucid, op)(lucid.zeros(0, 3), dim=0)


def test_mode_of_nan_slices():
    v, i = lucid.mode(lucid.tensor([nan, nan]))
    assert math.isnan(v.item()) and i.item() == 1
    v, i = lucid.mode(lucid.tensor(nan))
    assert math.isnan(v.item()) and i.item() == 0
    # nan never equals itself, so it counts once at most (PyTorch's mode of mixed nan slices
    # depends on their order; only the all-nan one is pinned)
    v, i = lucid.mode(lucid.tensor([[nan, nan], [2.0, 2.0], [nan, 3.0]]), dim=1)
    _same(v.tolist(), [nan, 2.0, 3.0])
    assert i.tolist() == [1, 1, 1]
    v, i = lucid.mode(lucid.tensor([1, 2, 2, 3, 3, 2]))
    assert (v.item(), i.item()) == (2, 5)


def test_unique_keeps_each_nan():
    out, inv, cnt = lucid.unique(lucid.tensor([1.0, nan, 3.0, nan]), return_inverse=True, return_counts=True)
    _same(out.tolist(), [1.0, 3.0, nan, nan])
    assert inv.tolist() == [0, 2, 1, 3] and cnt.tolist() == [1, 1, 1, 1]
    assert lucid.unique(lucid.tensor([3, 1, 3])).tolist() == [1, 3]


# ----------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_of_a_tensor_with_nan_send_the_gradient_to_the_nans(op):
    f = lambda x: getattr(lucid, op)(x)
    assert _grad(f, [1.0, nan, 1.0]) == [[0.0, 1.0, 0.0]]
    assert _grad(f, [nan, nan, 2.0]) == [[0.5, 0.5, 0.0]]
    assert _grad(f, [1.0, 3.0, 3.0] if op == "max" else [3.0, 1.0, 1.0]) == [[0.0, 0.5, 0.5]]
    # amax/amin keep PyTorch's nan gradients
    am = lambda x: (lucid.amax if op == "max" else lucid.amin)(x)
    assert all(math.isnan(g) for g in _grad(am, [1.0, nan])[0])
    # transforms see the same rule
    g = lucid.func.vmap(lucid.func.grad(f))(lucid.tensor([[1.0, nan], [2.0, 2.0]], dtype=lucid.float64))
    assert g.tolist() == [[0.0, 1.0], [0.5, 0.5]]
    _, t = lucid.func.jvp(f, (lucid.tensor([1.0, nan, nan]),), (lucid.tensor([5.0, 2.0, 4.0]),))
    assert t.item() == 3.0


def test_abs_gradient_at_nan_is_zero():
    assert _grad(lucid.abs, [nan, -2.0, 0.0, 3.0]) == [[0.0, -1.0, 0.0, 1.0]]


def test_fmax_fmin_give_a_tie_to_input():
    a, b = [0.0, 2.0, 1.0, nan, 5.0], [0.0, 2.0, 3.0, 1.0, nan]
    assert _grad(lucid.fmax, a, b) == [[1.0, 1.0, 0.0, 0.0, 1.0], [0.0, 0.0, 1.0, 1.0, 0.0]]
    assert _grad(lucid.fmin, a, b) == [[1.0, 1.0, 1.0, 0.0, 1.0], [0.0, 0.0, 0.0, 1.0, 0.0]]
    _same(lucid.fmax(lucid.tensor([-0.0, 0.0]), lucid.tensor([0.0, -0.0])).tolist(), [-0.0, 0.0])
    _same(lucid.fmin(lucid.tensor([1.0, nan, nan]), lucid.tensor([nan, 2.0, nan])).tolist(), [1.0, 2.0, nan])


def test_atan2_gradient_at_the_origin_is_zero():
    gy, gx = _grad(lucid.atan2, [0.0, 1.0], [0.0, 1.0])
    assert gy == [0.0, 0.5] and gx == [0.0, -0.5]


def test_xlogy_xlog1py_gradient_in_x_at_zero():
    ln2, ln05 = math.log(2.0), math.log(0.5)
    gx, gy = _grad(lucid.xlogy, [0.0, 0.0, 0.0, 0.0, 2.0], [2.0, 0.5, 0.0, -1.0, 3.0])
    assert gx[:2] == [ln2, ln05] and gx[2:4] == [0.0, 0.0] and gx[4] == math.log(3.0)
    assert gy[:2] == [0.0, 0.0] and math.isnan(gy[2]) and gy[3:] == [-0.0, 2.0 / 3.0]
    gx, _ = _grad(lucid.special.xlog1py, [0.0, 0.0, 0.0, 0.0], [1.0, -0.5, -1.0, -2.0])
    assert gx == [ln2, ln05, 0.0, 0.0]
    # a nan y still gives nan
    assert math.isnan(_grad(lucid.xlogy, [0.0], [nan])[0][0])


def test_hard_activation_gradients_at_their_corners():
    x = [-1.0, 1.0, 0.0, 2.0, -2.0]
    assert _grad(F.hardtanh, x) == [[0.0, 0.0, 1.0, 0.0, 0.0]]
    assert _grad(F.relu6, [0.0, 6.0, 3.0, -1.0, 7.0]) == [[0.0, 0.0, 1.0, 0.0, 0.0]]
    s = 1.0 / 6.0
    assert _grad(F.hardsigmoid, [-3.0, 3.0, 0.0, 4.0]) == [[0.0, 0.0, s, 0.0]]
    assert _grad(F.hardswish, [-3.0, 3.0, 0.0, 4.0, -4.0]) == [[0.0, 1.0, 0.5, 1.0, 0.0]]
    # the values are unchanged, and clamp still passes the gradient at its bounds
    assert F.hardtanh(lucid.tensor([-2.0, -1.0, 0.5, 1.0, 3.0])).tolist() == [-1.0, -1.0, 0.5, 1.0, 1.0]
    assert _grad(lambda t: t.clamp(-1.0, 1.0), x) == [[1.0, 1.0, 1.0, 0.0, 0.0]]
    # jvp and vmap follow the same rule
    _, t = lucid.func.jvp(F.relu6, (lucid.tensor([0.0, 3.0, 6.0]),), (lucid.ones(3),))
    assert t.tolist() == [0.0, 1.0, 0.0]
    g = lucid.func.vmap(lucid.func.grad(lambda v: F.hardtanh(v).sum()))(lucid.tensor([[1.0, 0.0], [-1.0, 0.5]]))
    assert g.tolist() == [[0.0, 1.0], [0.0, 1.0]]
    y = lucid.tensor([0.5, 2.0])
    F.hardtanh(y, inplace=True)
    assert y.tolist() == [0.5, 1.0]


# ------------------------------------------------------------------ PyTorch parity (optional)


def _parity_cases():
    return [
        ("sign", lambda m, x: m.sign(x), [nan, -0.0, 2.0, -inf]),
        ("angle", lambda m, x: m.angle(x), [inf, -inf, nan, -1.0]),
        ("lgamma", lambda m, x: m.lgamma(x), [-inf, -2.5, 0.5]),
        ("hardshrink", lambda m, x: m.nn.functional.hardshrink(x), [nan, 0.1, -3.0]),
        ("softshrink", lambda m, x: m.nn.functional.softshrink(x), [nan, 0.1, -3.0]),
        ("median", lambda m, x: m.median(x[:0]), [1.0]),
        ("max", lambda m, x: m.max(x), [1.0, nan, 2.0, nan]),
        ("min", lambda m, x: m.min(x), [1.0, nan, 2.0]),
        ("abs", lambda m, x: m.abs(x), [nan, 0.0, -1.0]),
        ("hardtanh", lambda m, x: m.nn.functional.hardtanh(x), [-1.0, 1.0, 0.0, 2.0]),
        ("relu6", lambda m, x: m.nn.functional.relu6(x), [0.0, 6.0, 3.0]),
        ("hardsigmoid", lambda m, x: m.nn.functional.hardsigmoid(x), [-3.0, 3.0, 1.0]),
        ("hardswish", lambda m, x: m.nn.functional.hardswish(x), [-3.0, 3.0, 1.0]),
        ("spherical_bessel_j0", lambda m, x: m.special.spherical_bessel_j0(x), [inf, -inf, 1.0]),
    ]


@pytest.mark.parametrize("case", _parity_cases(), ids=lambda c: c[0])
def test_values_and_gradients_match_torch(case):
    torch = pytest.importorskip("torch")
    _, fn, vals = case
    lx = lucid.tensor(vals, dtype=lucid.float64, requires_grad=True)
    tx = torch.tensor(vals, dtype=torch.float64, requires_grad=True)
    ly, ty = fn(lucid, lx), fn(torch, tx)
    _same(ly.tolist(), ty.tolist())
    if ty.requires_grad and ty.numel():
        ly.sum().backward()
        ty.sum().backward()
        np.testing.assert_allclose(np.asarray(lx.grad.tolist()), tx.grad.numpy(), rtol=1e-7)


def test_binary_gradients_match_torch():
    torch = pytest.importorskip("torch")
    a = [0.0, 0.0, 0.0, 1.0, 2.0, nan, 0.0, 3.0]
    b = [0.0, 2.0, 0.5, 1.0, 2.0, 1.0, -1.0, nan]
    for name in ("fmax", "fmin", "atan2", "xlogy"):
        la, lb = (lucid.tensor(v, dtype=lucid.float64, requires_grad=True) for v in (a, b))
        ta, tb = (torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (a, b))
        getattr(lucid, name)(la, lb).sum().backward()
        getattr(torch, name)(ta, tb).sum().backward()
        np.testing.assert_array_equal(np.asarray(la.grad.tolist()), ta.grad.numpy(), err_msg=name)
        np.testing.assert_array_equal(np.asarray(lb.grad.tolist()), tb.grad.numpy(), err_msg=name)


def test_mode_unique_aminmax_match_torch():
    torch = pytest.importorskip("torch")
    v = [1.0, nan, 3.0, nan]
    lo, to = lucid.unique(lucid.tensor(v)), torch.unique(torch.tensor(v))
    _same(lo.tolist(), to.tolist())
    lv, tv = lucid.mode(lucid.tensor([nan, nan])), torch.mode(torch.tensor([nan, nan]))
    _same([lv.values.item()], [tv.values.item()])
    lm, tm = lucid.aminmax(lucid.zeros(2, 0), dim=0), torch.aminmax(torch.zeros(2, 0), dim=0)
    assert tuple(lm.min.shape) == tuple(tm.min.shape)


def test_norm_dims_and_pow_exponents_as_pytorch():
    # a complex input's 0-"norm" counts in the real dtype, like every other p
    r = lucid.tensor([1 + 1j, 0j]).norm(p=0)
    assert r.dtype == lucid.float32 and r.item() == 1.0
    with pytest.raises(RuntimeError, match="cannot compute the inf norm on an empty tensor"):
        lucid.zeros(0).norm(p=float("inf"))
    assert lucid.zeros(0, 3).norm(p=float("inf"), dim=1).shape == (0,)
    with pytest.raises(RuntimeError, match="appears multiple times in the list of dims"):
        lucid.tensor(1.0).sum(dim=(0, -1))
    assert lucid.tensor(1.0).sum(dim=0).item() == 1.0
    with pytest.raises(RuntimeError, match="value 300 cannot be converted to type lucid.uint8 without overflow"):
        lucid.tensor([2], dtype=lucid.uint8) ** 300
    with pytest.raises(RuntimeError, match="cannot be converted to type lucid.float16 without overflow"):
        lucid.tensor([2.0], dtype=lucid.float16) ** 1e5
    assert (lucid.tensor([2], dtype=lucid.uint8) ** 3).tolist() == [8]
    np.testing.assert_allclose((lucid.tensor([2], dtype=lucid.uint8) ** 2.5).numpy(), [2 ** 2.5], rtol=1e-6)


def test_logaddexp_gradients_at_infinity_empty_quantile_and_one_hot():
    a = lucid.tensor([math.inf, 0.5, -3.0], dtype=lucid.float64, requires_grad=True)
    b = lucid.tensor([1.0, 2.0, 1000.0], dtype=lucid.float64, requires_grad=True)
    lucid.logaddexp(a, b).sum().backward()
    s = 1 / (1 + np.exp(-1.5))
    np.testing.assert_allclose(a.grad.numpy(), [1.0, 1 - s, 0.0])
    np.testing.assert_allclose(b.grad.numpy(), [0.0, s, 1.0])
    assert lucid.autograd.gradcheck(lambda x, y: lucid.logaddexp2(x, y),
                                    (lucid.tensor([0.3, -2.0], dtype=lucid.float64, requires_grad=True),
                                     lucid.tensor([1.0, 4.0], dtype=lucid.float64, requires_grad=True)))
    with pytest.raises(RuntimeError, match="quantile: input tensor must be non-empty"):
        lucid.quantile(lucid.zeros(0), 0.5)
    with pytest.raises(RuntimeError, match="Can not infer total number of classes from empty tensor"):
        lucid.nn.functional.one_hot(lucid.zeros(0, dtype=lucid.int64))
    assert lucid.nn.functional.one_hot(lucid.zeros(0, dtype=lucid.int64), 3).shape == (0, 3)


def test_median_of_all_elements_splits_its_gradient_among_ties():
    x = lucid.tensor([1.0, 2.0, 2.0, 3.0, 2.0], dtype=lucid.float64, requires_grad=True)
    m = x.median()
    assert m.item() == 2.0
    m.backward()
    np.testing.assert_allclose(x.grad.numpy(), [0, 1 / 3, 1 / 3, 0, 1 / 3])
    x = lucid.tensor([1.0, math.nan, math.nan], requires_grad=True)
    m = x.median()
    m.backward()
    assert math.isnan(m.item()) and x.grad.tolist() == [0.0, 0.5, 0.5]
    x = lucid.tensor([1.0, 2.0, 2.0, math.nan], requires_grad=True)
    x.nanmedian().backward()
    assert x.grad.tolist() == [0.0, 0.5, 0.5, 0.0]
    assert lucid.tensor([3, 1, 2]).median().item() == 2  # integers: no gradient, value as before
    # value exactly the middle element, even where n * v / n would round
    assert lucid.tensor([0.1, 0.1, 0.1, 5.0], dtype=lucid.float64).median().item() == 0.1
