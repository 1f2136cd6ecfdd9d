"""lucid.fft: dtypes, round trips, n-D adjoints (Kronecker products of DFT matrices), vmap vs a
loop, errors, PyTorch parity (values and gradients), and a spectral loss that trains."""
import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.autograd import gradcheck, gradgradcheck

FFT = lucid.fft


def test_float32_gives_complex64_and_back():
    x = lucid.randn(4, 8)
    assert FFT.rfft(x).dtype == lucid.complex64
    assert FFT.fft(x).dtype == lucid.complex64
    assert FFT.irfft(FFT.rfft(x)).dtype == lucid.float32
    assert FFT.hfft(FFT.ihfft(x)).dtype == lucid.float32
    assert FFT.fftn(x.double()).dtype == lucid.complex128
    assert FFT.fft(lucid.arange(4)).dtype == lucid.complex64  # integers: the default float first


@pytest.mark.parametrize("n", [5, 6])
@pytest.mark.parametrize("norm", [None, "forward", "ortho"])
def test_round_trips(n, norm):
    rng = np.random.default_rng(n)
    x = lucid.tensor(rng.standard_normal((3, n)))
    z = lucid.tensor(rng.standard_normal((3, n)) + 1j * rng.standard_normal((3, n)))
    np.testing.assert_allclose(FFT.irfft(FFT.rfft(x, norm=norm), n=n, norm=norm).numpy(), x.numpy(), atol=1e-12)
    np.testing.assert_allclose(FFT.ifft(FFT.fft(z, norm=norm), norm=norm).numpy(), z.numpy(), atol=1e-12)
    np.testing.assert_allclose(FFT.hfft(FFT.ihfft(x, norm=norm), n=n, norm=norm).numpy(), x.numpy(), atol=1e-12)
    np.testing.assert_allclose(FFT.ifftn(FFT.fftn(z, norm=norm), norm=norm).numpy(), z.numpy(), atol=1e-12)
    np.testing.assert_allclose(FFT.irfftn(FFT.rfftn(x, norm=norm), s=x.shape, norm=norm).numpy(), x.numpy(),
                               atol=1e-12)
    np.testing.assert_allclose(FFT.ifftshift(FFT.fftshift(z)).numpy(), z.numpy())


def test_irfft_accepts_real_input():
    h = lucid.tensor([3.0, 0.0])
    np.testing.assert_allclose(FFT.irfft(h, n=3).numpy(), [1.0, 1.0, 1.0], rtol=1e-6)


def _dft(n, sign=-1):
    k = np.arange(n)
    return np.exp(sign * 2j * np.pi * np.outer(k, k) / n)


def test_fft2_and_rfft2_vjp_are_kronecker_adjoints():
    rng = np.random.default_rng(3)
    a, b = 3, 4
    x = rng.standard_normal((a, b))
    full = np.kron(_dft(a), _dft(b))               # fft2 on a row-major (a, b) array
    half = np.kron(_dft(a), _dft(b)[: b // 2 + 1])  # rfft2 keeps b//2+1 columns
    for fn, M, xin in [(FFT.fft2, full, x + 1j * rng.standard_normal((a, b))), (FFT.rfft2, half, x)]:
        y = fn(lucid.tensor(xin))
        np.testing.assert_allclose(y.numpy().reshape(-1), M @ xin.reshape(-1), atol=1e-12)
        g = rng.standard_normal(y.shape) + 1j * rng.standard_normal(y.shape)
        _, vjp_fn = F.vjp(fn, lucid.tensor(xin))
        adj = (M.conj().T @ g.reshape(-1)).reshape(a, b)
        np.testing.assert_allclose(vjp_fn(lucid.tensor(g))[0].numpy(), adj.real if np.isrealobj(xin) else adj,
                                   atol=1e-12)


@pytest.mark.parametrize("fn,kw,real_in", [
    (FFT.rfft, {"n": 6}, True), (FFT.irfft, {"n": 5}, False), (FFT.fft, {"norm": "ortho"}, False),
    (FFT.hfft, {}, False), (FFT.ihfft, {"n": 3}, True), (FFT.rfft2, {}, True), (FFT.irfftn, {"s": (2, 6)}, False),
])
def test_vmap_matches_loop_and_vmap_of_grad(fn, kw, real_in):
    rng = np.random.default_rng(0)
    shape = (4, 3, 4)
    x = rng.standard_normal(shape) + (0 if real_in else 1j * rng.standard_normal(shape))
    got = F.vmap(lambda t: fn(t, **kw), in_dims=1)(lucid.tensor(x))
    want = np.stack([fn(lucid.tensor(x[:, i]), **kw).numpy() for i in range(3)])
    np.testing.assert_allclose(got.numpy(), want, atol=1e-12)

    def loss(t):
        y = fn(t, **kw)
        return (lucid.view_as_real(y) if y.dtype.kind == "c" else y).pow(2).sum()

    g = F.vmap(F.grad(loss))(lucid.tensor(x))
    for i in range(4):
        np.testing.assert_allclose(g.numpy()[i], F.grad(loss)(lucid.tensor(x[i])).numpy(), atol=1e-10)


def test_gradgradcheck_through_round_trip():
    x = lucid.tensor(np.random.default_rng(1).standard_normal((2, 5)), requires_grad=True)
    f = lambda t: FFT.irfft(FFT.rfft(t, norm="ortho") * FFT.rfft(t), n=5)  # noqa: E731
    assert gradcheck(f, (x,)) and gradgradcheck(f, (x,))


def test_errors():
    x = lucid.ones(4)
    with pytest.raises(ValueError, match="fft.fft: Invalid normalization mode"):
        FFT.fft(x, norm="bad")
    with pytest.raises(RuntimeError, match=r"fft.rfft: Invalid number of data points \(0\)"):
        FFT.rfft(x, n=0)
    with pytest.raises(RuntimeError, match="fft.rfft: expected a real input"):
        FFT.rfft(FFT.fft(x))
    with pytest.raises(RuntimeError, match="fft.fftn: dims must be unique"):
        FFT.fftn(lucid.ones(2, 2), dim=(0, 0))
    with pytest.raises(RuntimeError, match="fft.fft2: When given, dim and shape"):
        FFT.fft2(lucid.ones(2, 2), s=(2,))
    with pytest.raises(IndexError, match="fft.fft: dimension 3"):
        FFT.fft(x, dim=3)


def test_spectral_loss_trains():
    # Fit a filter h so that irfft(rfft(x) * rfft(h)) (circular convolution) matches a target;
    # the complex product's vjp needs the conjugate (NOTE [Holomorphic vjp]).
    rng = np.random.default_rng(0)
    n = 16
    x = lucid.tensor(rng.standard_normal((8, n)))
    h_true = rng.standard_normal(n)
    target = lucid.tensor(np.fft.irfft(np.fft.rfft(x.numpy()) * np.fft.rfft(h_true), n))
    h = lucid.zeros(n, dtype=lucid.float64, requires_grad=True)
    opt = lucid.optim.Adam([h], lr=0.05)
    first = None
    for _ in range(300):
        opt.zero_grad()
        y = FFT.irfft(FFT.rfft(x) * FFT.rfft(h), n=n)
        loss = ((y - target) ** 2).mean()
        first = float(loss) if first is None else first
        loss.backward()
        opt.step()
    assert float(loss) < 1e-4 * first
    np.testing.assert_allclose(h.detach().numpy(), h_true, atol=1e-2)


def test_parity_with_pytorch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    xr = rng.standard_normal((3, 4, 5))
    xc = xr + 1j * rng.standard_normal((3, 4, 5))
    cases = [("fft", xc, {"n": 7}), ("ifft", xr, {"dim": 0, "norm": "ortho"}), ("rfft", xr, {"n": 4}),
             ("irfft", xc, {"n": 9, "norm": "forward"}), ("hfft", xc, {"dim": 1}), ("ihfft", xr, {"n": 6}),
             ("fft2", xc, {"s": (3, 6)}), ("ifft2", xc, {}), ("rfft2", xr, {"dim": (0, 2)}),
             ("irfft2", xc, {"s": (5, 4)}), ("hfft2", xc, {"norm": "ortho"}), ("ihfft2", xr, {}),
             ("fftn", xr, {"s": (2, 3, 4)}), ("ifftn", xc, {"dim": (2, 0)}), ("rfftn", xr, {"norm": "forward"}),
             ("irfftn", xc, {"s": (3, 4, 6)}), ("hfftn", xc, {"s": (4, 6)}), ("ihfftn", xr, {"dim": (0, 1)})]
    for name, x, kw in cases:
        tt = torch.tensor(x, requires_grad=True)
        tout = getattr(torch.fft, name)(tt, **kw)
        lt = lucid.tensor(x, requires_grad=True)
        lout = getattr(FFT, name)(lt, **kw)
        np.testing.assert_allclose(lout.detach().numpy(), tout.detach().resolve_conj().numpy(), atol=1e-10,
                                   err_msg=name)
        g = rng.standard_normal(tout.shape) + (1j * rng.standard_normal(tout.shape) if tout.is_complex() else 0)
        tout.backward(torch.tensor(g))
        lout.backward(lucid.tensor(g))
        np.testing.assert_allclose(lt.grad.numpy(), tt.grad.resolve_conj().numpy(), atol=1e-10, err_msg=name)
