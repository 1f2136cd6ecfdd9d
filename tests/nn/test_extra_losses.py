"""The added losses: NumPy closed forms (CTC by enumerating every alignment), float64
gradcheck, modules, PyTorch parity when installed."""
import itertools
import math

import numpy as np
import pytest

import lucid
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck

from conftest import assert_same_on_device

RNG = np.random.default_rng(51)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


X, Y, Z = (RNG.normal(size=(5, 4)) for _ in range(3))
V = np.abs(RNG.normal(size=(5, 4))) + 0.1
T_CLS = np.array([0, 3, 1, 1, 2])


def test_gaussian_nll():
    want = 0.5 * (np.log(V) + (X - Y) ** 2 / V) + 0.5 * math.log(2 * math.pi)
    np.testing.assert_allclose(npy(F.gaussian_nll_loss(t64(X), t64(Y), t64(V), full=True, reduction="none")), want,
                               rtol=1e-12)
    got = nn.GaussianNLLLoss()(t64(X), t64(Y), t64(V[:, 0]))  # one variance per sample
    np.testing.assert_allclose(got.item(), (0.5 * (np.log(V[:, :1]) + (X - Y) ** 2 / V[:, :1])).mean(), rtol=1e-12)
    assert gradcheck(lambda a, b, v: F.gaussian_nll_loss(a, b, v), (t64(X, True), t64(Y, True), t64(V, True)))
    if lucid.get_default_device().type == "cpu":  # a device does not read var back to check it
        with pytest.raises(ValueError, match="negative"):
            F.gaussian_nll_loss(t64(X), t64(Y), t64(-V))
    with pytest.raises(ValueError, match="size"):
        F.gaussian_nll_loss(t64(X), t64(Y), t64(V[:2]))


def test_triplet_losses():
    d = lambda a, b: np.linalg.norm(a - b + 1e-6, axis=-1)  # noqa: E731
    want = np.maximum(d(X, Y) - np.minimum(d(X, Z), d(Y, Z)) + 1.5, 0)
    got = nn.TripletMarginLoss(margin=1.5, swap=True, reduction="none")(t64(X), t64(Y), t64(Z))
    np.testing.assert_allclose(npy(got), want, rtol=1e-12)
    sq = lambda a, b: ((a - b) ** 2).sum(-1)  # noqa: E731
    got = nn.TripletMarginWithDistanceLoss(distance_function=sq, margin=2.0)(t64(X), t64(Y), t64(Z))
    np.testing.assert_allclose(got.item(), np.maximum(sq(X, Y) - sq(X, Z) + 2.0, 0).mean(), rtol=1e-12)
    assert gradcheck(lambda a, b, c: F.triplet_margin_loss(a, b, c, margin=3.0, p=3),
                     (t64(X, True), t64(Y, True), t64(Z, True)))


def test_cosine_embedding_loss():
    y = np.array([1, -1, 1, -1, -1])
    cos = (X * Y).sum(1) / np.sqrt(((X * X).sum(1) + 1e-12) * ((Y * Y).sum(1) + 1e-12))
    want = np.where(y == 1, 1 - cos, np.maximum(cos - 0.1, 0))
    got = nn.CosineEmbeddingLoss(0.1, reduction="none")(t64(X), t64(Y), lucid.tensor(y))
    np.testing.assert_allclose(npy(got), want, rtol=1e-12)
    assert gradcheck(lambda a, b: F.cosine_embedding_loss(a, b, lucid.tensor(y), 0.1), (t64(X, True), t64(Y, True)))


def test_multi_margin_loss():
    w = np.array([0.5, 1.0, 2.0, 1.5])
    for p in (1, 2):
        want = np.zeros(5)
        for n in range(5):
            for i in range(4):
                if i != T_CLS[n]:
                    want[n] += w[T_CLS[n]] * max(0.0, 0.7 - X[n, T_CLS[n]] + X[n, i]) ** p / 4
        got = nn.MultiMarginLoss(p, 0.7, t64(w), reduction="none")(t64(X), lucid.tensor(T_CLS))
        np.testing.assert_allclose(npy(got), want, rtol=1e-12)
    assert gradcheck(lambda a: F.multi_margin_loss(a, lucid.tensor(T_CLS), p=2), (t64(X, True),))


def test_multilabel_margin_and_soft_margin():
    tg = np.array([[3, 0, -1, 1], [1, -1, 0, 0], [0, 1, 2, 3], [-1, 0, 0, 0], [2, 2, -1, 0]])
    want = np.zeros(5)
    for n in range(5):
        js = list(itertools.takewhile(lambda j: j >= 0, tg[n]))
        for j in js:  # a repeated target counts again
            for i in range(4):
                if i not in js:
                    want[n] += max(0.0, 1 - (X[n, j] - X[n, i])) / 4
    got = nn.MultiLabelMarginLoss(reduction="none")(t64(X), lucid.tensor(tg))
    np.testing.assert_allclose(npy(got), want, rtol=1e-12)
    yb = (RNG.uniform(size=(5, 4)) > 0.5).astype(float)
    w = np.array([0.5, 1.0, 2.0, 1.5])
    ls = lambda v: -np.log1p(np.exp(-v))  # noqa: E731
    want = (-(yb * ls(X) + (1 - yb) * ls(-X)) * w).mean(1).mean()
    np.testing.assert_allclose(nn.MultiLabelSoftMarginLoss(t64(w))(t64(X), t64(yb)).item(), want, rtol=1e-12)
    assert gradcheck(lambda a: F.multilabel_margin_loss(a, lucid.tensor(tg)), (t64(X + 0.01, True),))
    cpu = lambda a: lucid.tensor(a, device="cpu")  # noqa: E731  (targets are range-checked on the CPU only)
    with pytest.raises(RuntimeError, match="target index 4 out of range for 4 classes"):
        F.multilabel_margin_loss(cpu(X), cpu(np.where(tg == 3, 4, tg)))
    # entries after the first -1 are not checked (nor counted)
    F.multilabel_margin_loss(cpu(X), cpu(np.array([[0, -1, 9, 9]] * 5)))


def test_extra_losses_on_a_device_match_the_cpu():
    from lucid.testing import strict_device

    strict_device.enable()
    tg = np.array([[3, 0, -1, 1], [1, -1, 0, 0], [0, 1, 2, 3], [-1, 0, 0, 0], [2, 2, -1, 0]])
    T, N, C = 6, 3, 4
    x = RNG.normal(size=(T, N, C))
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    ctc_t, ilens, tlens = np.array([[1, 2, 2], [3, 0, 0], [1, 1, 1]]), np.array([6, 5, 6]), np.array([3, 1, 2])
    cases = [
        ("multilabel_margin", X, lambda d, a: F.multilabel_margin_loss(a, lucid.tensor(tg, device=d)), False),
        ("multi_margin", X, lambda d, a: F.multi_margin_loss(a, lucid.tensor(T_CLS, device=d), p=2), False),
        ("gaussian_nll", X, lambda d, a: F.gaussian_nll_loss(a, lucid.tensor(Y, device=d),
                                                            lucid.tensor(V, device=d)), False),
        # CTC reads its targets and lengths on the host, explicitly (NOTE [CTC on the host])
        ("ctc", lp, lambda d, a: F.ctc_loss(a, lucid.tensor(ctc_t, device=d), lucid.tensor(ilens, device=d),
                                            lucid.tensor(tlens, device=d)), True),
        ("ctc_flat_lists", lp, lambda d, a: F.ctc_loss(a, lucid.tensor([1, 2, 2, 3, 1, 1], device=d),
                                                       list(ilens), list(tlens), reduction="sum"), True),
    ]
    for name, x0, fn, host_side in cases:
        assert_same_on_device(fn, x0, reads_host=host_side, what=name)


def _ctc_brute(lp, target, blank=0):
    """-log of the summed probability of every alignment that collapses to ``target``."""
    T, C = lp.shape
    total = 0.0
    for path in itertools.product(range(C), repeat=T):
        collapsed = [k for i, k in enumerate(path) if (i == 0 or k != path[i - 1])]
        if [k for k in collapsed if k != blank] == list(target):
            total += math.exp(sum(lp[t, k] for t, k in enumerate(path)))
    return -math.log(total) if total > 0 else math.inf


def test_ctc_loss_matches_enumeration():
    T, N, C = 5, 4, 3
    x = RNG.normal(size=(T, N, C))
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    targets = np.array([[1, 2, 0], [1, 1, 0], [2, 0, 0], [1, 2, 1]])
    tlens, ilens = np.array([2, 2, 1, 3]), np.array([5, 4, 5, 3])
    got = npy(F.ctc_loss(t64(lp), lucid.tensor(targets), ilens, tlens, reduction="none"))
    want = [_ctc_brute(lp[:ilens[n], n], targets[n, :tlens[n]]) for n in range(N)]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    flat = np.concatenate([targets[n, :tlens[n]] for n in range(N)])
    np.testing.assert_allclose(npy(nn.CTCLoss(reduction="none")(t64(lp), lucid.tensor(flat), ilens, tlens)), want,
                               rtol=1e-10)
    mean = nn.CTCLoss()(t64(lp), lucid.tensor(targets), ilens, tlens).item()
    np.testing.assert_allclose(mean, np.mean(np.array(want) / tlens), rtol=1e-10)
    f = lambda v: F.ctc_loss(v, lucid.tensor(targets), ilens, tlens, reduction="sum")  # noqa: E731
    assert gradcheck(f, (t64(lp, True),))


def test_ctc_impossible_alignment():
    lp = t64(np.log(np.full((2, 1, 3), 1 / 3)), True)
    loss = F.ctc_loss(lp, lucid.tensor([[1, 1]]), [2], [2], reduction="none")  # needs 3 frames
    assert math.isinf(loss.item())
    z = F.ctc_loss(lp, lucid.tensor([[1, 1]]), [2], [2], reduction="sum", zero_infinity=True)
    z.backward()
    assert z.item() == 0.0 and (npy(lp.grad) == 0).all()


def test_torch_parity_losses():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    L = lambda m: lucid if m is F else torch  # noqa: E731
    w = np.array([0.5, 1.0, 2.0, 1.5])
    cases = [
        (lambda m, a, b, c: m.gaussian_nll_loss(a, b, c, full=True), (X, Y, V)),
        (lambda m, a, b, c: m.triplet_margin_loss(a, b, c, margin=2.0, p=3, swap=True), (X, Y, Z)),
        (lambda m, a, b: m.cosine_embedding_loss(a, b, L(m).tensor([1, -1, 1, -1, 1]), 0.2), (X, Y)),
        (lambda m, a: m.multi_margin_loss(a, L(m).tensor(T_CLS), p=2, weight=L(m).tensor(w)), (X,)),
        (lambda m, a: m.multilabel_soft_margin_loss(a, L(m).tensor((X > 0).astype(float))), (Y,)),
    ]
    for f, args in cases:
        la, ta = [t64(a, True) for a in args], [torch.tensor(a, requires_grad=True) for a in args]
        ol, ot = f(F, *la), f(tf, *ta)
        np.testing.assert_allclose(npy(ol), ot.detach().numpy(), rtol=1e-10)
        ol.backward()
        ot.backward()
        for a, b in zip(la, ta):
            np.testing.assert_allclose(npy(a.grad), b.grad.numpy(), rtol=1e-9, atol=1e-12)
    # CTC: PyTorch's gradient w.r.t. log_probs carries an extra exp(log_probs) term that cancels
    # through log_softmax; compare the gradients w.r.t. the logits.
    x = RNG.normal(size=(8, 3, 5))
    tg, il, tl = np.array([[1, 2, 2], [3, 4, 0], [1, 1, 1]]), np.array([8, 6, 7]), np.array([3, 2, 3])
    xl, xt = t64(x, True), torch.tensor(x, requires_grad=True)
    ol = F.ctc_loss(F.log_softmax(xl, 2), lucid.tensor(tg), il, tl)
    ot = tf.ctc_loss(tf.log_softmax(xt, 2), torch.tensor(tg), torch.tensor(il), torch.tensor(tl))
    np.testing.assert_allclose(ol.item(), ot.item(), rtol=1e-10)
    ol.backward()
    ot.backward()
    np.testing.assert_allclose(npy(xl.grad), xt.grad.numpy(), rtol=1e-8, atol=1e-12)
