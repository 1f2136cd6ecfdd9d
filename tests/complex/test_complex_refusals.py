"""Losses and real functions refuse complex input as PyTorch does (NOTE [Losses refuse complex
input]); the losses PyTorch does compute for complex input give its values and gradients."""
import numpy as np
import pytest

import lucid
import lucid.nn.functional as F
import lucid.special as S

RNG = np.random.default_rng(7)
Z = RNG.standard_normal((2, 3)) + 1j * RNG.standard_normal((2, 3))
W = RNG.standard_normal((2, 3)) + 1j * RNG.standard_normal((2, 3))
R = RNG.uniform(0.2, 0.8, (2, 3))


def c(a=Z):
    return lucid.tensor(a)


REFUSED = {
    "mse_loss": lambda: F.mse_loss(c(), c(W)),
    "smooth_l1_loss": lambda: F.smooth_l1_loss(c(), lucid.tensor(R)),
    "huber_loss": lambda: F.huber_loss(lucid.tensor(R), c(W)),
    "nll_loss": lambda: F.nll_loss(c(), lucid.tensor([0, 2])),
    "cross_entropy": lambda: F.cross_entropy(c(), lucid.tensor([0, 2])),
    "binary_cross_entropy": lambda: F.binary_cross_entropy(c(), c(W)),
    "binary_cross_entropy_with_logits": lambda: F.binary_cross_entropy_with_logits(c(), c(W)),
    "kl_div": lambda: F.kl_div(c(), c(W)),
    "soft_margin_loss": lambda: F.soft_margin_loss(c(), c(W)),
    "margin_ranking_loss": lambda: F.margin_ranking_loss(c()[0], c(W)[0], lucid.tensor([1.0, -1.0, 1.0])),
    "hinge_embedding_loss": lambda: F.hinge_embedding_loss(c(), lucid.tensor(np.sign(R - 0.5))),
    "cosine_embedding_loss": lambda: F.cosine_embedding_loss(c(), c(W), lucid.tensor([1.0, -1.0])),
    "multi_margin_loss": lambda: F.multi_margin_loss(c(), lucid.tensor([0, 2])),
    "multilabel_margin_loss": lambda: F.multilabel_margin_loss(c(), lucid.tensor([[0, 1, -1], [2, -1, 0]])),
    "multilabel_soft_margin_loss": lambda: F.multilabel_soft_margin_loss(c(), lucid.tensor(R)),
    "ctc_loss": lambda: F.ctc_loss(lucid.tensor(np.ones((5, 2, 4)) * (0.1 + 0.1j)), lucid.tensor([[1, 2], [1, 1]]),
                                   lucid.tensor([5, 5]), lucid.tensor([2, 2])),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_loss_refuses_complex(name):
    with pytest.raises(TypeError, match=f"^{name}: complex inputs are not supported, as in PyTorch"):
        REFUSED[name]()


def test_loss_modules_refuse_complex_and_real_input_still_works():
    with pytest.raises(TypeError, match="mse_loss: complex inputs are not supported.*complex128"):
        lucid.nn.MSELoss()(c(), lucid.tensor(R))
    assert F.mse_loss(lucid.tensor(R), lucid.tensor(R * 0)).item() == pytest.approx(np.mean(R ** 2), rel=1e-14)


def test_l1_loss_of_complex_is_the_mean_modulus_with_its_gradient():
    z = c().requires_grad_()
    loss = F.l1_loss(z, c(W))
    assert loss.dtype == lucid.float64
    np.testing.assert_allclose(loss.item(), np.abs(Z - W).mean(), rtol=1e-14)
    loss.backward()
    # d|d|/d(re) + i d|d|/d(im) = d / |d|, over n elements
    np.testing.assert_allclose(z.grad.numpy(), (Z - W) / np.abs(Z - W) / Z.size, rtol=1e-13)


def test_losses_torch_accepts_match_torch():
    torch = pytest.importorskip("torch")
    cases = [
        ("l1_loss", lambda f, z, w, r: f.l1_loss(z, w)),
        ("triplet_margin_loss", lambda f, z, w, r: f.triplet_margin_loss(z, w, w * 0.5)),
        ("poisson_nll_loss", lambda f, z, w, r: f.poisson_nll_loss(z, w)),
        ("gaussian_nll_loss", lambda f, z, w, r: f.gaussian_nll_loss(z, w, r)),
    ]
    for name, call in cases:
        zl = c().requires_grad_()
        zt = torch.tensor(Z, requires_grad=True)
        ll = call(F, zl, c(W), lucid.tensor(R))
        lt = call(torch.nn.functional, zt, torch.tensor(W), torch.tensor(R))
        np.testing.assert_allclose(ll.detach().numpy(), lt.detach().numpy(), rtol=1e-12, err_msg=name)
        # a real loss from each: its gradient follows PyTorch's convention
        (ll.real if ll.dtype.is_complex else ll).sum().backward()
        (lt.real if lt.is_complex() else lt).sum().backward()
        np.testing.assert_allclose(zl.grad.numpy(), zt.grad.numpy(), rtol=1e-10, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("call", [lambda z: S.gammainc(1.5, z), lambda z: S.gammaincc(z, 1.0),
                                  lambda z: S.betainc(1.0, 2.0, z), lambda z: lucid.logit(z),
                                  lambda z: S.multigammaln(z + 3, 2)],
                         ids=["gammainc", "gammaincc", "betainc", "logit", "multigammaln"])
def test_real_functions_refuse_complex(call):
    # Before: gammainc silently dropped the imaginary part (SciPy's float64 cast).
    with pytest.raises(TypeError, match="complex"):
        call(lucid.tensor([0.3 + 0.2j]))


Z4 = RNG.standard_normal((2, 4, 4, 4)) + 1j * RNG.standard_normal((2, 4, 4, 4))

NN_REFUSED = {
    "layer_norm": lambda z: F.layer_norm(z, (4,)),
    "group_norm": lambda z: F.group_norm(z, 2),
    "batch_norm": lambda z: F.batch_norm(z, None, None, training=True),
    "instance_norm": lambda z: F.instance_norm(z),
    "local_response_norm": lambda z: F.local_response_norm(z, 2),
    "mish": F.mish,
    "logsigmoid": F.logsigmoid,
    "glu": lambda z: F.glu(z, 1),
    "adaptive_avg_pool1d": lambda z: F.adaptive_avg_pool1d(z[0], 2),
    "adaptive_avg_pool2d": lambda z: F.adaptive_avg_pool2d(z, 2),
    "adaptive_avg_pool3d": lambda z: F.adaptive_avg_pool3d(z, 2),
    "interpolate": lambda z: F.interpolate(z, scale_factor=2),
    "embedding_bag": lambda z: F.embedding_bag(lucid.tensor([[0, 1]]), z[0, 0]),
    "cosine_similarity": lambda z: F.cosine_similarity(z, z),
}


@pytest.mark.parametrize("name", sorted(NN_REFUSED))
def test_nn_functions_pytorch_refuses_on_complex_refuse(name):
    with pytest.raises(TypeError, match=f"^{name}: complex inputs are not supported, as in PyTorch"):
        NN_REFUSED[name](lucid.tensor(Z4))


def test_max_pool_refuses_complex_and_modules_refuse_too():
    # Before: max pooling ordered complex numbers lexicographically (PyTorch refuses).
    for name, f in (("max_pool2d", lambda z: F.max_pool2d(z, 2)), ("max_pool1d", lambda z: F.max_pool1d(z[0], 2)),
                    ("max_pool2d", lambda z: lucid.nn.MaxPool2d(2)(z))):
        with pytest.raises(TypeError, match=f"^{name}: complex inputs are not supported"):
            f(lucid.tensor(Z4))
    from lucid._core.primitive import TN  # the primitive itself refuses too (NOTE [No order on complex numbers])
    with pytest.raises(TypeError, match="pool_argmax: not supported for complex tensors"):
        TN.pool_argmax(lucid.tensor(Z4), ksize=(2, 2), stride=(2, 2), padding=((0, 0), (0, 0)), dilation=(1, 1))
    with pytest.raises(TypeError, match="^layer_norm: complex inputs"):
        lucid.nn.LayerNorm(4, dtype=lucid.complex128)(lucid.tensor(Z4))
    real = lucid.tensor(Z4.real)
    assert F.layer_norm(real, (4,)).shape == (2, 4, 4, 4) and F.max_pool2d(real, 2).shape == (2, 4, 2, 2)


ORDER_REFUSED = {
    "searchsorted": lambda z: lucid.searchsorted(z[0], z[1]),
    "bucketize": lambda z: lucid.bucketize(z, z[0]),
    "histc": lambda z: lucid.histc(z),
    "histogram": lambda z: lucid.histogram(z),
    "unique": lambda z: lucid.unique(z),
    "unique_consecutive": lambda z: lucid.unique_consecutive(z),
}


@pytest.mark.parametrize("name", sorted(ORDER_REFUSED))
def test_ops_built_on_an_order_refuse_complex(name):
    # Before: NumPy ordered complex numbers lexicographically (histc dropped the imaginary part).
    with pytest.raises(TypeError, match=f"^{name}: not supported for complex tensors .complex numbers have no order"):
        ORDER_REFUSED[name](c())
    ORDER_REFUSED[name](lucid.tensor(np.sort(R, axis=-1)))  # real input still works


def test_cdist_refuses_complex_as_pytorch():
    with pytest.raises(TypeError, match="^cdist: complex inputs are not supported, as in PyTorch"):
        lucid.cdist(c(), c(W))
