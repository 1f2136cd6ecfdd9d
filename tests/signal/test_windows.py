"""Window functions: ``lucid.hann_window`` & co. (torch.*_window) and ``lucid.signal.windows``
(torch.signal.windows), by value against closed forms written from their definitions and
against SciPy, with PyTorch's edge cases (lengths 0 and 1), dtypes, devices and errors."""
import math

import numpy as np
import pytest
import scipy.signal.windows as sw

import lucid
import lucid.signal
from lucid.testing import strict_device

W = lucid.signal.windows


# ------------------------------------------------------------- closed forms (torch.*_window)


def _sym_grid(n, periodic):
    """Points k and the symmetric length m whose first n points the window is."""
    return np.arange(n, dtype=np.float64), (n + 1 if periodic else n)


def _short(f):
    """Lengths 0 and 1 give an empty window and a single 1 (PyTorch's edge cases)."""
    return lambda n, *a: np.ones(n) if n <= 1 else f(n, *a)


@_short
def np_hamming(n, periodic=True, alpha=0.54, beta=0.46):
    k, m = _sym_grid(n, periodic)
    return alpha - beta * np.cos(2 * np.pi * k / (m - 1))


@_short
def np_blackman(n, periodic=True):
    k, m = _sym_grid(n, periodic)
    t = 2 * np.pi * k / (m - 1)
    return 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)


@_short
def np_bartlett(n, periodic=True):
    k, m = _sym_grid(n, periodic)
    return 1 - np.abs(2 * k / (m - 1) - 1)


@_short
def np_kaiser(n, periodic=True, beta=12.0):
    k, m = _sym_grid(n, periodic)
    a = (m - 1) / 2
    return np.i0(beta * np.sqrt(1 - ((k - a) / a) ** 2)) / np.i0(beta)


FACTORIES = [
    ("hann_window", lambda n, p: np_hamming(n, p, 0.5, 0.5), {}),
    ("hamming_window", np_hamming, {}),
    ("hamming_window", lambda n, p: np_hamming(n, p, 0.6, 0.3), {"alpha": 0.6, "beta": 0.3}),
    ("blackman_window", np_blackman, {}),
    ("bartlett_window", np_bartlett, {}),
    ("kaiser_window", np_kaiser, {}),
    ("kaiser_window", lambda n, p: np_kaiser(n, p, 3.5), {"beta": 3.5}),
]


@pytest.mark.parametrize("name,ref,kw", FACTORIES)
@pytest.mark.parametrize("n", [0, 1, 2, 3, 8, 9])
@pytest.mark.parametrize("periodic", [True, False])
def test_factory_matches_definition(name, ref, kw, n, periodic):
    w = getattr(lucid, name)(n, periodic, dtype=lucid.float64, **kw)
    assert w.dtype == lucid.float64 and tuple(w.shape) == (n,)
    np.testing.assert_allclose(w.numpy(), ref(n, periodic), rtol=1e-12, atol=1e-14)
    w32 = getattr(lucid, name)(n, periodic, **kw)
    assert w32.dtype == lucid.float32
    np.testing.assert_allclose(w32.numpy(), ref(n, periodic), rtol=1e-5, atol=1e-6)


def test_factory_closed_values():
    np.testing.assert_allclose(lucid.hann_window(4, dtype=lucid.float64).numpy(), [0, 0.5, 1, 0.5], atol=1e-15)
    np.testing.assert_allclose(lucid.hann_window(3, periodic=False, dtype=lucid.float64).numpy(), [0, 1, 0],
                               atol=1e-15)
    np.testing.assert_allclose(lucid.bartlett_window(4).numpy(), [0, 0.5, 1, 0.5])
    np.testing.assert_allclose(lucid.hamming_window(2, periodic=False).numpy(), [0.08, 0.08], rtol=1e-6)
    np.testing.assert_allclose(lucid.kaiser_window(4, periodic=False, beta=0.0).numpy(), np.ones(4))
    # periodic(n) is the symmetric window of n + 1 without its last point
    for name in ("hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window"):
        f = getattr(lucid, name)
        np.testing.assert_allclose(f(7, True, dtype=lucid.float64).numpy(),
                                   f(8, False, dtype=lucid.float64).numpy()[:7], rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name,kw", [("hann_window", {}), ("hamming_window", {"alpha": 0.6, "beta": 0.3}),
                                     ("blackman_window", {}), ("bartlett_window", {}),
                                     ("kaiser_window", {"beta": 5.0})])
def test_factory_matches_torch(name, kw):
    torch = pytest.importorskip("torch")
    for n in (0, 1, 2, 5, 16):
        for periodic in (True, False):
            for ldt, tdt, tol in ((lucid.float32, torch.float32, 1e-6), (lucid.float64, torch.float64, 1e-13),
                                  (lucid.float16, torch.float16, 1e-3)):
                got = getattr(lucid, name)(n, periodic, dtype=ldt, **kw).numpy()
                want = getattr(torch, name)(n, periodic, dtype=tdt, **kw).numpy()
                assert got.dtype == want.dtype and got.shape == want.shape
                np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), atol=tol)


def test_factory_keywords():
    lucid.set_default_dtype(lucid.float64)
    try:
        assert lucid.hann_window(3).dtype == lucid.float64
        assert lucid.signal.windows.hann(3).dtype == lucid.float64
    finally:
        lucid.set_default_dtype(lucid.float32)
    w = lucid.kaiser_window(5, requires_grad=True)
    assert w.requires_grad and w.is_leaf and w.grad_fn is None
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * w.detach().numpy())
    assert not lucid.hann_window(5).requires_grad
    e = lucid.hann_window(0, requires_grad=True)
    assert tuple(e.shape) == (0,) and e.requires_grad


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window", "bartlett_window",
                                  "kaiser_window"])
def test_factory_errors(name):
    f = getattr(lucid, name)
    with pytest.raises(RuntimeError, match=rf"^{name}: requires non-negative window_length, got window_length=-1"):
        f(-1)
    with pytest.raises(RuntimeError, match=rf"^{name}: expects floating point dtypes, got lucid.int64"):
        f(4, dtype=lucid.int64)
    with pytest.raises(RuntimeError, match=rf"^{name}: expects floating point dtypes"):
        f(4, dtype=lucid.complex64)
    with pytest.raises(TypeError, match=rf"^{name}: window_length must be an int, got float"):
        f(3.5)


# ----------------------------------------------------------------------- signal.windows


SCIPY = {
    "bartlett": (lambda M, sym: sw.bartlett(M, sym=sym), {}),
    "blackman": (lambda M, sym: sw.blackman(M, sym=sym), {}),
    "cosine": (lambda M, sym: sw.cosine(M, sym=sym), {}),
    "exponential": (lambda M, sym: sw.exponential(M, tau=0.7, sym=sym), {"tau": 0.7}),
    "gaussian": (lambda M, sym: sw.gaussian(M, 1.3, sym=sym), {"std": 1.3}),
    "general_cosine": (lambda M, sym: sw.general_cosine(M, [0.4, 0.3, 0.2, 0.1], sym=sym),
                       {"a": [0.4, 0.3, 0.2, 0.1]}),
    "general_hamming": (lambda M, sym: sw.general_hamming(M, 0.6, sym=sym), {"alpha": 0.6}),
    "hamming": (lambda M, sym: sw.hamming(M, sym=sym), {}),
    "hann": (lambda M, sym: sw.hann(M, sym=sym), {}),
    "kaiser": (lambda M, sym: sw.kaiser(M, 5.0, sym=sym), {"beta": 5.0}),
    "nuttall": (lambda M, sym: sw.nuttall(M, sym=sym), {}),
}


def test_signal_windows_surface():
    assert sorted(W.__all__) == sorted(SCIPY)
    assert lucid.signal.windows is W and lucid.signal.__all__ == ["windows"]


@pytest.mark.parametrize("name", sorted(SCIPY))
@pytest.mark.parametrize("M", [0, 1, 2, 5, 8])
@pytest.mark.parametrize("sym", [True, False])
def test_signal_window_matches_scipy(name, M, sym):
    ref, kw = SCIPY[name]
    got = getattr(W, name)(M, sym=sym, dtype=lucid.float64, **kw)
    assert got.dtype == lucid.float64 and tuple(got.shape) == (M,)
    np.testing.assert_allclose(got.numpy(), ref(M, sym), rtol=1e-12, atol=1e-14)
    got32 = getattr(W, name)(M, sym=sym, **kw)
    assert got32.dtype == lucid.float32
    np.testing.assert_allclose(got32.numpy(), ref(M, sym), rtol=1e-5, atol=1e-6)


def test_signal_windows_defaults_and_closed_values():
    np.testing.assert_allclose(W.exponential(5, dtype=lucid.float64).numpy(), np.exp(-np.abs(np.arange(5) - 2.0)))
    np.testing.assert_allclose(W.exponential(4, sym=False, center=1.0, tau=2.0, dtype=lucid.float64).numpy(),
                               np.exp(-np.abs(np.arange(4) - 1.0) / 2))
    np.testing.assert_allclose(W.gaussian(5, dtype=lucid.float64).numpy(), np.exp(-0.5 * (np.arange(5) - 2.0) ** 2))
    np.testing.assert_allclose(W.cosine(4, dtype=lucid.float64).numpy(), np.sin(np.pi * (np.arange(4) + 0.5) / 4))
    np.testing.assert_allclose(W.kaiser(4, dtype=lucid.float64).numpy(), sw.kaiser(4, 12.0))  # beta 12
    np.testing.assert_allclose(W.general_hamming(6, dtype=lucid.float64).numpy(), sw.hamming(6))  # alpha 0.54
    assert W.kaiser(1).tolist() == [1.0] and W.bartlett(1).tolist() == [1.0] and W.hann(1).tolist() == [1.0]


def test_signal_windows_match_torch():
    torch = pytest.importorskip("torch")
    for name, (_, kw) in SCIPY.items():
        for M in (0, 1, 2, 7, 10):
            for sym in (True, False):
                for ldt, tdt, tol in ((lucid.float32, torch.float32, 1e-6), (lucid.float64, torch.float64, 1e-13)):
                    got = getattr(W, name)(M, sym=sym, dtype=ldt, **kw).numpy()
                    want = getattr(torch.signal.windows, name)(M, sym=sym, dtype=tdt, **kw).numpy()
                    assert got.dtype == want.dtype and got.shape == want.shape, (name, M, sym)
                    np.testing.assert_allclose(got, want, atol=tol, err_msg=f"{name} M={M} sym={sym}")
    got = W.exponential(6, sym=False, center=2.5, tau=0.5, dtype=lucid.float64).numpy()
    want = torch.signal.windows.exponential(6, sym=False, center=2.5, tau=0.5, dtype=torch.float64).numpy()
    np.testing.assert_allclose(got, want, atol=1e-14)


def test_signal_windows_requires_grad():
    w = W.gaussian(4, requires_grad=True)
    assert w.requires_grad and w.is_leaf
    w.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.ones(4))


@pytest.mark.parametrize("name", sorted(SCIPY))
def test_signal_window_errors(name):
    f, kw = getattr(W, name), SCIPY[name][1]
    with pytest.raises(ValueError, match=rf"^{name}: requires non-negative window length, got M=-1"):
        f(-1, **kw)
    with pytest.raises(ValueError, match=rf"^{name}: expects float32 or float64 dtypes, got: lucid.float16"):
        f(3, dtype=lucid.float16, **kw)
    with pytest.raises(ValueError, match=rf"^{name}: expects float32 or float64 dtypes, got: lucid.int64"):
        f(3, dtype=lucid.int64, **kw)
    with pytest.raises(ValueError, match=rf"^{name}: is implemented for strided tensors only"):
        f(3, layout="sparse_coo", **kw)
    with pytest.raises(TypeError, match=rf"^{name}: M must be an int"):
        f(2.5, **kw)


def test_signal_window_parameter_errors():
    with pytest.raises(ValueError, match=r"^exponential: Tau must be positive, got: 0 instead"):
        W.exponential(3, tau=0)
    with pytest.raises(ValueError, match=r"^exponential: Center must be None for symmetric windows"):
        W.exponential(3, center=1.0)
    with pytest.raises(ValueError, match=r"^gaussian: Standard deviation must be positive, got: -1"):
        W.gaussian(3, std=-1)
    with pytest.raises(ValueError, match=r"^kaiser: beta must be non-negative, got: -0.5"):
        W.kaiser(3, beta=-0.5)
    with pytest.raises(TypeError, match=r"^general_cosine: Coefficients must be a list/tuple"):
        W.general_cosine(3, a=0.5)
    with pytest.raises(ValueError, match=r"^general_cosine: Coefficients cannot be empty"):
        W.general_cosine(3, a=[])
    with pytest.raises(TypeError):
        W.general_cosine(3)  # a is required, as in PyTorch
    assert tuple(W.general_cosine(1, a=[]).shape) == (1,)  # lengths 0 and 1 never read `a`, as PyTorch


# ------------------------------------------------------------------------------ devices


def test_windows_honour_device_and_default_device():
    strict_device.enable()
    dev = lucid.device("strict:1")
    for w in (lucid.hann_window(4, device=dev), lucid.kaiser_window(5, device=dev),
              lucid.bartlett_window(0, device=dev),
              W.kaiser(5, device=dev), W.general_cosine(6, a=[0.5, 0.5], device=dev), W.exponential(1, device=dev)):
        assert w.device == dev
    np.testing.assert_allclose(lucid.kaiser_window(5, device=dev).numpy(), lucid.kaiser_window(5).numpy())
    np.testing.assert_allclose(W.kaiser(5, device=dev).numpy(), W.kaiser(5).numpy())
    old = lucid.get_default_device()
    lucid.set_default_device("strict:0")
    try:
        assert lucid.blackman_window(3).device == lucid.device("strict:0")
        assert W.nuttall(3).device == lucid.device("strict:0")
        assert lucid.hann_window(1).device == lucid.device("strict:0")
    finally:
        lucid.set_default_device(old)
    assert lucid.hann_window(3).device == old


def test_pi_is_what_the_windows_use():
    # hann at a quarter period is exactly a half: guards the 2 pi / (N - 1) scaling
    assert math.isclose(lucid.hann_window(8, dtype=lucid.float64)[2].item(), 0.5, abs_tol=1e-15)
