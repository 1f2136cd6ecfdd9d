"""Window functions and the short-time Fourier transform (``torch.hann_window``, ``torch.stft``).

Composed from existing primitives (frames as strided views, ``lucid.fft``), so every rule
comes from them; op database samples in ``tests/ops/db_spectral.py``.

NOTE [STFT as frames]
``stft`` pads the signal (``center``), cuts it into frames with ``unfold`` (a view), multiplies
each frame by the window (zero padded to ``n_fft`` around its centre) and transforms the frames
with ``lucid.fft``. ``istft`` inverts each frame, multiplies it by the window again and
overlap-adds the frames with ``unfold``'s adjoint primitive (PyTorch's ``unfold_backward``),
then divides by the overlap-added squared window, the envelope. Each step is a primitive with
all four rules, so both are differentiable (w.r.t. the signal and the window) to any order,
have forward-mode derivatives and batch under ``vmap``. The one step on values is istft's NOLA
check (the envelope must not vanish): it reads the envelope underneath any transform, as
PyTorch reads it with ``.item()``.

NOTE [Windows in their dtype]
The window factories compute in the requested dtype, on the requested (or default) device,
from an ``arange`` made there, with PyTorch's formulas and order of operations: a float32
window equals PyTorch's up to the rounding of ``cos``/``i0``, a float16 one is as coarse as
PyTorch's (only the Kaiser window computes half in float, as PyTorch's kernel does).
"""
from __future__ import annotations

import math
import operator
import warnings

import numpy as np

from .._core import dtypes
from .._core.primitive import TN
from .._core.tensor import tensor_method
from ._family import _as_tensor

__all__ = ["hann_window", "hamming_window", "blackman_window", "bartlett_window", "kaiser_window",
           "stft", "istft"]


def _L():
    import lucid

    return lucid


# -------------------------------------------------------------------------- windows
# See NOTE [Windows in their dtype].


def _length(name, n, what="window_length"):
    if isinstance(n, bool):  # an int to operator.index, but PyTorch's int arguments refuse it
        raise TypeError(f"{name}: {what} must be an int, got bool")
    try:
        return operator.index(n)
    except TypeError:
        raise TypeError(f"{name}: {what} must be an int, got {type(n).__name__}") from None


def _window_dtype(name, dtype):
    """The dtype asked for (default: the default dtype), refused unless floating."""
    try:
        dt = dtypes.to_dtype(dtypes.get_default_dtype() if dtype is None else dtype)
    except TypeError as e:
        raise TypeError(f"{name}: {e}") from None
    if dt.kind not in "fc":
        raise RuntimeError(f"{name}: expects floating point dtypes, got {dtypes.as_lucid(dt)}")
    return dt


def _c(k, value):
    """``value`` as a 0-d tensor of ``k``'s dtype: PyTorch's window factories round their
    constants to the window's dtype (a float16 window multiplies by float16 constants), where a
    Python number would take float16 arithmetic through float32 (NOTE [Half opmath])."""
    return _L().full((), value, dtype=k.dtype, device=k.device)


def _make_window(name, window_length, periodic, dtype, device, requires_grad, body):
    """``body(k, m)`` on ``k = arange(window_length)`` for a symmetric window of length ``m``
    (one more for a periodic window, whose last point is dropped: ``k`` never reaches it)."""
    dt = _window_dtype(name, dtype)
    n = _length(name, window_length)
    if n < 0:
        raise RuntimeError(f"{name}: requires non-negative window_length, got window_length={n}")
    L = _L()
    with L.no_grad():
        if n <= 1:
            w = L.ones(n, dtype=dt, device=device)
        elif dt.kind == "c":  # PyTorch's check admits complex, then its arange refuses it
            raise NotImplementedError(f"{name}: expects floating point dtypes for more than one point "
                                      f"(complex windows are not implemented), got {dtypes.as_lucid(dt)}")
        else:
            m = n + 1 if periodic else n
            w = body(L.arange(n, dtype=dt, device=device), m)
    return w.requires_grad_() if requires_grad else w


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None, device=None,
                   requires_grad=False):
    """The generalised Hamming window ``alpha - beta cos(2 pi k / (N - 1))``, as ``torch.hamming_window``.

    Parameters
    ----------
    window_length : int
        Number of points (0 gives an empty tensor, 1 a single 1).
    periodic : bool
        True (default): the first ``window_length`` points of a symmetric window one longer,
        for spectral analysis (``stft``); False: a symmetric window, for filter design.
    alpha, beta : float
        The coefficients.
    dtype : floating dtype, optional
        Default: the default dtype.
    device : str or lucid.device, optional
        Default: the default device.
    requires_grad : bool
        Make the result a leaf that requires grad.

    Examples
    --------
    >>> import lucid
    >>> lucid.hamming_window(4, dtype=lucid.float64)
    tensor([0.08, 0.54, 1.  , 0.54], dtype=lucid.float64)
    """
    return _make_window("hamming_window", window_length, periodic, dtype, device, requires_grad,
                        lambda k, m: (k * _c(k, 2.0 * math.pi / (m - 1))).cos() * _c(k, -beta) + alpha)


def hann_window(window_length, periodic=True, *, dtype=None, device=None, requires_grad=False):
    """The Hann window ``0.5 - 0.5 cos(2 pi k / (N - 1))``, as ``torch.hann_window``.

    ``periodic=True`` (default) gives the first ``window_length`` points of the symmetric window
    one longer, the window ``stft``/``istft`` want. See :func:`hamming_window` for the keywords.

    Examples
    --------
    >>> import lucid
    >>> lucid.hann_window(4, dtype=lucid.float64)
    tensor([0. , 0.5, 1. , 0.5], dtype=lucid.float64)
    >>> lucid.hann_window(5, periodic=False, dtype=lucid.float64)
    tensor([0. , 0.5, 1. , 0.5, 0. ], dtype=lucid.float64)
    """
    return _make_window("hann_window", window_length, periodic, dtype, device, requires_grad,
                        lambda k, m: (k * _c(k, 2.0 * math.pi / (m - 1))).cos() * -0.5 + 0.5)


def _blackman(k, m):
    t = k * _c(k, math.pi / (m - 1))
    return (t * 4).cos() * _c(k, 0.08) - (t * 2).cos() * 0.5 + 0.42


def blackman_window(window_length, periodic=True, *, dtype=None, device=None, requires_grad=False):
    """The Blackman window ``0.42 - 0.5 cos(2 pi k / (N - 1)) + 0.08 cos(4 pi k / (N - 1))``,
    as ``torch.blackman_window``. See :func:`hamming_window` for the keywords.

    Examples
    --------
    >>> import lucid
    >>> lucid.blackman_window(4, dtype=lucid.float64)[1:]  # the first point is 0 up to rounding
    tensor([0.34, 1.  , 0.34], dtype=lucid.float64)
    """
    return _make_window("blackman_window", window_length, periodic, dtype, device, requires_grad, _blackman)


def _bartlett(k, m):
    w = k * _c(k, 2.0 / (m - 1))
    half = ((m - 1) >> 1) + 1  # points from here on are on the falling side
    return _L().cat([w[:half], -w[half:] + 2])


def bartlett_window(window_length, periodic=True, *, dtype=None, device=None, requires_grad=False):
    """The Bartlett (triangular) window ``1 - |2k / (N - 1) - 1|``, as ``torch.bartlett_window``.
    See :func:`hamming_window` for the keywords.

    Examples
    --------
    >>> import lucid
    >>> lucid.bartlett_window(5, periodic=False)
    tensor([0. , 0.5, 1. , 0.5, 0. ])
    """
    return _make_window("bartlett_window", window_length, periodic, dtype, device, requires_grad, _bartlett)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, device=None, requires_grad=False):
    """The Kaiser window ``I0(beta sqrt(1 - ((k - a) / a)^2)) / I0(beta)``, ``a = (N - 1) / 2``,
    as ``torch.kaiser_window`` (``I0``: :func:`lucid.i0`). See :func:`hamming_window` for the
    other keywords.

    Examples
    --------
    >>> import lucid
    >>> lucid.kaiser_window(3, periodic=False, beta=0.0)
    tensor([1., 1., 1.])
    """
    def body(k, m):
        L = _L()
        dt = k.dtype
        k = k.float() if dt == dtypes.float16 else k  # PyTorch's kernel computes half in float
        a = (m - 1) / 2.0
        r = (k - a) / a
        peak = L.i0(L.full((), beta, dtype=k.dtype, device=k.device))
        # abs: 1 - r^2 may round below 0 at the ends, as PyTorch's kernel guards against
        return (L.i0((-(r ** 2) + 1).abs().sqrt() * beta) / peak).to(dt)

    return _make_window("kaiser_window", window_length, periodic, dtype, device, requires_grad, body)


# ----------------------------------------------------------------------- validation


def _real_dtype(dt):
    return dtypes.np_finfo(dtypes.to_dtype(dt)).dtype


def _same_device(api, x, window):
    if window is not None and window.device != x.device:
        raise RuntimeError(f"{api}: input and window must be on the same device, but got input on "
                           f"{x.device} and window on {window.device}")


def _centred_window(window, n_fft, win_length, like_dtype, device, always):
    """The window zero padded to ``n_fft`` around its centre (ones where ``window`` is None);
    None for a rectangular full-length window unless ``always``."""
    L = _L()
    if window is None:
        if win_length == n_fft and not always:
            return None
        window = L.ones(win_length, dtype=_real_dtype(like_dtype), device=device)
    if win_length < n_fft:
        left = (n_fft - win_length) // 2
        window = L.pad(window, (left, n_fft - win_length - left))
    return window


def _vanishes(env):
    """Whether the envelope falls below 1e-11 anywhere: read underneath every transform
    (under vmap, for all examples), as PyTorch's check reads it back. See NOTE [STFT as frames]."""
    L = _L()
    while hasattr(env, "_inner_value"):  # a tracer: its value one level down
        env = env._inner_value()
    if env.device.type == "meta":
        return False
    with L.no_grad():
        return bool((env.detach().abs() < 1e-11).any())


_NO_WINDOW = ("A window was not provided. A rectangular window will be applied, which is known to cause "
              "spectral leakage. Other windows such as lucid.hann_window or lucid.hamming_window are "
              "recommended to reduce spectral leakage. To suppress this warning and use a rectangular "
              "window, explicitly set `window=lucid.ones(n_fft, device=<device>)`.")


# ---------------------------------------------------------------------------- stft


def _stft_checks(x, n_fft, hop, win, window, length):
    if n_fft <= 0 or n_fft > length:
        raise RuntimeError(f"stft: expected 0 < n_fft <= {length} (the signal's length"
                           f"{' after padding' if length != x.shape[-1] else ''}), but got n_fft={n_fft}")
    if hop <= 0:
        raise RuntimeError(f"stft: expected hop_length > 0, but got hop_length={hop}")
    if win <= 0 or win > n_fft:
        raise RuntimeError(f"stft: expected 0 < win_length <= n_fft, but got win_length={win}")
    if window is not None and (window.ndim != 1 or window.shape[0] != win):
        raise RuntimeError(f"stft: expected a 1D window tensor of size equal to win_length={win}, but got "
                           f"window with size {list(window.shape)}")


def _center_pad(x, n_fft, pad_mode):
    p = n_fft // 2
    if pad_mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"stft: unrecognised padding mode {pad_mode!r}")
    if pad_mode == "reflect" and p >= x.shape[-1]:
        raise RuntimeError(f"stft: padding size should be less than the signal's length for "
                           f"pad_mode='reflect', but got padding ({p}, {p}) for a signal of length {x.shape[-1]}")
    try:
        return _L().pad(x, (p, p), mode=pad_mode)
    except RuntimeError as e:
        raise RuntimeError(f"stft: {e}") from None


@tensor_method("stft")
def stft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, pad_mode="reflect",
         normalized=False, onesided=None, return_complex=None, align_to_window=None):
    """Short-time Fourier transform, as ``torch.stft``.

    ``X[..., f, t] = sum_k window[k] x[t * hop_length + k] exp(-2 pi i f k / n_fft)`` over the
    frames of the (padded) signal. See NOTE [STFT as frames].

    Parameters
    ----------
    input : Tensor
        A signal ``(L,)`` or a batch ``(B, L)``, real or complex.
    n_fft : int
        Frame length and size of each Fourier transform.
    hop_length : int, optional
        Distance between frame starts (default ``n_fft // 4``).
    win_length : int, optional
        The window's length, at most ``n_fft`` (default ``n_fft``); a shorter window is zero
        padded on both sides to ``n_fft``.
    window : Tensor, optional
        ``(win_length,)``; None: a rectangular window (warns, as PyTorch).
    center : bool
        Pad the signal by ``n_fft // 2`` on both sides so frame ``t`` is centred at
        ``t * hop_length`` (default True).
    pad_mode : str
        The padding for ``center``: 'reflect' (default), 'constant', 'replicate' or 'circular'.
    normalized : bool
        Multiply by ``n_fft ** -0.5`` (default False).
    onesided : bool, optional
        Keep only the ``n_fft // 2 + 1`` non-negative frequencies (default: True for a real
        input and window, which must then be real).
    return_complex : bool
        Required for real inputs, as in PyTorch 2: True returns a complex tensor, False (deprecated)
        a real tensor with a last dimension of size 2 (real, imaginary).
    align_to_window : bool, optional
        With ``center=False`` only: True starts frame ``t`` at the window's first point
        (``t * hop_length``) rather than at the padded frame's.

    Returns
    -------
    Tensor
        ``(B?, N, T)`` complex, ``N`` frequencies and ``T`` frames: ``1 + L // hop_length``
        with ``center``, else ``1 + (L - n_fft) // hop_length``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0, 3.0, 4.0])
    >>> lucid.stft(x, 2, hop_length=2, window=lucid.ones(2), center=False, return_complex=True)
    tensor([[ 3.+0.j,  7.+0.j],
            [-1.+0.j, -1.+0.j]], dtype=lucid.complex64)
    """
    L = _L()
    x = _as_tensor(input)
    window = None if window is None else _as_tensor(window)
    n_fft = _length("stft", n_fft, "n_fft")
    hop = n_fft >> 2 if hop_length is None else _length("stft", hop_length, "hop_length")
    win = n_fft if win_length is None else _length("stft", win_length, "win_length")
    if center and align_to_window is not None:
        raise RuntimeError("stft: align_to_window should only be set when center = false")
    _same_device("stft", x, window)
    if window is None:
        warnings.warn(f"stft: {_NO_WINDOW}", UserWarning, stacklevel=2)
    if return_complex is None:
        if not (x.dtype.kind == "c" or (window is not None and window.dtype.kind == "c")):
            raise RuntimeError("stft: requires the return_complex parameter be given for real inputs, and will "
                               "further require that return_complex=True in a future PyTorch release.")
        return_complex = True
    elif not return_complex:
        warnings.warn("stft: stft with return_complex=False is deprecated; it will return complex tensors "
                      "for all inputs. Use lucid.view_as_real on the complex output to recover the old "
                      "format.", UserWarning, stacklevel=2)
    if x.dtype.kind not in "fc":
        raise RuntimeError(f"stft: expected a tensor of floating point or complex values, got {x.dtype}")
    if x.ndim not in (1, 2):
        raise RuntimeError(f"stft: expected a 1D or 2D tensor, but got a tensor of shape {tuple(x.shape)}")
    batched = x.ndim == 2
    if not batched:
        x = x.unsqueeze(0)
    if center:
        x = _center_pad(x, n_fft, pad_mode)
    _stft_checks(x, n_fft, hop, win, window, x.shape[-1])
    if align_to_window and win < n_fft:  # frames start where their window does
        left = (n_fft - win) // 2
        x = L.pad(x, (left, n_fft - win - left))
    window = _centred_window(window, n_fft, win, x.dtype, x.device, always=False)
    frames = x.unfold(-1, n_fft, hop)  # (B, T, n_fft), a view
    if window is not None:
        frames = frames * window
    complex_fft = frames.dtype.kind == "c"
    onesided = (not complex_fft) if onesided is None else bool(onesided)
    norm = "ortho" if normalized else "backward"
    if complex_fft and onesided:
        raise RuntimeError("stft: Cannot have onesided output if window or input is complex")
    out = L.fft.rfft(frames, dim=-1, norm=norm) if onesided else L.fft.fft(frames, dim=-1, norm=norm)
    out = out.transpose(-1, -2)
    if not batched:
        out = out.squeeze(0)
    return out if return_complex else L.view_as_real(out)


# --------------------------------------------------------------------------- istft


def _istft_checks(z, n_fft, hop, win, window, onesided):
    if z.dtype.kind != "c":
        raise RuntimeError("istft: requires a complex-valued input tensor matching the output from stft with "
                           "return_complex=True.")
    if z.numel() == 0:
        raise RuntimeError(f"istft: input tensor cannot be empty, got shape {tuple(z.shape)}")
    if z.ndim not in (2, 3):
        raise RuntimeError(f"istft: expected a complex tensor with 2 (freq, frames) or 3 (batch, freq, frames) "
                           f"dimensions, but got {z.ndim}")
    fft_size = z.shape[-2]
    onesided = fft_size != n_fft if onesided is None else bool(onesided)
    if onesided and n_fft // 2 + 1 != fft_size:
        raise RuntimeError("istft: expected the frequency dimension (2nd to the last) of the input tensor to "
                           f"match n_fft / 2 + 1 = {n_fft // 2 + 1} when onesided=True, but got {fft_size}")
    if not onesided and n_fft != fft_size:
        raise RuntimeError("istft: expected the frequency dimension (2nd to the last) of the input tensor to "
                           f"match n_fft = {n_fft} when onesided=False, but got {fft_size}")
    if not 0 < hop <= win:
        raise RuntimeError(f"istft: expected 0 < hop_length <= win_length, but got hop_length={hop}, "
                           f"win_length={win}")
    if not 0 < win <= n_fft:
        raise RuntimeError(f"istft: expected 0 < win_length <= n_fft, but got win_length={win}, n_fft={n_fft}")
    if window is not None and (window.ndim != 1 or window.shape[0] != win):
        raise RuntimeError(f"istft: Invalid window shape. window has to be 1D and length of `win_length` "
                           f"({win}), but got {list(window.shape)}")
    return onesided


def _overlap_add(frames, total, hop):
    """``(..., T, n_fft)`` frames summed into a ``(..., total)`` signal at ``t * hop``: the
    adjoint of ``unfold`` (a primitive whose vjp is ``unfold``)."""
    return TN.unfold_adjoint(frames, shape=tuple(frames.shape[:-2]) + (total,), dim=frames.ndim - 2,
                             size=frames.shape[-1], step=hop)


@tensor_method("istft")
def istft(input, n_fft, hop_length=None, win_length=None, window=None, center=True, normalized=False,
          onesided=None, length=None, return_complex=False):
    """Inverse short-time Fourier transform, as ``torch.istft``: the least-squares inverse of
    :func:`stft` (each frame inverted, windowed, overlap-added, divided by the overlap-added
    squared window). See NOTE [STFT as frames].

    Parameters
    ----------
    input : Tensor
        Complex ``(N, T)`` or ``(B, N, T)``, as ``stft(..., return_complex=True)`` returns.
    n_fft, hop_length, win_length, window, center, normalized
        As given to :func:`stft` (``window`` None: rectangular).
    onesided : bool, optional
        Whether ``input`` holds only the non-negative frequencies (default: ``N != n_fft``).
    length : int, optional
        The output's length: trims, or pads with zeros (default: the full overlap-add, minus
        the ``center`` padding).
    return_complex : bool
        Return the complex signal (needs a two-sided ``input``); default False, a real signal.

    Raises
    ------
    RuntimeError
        Where the overlap-added squared window vanishes (the NOLA condition fails: the signal
        can't be recovered there).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    >>> w = lucid.hann_window(4)
    >>> X = lucid.stft(x, 4, hop_length=1, window=w, return_complex=True)
    >>> lucid.istft(X, 4, hop_length=1, window=w, length=6).allclose(x, atol=1e-5)
    True
    """
    L = _L()
    z = _as_tensor(input)
    window = None if window is None else _as_tensor(window)
    n_fft = _length("istft", n_fft, "n_fft")
    hop = n_fft >> 2 if hop_length is None else _length("istft", hop_length, "hop_length")
    win = n_fft if win_length is None else _length("istft", win_length, "win_length")
    _same_device("istft", z, window)
    onesided = _istft_checks(z, n_fft, hop, win, window, onesided)
    if length is not None and _length("istft", length, "length") <= 0:
        raise RuntimeError(f"istft: expected length > 0, but got length={length}")
    w = _centred_window(window, n_fft, win, z.dtype, z.device, always=True)
    batched = z.ndim == 3
    frames = (z if batched else z.unsqueeze(0)).transpose(-1, -2)  # (B, T, N)
    n_frames = frames.shape[-2]
    norm = "ortho" if normalized else "backward"
    if return_complex:
        if onesided:
            raise RuntimeError("istft: Cannot have onesided output if window or input is complex")
        frames = L.fft.ifft(frames, dim=-1, norm=norm)
    else:
        if window is not None and window.dtype.kind == "c":
            raise RuntimeError("istft: Complex windows are incompatible with return_complex=False")
        if not onesided:
            frames = frames[..., : n_fft // 2 + 1]
        frames = L.fft.irfft(frames, n=n_fft, dim=-1, norm=norm)
    total = n_fft + hop * (n_frames - 1)
    y = _overlap_add(frames * w, total, hop)
    env = _overlap_add((w * w).expand(n_frames, n_fft), total, hop)  # PyTorch's window.pow(2), complex too
    start = n_fft // 2 if center else 0
    end = start + length if length is not None else total - (n_fft // 2 if center else 0)
    y, env = y[..., start:end], env[start:end]
    if _vanishes(env):
        raise RuntimeError("istft: window overlap add min is below 1e-11: the NOLA condition fails for "
                           f"n_fft={n_fft}, hop_length={hop}, win_length={win}, center={center}, so the "
                           "signal can't be recovered where the overlap-added squared window vanishes")
    y = y / env
    if not batched:
        y = y.squeeze(0)
    if end > total:
        warnings.warn("istft: The length of signal is shorter than the length parameter. Result is being "
                      "padded with zeros in the tail. Please check your center and hop_length settings.",
                      UserWarning, stacklevel=2)
        y = L.pad(y, (0, end - total))
    return y
