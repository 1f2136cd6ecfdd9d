"""Transforms: inverses, log|det J| against autograd Jacobians, shapes, constraints."""
import math

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.distributions import constraints
from lucid.distributions.transforms import (AbsTransform, AffineTransform, ComposeTransform,
                                            CorrCholeskyTransform, CumulativeDistributionTransform,
                                            ExpTransform, IndependentTransform, LowerCholeskyTransform,
                                            PositiveDefiniteTransform, PowerTransform, ReshapeTransform,
                                            SigmoidTransform, SoftmaxTransform, SoftplusTransform,
                                            StickBreakingTransform, TanhTransform, identity_transform)
from lucid.distributions import Normal

from disthelpers import f64

X = np.array([-1.3, -0.2, 0.4, 1.7])

ELEMENTWISE = [
    (ExpTransform(), X), (SigmoidTransform(), X), (TanhTransform(), X), (SoftplusTransform(), X),
    (AffineTransform(1.5, -2.0), X), (AffineTransform(f64([1.0, 2.0, 3.0, 4.0]), f64([0.5, -1.0, 2.0, 3.0])), X),
    (PowerTransform(2.5), np.abs(X) + 0.1), (PowerTransform(f64(-0.5)), np.abs(X) + 0.1),
    (ComposeTransform([AffineTransform(0.5, 2.0), ExpTransform(), PowerTransform(0.5)]), X),
    (ExpTransform().inv, np.abs(X) + 0.1), (SigmoidTransform().inv, np.array([0.1, 0.3, 0.6, 0.9])),
]


@pytest.mark.parametrize("t,x", ELEMENTWISE, ids=lambda v: type(v).__name__)
def test_elementwise_inverse_and_log_det(t, x):
    x = f64(x)
    y = t(x)
    np.testing.assert_allclose(t.inv(y).numpy(), x.numpy(), rtol=1e-10, atol=1e-12)
    # elementwise: the Jacobian is diagonal; compare log|dy/dx| with autograd.
    J = F.jacrev(lambda v: t(v))(x).numpy()
    np.testing.assert_allclose(J, np.diag(np.diag(J)), atol=1e-300)
    np.testing.assert_allclose(t.log_abs_det_jacobian(x, y).numpy(), np.log(np.abs(np.diag(J))), rtol=1e-10)
    assert t.inv.inv is t


def _jac(fn, x):
    return F.jacrev(fn)(x).numpy()


def test_stick_breaking():
    t = StickBreakingTransform()
    x = f64([0.3, -1.0, 2.0])
    y = t(x)
    assert y.shape == (4,) and abs(y.sum().item() - 1) < 1e-12 and (y.numpy() > 0).all()
    np.testing.assert_allclose(t.inv(y).numpy(), x.numpy(), rtol=1e-10)
    J = _jac(lambda v: t(v)[:-1], x)  # the first K coordinates determine the last
    np.testing.assert_allclose(t.log_abs_det_jacobian(x, y).item(), np.linalg.slogdet(J)[1], rtol=1e-10)
    assert t.forward_shape((5, 3)) == (5, 4) and t.inverse_shape((5, 4)) == (5, 3)
    assert constraints.simplex.check(t(f64(np.zeros((2, 3))))).all()


def test_lower_cholesky_and_positive_definite():
    x = f64([[0.5, 9.0], [-1.0, 0.2]])
    L = LowerCholeskyTransform()(x)
    np.testing.assert_allclose(L.numpy(), [[math.exp(0.5), 0.0], [-1.0, math.exp(0.2)]])
    assert constraints.lower_cholesky.check(L).item()
    np.testing.assert_allclose(LowerCholeskyTransform().inv(L).numpy(), np.tril(x.numpy()))
    P = PositiveDefiniteTransform()(x)
    assert constraints.positive_definite.check(P).item()
    np.testing.assert_allclose(PositiveDefiniteTransform().inv(P).numpy(), np.tril(x.numpy()), rtol=1e-10)


def test_corr_cholesky():
    t = CorrCholeskyTransform()
    x = f64([0.3, -0.5, 1.2])
    y = t(x)
    assert y.shape == (3, 3) and constraints.corr_cholesky.check(y).item()
    np.testing.assert_allclose(t.inv(y).numpy(), x.numpy(), rtol=1e-8)
    rows, cols = np.tril_indices(3, -1)
    J = _jac(lambda v: t(v)[lucid.tensor(rows), lucid.tensor(cols)], x)
    np.testing.assert_allclose(t.log_abs_det_jacobian(x, y).item(), np.linalg.slogdet(J)[1], rtol=1e-8)
    assert t.forward_shape((3,)) == (3, 3) and t.inverse_shape((3, 3)) == (3,)


def test_compose_event_dims_and_shapes():
    t = ComposeTransform([AffineTransform(0.0, 2.0), StickBreakingTransform()])
    assert t.domain.event_dim == 1 and t.codomain.event_dim == 1
    x = f64([[0.1, 0.2], [0.3, -0.4]])
    ld = t.log_abs_det_jacobian(x, t(x))
    assert ld.shape == (2,)
    expected = 2 * math.log(2.0) + StickBreakingTransform().log_abs_det_jacobian(2 * x, t(x)).numpy()
    np.testing.assert_allclose(ld.numpy(), expected, rtol=1e-12)
    assert identity_transform(x) is x
    assert ComposeTransform([ExpTransform()]) == ComposeTransform([ExpTransform()])
    assert ComposeTransform([ExpTransform()]).inv.parts[0].inv == ExpTransform()


def test_independent_reshape_softmax_abs_and_cdf_transform():
    it = IndependentTransform(ExpTransform(), 1)
    x = f64([[0.1, 0.2], [0.3, 0.4]])
    np.testing.assert_allclose(it.log_abs_det_jacobian(x, it(x)).numpy(), [0.3, 0.7], rtol=1e-12)
    assert it.domain.event_dim == 1
    rt = ReshapeTransform((4,), (2, 2))
    z = rt(f64(np.arange(8.0).reshape(2, 4)))
    assert z.shape == (2, 2, 2) and rt.inv(z).shape == (2, 4)
    with pytest.raises(ValueError, match="different numbers"):
        ReshapeTransform((3,), (2, 2))
    sm = SoftmaxTransform()(f64([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(sm.sum().item(), 1.0)
    assert AbsTransform()(f64([-2.0])).item() == 2.0
    ct = CumulativeDistributionTransform(Normal(f64(0.0), f64(1.0)))
    np.testing.assert_allclose(ct(f64(0.0)).item(), 0.5)
    np.testing.assert_allclose(ct.log_abs_det_jacobian(f64(0.0), None).item(), -0.5 * math.log(2 * math.pi))


def test_cache_returns_the_cached_input():
    t = ExpTransform().with_cache(1)
    x = f64([0.5])
    y = t(x)
    assert t(x) is y and t.inv(y) is x
    with pytest.raises(ValueError, match="cache_size"):
        ExpTransform(cache_size=2)


def test_constraints_check():
    v = f64([-1.0, 0.0, 0.5, 1.0, 2.0])
    assert constraints.positive.check(v).tolist() == [False, False, True, True, True]
    assert constraints.nonnegative.check(v).tolist() == [False, True, True, True, True]
    assert constraints.unit_interval.check(v).tolist() == [False, True, True, True, False]
    assert constraints.half_open_interval(0, 1).check(v).tolist() == [False, True, True, False, False]
    assert constraints.boolean.check(v).tolist() == [False, True, False, True, False]
    assert constraints.nonnegative_integer.check(v).tolist() == [False, True, False, True, True]
    assert constraints.real.check(f64([math.nan, 1.0])).tolist() == [False, True]
    assert constraints.independent(constraints.positive, 1).check(f64([[1.0, 2.0], [1.0, -1.0]])).tolist() == [True, False]
    assert constraints.simplex.check(f64([[0.2, 0.8], [0.5, 0.6]])).tolist() == [True, False]
    assert constraints.lower_cholesky.check(f64([[1.0, 0.0], [2.0, 1.0]])).item()
    assert not constraints.lower_cholesky.check(f64([[1.0, 1.0], [2.0, 1.0]])).item()
    assert not constraints.positive_definite.check(f64([[1.0, 2.0], [2.0, 1.0]])).item()
    assert constraints.is_dependent(constraints.dependent)
    assert repr(constraints.positive) == "GreaterThan(lower_bound=0.0)"
    with pytest.raises(ValueError, match="dependent"):
        constraints.dependent.check(v)
