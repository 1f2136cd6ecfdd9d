"""lucid.fft against explicitly written-out DFT matrices.

Every 1-D transform is written as a matrix ``M`` (complex-linear transforms: ``y = M x``;
transforms with a real output: ``y = Re(M x)``). Under NOTE [Complex gradients] the vjp of
either is ``M^H g`` (its real part for a real input), and the jvp is ``M t`` (``Re(M t)``).
This checks the adjoints of NOTE [FFT adjoints] — the rfft vjp is not irfft, the irfft vjp
is not rfft, the DC/Nyquist bins, n-padding and trimming — for odd and even sizes and every norm.
"""
import numpy as np
import pytest

import lucid
import lucid.func as F

NORMS = [None, "backward", "forward", "ortho"]


def _scale(n, norm, inverse):
    norm = norm or "backward"
    if norm == "ortho":
        return 1 / np.sqrt(n)
    return 1 / n if (norm == "backward") == inverse else 1.0


def _dft(n_out, n, sign, scale, period=None):
    """``scale * exp(sign 2 pi i k j / period)``, rows k < n_out, columns j < n (period n)."""
    k, j = np.arange(n_out)[:, None], np.arange(n)[None, :]
    return scale * np.exp(sign * 2j * np.pi * k * j / (period or n))


def _resize_cols(m, length):
    """``M P`` where P zero-pads or trims an input of ``length`` to M's column count."""
    out = np.zeros((m.shape[0], length), complex)
    k = min(length, m.shape[1])
    out[:, :k] = m[:, :k]
    return out


def _c2r_matrix(n, norm):
    """irfft (length n) as ``y = Re(C h)`` on the half spectrum h (m = n//2 + 1 bins):
    interior bins count twice, DC and Nyquist once (their imaginary parts drop out)."""
    m = n // 2 + 1
    c = np.full(m, 2.0)
    c[0] = 1
    if n % 2 == 0:
        c[-1] = 1
    return _dft(n, m, +1, _scale(n, norm, True), period=n) * c[None, :]


def matrix(name, length, n, norm):
    """(M, real_out) such that name(x, n=n, norm=norm) == M x (or Re(M x)) for len(x) == length."""
    nn = length if n is None else n
    if name == "fft":
        return _resize_cols(_dft(nn, nn, -1, _scale(nn, norm, False)), length), False
    if name == "ifft":
        return _resize_cols(_dft(nn, nn, +1, _scale(nn, norm, True)), length), False
    if name == "rfft":
        return _resize_cols(_dft(nn // 2 + 1, nn, -1, _scale(nn, norm, False)), length), False
    swap = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}[norm]
    if name == "ihfft":  # conj(rfft(x, norm=swap))
        return np.conj(_resize_cols(_dft(nn // 2 + 1, nn, -1, _scale(nn, swap, False)), length)), False
    out = 2 * (length - 1) if n is None else n
    if name == "irfft":
        return _resize_cols(_c2r_matrix(out, norm), length), True
    if name == "hfft":  # irfft(conj(x), norm=swap) = Re(conj(C) x)
        return np.conj(_resize_cols(_c2r_matrix(out, swap), length)), True
    raise ValueError(name)


def _cases():
    for name in ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]:
        for length in (4, 5):
            for n in (None, 3, 6, 7):
                for norm in NORMS:
                    yield pytest.param(name, length, n, norm, id=f"{name}-L{length}-n{n}-{norm}")


def _input(rng, name, length):
    real = name in ("rfft", "ihfft")
    x = rng.standard_normal(length)
    return x if real else x + 1j * rng.standard_normal(length)


@pytest.mark.parametrize("name,length,n,norm", list(_cases()))
def test_value_vjp_jvp_equal_the_explicit_matrix(name, length, n, norm):
    rng = np.random.default_rng(length * 100 + (n or 0))
    M, real_out = matrix(name, length, n, norm)
    x = _input(rng, name, length)
    f = lambda t: getattr(lucid.fft, name)(t, n=n, norm=norm)  # noqa: E731
    y = M @ x
    want = y.real if real_out else y
    got = f(lucid.tensor(x))
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)
    # vjp = M^H g (its real part for a real input)
    g = rng.standard_normal(want.shape) + (0 if real_out else 1j * rng.standard_normal(want.shape))
    _, vjp_fn = F.vjp(f, lucid.tensor(x))
    (ct,) = vjp_fn(lucid.tensor(g))
    adj = M.conj().T @ g
    np.testing.assert_allclose(ct.numpy(), adj.real if np.isrealobj(x) else adj, atol=1e-12)
    assert (ct.dtype.kind == "c") == np.iscomplexobj(x)
    # jvp = M t (Re for a real output)
    t = _input(rng, name, length)
    _, tout = F.jvp(f, (lucid.tensor(x),), (lucid.tensor(t),))
    mt = M @ t
    np.testing.assert_allclose(tout.numpy(), mt.real if real_out else mt, atol=1e-12)


def test_rfft_vjp_is_not_irfft():
    # the interior bins of the half spectrum stand for two bins of the full one
    x = lucid.tensor(np.arange(6.0), requires_grad=True)
    g = np.zeros(4, complex)
    g[1] = 1.0
    lucid.fft.rfft(x).backward(lucid.tensor(g))
    np.testing.assert_allclose(x.grad.numpy(), np.cos(2 * np.pi * np.arange(6) / 6), atol=1e-12)
    assert not np.allclose(x.grad.numpy(), np.fft.irfft(g, 6) * 6)


def test_irfft_vjp_is_not_rfft_and_dc_gets_a_real_gradient():
    h = lucid.tensor(np.array([1 + 2j, 0.5 - 1j, 2 + 3j, 1j]), requires_grad=True)
    g = np.random.default_rng(0).standard_normal(6)
    lucid.fft.irfft(h).backward(lucid.tensor(g))
    want = np.fft.rfft(g) / 6
    want[1:3] *= 2
    np.testing.assert_allclose(h.grad.numpy(), want, atol=1e-12)
    assert h.grad.numpy()[0].imag == 0 and h.grad.numpy()[3].imag == 0


def test_real_leaf_gets_real_gradient_from_fft():
    x = lucid.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)
    lucid.view_as_real(lucid.fft.fft(x)).pow(2).sum().backward()
    assert x.grad.dtype == lucid.float64
    # sum |F x|^2 = n |x|^2 (Parseval): gradient 2 n x
    np.testing.assert_allclose(x.grad.numpy(), 6 * x.detach().numpy(), atol=1e-12)
