"""ExponentialFamily: the generic (Bregman) entropy and KL agree with each family's closed
forms, stay differentiable in both distributions' parameters, and work under vmap."""
import numpy as np
import pytest

import lucid
import lucid.func as F
import lucid.distributions as D
from lucid.distributions.exp_family import ExponentialFamily
from lucid.distributions.kl import _kl_expfamily_expfamily

from disthelpers import f64

PAIRS = {
    "Normal": (lambda a, b: D.Normal(a, b), ([0.3, -0.2], [1.2, 0.5]), ([-0.5, 0.4], [0.7, 2.0])),
    "Exponential": (lambda r: D.Exponential(r), ([1.5, 0.3],), ([0.5, 2.0],)),
    "Gamma": (lambda c, r: D.Gamma(c, r), ([2.0, 0.6], [1.5, 1.0]), ([3.0, 1.1], [1.0, 0.4])),
    "Beta": (lambda a, b: D.Beta(a, b), ([2.0, 0.6], [3.0, 1.0]), ([1.5, 2.2], [1.0, 0.7])),
    "Dirichlet": (lambda c: D.Dirichlet(c), ([2.0, 3.0, 1.5],), ([1.0, 2.0, 2.5],)),
    "Bernoulli": (lambda p: D.Bernoulli(probs=p), ([0.3, 0.9],), ([0.6, 0.2],)),
    "Poisson": (lambda r: D.Poisson(r), ([2.0, 0.5],), ([3.5, 1.0],)),
    "ContinuousBernoulli": (lambda p: D.ContinuousBernoulli(probs=p), ([0.3, 0.8],), ([0.7, 0.45],)),
}


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_generic_kl_and_entropy_match_closed_forms(name):
    make, pp, qp = PAIRS[name]
    p, q = make(*[f64(v) for v in pp]), make(*[f64(v) for v in qp])
    assert isinstance(p, ExponentialFamily)
    np.testing.assert_allclose(_kl_expfamily_expfamily(p, q).numpy(), D.kl_divergence(p, q).numpy(), rtol=1e-10)
    if name != "Poisson":  # its carrier measure has no closed form (as in PyTorch)
        np.testing.assert_allclose(ExponentialFamily.entropy(p).numpy(), p.entropy().numpy(), rtol=1e-10)


@pytest.mark.parametrize("name", ["Normal", "Gamma", "Beta"])
def test_generic_kl_is_differentiable_in_both_arguments(name):
    make, pp, qp = PAIRS[name]
    ps = [f64(v).requires_grad_() for v in pp]
    qs = [f64(v).requires_grad_() for v in qp]
    generic = lambda *a: _kl_expfamily_expfamily(make(*a[:len(ps)]), make(*a[len(ps):]))
    closed = lambda *a: D.kl_divergence(make(*a[:len(ps)]), make(*a[len(ps):]))
    g1 = lucid.autograd.grad(generic(*ps, *qs).sum(), ps + qs)
    g2 = lucid.autograd.grad(closed(*ps, *qs).sum(), ps + qs)
    for a, b in zip(g1, g2):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9)
    out = F.vmap(lambda a, b: _kl_expfamily_expfamily(make(a, b), make(*[f64(v[0]) for v in qp])))(
        *[f64(v) for v in pp])
    np.testing.assert_allclose(out.numpy(), [closed(*[f64(v[i]) for v in pp], *[f64(v[0]) for v in qp]).item()
                                             for i in range(2)], rtol=1e-10)


def test_cross_family_bregman_kl_is_refused():
    with pytest.raises(NotImplementedError, match="different exponential families"):
        D.kl_divergence(D.Poisson(f64(1.0)), D.Exponential(f64(1.0)))
    with pytest.raises(NotImplementedError, match="_mean_carrier_measure"):
        ExponentialFamily.entropy(D.Poisson(f64(1.0)))
