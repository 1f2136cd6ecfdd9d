"""The shortcuts taken for speed (benchmarks/bench_func.py) give the same answers as the general paths."""
import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.ops._family import shift_axis
from lucid.ops.linalg import _matmul_impl

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("sa,sb", [
    ((5, 1, 3), (3, 4)),            # stacked @ matrix: folded into one GEMM
    ((2, 3, 4, 3), (3, 2)),
    ((5, 3, 1), (5, 1, 4)),         # contraction of size 1: outer products
    ((2, 1, 3, 1), (4, 1, 2)),      # ... with broadcasting stack dims
    ((3, 4), (6, 4, 2)),            # matrix @ stacked: folded into the columns
    ((3, 4), (2, 5, 4, 1)),
    ((3, 4), (2, 4, 5)),            # too few matrices: NumPy's own loop
    ((0, 2, 3), (3, 4)), ((3, 0), (5, 0, 2)), ((4, 3), (5, 3, 0)),
])
def test_matmul_folding_matches_numpy(sa, sb):
    a, b = RNG.standard_normal(sa), RNG.standard_normal(sb)
    got, want = _matmul_impl(a, b), np.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_shift_axis_fast_and_general_paths():
    assert shift_axis((0, 2), 3) == (1, 3)
    assert shift_axis((-1,), 3) == (3,)
    assert shift_axis(1, 3) == 2 and shift_axis(-3, 3) == 1
    assert shift_axis(None, 2) == (1, 2)
    with pytest.raises(IndexError):
        shift_axis((3,), 3)


def test_vmap_elementwise_with_lower_rank_unbatched_operand():
    x = lucid.tensor(RNG.standard_normal((4, 2, 3)))
    b = lucid.tensor(RNG.standard_normal(3))
    for d in (0, 1, 2):
        xd = lucid.tensor(np.moveaxis(x.numpy(), 0, d))
        got = F.vmap(lambda r: r * b + 1.0, in_dims=d)(xd)
        np.testing.assert_allclose(got.numpy(), x.numpy() * b.numpy() + 1.0)


def _mlp_loss(p, x, y):
    h = (x @ p["w1"] + p["b1"]).tanh()
    z = h @ p["w2"] + p["b2"]
    return z.logsumexp(0) - (z * y).sum()


def test_per_sample_grads_match_closed_form():
    xs, ys = RNG.standard_normal((5, 3)), np.eye(2)[[0, 1, 1, 0, 1]]
    p = {"w1": RNG.standard_normal((3, 4)), "b1": RNG.standard_normal(4),
         "w2": RNG.standard_normal((4, 2)), "b2": RNG.standard_normal(2)}
    got = F.vmap(F.grad(_mlp_loss), in_dims=(None, 0, 0))({k: lucid.tensor(v) for k, v in p.items()},
                                                           lucid.tensor(xs), lucid.tensor(ys))
    h = np.tanh(xs @ p["w1"] + p["b1"])
    z = h @ p["w2"] + p["b2"]
    g2 = np.exp(z) / np.exp(z).sum(1, keepdims=True) - ys
    g1 = (g2 @ p["w2"].T) * (1 - h * h)
    want = {"w1": np.einsum("bi,bj->bij", xs, g1), "b1": g1, "w2": np.einsum("bi,bj->bij", h, g2), "b2": g2}
    for k in want:
        np.testing.assert_allclose(got[k].numpy(), want[k], rtol=1e-10, atol=1e-12)


def test_hessian_and_scalar_jacrev_match_closed_form():
    w, x = RNG.standard_normal((5, 5)), RNG.standard_normal(5)
    f = lambda v: ((lucid.tensor(w) @ v).tanh() ** 2).sum()  # noqa: E731
    t = np.tanh(w @ x)
    np.testing.assert_allclose(F.jacrev(f)(lucid.tensor(x)).numpy(), w.T @ (2 * t * (1 - t * t)), rtol=1e-12)
    want = w.T @ (((2 - 6 * t * t) * (1 - t * t))[:, None] * w)
    np.testing.assert_allclose(F.hessian(f)(lucid.tensor(x)).numpy(), want, rtol=1e-10, atol=1e-12)
    # a one-element (not 0-d) output keeps its dim in the Jacobian
    assert tuple(F.jacrev(lambda v: v.sum(0, keepdim=True))(lucid.tensor(x)).shape) == (1, 5)


def test_grad_fast_path_errors_and_pytrees():
    x = lucid.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="scalar"):
        F.grad(lambda v: v * 2)(x)
    with pytest.raises(RuntimeError, match="expected f to return a Tensor"):
        F.grad(lambda v: (v.sum(), v.sum()))(x)
    g, (val, aux) = F.grad_and_value(lambda d: ((d["a"] * d["b"]).sum(), 7), has_aux=True)(
        {"a": x, "b": lucid.tensor([3.0, 4.0])})
    np.testing.assert_allclose(g["a"].numpy(), [3.0, 4.0])
    assert float(val) == 11.0 and aux == 7
    gz = F.grad(lambda a, b: (b * 1.0).sum(), argnums=0)(x, lucid.tensor([1.0, 1.0]))
    np.testing.assert_allclose(gz.numpy(), [0.0, 0.0])
