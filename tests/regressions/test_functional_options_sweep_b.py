"""Regressions from the nn.functional sweep (convolution, pooling, resampling, grids,
attention) driven with its options against PyTorch 2.13. Differentiable cases with smooth
inputs live in tests/ops/db_sweep_functional_b.py; here: ties, -inf and NaN, and the
exception types PyTorch raises."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F

INF = float("inf")
NAN = float("nan")


def _grad(fn, x):
    x = lucid.tensor(x, requires_grad=True)
    out = fn(x)
    (out[0] if isinstance(out, tuple) else out).sum().backward()
    return out, x.grad.numpy()


# ----------------------------------------------------------------- convolution


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_conv_same_padding_with_stride_is_a_runtime_error(nsp):
    conv = getattr(F, f"conv{nsp}d")  # looked up at run time: another test may reload the module
    x, w = lucid.ones(1, 2, *[5] * nsp), lucid.ones(2, 2, *[2] * nsp)
    with pytest.raises(RuntimeError, match="strided"):
        conv(x, w, padding="same", stride=2)
    with pytest.raises(RuntimeError, match="invalid padding string"):
        conv(x, w, padding="full")
    with pytest.raises(ValueError):  # the type Lucid raised before still catches it
        conv(x, w, padding="same", stride=2)


@pytest.mark.parametrize("nsp", [1, 2, 3])
def test_conv_transpose_refuses_a_padding_string(nsp):
    convt = getattr(F, f"conv_transpose{nsp}d")
    with pytest.raises(TypeError, match="padding"):
        convt(lucid.ones(1, 2, *[3] * nsp), lucid.ones(2, 1, *[2] * nsp), padding="same")


# ----------------------------------------------------------------- max pooling


def test_max_pool_all_minus_inf_window_picks_its_first_real_element():
    # row 1 is all -inf; with padding the first kernel tap of a window lies in the padding,
    # whose flat index used to alias the row above (value 3.0 instead of -inf)
    x = np.array([[[[1.0, 2.0, 3.0], [-INF, -INF, -INF]]]])
    (v, i), g = _grad(lambda t: F.max_pool2d(t, (1, 2), padding=(0, 1), return_indices=True), x)
    np.testing.assert_array_equal(v.numpy(), [[[[1.0, 3.0], [-INF, -INF]]]])
    np.testing.assert_array_equal(i.numpy(), [[[[0, 2], [3, 4]]]])
    np.testing.assert_array_equal(g, [[[[1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]]])


def test_max_pool1d_and_3d_minus_inf_with_padding_and_ceil_mode():
    v, i = F.max_pool1d(lucid.tensor([[[-INF, -INF, 5.0]]]), 2, padding=1, return_indices=True)
    np.testing.assert_array_equal(i.numpy(), [[[0, 2]]])
    np.testing.assert_array_equal(v.numpy(), [[[-INF, 5.0]]])
    x = np.full((1, 1, 1, 1, 5), -INF)
    x[..., 0] = 7.0
    v, i = F.max_pool3d(lucid.tensor(x), (1, 1, 2), stride=2, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(i.numpy().ravel(), [0, 2, 4])
    np.testing.assert_array_equal(v.numpy().ravel(), [7.0, -INF, -INF])


@pytest.mark.parametrize("pool", ["adaptive_max_pool1d", "fractional_max_pool2d"])
def test_window_max_ties_route_the_whole_gradient_to_the_first_maximum(pool):
    if pool == "adaptive_max_pool1d":
        x = np.array([[[1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0]]])
        fn = lambda t: F.adaptive_max_pool1d(t, 3)  # noqa: E731
        want = [[[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]]]  # windows [0,3), [2,5), [4,7)
    else:
        x = np.ones((1, 1, 3, 3))
        fn = lambda t: F.fractional_max_pool2d(t, 2, output_size=1,  # noqa: E731
                                               _random_samples=lucid.tensor([[[0.2, 0.7]]]))
        want = np.zeros((1, 1, 3, 3))
        want[0, 0, 1, 1] = 1.0  # the window starts at (1, 1): its first element wins
    _, g = _grad(fn, x)
    np.testing.assert_array_equal(g, want)


def test_adaptive_max_pool_nan_last_one_wins_and_gets_the_gradient():
    x = np.array([[[NAN, 2.0, NAN, 1.0]]])
    (v, i), g = _grad(lambda t: F.adaptive_max_pool1d(t, 1, return_indices=True), x)
    assert np.isnan(v.numpy()).all() and i.numpy().ravel().tolist() == [2]
    np.testing.assert_array_equal(g, [[[0.0, 0.0, 1.0, 0.0]]])


def test_adaptive_max_pool_empty_batch_and_empty_spatial():
    v, i = F.adaptive_max_pool2d(lucid.ones(0, 3, 4, 5), 2, return_indices=True)
    assert v.shape == (0, 3, 2, 2) and i.shape == (0, 3, 2, 2)
    for fn in (F.adaptive_max_pool2d, F.adaptive_avg_pool2d):
        with pytest.raises(RuntimeError, match="non-zero size"):
            fn(lucid.ones(2, 3, 4, 0), 2)


def test_adaptive_output_size_of_the_wrong_length_is_a_runtime_error():
    with pytest.raises(RuntimeError, match="output_size"):
        F.adaptive_avg_pool2d(lucid.ones(1, 2, 4, 4), (2, 2, 2))
    with pytest.raises(ValueError):
        F.adaptive_max_pool1d(lucid.ones(1, 2, 4), (2, 2))


# --------------------------------------------------------- adaptive / area averages


@pytest.mark.parametrize("call", [lambda t: F.adaptive_avg_pool1d(t, 3),
                                  lambda t: F.interpolate(t, size=3, mode="area")])
def test_adaptive_average_nan_stays_in_its_windows(call):
    # 7 -> 3 windows [0,3), [2,5), [4,7): a NaN at 0 touches only the first; a product with an
    # averaging matrix spread it through 0 * NaN into every output
    x = np.array([[[NAN, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]]])
    out = call(lucid.tensor(x)).numpy().ravel()
    assert np.isnan(out[0])
    np.testing.assert_allclose(out[1:], [3.0, 5.0])


# -------------------------------------------------------------------- interpolate


def test_interpolate_antialias_values():
    x = lucid.tensor([[[[0.0, 1.0, 4.0, 9.0, 16.0, 25.0]]]])
    # PyTorch 2.13 (PIL's filters): the triangle stretched to support 2 when halving
    np.testing.assert_allclose(F.interpolate(x, size=(1, 3), mode="bilinear", antialias=True).numpy().ravel(),
                               [1.0, 7.0, 18.857142857142854])
    np.testing.assert_allclose(F.interpolate(x, size=(1, 2), mode="bicubic", antialias=True).numpy().ravel(),
                               [1.8684210526315796, 15.552631578947368])
    # without it, plain bilinear taps two neighbours
    np.testing.assert_allclose(F.interpolate(x, size=(1, 3), mode="bilinear").numpy().ravel(), [0.5, 6.5, 20.5])


def test_interpolate_antialias_vs_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 2, 9, 7))
    for mode in ("bilinear", "bicubic"):
        for kw in ({"size": (4, 3)}, {"size": (13, 11)}, {"scale_factor": 0.45}, {"scale_factor": (1.0, 0.6)}):
            for ac in (False, True):
                want = torch.nn.functional.interpolate(torch.tensor(x), mode=mode, align_corners=ac, antialias=True,
                                                       **kw).numpy()
                got = F.interpolate(lucid.tensor(x), mode=mode, align_corners=ac, antialias=True, **kw).numpy()
                np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12, err_msg=f"{mode} {kw} {ac}")


def test_interpolate_linear_copies_a_dim_whose_size_is_kept():
    x = lucid.tensor([[[0.0, 1.0, 2.0, 3.0, 4.0]]])  # 5 * 1.1 -> 5: PyTorch copies, whatever the scale
    np.testing.assert_array_equal(F.interpolate(x, scale_factor=1.1, mode="linear").numpy(), x.numpy())
    # bicubic does not copy (PyTorch): -0.0677 ... at 3 -> 3 with scale 1.3
    c = F.interpolate(lucid.tensor([[[[0.0, 1.0, 2.0]]]]), scale_factor=(1.0, 1.3), mode="bicubic")
    np.testing.assert_allclose(c.numpy().ravel(), [-0.0677, 0.5603, 1.5193], atol=1e-4)


def test_interpolate_bad_options_raise_pytorchs_types():
    x = lucid.ones(1, 2, 4, 4)
    with pytest.raises(ValueError, match="recompute_scale_factor"):
        F.interpolate(x, size=3, recompute_scale_factor=True)
    with pytest.raises(RuntimeError, match="greater than 0"):
        F.interpolate(x, size=0)
    with pytest.raises(ValueError, match="anti-alias"):
        F.interpolate(x, size=3, mode="nearest", antialias=True)
    with pytest.raises(ValueError, match="anti-alias"):
        F.interpolate(lucid.ones(1, 2, 4), size=3, mode="linear", antialias=True)
    with pytest.raises(NotImplementedError):
        F.interpolate(x, size=3, mode="linear")
    with pytest.raises(NotImplementedError):
        F.interpolate(lucid.ones(2, 4), size=3)
    with pytest.raises(NotImplementedError):
        F.interpolate(lucid.ones(1, 2, 4, 4, dtype=lucid.int64), size=3, mode="bilinear")


# ---------------------------------------------------------------- grids, attention


def test_grid_and_affine_shape_errors_are_runtime_errors():
    with pytest.raises(RuntimeError, match="bicubic"):
        F.grid_sample(lucid.ones(1, 1, 2, 2, 2), lucid.zeros(1, 1, 1, 1, 3), mode="bicubic", align_corners=False)
    with pytest.raises(RuntimeError, match="theta"):
        F.affine_grid(lucid.zeros(2, 2, 3), [3, 1, 4, 4], align_corners=False)


def test_multi_head_attention_forward_shape_checks_are_assertions():
    rng = np.random.default_rng(0)
    t = lambda *s: lucid.tensor(rng.standard_normal(s))  # noqa: E731
    q = t(4, 3, 6)
    args = (6, 2, t(18, 6), t(18), None, None, False, 0.0, t(6, 6), t(6))
    with pytest.raises(AssertionError, match="embedding dimension"):
        F.multi_head_attention_forward(q, q, q, 5, *args[1:])
    q7 = t(4, 3, 7)
    with pytest.raises(AssertionError, match="divisible"):
        F.multi_head_attention_forward(q7, q7, q7, 7, 2, t(21, 7), t(21), None, None, False, 0.0, t(7, 7), t(7))
    with pytest.raises(RuntimeError):  # the type Lucid raised before
        F.multi_head_attention_forward(q, q, q, 5, *args[1:])


# ----------------------------------------------------------------------- conv_tbc


def test_conv_tbc_shapes_and_errors():
    x, w, b = lucid.ones(5, 2, 3), lucid.ones(2, 3, 4), lucid.zeros(4)
    assert F.conv_tbc(x, w, b).shape == (4, 2, 4)
    padded = F.conv_tbc(x, w, b, pad=1).numpy()
    np.testing.assert_array_equal(padded[:, 0, 0], [3.0, 6.0, 6.0, 6.0, 6.0, 3.0])  # ends: one tap in the padding
    assert F.conv_tbc(x[:1], w, b).shape == (0, 2, 4)  # T + 1 - K == 0: empty, as PyTorch
    assert F.conv_tbc(x, w, b, pad=-1).shape == (2, 2, 4)  # a negative pad crops
    with pytest.raises(RuntimeError, match="3 dims"):
        F.conv_tbc(x[0], w, b)
    with pytest.raises(RuntimeError, match="input channels"):
        F.conv_tbc(x, lucid.ones(2, 2, 4), b)
    with pytest.raises(RuntimeError, match="bias"):
        F.conv_tbc(x, w, lucid.zeros(3))
    with pytest.raises(RuntimeError, match="negative"):
        F.conv_tbc(x[:1], lucid.ones(3, 3, 4), b)


@pytest.mark.parametrize("p", [1.5, 2, 3])
def test_lp_pool_all_zero_window_has_a_zero_gradient(p):
    # (sum x**p) ** (1/p) has an infinite slope at 0; PyTorch's gradient there is 0 (its relu
    # backward selects), Lucid's was NaN
    out, g = _grad(lambda t: F.lp_pool1d(t, p, 2), np.array([[[0.0, 0.0, 1.0, 2.0]]]))
    s = 1.0 + 2.0 ** p
    np.testing.assert_allclose(out.numpy().ravel(), [0.0, s ** (1 / p)])
    np.testing.assert_allclose(g.ravel(), [0.0, 0.0, s ** (1 / p - 1), 2.0 ** (p - 1) * s ** (1 / p - 1)])
    _, g2 = _grad(lambda t: F.lp_pool2d(t, p, 2), np.zeros((1, 1, 2, 2)))
    np.testing.assert_array_equal(g2, 0.0)
