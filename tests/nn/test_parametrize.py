"""nn.utils.parametrize / parametrizations (weight_norm, spectral_norm), old-style
weight_norm, fusion, skip_init: closed forms, gradcheck, PyTorch parity when installed."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
from lucid.autograd import gradcheck
from lucid.nn.utils import parametrizations as P
from lucid.nn.utils import parametrize

RNG = np.random.default_rng(71)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


class Symmetric(nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).transpose(0, 1)

    def right_inverse(self, a):
        return a.triu()


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(lucid.tensor(2.0, dtype=lucid.float64))

    def forward(self, x):
        return x * self.s


def _lin(n=3, m=3):
    lucid.manual_seed(0)
    return nn.Linear(n, m).to(lucid.float64)


def test_register_and_remove():
    m = _lin()
    w0 = npy(m.weight).copy()
    parametrize.register_parametrization(m, "weight", Symmetric())
    assert type(m).__name__ == "ParametrizedLinear" and parametrize.is_parametrized(m, "weight")
    assert parametrize.type_before_parametrizations(m) is nn.Linear
    sym = np.triu(w0) + np.triu(w0, 1).T
    np.testing.assert_array_equal(npy(m.weight), sym)
    assert set(m.state_dict()) == {"bias", "parametrizations.weight.original"}
    x = t64(RNG.normal(size=(4, 3)), True)
    np.testing.assert_allclose(npy(m(x)), npy(x) @ sym.T + npy(m.bias), rtol=1e-12)
    m(x).sum().backward()  # the gradient reaches the original (upper triangle)
    g = m.parametrizations.weight.original.grad.numpy()
    assert (np.tril(g, -1) == 0).all() and np.abs(np.triu(g)).sum() > 0
    new = RNG.normal(size=(3, 3))
    m.weight = t64(new + new.T)  # setter: right_inverse
    np.testing.assert_allclose(npy(m.weight), new + new.T, rtol=1e-12)
    parametrize.register_parametrization(m, "weight", Scale())  # chained
    np.testing.assert_allclose(npy(m.weight), 2 * (new + new.T), rtol=1e-12)
    assert "parametrizations.weight.1.s" in m.state_dict()
    with parametrize.cached():
        assert m.weight is m.weight
    parametrize.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and isinstance(m.weight, nn.Parameter)
    np.testing.assert_allclose(npy(m.weight), 2 * (new + new.T), rtol=1e-12)
    with pytest.raises(ValueError, match="no parameter"):
        parametrize.register_parametrization(m, "nothing", Scale())


def test_weight_norm_new_style():
    m = P.weight_norm(_lin(3, 2), dim=0)
    w = npy(m.weight)
    g, v = npy(m.parametrizations.weight.original0), npy(m.parametrizations.weight.original1)
    np.testing.assert_allclose(g[:, 0], np.linalg.norm(v, axis=1), rtol=1e-12)
    np.testing.assert_allclose(w, v, rtol=1e-12)  # at registration g = ||v||
    f = lambda gg, vv: gg * vv / lucid.norm(vv, 2, (1,), keepdim=True)  # noqa: E731
    assert gradcheck(f, (t64(g, True), t64(v, True)))
    x = t64(RNG.normal(size=(5, 3)))
    m(x).sum().backward()
    assert m.parametrizations.weight.original0.grad.shape == (2, 1)


def test_weight_norm_old_style():
    m = nn.utils.weight_norm(_lin(3, 2), dim=None)
    assert m.weight_g.shape == () and m.weight_v.shape == (2, 3)
    with lucid.no_grad():
        m.weight_g.fill_(3.0)
    x = t64(RNG.normal(size=(5, 3)))
    v = npy(m.weight_v)
    np.testing.assert_allclose(npy(m(x)), npy(x) @ (3 * v / np.linalg.norm(v)).T + npy(m.bias), rtol=1e-12)
    nn.utils.remove_weight_norm(m)
    np.testing.assert_allclose(npy(m.weight), 3 * v / np.linalg.norm(v), rtol=1e-12)
    assert sorted(m.state_dict()) == ["bias", "weight"]


def test_spectral_norm():
    lucid.manual_seed(0)
    m = P.spectral_norm(nn.Linear(5, 4).to(lucid.float64))
    for _ in range(30):  # each training-mode access runs one more power iteration
        w = npy(m.weight)
    np.testing.assert_allclose(np.linalg.svd(w, compute_uv=False)[0], 1.0, rtol=1e-6)
    m.eval()
    a, b = npy(m.weight), npy(m.weight)
    np.testing.assert_array_equal(a, b)  # eval: no power iteration
    conv = P.spectral_norm(nn.ConvTranspose2d(3, 2, 2).to(lucid.float64))
    assert conv.parametrizations.weight[0].dim == 1


def test_fusion_and_skip_init():
    lucid.manual_seed(0)
    conv, bn = nn.Conv2d(2, 3, 3).to(lucid.float64), nn.BatchNorm2d(3).to(lucid.float64)
    with lucid.no_grad():
        bn.running_mean.copy_(t64(RNG.normal(size=3)))
        bn.running_var.copy_(t64(RNG.uniform(0.5, 2, size=3)))
        bn.weight.copy_(t64(RNG.normal(size=3)))
    conv.eval(), bn.eval()
    x = t64(RNG.normal(size=(2, 2, 5, 5)))
    fused = nn.utils.fuse_conv_bn_eval(conv, bn)
    np.testing.assert_allclose(npy(fused(x)), npy(bn(conv(x))), rtol=1e-10, atol=1e-12)
    lin, bn1 = nn.Linear(3, 4).to(lucid.float64).eval(), nn.BatchNorm1d(4).to(lucid.float64).eval()
    with lucid.no_grad():
        bn1.running_var.copy_(t64(RNG.uniform(0.5, 2, size=4)))
    x1 = t64(RNG.normal(size=(5, 3)))
    np.testing.assert_allclose(npy(nn.utils.fuse_linear_bn_eval(lin, bn1)(x1)), npy(bn1(lin(x1))), rtol=1e-10)
    with pytest.raises(AssertionError, match="eval"):
        nn.utils.fuse_conv_bn_eval(conv.train(), bn)
    assert nn.utils.skip_init(nn.Linear, 3, 2).weight.shape == (2, 3)


def test_torch_parity():
    torch = pytest.importorskip("torch")
    tp = torch.nn.utils.parametrizations
    torch.manual_seed(0)
    for make_t, make_l in ((lambda m: tp.weight_norm(m, dim=1), lambda m: P.weight_norm(m, dim=1)),
                           (lambda m: tp.spectral_norm(m), lambda m: P.spectral_norm(m))):
        tm = make_t(torch.nn.Linear(4, 3).double())
        lm = make_l(nn.Linear(4, 3).to(lucid.float64))
        assert sorted(tm.state_dict()) == sorted(lm.state_dict())
        lm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
        x = RNG.normal(size=(2, 4))
        xl, xt = t64(x, True), torch.tensor(x, requires_grad=True)
        yl, yt = lm(xl), tm(xt)
        np.testing.assert_allclose(npy(yl), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        yl.sum().backward()
        yt.sum().backward()
        np.testing.assert_allclose(npy(xl.grad), xt.grad.numpy(), rtol=1e-9, atol=1e-12)
        lp = dict(lm.named_parameters())
        for k, p in tm.named_parameters():
            np.testing.assert_allclose(npy(lp[k].grad), p.grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=k)


def test_spectral_norm_old_style_and_clip_grads_with_norm():
    lucid.manual_seed(0)
    m = nn.utils.spectral_norm(nn.Linear(5, 4).to(lucid.float64))
    assert sorted(m.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    x = t64(RNG.normal(size=(2, 5)))
    for _ in range(30):
        m(x)
    np.testing.assert_allclose(np.linalg.svd(npy(m.weight), compute_uv=False)[0], 1.0, rtol=1e-6)
    w = npy(m.weight).copy()
    nn.utils.remove_spectral_norm(m)
    np.testing.assert_allclose(npy(m.weight), w, rtol=1e-10)
    p = lucid.tensor([3.0, 4.0], requires_grad=True)
    (p * lucid.tensor([3.0, 4.0])).sum().backward()
    nn.utils.clip_grads_with_norm_([p], 2.5, nn.utils.get_total_norm([p.grad]))
    np.testing.assert_allclose(npy(p.grad), [1.5, 2.0], rtol=1e-5)


def test_torch_parity_old_spectral_norm():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    tm = torch.nn.utils.spectral_norm(torch.nn.Linear(4, 3).double())
    lm = nn.utils.spectral_norm(nn.Linear(4, 3).to(lucid.float64))
    assert sorted(tm.state_dict()) == sorted(lm.state_dict())
    lm.load_state_dict({k: v.numpy() for k, v in tm.state_dict().items()})
    x = RNG.normal(size=(2, 4))
    xl, xt = t64(x, True), torch.tensor(x, requires_grad=True)
    yl, yt = lm(xl), tm(xt)
    np.testing.assert_allclose(npy(yl), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    yl.sum().backward()
    yt.sum().backward()
    np.testing.assert_allclose(npy(lm.weight_orig.grad), tm.weight_orig.grad.numpy(), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("shape", [(3, 3), (5, 3), (3, 5)])
@pytest.mark.parametrize("omap", ["matrix_exp", "cayley", "householder"])
def test_orthogonal(shape, omap):
    lucid.manual_seed(0)
    m = P.orthogonal(nn.Linear(shape[1], shape[0]).to(lucid.float64), orthogonal_map=omap)
    noise = RNG.normal(size=shape) * 0.3
    np.fill_diagonal(noise, 0.0)  # householder reads the signs of the diagonal (truncated, as PyTorch)
    with lucid.no_grad():
        m.parametrizations.weight.original.add_(lucid.tensor(noise))
    w = npy(m.weight)
    gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-12)
    x = t64(RNG.normal(size=(2, shape[1])))
    m(x).sum().backward()
    assert np.isfinite(npy(m.parametrizations.weight.original.grad)).all()
    q = np.linalg.qr(RNG.normal(size=(max(shape), min(shape))))[0]
    q = q if shape[0] >= shape[1] else q.T
    m.weight = t64(q)  # right_inverse: an orthogonal value is kept as is
    np.testing.assert_allclose(npy(m.weight), q, atol=1e-12)


def test_torch_parity_orthogonal():
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    for omap in ("matrix_exp", "cayley", "householder"):
        tm = torch.nn.utils.parametrizations.orthogonal(torch.nn.Linear(4, 4).double(), orthogonal_map=omap)
        lm = P.orthogonal(nn.Linear(4, 4).to(lucid.float64), orthogonal_map=omap)
        with torch.no_grad():
            tm.parametrizations.weight.original.add_(torch.randn(4, 4, dtype=torch.float64) * 0.3)
        assert sorted(tm.state_dict()) == sorted(lm.state_dict())
        lm.load_state_dict({k: v.detach().numpy().copy() for k, v in tm.state_dict().items()})
        x = RNG.normal(size=(2, 4))
        yl, yt = lm(t64(x)), tm(torch.tensor(x))
        np.testing.assert_allclose(npy(yl), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        yl.sum().backward()
        yt.sum().backward()
        np.testing.assert_allclose(npy(lm.parametrizations.weight.original.grad),
                                   tm.parametrizations.weight.original.grad.numpy(), rtol=1e-8, atol=1e-12)


@pytest.mark.parametrize("omap", ["matrix_exp", "cayley", "householder"])
def test_orthogonal_and_spectral_norm_on_a_device(omap):
    # the parametrization lives where the weight does: base, original and the power-method
    # buffers; right_inverse's QR is an explicit host round trip (NOTE [Orthogonal right_inverse
    # on the host]) whose results land back there
    from lucid.testing import strict_device

    strict_device.enable()
    S = lucid.device("strict", 0)
    lucid.manual_seed(0)
    for shape, trivial in (((5, 3), True), ((3, 5), True), ((4, 4), True), ((5, 3), omap != "householder")):
        m = P.orthogonal(nn.Linear(shape[1], shape[0]).to(lucid.float64).to(S), orthogonal_map=omap,
                         use_trivialization=trivial)
        w = m.weight
        assert w.device == S and all(v.device == S for v in m.state_dict().values())
        w = npy(w)
        gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
        np.testing.assert_allclose(gram, np.eye(min(shape)), atol=1e-12)
        m(t64(RNG.normal(size=(2, shape[1]))).to(S)).sum().backward()
        assert m.parametrizations.weight.original.grad.device == S
    if omap == "householder":
        m = P.orthogonal(nn.Linear(3, 5).to(lucid.float64).to(S), orthogonal_map=omap, use_trivialization=False)
        q = np.linalg.qr(RNG.normal(size=(5, 3)))[0]
        m.weight = t64(q).to(S)
        assert m.parametrizations.weight.original.device == S
        np.testing.assert_allclose(npy(m.weight), q, atol=1e-12)
    sn = P.spectral_norm(nn.Linear(4, 3).to(lucid.float64).to(S))
    u = sn.parametrizations.weight[0]._u
    assert u.device == S and sn.weight.device == S
    np.testing.assert_allclose(np.linalg.svd(npy(sn.weight), compute_uv=False)[0], 1.0, rtol=1e-6)
