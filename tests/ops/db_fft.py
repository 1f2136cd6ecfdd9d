"""Op database entries for ``lucid.fft``: each transform with n/s padding and trimming,
every norm, real and complex inputs (they reach the four primitives fft_c2c, fft_r2c,
fft_c2r and fft_resize). Explicit-DFT-matrix adjoint tests live in tests/fft."""
import numpy as np

import lucid
from db_complex import cfloats
from opinfo import OpInfo, Sample, floats

FFT = lucid.fft
_SWAP = {None: "forward", "backward": "forward", "forward": "backward", "ortho": "ortho"}


def _one_d(real_in=True, complex_in=True):
    def samples(rng):
        out = []
        for k, (n, norm) in enumerate([(None, None), (3, "ortho"), (7, "forward"), (None, "ortho")]):
            if real_in:
                out.append(Sample((floats(rng, 2, 5),), {"n": n, "norm": norm}, name=f"real n={n} {norm}"))
            if complex_in:
                out.append(Sample((cfloats(rng, 2, 4),), {"n": n, "norm": norm, "dim": 0 if k == 3 else -1},
                                  name=f"complex n={n} {norm}"))
        return out

    return samples


def _n_d(real_in=True, complex_in=True, s_list=((None, None), ((3, 4), None), (None, (0, 2)), ((5, 2), (2, 0)))):
    def samples(rng):
        out = []
        for (s, dim), norm in zip(s_list, (None, "ortho", "forward", "backward")):
            if real_in:
                out.append(Sample((floats(rng, 2, 3, 4),), {"s": s, "dim": dim, "norm": norm}))
            if complex_in:
                out.append(Sample((cfloats(rng, 2, 3, 3),), {"s": s, "dim": dim, "norm": norm}))
        return out

    return samples


def _np_hfftn(x, s=None, dim=None, norm=None):
    return np.fft.irfftn(np.conj(x), s=s, axes=dim, norm=_SWAP[norm])


def _np_ihfftn(x, s=None, dim=None, norm=None):
    return np.conj(np.fft.rfftn(x, s=s, axes=dim, norm=_SWAP[norm]))


def _axes(f):
    return lambda x, s=None, dim=None, norm=None: f(x, s=s, axes=dim, norm=norm)


def _one(f):
    return lambda x, n=None, dim=-1, norm=None: f(x, n=n, axis=dim, norm=norm)


OPS = [
    OpInfo("fft.fft", FFT.fft, _one(np.fft.fft), _one_d()),
    OpInfo("fft.ifft", FFT.ifft, _one(np.fft.ifft), _one_d()),
    OpInfo("fft.rfft", FFT.rfft, _one(np.fft.rfft), _one_d(complex_in=False)),
    OpInfo("fft.irfft", FFT.irfft, _one(np.fft.irfft), _one_d()),
    OpInfo("fft.hfft", FFT.hfft, _one(np.fft.hfft), _one_d()),
    OpInfo("fft.ihfft", FFT.ihfft, _one(np.fft.ihfft), _one_d(complex_in=False)),
    OpInfo("fft.fftn", FFT.fftn, _axes(np.fft.fftn), _n_d()),
    OpInfo("fft.ifftn", FFT.ifftn, _axes(np.fft.ifftn), _n_d(real_in=False)),
    OpInfo("fft.rfftn", FFT.rfftn, _axes(np.fft.rfftn), _n_d(complex_in=False)),
    OpInfo("fft.irfftn", FFT.irfftn, _axes(np.fft.irfftn), _n_d(real_in=False)),
    OpInfo("fft.hfftn", FFT.hfftn, _np_hfftn, _n_d(real_in=False)),
    OpInfo("fft.ihfftn", FFT.ihfftn, _np_ihfftn, _n_d(complex_in=False)),
    OpInfo("fft.fft2", FFT.fft2, lambda x: np.fft.fft2(x), lambda rng: [Sample((cfloats(rng, 3, 2),))]),
    OpInfo("fft.rfft2", FFT.rfft2, lambda x: np.fft.rfft2(x), lambda rng: [Sample((floats(rng, 3, 4),))]),
    OpInfo("fft.irfft2", FFT.irfft2, lambda x, s: np.fft.irfft2(x, s), lambda rng: [Sample((cfloats(rng, 3, 3), (3, 5)))]),
    OpInfo("fft.fftshift", FFT.fftshift, lambda x, dim=None: np.fft.fftshift(x, dim),
           lambda rng: [Sample((floats(rng, 3, 4),)), Sample((cfloats(rng, 5),), {"dim": 0})]),
    OpInfo("fft.ifftshift", FFT.ifftshift, lambda x, dim=None: np.fft.ifftshift(x, dim),
           lambda rng: [Sample((floats(rng, 3, 5),), {"dim": (0, 1)})]),
]
