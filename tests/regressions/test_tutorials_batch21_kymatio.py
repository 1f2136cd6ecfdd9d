"""kymatio (``kymatio/kymatio``) run on Lucid (``import lucid as torch``): the wavelet scattering
transforms' PyTorch code, its real-and-imaginary-last-axis complex arithmetic and its FFTs.

- ``kymatio/backend/torch_backend.py``: ``ModulusStable`` (a custom ``Function`` whose backward
  divides by the modulus and ``masked_fill_``s the zeros), ``TorchBackend`` with ``cdgmm`` (complex
  products written through ``A.new(A.shape)``, ``C[..., 0].view(-1, n)[:] = ...`` into a strided
  view, ``expand_as``, ``nelement``) and the older module-level ``cdgmm(A, B, inplace=True)``
  (``A.mul_(B)`` / ``A.copy_(C)``).
- ``kymatio/scattering1d/backend/torch_backend.py``: ``subsample_fourier`` (periodisation by
  ``view`` + ``mean``), ``pad`` (``F.pad(mode='reflect')``), ``unpad``, ``rfft`` (a zero imaginary
  part written in, then ``torch.view_as_real(torch.fft.fft(torch.view_as_complex(x)))``),
  ``irfft`` (``torch.fft.ifft(...).real[..., None]``) and ``ifft``.
- ``kymatio/scattering2d/backend/torch_backend.py``: ``Pad`` (``ReflectionPad2d`` plus the
  ``torch.cat`` fix for a padding as large as the image), ``subsample_fourier`` over two axes,
  ``fft2``/``ifft2`` through ``view_as_complex``, ``unpad`` and ``stack``.
- The NumPy filter banks (``scattering1d/filter_bank.py``: ``morlet_1d``, ``gauss_1d``,
  ``periodize_filter_fourier``, ``calibrate_scattering_filters``, ``scattering_filter_factory``;
  ``scattering2d/filter_bank.py``: ``filter_bank``, ``morlet_2d``, ``gabor_2d``,
  ``periodize_filter_fft``), the cores ``scattering1d/core/scattering1d.py`` and
  ``scattering2d/core/scattering2d.py``, and the torch frontends' ``register_filters`` /
  ``load_filters`` / ``scattering`` (filters as ``nn.Module`` buffers, ``.float()`` then the
  module's ``.double()``).
- The complex-dtype variant of the 1-D backend (a later kymatio branch): ``view_as_real`` /
  ``view`` / ``mean`` / ``view_as_complex`` periodisation, ``torch.fft.fft`` on a real input and the
  modulus as ``torch.abs`` of a complex tensor.

Every result is checked against a NumPy recomputation of the same pipeline (``numpy.fft``,
``np.pad(mode='reflect')``, complex products), closed forms (periodising the spectrum is
subsampling the signal), float64 finite differences of that NumPy pipeline for the gradients,
and, in the ``*_torch_parity`` tests, against PyTorch. Sizes are tiny: a 1-D signal of 32 samples
(J=3, Q=1, T=8: 10 channels) and a 16x16 image (J=2, L=4: 25 channels).

Adapted: the 1-D core of this version calls ``pad(..., pad_mode=...)`` while the backend of the
same period spells the keyword ``mode``: the backend's ``pad`` takes ``pad_mode``; the core's
``backend.concatenate`` is the base backend's ``stack`` along the channel axis. The 1-D
frontend's padding length is ``compute_minimum_support_to_pad``'s low-pass half-width rule only
(``int(1.2 * half width)``; the wavelets' supports are shorter here), capped as the frontend caps it;
``ScatteringTorch``'s ``forward`` calls ``scattering`` without its input checks; ``scipy.fftpack.ifft``
is ``numpy.fft.ifft``; the docstrings are left out. The complex-dtype backend's ``modulus`` (``torch.abs``) and
``cdgmm`` (``A * B``) are written for it.

Fixed on the way: the factories took no ``layout=`` (``torch.zeros(shape, dtype=x.dtype,
layout=x.layout, device=x.device)`` in both ``rfft``s raised ``TypeError: zeros() got an
unexpected keyword argument 'layout'``): ``zeros``, ``ones``, ``empty``, ``full``, ``arange``,
``linspace``, ``logspace``, ``eye``, ``rand``, ``randn``, ``randint``, ``randperm`` and
``Tensor.new_zeros/new_ones/new_empty/new_full`` take it (``lucid.strided``; ``zeros``/``empty``
also a sparse layout, giving the empty sparse tensor as PyTorch's). ``view_as_complex`` of a
tensor whose last dimension has a stride other than 1 returned a silent copy (writes through it
were lost); it raises PyTorch's "Tensor must have a last dimension with stride 1".
"""
import math
from functools import lru_cache

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


# ---------------------------------------------------------------------------------------------
# kymatio/scattering1d/filter_bank.py (NumPy)
# ---------------------------------------------------------------------------------------------

ifft = np.fft.ifft  # the original's ``from scipy.fftpack import ifft`` (same values; scipy costs ~1 s to import)

def adaptive_choice_P(sigma, eps=1e-7):
    val = math.sqrt(-2 * (sigma**2) * math.log(eps))
    P = int(math.ceil(val + 1))
    return P


def periodize_filter_fourier(h_f, nperiods=1, upscale=True):
    N = h_f.shape[0] // nperiods
    h_f_re = h_f.reshape(nperiods, N)
    v_f = (h_f_re.sum(axis=0) if upscale else
           h_f_re.mean(axis=0))
    return v_f


def morlet_1d(N, xi, sigma, normalize='l1', P_max=5, eps=1e-7):
    if type(P_max) != int:
        raise ValueError('P_max should be an int, got {}'.format(type(P_max)))
    if P_max < 1:
        raise ValueError('P_max should be non-negative, got {}'.format(P_max))
    # Find the adequate value of P
    P = min(adaptive_choice_P(sigma, eps=eps), P_max)
    assert P >= 1
    # Define the frequencies over [1-P, P[
    freqs = np.arange((1 - P) * N, P * N, dtype=float) / float(N)
    if P == 1:
        # in this case, make sure that there is continuity around 0
        # by using the interval [-0.5, 0.5]
        freqs_low = np.fft.fftfreq(N)
    elif P > 1:
        freqs_low = freqs
    # define the gabor at freq xi and the low-pass, both of width sigma
    gabor_f = np.exp(-(freqs - xi)**2 / (2 * sigma**2))
    low_pass_f = np.exp(-(freqs_low**2) / (2 * sigma**2))
    # discretize in signal <=> periodize in Fourier
    gabor_f = periodize_filter_fourier(gabor_f, nperiods=2 * P - 1)
    low_pass_f = periodize_filter_fourier(low_pass_f, nperiods=2 * P - 1)
    # find the summation factor to ensure that morlet_f[0] = 0.
    kappa = gabor_f[0] / low_pass_f[0]
    morlet_f = gabor_f - kappa * low_pass_f
    # normalize the Morlet if necessary
    morlet_f *= get_normalizing_factor(morlet_f, normalize=normalize)
    return morlet_f


def get_normalizing_factor(h_f, normalize='l1'):
    h_real = ifft(h_f)
    if np.abs(h_real).sum() < 1e-7:
        raise ValueError('Zero division error is very likely to occur, ' +
                         'aborting computations now.')
    if normalize == 'l1':
        norm_factor = 1. / (np.abs(h_real).sum())
    elif normalize == 'l2':
        norm_factor = 1. / np.sqrt((np.abs(h_real)**2).sum())
    else:
        raise ValueError("Supported normalizations only include 'l1' and 'l2'")
    return norm_factor


def gauss_1d(N, sigma, normalize='l1', P_max=5, eps=1e-7):
    # Find the adequate value of P
    if type(P_max) != int:
        raise ValueError('P_max should be an int, got {}'.format(type(P_max)))
    if P_max < 1:
        raise ValueError('P_max should be non-negative, got {}'.format(P_max))
    P = min(adaptive_choice_P(sigma, eps=eps), P_max)
    assert P >= 1
    # switch cases
    if P == 1:
        freqs_low = np.fft.fftfreq(N)
    elif P > 1:
        freqs_low = np.arange((1 - P) * N, P * N, dtype=float) / float(N)
    # define the low pass
    g_f = np.exp(-freqs_low**2 / (2 * sigma**2))
    # periodize it
    g_f = periodize_filter_fourier(g_f, nperiods=2 * P - 1)
    # normalize the signal
    g_f *= get_normalizing_factor(g_f, normalize=normalize)
    # return the Fourier transform
    return g_f


def compute_sigma_psi(xi, Q, r=math.sqrt(0.5)):
    factor = 1. / math.pow(2, 1. / Q)
    term1 = (1 - factor) / (1 + factor)
    term2 = 1. / math.sqrt(2 * math.log(1. / r))
    return xi * term1 * term2


def compute_temporal_support(h_f, criterion_amplitude=1e-3, warn=False):
    h = ifft(h_f, axis=1)
    half_support = h.shape[1] // 2
    # check if any value in half of worst case of abs(h) is below criterion
    hhalf = np.max(np.abs(h[:, :half_support]), axis=0)
    max_amplitude = hhalf.max()
    meets_criterion_idxs = np.where(hhalf <= criterion_amplitude * max_amplitude
                                    )[0]
    if len(meets_criterion_idxs) != 0:
        # if it is possible
        N = meets_criterion_idxs.min() + 1
    else:
        # if there are none
        N = half_support
    return N


def get_max_dyadic_subsampling(xi, sigma, alpha=4.):
    upper_bound = min(xi + alpha * sigma, 0.5)
    j = math.floor(-math.log2(upper_bound)) - 1
    j = int(j)
    return j


def move_one_dyadic_step(cv, Q, alpha=4.):
    factor = 1. / math.pow(2., 1. / Q)
    n = cv['key']
    new_cv = {'xi': cv['xi'] * factor, 'sigma': cv['sigma'] * factor}
    # compute the new j
    new_cv['j'] = get_max_dyadic_subsampling(new_cv['xi'], new_cv['sigma'], alpha=alpha)
    new_cv['key'] = n + 1
    return new_cv


def compute_xi_max(Q):
    xi_max = max(1. / (1. + math.pow(2., 3. / Q)), 0.35)
    return xi_max


def compute_params_filterbank(sigma_min, Q, r_psi=math.sqrt(0.5), alpha=4.,
                              xi_min=None):
    xi_min = xi_min if xi_min is not None else -1
    xi_max = compute_xi_max(Q)
    sigma_max = compute_sigma_psi(xi_max, Q, r=r_psi)

    xi = []
    sigma = []
    j = []

    if sigma_max <= sigma_min or xi_max <= xi_min:
        # in this exceptional case, we will not go through the loop, so
        # we directly assign
        last_xi = sigma_max
    else:
        # fill all the dyadic wavelets as long as possible
        current = {'key': 0, 'j': 0, 'xi': xi_max, 'sigma': sigma_max}
        # while we can attribute something
        while current['sigma'] > sigma_min and current['xi'] > xi_min:
            xi.append(current['xi'])
            sigma.append(current['sigma'])
            j.append(current['j'])
            current = move_one_dyadic_step(current, Q, alpha=alpha)
        # get the last key
        last_xi = xi[-1]
    # fill num_interm wavelets between last_xi and 0, both excluded
    num_intermediate = Q - 1
    for q in range(1, num_intermediate + 1):
        factor = (num_intermediate + 1. - q) / (num_intermediate + 1.)
        new_xi = factor * last_xi
        new_sigma = sigma_min
        if new_xi < xi_min:
            break
        xi.append(new_xi)
        sigma.append(new_sigma)
        j.append(get_max_dyadic_subsampling(new_xi, new_sigma, alpha=alpha))
    # return results
    return xi, sigma, j


def calibrate_scattering_filters(J, Q, T, r_psi=math.sqrt(0.5), sigma0=0.1,
                                 alpha=4., xi_min=None):
    Q1, Q2 = Q if isinstance(Q, tuple) else (Q, 1)
    if Q1 < 1 or Q2 < 1:
        raise ValueError('Q should always be >= 1, got {}'.format(Q))

    # lower bound of band-pass filter frequential widths:
    # for default T = 2**(J), this coincides with sigma_low
    sigma_min = sigma0 / math.pow(2, J)

    xi1, sigma1, j1 = compute_params_filterbank(sigma_min, Q1, r_psi=r_psi,
                                                alpha=alpha, xi_min=xi_min)
    xi2, sigma2, j2 = compute_params_filterbank(sigma_min, Q2, r_psi=r_psi,
                                                alpha=alpha, xi_min=xi_min)

    # width of the low-pass filter
    sigma_low = sigma0 / T
    return sigma_low, xi1, sigma1, j1, xi2, sigma2, j2


def scattering_filter_factory(J_support, J_scattering, Q, T,
                              r_psi=math.sqrt(0.5),
                              criterion_amplitude=1e-3, normalize='l1',
                              max_subsampling=None, sigma0=0.1, alpha=4.,
                              P_max=5, eps=1e-7, **kwargs):
    N = 2**J_support
    xi_min = 2 / N  # minimal peak at bin 2
    # compute the spectral parameters of the filters
    (sigma_low, xi1, sigma1, j1s, xi2, sigma2, j2s
     ) = calibrate_scattering_filters(J_scattering, Q, T, r_psi=r_psi,
                                      sigma0=sigma0, alpha=alpha, xi_min=xi_min)

    # instantiate the dictionaries which will contain the filters
    phi_f = {}
    psi1_f = []
    psi2_f = []

    # compute the band-pass filters of the second order,
    # which can take as input a subsampled
    for (n2, j2) in enumerate(j2s):
        # compute the current value for the max_subsampling,
        # which depends on the input it can accept.
        if max_subsampling is None:
            possible_subsamplings_after_order1 = [
                j1 for j1 in j1s if j2 > j1]
            if len(possible_subsamplings_after_order1) > 0:
                max_sub_psi2 = max(possible_subsamplings_after_order1)
            else:
                max_sub_psi2 = 0
        else:
            max_sub_psi2 = max_subsampling

        # We first compute the filter without subsampling
        psi_f = {}
        psi_f[0] = morlet_1d(
            N, xi2[n2], sigma2[n2], normalize=normalize, P_max=P_max, eps=eps)
        # compute the filter after subsampling at all other subsamplings
        # which might be received by the network, based on this first filter
        for subsampling in range(1, max_sub_psi2 + 1):
            factor_subsampling = 2**subsampling
            psi_f[subsampling] = periodize_filter_fourier(
                psi_f[0], nperiods=factor_subsampling)
        psi2_f.append(psi_f)

    # for the 1st order filters, the input is not subsampled so we
    # can only compute them with N=2**J_support
    for (n1, j1) in enumerate(j1s):
        psi1_f.append({0: morlet_1d(
            N, xi1[n1], sigma1[n1], normalize=normalize, P_max=P_max, eps=eps)})

    # compute the low-pass filters phi
    # Determine the maximal subsampling for phi, which depends on the
    # input it can accept (both 1st and 2nd order)
    if max_subsampling is None:
        max_subsampling_after_psi1 = max(j1s)
        max_subsampling_after_psi2 = max(j2s)
        log2_T = math.floor(math.log2(T))
        max_sub_phi = min(max(max_subsampling_after_psi1,
                              max_subsampling_after_psi2), log2_T)
    else:
        max_sub_phi = max_subsampling

    # compute the filters at all possible subsamplings
    phi_f[0] = gauss_1d(N, sigma_low, P_max=P_max, eps=eps)
    for subsampling in range(1, max_sub_phi + 1):
        factor_subsampling = 2**subsampling
        # compute the low_pass filter
        phi_f[subsampling] = periodize_filter_fourier(
            phi_f[0], nperiods=factor_subsampling)

    # Embed the meta information within the filters
    for (n1, j1) in enumerate(j1s):
        psi1_f[n1]['xi'] = xi1[n1]
        psi1_f[n1]['sigma'] = sigma1[n1]
        psi1_f[n1]['j'] = j1
    for (n2, j2) in enumerate(j2s):
        psi2_f[n2]['xi'] = xi2[n2]
        psi2_f[n2]['sigma'] = sigma2[n2]
        psi2_f[n2]['j'] = j2
    phi_f['xi'] = 0.
    phi_f['sigma'] = sigma_low
    phi_f['j'] = 0

    # compute the support size allowing to pad without boundary errors
    # at the finest resolution
    t_max_phi = compute_temporal_support(
        phi_f[0].reshape(1, -1), criterion_amplitude=criterion_amplitude)

    # return results
    return phi_f, psi1_f, psi2_f, t_max_phi


# kymatio/scattering1d/utils.py

def compute_border_indices(log2_T, i0, i1):
    ind_start = {0: i0}
    ind_end = {0: i1}
    for j in range(1, log2_T + 1):
        ind_start[j] = (ind_start[j - 1] // 2) + (ind_start[j - 1] % 2)
        ind_end[j] = (ind_end[j - 1] // 2) + (ind_end[j - 1] % 2)
    return ind_start, ind_end


def compute_padding(J_pad, N):
    N_pad = 2**J_pad
    if N_pad < N:
        raise ValueError('Padding support should be larger than the original '
                         'signal size!')
    to_add = 2**J_pad - N
    pad_right = to_add // 2
    pad_left = to_add - pad_right
    return pad_left, pad_right


# ---------------------------------------------------------------------------------------------
# kymatio/scattering2d/filter_bank.py (NumPy)
# ---------------------------------------------------------------------------------------------

def fft2(x):
    return np.fft.fft2(x)


def filter_bank(M, N, J, L=8):
    filters = {}
    filters['psi'] = []

    for j in range(J):
        for theta in range(L):
            psi = {'levels': [], 'j': j, 'theta': theta}
            psi_signal = morlet_2d(M, N, 0.8 * 2**j,
                (int(L-L/2-1)-theta) * np.pi / L,
                3.0 / 4.0 * np.pi /2**j, 4.0/L)
            psi_signal_fourier = np.real(fft2(psi_signal))
            # drop the imaginary part, it is zero anyway
            psi_levels = []
            for res in range(min(j + 1, max(J - 1, 1))):
                psi_levels.append(periodize_filter_fft(psi_signal_fourier, res))
            psi['levels'] = psi_levels
            filters['psi'].append(psi)

    phi_signal = gabor_2d(M, N, 0.8 * 2**(J-1), 0, 0)
    phi_signal_fourier = np.real(fft2(phi_signal))
    # drop the imaginary part, it is zero anyway
    filters['phi'] = {'levels': [], 'j': J}
    for res in range(J):
        filters['phi']['levels'].append(
            periodize_filter_fft(phi_signal_fourier, res))

    return filters


def periodize_filter_fft(x, res):
    M = x.shape[0]
    N = x.shape[1]

    crop = np.zeros((M // 2 ** res, N // 2 ** res), x.dtype)

    mask = np.ones(x.shape, np.float32)
    len_x = int(M * (1 - 2 ** (-res)))
    start_x = int(M * 2 ** (-res - 1))
    len_y = int(N * (1 - 2 ** (-res)))
    start_y = int(N * 2 ** (-res - 1))
    mask[start_x:start_x + len_x,:] = 0
    mask[:, start_y:start_y + len_y] = 0
    x = np.multiply(x,mask)

    for k in range(int(M / 2 ** res)):
        for l in range(int(N / 2 ** res)):
            for i in range(int(2 ** res)):
                for j in range(int(2 ** res)):
                    crop[k, l] += x[k + i * int(M / 2 ** res), l + j * int(N / 2 ** res)]

    return crop


def morlet_2d(M, N, sigma, theta, xi, slant=0.5, offset=0):
    wv = gabor_2d(M, N, sigma, theta, xi, slant, offset)
    wv_modulus = gabor_2d(M, N, sigma, theta, 0, slant, offset)
    K = np.sum(wv) / np.sum(wv_modulus)

    mor = wv - K * wv_modulus
    return mor


def gabor_2d(M, N, sigma, theta, xi, slant=1.0, offset=0):
    gab = np.zeros((M, N), np.complex64)
    R = np.array([[np.cos(theta), -np.sin(theta)], [np.sin(theta), np.cos(theta)]], np.float32)
    R_inv = np.array([[np.cos(theta), np.sin(theta)], [-np.sin(theta), np.cos(theta)]], np.float32)
    D = np.array([[1, 0], [0, slant * slant]])
    curv = np.dot(R, np.dot(D, R_inv)) / ( 2 * sigma * sigma)

    for ex in [-2, -1, 0, 1, 2]:
        for ey in [-2, -1, 0, 1, 2]:
            [xx, yy] = np.mgrid[offset + ex * M:offset + M + ex * M, offset + ey * N:offset + N + ey * N]
            arg = -(curv[0, 0] * np.multiply(xx, xx) + (curv[0, 1] + curv[1, 0]) * np.multiply(xx, yy) + curv[
                1, 1] * np.multiply(yy, yy)) + 1.j * (xx * xi * np.cos(theta) + yy * xi * np.sin(theta))
            gab += np.exp(arg)

    norm_factor = (2 * 3.1415 * sigma * sigma / slant)
    gab /= norm_factor

    return gab


def compute_padding_2d(M, N, J):  # kymatio/scattering2d/utils.py's compute_padding
    M_padded = ((M + 2 ** J) // 2 ** J + 1) * 2 ** J
    N_padded = ((N + 2 ** J) // 2 ** J + 1) * 2 ** J
    return M_padded, N_padded


# ---------------------------------------------------------------------------------------------
# kymatio/scattering1d/core/scattering1d.py and kymatio/scattering2d/core/scattering2d.py
# ---------------------------------------------------------------------------------------------

def scattering1d(x, pad, unpad, backend, J, log2_T, psi1, psi2, phi, pad_left=0,
        pad_right=0, ind_start=None, ind_end=None, oversampling=0,
        max_order=2, average=True, size_scattering=(0, 0, 0),
        vectorize=False, out_type='array', pad_mode='reflect'):
    subsample_fourier = backend.subsample_fourier
    modulus = backend.modulus
    rfft = backend.rfft
    ifft = backend.ifft
    irfft = backend.irfft
    cdgmm = backend.cdgmm
    concatenate = backend.concatenate


    # S is simply a dictionary if we do not perform the averaging...
    batch_size = x.shape[0]
    kJ = max(log2_T - oversampling, 0)
    temporal_size = ind_end[kJ] - ind_start[kJ]
    out_S_0, out_S_1, out_S_2 = [], [], []

    # pad to a dyadic size and make it complex
    U_0 = pad(x, pad_left=pad_left, pad_right=pad_right, pad_mode=pad_mode)
    # compute the Fourier transform
    U_0_hat = rfft(U_0)

    # Get S0
    k0 = max(log2_T - oversampling, 0)

    if average:
        S_0_c = cdgmm(U_0_hat, phi[0])
        S_0_hat = subsample_fourier(S_0_c, 2**k0)
        S_0_r = irfft(S_0_hat)
        S_0 = unpad(S_0_r, ind_start[k0], ind_end[k0])
    else:
        S_0 = x
    out_S_0.append({'coef': S_0,
                    'j': (),
                    'n': ()})

    # First order:
    for n1 in range(len(psi1)):
        # Convolution + downsampling
        j1 = psi1[n1]['j']

        k1 = max(min(j1, log2_T) - oversampling, 0)

        assert psi1[n1]['xi'] < 0.5 / (2**k1)
        U_1_c = cdgmm(U_0_hat, psi1[n1][0])
        U_1_hat = subsample_fourier(U_1_c, 2**k1)
        U_1_c = ifft(U_1_hat)

        # Take the modulus
        U_1_m = modulus(U_1_c)

        if average or max_order > 1:
            U_1_hat = rfft(U_1_m)

        if average:
            # Convolve with phi_J
            k1_J = max(log2_T - k1 - oversampling, 0)
            S_1_c = cdgmm(U_1_hat, phi[k1])
            S_1_hat = subsample_fourier(S_1_c, 2**k1_J)
            S_1_r = irfft(S_1_hat)

            S_1 = unpad(S_1_r, ind_start[k1_J + k1], ind_end[k1_J + k1])
        else:
            S_1 = unpad(U_1_m, ind_start[k1], ind_end[k1])

        out_S_1.append({'coef': S_1,
                        'j': (j1,),
                        'n': (n1,)})

        if max_order == 2:
            # 2nd order
            for n2 in range(len(psi2)):
                j2 = psi2[n2]['j']

                if j2 > j1:
                    assert psi2[n2]['xi'] < psi1[n1]['xi']

                    # convolution + downsampling
                    k2 = max(min(j2, log2_T) - k1 - oversampling, 0)

                    U_2_c = cdgmm(U_1_hat, psi2[n2][k1])
                    U_2_hat = subsample_fourier(U_2_c, 2**k2)
                    # take the modulus
                    U_2_c = ifft(U_2_hat)

                    U_2_m = modulus(U_2_c)

                    if average:
                        U_2_hat = rfft(U_2_m)

                        # Convolve with phi_J
                        k2_J = max(log2_T - k2 - k1 - oversampling, 0)

                        S_2_c = cdgmm(U_2_hat, phi[k1 + k2])
                        S_2_hat = subsample_fourier(S_2_c, 2**k2_J)
                        S_2_r = irfft(S_2_hat)

                        S_2 = unpad(S_2_r, ind_start[k1 + k2 + k2_J], ind_end[k1 + k2 + k2_J])
                    else:
                        S_2 = unpad(U_2_m, ind_start[k1 + k2], ind_end[k1 + k2])

                    out_S_2.append({'coef': S_2,
                                    'j': (j1, j2),
                                    'n': (n1, n2)})

    out_S = []
    out_S.extend(out_S_0)
    out_S.extend(out_S_1)
    out_S.extend(out_S_2)

    if out_type == 'array' and vectorize:
        out_S = concatenate([x['coef'] for x in out_S])
    elif out_type == 'array' and not vectorize:
        out_S = {x['n']: x['coef'] for x in out_S}
    elif out_type == 'list':
        # NOTE: This overrides the vectorize flag.
        for x in out_S:
            x.pop('n')

    return out_S


def scattering2d(x, pad, unpad, backend, J, L, phi, psi, max_order,
        out_type='array'):
    subsample_fourier = backend.subsample_fourier
    modulus = backend.modulus
    rfft = backend.rfft
    ifft = backend.ifft
    irfft = backend.irfft
    cdgmm = backend.cdgmm
    stack = backend.stack

    # Define lists for output.
    out_S_0, out_S_1, out_S_2 = [], [], []

    U_r = pad(x)

    U_0_c = rfft(U_r)

    # First low pass filter
    U_1_c = cdgmm(U_0_c, phi['levels'][0])
    U_1_c = subsample_fourier(U_1_c, k=2 ** J)

    S_0 = irfft(U_1_c)
    S_0 = unpad(S_0)

    out_S_0.append({'coef': S_0,
                    'j': (),
                    'n': (),
                    'theta': ()})

    for n1 in range(len(psi)):
        j1 = psi[n1]['j']
        theta1 = psi[n1]['theta']

        U_1_c = cdgmm(U_0_c, psi[n1]['levels'][0])
        if j1 > 0:
            U_1_c = subsample_fourier(U_1_c, k=2 ** j1)
        U_1_c = ifft(U_1_c)
        U_1_c = modulus(U_1_c)
        U_1_c = rfft(U_1_c)

        # Second low pass filter
        S_1_c = cdgmm(U_1_c, phi['levels'][j1])
        S_1_c = subsample_fourier(S_1_c, k=2 ** (J - j1))

        S_1_r = irfft(S_1_c)
        S_1_r = unpad(S_1_r)

        out_S_1.append({'coef': S_1_r,
                        'j': (j1,),
                        'n': (n1,),
                        'theta': (theta1,)})

        if max_order < 2:
            continue
        for n2 in range(len(psi)):
            j2 = psi[n2]['j']
            theta2 = psi[n2]['theta']

            if j2 <= j1:
                continue

            U_2_c = cdgmm(U_1_c, psi[n2]['levels'][j1])
            U_2_c = subsample_fourier(U_2_c, k=2 ** (j2 - j1))
            U_2_c = ifft(U_2_c)
            U_2_c = modulus(U_2_c)
            U_2_c = rfft(U_2_c)

            # Third low pass filter
            S_2_c = cdgmm(U_2_c, phi['levels'][j2])
            S_2_c = subsample_fourier(S_2_c, k=2 ** (J - j2))

            S_2_r = irfft(S_2_c)
            S_2_r = unpad(S_2_r)

            out_S_2.append({'coef': S_2_r,
                            'j': (j1, j2),
                            'n': (n1, n2),
                            'theta': (theta1, theta2)})

    out_S = []
    out_S.extend(out_S_0)
    out_S.extend(out_S_1)
    out_S.extend(out_S_2)

    if out_type == 'array':
        out_S = stack([x['coef'] for x in out_S])

    return out_S


# ---------------------------------------------------------------------------------------------
# The torch backends, run on the module handed in as ``torch``
# ---------------------------------------------------------------------------------------------

def kymatio_backends(torch):
    Function = torch.autograd.Function
    F = torch.nn.functional
    ReflectionPad2d = torch.nn.ReflectionPad2d

    # kymatio/backend/torch_backend.py
    class ModulusStable(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.p = 2
            ctx.dim = -1
            ctx.keepdim = False

            output = (x[...,0] * x[...,0] + x[...,1] * x[...,1]).sqrt()

            ctx.save_for_backward(x, output)

            return output

        @staticmethod
        def backward(ctx, grad_output):
            x, output = ctx.saved_tensors

            if ctx.dim is not None and ctx.keepdim is False and x.dim() != 1:
                grad_output = grad_output.unsqueeze(ctx.dim)
                output = output.unsqueeze(ctx.dim)

            grad_input = x.mul(grad_output).div(output)

            # Special case at 0 where we return a subgradient containing 0
            grad_input.masked_fill_(output == 0, 0)

            return grad_input

    class TorchBackend:
        name = 'torch'

        @classmethod
        def input_checks(cls, x):
            if x is None:
                raise TypeError('The input should be not empty.')

            cls.contiguous_check(x)

        @classmethod
        def complex_check(cls, x):
            if not cls._is_complex(x):
                raise TypeError('The input should be complex (i.e. last dimension is 2).')

        @classmethod
        def real_check(cls, x):
            if not cls._is_real(x):
                raise TypeError('The input should be real.')

        @classmethod
        def complex_contiguous_check(cls, x):
            cls.complex_check(x)
            cls.contiguous_check(x)

        @staticmethod
        def contiguous_check(x):
            if not x.is_contiguous():
                raise RuntimeError('Tensors must be contiguous.')

        @staticmethod
        def _is_complex(x):
            return x.shape[-1] == 2

        @staticmethod
        def _is_real(x):
            return x.shape[-1] == 1

        @classmethod
        def modulus(cls, x):
            cls.complex_contiguous_check(x)
            norm = ModulusStable.apply(x)[..., None]
            return norm

        @staticmethod
        def stack(arrays, dim=2):
            return torch.stack(arrays, dim=dim)

        @classmethod
        def cdgmm(cls, A, B):
            if not cls._is_real(B):
                cls.complex_contiguous_check(B)
            else:
                cls.contiguous_check(B)

            cls.complex_contiguous_check(A)

            if A.shape[-len(B.shape):-1] != B.shape[:-1]:
                raise RuntimeError('The filters are not compatible for multiplication.')

            if A.dtype is not B.dtype:
                raise TypeError('Input and filter must be of the same dtype.')

            if B.device.type == 'cuda':
                if A.device.type == 'cuda':
                    if A.device.index != B.device.index:
                        raise TypeError('Input and filter must be on the same GPU.')
                else:
                    raise TypeError('Input must be on GPU.')

            if B.device.type == 'cpu':
                if A.device.type == 'cuda':
                    raise TypeError('Input must be on CPU.')

            if cls._is_real(B):
                return A * B
            else:
                C = A.new(A.shape)

                A_r = A[..., 0].view(-1, B.nelement() // 2)
                A_i = A[..., 1].view(-1, B.nelement() // 2)

                B_r = B[..., 0].view(-1).unsqueeze(0).expand_as(A_r)
                B_i = B[..., 1].view(-1).unsqueeze(0).expand_as(A_i)

                C[..., 0].view(-1, B.nelement() // 2)[:] = A_r * B_r - A_i * B_i
                C[..., 1].view(-1, B.nelement() // 2)[:] = A_r * B_i + A_i * B_r

                return C

        @staticmethod
        def reshape_input(x, signal_shape):
            return x.reshape((-1, 1) + signal_shape)

        @staticmethod
        def reshape_output(S, batch_shape, n_kept_dims):
            new_shape = batch_shape + S.shape[-n_kept_dims:]
            return S.reshape(new_shape)

        @staticmethod
        def shape(x):
            return x.shape

    # the module-level cdgmm of kymatio 0.2's kymatio/backend/torch_backend.py (with ``inplace``)
    def cdgmm_v02(A, B, inplace=False):
        if not TorchBackend._is_real(B):
            type_checks_complex(B)
        else:
            if not B.is_contiguous():
                raise RuntimeError('Tensors must be contiguous.')

        type_checks(A)

        if A.shape[-len(B.shape):-1] != B.shape[:-1]:
            raise RuntimeError('The filters are not compatible for multiplication.')

        if A.dtype is not B.dtype or type(A) is not type(B):
            raise TypeError('Input and filter must be of the same dtype.')

        if TorchBackend._is_real(B):
            if inplace:
                return A.mul_(B)
            else:
                return A * B
        else:
            C = A.new(A.shape)

            A_r = A[..., 0].view(-1, B.nelement() // 2)
            A_i = A[..., 1].view(-1, B.nelement() // 2)

            B_r = B[..., 0].view(-1).unsqueeze(0).expand_as(A_r)
            B_i = B[..., 1].view(-1).unsqueeze(0).expand_as(A_i)

            C[..., 0].view(-1, B.nelement() // 2)[:] = A_r * B_r - A_i * B_i
            C[..., 1].view(-1, B.nelement() // 2)[:] = A_r * B_i + A_i * B_r

            return C if not inplace else A.copy_(C)

    def type_checks_complex(x):
        if not TorchBackend._is_complex(x):
            raise TypeError('The input should be complex (i.e. last dimension is 2).')

        if not x.is_contiguous():
            raise RuntimeError('Tensors must be contiguous.')

    def type_checks(x):
        if not x.is_contiguous():
            raise RuntimeError('Tensors must be contiguous.')

    # kymatio/scattering1d/backend/torch_backend.py
    _fft = lambda x: torch.view_as_real(torch.fft.fft(torch.view_as_complex(x)))
    _ifft = lambda x: torch.view_as_real(torch.fft.ifft(torch.view_as_complex(x)))
    _irfft = lambda x: torch.fft.ifft(torch.view_as_complex(x)).real[..., None]

    class TorchBackend1D(TorchBackend):
        @classmethod
        def subsample_fourier(cls, x, k):
            cls.complex_check(x)

            N = x.shape[-2]

            res = x.view(x.shape[:-2] + (k, N // k, 2)).mean(dim=-3)

            return res

        @staticmethod
        def pad(x, pad_left, pad_right, pad_mode="reflect"):
            if pad_mode != "constant":
                if (pad_left >= x.shape[-1]) or (pad_right >= x.shape[-1]):
                    raise ValueError("Indefinite padding size (larger than tensor).")

            res = F.pad(x, (pad_left, pad_right), mode=pad_mode)
            res = res[..., None]

            return res

        @staticmethod
        def unpad(x, i0, i1):
            x = x.reshape(x.shape[:-1])

            return x[..., i0:i1]

        @classmethod
        def cfft(cls, x):
            cls.contiguous_check(x)
            cls.complex_check(x)

            return _fft(x)

        # we cast to complex here then fft rather than use torch.rfft as torch.rfft is
        # inefficent.
        @classmethod
        def rfft(cls, x):
            cls.contiguous_check(x)
            cls.real_check(x)

            x_r = torch.zeros(
                x.shape[:-1] + (2,), dtype=x.dtype, layout=x.layout, device=x.device
            )
            x_r[..., 0] = x[..., 0]

            return _fft(x_r)

        @classmethod
        def irfft(cls, x):
            cls.contiguous_check(x)
            cls.complex_check(x)

            return _irfft(x)

        @classmethod
        def ifft(cls, x):
            cls.contiguous_check(x)
            cls.complex_check(x)

            return _ifft(x)

        @classmethod
        def average_global(cls, x):
            cls.contiguous_check(x)
            cls.real_check(x)

            return torch.sum(x, axis=-2, keepdims=True)

        @staticmethod
        def concatenate(arrays):  # TorchBackend.stack along the channel axis of (B, 1, N)
            return torch.stack(arrays, dim=-2)

    # kymatio/scattering2d/backend/torch_backend.py
    _fft2 = lambda x: torch.view_as_real(torch.fft.fft2(torch.view_as_complex(x)))
    _ifft2 = lambda x: torch.view_as_real(torch.fft.ifft2(torch.view_as_complex(x)))
    _irfft2 = lambda x: torch.fft.ifft2(torch.view_as_complex(x)).real[..., None]

    class Pad(object):
        def __init__(self, pad_size, input_size):
            self.pad_size = pad_size
            self.input_size = input_size

            self.build()

        def build(self):
            pad_size_tmp = list(self.pad_size)

            # This handles the case where the padding is equal to the image size
            if pad_size_tmp[0] == self.input_size[0]:
                pad_size_tmp[0] -= 1
                pad_size_tmp[1] -= 1
            if pad_size_tmp[2] == self.input_size[1]:
                pad_size_tmp[2] -= 1
                pad_size_tmp[3] -= 1
            # Pytorch expects its padding as [left, right, top, bottom]
            self.padding_module = ReflectionPad2d([pad_size_tmp[2], pad_size_tmp[3],
                                                   pad_size_tmp[0], pad_size_tmp[1]])

        def __call__(self, x):
            batch_shape = x.shape[:-2]
            signal_shape = x.shape[-2:]
            x = x.reshape((-1, 1) + signal_shape)
            x = self.padding_module(x)

            # Note: PyTorch is not effective to pad signals of size N-1 with N
            # elements, thus we had to add this fix.
            if self.pad_size[0] == self.input_size[0]:
                x = torch.cat([x[:, :, 1, :].unsqueeze(2), x, x[:, :, x.shape[2] - 2, :].unsqueeze(2)], 2)
            if self.pad_size[2] == self.input_size[1]:
                x = torch.cat([x[:, :, :, 1].unsqueeze(3), x, x[:, :, :, x.shape[3] - 2].unsqueeze(3)], 3)

            output = x.reshape(batch_shape + x.shape[-2:] + (1,))
            return output

    _Pad = Pad  # (a class body inside a function does not see the function's own ``Pad``)

    class TorchBackend2D(TorchBackend):
        Pad = _Pad

        @classmethod
        def subsample_fourier(cls, x, k):
            cls.contiguous_check(x)
            cls.complex_check(x)

            batch_shape = x.shape[:-3]
            signal_shape = x.shape[-3:]
            x = x.view((-1,) + signal_shape)
            y = x.view(-1,
                           k, x.shape[1] // k,
                           k, x.shape[2] // k,
                           2)

            out = y.mean(3, keepdim=False).mean(1, keepdim=False)
            out = out.reshape(batch_shape + out.shape[-3:])

            return out

        # we cast to complex here then fft rather than use torch.rfft as torch.rfft is
        # inefficent.
        @classmethod
        def rfft(cls, x):
            cls.contiguous_check(x)
            cls.real_check(x)

            x_r = torch.zeros((x.shape[:-1] + (2,)), dtype=x.dtype, layout=x.layout, device=x.device)
            x_r[..., 0] = x[..., 0]

            return _fft2(x_r)

        @classmethod
        def irfft(cls, x):
            cls.contiguous_check(x)
            cls.complex_check(x)

            return _irfft2(x)

        @classmethod
        def ifft(cls, x):
            cls.contiguous_check(x)
            cls.complex_check(x)

            return _ifft2(x)

        @staticmethod
        def unpad(in_):
            in_ = in_[..., 1:-1, 1:-1, :]
            in_ = in_.reshape(in_.shape[:-1])
            return in_

        @staticmethod
        def stack(arrays):
            return TorchBackend.stack(arrays, -3)

    # the complex-dtype 1-D backend of a later kymatio branch (complex tensors, no trailing axis)
    class TorchBackend1DComplex(TorchBackend):
        @staticmethod
        def _is_complex(x):
            return x.dtype in (torch.complex64, torch.complex128)

        @staticmethod
        def _is_real(x):
            return x.dtype in (torch.float32, torch.float64)

        @classmethod
        def modulus(cls, x):
            cls.complex_check(x)
            return torch.abs(x)

        @classmethod
        def cdgmm(cls, A, B):
            if A.shape[-len(B.shape):] != B.shape:
                raise RuntimeError('The filters are not compatible for multiplication.')
            return A * B

        @classmethod
        def subsample_fourier(cls, x, k, axis=-1):
            cls.complex_check(x)

            axis = axis if axis >= 0 else x.ndim + axis  # ensure positive
            s = list(x.shape)
            N = s[axis]
            re = (k, N // k)
            s.pop(axis)
            s.insert(axis, re[1])
            s.insert(axis, re[0])
            s.append(2)  # view_as_real

            x = torch.view_as_real(x)
            res = x.view(s).mean(dim=axis)
            res = torch.view_as_complex(res)

            return res

        @staticmethod
        def pad(x, pad_left, pad_right, pad_mode='reflect'):
            return F.pad(x, (pad_left, pad_right), mode=pad_mode)

        @staticmethod
        def unpad(x, i0, i1):
            return x[..., i0:i1]

        @classmethod
        def rfft(cls, x, axis=-1):
            cls.real_check(x)

            return torch.fft.fft(x, dim=axis)

        @classmethod
        def irfft(cls, x, axis=-1):
            cls.complex_check(x)

            return torch.fft.ifft(x, dim=axis).real

        @classmethod
        def ifft(cls, x, axis=-1):
            cls.complex_check(x)

            return torch.fft.ifft(x, dim=axis)

        @staticmethod
        def concatenate(arrays):
            return torch.stack(arrays, dim=-2)

    return {"ModulusStable": ModulusStable, "TorchBackend": TorchBackend, "cdgmm_v02": cdgmm_v02,
            "TorchBackend1D": TorchBackend1D, "TorchBackend2D": TorchBackend2D,
            "TorchBackend1DComplex": TorchBackend1DComplex}


# ---------------------------------------------------------------------------------------------
# The torch frontends (scattering1d/frontend/torch_frontend.py, scattering2d/frontend/...)
# ---------------------------------------------------------------------------------------------

@lru_cache(maxsize=None)
def _filters_1d(J, Q, T, N):
    log2_T = math.floor(math.log2(T))
    # ScatteringBase1D.build: the padding from the low-pass's temporal support
    J_tentative = int(np.ceil(np.log2(N)))
    phi_f = gauss_1d(2 ** J_tentative, 0.1 / T)
    min_to_pad = int(1.2 * compute_temporal_support(phi_f.reshape(1, -1)))
    J_max_support = int(np.floor(np.log2(3 * N - 2)))
    J_pad = min(int(np.ceil(np.log2(N + 2 * min_to_pad))), J_max_support)
    pad_left, pad_right = compute_padding(J_pad, N)
    ind_start, ind_end = compute_border_indices(log2_T, pad_left, pad_left + N)
    phi_f, psi1_f, psi2_f, _ = scattering_filter_factory(J_pad, J, Q, T)
    return dict(log2_T=log2_T, J_pad=J_pad, pad_left=pad_left, pad_right=pad_right,
                ind_start=ind_start, ind_end=ind_end, phi_f=phi_f, psi1_f=psi1_f, psi2_f=psi2_f)


def _copy_filters(fb):
    return ({k: v for k, v in fb["phi_f"].items()}, [dict(p) for p in fb["psi1_f"]],
            [dict(p) for p in fb["psi2_f"]])


def scattering1d_module(torch, J, N, Q=1, T=None, max_order=2, backend=None, complex_filters=False):
    bk = kymatio_backends(torch)
    backend = backend or bk["TorchBackend1D"]
    T = 2 ** J if T is None else T
    fb = _filters_1d(J, Q, T, N)

    class ScatteringTorch1D(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.J, self.Q, self.T, self.max_order = J, Q, T, max_order
            self.average, self.oversampling, self.vectorize = True, 0, True
            self.out_type, self.pad_mode = 'array', 'reflect'
            self.backend = backend
            for k in ("log2_T", "J_pad", "pad_left", "pad_right", "ind_start", "ind_end"):
                setattr(self, k, fb[k])
            self.phi_f, self.psi1_f, self.psi2_f = _copy_filters(fb)
            self.register_filters()

        def register_filters(self):
            n = 0
            # prepare for pytorch
            view = (lambda t: t) if complex_filters else (lambda t: t.view(-1, 1))
            for k in self.phi_f.keys():
                if type(k) != str:
                    # view(-1, 1).repeat(1, 2) because real numbers!
                    self.phi_f[k] = view(torch.from_numpy(
                        self.phi_f[k]).float())
                    self.register_buffer('tensor' + str(n), self.phi_f[k])
                    n += 1
            for psi_f in self.psi1_f:
                for sub_k in psi_f.keys():
                    if type(sub_k) != str:
                        psi_f[sub_k] = view(torch.from_numpy(
                            psi_f[sub_k]).float())
                        self.register_buffer('tensor' + str(n), psi_f[sub_k])
                        n += 1
            for psi_f in self.psi2_f:
                for sub_k in psi_f.keys():
                    if type(sub_k) != str:
                        psi_f[sub_k] = view(torch.from_numpy(
                            psi_f[sub_k]).float())
                        self.register_buffer('tensor' + str(n), psi_f[sub_k])
                        n += 1

        def load_filters(self):
            buffer_dict = dict(self.named_buffers())
            n = 0

            for k in self.phi_f.keys():
                if type(k) != str:
                    self.phi_f[k] = buffer_dict['tensor' + str(n)]
                    n += 1

            for psi_f in self.psi1_f:
                for sub_k in psi_f.keys():
                    if type(sub_k) != str:
                        psi_f[sub_k] = buffer_dict['tensor' + str(n)]
                        n += 1

            for psi_f in self.psi2_f:
                for sub_k in psi_f.keys():
                    if type(sub_k) != str:
                        psi_f[sub_k] = buffer_dict['tensor' + str(n)]
                        n += 1

        def forward(self, x):  # ScatteringTorch.forward
            return self.scattering(x)

        def scattering(self, x):
            batch_shape = x.shape[:-1]
            signal_shape = x.shape[-1:]

            x = x.reshape((-1, 1) + signal_shape)

            self.load_filters()

            S = scattering1d(x, self.backend.pad, self.backend.unpad, self.backend, self.J, self.log2_T, self.psi1_f, self.psi2_f,
                             self.phi_f, max_order=self.max_order, average=self.average, pad_left=self.pad_left,
                             pad_right=self.pad_right, ind_start=self.ind_start, ind_end=self.ind_end,
                             oversampling=self.oversampling,
                             vectorize=self.vectorize,
                             out_type=self.out_type,
                             pad_mode=self.pad_mode)

            scattering_shape = S.shape[-2:]
            new_shape = batch_shape + scattering_shape

            S = S.reshape(new_shape)
            return S

    return ScatteringTorch1D()


@lru_cache(maxsize=None)
def _filters_2d(M, N, J, L):
    M_padded, N_padded = compute_padding_2d(M, N, J)
    return M_padded, N_padded, filter_bank(M_padded, N_padded, J, L)


def scattering2d_module(torch, J, shape, L=4, max_order=2):
    backend = kymatio_backends(torch)["TorchBackend2D"]
    M, N = shape
    M_padded, N_padded, filters = _filters_2d(M, N, J, L)

    class ScatteringTorch2D(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.J, self.L, self.shape, self.max_order = J, L, shape, max_order
            self.backend, self.out_type, self.pre_pad = backend, 'array', False
            self._M_padded, self._N_padded = M_padded, N_padded
            self.pad = self.backend.Pad([(self._M_padded - M) // 2, (self._M_padded - M+1) // 2, (self._N_padded - N) // 2,
                                (self._N_padded - N + 1) // 2], [M, N])
            self.unpad = self.backend.unpad
            self.phi, self.psi = filters['phi'], filters['psi']
            self.register_filters()

        def register_single_filter(self, v, n):
            current_filter = torch.from_numpy(v).unsqueeze(-1)
            self.register_buffer('tensor' + str(n), current_filter)
            return current_filter

        def register_filters(self):
            n = 0
            for phi_level in self.phi['levels']:
                self.register_single_filter(phi_level, n)
                n = n + 1
            for psi in self.psi:
                for psi_level in psi['levels']:
                    self.register_single_filter(psi_level, n)
                    n = n + 1

        def load_single_filter(self, n, buffer_dict):
            return buffer_dict['tensor' + str(n)]

        def load_filters(self):
            buffer_dict = dict(self.named_buffers())
            n = 0
            phis = {k: v for k, v in self.phi.items() if k != 'levels'}
            phis['levels'] = []
            for phi_level in self.phi['levels']:
                phis['levels'].append(self.load_single_filter(n, buffer_dict))
                n = n + 1
            psis = [{} for _ in range(len(self.psi))]
            for j in range(len(self.psi)):
                psis[j] = {k: v for k, v in self.psi[j].items() if k != 'levels'}
                psis[j]['levels'] = []
                for psi_level in self.psi[j]['levels']:
                    psis[j]['levels'].append(self.load_single_filter(n, buffer_dict))
                    n = n + 1
            return phis, psis

        def forward(self, x):  # ScatteringTorch.forward
            return self.scattering(x)

        def scattering(self, input):
            if not torch.is_tensor(input):
                raise TypeError('The input should be a PyTorch Tensor.')
            if len(input.shape) < 2:
                raise RuntimeError('Input tensor must have at least two dimensions.')
            if not input.is_contiguous():
                raise RuntimeError('Tensor must be contiguous.')
            if (input.shape[-1] != self.shape[-1] or input.shape[-2] != self.shape[-2]) and not self.pre_pad:
                raise RuntimeError('Tensor must be of spatial size (%i,%i).' % (self.shape[0], self.shape[1]))

            phi, psi = self.load_filters()

            batch_shape = input.shape[:-2]
            signal_shape = input.shape[-2:]

            input = input.reshape((-1,) + signal_shape)

            S = scattering2d(input, self.pad, self.unpad, self.backend, self.J,
                            self.L, phi, psi, self.max_order, self.out_type)

            scattering_shape = S.shape[-3:]
            S = S.reshape(batch_shape + scattering_shape)
            return S

    return ScatteringTorch2D()


# ---------------------------------------------------------------------------------------------
# NumPy recomputations of the same pipelines (complex arrays, numpy.fft)
# ---------------------------------------------------------------------------------------------

def _f32(a):  # the frontends hold the filters as float32 buffers (``.float()``)
    return np.asarray(a, np.float32).astype(np.float64)


def np_scattering1d(x, J, N, Q=1, T=None):
    T = 2 ** J if T is None else T
    fb = _filters_1d(J, Q, T, N)
    log2_T, i0, i1 = fb["log2_T"], fb["ind_start"], fb["ind_end"]
    phi = {k: _f32(v) for k, v in fb["phi_f"].items() if type(k) != str}
    psi1, psi2 = fb["psi1_f"], fb["psi2_f"]

    def sub(xh, k):
        return xh.reshape(xh.shape[:-1] + (k, xh.shape[-1] // k)).mean(-2)

    def low(uh, k_in):  # phi at resolution k_in, subsampled down to 2**log2_T overall
        kJ = max(log2_T - k_in, 0)
        r = np.fft.ifft(sub(uh * phi[k_in], 2 ** kJ)).real
        return r[..., i0[kJ + k_in]:i1[kJ + k_in]]

    U0 = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(fb["pad_left"], fb["pad_right"])], mode="reflect")
    U0h = np.fft.fft(U0)
    out = [low(U0h, 0)]
    order2 = []
    for p1 in psi1:
        k1 = max(min(p1["j"], log2_T), 0)
        U1h = np.fft.fft(np.abs(np.fft.ifft(sub(U0h * _f32(p1[0]), 2 ** k1))))
        out.append(low(U1h, k1))
        for p2 in psi2:
            if p2["j"] > p1["j"]:
                k2 = max(min(p2["j"], log2_T) - k1, 0)
                U2h = np.fft.fft(np.abs(np.fft.ifft(sub(U1h * _f32(p2[k1]), 2 ** k2))))
                order2.append(low(U2h, k1 + k2))
    return np.stack(out + order2, axis=-2)


def np_scattering2d(x, J, shape, L=4):
    M, N = shape
    Mp, Np, filters = _filters_2d(M, N, J, L)
    phi = [np.asarray(p, np.float64) for p in filters["phi"]["levels"]]

    def sub(xh, k):
        s = xh.shape
        return xh.reshape(s[:-2] + (k, s[-2] // k, k, s[-1] // k)).mean(-2).mean(-3)

    def low(uh, j):
        return np.fft.ifft2(sub(uh * phi[j], 2 ** (J - j))).real[..., 1:-1, 1:-1]

    pads = [(0, 0)] * (x.ndim - 2) + [((Mp - M) // 2, (Mp - M + 1) // 2), ((Np - N) // 2, (Np - N + 1) // 2)]
    U0h = np.fft.fft2(np.pad(x, pads, mode="reflect"))
    out, order2 = [low(U0h, 0)], []
    for p1 in filters["psi"]:
        j1 = p1["j"]
        u1 = U0h * p1["levels"][0]
        U1h = np.fft.fft2(np.abs(np.fft.ifft2(sub(u1, 2 ** j1) if j1 > 0 else u1)))
        out.append(low(U1h, j1))
        for p2 in filters["psi"]:
            j2 = p2["j"]
            if j2 > j1:
                U2h = np.fft.fft2(np.abs(np.fft.ifft2(sub(U1h * p2["levels"][j1], 2 ** (j2 - j1)))))
                order2.append(low(U2h, j2))
    return np.stack(out + order2, axis=-3)


def _fd_grad(f, x, idx, h=1e-6):
    g = []
    for i in idx:
        e = np.zeros_like(x)
        e.flat[i] = h
        g.append((f(x + e) - f(x - e)) / (2 * h))
    return np.array(g)


def _np(t):
    return t.detach().cpu().numpy()


# ---------------------------------------------------------------------------------------------
# Pages: each runs on the module it is handed as ``torch``
# ---------------------------------------------------------------------------------------------

def primitives_page(torch, seed=0):
    bk = kymatio_backends(torch)
    B1, B2, TB = bk["TorchBackend1D"], bk["TorchBackend2D"], bk["TorchBackend"]
    rng = np.random.default_rng(seed)
    out = {}
    A_np = rng.standard_normal((2, 3, 4, 5, 2))
    Bc_np = rng.standard_normal((4, 5, 2))
    Br_np = rng.standard_normal((4, 5, 1))
    A, Bc, Br = torch.tensor(A_np), torch.tensor(Bc_np), torch.tensor(Br_np)
    out["cdgmm_c"] = _np(TB.cdgmm(A, Bc))
    out["cdgmm_r"] = _np(TB.cdgmm(A, Br))
    A2 = A.clone()
    ret = bk["cdgmm_v02"](A2, Bc, inplace=True)
    out["cdgmm_inplace"] = (_np(A2), ret is A2)
    A3 = A.clone()
    ret = bk["cdgmm_v02"](A3, Br, inplace=True)
    out["cdgmm_inplace_r"] = (_np(A3), ret is A3)
    # 1-D: pad (reflect), rfft, subsample_fourier, irfft / ifft, unpad
    x_np = rng.standard_normal((2, 1, 16))
    x = torch.tensor(x_np)
    U = B1.pad(x, pad_left=5, pad_right=3)
    out["pad1"] = _np(U)
    Uh = B1.rfft(U)
    out["rfft1"] = _np(Uh)
    out["sub1"] = _np(B1.subsample_fourier(Uh, 4))
    out["irfft_sub1"] = _np(B1.irfft(B1.subsample_fourier(Uh, 4)))
    out["ifft1"] = _np(B1.ifft(Uh))
    out["cfft1"] = _np(B1.cfft(Uh))
    out["unpad1"] = _np(B1.unpad(U, 5, 21))
    out["mod1"] = _np(B1.modulus(Uh))
    out["avg_global"] = _np(B1.average_global(U))
    out["concat"] = _np(B1.concatenate([x, 2 * x]))
    # 2-D: Pad (including a padding as large as the image), subsample, fft2, unpad, stack
    y_np = rng.standard_normal((2, 3, 4, 6))
    y = torch.tensor(y_np)
    out["pad2"] = _np(B2.Pad([2, 1, 3, 2], [4, 6])(y))
    out["pad2_full"] = _np(B2.Pad([4, 4, 6, 6], [4, 6])(y))
    Y = B2.Pad([2, 2, 1, 1], [4, 6])(y)  # (2, 3, 8, 8, 1)
    Yh = B2.rfft(Y)
    out["rfft2"] = _np(Yh)
    out["sub2"] = _np(B2.subsample_fourier(Yh, 2))
    out["irfft_sub2"] = _np(B2.irfft(B2.subsample_fourier(Yh, 2)))
    out["ifft2"] = _np(B2.ifft(Yh))
    out["unpad2"] = _np(B2.unpad(Y))
    out["stack2"] = _np(B2.stack([y, y + 1]))
    return out, dict(A=A_np, Bc=Bc_np, Br=Br_np, x=x_np, y=y_np)


def modulus_page(torch):
    ModulusStable = kymatio_backends(torch)["ModulusStable"]
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0], [-1.0, 2.0], [0.5, -0.5]], dtype=torch.float64,
                     requires_grad=True)
    y = ModulusStable.apply(x)
    w = torch.tensor([1.0, 2.0, -1.0, 3.0], dtype=torch.float64)
    (y * w).sum().backward()
    z = torch.tensor([3 + 4j, 0j, -1 + 2j, 0.5 - 0.5j], dtype=torch.complex128, requires_grad=True)
    a = torch.abs(z)
    (a * w).sum().backward()
    zr = torch.view_as_real(z.detach()).clone().requires_grad_()
    m = kymatio_backends(torch)["TorchBackend"].modulus(zr.contiguous())
    return _np(y), _np(x.grad), _np(a), _np(z.grad), tuple(m.shape)


def scatter1d_page(torch, x_np, w_np, J=3, N=32, T=None, dtype="float64", backend=None,
                   complex_filters=False):
    S = scattering1d_module(torch, J, N, T=T, backend=backend, complex_filters=complex_filters)
    if dtype == "float64":
        S = S.double()
    x = torch.tensor(x_np, dtype=getattr(torch, dtype), requires_grad=True)
    S = S.to(x.device)
    out = S(x)
    (out * torch.tensor(w_np, dtype=out.dtype)).sum().backward()
    return _np(out), _np(x.grad)


def scatter2d_page(torch, x_np, w_np, J=2, shape=(16, 16), L=4, dtype="float64"):
    S = scattering2d_module(torch, J, shape, L)
    S = S.double() if dtype == "float64" else S.float()
    x = torch.tensor(x_np, dtype=getattr(torch, dtype), requires_grad=True)
    S = S.to(x.device)
    out = S(x)
    (out * torch.tensor(w_np, dtype=out.dtype)).sum().backward()
    return _np(out), _np(x.grad)


def _data1d(seed=1, batch=(2,), N=32, C=10, T=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(batch + (N,)), rng.standard_normal(batch + (C, T))


def _data2d(seed=2, batch=(2,), shape=(16, 16), C=25, S=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(batch + shape), rng.standard_normal(batch + (C, S, S))


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------

def test_kymatio_backend_primitives():
    r, d = primitives_page(lucid)
    A = d["A"][..., 0] + 1j * d["A"][..., 1]
    Bc = d["Bc"][..., 0] + 1j * d["Bc"][..., 1]
    c = lambda z: np.stack([z.real, z.imag], -1)
    np.testing.assert_allclose(r["cdgmm_c"], c(A * Bc), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["cdgmm_r"], d["A"] * d["Br"], rtol=1e-12, atol=0)
    got, same = r["cdgmm_inplace"]
    np.testing.assert_allclose(got, c(A * Bc), rtol=1e-12, atol=1e-12)
    assert same  # A.copy_(C) returns A itself
    got, same = r["cdgmm_inplace_r"]
    np.testing.assert_allclose(got, d["A"] * d["Br"], rtol=1e-12, atol=0)
    assert same  # A.mul_(B)
    x = d["x"]
    U = np.pad(x, [(0, 0), (0, 0), (5, 3)], mode="reflect")
    np.testing.assert_array_equal(r["pad1"], U[..., None])
    Uh = np.fft.fft(U)
    np.testing.assert_allclose(r["rfft1"], c(Uh), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["sub1"], c(Uh.reshape(2, 1, 4, 6).mean(-2)), rtol=1e-12, atol=1e-12)
    # periodising the spectrum by k is subsampling the signal by k (closed form)
    np.testing.assert_allclose(r["irfft_sub1"], U[..., ::4, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["ifft1"], c(U + 0j), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["cfft1"], c(np.fft.fft(Uh)), rtol=1e-12, atol=1e-11)
    np.testing.assert_array_equal(r["unpad1"], x)  # unpadding undoes the padding exactly
    np.testing.assert_allclose(r["mod1"], np.abs(Uh)[..., None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["avg_global"], U.sum(-1)[..., None, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(r["concat"], np.stack([x, 2 * x], -2))
    y = d["y"]
    np.testing.assert_array_equal(r["pad2"], np.pad(y, [(0, 0), (0, 0), (2, 1), (3, 2)], mode="reflect")[..., None])
    # a padding as large as the image: ReflectionPad2d by size - 1, then the torch.cat fix,
    # which repeats rows 1 and -2: symmetric ("reflect" then one more reflected row)
    full = r["pad2_full"][..., 0]
    assert full.shape == (2, 3, 12, 18)
    p = np.pad(y, [(0, 0), (0, 0), (3, 3), (5, 5)], mode="reflect")
    p = np.concatenate([p[:, :, 1:2], p, p[:, :, -2:-1]], 2)
    p = np.concatenate([p[..., 1:2], p, p[..., -2:-1]], 3)
    np.testing.assert_array_equal(full, p)
    Y = np.pad(y, [(0, 0), (0, 0), (2, 2), (1, 1)], mode="reflect")
    Yh = np.fft.fft2(Y)
    np.testing.assert_allclose(r["rfft2"], c(Yh), rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(r["sub2"], c(Yh.reshape(2, 3, 2, 4, 2, 4).mean(4).mean(2)), rtol=1e-12, atol=1e-11)
    np.testing.assert_allclose(r["irfft_sub2"], Y[..., ::2, ::2, None], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r["ifft2"], c(Y + 0j), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(r["unpad2"], Y[..., 1:-1, 1:-1])
    np.testing.assert_array_equal(r["stack2"], np.stack([y, y + 1], -3))


def test_kymatio_backend_primitives_torch_parity():
    torch = pytest.importorskip("torch")
    r, _ = primitives_page(lucid)
    t, _ = primitives_page(torch)
    for k in r:
        if isinstance(r[k], tuple):
            assert r[k][1] == t[k][1], k
            np.testing.assert_allclose(r[k][0], t[k][0], rtol=1e-12, atol=1e-12, err_msg=k)
        else:
            np.testing.assert_allclose(r[k], t[k], rtol=1e-12, atol=1e-11, err_msg=k)


def test_kymatio_modulus_stable_and_complex_abs():
    y, gx, a, gz, mshape = modulus_page(lucid)
    np.testing.assert_allclose(y, [5.0, 0.0, math.sqrt(5), math.sqrt(0.5)], rtol=1e-15)
    np.testing.assert_allclose(a, y, rtol=1e-15)
    w = np.array([1.0, 2.0, -1.0, 3.0])
    X = np.array([[3.0, 4.0], [0.0, 0.0], [-1.0, 2.0], [0.5, -0.5]])
    want = X * (w / np.where(y == 0, 1, y))[:, None]
    want[1] = 0.0  # ModulusStable's subgradient at 0
    np.testing.assert_allclose(gx, want, rtol=1e-14, atol=0)
    # PyTorch's convention for a real loss of a complex z: grad = dL/dRe + i dL/dIm; at 0 abs's is 0
    np.testing.assert_allclose(gz, want[:, 0] + 1j * want[:, 1], rtol=1e-14, atol=0)
    assert mshape == (4, 1)
    ModulusStable = kymatio_backends(lucid)["ModulusStable"]
    xx = lucid.tensor(np.random.default_rng(3).standard_normal((3, 4, 2)), dtype=lucid.float64,
                      requires_grad=True)
    assert lucid.autograd.gradcheck(ModulusStable.apply, (xx,))


def test_kymatio_modulus_torch_parity():
    torch = pytest.importorskip("torch")
    for a, b in zip(modulus_page(lucid), modulus_page(torch)):
        if isinstance(a, tuple):
            assert a == tuple(b)
        else:
            np.testing.assert_allclose(a, b, rtol=1e-14, atol=0)


def test_kymatio_scattering1d_matches_numpy_and_finite_differences():
    x_np, w_np = _data1d()
    out, grad = scatter1d_page(lucid, x_np, w_np)
    assert out.shape == (2, 10, 4)
    want = np_scattering1d(x_np, 3, 32)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    f = lambda xv: float((np_scattering1d(xv[None], 3, 32)[0] * w_np[0]).sum())
    fd = _fd_grad(f, x_np[0], range(32))
    np.testing.assert_allclose(grad[0], fd, rtol=1e-5, atol=1e-7)
    # float32 input, float32 filters (the module as built)
    out32, grad32 = scatter1d_page(lucid, x_np, w_np, dtype="float32")
    np.testing.assert_allclose(out32, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grad32, grad, rtol=1e-3, atol=1e-4)


def test_kymatio_scattering1d_complex_dtype_backend():
    # the complex-dtype backend (torch.abs, view_as_real/view_as_complex periodisation,
    # torch.fft.fft on a real input) gives the same transform and gradient
    x_np, w_np = _data1d(seed=4)
    B = kymatio_backends(lucid)["TorchBackend1DComplex"]
    out, grad = scatter1d_page(lucid, x_np, w_np, backend=B, complex_filters=True)
    np.testing.assert_allclose(out, np_scattering1d(x_np, 3, 32), rtol=1e-10, atol=1e-12)
    _, ref_grad = scatter1d_page(lucid, x_np, w_np)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-10, atol=1e-12)


def test_kymatio_scattering1d_torch_parity():
    torch = pytest.importorskip("torch")
    x_np, w_np = _data1d()
    for dt, tol in (("float64", 1e-12), ("float32", 2e-5)):
        r, t = scatter1d_page(lucid, x_np, w_np, dtype=dt), scatter1d_page(torch, x_np, w_np, dtype=dt)
        np.testing.assert_allclose(r[0], t[0], rtol=tol, atol=tol)
        np.testing.assert_allclose(r[1], t[1], rtol=tol, atol=tol)
    B = kymatio_backends(torch)["TorchBackend1DComplex"]
    t = scatter1d_page(torch, x_np, w_np, backend=B, complex_filters=True)
    r = scatter1d_page(lucid, x_np, w_np, backend=kymatio_backends(lucid)["TorchBackend1DComplex"],
                       complex_filters=True)
    np.testing.assert_allclose(r[0], t[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(r[1], t[1], rtol=1e-12, atol=1e-12)


def test_kymatio_scattering2d_matches_numpy_and_finite_differences():
    x_np, w_np = _data2d()
    out, grad = scatter2d_page(lucid, x_np, w_np)
    assert out.shape == (2, 25, 4, 4)
    want = np_scattering2d(x_np, 2, (16, 16))
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    f = lambda xv: float((np_scattering2d(xv[None], 2, (16, 16))[0] * w_np[0]).sum())
    idx = np.random.default_rng(5).choice(256, 12, replace=False)
    fd = _fd_grad(f, x_np[0], idx)
    np.testing.assert_allclose(grad[0].ravel()[idx], fd, rtol=1e-5, atol=1e-7)


def test_kymatio_scattering2d_torch_parity():
    torch = pytest.importorskip("torch")
    x_np, w_np = _data2d()
    for dt, tol in (("float64", 1e-12), ("float32", 2e-5)):
        r, t = scatter2d_page(lucid, x_np, w_np, dtype=dt), scatter2d_page(torch, x_np, w_np, dtype=dt)
        np.testing.assert_allclose(r[0], t[0], rtol=tol, atol=tol)
        np.testing.assert_allclose(r[1], t[1], rtol=tol, atol=tol)


def errors_page(torch):
    """The failures the backends meet, each as (exception class name, message)."""
    bk = kymatio_backends(torch)
    B1, B2, TB = bk["TorchBackend1D"], bk["TorchBackend2D"], bk["TorchBackend"]
    F = torch.nn.functional
    out = {}

    def catch(key, fn):
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (the class is part of what is compared)
            out[key] = (type(e).__name__, str(e))
        else:
            out[key] = None

    x = torch.arange(16.0, dtype=torch.float64).reshape(1, 1, 8, 2)
    catch("view_as_complex_stride", lambda: torch.view_as_complex(x.reshape(1, 1, 2, 8).transpose(-1, -2)))
    buf = torch.arange(12.0, dtype=torch.float64).reshape(3, 4)
    torch.view_as_complex(buf[:, 2:]).mul_(1j)  # strides (4, 1): a view, written through
    out["view_write"] = buf.tolist()
    catch("view_as_complex_size", lambda: torch.view_as_complex(torch.zeros(2, 3)))
    catch("view_as_real_real", lambda: torch.view_as_real(torch.zeros(2)))
    catch("reflect_too_large", lambda: F.pad(torch.zeros(1, 1, 4), (4, 4), mode="reflect"))
    catch("kymatio_pad_check", lambda: B1.pad(torch.zeros(1, 1, 4), 4, 4))
    catch("view_incompatible", lambda: x.reshape(2, 4, 2).transpose(0, 1).view(-1, 2))
    catch("not_contiguous", lambda: B2.rfft(torch.zeros(1, 6, 4, 1).transpose(1, 2)))
    catch("not_complex", lambda: B1.ifft(torch.zeros(1, 4, 1)))
    catch("cdgmm_shape", lambda: TB.cdgmm(torch.zeros(2, 4, 2), torch.zeros(5, 1)))
    catch("cdgmm_dtype", lambda: TB.cdgmm(torch.zeros(2, 4, 2), torch.zeros(4, 1, dtype=torch.float64)))
    catch("fft2_1d", lambda: torch.fft.fft2(torch.zeros(4)))
    # the factories' layout= (kymatio's rfft passes layout=x.layout to torch.zeros)
    catch("zeros_layout_str", lambda: torch.zeros(2, layout="strided"))
    catch("ones_layout_sparse", lambda: torch.ones(2, layout=torch.sparse_coo))
    z = torch.zeros(2, 3, layout=torch.sparse_coo)
    out["zeros_sparse"] = (str(z.layout).split(".")[-1], tuple(z.shape), int(z._nnz()))
    out["strided"] = [tuple(f(layout=torch.strided).shape) for f in (
        lambda **k: torch.zeros(2, 3, **k), lambda **k: torch.ones(2, **k), lambda **k: torch.empty(2, **k),
        lambda **k: torch.full((2,), 1.0, **k), lambda **k: torch.rand(2, **k), lambda **k: torch.randn(2, **k),
        lambda **k: torch.randint(3, (2,), **k), lambda **k: torch.arange(3, **k), lambda **k: torch.eye(2, **k),
        lambda **k: torch.linspace(0, 1, 3, **k), lambda **k: torch.randperm(3, **k),
        lambda **k: torch.zeros(1).new_zeros(2, **k), lambda **k: torch.zeros(1).new_full((2,), 1.0, **k))]
    return out


_ERRORS = {  # key: (exception class, a piece of PyTorch's message that Lucid's must contain too)
    "view_as_complex_stride": ("RuntimeError", "last dimension with stride 1"),
    "view_as_complex_size": ("RuntimeError", "last dimension"),
    "view_as_real_real": ("RuntimeError", "view_as_real"),
    "reflect_too_large": ("RuntimeError", "adding size should be less than the corresponding input dimension"),
    "kymatio_pad_check": ("ValueError", "Indefinite padding size"),
    "view_incompatible": ("RuntimeError", "view size is not compatible with input tensor's size and stride"),
    "not_contiguous": ("RuntimeError", "Tensors must be contiguous."),
    "not_complex": ("TypeError", "The input should be complex"),
    "cdgmm_shape": ("RuntimeError", "The filters are not compatible for multiplication."),
    "cdgmm_dtype": ("TypeError", "Input and filter must be of the same dtype."),
    "fft2_1d": ("IndexError", "out of range"),
    "zeros_layout_str": ("TypeError", "argument 'layout' must be"),
}


def test_kymatio_backend_errors_and_factory_layouts():
    r = errors_page(lucid)
    for key, (cls, msg) in _ERRORS.items():
        assert r[key] is not None and r[key][0] == cls and msg in r[key][1], (key, r[key])
    assert r["ones_layout_sparse"][0] in ("RuntimeError", "NotImplementedError")
    assert "ones" in r["ones_layout_sparse"][1] and "layout" in r["ones_layout_sparse"][1]
    assert r["zeros_sparse"] == ("sparse_coo", (2, 3), 0)
    assert r["view_write"] == [[0, 1, -3, 2], [4, 5, -7, 6], [8, 9, -11, 10]]  # (a + bi) i = -b + ai
    assert r["strided"] == [(2, 3), (2,), (2,), (2,), (2,), (2,), (2,), (3,), (2, 2), (3,), (3,), (2,), (2,)]


def test_kymatio_backend_errors_torch_parity():
    torch = pytest.importorskip("torch")
    r, t = errors_page(lucid), errors_page(torch)
    for key, (cls, msg) in _ERRORS.items():
        assert t[key][0] == cls and msg in t[key][1], (key, t[key])  # the table is PyTorch's
        assert r[key][0] == t[key][0], (key, r[key], t[key])
    assert r["ones_layout_sparse"][0] in ("RuntimeError", "NotImplementedError") and t["ones_layout_sparse"] is not None
    for key in ("zeros_sparse", "strided", "view_write"):
        assert r[key] == t[key], key


def test_kymatio_complex_scattering1d_jvp_and_double_backward():
    # forward mode through the complex-dtype pipeline (fft of a real input, view_as_real /
    # view_as_complex periodisation, torch.abs) against central differences of the NumPy one,
    # and a double backward (the gradient's squared norm) against differences of the gradient
    B = kymatio_backends(lucid)["TorchBackend1DComplex"]
    x_np, w_np = _data1d(seed=7)
    v_np = np.random.default_rng(9).standard_normal(x_np.shape)
    x = lucid.tensor(x_np)
    S = scattering1d_module(lucid, 3, 32, backend=B, complex_filters=True).double().to(x.device)
    out, tan = lucid.func.jvp(S, (x,), (lucid.tensor(v_np),))
    h = 1e-6
    fd = (np_scattering1d(x_np + h * v_np, 3, 32) - np_scattering1d(x_np - h * v_np, 3, 32)) / (2 * h)
    np.testing.assert_allclose(_np(out), np_scattering1d(x_np, 3, 32), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_np(tan), fd, rtol=1e-6, atol=1e-8)
    w = lucid.tensor(w_np)

    def grad_sq(xv, create_graph=False):
        t = lucid.tensor(xv, requires_grad=True)
        (g,) = lucid.autograd.grad((S(t) * w).sum(), [t], create_graph=create_graph)
        return t, g

    t, g = grad_sq(x_np, create_graph=True)
    (gg,) = lucid.autograd.grad((g ** 2).sum(), [t])
    idx = [0, 5, 17, 40, 63]
    e = np.eye(x_np.size)
    fdg = [(float((grad_sq(x_np + h * e[i].reshape(x_np.shape))[1] ** 2).sum())
            - float((grad_sq(x_np - h * e[i].reshape(x_np.shape))[1] ** 2).sum())) / (2 * h) for i in idx]
    np.testing.assert_allclose(_np(gg).ravel()[idx], fdg, rtol=1e-5, atol=1e-8)
    assert float(np.abs(fdg).max()) > 1e-3  # not a trivially zero second derivative


def test_kymatio_complex_scattering1d_transforms_torch_parity():
    torch = pytest.importorskip("torch")
    x_np, w_np = _data1d(seed=7)
    v_np = np.random.default_rng(9).standard_normal(x_np.shape)
    res = []
    for mod, jvp in ((lucid, lucid.func.jvp), (torch, torch.func.jvp)):
        B = kymatio_backends(mod)["TorchBackend1DComplex"]
        x = mod.tensor(x_np)
        S = scattering1d_module(mod, 3, 32, backend=B, complex_filters=True).double().to(x.device)
        _, tan = jvp(S, (x,), (mod.tensor(v_np),))
        t = mod.tensor(x_np, requires_grad=True)
        (g,) = mod.autograd.grad((S(t) * mod.tensor(w_np)).sum(), [t], create_graph=True)
        (gg,) = mod.autograd.grad((g ** 2).sum(), [t])
        res.append((_np(tan), _np(g), _np(gg)))
    for a, b in zip(*res):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


def test_kymatio_scattering2d_gradcheck():
    # kymatio's own test_gradients (Scattering2D(...).double(), gradcheck), on 8x8 with J=1, L=2,
    # and its double backward (ModulusStable's backward is built from differentiable ops)
    x = lucid.tensor(np.random.default_rng(11).random((1, 1, 8, 8)), requires_grad=True)
    scattering = scattering2d_module(lucid, 1, (8, 8), L=2).double().to(x.device)
    assert lucid.autograd.gradcheck(scattering, (x,), fast_mode=True)
    assert lucid.autograd.gradgradcheck(scattering, (x,), fast_mode=True)


def test_kymatio_scattering_of_a_constant_closed_form():
    # a constant signal: the low-pass keeps it (phi_hat(0) = 1 in 1-D: an l1-normalised positive
    # window; 2 pi sigma^2 / (2 * 3.1415 sigma^2) in 2-D, gabor_2d's normalisation), the
    # zero-mean wavelets remove it, so every first and second order coefficient vanishes
    c = lucid.tensor([[1.5], [-2.0]], dtype=lucid.float64)
    S1 = scattering1d_module(lucid, 3, 32).double().to(c.device)
    out = _np(S1(c * lucid.ones(2, 32, dtype=lucid.float64)))
    np.testing.assert_allclose(out[:, 0], np.array([[1.5] * 4, [-2.0] * 4]), rtol=1e-12, atol=0)
    assert np.abs(out[:, 1:]).max() < 1e-12
    S2 = scattering2d_module(lucid, 2, (16, 16)).double().to(c.device)
    out = _np(S2(c[..., None] * lucid.ones(2, 16, 16, dtype=lucid.float64)))
    np.testing.assert_allclose(out[:, 0], np.array([1.5, -2.0])[:, None, None] * np.full((4, 4), math.pi / 3.1415),
                               rtol=1e-6, atol=0)
    assert np.abs(out[:, 1:]).max() < 1e-6
