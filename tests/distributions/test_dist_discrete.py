"""Bernoulli, Categorical, OneHotCategorical: probabilities, entropies, samples and gradients."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import (Bernoulli, Categorical, OneHotCategorical,
                                 OneHotCategoricalStraightThrough)

from disthelpers import Z, check_moments, f64


def test_bernoulli_probs_and_logits_agree():
    p = np.array([0.1, 0.5, 0.8])
    a, b = Bernoulli(probs=f64(p)), Bernoulli(logits=f64(np.log(p / (1 - p))))
    x = f64([1.0, 0.0, 1.0])
    expected = np.log(np.where(x.numpy() == 1, p, 1 - p))
    np.testing.assert_allclose(a.log_prob(x).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(b.log_prob(x).numpy(), expected, rtol=1e-12)
    ent = -(p * np.log(p) + (1 - p) * np.log(1 - p))
    np.testing.assert_allclose(a.entropy().numpy(), ent, rtol=1e-12)
    np.testing.assert_allclose(b.probs.numpy(), p, rtol=1e-12)
    np.testing.assert_allclose(a.variance.numpy(), p * (1 - p))
    mode = a.mode.numpy()
    assert mode[0] == 0 and math.isnan(mode[1]) and mode[2] == 1


def test_bernoulli_extreme_logits_are_finite():
    d = Bernoulli(logits=f64([-800.0, 800.0]))
    np.testing.assert_allclose(d.log_prob(f64([0.0, 1.0])).numpy(), [0.0, 0.0], atol=1e-300)
    assert np.isfinite(d.entropy().numpy()).all()


def test_bernoulli_samples_and_enumerate_support():
    d = Bernoulli(probs=f64([0.2, 0.7]))
    s = check_moments(d, n=20000)
    assert set(np.unique(s)) <= {0.0, 1.0}
    sup = d.enumerate_support()
    assert sup.shape == (2, 2) and sup[:, 0].tolist() == [0.0, 1.0]
    assert d.enumerate_support(expand=False).shape == (2, 1)


def test_categorical_normalises_and_log_prob():
    w = np.array([[1.0, 2.0, 5.0], [3.0, 3.0, 2.0]])
    p = w / w.sum(-1, keepdims=True)
    a = Categorical(probs=f64(w))
    b = Categorical(logits=f64(np.log(w) + 7.0))  # unnormalised logits
    np.testing.assert_allclose(a.probs.numpy(), p, rtol=1e-12)
    np.testing.assert_allclose(b.probs.numpy(), p, rtol=1e-12)
    v = lucid.tensor([2, 0])
    np.testing.assert_allclose(a.log_prob(v).numpy(), np.log([p[0, 2], p[1, 0]]), rtol=1e-12)
    np.testing.assert_allclose(b.log_prob(v).numpy(), np.log([p[0, 2], p[1, 0]]), rtol=1e-12)
    # value broadcasting: sample_shape x batch_shape
    vv = lucid.tensor([[0, 1], [2, 2], [1, 0]])
    assert a.log_prob(vv).shape == (3, 2)
    np.testing.assert_allclose(a.entropy().numpy(), -(p * np.log(p)).sum(-1), rtol=1e-12)
    assert a.mode.tolist() == [2, 0]
    assert a.batch_shape == (2,) and a.event_shape == () and a.support.upper_bound == 2


def test_categorical_sample_frequencies():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    d = Categorical(probs=f64(p))
    lucid.manual_seed(0)
    n = 20000
    s = d.sample((n,)).numpy()
    assert s.dtype == np.int64 and s.min() >= 0 and s.max() <= 3
    freq = np.bincount(s, minlength=4) / n
    np.testing.assert_array_less(np.abs(freq - p), Z * np.sqrt(p * (1 - p) / n))
    assert Categorical(probs=f64([[0.0, 1.0], [1.0, 0.0]])).sample((5,)).tolist() == [[1, 0]] * 5


def test_categorical_zero_probability_entropy_is_finite():
    d = Categorical(probs=f64([0.0, 0.5, 0.5]))
    np.testing.assert_allclose(d.entropy().item(), math.log(2), rtol=1e-12)


def test_categorical_grad_and_vmap():
    logits = f64([0.3, -0.2, 1.0])
    v = lucid.tensor(2)
    g = F.grad(lambda l: Categorical(logits=l).log_prob(v))(logits)
    p = np.exp(logits.numpy()) / np.exp(logits.numpy()).sum()
    np.testing.assert_allclose(g.numpy(), np.eye(3)[2] - p, rtol=1e-12)
    batch = f64(np.random.default_rng(0).normal(size=(4, 3)))
    vals = lucid.tensor([0, 1, 2, 1])
    out = F.vmap(lambda l, x: Categorical(logits=l).log_prob(x))(batch, vals)
    loop = [Categorical(logits=batch[i]).log_prob(vals[i]).item() for i in range(4)]
    np.testing.assert_allclose(out.numpy(), loop, rtol=1e-12)
    # sampling with batched probabilities under vmap(randomness="different")
    probs = f64([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    s = F.vmap(lambda q: Categorical(probs=q).sample((3,)), randomness="different")(probs)
    assert s.tolist() == [[0, 0, 0], [2, 2, 2]]


def test_one_hot_categorical():
    p = np.array([0.2, 0.3, 0.5])
    d = OneHotCategorical(probs=f64(p))
    assert d.event_shape == (3,) and d.batch_shape == ()
    s = check_moments(d, n=20000)
    assert (s.sum(-1) == 1).all()
    np.testing.assert_allclose(d.log_prob(f64([0.0, 0.0, 1.0])).item(), math.log(0.5), rtol=1e-12)
    np.testing.assert_allclose(d.entropy().item(), -(p * np.log(p)).sum(), rtol=1e-12)
    assert d.mode.tolist() == [0.0, 0.0, 1.0]
    assert d.enumerate_support().tolist() == np.eye(3).tolist()
    e = d.expand((4,))
    assert e.batch_shape == (4,) and e.sample().shape == (4, 3)
    with pytest.raises(ValueError, match="support"):
        d.log_prob(f64([1.0, 1.0, 0.0]))


def test_one_hot_straight_through_gradient():
    probs = f64([0.2, 0.3, 0.5]).requires_grad_()
    d = OneHotCategoricalStraightThrough(probs=probs)
    lucid.manual_seed(0)
    s = d.rsample()
    assert s.sum().item() == 1.0
    w = f64([1.0, 2.0, 3.0])
    (g,) = lucid.autograd.grad((s * w).sum(), [probs])
    # the gradient of probs / probs.sum() applied to w
    pr = probs.detach().numpy()
    np.testing.assert_allclose(g.numpy(), (w.numpy() - (w.numpy() * pr).sum()) / pr.sum(), rtol=1e-12)


def test_parameter_errors():
    with pytest.raises(ValueError, match="either `probs` or `logits`"):
        Bernoulli()
    with pytest.raises(ValueError, match="either `probs` or `logits`"):
        Categorical(probs=f64([0.5, 0.5]), logits=f64([0.0, 0.0]))
    with pytest.raises(ValueError, match="probs.*Bernoulli.*Interval"):
        Bernoulli(probs=f64([1.5]))
    with pytest.raises(ValueError, match="simplex|Simplex"):
        Categorical(probs=f64([-1.0, 2.0]))
    with pytest.raises(ValueError, match="support"):
        Bernoulli(probs=f64([0.5])).log_prob(f64([0.5]))
    with pytest.raises(ValueError, match="support"):
        Categorical(probs=f64([0.5, 0.5])).log_prob(lucid.tensor(2))
