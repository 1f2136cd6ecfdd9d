"""gradcheck(fast_mode=True) on complex inputs and outputs: the real and imaginary parts are
checked separately (NOTE [Complex fast gradcheck]), so a gradient wrong in one part only is
caught and the error names that part."""
import numpy as np
import pytest

import lucid
from lucid.autograd import Function, GradcheckError, gradcheck, gradgradcheck

RNG = np.random.default_rng(5)
C = lucid.tensor(np.array([0.5 - 1.2j, 2.0 + 0.3j, -0.4 + 0.9j]))


def cz(*shape, dtype=np.complex128):
    return lucid.tensor((RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype),
                        requires_grad=True)


def scaled_mul(in_im=1.0, out_im=1.0, jvp_im=1.0):
    """``z * C`` whose vjp is scaled on the imaginary part of the input (``in_im``) or for the
    imaginary part of the output (``out_im``), and whose jvp's imaginary part is scaled (``jvp_im``)."""

    def vjp(g):  # the right vjp is g * conj(C)
        r = g * C.conj()
        return lucid.complex(r.real, r.imag * in_im)

    class Mul(Function):
        @staticmethod
        def forward(ctx, z):
            return z * C

        @staticmethod
        def backward(ctx, g):
            # split the cotangent: the part selecting real outputs, and the part selecting imaginary ones
            return vjp(lucid.complex(g.real, g.real * 0)) + out_im * vjp(lucid.complex(g.imag * 0, g.imag))

        @staticmethod
        def jvp(ctx, t):
            r = t * C
            return lucid.complex(r.real, r.imag * jvp_im)

    return Mul.apply


def test_right_complex_gradients_pass_in_fast_mode():
    z, w, x = cz(2, 3), cz(3, 2), lucid.tensor(RNG.standard_normal((2, 3)), requires_grad=True)
    cases = [
        (lucid.exp, (z,)), (lambda a: a.abs(), (z,)), (lambda a, b: a @ b, (z, w)),
        (lucid.view_as_real, (z,)), (lambda a: lucid.complex(a, a * 2), (x,)),
        (lambda a, b: (a * b.T).sum(0), (x, w)), (lucid.sin, (cz(3, dtype=np.complex64),)),
        (scaled_mul(), (cz(3),)),
    ]
    for f, args in cases:
        assert gradcheck(f, args, fast_mode=True, check_forward_ad=True)
        assert gradgradcheck(f, args, fast_mode=True)


@pytest.mark.parametrize("kw,part", [
    (dict(in_im=1.5), "the imaginary part of the input and the real part of the output"),
    (dict(out_im=-1.0), "the real part of the input and the imaginary part of the output"),
])
def test_wrong_complex_vjp_is_caught_and_the_part_named(kw, part):
    f, z = scaled_mul(**kw), cz(3)
    with pytest.raises(GradcheckError, match=f"fast_mode.*reverse-mode mismatch .*considering {part} only"):
        gradcheck(f, (z,), fast_mode=True)
    assert gradcheck(f, (z,), fast_mode=True, raise_exception=False) is False
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):  # the full check agrees
        gradcheck(f, (z,))


def test_wrong_complex_jvp_is_caught_in_fast_mode():
    f = scaled_mul(jvp_im=2.0)
    with pytest.raises(GradcheckError, match="fast_mode.*forward-mode mismatch .*the imaginary part of the output"):
        gradcheck(f, (cz(3),), fast_mode=True, check_forward_ad=True)
    assert gradcheck(f, (cz(3),), fast_mode=True)  # reverse mode alone is right


def test_unconjugated_vjp_is_caught_in_fast_mode():
    # The classic mistake: the vjp of a holomorphic op without the conjugate (g * f' for g * conj(f')).
    class NoConj(Function):
        @staticmethod
        def forward(ctx, z):
            return z * C

        @staticmethod
        def backward(ctx, g):
            return g * C

    with pytest.raises(GradcheckError, match="fast_mode.*reverse-mode mismatch"):
        gradcheck(NoConj.apply, (cz(3),), fast_mode=True)


def test_real_input_complex_output_wrong_imaginary_cotangent():
    class Embed(Function):  # x -> x * C for a real x; its vjp ignores the imaginary cotangent
        @staticmethod
        def forward(ctx, x):
            return x * C

        @staticmethod
        def backward(ctx, g):
            return (g.real * C.real)

    x = lucid.tensor(RNG.standard_normal(3), requires_grad=True)
    with pytest.raises(GradcheckError, match="considering the imaginary part of the output only"):
        gradcheck(Embed.apply, (x,), fast_mode=True)
