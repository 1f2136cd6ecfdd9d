"""FFT primitives: four linear maps from which every ``lucid.fft`` transform is composed.

* ``fft_c2c(x, axes, norm, inverse)`` — complex -> complex DFT over ``axes``;
* ``fft_r2c(x, axis, norm)`` — real -> one-sided complex spectrum along ``axis``;
* ``fft_c2r(x, axis, n, norm)`` — one-sided Hermitian spectrum -> real signal of length ``n``;
* ``fft_resize(x, axes, sizes)`` — the zero padding / trimming that ``n`` and ``s`` ask for.

Forwards run on NumPy's pocketfft (``numpy.fft``), which keeps float32 / complex64.

NOTE [FFT adjoints]
Every transform is linear, so its jvp is the transform of the tangent and its vjp its
adjoint under the real inner product ``Re <a, b>`` (NOTE [Complex gradients]). With ``F``
the unnormalized DFT and ``s`` the scale that ``norm`` gives the direction taken:

* c2c: the adjoint of ``s F`` is ``s F^H``: the opposite direction with the *dual* norm
  ("backward" <-> "forward", "ortho" <-> "ortho").
* r2c keeps the first ``m = n//2 + 1`` rows of ``F``. Its adjoint maps a cotangent ``g``
  to ``Re(s F^H [g, 0])``; since ``Re(F^H v) = F^H`` of the Hermitian part of ``v``, this is
  the c2r transform (dual norm) of ``g`` with the interior bins (all but DC and, for even
  ``n``, Nyquist) *halved*: each interior bin stands for two bins of the full spectrum.
  (So the vjp of rfft is not irfft.)
* c2r reads bin ``k`` of the half spectrum as ``h_k`` and ``conj(h_k)`` of the full one
  (the imaginary parts of DC and Nyquist are ignored). Its adjoint is the r2c transform
  (dual norm) of ``g`` with the interior bins *doubled*; DC and Nyquist get a real gradient
  automatically. (So the vjp of irfft is not rfft.)
* resize copies the overlap of the old and new shapes and zero-fills the rest; its adjoint
  is the resize back to the input's shape (padding <-> trimming).
"""
from __future__ import annotations

import numpy as np

from .._core.backend import namespace_of, xp
from .._core.primitive import bind, defprim
from ._family import batch_unary_axis, linear_jvp, quiet

_DUAL = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _bin_weights(n, ndim, axis, dtype, interior, like):
    """``(m, 1, ..., 1)`` weights along ``axis``: 1 at DC (and Nyquist for even n), ``interior``
    elsewhere; on ``like``'s device."""
    m = n // 2 + 1
    w = namespace_of(like).full(m, interior, dtype)
    w[0] = 1
    if n % 2 == 0:
        w[-1] = 1
    return w.reshape((m,) + (1,) * (ndim - 1 - axis))


def _real_dtype(dt):
    return np.dtype(np.float32) if dt == np.complex64 else np.dtype(np.float64)


# ------------------------------------------------------------------------------ c2c


def _c2c_impl(x, *, axes, norm, inverse):
    if len(axes) == 1:
        return (xp.fft.ifft if inverse else xp.fft.fft)(x, axis=axes[0], norm=norm)
    return (xp.fft.ifftn if inverse else xp.fft.fftn)(x, axes=axes, norm=norm)


fft_c2c_p = defprim(
    "fft_c2c", quiet(_c2c_impl, 1),  # NOTE [Silent floating-point errors]
    vjp=(lambda ns, g, out, x, axes, norm, inverse:
         ns.fft_c2c(g, axes=axes, norm=_DUAL[norm], inverse=not inverse),),
    save_inputs=None,
)
fft_c2c_p.jvp = linear_jvp(fft_c2c_p)
fft_c2c_p.batch = batch_unary_axis(fft_c2c_p, ("axes",))


# ------------------------------------------------------------------------------ r2c


def _r2c_vjp(ns, g, out, x, axis, norm):
    n = x.shape[axis]
    w = _bin_weights(n, len(x.shape), axis, _real_dtype(g.dtype), 0.5, g)  # See NOTE [FFT adjoints]
    return ns.fft_c2r(g * w, axis=axis, n=n, norm=_DUAL[norm])


fft_r2c_p = defprim(
    "fft_r2c", quiet(lambda x, *, axis, norm: xp.fft.rfft(x, axis=axis, norm=norm), 1),
    vjp=(_r2c_vjp,), save_inputs=False,
)
fft_r2c_p.jvp = linear_jvp(fft_r2c_p)
fft_r2c_p.batch = batch_unary_axis(fft_r2c_p)


# ------------------------------------------------------------------------------ c2r


def _c2r_vjp(ns, g, out, x, axis, n, norm):
    w = _bin_weights(n, len(g.shape), axis, g.dtype, 2.0, g)  # See NOTE [FFT adjoints]
    return ns.fft_r2c(g, axis=axis, norm=_DUAL[norm]) * w


fft_c2r_p = defprim(
    "fft_c2r", quiet(lambda x, *, axis, n, norm: xp.fft.irfft(x, n=n, axis=axis, norm=norm), 1),
    vjp=(_c2r_vjp,), save_inputs=None,
)
fft_c2r_p.jvp = linear_jvp(fft_c2r_p)
fft_c2r_p.batch = batch_unary_axis(fft_c2r_p)


# --------------------------------------------------------------------------- resize


def _resize_impl(x, *, axes, sizes):
    shape = list(x.shape)
    for a, s in zip(axes, sizes):
        shape[a] = s
    keep = tuple(slice(0, min(o, s)) for o, s in zip(x.shape, shape))
    if all(s <= o for o, s in zip(x.shape, shape)):  # trimming only: one copy of the kept part
        return xp.ascontiguousarray(x[keep])
    out = namespace_of(x).zeros(shape, x.dtype)
    out[keep] = x[keep]
    return out


fft_resize_p = defprim(
    "fft_resize", _resize_impl,
    vjp=(lambda ns, g, out, x, axes, sizes:
         ns.fft_resize(g, axes=axes, sizes=tuple(x.shape[a] for a in axes)),),
    save_inputs=False,
)
fft_resize_p.jvp = linear_jvp(fft_resize_p)
fft_resize_p.batch = batch_unary_axis(fft_resize_p, ("axes",))


def resize(x, axes, sizes):
    """``x`` zero-padded / trimmed to ``sizes`` along ``axes`` (a no-op when nothing changes)."""
    if all(x.shape[a] == s for a, s in zip(axes, sizes)):
        return x
    return bind(fft_resize_p, (x,), {"axes": tuple(axes), "sizes": tuple(sizes)})


def c2c(x, axes, norm, inverse):
    return bind(fft_c2c_p, (x,), {"axes": tuple(axes), "norm": norm, "inverse": inverse})


def r2c(x, axis, norm):
    return bind(fft_r2c_p, (x,), {"axis": axis, "norm": norm})


def c2r(x, axis, n, norm):
    return bind(fft_c2r_p, (x,), {"axis": axis, "n": n, "norm": norm})
