"""Every distribution under lucid.func: vmap(log_prob) and vmap(entropy) equal a Python loop
over parameter sets, log_prob is gradchecked in its parameters (float64 finite differences),
and reparameterised samples are batched and differentiated per example."""
import numpy as np
import pytest

import lucid
import lucid.func as F
import lucid.distributions as D

from disthelpers import f64

RNG = np.random.default_rng(0)
_S = np.array([[2.0, 0.3], [0.3, 1.0]])


def _scales(v, b):
    """The b-th example's parameter: scaled by 1 + 0.1 b (probabilities stay in (0, 1) and
    simplices are renormalised)."""
    v = np.asarray(v, dtype=np.float64) * (1.0 + 0.1 * b)
    return v


# name -> (factory(*params), base params (arrays), value, has entropy)
CASES = {
    "Normal": (lambda m, s: D.Normal(m, s), ([0.1, -0.3], [1.0, 2.0]), [0.5, 1.0], True),
    "Laplace": (lambda m, s: D.Laplace(m, s), ([0.1, -0.3], [1.0, 2.0]), [0.5, 1.0], True),
    "Cauchy": (lambda m, s: D.Cauchy(m, s), ([0.1, -0.3], [1.0, 2.0]), [0.5, 1.0], True),
    "Gumbel": (lambda m, s: D.Gumbel(m, s), ([0.1, -0.3], [1.0, 2.0]), [0.5, 1.0], True),
    "LogNormal": (lambda m, s: D.LogNormal(m, s), ([0.1, -0.3], [1.0, 2.0]), [0.5, 1.5], True),
    "HalfNormal": (lambda s: D.HalfNormal(s), ([1.0, 2.0],), [0.5, 1.5], True),
    "HalfCauchy": (lambda s: D.HalfCauchy(s), ([1.0, 2.0],), [0.5, 1.5], True),
    "Exponential": (lambda r: D.Exponential(r), ([1.0, 2.0],), [0.5, 1.5], True),
    "Pareto": (lambda sc, a: D.Pareto(sc, a), ([0.5, 0.8], [2.0, 3.0]), [1.0, 1.5], True),
    "GeneralizedPareto": (lambda m, s, c: D.GeneralizedPareto(m, s, c), ([0.1, -0.3], [1.0, 2.0], [0.3, -0.2]),
                          [0.5, 1.0], True),
    "Weibull": (lambda sc, k: D.Weibull(sc, k), ([1.0, 2.0], [1.5, 3.0]), [0.5, 1.5], True),
    "Gamma": (lambda c, r: D.Gamma(c, r), ([1.5, 3.0], [1.0, 2.0]), [0.5, 1.5], True),
    "Chi2": (lambda k: D.Chi2(k), ([1.5, 3.0],), [0.5, 1.5], True),
    "Beta": (lambda a, b: D.Beta(a, b), ([1.5, 3.0], [2.0, 0.8]), [0.3, 0.6], True),
    "Kumaraswamy": (lambda a, b: D.Kumaraswamy(a, b), ([1.5, 3.0], [2.0, 0.8]), [0.3, 0.6], True),
    "StudentT": (lambda v, m, s: D.StudentT(v, m, s), ([3.0, 5.0], [0.1, -0.3], [1.0, 2.0]), [0.5, 1.0], True),
    "InverseGamma": (lambda c, r: D.InverseGamma(c, r), ([2.5, 3.0], [1.0, 2.0]), [0.5, 1.5], True),
    "FisherSnedecor": (lambda a, b: D.FisherSnedecor(a, b), ([3.0, 5.0], [6.0, 9.0]), [0.5, 1.5], False),
    "VonMises": (lambda m, k: D.VonMises(m, k), ([0.1, -0.3], [1.0, 2.0]), [0.5, 1.0], True),
    "ContinuousBernoulli": (lambda p: D.ContinuousBernoulli(probs=p), ([0.2, 0.7],), [0.3, 0.6], True),
    "Bernoulli": (lambda p: D.Bernoulli(probs=p), ([0.2, 0.7],), [0.0, 1.0], True),
    "Poisson": (lambda r: D.Poisson(r), ([1.0, 2.0],), [0.0, 3.0], False),
    "Geometric": (lambda p: D.Geometric(probs=p), ([0.2, 0.7],), [0.0, 3.0], True),
    "Binomial": (lambda p: D.Binomial(5, probs=p), ([0.2, 0.7],), [0.0, 3.0], False),
    "NegativeBinomial": (lambda r, p: D.NegativeBinomial(r, probs=p), ([1.5, 3.0], [0.2, 0.7]), [0.0, 3.0], False),
    "Categorical": (lambda l: D.Categorical(logits=l), ([[0.1, 0.5, -0.3], [1.0, 0.0, 0.2]],), [2, 0], True),
    "Dirichlet": (lambda c: D.Dirichlet(c), ([[1.5, 0.7, 2.0], [0.9, 3.0, 1.1]],), [[0.2, 0.3, 0.5]], True),
    "MultivariateNormal": (lambda m, L: D.MultivariateNormal(m, scale_tril=L),
                           ([[0.1, -0.3]], np.linalg.cholesky(_S)), [[0.5, 1.0]], True),
    "LowRankMultivariateNormal": (lambda m, W, d: D.LowRankMultivariateNormal(m, W, d),
                                  ([0.1, -0.3], [[1.0], [0.5]], [0.5, 1.5]), [[0.5, 1.0]], True),
    "Wishart": (lambda df, L: D.Wishart(df, scale_tril=L), (3.5, np.linalg.cholesky(_S)), [_S], True),
    "LKJCholesky": (lambda c: D.LKJCholesky(3, c), (2.0,), None, False),
    "RelaxedBernoulli": (lambda t, p: D.RelaxedBernoulli(t, probs=p), (0.7, [0.2, 0.7]), [0.3, 0.6], False),
    "RelaxedOneHotCategorical": (lambda t, p: D.RelaxedOneHotCategorical(t, probs=p),
                                 (0.7, [0.2, 0.3, 0.5]), [[0.1, 0.2, 0.7]], False),
}


def _value(name):
    v = CASES[name][2]
    if name == "LKJCholesky":
        lucid.manual_seed(5)
        return D.LKJCholesky(3, f64(2.0)).sample((2,))
    if name in ("Categorical",):
        return lucid.tensor(v)
    return f64(v)


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_of_log_prob_and_entropy_matches_a_loop(name):
    make, params, _, has_entropy = CASES[name]
    x = _value(name)
    batched = [f64(np.stack([_scales(p, b) for b in range(3)])) for p in params]
    out = F.vmap(lambda *ps: make(*ps).log_prob(x))(*batched)
    loop = np.stack([make(*[p[b] for p in batched]).log_prob(x).numpy() for b in range(3)])
    np.testing.assert_allclose(out.numpy(), loop, rtol=1e-10, atol=1e-12)
    if has_entropy:
        ent = F.vmap(lambda *ps: make(*ps).entropy())(*batched)
        np.testing.assert_allclose(ent.numpy(), np.stack([make(*[p[b] for p in batched]).entropy().numpy()
                                                          for b in range(3)]), rtol=1e-10, atol=1e-12)


GRADCHECK = [n for n in sorted(CASES) if n not in ("Categorical", "LKJCholesky", "Wishart", "MultivariateNormal")]


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck_log_prob_in_the_parameters(name):
    make, params, _, _ = CASES[name]
    x = _value(name)
    ps = [f64(p).requires_grad_() for p in params]
    assert lucid.autograd.gradcheck(lambda *q: make(*q).log_prob(x), ps)


RSAMPLE = [n for n in sorted(CASES) if n not in ("LKJCholesky",)]


@pytest.mark.parametrize("name", RSAMPLE)
def test_per_example_rsample_gradients_under_vmap(name):
    make, params, _, _ = CASES[name]
    d0 = make(*[f64(p) for p in params])
    if not d0.has_rsample:
        with pytest.raises(NotImplementedError, match="rsample"):
            d0.rsample()
        s = F.vmap(lambda *ps: make(*ps).sample(), randomness="different")(
            *[f64(np.stack([np.asarray(p)] * 2)) for p in params])
        assert s.shape == (2,) + d0.batch_shape + d0.event_shape
        return
    # randomness="same": one noise draw shared by the examples, so a loop that reseeds before
    # each example sees the same noise and must give the same per-example gradients.
    batched = [f64(np.stack([_scales(p, b) for b in range(3)])) for p in params]
    f = lambda p0, *rest: make(p0, *rest).rsample().sum()
    lucid.manual_seed(7)
    g = F.vmap(F.grad(f), randomness="same")(*batched)
    loop = []
    for b in range(3):
        lucid.manual_seed(7)
        loop.append(F.grad(f)(*[q[b] for q in batched]).numpy())
    np.testing.assert_allclose(g.numpy(), np.stack(loop), rtol=1e-10, atol=1e-12)
    assert np.isfinite(g.numpy()).all()
