"""gradcheck's PyTorch options: forward mode, batched vjp, fast mode, reentrancy, dtypes, zero cotangents."""
import numpy as np

from lucid._core.backend import namespace_of
import pytest

import lucid
from lucid.autograd import Function, GradcheckError, gradcheck, gradgradcheck


def t(a, dtype=lucid.float64):
    return lucid.tensor(np.asarray(a), dtype=dtype, requires_grad=True)


X = [0.3, -0.7, 1.1]


def make(backward_scale=2.0, jvp_scale=2.0, noise=0.0, bad_zero=False):
    """x**2 with a chosen (possibly wrong) backward and jvp."""

    class Sq(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            out = backward_scale * x * g
            if noise:
                out = out + lucid.tensor(np.random.default_rng().standard_normal(x.shape) * noise)
            if bad_zero and bool((g == 0).all().item()):
                out = out + 1.0
            return out

        @staticmethod
        def jvp(ctx, tx):
            (x,) = ctx.saved_tensors
            return jvp_scale * x * tx

    return Sq.apply


def test_forward_ad_checked_against_finite_differences():
    assert gradcheck(make(), (t(X),), check_forward_ad=True)
    assert gradcheck(lambda a, b: (a.sin() * b, a @ b), (t(X), t([1.0, 2.0, 3.0])), check_forward_ad=True)
    assert gradcheck(lambda a: a.exp() * 3, (t(X, lucid.float32),), check_forward_ad=True)  # float32 input
    with pytest.raises(GradcheckError, match="forward-mode Jacobian mismatch for output 0 with respect to input 0"):
        gradcheck(make(jvp_scale=3.0), (t(X),), check_forward_ad=True)
    assert gradcheck(make(jvp_scale=3.0), (t(X),), check_forward_ad=True, raise_exception=False) is False
    # only forward mode: a wrong backward goes unnoticed, a right jvp passes
    assert gradcheck(make(backward_scale=5.0), (t(X),), check_forward_ad=True, check_backward_ad=False)


def test_backward_mismatch_still_reported():
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradcheck(make(backward_scale=3.0), (t(X),))


def test_batched_grad_matches():
    assert gradcheck(lambda a, b: ((a[:, None] * b).tanh(), a.sum() * b), (t(X), t([0.5, 2.0])),
                     check_batched_grad=True)
    assert gradcheck(make(), (t(X),), check_batched_grad=True)


def test_fast_mode():
    assert gradcheck(lambda a: (a.sin() * a).cumsum(0), (t(X),), fast_mode=True, check_forward_ad=True)
    with pytest.raises(GradcheckError, match=r"fast_mode.*reverse-mode mismatch"):
        gradcheck(make(backward_scale=3.0), (t(X),), fast_mode=True)
    with pytest.raises(GradcheckError, match=r"fast_mode.*forward-mode mismatch"):
        gradcheck(make(jvp_scale=3.0), (t(X),), fast_mode=True, check_forward_ad=True)


def test_nondet_tol():
    with pytest.raises(GradcheckError, match="not reentrant"):
        gradcheck(make(noise=1e-9), (t(X),))
    assert gradcheck(make(noise=1e-9), (t(X),), nondet_tol=1e-6, check_undefined_grad=False)


def test_undefined_grad_and_dtypes():
    with pytest.raises(GradcheckError, match="zero output gradient gave a non-zero gradient"):
        gradcheck(make(bad_zero=True), (t(X),))
    assert gradcheck(make(bad_zero=True), (t(X),), check_undefined_grad=False)
    assert gradcheck(lambda a: a * 2, (t(X, lucid.float32),), check_grad_dtypes=True)


def test_gradgradcheck_float32_uses_float64_differences():
    assert gradgradcheck(lambda a: (a ** 3).sum() * a.sin(), (t(X, lucid.float32),))
    assert gradgradcheck(lambda a: a.exp().prod(), (t(X),))


def test_gradgradcheck_options():
    x, y = t([0.3, -0.7]), t([1.3])

    def f(a, b):
        return (a ** 3).sin() * b, b.exp()

    assert gradgradcheck(f, (x, y), check_fwd_over_rev=True, check_batched_grad=True)
    assert gradgradcheck(f, (x, y), fast_mode=True)
    assert gradgradcheck(lambda a: (a ** 3).sin(), (t([0.3, -0.7], lucid.float32),), check_fwd_over_rev=True)

    class WrongSecond(Function):  # first derivative right, its derivative wrong
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a ** 3

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 3 * a.detach() ** 2 * g  # detached: the second derivative is lost

    with pytest.raises(GradcheckError):
        gradgradcheck(WrongSecond.apply, (x,))


# ----------------------------------------------------- check_batched_forward_grad, masked


@pytest.fixture
def position_scale():
    """A linear primitive ``x * [1, 2, ..., n]`` (weights along the last dim) with a correct
    vjp and jvp but a wrong batching rule (it batches along the last dim), registered for one
    test only."""
    from lucid._core.primitive import AN, REGISTRY, TN, bind, defprim
    from lucid.ops._family import linear_jvp, move_bdim

    name = "_test_position_scale"

    def impl(x):
        return x * namespace_of(x).arange(1, x.shape[-1] + 1, dtype=x.dtype)  # on x's device

    def bad_batch(vals, bdims):
        (v,), (b,) = vals, bdims
        return bind(prim, (move_bdim(v, b, -1),), {}), v.ndim - 1  # weights now run along the batch

    prim = defprim(name, impl, vjp=(lambda ns, g, out, x: getattr(ns, name)(g),), save_inputs=False,
                   batch=bad_batch)
    prim.jvp = linear_jvp(prim)
    try:
        yield lambda x: bind(prim, (x,), {})
    finally:
        del REGISTRY[name]
        delattr(AN, name)
        delattr(TN, name)


def test_batched_forward_grad_catches_a_wrong_batching_rule(position_scale):
    x = t([0.5, -1.0, 2.0, 0.25])
    f = lambda a: position_scale(a).tanh()  # noqa: E731
    # the rules themselves are right: unbatched forward and reverse checks pass
    assert gradcheck(f, (x,), check_forward_ad=True)
    np.testing.assert_allclose(lucid.func.jacfwd(f)(x.detach()).numpy(),
                               np.diag((1 - np.tanh(x.detach().numpy() * [1, 2, 3, 4]) ** 2) * [1, 2, 3, 4]))
    with pytest.raises(GradcheckError, match=r"batched forward-mode gradient \(vmap of jvp\) mismatch "
                                             r"for output 0 with respect to input 0"):
        gradcheck(f, (x,), check_forward_ad=True, check_batched_forward_grad=True)
    assert gradcheck(f, (x,), check_forward_ad=True, check_batched_forward_grad=True,
                     raise_exception=False) is False


def test_batched_forward_grad_passes_correct_functions():
    a, b = t(X), t([[1.0, 2.0], [0.5, -1.0], [3.0, 0.1]])
    assert gradcheck(lambda u, v: ((u @ v).softmax(-1), u.sin() * 2), (a, b),
                     check_forward_ad=True, check_batched_forward_grad=True)
    assert gradcheck(make(), (t(X),), check_forward_ad=True, check_batched_forward_grad=True)  # custom jvp
    z = lucid.tensor(np.array([1 + 2j, -0.5j]), requires_grad=True)
    assert gradcheck(lambda u: (u * u).exp(), (z,), check_forward_ad=True, check_batched_forward_grad=True)
    assert gradcheck(lambda u: u.exp(), (t(X, lucid.float32),), check_forward_ad=True,
                     check_batched_forward_grad=True, fast_mode=True)


def test_batched_forward_grad_needs_forward_ad():
    with pytest.raises(ValueError, match="check_batched_forward_grad=True requires check_forward_ad=True"):
        gradcheck(make(), (t(X),), check_batched_forward_grad=True)


def test_masked_changes_nothing_on_dense_tensors():
    # masked selects PyTorch's sparse masked semantics; Lucid has no sparse tensors, and (as in
    # PyTorch with dense inputs) the verdicts stay the same
    for masked in (None, False, True):
        assert gradcheck(make(), (t(X),), masked=masked)
        with pytest.raises(GradcheckError, match="Jacobian mismatch"):
            gradcheck(make(backward_scale=3.0), (t(X),), masked=masked)
        assert gradgradcheck(lambda a: (a ** 3).sum(), (t(X),), masked=masked)
