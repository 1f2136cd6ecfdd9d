"""Losses: forward vs NumPy references for every reduction, gradcheck in float64, modules."""
import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck

from conftest import assert_same_on_device

RNG = np.random.default_rng(1)


def T(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def _red(loss, reduction):
    return {"none": loss, "mean": loss.mean(), "sum": loss.sum()}[reduction]


def _logsm(x, axis=1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


X = RNG.normal(size=(4, 3))
Y = RNG.normal(size=(4, 3))
P = RNG.uniform(0.05, 0.95, size=(4, 3))
B = (RNG.uniform(size=(4, 3)) > 0.5).astype(np.float64)

ELEMENTWISE = [
    ("mse", lambda a, b, r: F.mse_loss(a, b, reduction=r), lambda a, b: (a - b) ** 2, X, Y),
    ("l1", lambda a, b, r: F.l1_loss(a, b, reduction=r), lambda a, b: np.abs(a - b), X, Y),
    ("smooth_l1", lambda a, b, r: F.smooth_l1_loss(a, b, reduction=r, beta=0.7),
     lambda a, b: np.where(np.abs(a - b) < 0.7, 0.5 * (a - b) ** 2 / 0.7, np.abs(a - b) - 0.35), X, Y),
    ("huber", lambda a, b, r: F.huber_loss(a, b, reduction=r, delta=0.7),
     lambda a, b: np.where(np.abs(a - b) <= 0.7, 0.5 * (a - b) ** 2, 0.7 * (np.abs(a - b) - 0.35)), X, Y),
    ("bce", lambda a, b, r: F.binary_cross_entropy(a, b, reduction=r),
     lambda p, t: -(t * np.log(p) + (1 - t) * np.log(1 - p)), P, B),
    ("bce_logits", lambda a, b, r: F.binary_cross_entropy_with_logits(a, b, reduction=r),
     lambda x, t: -(t * np.log(1 / (1 + np.exp(-x))) + (1 - t) * np.log(1 - 1 / (1 + np.exp(-x)))), X, B),
    ("bce_logits_pw", lambda a, b, r: F.binary_cross_entropy_with_logits(
        a, b, reduction=r, pos_weight=T([1.0, 2.0, 0.5])),
     lambda x, t: -(np.array([1.0, 2.0, 0.5]) * t * np.log(1 / (1 + np.exp(-x)))
                    + (1 - t) * np.log(1 - 1 / (1 + np.exp(-x)))), X, B),
    ("kl_div", lambda a, b, r: F.kl_div(a, b, reduction=r), lambda lp, t: t * (np.log(t) - lp),
     _logsm(X), P / P.sum(1, keepdims=True)),
    ("kl_div_log_target", lambda a, b, r: F.kl_div(a, b, reduction=r, log_target=True),
     lambda lp, lt: np.exp(lt) * (lt - lp), _logsm(X), _logsm(Y)),
]


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name,fn,ref,a,b", ELEMENTWISE, ids=[c[0] for c in ELEMENTWISE])
def test_elementwise_losses(name, fn, ref, a, b, reduction):
    out = fn(T(a), T(b), reduction)
    np.testing.assert_allclose(out.numpy(), _red(ref(a, b), reduction), rtol=1e-10, atol=1e-12)
    assert gradcheck(lambda x, y: fn(x, y, reduction), (T(a, True), T(b, True)))


def test_kl_div_batchmean_and_zero_target():
    t = np.array([[0.0, 0.5, 0.5]])
    lp = _logsm(X[:1])
    out = F.kl_div(T(lp), T(t), reduction="batchmean")
    np.testing.assert_allclose(out.item(), np.sum(0.5 * (np.log(0.5) - lp[0, 1:])))


def test_bce_logits_stable():
    out = F.binary_cross_entropy_with_logits(T([1000.0, -1000.0]), T([0.0, 1.0]), reduction="none")
    np.testing.assert_allclose(out.numpy(), [1000.0, 1000.0])
    out = F.binary_cross_entropy(T([0.0, 1.0]), T([1.0, 0.0]), reduction="none")
    np.testing.assert_allclose(out.numpy(), [100.0, 100.0])  # logs clamped at -100


def _ce_ref(x, t, w=None, ignore=-100, reduction="mean", eps=0.0):
    """Cross entropy for (N, C, ...) logits with PyTorch's conventions, in NumPy."""
    lp = _logsm(x, 1)
    c = x.shape[1]
    w = np.ones(c) if w is None else w
    valid = t != ignore
    ts = np.where(valid, t, 0)
    picked = np.take_along_axis(lp, ts[:, None], 1)[:, 0]
    wt = w[ts] * valid
    nll = -picked * wt
    smooth = -(lp * w.reshape((1, c) + (1,) * (x.ndim - 2))).sum(1) * valid
    if reduction == "none":
        return (1 - eps) * nll + eps / c * smooth
    if reduction == "sum":
        return (1 - eps) * nll.sum() + eps / c * smooth.sum()
    return (1 - eps) * nll.sum() / wt.sum() + eps / c * smooth.sum() / wt.sum()


CE_CASES = [
    dict(), dict(reduction="sum"), dict(reduction="none"),
    dict(w=np.array([0.2, 1.0, 3.0])), dict(w=np.array([0.2, 1.0, 3.0]), reduction="none"),
    dict(ignore=1), dict(ignore=1, w=np.array([0.2, 1.0, 3.0])),
    dict(eps=0.1), dict(eps=0.2, w=np.array([0.2, 1.0, 3.0]), ignore=2),
    dict(eps=0.1, reduction="sum"), dict(eps=0.1, reduction="none", ignore=0),
]


@pytest.mark.parametrize("kw", CE_CASES, ids=[str(sorted(k)) + k.get("reduction", "") for k in CE_CASES])
@pytest.mark.parametrize("spatial", [False, True])
def test_cross_entropy_indices(kw, spatial):
    x = RNG.normal(size=(5, 3, 2) if spatial else (5, 3))
    t = RNG.integers(0, 3, size=(5, 2) if spatial else (5,))
    t[0] = kw.get("ignore", 0) if kw.get("ignore", -100) >= 0 else t[0]
    w = kw.get("w")
    call = dict(weight=None if w is None else T(w), ignore_index=kw.get("ignore", -100),
                reduction=kw.get("reduction", "mean"), label_smoothing=kw.get("eps", 0.0))
    out = F.cross_entropy(T(x), lucid.tensor(t), **call)
    np.testing.assert_allclose(out.numpy(), _ce_ref(x, t, **kw), rtol=1e-10, atol=1e-12)
    assert gradcheck(lambda a: F.cross_entropy(a, lucid.tensor(t), **call), (T(x, True),))
    mod = nn.CrossEntropyLoss(weight=call["weight"], ignore_index=call["ignore_index"],
                              reduction=call["reduction"], label_smoothing=call["label_smoothing"])
    np.testing.assert_allclose(mod(T(x), lucid.tensor(t)).numpy(), out.numpy())


def test_cross_entropy_probabilities():
    x = RNG.normal(size=(4, 3))
    p = RNG.uniform(size=(4, 3))
    p /= p.sum(1, keepdims=True)
    w = np.array([0.5, 1.0, 2.0])
    out = F.cross_entropy(T(x), T(p))
    np.testing.assert_allclose(out.item(), -(p * _logsm(x)).sum(1).mean())
    out = F.cross_entropy(T(x), T(p), weight=T(w), label_smoothing=0.3, reduction="sum")
    ps = p * 0.7 + 0.1
    np.testing.assert_allclose(out.item(), -(ps * w * _logsm(x)).sum())
    assert gradcheck(lambda a, b: F.cross_entropy(a, b), (T(x, True), T(p, True)))


def test_cross_entropy_unbatched_and_float32():
    x = np.array([1.0, 2.0, 0.5])
    out = F.cross_entropy(T(x), lucid.tensor(1))
    np.testing.assert_allclose(out.item(), -_logsm(x[None])[0, 1])
    out32 = F.cross_entropy(lucid.tensor([[1.0, 2.0]]), lucid.tensor([0]))
    assert out32.dtype == np.float32


def test_cross_entropy_errors():
    with pytest.raises(ValueError, match=r"cross_entropy: expected target of shape \(2,\)"):
        F.cross_entropy(lucid.zeros(2, 3), lucid.tensor([0, 1, 2]))
    if lucid.get_default_device().type == "cpu":  # on a device targets are not range-checked (README)
        with pytest.raises(ValueError, match="one_hot"):
            F.cross_entropy(lucid.zeros(2, 3), lucid.tensor([0, 5]))
    with pytest.raises(ValueError, match="reduction"):
        F.cross_entropy(lucid.zeros(2, 3), lucid.tensor([0, 1]), reduction="avg")


def test_nll_loss():
    x = _logsm(RNG.normal(size=(4, 3)))
    t = np.array([0, 2, 1, 2])
    w = np.array([1.0, 2.0, 0.5])
    out = F.nll_loss(T(x), lucid.tensor(t), weight=T(w))
    picked = x[np.arange(4), t]
    np.testing.assert_allclose(out.item(), -(picked * w[t]).sum() / w[t].sum())
    out = nn.NLLLoss(reduction="none", ignore_index=2)(T(x), lucid.tensor(t))
    np.testing.assert_allclose(out.numpy(), np.where(t == 2, 0.0, -picked))
    assert gradcheck(lambda a: F.nll_loss(a, lucid.tensor(t)), (T(x, True),))


def test_loss_modules_and_reprs():
    a, b = T(X), T(Y)
    np.testing.assert_allclose(nn.MSELoss(reduction="sum")(a, b).item(), ((X - Y) ** 2).sum())
    np.testing.assert_allclose(nn.L1Loss()(a, b).item(), np.abs(X - Y).mean())
    np.testing.assert_allclose(nn.SmoothL1Loss(beta=0.5)(a, b).item(),
                               F.smooth_l1_loss(a, b, beta=0.5).item())
    np.testing.assert_allclose(nn.HuberLoss(delta=2.0)(a, b).item(), F.huber_loss(a, b, delta=2.0).item())
    np.testing.assert_allclose(nn.BCELoss()(T(P), T(B)).item(), F.binary_cross_entropy(T(P), T(B)).item())
    pw = T([1.0, 2.0, 3.0])
    np.testing.assert_allclose(nn.BCEWithLogitsLoss(pos_weight=pw)(a, T(B)).item(),
                               F.binary_cross_entropy_with_logits(a, T(B), pos_weight=pw).item())
    np.testing.assert_allclose(nn.KLDivLoss(reduction="batchmean")(a, T(P)).item(),
                               F.kl_div(a, T(P), reduction="batchmean").item())
    assert repr(nn.MSELoss()) == "MSELoss()"
    assert "weight" in dict(nn.CrossEntropyLoss(weight=lucid.ones(3)).named_buffers())


def test_legacy_reduction_args():
    with pytest.warns(UserWarning):
        out = F.mse_loss(T(X), T(Y), reduce=False)
    assert out.shape == X.shape


def test_mse_shape_warning():
    with pytest.warns(UserWarning, match="target size"):
        F.mse_loss(lucid.zeros(3, 1), lucid.zeros(3))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape,target", [((4, 5), [0, 4, 2, 2]), ((5,), 3), ((3, 4), [1, -100, 3])])
def test_cross_entropy_eager_backward_matches_the_differentiable_rule(reduction, shape, target):
    # The eager backward of the fused cross-entropy has a NumPy fast path (every target a
    # class); the create_graph backward runs the generic rule. Both must agree, and match
    # finite differences.
    rng = np.random.default_rng(3)
    x0 = rng.standard_normal(shape)
    t = lucid.tensor(np.array(target))
    w = rng.standard_normal(np.shape(target)) if reduction == "none" else 1.0

    def loss(x):
        out = F.cross_entropy(x, t, reduction=reduction)
        return (out * lucid.tensor(w)).sum() if reduction == "none" else out

    x = lucid.tensor(x0, requires_grad=True)
    loss(x).backward()
    x2 = lucid.tensor(x0, requires_grad=True)
    (g_graph,) = lucid.autograd.grad(loss(x2), [x2], create_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), g_graph.detach().numpy(), rtol=1e-12, atol=1e-12)
    eps, fd = 1e-6, np.zeros_like(x0)
    for i in np.ndindex(*shape):
        d = np.zeros_like(x0)
        d[i] = eps
        fd[i] = (loss(lucid.tensor(x0 + d)).item() - loss(lucid.tensor(x0 - d)).item()) / (2 * eps)
    np.testing.assert_allclose(x.grad.numpy(), fd, rtol=1e-6, atol=1e-8)


# ------------------------------------------------------------ on a device (the strict stand-in)
_DEV_T = np.array([0, 2, 1, -100, 2])
_DEV_W = np.array([0.5, 1.0, 2.0])
DEVICE_CASES = [
    ("nll", lambda d, x: F.nll_loss(F.log_softmax(x, 1), lucid.tensor(_DEV_T, device=d))),
    ("nll_weighted", lambda d, x: F.nll_loss(F.log_softmax(x, 1), lucid.tensor(_DEV_T, device=d),
                                             weight=lucid.tensor(_DEV_W, device=d))),
    ("nll_none", lambda d, x: F.nll_loss(x, lucid.tensor(_DEV_T, device=d), reduction="none").sum()),
    ("nll_all_ignored", lambda d, x: F.nll_loss(x, lucid.tensor([-100] * 5, device=d))),
    ("ce_weighted", lambda d, x: F.cross_entropy(x, lucid.tensor(_DEV_T, device=d),
                                                 weight=lucid.tensor(_DEV_W, device=d))),
    ("ce_smoothed", lambda d, x: F.cross_entropy(x, lucid.tensor(_DEV_T, device=d), label_smoothing=0.1)),
    ("ce_spatial", lambda d, x: F.cross_entropy(x.reshape(5, 3, 1), lucid.tensor(_DEV_T.reshape(5, 1), device=d))),
    ("bce", lambda d, x: F.binary_cross_entropy(F.sigmoid(x), lucid.tensor(np.eye(5, 3), device=d))),
]


@pytest.mark.parametrize("name,fn", DEVICE_CASES, ids=[c[0] for c in DEVICE_CASES])
def test_class_losses_on_a_device_match_the_cpu_and_read_nothing_back(name, fn):
    assert_same_on_device(fn, RNG.normal(size=(5, 3)), what=name)


def test_binary_cross_entropy_gradient_at_the_boundary_is_pytorchs():
    # PyTorch's backward: grad * (p - t) / max((1 - p) p, 1e-12 as a C++ float); the clamped
    # logs' own derivative would be 0 * inf = nan at p == t == 0 or 1.
    eps = float(np.float32(1e-12))
    p = lucid.tensor([0.0, 1.0, 0.3, 1.0, 0.0], dtype=lucid.float64, requires_grad=True)
    t = lucid.tensor([0.0, 1.0, 0.6, 0.0, 1.0], dtype=lucid.float64)
    loss = lucid.nn.functional.binary_cross_entropy(p, t, reduction="sum")
    loss.backward()
    assert loss.item() == pytest.approx(200 - (0.6 * np.log(0.3) + 0.4 * np.log(0.7)))
    assert p.grad.tolist() == [0.0, 0.0, pytest.approx((0.3 - 0.6) / (0.3 * 0.7)), 1 / eps, -1 / eps]
    assert lucid.autograd.gradgradcheck(
        lambda q: lucid.nn.functional.binary_cross_entropy(q, t[2:3]), (p[2:3].detach().requires_grad_(),))
