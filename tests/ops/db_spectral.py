"""Op database entries for lucid/ops/spectral.py and lucid/signal/windows.py: stft and istft
(gradients w.r.t. the signal and the window, jvp, vmap) against NumPy references written from
their definitions (frames, window, np.fft, an explicit overlap-add), and the window factories
by value (they take no tensor: the ``like`` argument only carries the device asked for, so the
``--lucid-inputs`` pass checks that ``device=`` is honoured; the entries without it make the
window on the default device, which the ``--lucid-device`` passes set)."""
import warnings

import numpy as np
import scipy.signal.windows as sw

import lucid
import lucid.signal
from db_complex import cfloats
from opinfo import OpInfo, Sample, floats, positive

_NP_MODES = {"reflect": "reflect", "constant": "constant", "replicate": "edge", "circular": "wrap"}


def _padded_window(w, n_fft, win):
    w = np.ones(win) if w is None else np.asarray(w)
    left = (n_fft - win) // 2
    return np.pad(w, (left, n_fft - win - left))


def np_stft(x, w=None, *, n_fft, hop_length=None, win_length=None, center=True, pad_mode="reflect",
            normalized=False, onesided=None, return_complex=True, align_to_window=None):
    """``X[..., f, t] = sum_k w[k] x[t hop + k] exp(-2 pi i f k / n_fft)`` on the padded signal."""
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    sig = np.atleast_2d(x)
    if center:
        sig = np.pad(sig, ((0, 0), (n_fft // 2, n_fft // 2)), mode=_NP_MODES[pad_mode])
    wp = _padded_window(w, n_fft, win)
    if align_to_window:
        left = (n_fft - win) // 2
        sig = np.pad(sig, ((0, 0), (left, n_fft - win - left)))
    n_frames = 1 + (sig.shape[-1] - n_fft) // hop
    frames = np.stack([sig[:, t * hop:t * hop + n_fft] for t in range(n_frames)], axis=1) * wp
    spec = np.fft.fft(frames, axis=-1, norm="ortho" if normalized else "backward")
    if (not np.iscomplexobj(frames)) if onesided is None else onesided:
        spec = spec[..., :n_fft // 2 + 1]
    out = np.swapaxes(spec, -1, -2)
    out = out if np.ndim(x) == 2 else out[0]
    return out if return_complex else np.stack([out.real, out.imag], axis=-1)


def np_istft(z, w=None, *, n_fft, hop_length=None, win_length=None, center=True, normalized=False,
             onesided=None, length=None, return_complex=False):
    """Each frame inverted, windowed and overlap-added, divided by the overlap-added squared window."""
    hop = n_fft // 4 if hop_length is None else hop_length
    win = n_fft if win_length is None else win_length
    wp = _padded_window(w, n_fft, win)
    frames = np.swapaxes(z if z.ndim == 3 else z[None], -1, -2)
    onesided = frames.shape[-1] != n_fft if onesided is None else onesided
    norm = "ortho" if normalized else "backward"
    if return_complex:
        frames = np.fft.ifft(frames, axis=-1, norm=norm)
    else:
        frames = np.fft.irfft(frames[..., :n_fft // 2 + 1], n=n_fft, axis=-1, norm=norm)
    n_frames = frames.shape[1]
    total = n_fft + hop * (n_frames - 1)
    y = np.zeros((frames.shape[0], total), np.result_type(frames, wp))
    env = np.zeros(total, wp.dtype)
    for t in range(n_frames):
        y[:, t * hop:t * hop + n_fft] += frames[:, t] * wp
        env[t * hop:t * hop + n_fft] += wp * wp
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else total - (n_fft // 2 if center else 0)
    y = y[:, start:end] / env[start:end]
    y = np.pad(y, ((0, 0), (0, max(end - total, 0))))
    return y if z.ndim == 3 else y[0]


def _stft(x, w=None, **kw):
    with warnings.catch_warnings():  # the samples ask for what PyTorch warns about (no window, real view)
        warnings.simplefilter("ignore", UserWarning)
        return lucid.stft(x, window=w, **kw)


def _istft(z, w=None, **kw):
    with warnings.catch_warnings():  # a length past the signal pads with zeros, with PyTorch's warning
        warnings.simplefilter("ignore", UserWarning)
        return lucid.istft(z, window=w, **kw)


def _stft_samples(rng):
    return [
        Sample((floats(rng, 8), floats(rng, 4)), {"n_fft": 4, "hop_length": 2, "return_complex": True},
               name="1-D, center reflect, onesided"),
        Sample((floats(rng, 2, 7), floats(rng, 3)),
               {"n_fft": 4, "hop_length": 1, "win_length": 3, "center": False, "onesided": False,
                "return_complex": True}, name="batch, no center, two-sided, short window"),
        Sample((cfloats(rng, 6), cfloats(rng, 4)),
               {"n_fft": 4, "hop_length": 2, "pad_mode": "constant", "normalized": True}, name="complex, normalized"),
        Sample((floats(rng, 2, 6),), {"n_fft": 3, "hop_length": 2, "pad_mode": "replicate", "return_complex": False},
               name="no window, real view"),
        Sample((floats(rng, 9), floats(rng, 2)),
               {"n_fft": 5, "hop_length": 3, "win_length": 2, "center": False, "align_to_window": True,
                "return_complex": True}, name="align_to_window"),
    ]


def _istft_samples(rng):
    return [
        Sample((cfloats(rng, 3, 4), positive(rng, 4)), {"n_fft": 4, "hop_length": 2}, name="onesided, center"),
        Sample((cfloats(rng, 2, 3, 3), positive(rng, 3)),
               {"n_fft": 4, "hop_length": 1, "win_length": 3, "center": False, "length": 5},
               name="batch, short window, trimmed"),
        Sample((cfloats(rng, 4, 3), positive(rng, 4)),
               {"n_fft": 4, "hop_length": 2, "normalized": True, "return_complex": True},
               name="two-sided, complex out"),
        Sample((cfloats(rng, 4, 3),), {"n_fft": 4, "hop_length": 1, "onesided": False, "length": 9},
               name="two-sided to real, no window, zero padded"),
    ]


# ------------------------------------------------------------------------- windows


def _torch_style(periodic_fn):
    """NumPy reference for ``lucid.<x>_window(n, periodic)``: SciPy's window with ``sym=not periodic``."""
    return lambda *like, n, periodic=True, **kw: periodic_fn(n, not periodic, **kw)


def _np_kaiser_window(n, sym, beta=12.0):
    return sw.kaiser(n, beta, sym=sym)


def _np_hamming_window(n, sym, alpha=0.54, beta=0.46):
    return sw.general_cosine(n, [alpha, beta], sym=sym)


_FACTORIES = [
    ("hann_window", lambda n, sym: sw.hann(n, sym=sym), {}),
    ("hamming_window", _np_hamming_window, {"alpha": 0.6, "beta": 0.3}),
    ("blackman_window", lambda n, sym: sw.blackman(n, sym=sym), {}),
    ("bartlett_window", lambda n, sym: sw.bartlett(n, sym=sym), {}),
    ("kaiser_window", _np_kaiser_window, {"beta": 4.0}),
]

_SIGNAL = [
    ("bartlett", lambda M, sym: sw.bartlett(M, sym=sym), {}),
    ("blackman", lambda M, sym: sw.blackman(M, sym=sym), {}),
    ("cosine", lambda M, sym: sw.cosine(M, sym=sym), {}),
    ("exponential", lambda M, sym, tau=1.0: sw.exponential(M, tau=tau, sym=sym), {"tau": 0.7}),
    ("gaussian", lambda M, sym, std=1.0: sw.gaussian(M, std, sym=sym), {"std": 1.3}),
    ("general_cosine", lambda M, sym, a: sw.general_cosine(M, a, sym=sym), {"a": [0.4, 0.3, 0.2, 0.1]}),
    ("general_hamming", lambda M, sym, alpha=0.54: sw.general_hamming(M, alpha, sym=sym), {"alpha": 0.6}),
    ("hamming", lambda M, sym: sw.hamming(M, sym=sym), {}),
    ("hann", lambda M, sym: sw.hann(M, sym=sym), {}),
    ("kaiser", lambda M, sym, beta=12.0: sw.kaiser(M, beta, sym=sym), {"beta": 5.0}),
    ("nuttall", lambda M, sym: sw.nuttall(M, sym=sym), {}),
]


def _factory_op(fn, dev):
    """``fn`` made on the device of ``like`` (``dev=True``) or on the default device, in float64."""
    def op(*like, **kw):
        where = {"device": like[0].device} if dev else {}
        return fn(**kw, dtype=lucid.float64, **where)

    return op


def _factory_samples(size_key, extra, with_like):
    def samples(rng):
        like = (floats(rng, 1),) if with_like else ()
        sym_key = "periodic" if size_key == "n" else "sym"
        return [Sample(like, {size_key: n, sym_key: s, **extra}, name=f"{n} {sym_key}={s}")
                for n, s in ((0, True), (1, False), (2, True), (6, True), (5, False))]

    return samples


def _window_entries():
    out = []
    for name, ref, extra in _FACTORIES:
        fn = getattr(lucid, name)
        for dev in (False, True):
            op = _factory_op(lambda n, periodic, _fn=fn, **kw: _fn(n, periodic, **kw), dev)
            out.append(OpInfo(f"{name}{' (device=)' if dev else ''}", op, _torch_style(ref),
                              _factory_samples("n", extra, dev), grad=False, vmap=False, atol=1e-12))
    for name, ref, extra in _SIGNAL:
        fn = getattr(lucid.signal.windows, name)
        for dev in (False, True):
            op = _factory_op(lambda M, _fn=fn, **kw: _fn(M, **kw), dev)
            out.append(OpInfo(f"signal.windows.{name}{' (device=)' if dev else ''}", op,
                              lambda *like, M, sym=True, _ref=ref, **kw: _ref(M, sym, **kw),
                              _factory_samples("M", extra, dev), grad=False, vmap=False, atol=1e-12))
    return out


OPS = [
    OpInfo("stft", _stft, np_stft, _stft_samples, atol=1e-10),
    OpInfo("istft", _istft, np_istft, _istft_samples, atol=1e-10),
    *_window_entries(),
]
