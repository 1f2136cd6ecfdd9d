"""The Distribution interface: shapes, expand, validation errors, Independent,
TransformedDistribution, lazy import."""
import math
import subprocess
import sys

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import (Bernoulli, Categorical, Distribution, Exponential, Gumbel, HalfNormal,
                                 Independent, Laplace, LogNormal, Normal, Pareto, TransformedDistribution, Uniform,
                                 Weibull, constraints)
from lucid.distributions.transforms import AffineTransform, ExpTransform, StickBreakingTransform

from disthelpers import f64


def test_shapes_and_broadcasting():
    d = Normal(f64([[0.0], [1.0]]), f64([1.0, 2.0, 3.0]))
    assert d.batch_shape == (2, 3) and d.event_shape == ()
    assert d.sample().shape == (2, 3) and d.rsample((4, 5)).shape == (4, 5, 2, 3)
    assert d.log_prob(f64(0.5)).shape == (2, 3)
    assert d.log_prob(f64(np.zeros((7, 1, 3)))).shape == (7, 2, 3)
    assert Normal(0.0, 1.0).loc.dtype == lucid.get_default_dtype()
    assert Normal(f64(0.0), 1.0).scale.dtype == lucid.float64  # numbers take the tensors' dtype
    assert Normal(0.0, 1.0).sample(4).shape == (4,)


def test_expand():
    d = Normal(f64([0.0, 1.0]), f64(1.0))
    e = d.expand((3, 2))
    assert e.batch_shape == (3, 2) and e.loc.shape == (3, 2) and e.sample().shape == (3, 2)
    np.testing.assert_allclose(e.log_prob(f64(0.0)).numpy()[2], d.log_prob(f64(0.0)).numpy())
    with pytest.raises(ValueError, match="cannot be expanded"):
        d.expand((3,))
    for dist in [Bernoulli(probs=f64([0.3, 0.6])), Exponential(f64([1.0, 2.0])), Gumbel(f64([0.0, 1.0]), 1.0),
                 LogNormal(f64([0.0, 1.0]), 1.0), HalfNormal(f64([1.0, 2.0])), Pareto(f64([1.0, 2.0]), 3.0),
                 Weibull(f64([1.0, 2.0]), 3.0), Uniform(f64([0.0, 1.0]), 2.0),
                 Independent(Normal(f64(np.zeros((2, 3))), 1.0), 1),
                 Categorical(probs=f64([[0.5, 0.5], [0.1, 0.9]]))]:
        e = dist.expand((4, 2))
        assert type(e) is type(dist) and e.batch_shape == (4, 2)
        assert e.sample().shape == (4, 2) + dist.event_shape
        x = dist.sample()
        np.testing.assert_allclose(e.log_prob(x).numpy()[3], dist.log_prob(x).numpy(), err_msg=type(dist).__name__)


def test_validation_errors_name_parameter_and_constraint():
    with pytest.raises(ValueError, match=r"Expected parameter scale .*Normal.*GreaterThan\(lower_bound=0.0\)"):
        Normal(0.0, -1.0)
    with pytest.raises(ValueError, match="Expected parameter rate"):
        Exponential(f64([1.0, 0.0]))
    with pytest.raises(ValueError, match="low >= high"):
        Uniform(1.0, 0.0)
    with pytest.raises(ValueError, match="must be a lucid.Tensor"):
        Normal(0.0, 1.0).log_prob(0.5)
    with pytest.raises(ValueError, match="not broadcastable"):
        Normal(f64([0.0, 1.0]), 1.0).log_prob(f64([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="within the support"):
        Exponential(1.0).log_prob(f64(-1.0))
    with pytest.raises(ValueError, match="either `probs` or `logits`"):
        Bernoulli()
    # validate_args=False skips the checks
    d = Normal(0.0, -1.0, validate_args=False)
    with np.errstate(invalid="ignore"):
        assert math.isnan(d.log_prob(f64(0.0)).item())
    prev = Distribution._validate_args
    try:
        Distribution.set_default_validate_args(False)
        Normal(0.0, -1.0)
    finally:
        Distribution.set_default_validate_args(prev)
    with pytest.raises(ValueError, match="True or False"):
        Distribution.set_default_validate_args(1)


def test_validation_works_inside_transforms():
    # NOTE [Validation through transforms]: concrete values are read under the tracers.
    with pytest.raises(ValueError, match="Expected parameter scale"):
        F.vmap(lambda s: Normal(0.0, s).log_prob(f64(0.3)))(f64([1.0, -1.0]))
    with pytest.raises(ValueError, match="within the support"):
        F.grad(lambda r: Exponential(r).log_prob(f64(-1.0)))(f64(1.0))
    with pytest.raises(ValueError, match="Simplex"):
        F.vmap(lambda p: Categorical(probs=p).log_prob(lucid.tensor(0)))(f64([[0.5, 0.5], [-0.5, 1.5]]))
    # bounds that are themselves batched: each example's support is its own interval
    with pytest.raises(ValueError, match="within the support"):
        F.vmap(lambda hi: Uniform(f64(0.0), hi).log_prob(f64(1.5)))(f64([2.0, 1.0]))
    np.testing.assert_allclose(F.vmap(lambda hi: Uniform(f64(0.0), hi).log_prob(f64(0.5)))(f64([2.0, 4.0])).numpy(),
                               -np.log([2.0, 4.0]))
    with pytest.raises(ValueError, match="low >= high"):
        F.vmap(lambda lo: Uniform(lo, f64(1.0)))(f64([0.0, 2.0]))
    ok = F.vmap(lambda s: Normal(0.0, s).log_prob(f64(0.3)), in_dims=0)(f64([1.0, 2.0]))
    assert ok.shape == (2,)


def test_independent():
    base = Normal(f64(np.zeros((2, 3))), f64(np.ones((2, 3))))
    d = Independent(base, 1)
    assert d.batch_shape == (2,) and d.event_shape == (3,)
    x = f64(np.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(d.log_prob(x).numpy(), base.log_prob(x).numpy().sum(-1))
    np.testing.assert_allclose(d.entropy().numpy(), base.entropy().numpy().sum(-1))
    assert d.support.event_dim == 1 and d.has_rsample
    assert Independent(base, 2).event_shape == (2, 3)
    with pytest.raises(ValueError, match="reinterpreted_batch_ndims"):
        Independent(base, 3)
    with pytest.raises(ValueError, match="within the support"):
        Independent(Exponential(f64([1.0, 1.0])), 1, validate_args=True).base_dist.log_prob(f64([1.0, -1.0]))


def test_transformed_distribution_change_of_variables():
    # y = 2x + 1 of a standard normal is Normal(1, 2)
    d = TransformedDistribution(Normal(f64(0.0), f64(1.0)), [AffineTransform(1.0, 2.0)])
    ref = Normal(f64(1.0), f64(2.0))
    y = f64([-1.0, 0.5, 3.0])
    np.testing.assert_allclose(d.log_prob(y).numpy(), ref.log_prob(y).numpy(), rtol=1e-12)
    np.testing.assert_allclose(d.cdf(y).numpy(), ref.cdf(y).numpy(), rtol=1e-12)
    # decreasing transform: the cdf is flipped
    dn = TransformedDistribution(Normal(f64(0.0), f64(1.0)), [AffineTransform(1.0, -2.0)])
    np.testing.assert_allclose(dn.cdf(y).numpy(), ref.cdf(y).numpy(), rtol=1e-12)
    dn = TransformedDistribution(Laplace(f64(0.0), f64(1.0)), [AffineTransform(1.0, -2.0)])
    np.testing.assert_allclose(dn.icdf(dn.cdf(y)).numpy(), y.numpy(), rtol=1e-10)
    assert d.has_rsample and d.rsample((3,)).shape == (3,)
    # an event-changing transform: a logistic-normal on the simplex
    ln = TransformedDistribution(Normal(f64(np.zeros(2)), f64(np.ones(2))), StickBreakingTransform())
    assert ln.batch_shape == () and ln.event_shape == (3,)
    s = ln.sample((5,))
    assert s.shape == (5, 3) and np.allclose(s.sum(-1).numpy(), 1)
    assert ln.log_prob(s).shape == (5,)
    assert constraints.simplex.check(s).all()
    with pytest.raises(ValueError, match="Transform"):
        TransformedDistribution(Normal(0.0, 1.0), [ExpTransform(), 3])


def test_repr_and_support():
    assert repr(Normal(0.0, 1.0)) == "Normal(loc: 0.0, scale: 1.0)"  # PyTorch's: 0-d tensors format as values
    assert repr(Normal(lucid.zeros(2), 1.0)) == "Normal(loc: (2,), scale: (2,))"
    assert Uniform(0.0, 2.0).support.upper_bound.item() == 2.0
    assert isinstance(Pareto(1.0, 2.0).support, constraints.greater_than_eq)


def test_import_lucid_does_not_load_distributions():
    code = ("import sys, lucid; assert 'lucid.distributions' not in sys.modules; "
            "d = lucid.distributions.Normal(0.0, 1.0); assert 'lucid.distributions' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_float32_parameters_give_finite_float32_samples():
    from lucid.distributions import (Beta, Binomial, Dirichlet, Gamma, Geometric, MultivariateNormal,
                                     NegativeBinomial, Poisson, StudentT, VonMises, Wishart)
    f32 = lambda v: lucid.tensor(np.asarray(v, dtype=np.float32))
    dists = [Normal(f32(0.0), f32(1.0)), Gamma(f32(0.5), f32(2.0)), Beta(f32(0.5), f32(0.5)),
             Dirichlet(f32([0.3, 1.0, 2.0])), StudentT(f32(3.0)), Poisson(f32(3.0)), Geometric(probs=f32(0.3)),
             Binomial(5, probs=f32(0.3)), NegativeBinomial(f32(2.0), probs=f32(0.4)), VonMises(f32(0.0), f32(2.0)),
             MultivariateNormal(f32([0.0, 0.0]), covariance_matrix=f32(np.eye(2))),
             Wishart(f32(3.0), covariance_matrix=f32(np.eye(2))), Exponential(f32(1.0)), Gumbel(f32(0.0), f32(1.0))]
    lucid.manual_seed(0)
    for d in dists:
        s = d.sample((2000,))
        assert s.dtype == lucid.float32, type(d).__name__
        assert np.isfinite(s.numpy()).all(), type(d).__name__
        lp = d.log_prob(s)
        assert lp.dtype == lucid.float32 and np.isfinite(lp.numpy()).all(), type(d).__name__
