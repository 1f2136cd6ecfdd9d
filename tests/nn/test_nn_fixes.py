"""Regression tests for the lucid.nn bugs of issue 14 (each failed before its fix) and the
in-place activations of issue 11."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as func
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck, gradgradcheck

F64 = lucid.float64


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


# ------------------------------------------------------------ cosine similarity / normalize
def test_cosine_similarity_broadcasts_before_the_norms():
    a, b = t64([[1.0, 2.0, 3.0]]), t64([[2.0], [1.0]])
    want = 6.0 / math.sqrt(14.0) / math.sqrt(3.0)  # each row of b broadcasts to (c, c, c)
    np.testing.assert_allclose(F.cosine_similarity(a, b, dim=1).detach().numpy(), [want, want], rtol=1e-12)
    np.testing.assert_allclose(nn.CosineSimilarity(dim=1)(a, b).detach().numpy(), [want, want], rtol=1e-12)


def test_cosine_similarity_gradcheck():
    rng = np.random.default_rng(1)
    a, b = t64(rng.normal(size=(3, 4)), True), t64(rng.normal(size=(1, 4)), True)
    assert gradcheck(lambda x, y: F.cosine_similarity(x, y, dim=1), (a, b))
    assert gradgradcheck(lambda x, y: F.cosine_similarity(x, y, dim=-1), (a, b))


def test_cosine_similarity_zero_vector_gradient_is_finite():
    z, w = t64(np.zeros((2, 3)), True), t64([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]], True)
    y = F.cosine_similarity(z, w)
    y.sum().backward()
    np.testing.assert_array_equal(y.detach().numpy(), [0.0, 0.0])
    # d/dz <z/eps, w/|w|> = w / (eps |w|); the norm's own derivative is 0 at z = 0.
    want = w.detach().numpy() / (1e-8 * np.linalg.norm(w.detach().numpy(), axis=1, keepdims=True))
    np.testing.assert_allclose(z.grad.detach().numpy(), want, rtol=1e-12)
    np.testing.assert_array_equal(w.grad.detach().numpy(), np.zeros((2, 3)))


@pytest.mark.parametrize("p", [1, 2, 3, float("inf")])
def test_normalize_zero_vector_gradient_is_finite(p):
    z = t64(np.zeros((2, 3)), True)
    w = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    (F.normalize(z, p=p, dim=1) * t64(w)).sum().backward()
    np.testing.assert_allclose(z.grad.detach().numpy(), w / 1e-12, rtol=1e-12)  # x / eps: derivative 1/eps


@pytest.mark.parametrize("p", [1, 2, 3])
def test_normalize_gradcheck(p):
    x = t64(np.random.default_rng(2).normal(size=(3, 4)) + 0.1, True)
    assert gradcheck(lambda v: F.normalize(v, p=p, dim=1), (x,))


# ------------------------------------------------------------ every target ignored
def _ce_cases():
    t = lucid.tensor([-100, -100, -100])
    return [
        ("fused", lambda x: F.cross_entropy(x, t)),
        ("weighted", lambda x: F.cross_entropy(x, t, weight=lucid.ones(4, dtype=x.dtype))),
        ("smoothed", lambda x: F.cross_entropy(x, t, label_smoothing=0.1)),
        ("spatial", lambda x: F.cross_entropy(x.reshape(3, 4, 1), t.reshape(3, 1))),
        ("nll", lambda x: F.nll_loss(F.log_softmax(x, 1), t)),
        ("ignore_7", lambda x: F.cross_entropy(x, lucid.tensor([7, 7, 7]) * 0 + 2, ignore_index=2)),
    ]


@pytest.mark.parametrize("name,fn", _ce_cases(), ids=[c[0] for c in _ce_cases()])
def test_all_targets_ignored_mean_is_nan_with_zero_gradient(name, fn):
    x = t64(np.random.default_rng(3).normal(size=(3, 4)), True)
    y = fn(x)
    assert math.isnan(y.item())  # 0 / 0, as in PyTorch
    y.backward()
    np.testing.assert_array_equal(x.grad.detach().numpy(), np.zeros((3, 4)))
    np.testing.assert_array_equal(func.grad(fn)(x.detach()).detach().numpy(), np.zeros((3, 4)))


def test_all_targets_ignored_under_vmap():
    t = lucid.tensor([-100, -100, -100])
    xs = t64(np.random.default_rng(4).normal(size=(2, 3, 4)))
    out = func.vmap(lambda x: F.cross_entropy(x, t))(xs)
    assert out.dtype == F64 and np.isnan(out.detach().numpy()).all()
    g = func.vmap(func.grad(lambda x: F.cross_entropy(x, t)))(xs)
    np.testing.assert_array_equal(g.detach().numpy(), np.zeros((2, 3, 4)))
    g1 = func.vmap(func.grad(lambda x: F.cross_entropy(x, lucid.tensor(-100))))(xs[:, 0])
    np.testing.assert_array_equal(g1.detach().numpy(), np.zeros((2, 4)))


def test_some_targets_ignored_mean_unchanged():
    x = t64(np.random.default_rng(5).normal(size=(3, 4)), True)
    t = lucid.tensor([1, -100, 3])
    y = F.cross_entropy(x, t)
    xn = x.detach().numpy()
    lse = np.log(np.exp(xn).sum(1))
    np.testing.assert_allclose(y.item(), ((lse[0] - xn[0, 1]) + (lse[2] - xn[2, 3])) / 2, rtol=1e-12)
    assert gradcheck(lambda v: F.cross_entropy(v, t), (x,))


# ------------------------------------------------------------ ELU family at exactly 0
ELUS = [
    ("elu", lambda x: F.elu(x, 1.5), 1.5, 1.5),
    ("celu", lambda x: F.celu(x, 2.0), 1.0, 0.5),
    ("selu", F.selu, 1.0507009873554805 * 1.6732632423543772, 1.0507009873554805 * 1.6732632423543772),
]


@pytest.mark.parametrize("name,fn,d1,d2", ELUS, ids=[c[0] for c in ELUS])
def test_elu_family_derivative_at_zero(name, fn, d1, d2):
    x = t64([0.0], True)
    (g,) = lucid.autograd.grad(fn(x).sum(), [x], create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [d1], rtol=1e-12)  # vjp: the negative branch's
    np.testing.assert_allclose(lucid.autograd.grad(g.sum(), x).detach().numpy(), [d2], rtol=1e-12)
    _, tangent = func.jvp(fn, (x.detach(),), (t64([1.0]),))
    np.testing.assert_allclose(tangent.detach().numpy(), [d1], rtol=1e-12)


# ------------------------------------------------------------ bicubic / area interpolation
def _bicubic_ref(x, oh, ow, align_corners, a=-0.75):
    """Per-pixel loop of PyTorch's upsample_bicubic2d (no scale_factor)."""
    n, c, h, w = x.shape

    def w4(t):
        f = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # noqa: E731
        g = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1  # noqa: E731
        return [f(t + 1), g(t), g(1 - t), f(2 - t)]

    def src(i, insz, outsz):
        if align_corners:
            return i * (insz - 1) / (outsz - 1) if outsz > 1 else 0.0
        return (i + 0.5) * insz / outsz - 0.5

    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        sy = src(i, h, oh)
        y0 = math.floor(sy)
        wy = w4(sy - y0)
        for j in range(ow):
            sx = src(j, w, ow)
            x0 = math.floor(sx)
            wx = w4(sx - x0)
            for ky in range(4):
                for kx in range(4):
                    yy = min(max(y0 - 1 + ky, 0), h - 1)
                    xx = min(max(x0 - 1 + kx, 0), w - 1)
                    out[:, :, i, j] += wy[ky] * wx[kx] * x[:, :, yy, xx]
    return out


@pytest.mark.parametrize("size,align", [((7, 9), False), ((3, 4), False), ((6, 2), True)])
def test_interpolate_bicubic_matches_loop_and_gradcheck(size, align):
    x = np.random.default_rng(6).normal(size=(1, 2, 4, 5))
    got = F.interpolate(t64(x), size=size, mode="bicubic", align_corners=align).detach().numpy()
    np.testing.assert_allclose(got, _bicubic_ref(x, *size, align), rtol=1e-12, atol=1e-12)
    assert gradcheck(lambda v: F.interpolate(v, size=size, mode="bicubic", align_corners=align),
                     (t64(x, True),))


def test_interpolate_area_is_adaptive_average_pooling():
    x = t64(np.random.default_rng(7).normal(size=(2, 3, 7, 5)))
    np.testing.assert_allclose(F.interpolate(x, size=(3, 2), mode="area").detach().numpy(),
                               F.adaptive_avg_pool2d(x, (3, 2)).detach().numpy(), rtol=1e-12)


def test_interpolate_bicubic_torch_parity():
    torch = pytest.importorskip("torch")
    x = np.random.default_rng(8).normal(size=(2, 3, 5, 6))
    for kw in (dict(size=(9, 4)), dict(scale_factor=1.7), dict(size=(8, 8), align_corners=True)):
        xl, xt = t64(x, True), torch.tensor(x, requires_grad=True)
        yl = F.interpolate(xl, mode="bicubic", **kw)
        yt = torch.nn.functional.interpolate(xt, mode="bicubic", **kw)
        np.testing.assert_allclose(yl.detach().numpy(), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        gy = np.random.default_rng(9).normal(size=tuple(yt.shape))
        yl.backward(t64(gy))
        yt.backward(torch.tensor(gy))
        np.testing.assert_allclose(xl.grad.detach().numpy(), xt.grad.detach().numpy(), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------ load_state_dict
class _Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.register_buffer("scale", lucid.tensor(1.5))


@pytest.mark.parametrize("bad_key,bad", [("scale", None), ("lin.bias", np.array(["a", "b"])),
                                         ("scale", "x"), ("lin.bias", [object(), object()])])
@pytest.mark.parametrize("assign", [False, True])
def test_load_state_dict_bad_value_changes_nothing(bad_key, bad, assign):
    m = _Two()
    before = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
    sd = {"lin.weight": np.full((2, 2), 7.0), "lin.bias": np.zeros(2), "scale": np.array(2.0)}
    sd[bad_key] = bad
    with pytest.raises(RuntimeError, match=bad_key.replace(".", r"\.")):
        m.load_state_dict(sd, assign=assign)
    for k, v in m.state_dict().items():
        np.testing.assert_array_equal(v.detach().numpy(), before[k])


def test_load_state_dict_converts_dtype_and_assign_keeps_it():
    m = _Two()
    m.load_state_dict({"lin.weight": np.ones((2, 2), np.int64), "lin.bias": [1, 2], "scale": 3})
    assert m.lin.weight.dtype == lucid.float32 and m.lin.bias.tolist() == [1.0, 2.0]
    m.load_state_dict({"lin.weight": np.ones((2, 2)), "lin.bias": np.ones(2), "scale": np.array(2.0)},
                      assign=True)
    assert m.lin.weight.dtype == F64 and m.scale.item() == 2.0


# ------------------------------------------------------------ in-place activations
INPLACE = [
    ("relu_", F.relu_, F.relu, {}),
    ("elu_", F.elu_, F.elu, {"alpha": 1.3}),
    ("leaky_relu_", F.leaky_relu_, F.leaky_relu, {"negative_slope": 0.2}),
    ("hardtanh_", F.hardtanh_, F.hardtanh, {"min_val": -0.5, "max_val": 0.7}),
    ("selu_", F.selu_, F.selu, {}),
    ("celu_", F.celu_, F.celu, {"alpha": 0.7}),
    ("threshold_", F.threshold_, F.threshold, {"threshold": 0.1, "value": -2.0}),
    ("rrelu_", F.rrelu_, F.rrelu, {"lower": 0.1, "upper": 0.3}),
]
X = np.array([[-1.5, -0.3, 0.4], [0.9, -2.2, 1.7]])


@pytest.mark.parametrize("name,inplace_fn,fn,kw", INPLACE, ids=[c[0] for c in INPLACE])
def test_inplace_activation_changes_input_and_gradient(name, inplace_fn, fn, kw):
    x = t64(X)
    assert inplace_fn(x, **kw) is x
    np.testing.assert_allclose(x.detach().numpy(), fn(t64(X), **kw).detach().numpy(), rtol=1e-12)
    # In a graph: y = 2a; act_(y); loss = sum(y * c) -> grad a = 2 c act'(2a).
    c = np.arange(6.0).reshape(2, 3) + 1
    a = t64(X, True)
    y = a * 2.0
    v0 = y._version[0]
    assert inplace_fn(y, **kw) is y and y._version[0] == v0 + 1
    (y * t64(c)).sum().backward()
    a2 = t64(X, True)
    (fn(a2 * 2.0, **kw) * t64(c)).sum().backward()
    np.testing.assert_allclose(a.grad.detach().numpy(), a2.grad.detach().numpy(), rtol=1e-12)


def test_inplace_activation_on_a_leaf_that_requires_grad_raises():
    x = t64(X, True)
    with pytest.raises(RuntimeError, match="relu_.*leaf"):
        F.relu_(x)
    np.testing.assert_array_equal(x.detach().numpy(), X)


def test_inplace_activation_on_a_view_updates_base_history():
    a = t64(X, True)
    b = a * 1.0
    F.relu_(b[0])  # a view: the base b takes the change and its history
    assert b.tolist()[0] == [0.0, 0.0, 0.4]
    b.sum().backward()
    np.testing.assert_array_equal(a.grad.detach().numpy(), [[0, 0, 1], [1, 1, 1]])


def test_inplace_modules():
    for mod in (nn.ReLU(inplace=True), nn.LeakyReLU(0.1, inplace=True), nn.ELU(inplace=True),
                nn.SiLU(inplace=True), nn.Hardtanh(inplace=True), nn.ReLU6(inplace=True),
                nn.Hardswish(inplace=True), nn.SELU(inplace=True), nn.Threshold(0.0, 1.0, True)):
        x = t64(X)
        assert mod(x) is x
        assert "inplace=True" in repr(mod)
    x = t64(X)
    assert nn.ReLU()(x) is not x and x.detach().numpy()[0, 0] == -1.5


def test_inplace_under_grad_transform():
    f = lambda v: F.relu_(v * 1.0).sum()  # noqa: E731
    np.testing.assert_array_equal(func.grad(f)(t64(X)).detach().numpy(), (X > 0).astype(float))
