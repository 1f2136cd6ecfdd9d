"""New functional ops and their modules: distances, shrink functions, prelu/rrelu,
gumbel_softmax. Values vs NumPy closed forms, gradients by float64 gradcheck, PyTorch parity
when torch is installed."""
import numpy as np
import pytest

import lucid
import lucid.func as func
import lucid.nn as nn
import lucid.nn.functional as F
from lucid.autograd import gradcheck

RNG = np.random.default_rng(11)


def t64(a, rg=False):
    return lucid.tensor(np.asarray(a, dtype=np.float64), requires_grad=rg)


def npy(t):
    return t.detach().numpy()


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
def test_pairwise_distance(p):
    a, b = RNG.normal(size=(4, 5)), RNG.normal(size=(4, 5))
    want = np.linalg.norm(a - b + 1e-6, ord=p, axis=-1)
    np.testing.assert_allclose(npy(F.pairwise_distance(t64(a), t64(b), p)), want, rtol=1e-12)
    np.testing.assert_allclose(npy(nn.PairwiseDistance(p, keepdim=True)(t64(a), t64(b))), want[:, None],
                               rtol=1e-12)
    assert gradcheck(lambda x, y: F.pairwise_distance(x, y, p), (t64(a, True), t64(b, True)))


@pytest.mark.parametrize("p", [1.0, 2.0, 2.5])
def test_pdist(p):
    x = RNG.normal(size=(5, 3))
    i, j = np.triu_indices(5, 1)
    want = np.linalg.norm(x[i] - x[j], ord=p, axis=-1)
    np.testing.assert_allclose(npy(F.pdist(t64(x), p)), want, rtol=1e-12)
    assert gradcheck(lambda v: F.pdist(v, p), (t64(x, True),))


def test_pdist_equal_rows_gradient_is_zero():
    x = t64([[1.0, 2.0], [1.0, 2.0]], True)
    F.pdist(x).sum().backward()
    np.testing.assert_array_equal(npy(x.grad), np.zeros((2, 2)))


def test_shrink_and_prelu_values():
    x = np.array([-1.2, -0.4, 0.0, 0.3, 0.9])
    np.testing.assert_array_equal(npy(F.hardshrink(t64(x), 0.5)), np.where(np.abs(x) > 0.5, x, 0))
    np.testing.assert_allclose(npy(F.softshrink(t64(x), 0.5)),
                               np.sign(x) * np.maximum(np.abs(x) - 0.5, 0), rtol=1e-12)
    xs = RNG.normal(size=(2, 3, 4))
    w = np.array([0.1, 0.2, 0.3])
    np.testing.assert_allclose(npy(F.prelu(t64(xs), t64(w))),
                               np.where(xs >= 0, xs, w[None, :, None] * xs), rtol=1e-12)
    assert gradcheck(F.prelu, (t64(xs + 0.01, True), t64(w, True)))
    assert gradcheck(lambda v: F.softshrink(v, 0.3), (t64(xs * 0.9 + 0.011, True),))


def test_rrelu_eval_and_training():
    x = t64(RNG.normal(size=(200,)))
    np.testing.assert_allclose(npy(F.rrelu(x, 0.1, 0.3)), np.where(npy(x) >= 0, npy(x), 0.2 * npy(x)))
    lucid.manual_seed(0)
    y = npy(F.rrelu(x, 0.1, 0.3, training=True))
    neg = npy(x) < 0
    slopes = y[neg] / npy(x)[neg]
    assert slopes.min() >= 0.1 and slopes.max() <= 0.3 and slopes.std() > 0.01
    np.testing.assert_array_equal(y[~neg], npy(x)[~neg])


def test_gumbel_softmax():
    lucid.manual_seed(0)
    logits = t64(np.log([[0.7, 0.2, 0.1]]).repeat(4000, 0), True)
    y = F.gumbel_softmax(logits, tau=0.5, hard=True)
    freq = npy(y).mean(0)
    np.testing.assert_allclose(npy(y).sum(1), 1.0)
    # hard samples are exact categorical draws: 3 sigma of a binomial with n = 4000
    np.testing.assert_allclose(freq, [0.7, 0.2, 0.1], atol=3 * np.sqrt(0.25 / 4000))
    (y * t64(np.arange(3.0))).sum().backward()  # straight-through: the soft sample's gradient
    assert np.isfinite(npy(logits.grad)).all() and np.abs(npy(logits.grad)).sum() > 0
    soft = F.gumbel_softmax(logits[:3], tau=2.0)
    np.testing.assert_allclose(npy(soft).sum(1), 1.0, rtol=1e-12)


def test_torch_parity_activations_and_distances():
    torch = pytest.importorskip("torch")
    tf = torch.nn.functional
    x = RNG.normal(size=(3, 4, 2))
    w = np.array([0.1, -0.2, 0.3, 0.4])
    cases = [
        (lambda v: F.hardshrink(v, 0.4), lambda v: tf.hardshrink(v, 0.4)),
        (lambda v: F.softshrink(v, 0.4), lambda v: tf.softshrink(v, 0.4)),
        (lambda v: F.prelu(v, t64(w)), lambda v: tf.prelu(v, torch.tensor(w))),
        (lambda v: F.rrelu(v, 0.2, 0.4), lambda v: tf.rrelu(v, 0.2, 0.4)),
        (lambda v: F.pdist(v.reshape(6, 4), 3.0), lambda v: tf.pdist(v.reshape(6, 4), 3.0)),
        (lambda v: F.pairwise_distance(v[0], v[1]), lambda v: tf.pairwise_distance(v[0], v[1])),
        (lambda v: F.cosine_similarity(v[:1], v, dim=1), lambda v: tf.cosine_similarity(v[:1], v, dim=1)),
        (lambda v: F.normalize(v, p=3, dim=1), lambda v: tf.normalize(v, p=3, dim=1)),
        (lambda v: F.elu(v * 0, 1.3), lambda v: tf.elu(v * 0, 1.3)),
        (lambda v: F.selu(v * 0), lambda v: tf.selu(v * 0)),
        (lambda v: F.celu(v * 0, 0.7), lambda v: tf.celu(v * 0, 0.7)),
    ]
    for fl, ft in cases:
        xl, xt = t64(x, True), torch.tensor(x, requires_grad=True)
        yl, yt = fl(xl), ft(xt)
        np.testing.assert_allclose(npy(yl), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
        g = RNG.normal(size=tuple(yt.shape))
        yl.backward(t64(g))
        yt.backward(torch.tensor(g))
        np.testing.assert_allclose(npy(xl.grad), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_new_functionals_under_vmap():
    xs = t64(RNG.normal(size=(3, 4, 2)))
    out = func.vmap(lambda v: F.pdist(v))(xs)
    np.testing.assert_allclose(npy(out), np.stack([npy(F.pdist(xs[i])) for i in range(3)]), rtol=1e-12)
    out = func.vmap(lambda v: F.softshrink(v, 0.2))(xs)
    np.testing.assert_allclose(npy(out), npy(F.softshrink(xs, 0.2)), rtol=1e-12)
