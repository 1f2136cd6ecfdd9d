"""Complex dtypes end to end: creation, promotion, views, the non-holomorphic ops' gradients
(closed forms under NOTE [Complex gradients]), errors, and gradcheck on complex inputs."""
import itertools
import math

import numpy as np
import pytest

import lucid
from lucid._core import dtypes
from lucid.autograd import gradcheck, gradgradcheck
from lucid.autograd.gradcheck import GradcheckError


def c128(*vals, rg=True):
    return lucid.tensor(np.array(vals, dtype=np.complex128), requires_grad=rg)


# ----------------------------------------------------------------- creation, repr, item


def test_python_complex_becomes_complex64_and_item_is_python_complex():
    z = lucid.tensor([1 + 2j, 3.0])
    assert z.dtype == lucid.complex64
    assert lucid.tensor(2j).item() == 2j and isinstance(lucid.tensor(2j).item(), complex)
    assert "dtype=lucid.complex64" in repr(z)
    assert z.is_complex() and lucid.is_complex(z) and not lucid.is_complex(lucid.ones(2))


def test_default_float64_makes_python_complex_complex128():
    prev = lucid.get_default_dtype()
    lucid.set_default_dtype(lucid.float64)
    try:
        assert lucid.tensor([1j]).dtype == lucid.complex128
        assert (lucid.ones(2, dtype=lucid.int64) * 1j).dtype == lucid.complex128
    finally:
        lucid.set_default_dtype(prev)


def test_complex_and_polar():
    re, im = lucid.tensor([1.0, -2.0]), lucid.tensor([0.5, 3.0])
    z = lucid.complex(re, im)
    assert z.dtype == lucid.complex64
    np.testing.assert_allclose(z.numpy(), [1 + 0.5j, -2 + 3j])
    p = lucid.polar(lucid.tensor([2.0, 1.0], dtype=lucid.float64), lucid.tensor([math.pi / 3, -1.0], dtype=lucid.float64))
    assert p.dtype == lucid.complex128
    np.testing.assert_allclose(p.numpy(), [2 * np.exp(1j * math.pi / 3), np.exp(-1j)])
    with pytest.raises(RuntimeError, match="complex: expected both inputs"):
        lucid.complex(lucid.ones(2), lucid.ones(2, dtype=lucid.float64))


# ------------------------------------------------------------------------- promotion

_PROMOTION = [  # (a, b, expected): tensors with dims "t", zero-dim "s", Python scalars
    (("t", "float64"), ("s", "complex64"), "complex128"),
    (("t", "float32"), ("s", "complex128"), "complex64"),
    (("t", "float64"), 1j, "complex128"),
    (("t", "float32"), 1j, "complex64"),
    (("t", "int64"), 1j, "complex64"),
    (("t", "float64"), ("t", "complex64"), "complex128"),
    (("t", "int64"), ("t", "complex64"), "complex64"),
    (("t", "complex64"), ("s", "complex128"), "complex64"),
    (("s", "complex64"), ("s", "float64"), "complex128"),
    (("t", "complex64"), 2.5, "complex64"),
]


class _T:
    def __init__(self, kind, dt):
        self.dtype, self.ndim = np.dtype(dt), (1 if kind == "t" else 0)


@pytest.mark.parametrize("a,b,want", _PROMOTION)
def test_complex_promotion_table(a, b, want):
    a = _T(*a) if isinstance(a, tuple) else a
    b = _T(*b) if isinstance(b, tuple) else b
    assert dtypes.result_type(a, b) == np.dtype(want)
    assert dtypes.result_type(b, a) == np.dtype(want)


def test_promotion_matches_pytorch():
    torch = pytest.importorskip("torch")
    names = ["bool", "uint8", "int32", "int64", "float16", "float32", "float64", "complex64", "complex128"]
    ops = []
    for n in names:
        for nd in (0, 1):
            ops.append((_T("t" if nd else "s", n), torch.zeros((2,) * nd, dtype=getattr(torch, n))))
    ops += [(s, s) for s in (True, 2, 2.5, 1j)]
    for (a, ta), (b, tb) in itertools.product(ops, ops):
        if not hasattr(a, "dtype") and not hasattr(b, "dtype"):
            continue
        want = torch.result_type(ta, tb)
        if want == torch.complex32:  # Lucid has no complex32: complex64 instead (README)
            want = torch.complex64
        assert str(dtypes.result_type(a, b)) == str(want).replace("torch.", "")


def test_mixed_arithmetic_dtype():
    x = lucid.ones(2, dtype=lucid.float64)
    assert (x * lucid.tensor(1j)).dtype == lucid.complex128
    assert (lucid.ones(2) + 1j).dtype == lucid.complex64


# ------------------------------------------------------------------- views write through


def test_real_imag_are_views_that_write_through():
    z = lucid.tensor([1 + 2j, 3 - 1j])
    r, i = z.real, z.imag
    r[0] = 7.0
    i.mul_(2)
    np.testing.assert_allclose(z.numpy(), [7 + 4j, 3 - 2j])
    z.real = lucid.tensor([0.0, 1.0])
    np.testing.assert_allclose(z.numpy(), [0 + 4j, 1 - 2j])
    assert r._version is z._version  # a view shares the version counter


def test_view_as_real_and_complex_share_memory():
    z = lucid.tensor([1 + 2j, 3 - 1j])
    v = lucid.view_as_real(z)
    assert v.shape == (2, 2) and v.dtype == lucid.float32
    v[1, 1] = 5.0
    assert z.numpy()[1] == 3 + 5j
    w = lucid.view_as_complex(v)
    np.testing.assert_allclose(w.numpy(), z.numpy())
    with pytest.raises(RuntimeError, match="view_as_complex: the last dimension"):
        lucid.view_as_complex(lucid.ones(2, 3))
    with pytest.raises(RuntimeError, match="view_as_real: expected a complex"):
        lucid.view_as_real(lucid.ones(2))


def test_real_of_real_is_itself_imag_of_real_raises():
    x = lucid.ones(2)
    assert lucid.real(x) is x
    with pytest.raises(RuntimeError, match="imag"):
        x.imag


def test_conj_angle_isreal():
    z = lucid.tensor([1 + 2j, -1 + 0j, 0j])
    np.testing.assert_allclose(z.conj().numpy(), [1 - 2j, -1, 0])
    np.testing.assert_allclose(z.conj_physical().numpy(), [1 - 2j, -1, 0])
    assert not z.conj().is_conj() and z.resolve_conj() is z
    np.testing.assert_allclose(lucid.angle(z).numpy(), [math.atan2(2, 1), math.pi, 0.0], rtol=1e-6)
    assert lucid.isreal(z).tolist() == [False, True, True]
    assert lucid.isreal(lucid.ones(2)).tolist() == [True, True]
    np.testing.assert_allclose(lucid.angle(lucid.tensor([-2.0, 3.0])).numpy(), [math.pi, 0.0], rtol=1e-6)


# ------------------------------------------------------------------ gradient conventions


def test_gradient_convention_closed_form():
    # L = re(z)^2 + 3 im(z): z.grad = dL/dre + i dL/dim = 2 re(z) + 3i
    z = c128(1 + 2j, -0.5 + 1j)
    (z.real ** 2 + 3 * z.imag).sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [2 + 3j, -1 + 3j])


def test_angle_gradient_closed_form_and_zero_at_origin():
    z = c128(3 + 4j, 0j)
    lucid.angle(z).sum().backward()
    # d atan2(y, x) = (-y dx + x dy) / r^2  ->  grad = (-y + i x) / r^2
    np.testing.assert_allclose(z.grad.numpy(), [(-4 + 3j) / 25, 0])


def test_real_leaf_through_complex_gets_real_gradient():
    x = lucid.tensor([0.5, -1.5], dtype=lucid.float64, requires_grad=True)
    y = lucid.tensor([2.0, 1.0], dtype=lucid.float64, requires_grad=True)
    z = lucid.complex(x, y)
    (z.real * z.imag).sum().backward()
    assert x.grad.dtype == lucid.float64 and y.grad.dtype == lucid.float64
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 1.0])
    np.testing.assert_allclose(y.grad.numpy(), [0.5, -1.5])


def test_backward_on_complex_scalar_raises():
    z = c128(1 + 1j)
    with pytest.raises(RuntimeError, match="real scalar"):
        (z * 2).sum().backward()
    with pytest.raises(RuntimeError, match="real"):
        lucid.autograd.grad((z * 2).sum(), z)
    with pytest.raises(RuntimeError, match="real-valued"):
        lucid.func.grad(lambda t: (t * 2).sum())(c128(1j, rg=False))


@pytest.mark.parametrize("fn", [
    lambda z: lucid.real(z) ** 2 + lucid.imag(z),
    lambda z: lucid.angle(z),
    lambda z: lucid.view_as_real(z) ** 2,
    lambda z: lucid.conj(z),
], ids=["real-imag", "angle", "view_as_real", "conj"])
def test_gradcheck_and_gradgradcheck_complex(fn):
    z = c128(1 + 2j, 3 - 1j, -0.5 + 0.25j)
    assert gradcheck(fn, (z,))
    assert gradgradcheck(fn, (z,))


def test_gradcheck_of_real_to_complex():
    x = lucid.tensor([0.5, -0.2], dtype=lucid.float64, requires_grad=True)
    y = lucid.tensor([1.5, 0.3], dtype=lucid.float64, requires_grad=True)
    assert gradcheck(lambda a, b: lucid.complex(a, b), (x, y))
    assert gradcheck(lambda a, b: lucid.polar(a, b), (x, y))
    assert gradgradcheck(lambda a, b: lucid.polar(a, b), (x, y))
    assert gradcheck(lambda v: lucid.view_as_complex(v), (lucid.tensor(np.ones((2, 2)), requires_grad=True),))


class _NoConj(lucid.autograd.Function):
    """z * w with the (wrong) unconjugated backward g * w."""

    @staticmethod
    def forward(ctx, z):
        return z * (1 + 2j)

    @staticmethod
    def backward(ctx, g):
        return g * (1 + 2j)


def test_gradcheck_catches_a_missing_conj():
    z = c128(1 + 1j, 2 - 1j)
    with pytest.raises(GradcheckError, match=r"\((re|im)\)"):
        gradcheck(_NoConj.apply, (z,))


def test_gradcheck_upcasts_complex64():
    z = lucid.tensor([1 + 2j, 0.3 - 1j], requires_grad=True)
    assert gradcheck(lambda t: lucid.angle(t), (z,))


# ------------------------------------------------------------ ops across the library


def test_abs_gradient_is_z_over_abs_and_zero_at_zero():
    z = c128(3 + 4j, 0j, -1j)
    z.abs().sum().backward()
    np.testing.assert_allclose(z.grad.numpy(), [0.6 + 0.8j, 0, -1j])
    np.testing.assert_allclose(lucid.sgn(z.detach()).numpy(), [0.6 + 0.8j, 0, -1j])


def test_mul_and_matmul_vjp_conjugate():
    # L = re(sum(a * w)): a.grad = conj(w); for matmul, a.grad = g @ w^H
    a, w = c128(1 + 1j, 2 - 1j), c128(0.5 + 2j, -1 + 1j)
    lucid.real((a * w).sum()).backward()
    np.testing.assert_allclose(a.grad.numpy(), np.conj(w.detach().numpy()))
    A = lucid.tensor(np.array([[1 + 1j, 2j], [0.5, -1 - 1j]]), requires_grad=True)
    B = lucid.tensor(np.array([[2 - 1j, 1], [1j, 3 + 0.5j]]), requires_grad=True)
    g = np.array([[1 + 2j, -1j], [0.5, 2 - 1j]])
    (A @ B).backward(lucid.tensor(g))
    np.testing.assert_allclose(A.grad.numpy(), g @ B.detach().numpy().conj().T)
    np.testing.assert_allclose(B.grad.numpy(), A.detach().numpy().conj().T @ g)


def test_real_leaf_in_complex_arithmetic_gets_real_gradient():
    x = lucid.tensor([0.5, -1.0], dtype=lucid.float64, requires_grad=True)
    w = lucid.tensor(np.array([1 + 2j, 3 - 1j]))
    lucid.view_as_real(x * w).pow(2).sum().backward()
    assert x.grad.dtype == lucid.float64
    np.testing.assert_allclose(x.grad.numpy(), 2 * x.detach().numpy() * np.abs(w.numpy()) ** 2)
    m = lucid.tensor(np.eye(2), requires_grad=True)
    (m @ w).abs().sum().backward()
    assert m.grad.dtype == lucid.float64


def test_variance_of_complex_is_real():
    z = lucid.tensor(np.array([1 + 1j, -1 + 2j, 0.5j]))
    assert z.var().dtype == lucid.float64
    np.testing.assert_allclose(float(z.var()), np.var(z.numpy(), ddof=1))


@pytest.mark.parametrize("call", [
    lambda z: z < z, lambda z: z >= 1, lambda z: z.max(), lambda z: lucid.sort(z), lambda z: z.argmax(),
    lambda z: lucid.maximum(z, z), lambda z: z.clamp(0, 1), lambda z: lucid.relu(z), lambda z: z.floor(),
    lambda z: lucid.topk(z, 1), lambda z: z.cummax(0),
], ids=["lt", "ge", "max", "sort", "argmax", "maximum", "clamp", "relu", "floor", "topk", "cummax"])
def test_ordering_ops_refuse_complex(call):
    z = lucid.tensor([1 + 1j, 2 - 1j])
    with pytest.raises(TypeError, match=r"not supported for complex tensors.*complex64"):
        call(z)


def test_complex_gradients_match_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    b = rng.standard_normal((3, 3)) + 1j * rng.standard_normal((3, 3))
    x = rng.standard_normal((3, 3))
    fns = [
        lambda m, p, q, r: ((p * q).exp() / (q + 2)).abs().sum(),
        lambda m, p, q, r: (m.angle(p @ q) if m is torch else lucid.angle(p @ q)).sum(),
        lambda m, p, q, r: m.view_as_real((p.sin() * r) @ q.conj()).pow(2).sum(),
        lambda m, p, q, r: (p.prod(1) * q.cumprod(0)[0]).real.sum() + p.var() + (r * q).abs().mean(),
        lambda m, p, q, r: m.fft.ifft(m.fft.rfft(r) * p[:, :2]).imag.sum(),
    ]
    for fn in fns:
        tp, tq, tr = (torch.tensor(v, requires_grad=True) for v in (a, b, x))
        fn(torch, tp, tq, tr).backward()
        lp, lq, lr = (lucid.tensor(v, requires_grad=True) for v in (a, b, x))
        fn(lucid, lp, lq, lr).backward()
        for t, l in ((tp, lp), (tq, lq), (tr, lr)):
            if t.grad is None:
                assert l.grad is None or not np.any(l.grad.numpy())
                continue
            np.testing.assert_allclose(l.grad.numpy(), t.grad.resolve_conj().numpy(), rtol=1e-10, atol=1e-12)
            assert l.grad.dtype.kind == ("c" if t.grad.is_complex() else "f")


def test_inplace_on_real_imag_views_of_a_graph_tensor():
    z = c128(1 + 2j, -1 + 0.5j)
    w = z * 2
    w.real.mul_(3)        # w = 6 re z + 2i im z
    w.imag[1] = 7.0       # the imaginary part of element 1 is replaced
    np.testing.assert_allclose(w.detach().numpy(), [6 + 4j, -6 + 7j])
    lucid.view_as_real(w).pow(2).sum().backward()
    zz = z.detach().numpy()
    np.testing.assert_allclose(z.grad.numpy(), 72 * zz.real + 1j * np.array([8 * zz.imag[0], 0.0]))


def test_complex_creation():
    assert lucid.full((2,), 1j).dtype == lucid.complex64
    assert lucid.zeros(2, dtype=lucid.complex128).dtype == lucid.complex128
    lucid.manual_seed(0)
    z = lucid.randn(20000, dtype=lucid.complex64)
    assert z.dtype == lucid.complex64
    # PyTorch's convention: E|z|^2 = 1, real and imaginary parts of variance 1/2 each
    assert abs(float(z.real.var()) - 0.5) < 0.03 and abs(float(z.imag.var()) - 0.5) < 0.03
    assert lucid.randn_like(z).dtype == lucid.complex64
    r = lucid.rand(1000, dtype=lucid.complex128)
    assert 0 <= float(r.real.min()) and float(r.imag.max()) < 1


@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad"])
def test_optimizers_treat_re_and_im_as_two_real_parameters(name):
    # PyTorch optimizes a complex parameter as view_as_real of it; so does Lucid
    rng = np.random.default_rng(0)
    z0 = rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))
    target = lucid.tensor(rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2)))
    z = lucid.tensor(z0, requires_grad=True)
    r = lucid.tensor(np.stack([z0.real, z0.imag], -1), requires_grad=True)
    kw = {"lr": 0.05, **({"momentum": 0.9} if name == "SGD" else {})}
    oz, orr = getattr(lucid.optim, name)([z], **kw), getattr(lucid.optim, name)([r], **kw)
    for _ in range(10):
        oz.zero_grad()
        ((z - target).abs() ** 3).sum().backward()
        oz.step()
        orr.zero_grad()
        ((lucid.view_as_complex(r) - target).abs() ** 3).sum().backward()
        orr.step()
    np.testing.assert_allclose(lucid.view_as_real(z.detach()).numpy(), r.detach().numpy(), rtol=1e-12, atol=1e-14)
    assert not np.allclose(z.detach().numpy(), z0)


@pytest.mark.parametrize("call", [
    lambda z: lucid.softmax(z, 0), lambda z: lucid.erf(z), lambda z: lucid.special.gammaln(z),
    lambda z: lucid.special.i0(z),
], ids=["softmax", "erf", "gammaln", "i0"])
def test_real_functions_refuse_complex(call):
    with pytest.raises(TypeError, match=r"not supported for complex tensors \(a function of real arguments"):
        call(lucid.tensor([1 + 1j, 2j]))


def test_vdot_conjugates_its_first_argument():
    a, b = lucid.tensor([1 + 2j, 3j]), lucid.tensor([2 - 1j, 1 + 1j])
    np.testing.assert_allclose(lucid.vdot(a, b).numpy(), np.vdot(a.numpy(), b.numpy()))
