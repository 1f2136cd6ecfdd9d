"""Discrete Fourier transforms, as ``torch.fft``: every transform is differentiable (vjp,
jvp) and batchable (vmap).

Each function is a short composition of four linear primitives (``lucid/ops/fft.py``:
complex-to-complex, real-to-complex, complex-to-real and the zero padding / trimming asked
for by ``n`` / ``s``), whose adjoints are derived in NOTE [FFT adjoints]. Forwards run on
NumPy's pocketfft; float32 gives complex64 (not complex128), float64 gives complex128.

``norm`` is one of ``"backward"`` (default, ``None``: no scaling forward, ``1/n`` inverse),
``"ortho"`` (``1/sqrt(n)`` both ways) or ``"forward"`` (``1/n`` forward, none inverse).

Examples
--------
>>> import lucid
>>> x = lucid.tensor([1.0, 2.0, 3.0, 4.0])
>>> lucid.fft.rfft(x)
tensor([10.+0.j, -2.+2.j, -2.+0.j], dtype=lucid.complex64)
>>> lucid.fft.irfft(lucid.fft.rfft(x))
tensor([1., 2., 3., 4.])
"""
from __future__ import annotations

import numpy as np

from ._core import dtypes
from .ops import fft as _p
from .ops._family import _as_tensor
from .ops.creation import tensor as _tensor
from .ops.complex import conj
from .ops.numpy_aliases import numpy_axis

_NORMS = ("backward", "forward", "ortho")
_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


# ------------------------------------------------------------------------ validation


class _NormModeError(RuntimeError, ValueError):
    """PyTorch raises RuntimeError for a bad ``norm``; Lucid raised ValueError before, so both catch it."""


def _norm(api, norm):
    if norm is None:
        return "backward"
    if norm not in _NORMS:
        raise _NormModeError(f"{api}: Invalid normalization mode: {norm!r} (expected one of "
                             f"'backward', 'forward', 'ortho' or None)")
    return norm


def _floating(api, x):
    """x as a floating or complex tensor (ints and bools become the default float, float16 and
    bfloat16 float32)."""
    x = _as_tensor(x)
    if x.dtype.kind in "biu":
        return x.to(dtypes.get_default_dtype())
    if x.dtype.kind == "f" and x.dtype.itemsize == 2:
        return x.to(np.float32)
    return x


def _complex(api, x):
    x = _floating(api, x)
    if x.dtype.kind == "c":
        return x
    return x.to(np.complex64 if x.dtype == np.float32 else np.complex128)


def _real(api, x):
    x = _floating(api, x)
    if x.dtype.kind == "c":
        raise RuntimeError(f"{api}: expected a real input tensor, but got {x.dtype}")
    return x


def _dims(api, x, s, dim, default_all=True):
    """Normalized ``(sizes, dims)`` for an n-D transform, as ``torch.fft.fftn`` reads them."""
    nd = x.ndim
    if dim is None:
        if s is None:
            dims = list(range(nd)) if default_all else []
        else:
            if len(s) > nd:
                raise RuntimeError(f"{api}: got s of length {len(s)} for a tensor with {nd} dims")
            dims = list(range(nd - len(s), nd))
    else:
        dims = [dim] if isinstance(dim, int) else list(dim)
        for d in dims:
            if not -nd <= d < nd or nd == 0:
                raise IndexError(f"{api}: dimension {d} is out of range for a tensor with {nd} dims")
        dims = [d % nd for d in dims]
        if len(set(dims)) != len(dims):
            raise RuntimeError(f"{api}: dims must be unique, got {tuple(dim)}")
    if s is None:
        sizes = [x.shape[d] for d in dims]
    else:
        s = [s] if isinstance(s, int) else list(s)
        if len(s) != len(dims):
            raise RuntimeError(f"{api}: When given, dim and shape arguments must have the same length "
                               f"(got s={tuple(s)} and dim={tuple(dims)})")
        sizes = [x.shape[d] if n == -1 else n for n, d in zip(s, dims)]
    for n in sizes:
        if n < 1:
            raise RuntimeError(f"{api}: Invalid number of data points ({n}) specified")
    return sizes, dims


def _one(api, n, dim):
    # a 1-D transform's n must be positive: -1 ("keep the size") is only for the n-D ``s``
    if n is not None and n < 1:
        raise RuntimeError(f"{api}: Invalid number of data points ({n}) specified")
    return None if n is None else [n], dim


# ------------------------------------------------------------------------ c2c family


def _c2c(api, input, s, dim, norm, inverse, default_all=True):
    x = _complex(api, input)
    sizes, dims = _dims(api, x, s, dim, default_all)
    norm = _norm(api, norm)
    if not dims:
        return x
    return _p.c2c(_p.resize(x, dims, sizes), dims, norm, inverse)


def fft(input, n=None, dim=-1, norm=None, *, axis=None):
    """1-D discrete Fourier transform (complex output; real inputs are promoted).

    Parameters
    ----------
    input : Tensor
    n : int, optional
        Signal length: the input is zero-padded or trimmed to ``n`` along ``dim``.
    dim : int
    norm : {"backward", "forward", "ortho"}, optional

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.fft(lucid.tensor([1.0, 0.0, 0.0, 0.0]))
    tensor([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=lucid.complex64)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("fft", dim, axis, -1)
    s, d = _one("fft.fft", n, dim)
    return _c2c("fft.fft", input, s, d, norm, False)


def ifft(input, n=None, dim=-1, norm=None, *, axis=None):
    """1-D inverse discrete Fourier transform (see :func:`fft`).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.ifft(lucid.tensor([4.0, 0.0, 0.0, 0.0]))
    tensor([1.+0.j, 1.+0.j, 1.+0.j, 1.+0.j], dtype=lucid.complex64)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("ifft", dim, axis, -1)
    s, d = _one("fft.ifft", n, dim)
    return _c2c("fft.ifft", input, s, d, norm, True)


def fft2(input, s=None, dim=(-2, -1), norm=None, *, axis=None):
    """2-D discrete Fourier transform over ``dim`` (sizes ``s``).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.fft2(lucid.ones(2, 2))
    tensor([[4.+0.j, 0.+0.j],
            [0.+0.j, 0.+0.j]], dtype=lucid.complex64)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("fft2", dim, axis, (-2, -1))
    return _c2c("fft.fft2", input, s, dim, norm, False)


def ifft2(input, s=None, dim=(-2, -1), norm=None, *, axis=None):
    """2-D inverse discrete Fourier transform (see :func:`fft2`).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.ifft2(lucid.fft.fft2(lucid.ones(2, 2))).real
    tensor([[1., 1.],
            [1., 1.]])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("ifft2", dim, axis, (-2, -1))
    return _c2c("fft.ifft2", input, s, dim, norm, True)


def fftn(input, s=None, dim=None, norm=None, *, axis=None):
    """N-D discrete Fourier transform over ``dim`` (all dims, or the last ``len(s)``).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.fftn(lucid.ones(2, 2, 2))[0, 0, 0]
    tensor(8.+0.j, dtype=lucid.complex64)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("fftn", dim, axis, None)
    return _c2c("fft.fftn", input, s, dim, norm, False)


def ifftn(input, s=None, dim=None, norm=None, *, axis=None):
    """N-D inverse discrete Fourier transform (see :func:`fftn`).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.ifftn(lucid.fft.fftn(lucid.ones(2, 2))).real
    tensor([[1., 1.],
            [1., 1.]])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("ifftn", dim, axis, None)
    return _c2c("fft.ifftn", input, s, dim, norm, True)


# ------------------------------------------------------------------------ real family


def _rfftn(api, input, s, dim, norm):
    x = _real(api, input)
    sizes, dims = _dims(api, x, s, dim)
    norm = _norm(api, norm)
    if not dims:
        raise RuntimeError(f"{api}: must transform at least one axis")
    y = _p.r2c(_p.resize(x, dims, sizes), dims[-1], norm)
    return _p.c2c(y, dims[:-1], norm, False) if len(dims) > 1 else y


def _irfftn(api, input, s, dim, norm):
    x = _complex(api, input)
    given = s
    sizes, dims = _dims(api, x, s, dim)
    norm = _norm(api, norm)
    if not dims:
        raise RuntimeError(f"{api}: must transform at least one axis")
    last = sizes[-1] if given is not None and list(given)[-1] != -1 else 2 * (x.shape[dims[-1]] - 1)
    if last < 1:
        raise RuntimeError(f"{api}: Invalid number of data points ({last}) specified")
    half = list(sizes[:-1]) + [last // 2 + 1]
    x = _p.resize(x, dims, half)
    if len(dims) > 1:
        x = _p.c2c(x, dims[:-1], norm, True)
    return _p.c2r(x, dims[-1], last, norm)


def rfft(input, n=None, dim=-1, norm=None, *, axis=None):
    """FFT of a real signal: the ``n // 2 + 1`` non-negative frequency bins.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.rfft(lucid.tensor([1.0, 1.0, 1.0]))
    tensor([3.+0.j, 0.+0.j], dtype=lucid.complex64)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("rfft", dim, axis, -1)
    s, d = _one("fft.rfft", n, dim)
    return _rfftn("fft.rfft", input, s, [d], norm)


def irfft(input, n=None, dim=-1, norm=None, *, axis=None):
    """Inverse of :func:`rfft`: a real signal of length ``n`` (default ``2 * (m - 1)``).

    Bins beyond ``n // 2 + 1`` are dropped (zeros added if fewer); the imaginary parts of
    the DC and Nyquist bins are ignored. Real inputs are accepted.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.irfft(lucid.tensor([3.0, 0.0]), n=3)
    tensor([1., 1., 1.])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("irfft", dim, axis, -1)
    s, d = _one("fft.irfft", n, dim)
    return _irfftn("fft.irfft", input, s, [d], norm)


def rfft2(input, s=None, dim=(-2, -1), norm=None, *, axis=None):
    """2-D FFT of a real input, one-sided along the last of ``dim``.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.rfft2(lucid.ones(2, 4)).shape
    (2, 3)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("rfft2", dim, axis, (-2, -1))
    return _rfftn("fft.rfft2", input, s, dim, norm)


def irfft2(input, s=None, dim=(-2, -1), norm=None, *, axis=None):
    """Inverse of :func:`rfft2`.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.irfft2(lucid.fft.rfft2(lucid.ones(2, 4))).shape
    (2, 4)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("irfft2", dim, axis, (-2, -1))
    return _irfftn("fft.irfft2", input, s, dim, norm)


def rfftn(input, s=None, dim=None, norm=None, *, axis=None):
    """N-D FFT of a real input, one-sided along the last transformed dim.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.rfftn(lucid.ones(2, 2, 4)).shape
    (2, 2, 3)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("rfftn", dim, axis, None)
    return _rfftn("fft.rfftn", input, s, dim, norm)


def irfftn(input, s=None, dim=None, norm=None, *, axis=None):
    """Inverse of :func:`rfftn` (``s`` gives the output sizes; the last defaults to ``2 * (m - 1)``).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.irfftn(lucid.fft.rfftn(lucid.ones(2, 2, 4))).shape
    (2, 2, 4)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("irfftn", dim, axis, None)
    return _irfftn("fft.irfftn", input, s, dim, norm)


# ------------------------------------------------------------------ Hermitian family
# hfft(x) is the FFT of a signal whose spectrum is Hermitian: ``irfft(conj(x))`` with the
# opposite normalization; ihfft is its inverse, ``conj(rfft(x))`` with the opposite one
# (NumPy's and PyTorch's definitions).


def hfft(input, n=None, dim=-1, norm=None, *, axis=None):
    """FFT of a one-sided Hermitian signal: a real output of length ``n`` (default ``2 * (m - 1)``).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.hfft(lucid.tensor([1.0, 0.0, 0.0]))
    tensor([1., 1., 1., 1.])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("hfft", dim, axis, -1)
    s, d = _one("fft.hfft", n, dim)
    return _hfftn("fft.hfft", input, s, [d], norm)


def ihfft(input, n=None, dim=-1, norm=None, *, axis=None):
    """Inverse of :func:`hfft`: the one-sided spectrum of a real signal, ``conj(rfft(x)) / n``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0, 2.0, 3.0, 4.0])
    >>> bool((lucid.fft.ihfft(x) == lucid.fft.rfft(x).conj() / 4).all())
    True
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("ihfft", dim, axis, -1)
    s, d = _one("fft.ihfft", n, dim)
    return _ihfftn("fft.ihfft", input, s, [d], norm)


def hfft2(input, s=None, dim=(-2, -1), norm=None, *, axis=None):
    """2-D :func:`hfftn`.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.hfft2(lucid.ones(2, 3)).shape
    (2, 4)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("hfft2", dim, axis, (-2, -1))
    return _hfftn("fft.hfft2", input, s, dim, norm)


def ihfft2(input, s=None, dim=(-2, -1), norm=None, *, axis=None):
    """2-D :func:`ihfftn`.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.ihfft2(lucid.ones(2, 4)).shape
    (2, 3)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("ihfft2", dim, axis, (-2, -1))
    return _ihfftn("fft.ihfft2", input, s, dim, norm)


def hfftn(input, s=None, dim=None, norm=None, *, axis=None):
    """N-D FFT of a signal Hermitian along the last transformed dim (real output).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.hfftn(lucid.ones(2, 3)).shape
    (2, 4)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("hfftn", dim, axis, None)
    return _hfftn("fft.hfftn", input, s, dim, norm)


def ihfftn(input, s=None, dim=None, norm=None, *, axis=None):
    """Inverse of :func:`hfftn` for a real input (one-sided along the last transformed dim).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.ihfftn(lucid.ones(2, 4)).shape
    (2, 3)
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("ihfftn", dim, axis, None)
    return _ihfftn("fft.ihfftn", input, s, dim, norm)


def _hfftn(api, input, s, dim, norm):
    return _irfftn(api, conj(_complex(api, input)), s, dim, _SWAP[_norm(api, norm)])


def _ihfftn(api, input, s, dim, norm):
    return conj(_rfftn(api, input, s, dim, _SWAP[_norm(api, norm)]))


# ----------------------------------------------------------------------- helpers


def fftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    """Sample frequencies of an ``n``-point FFT with sample spacing ``d``.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.fftfreq(4)
    tensor([ 0.  ,  0.25, -0.5 , -0.25])
    """
    k = _freq_count("fft.fftfreq", n)
    k = np.concatenate([k[:(n + 1) // 2], k[(n + 1) // 2:] - n])
    return _freqs("fft.fftfreq", k, n, d, dtype, device, requires_grad)


def rfftfreq(n, d=1.0, *, dtype=None, device=None, requires_grad=False):
    """Sample frequencies of the bins :func:`rfft` returns.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.rfftfreq(4)
    tensor([0.  , 0.25, 0.5 ])
    """
    # n / 2 + 1 with C's truncating division, as PyTorch's (rfftfreq(-1) is [-0.], (-4) raises)
    return _freqs("fft.rfftfreq", _freq_count("fft.rfftfreq", int(n / 2) + 1), n, d, dtype, device,
                  requires_grad)


def _freq_count(api, n):
    if n < 0:
        raise RuntimeError(f"{api}: Trying to create tensor with negative dimension {n}: [{n}]")
    return np.arange(n, dtype=np.float64)


def _freqs(api, k, n, d, dtype, device, requires_grad):
    # PyTorch's kernel: arange(...) in the dtype times the scalar 1 / (n d), the scalar rounded to
    # float32 for float16/float32 (their opmath); n d = 0 gives inf (C's division), so
    # rfftfreq(0) is [nan] and fftfreq(n, 0) holds nan and +-inf
    dt = dtypes.to_dtype(dtype) or dtypes.get_default_dtype()
    if dt.kind == "c":
        raise NotImplementedError(f"{api}: \"arange_cpu\" not implemented for complex dtype {dt}")
    if dt.kind != "f":
        raise RuntimeError(f"{api}: fftfreq requires a floating point or complex dtype, got {dt}")
    with np.errstate(divide="ignore", invalid="ignore"):
        scale = np.float64(1.0) / np.float64(n * d)
        op = np.float64 if dt == np.float64 else np.float32
        arr = (k.astype(op) * op(scale)).astype(dt)
    return _tensor(arr, dtype=dt, device=device, requires_grad=requires_grad)


def _shift(api, input, dim, sign):
    from .ops.shape import roll

    x = _as_tensor(input)
    dims = list(range(x.ndim)) if dim is None else ([dim] if isinstance(dim, int) else list(dim))
    if not dims:
        return x
    shifts = [sign * (x.shape[d] // 2) for d in dims]
    return roll(x, shifts, dims)


def fftshift(input, dim=None, *, axis=None):
    """Move the zero-frequency bin to the center (``roll`` by ``n // 2`` along ``dim``).

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.fftshift(lucid.fft.fftfreq(4))
    tensor([-0.5 , -0.25,  0.  ,  0.25])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("fftshift", dim, axis, None)
    return _shift("fft.fftshift", input, dim, 1)


def ifftshift(input, dim=None, *, axis=None):
    """Inverse of :func:`fftshift`.

    Examples
    --------
    >>> import lucid
    >>> lucid.fft.ifftshift(lucid.fft.fftshift(lucid.arange(5)))
    tensor([0, 1, 2, 3, 4])
    """
    if axis is not None:  # See NOTE [NumPy keyword aliases]
        dim = numpy_axis("ifftshift", dim, axis, None)
    return _shift("fft.ifftshift", input, dim, -1)


__all__ = ["fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft", "rfft2", "irfft2",
           "rfftn", "irfftn", "hfft", "ihfft", "hfft2", "ihfft2", "hfftn", "ihfftn",
           "fftfreq", "rfftfreq", "fftshift", "ifftshift"]


from .ops.out_arguments import FFT as _OUT_NAMES, accept_out as _accept_out  # noqa: E402

_accept_out(globals(), _OUT_NAMES)  # PyTorch's out= (NOTE [Out arguments])
