"""stft / istft: values against a direct DFT sum written from the definition, the round trip
istft(stft(x)) == x, shapes and dtypes, gradients (w.r.t. signal and window, also through
vmap/jvp), PyTorch parity where torch is installed, and the error messages."""
import warnings

import numpy as np
import pytest

import lucid
import lucid.func as F
from lucid.testing import strict_device

RNG = np.random.default_rng(7)


def dft_stft(x, n_fft, hop, window, center, pad_mode="reflect", onesided=True, normalized=False):
    """``X[f, t] = sum_k w[k] x[t hop + k] exp(-2 pi i f k / n_fft)``, summed by hand (1-D x)."""
    modes = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}
    if center:
        x = np.pad(x, n_fft // 2, mode=modes[pad_mode])
    left = (n_fft - len(window)) // 2
    w = np.zeros(n_fft, np.result_type(window, 1.0))
    w[left:left + len(window)] = window
    n_frames = 1 + (len(x) - n_fft) // hop
    n_freq = n_fft // 2 + 1 if onesided else n_fft
    out = np.zeros((n_freq, n_frames), np.complex128)
    k = np.arange(n_fft)
    for t in range(n_frames):
        for f in range(n_freq):
            out[f, t] = np.sum(w * x[t * hop:t * hop + n_fft] * np.exp(-2j * np.pi * f * k / n_fft))
    return out / np.sqrt(n_fft) if normalized else out


def _t(a, **kw):
    return lucid.tensor(a, **kw)


# ------------------------------------------------------------------------------ values


@pytest.mark.parametrize("n_fft,hop,win,center,pad_mode", [
    (4, 1, 4, True, "reflect"), (6, 2, 5, True, "constant"), (5, 3, 3, False, "reflect"),
    (8, 2, 8, True, "replicate"), (4, 4, 2, True, "circular"),
])
@pytest.mark.parametrize("normalized", [False, True])
def test_stft_matches_the_dft_sum(n_fft, hop, win, center, pad_mode, normalized):
    x, w = RNG.standard_normal(11), RNG.uniform(0.2, 1.0, win)
    got = lucid.stft(_t(x), n_fft, hop_length=hop, win_length=win, window=_t(w), center=center, pad_mode=pad_mode,
                     normalized=normalized, return_complex=True)
    assert got.dtype == lucid.complex128
    np.testing.assert_allclose(got.numpy(), dft_stft(x, n_fft, hop, w, center, pad_mode, normalized=normalized),
                               atol=1e-12)
    two = lucid.stft(_t(x), n_fft, hop_length=hop, win_length=win, window=_t(w), center=center, pad_mode=pad_mode,
                     normalized=normalized, onesided=False, return_complex=True)
    np.testing.assert_allclose(two.numpy(), dft_stft(x, n_fft, hop, w, center, pad_mode, False, normalized),
                               atol=1e-12)


def test_stft_complex_input_batch_and_layouts():
    x = RNG.standard_normal((3, 10)) + 1j * RNG.standard_normal((3, 10))
    w = RNG.uniform(0.5, 1.0, 4)
    got = lucid.stft(_t(x), 4, hop_length=2, window=_t(w))  # complex input: return_complex defaults to True
    assert tuple(got.shape) == (3, 4, 6) and got.dtype == lucid.complex128
    for b in range(3):
        np.testing.assert_allclose(got.numpy()[b], dft_stft(x[b], 4, 2, w, True, onesided=False), atol=1e-12)
    real = RNG.standard_normal(10)
    with pytest.warns(UserWarning, match="return_complex=False is deprecated"):
        view = lucid.stft(_t(real), 4, hop_length=2, window=_t(w), return_complex=False)
    want = dft_stft(real, 4, 2, w, True)
    assert tuple(view.shape) == want.shape + (2,)
    np.testing.assert_allclose(view.numpy(), np.stack([want.real, want.imag], -1), atol=1e-12)
    # a complex window makes the transform two-sided and complex
    cw = w + 1j * RNG.standard_normal(4)
    np.testing.assert_allclose(lucid.stft(_t(real), 4, hop_length=2, window=_t(cw)).numpy(),
                               dft_stft(real, 4, 2, cw, True, onesided=False), atol=1e-12)


def test_stft_shapes_dtypes_and_defaults():
    x = lucid.randn(2, 16)
    out = lucid.stft(x, 8, window=lucid.hann_window(8), return_complex=True)
    assert tuple(out.shape) == (2, 5, 1 + 16 // 2) and out.dtype == lucid.complex64  # hop defaults to n_fft // 4
    out = lucid.stft(x[0], 8, hop_length=3, window=lucid.hann_window(8), center=False, return_complex=True)
    assert tuple(out.shape) == (5, 1 + (16 - 8) // 3)
    mixed = lucid.stft(x, 8, window=lucid.hann_window(8, dtype=lucid.float64), return_complex=True)
    assert mixed.dtype == lucid.complex128
    with pytest.warns(UserWarning, match="A window was not provided"):
        rect = lucid.stft(x, 8, return_complex=True)
    np.testing.assert_allclose(rect.numpy(), lucid.stft(x, 8, window=lucid.ones(8), return_complex=True).numpy())
    # a window shorter than n_fft is centred, zero padded
    short = lucid.stft(x, 8, win_length=4, window=lucid.ones(4), return_complex=True)
    padded = lucid.stft(x, 8, window=lucid.tensor([0, 0, 1, 1, 1, 1, 0, 0.0]), return_complex=True)
    np.testing.assert_allclose(short.numpy(), padded.numpy(), atol=1e-6)
    assert x.stft(8, window=lucid.hann_window(8), return_complex=True).allclose(
        lucid.stft(x, 8, window=lucid.hann_window(8), return_complex=True))


def test_stft_align_to_window():
    x, w = RNG.standard_normal(10), RNG.uniform(0.5, 1.0, 2)
    got = lucid.stft(_t(x), 6, hop_length=2, win_length=2, window=_t(w), center=False, align_to_window=True,
                     return_complex=True)
    assert tuple(got.shape) == (4, 1 + (10 - 2) // 2)
    # frame t starts where its window does: x[2t], x[2t + 1]
    np.testing.assert_allclose(got.numpy()[0].real, [w @ x[2 * t:2 * t + 2] for t in range(5)], atol=1e-12)
    plain = lucid.stft(_t(x), 6, hop_length=2, win_length=2, window=_t(w), center=False, align_to_window=False,
                       return_complex=True)
    np.testing.assert_allclose(plain.numpy()[0].real, [w @ x[2 * t + 2:2 * t + 4] for t in range(3)], atol=1e-12)


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("n_fft,hop,win,center,batch,window", [
    (8, 2, 8, True, (), "hann"), (8, 4, 8, True, (3,), "hann"), (7, 2, 5, True, (), "hamming"),
    (6, 2, 6, False, (2,), "ones"), (8, 3, 6, True, (), "kaiser"),
])
@pytest.mark.parametrize("normalized", [False, True])
def test_round_trip(n_fft, hop, win, center, batch, window, normalized):
    x = lucid.tensor(RNG.standard_normal(batch + (23,)))
    w = {"hann": lucid.hann_window, "hamming": lucid.hamming_window, "kaiser": lucid.kaiser_window,
         "ones": lucid.ones}[window](win, dtype=lucid.float64)
    kw = dict(hop_length=hop, win_length=win, window=w, center=center, normalized=normalized)
    spec = lucid.stft(x, n_fft, return_complex=True, **kw)
    n_frames = spec.shape[-1]
    length = 23 if center else n_fft + hop * (n_frames - 1)
    back = lucid.istft(spec, n_fft, length=length, **kw)
    assert back.dtype == lucid.float64 and tuple(back.shape) == batch + (length,)
    np.testing.assert_allclose(back.numpy(), x.numpy()[..., :length], atol=1e-12)
    if center:
        assert tuple(lucid.istft(spec, n_fft, **kw).shape) == batch + (n_fft + hop * (n_frames - 1) - 2 * (n_fft // 2),)


def test_round_trip_complex_and_two_sided():
    x = lucid.tensor(RNG.standard_normal((2, 20)) + 1j * RNG.standard_normal((2, 20)))
    w = lucid.hann_window(8, dtype=lucid.float64)
    spec = lucid.stft(x, 8, hop_length=2, window=w)
    back = lucid.istft(spec, 8, hop_length=2, window=w, length=20, return_complex=True)
    assert back.dtype == lucid.complex128
    np.testing.assert_allclose(back.numpy(), x.numpy(), atol=1e-12)
    real = lucid.tensor(RNG.standard_normal(20))
    two = lucid.stft(real, 8, hop_length=2, window=w, onesided=False, return_complex=True)
    np.testing.assert_allclose(lucid.istft(two, 8, hop_length=2, window=w, length=20).numpy(), real.numpy(),
                               atol=1e-12)
    spec = lucid.stft(real, 8, hop_length=2, window=w, return_complex=True)
    assert spec.istft(8, hop_length=2, window=w, length=20).allclose(real)


def test_istft_length_pads_with_zeros():
    x = lucid.tensor(RNG.standard_normal(12))
    w = lucid.hamming_window(4, dtype=lucid.float64)  # nonzero everywhere: NOLA holds without center
    spec = lucid.stft(x, 4, hop_length=1, window=w, center=False, return_complex=True)
    with pytest.warns(UserWarning, match="padded with zeros"):
        y = lucid.istft(spec, 4, hop_length=1, window=w, center=False, length=15)
    assert tuple(y.shape) == (15,)
    np.testing.assert_allclose(y.numpy()[12:], 0)
    np.testing.assert_allclose(y.numpy()[:12], x.numpy(), atol=1e-12)
    np.testing.assert_allclose(lucid.istft(spec, 4, hop_length=1, window=w, center=False, length=7).numpy(),
                               x.numpy()[:7], atol=1e-12)

# ----------------------------------------------------------------------------- gradients


def test_gradients_and_transforms():
    x = lucid.tensor(RNG.standard_normal((2, 9)), requires_grad=True)
    w = lucid.tensor(RNG.uniform(0.5, 1.5, 3), requires_grad=True)

    def f(x, w):
        spec = lucid.stft(x, 4, hop_length=2, win_length=3, window=w, return_complex=True)
        return lucid.istft(spec * spec.abs(), 4, hop_length=2, win_length=3, window=w, length=9)

    assert lucid.autograd.gradcheck(f, [x, w])
    assert lucid.autograd.gradgradcheck(f, [x, w])
    xs = lucid.tensor(RNG.standard_normal((3, 9)))
    batched = F.vmap(lambda r: f(r, w.detach()))(xs)
    loop = lucid.stack([f(xs[i], w.detach()) for i in range(3)])
    np.testing.assert_allclose(batched.numpy(), loop.numpy(), atol=1e-12)
    ws = lucid.tensor(RNG.uniform(0.5, 1.5, (3, 3)))
    batched = F.vmap(lambda v: f(xs[0], v))(ws)
    loop = lucid.stack([f(xs[0], ws[i]) for i in range(3)])
    np.testing.assert_allclose(batched.numpy(), loop.numpy(), atol=1e-12)
    # stft is linear in the signal: its jvp along t is stft(t)
    t = lucid.tensor(RNG.standard_normal(9))
    g = lambda s: lucid.stft(s, 4, hop_length=1, window=w.detach(), win_length=3, return_complex=True)  # noqa: E731
    _, tang = F.jvp(g, (xs[1],), (t,))
    np.testing.assert_allclose(tang.numpy(), g(t).numpy(), atol=1e-12)


def test_gradients_match_torch():
    torch = pytest.importorskip("torch")
    x, w = RNG.standard_normal((2, 10)), RNG.uniform(0.5, 1.5, 4)
    lx, lw = _t(x, requires_grad=True), _t(w, requires_grad=True)
    tx, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    weights = RNG.standard_normal(10)

    def chain(m, x, w, wt):
        spec = m.stft(x, 4, hop_length=1, window=w, return_complex=True)
        return (m.istft(spec * spec.abs(), 4, hop_length=1, window=w, length=10) * wt).sum()

    chain(lucid, lx, lw, _t(weights)).backward()
    chain(torch, tx, tw, torch.tensor(weights)).backward()
    np.testing.assert_allclose(lx.grad.numpy(), tx.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lw.grad.numpy(), tw.grad.numpy(), rtol=1e-10, atol=1e-12)


# ------------------------------------------------------------------------- torch parity


def test_stft_istft_match_torch():
    torch = pytest.importorskip("torch")
    cases = [
        dict(n_fft=4, hop_length=1, center=True, pad_mode="reflect"),
        dict(n_fft=6, hop_length=2, win_length=4, center=True, pad_mode="constant", normalized=True),
        dict(n_fft=5, hop_length=2, center=False),
        dict(n_fft=5, hop_length=2, win_length=3, center=True, pad_mode="replicate"),
        dict(n_fft=8, hop_length=3, win_length=5, center=True, pad_mode="circular", onesided=False),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for kw in cases:
            win = kw.get("win_length", kw["n_fft"])
            for x in (RNG.standard_normal(13), RNG.standard_normal((2, 12)),
                      RNG.standard_normal(12) + 1j * RNG.standard_normal(12)):
                w = RNG.uniform(0.5, 1.5, win)
                ls = lucid.stft(_t(x), window=_t(w), return_complex=True, **kw)
                ts = torch.stft(torch.tensor(x), window=torch.tensor(w), return_complex=True, **kw)
                assert tuple(ls.shape) == tuple(ts.shape)
                np.testing.assert_allclose(ls.numpy(), ts.numpy(), atol=1e-12, err_msg=str(kw))
                ikw = {k: v for k, v in kw.items() if k != "pad_mode"}
                cplx = np.iscomplexobj(x)
                li = lucid.istft(ls, window=_t(w), return_complex=cplx, **ikw)
                ti = torch.istft(ts, window=torch.tensor(w), return_complex=cplx, **ikw)
                assert tuple(li.shape) == tuple(ti.shape)
                np.testing.assert_allclose(li.numpy(), ti.numpy(), atol=1e-12, err_msg=str(kw))
        # float32 signals and windows give complex64 / float32, as in PyTorch
        x32 = RNG.standard_normal(16).astype(np.float32)
        ls = lucid.stft(_t(x32), 8, window=lucid.hann_window(8), return_complex=True)
        ts = torch.stft(torch.tensor(x32), 8, window=torch.hann_window(8), return_complex=True)
        np.testing.assert_allclose(ls.numpy(), ts.numpy(), atol=1e-5)
        li, ti = lucid.istft(ls, 8, window=lucid.hann_window(8)), torch.istft(ts, 8, window=torch.hann_window(8))
        assert li.dtype == lucid.float32 and ti.dtype == torch.float32
        np.testing.assert_allclose(li.numpy(), ti.numpy(), atol=1e-5)


# ------------------------------------------------------------------------------- errors


def test_stft_errors():
    x, w = lucid.randn(10), lucid.hann_window(4)
    with pytest.raises(RuntimeError, match=r"^stft: requires the return_complex parameter be given for real inputs"):
        lucid.stft(x, 4, window=w)
    with pytest.raises(RuntimeError, match=r"^stft: expected a tensor of floating point or complex values"):
        lucid.stft(lucid.arange(10), 4, window=w, return_complex=True)
    with pytest.raises(RuntimeError, match=r"^stft: expected a 1D or 2D tensor"):
        lucid.stft(lucid.randn(2, 2, 10), 4, window=w, return_complex=True)
    with pytest.raises(RuntimeError, match=r"^stft: expected 0 < n_fft <= 10 \(the signal's length\), but got "
                                           r"n_fft=11"):
        lucid.stft(x, 11, window=lucid.ones(11), center=False, return_complex=True)
    with pytest.raises(RuntimeError, match=r"^stft: expected hop_length > 0, but got hop_length=0"):
        lucid.stft(x, 2, window=lucid.ones(2), return_complex=True)  # n_fft // 4 == 0
    with pytest.raises(RuntimeError, match=r"^stft: expected 0 < win_length <= n_fft, but got win_length=5"):
        lucid.stft(x, 4, win_length=5, window=lucid.ones(5), return_complex=True)
    with pytest.raises(RuntimeError, match=r"^stft: expected a 1D window tensor of size equal to win_length=4, but "
                                           r"got window with size \[3\]"):
        lucid.stft(x, 4, window=lucid.ones(3), return_complex=True)
    with pytest.raises(RuntimeError, match=r"^stft: Cannot have onesided output if window or input is complex"):
        lucid.stft(x, 4, window=w.to(lucid.complex64), onesided=True)
    with pytest.raises(RuntimeError, match=r"^stft: align_to_window should only be set when center = false"):
        lucid.stft(x, 4, window=w, align_to_window=False, return_complex=True)
    with pytest.raises(NotImplementedError, match=r"^stft: unrecognised padding mode 'foo'"):
        lucid.stft(x, 4, window=w, pad_mode="foo", return_complex=True)
    with pytest.raises(RuntimeError, match=r"^stft: padding size should be less than the signal's length"):
        lucid.stft(lucid.randn(3), 8, window=lucid.ones(8), return_complex=True)
    with pytest.raises(TypeError, match=r"^stft: n_fft must be an int"):
        lucid.stft(x, 4.0, window=w, return_complex=True)


def test_istft_errors():
    w = lucid.hann_window(4, dtype=lucid.float64)
    spec = lucid.stft(lucid.randn(12, dtype=lucid.float64), 4, hop_length=1, window=w, return_complex=True)
    with pytest.raises(RuntimeError, match=r"^istft: requires a complex-valued input tensor"):
        lucid.istft(spec.real, 4, hop_length=1, window=w)
    with pytest.raises(RuntimeError, match=r"^istft: input tensor cannot be empty"):
        lucid.istft(spec[:, :0], 4, hop_length=1, window=w)
    with pytest.raises(RuntimeError, match=r"^istft: expected a complex tensor with 2 \(freq, frames\) or 3"):
        lucid.istft(spec[None, None], 4, hop_length=1, window=w)
    with pytest.raises(RuntimeError, match=r"^istft: expected the frequency dimension .* to match n_fft = 4 when "
                                           r"onesided=False, but got 3"):
        lucid.istft(spec, 4, hop_length=1, window=w, onesided=False)
    with pytest.raises(RuntimeError, match=r"match n_fft / 2 \+ 1 = 4 when onesided=True, but got 3"):
        lucid.istft(spec, 6, hop_length=1, win_length=4, window=w)
    with pytest.raises(RuntimeError, match=r"^istft: expected 0 < hop_length <= win_length"):
        lucid.istft(spec, 4, hop_length=5, window=w)
    with pytest.raises(RuntimeError, match=r"^istft: expected 0 < win_length <= n_fft"):
        lucid.istft(spec, 4, hop_length=1, win_length=5, window=w)
    with pytest.raises(RuntimeError, match=r"^istft: Invalid window shape"):
        lucid.istft(spec, 4, hop_length=1, win_length=3, window=w)
    with pytest.raises(RuntimeError, match=r"^istft: Cannot have onesided output if window or input is complex"):
        lucid.istft(spec, 4, hop_length=1, window=w, return_complex=True)
    with pytest.raises(RuntimeError, match=r"^istft: Complex windows are incompatible with return_complex=False"):
        lucid.istft(spec, 4, hop_length=1, window=w.to(lucid.complex128))
    with pytest.raises(RuntimeError, match=r"^istft: expected length > 0, but got length=0"):
        lucid.istft(spec, 4, hop_length=1, window=w, length=0)
    with pytest.raises(RuntimeError, match=r"^istft: window overlap add min is below 1e-11: the NOLA condition"):
        lucid.istft(spec, 4, hop_length=1, window=w, center=False)  # hann's zero at both ends
    with pytest.raises(RuntimeError, match=r"^istft: window overlap add min"):
        lucid.istft(spec, 4, hop_length=1, window=lucid.zeros(4, dtype=lucid.float64))
    # the check reads the envelope through transforms too
    with pytest.raises(RuntimeError, match=r"^istft: window overlap add min"):
        F.vmap(lambda v: lucid.istft(spec, 4, hop_length=1, window=v))(lucid.zeros(2, 4, dtype=lucid.float64))
    with pytest.raises(RuntimeError, match=r"^istft: window overlap add min"):
        F.grad(lambda v: lucid.istft(spec, 4, hop_length=1, window=v).sum())(lucid.zeros(4, dtype=lucid.float64))


def test_device_mismatch_and_device_results():
    strict_device.enable()
    x = lucid.randn(10, device="strict:1")
    with pytest.raises(RuntimeError, match=r"^stft: input and window must be on the same device"):
        lucid.stft(x, 4, window=lucid.hann_window(4, device="cpu"), return_complex=True)
    w = lucid.hann_window(4, device="strict:1")
    spec = lucid.stft(x, 4, hop_length=1, window=w, return_complex=True)
    assert spec.device == lucid.device("strict:1")
    # the rectangular default window is made beside the input, not on the default device
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        assert lucid.stft(x, 4, win_length=3, return_complex=True).device == lucid.device("strict:1")
    y = lucid.istft(spec, 4, hop_length=1, window=w, length=10)
    assert y.device == lucid.device("strict:1")
    np.testing.assert_allclose(y.numpy(), x.numpy(), atol=1e-5)
    assert lucid.istft(spec, 4, hop_length=1, length=10).device == lucid.device("strict:1")
    with pytest.raises(RuntimeError, match=r"^istft: input and window must be on the same device"):
        lucid.istft(spec, 4, hop_length=1, window=lucid.hann_window(4, device="cpu"))
