"""SpeechBrain (``speechbrain/speechbrain``) run on Lucid (``import lucid as torch``): its pure-PyTorch
feature pipeline, layers, losses and CTC decoding.

- ``speechbrain/processing/features.py``: ``STFT`` (``torch.stft(..., return_complex=False)`` with
  a Hamming window shorter than ``n_fft``), ``ISTFT`` (``torch.complex`` then ``torch.istft``),
  ``spectral_magnitude``, ``Filterbank`` (mel scale through ``10 ** tensor``, triangular,
  rectangular and gaussian filters, learnable ``f_central``/``band`` with ``freeze=False``, the
  ``amax``/``torch.max`` top-dB clipping), ``DCT`` (``dct[0] *= ...`` into a row view),
  ``Deltas`` (replicate ``F.pad`` plus a grouped ``conv1d``), ``ContextWindow`` (an ``eye``
  kernel, ``torch.roll``) and ``InputNormalization`` (sentence, batch, speaker and global running
  statistics; a 0-d int tensor as a slice bound, ``x[snt_id] = ...``).
- ``speechbrain/lobes/features.py``: ``Fbank`` and ``MFCC`` under ``torch.no_grad()``.
- ``speechbrain/nnet/CNN.py``: ``SincConv`` (learnable band edges) and ``Conv1d`` with "same"
  (reflect padding), "causal" and "valid" padding, ``get_padding_elem``.
- ``speechbrain/nnet/losses.py`` with ``dataio.length_to_mask``: ``ctc_loss`` (its ``mean``,
  ``sum``, ``batch`` and ``batchmean`` reductions, ``zero_infinity=True``), ``nll_loss`` /
  ``mse_loss`` / ``l1_loss`` through ``compute_masked_loss`` (an int64 mask multiplied in place,
  label smoothing), ``truncate``, ``PitWrapper``, ``cal_si_snr`` / ``get_mask``,
  ``AdditiveAngularMargin`` and ``LogSoftmaxWrapper``.
- ``speechbrain/nnet/pooling.py``: ``StatisticsPooling`` (with relative lengths and its Gaussian
  noise added in place) and ``Pooling1d``; ``speechbrain/nnet/normalization.py``: the
  ``BatchNorm1d`` and ``LayerNorm`` wrappers, ``ExponentialMovingAverage`` and ``PCEN``.
- ``speechbrain/decoders/ctc.py``: ``filter_ctc_output``, ``ctc_greedy_decode`` and
  ``CTCPrefixScore`` (Algorithm 2 of Watanabe et al.: ``masked_fill_`` through an ``eq`` mask,
  ``torch.stack`` of a transposed and an expanded tensor then ``.view``, index-tensor assignment
  into a table, ``index_select``, ``logsumexp`` over ``-1e20`` entries, ``torch.div(...,
  rounding_mode="floor")``), full and partial (candidate) scoring over two steps with
  ``permute_mem``, checked against a brute-force sum over every alignment.

Every result is checked against a NumPy recomputation (``numpy.fft.rfft`` frames with the same
window and padding, the mel matrices, the DCT-II matrix, deltas as the regression formula, the
CTC forward recursion, ...), the docstrings' own printed values (SpeechBrain's, computed with
PyTorch), float64 finite differences for gradients, and, in the ``*_torch_parity`` tests,
PyTorch. Sizes are tiny (a 1 kHz "sample rate", 12-sample windows, 16-point FFTs).

Adapted: the modules that hold ``Filterbank`` are made (and the page's code "imported") under
``with torch.device("cpu")``: ``Filterbank`` builds its matrix from CPU tensors (``device_inp``, and
``_gaussian_filters``'s default ``torch.tensor(2)``) and moves it to the spectrogram's device,
which with another default device would mix devices (PyTorch refuses too); ``cal_si_snr``'s data
is on the CPU (its ``device=estimate_source.device.type`` drops a device index); a SincConv
band is scaled by 0.9 so that no filter edge sits exactly on ``clamp``'s bound (where central
differences halve the one-sided derivative); ``CTCPrefixScore`` takes float32 log-probabilities
(its ``torch.full`` tables are float32 and PyTorch refuses a float64 index-put into them).
``InputNormalization``'s checkpoint decorators (``register_checkpoint_hooks`` and the
savers) are left out; ``SincConv`` is run in float64 by casting its two plain tensor attributes
(``n_``, ``window_``) after ``.double()``, which only converts its parameters (as in PyTorch).

Fixed on the way: ``torch.stack`` / ``torch.cat`` kept NumPy's layout for a transposed input (a
non-row-major result, so ``CTCPrefixScore``'s ``torch.stack([xnb, xb]).view(2, -1, B * V)``
raised "view size is not compatible"; PyTorch's result is row-major unless every input is
channels-last); ``torch.stack`` of one tensor returned a view of it (a write into the result
changed the input); ``F.ctc_loss`` with ``blank`` outside ``[0, C)`` raised an ``IndexError`` from
a gather instead of PyTorch's "blank must be in label range".
"""
import functools
import math
from itertools import groupby, permutations

import numpy as np
import pytest

import lucid
import lucid.nn  # noqa: F401
import lucid.nn.functional  # noqa: F401


# --------------------------------------------------------------------------------------------
# speechbrain/processing/features.py
# --------------------------------------------------------------------------------------------
def features_page(torch):
    import logging
    logger = logging.getLogger(__name__)

    class STFT(torch.nn.Module):
        def __init__(
            self,
            sample_rate,
            win_length=25,
            hop_length=10,
            n_fft=400,
            window_fn=torch.hamming_window,
            normalized_stft=False,
            center=True,
            pad_mode="constant",
            onesided=True,
        ):
            super().__init__()
            self.sample_rate = sample_rate
            self.win_length = win_length
            self.hop_length = hop_length
            self.n_fft = n_fft
            self.normalized_stft = normalized_stft
            self.center = center
            self.pad_mode = pad_mode
            self.onesided = onesided

            # Convert win_length and hop_length from ms to samples
            self.win_length = int(
                round((self.sample_rate / 1000.0) * self.win_length)
            )
            self.hop_length = int(
                round((self.sample_rate / 1000.0) * self.hop_length)
            )

            self.window = window_fn(self.win_length)

        def forward(self, x):
            # Managing multi-channel stft
            or_shape = x.shape
            if len(or_shape) == 3:
                x = x.transpose(1, 2)
                x = x.reshape(or_shape[0] * or_shape[2], or_shape[1])

            stft = torch.stft(
                x,
                self.n_fft,
                self.hop_length,
                self.win_length,
                self.window.to(x.device),
                self.center,
                self.pad_mode,
                self.normalized_stft,
                self.onesided,
                return_complex=False,
            )

            # Retrieving the original dimensionality (batch,time, channels)
            if len(or_shape) == 3:
                stft = stft.reshape(
                    or_shape[0],
                    or_shape[2],
                    stft.shape[1],
                    stft.shape[2],
                    stft.shape[3],
                )
                stft = stft.permute(0, 3, 2, 4, 1)
            else:
                # (batch, time, channels)
                stft = stft.transpose(2, 1)

            return stft

    class ISTFT(torch.nn.Module):
        def __init__(
            self,
            sample_rate,
            n_fft=None,
            win_length=25,
            hop_length=10,
            window_fn=torch.hamming_window,
            normalized_stft=False,
            center=True,
            onesided=True,
            epsilon=1e-12,
        ):
            super().__init__()
            self.sample_rate = sample_rate
            self.n_fft = n_fft
            self.win_length = win_length
            self.hop_length = hop_length
            self.normalized_stft = normalized_stft
            self.center = center
            self.onesided = onesided
            self.epsilon = epsilon

            # Convert win_length and hop_length from ms to samples
            self.win_length = int(
                round((self.sample_rate / 1000.0) * self.win_length)
            )
            self.hop_length = int(
                round((self.sample_rate / 1000.0) * self.hop_length)
            )

            # Create window using provided function
            self.window = window_fn(self.win_length)

        def forward(self, x, sig_length=None):
            or_shape = x.shape

            # Infer n_fft if not provided
            if self.n_fft is None and self.onesided:
                n_fft = (x.shape[2] - 1) * 2
            elif self.n_fft is None and not self.onesided:
                n_fft = x.shape[2]
            else:
                n_fft = self.n_fft

            # Changing the format for (batch, time_step, n_fft, 2, n_channels)
            if len(or_shape) == 5:
                x = x.permute(0, 4, 2, 1, 3)

                # Lumping batch and channel dimension, because torch.istft
                # doesn't support batching.
                x = x.reshape(-1, x.shape[2], x.shape[3], x.shape[4])
            elif len(or_shape) == 4:
                x = x.permute(0, 2, 1, 3)

            # isft ask complex input
            x = torch.complex(x[..., 0], x[..., 1])

            istft = torch.istft(
                input=x,
                n_fft=n_fft,
                hop_length=self.hop_length,
                win_length=self.win_length,
                window=self.window.to(x.device),
                center=self.center,
                onesided=self.onesided,
                length=sig_length,
            )

            # Convert back to (time, time_step, n_channels)
            if len(or_shape) == 5:
                istft = istft.reshape(or_shape[0], or_shape[4], -1)
                istft = istft.transpose(1, 2)

            return istft

    def spectral_magnitude(stft, power=1, log=False, eps=1e-14):
        spectr = stft.pow(2).sum(-1)

        # Add eps avoids NaN when spectr is zero
        if power < 1:
            spectr = spectr + eps
        spectr = spectr.pow(power)

        if log:
            return torch.log(spectr + eps)
        return spectr

    class Filterbank(torch.nn.Module):
        def __init__(
            self,
            n_mels=40,
            log_mel=True,
            filter_shape="triangular",
            f_min=0,
            f_max=8000,
            n_fft=400,
            sample_rate=16000,
            power_spectrogram=2,
            amin=1e-10,
            ref_value=1.0,
            top_db=80.0,
            param_change_factor=1.0,
            param_rand_factor=0.0,
            freeze=True,
        ):
            super().__init__()
            self.n_mels = n_mels
            self.log_mel = log_mel
            self.filter_shape = filter_shape
            self.f_min = f_min
            self.f_max = f_max
            self.n_fft = n_fft
            self.sample_rate = sample_rate
            self.power_spectrogram = power_spectrogram
            self.amin = amin
            self.ref_value = ref_value
            self.top_db = top_db
            self.freeze = freeze
            self.n_stft = self.n_fft // 2 + 1
            self.db_multiplier = math.log10(max(self.amin, self.ref_value))
            self.device_inp = torch.device("cpu")
            self.param_change_factor = param_change_factor
            self.param_rand_factor = param_rand_factor

            if self.power_spectrogram == 2:
                self.multiplier = 10
            else:
                self.multiplier = 20

            # Make sure f_min < f_max
            if self.f_min >= self.f_max:
                err_msg = "Require f_min: %f < f_max: %f" % (
                    self.f_min,
                    self.f_max,
                )
                logger.error(err_msg, exc_info=True)

            # Filter definition
            mel = torch.linspace(
                self._to_mel(self.f_min), self._to_mel(self.f_max), self.n_mels + 2
            )
            hz = self._to_hz(mel)

            # Computation of the filter bands
            band = hz[1:] - hz[:-1]
            self.band = band[:-1]
            self.f_central = hz[1:-1]

            # Adding the central frequency and the band to the list of nn param
            if not self.freeze:
                self.f_central = torch.nn.Parameter(
                    self.f_central / (self.sample_rate * self.param_change_factor)
                )
                self.band = torch.nn.Parameter(
                    self.band / (self.sample_rate * self.param_change_factor)
                )

            # Frequency axis
            all_freqs = torch.linspace(0, self.sample_rate // 2, self.n_stft)

            # Replicating for all the filters
            self.all_freqs_mat = all_freqs.repeat(self.f_central.shape[0], 1)

        def forward(self, spectrogram):
            # Computing central frequency and bandwidth of each filter
            f_central_mat = self.f_central.repeat(
                self.all_freqs_mat.shape[1], 1
            ).transpose(0, 1)
            band_mat = self.band.repeat(self.all_freqs_mat.shape[1], 1).transpose(
                0, 1
            )

            # Creation of the multiplication matrix. It is used to create
            # the filters that average the computed spectrogram.
            if not self.freeze:
                f_central_mat = f_central_mat * (
                    self.sample_rate
                    * self.param_change_factor
                    * self.param_change_factor
                )
                band_mat = band_mat * (
                    self.sample_rate
                    * self.param_change_factor
                    * self.param_change_factor
                )

            # Regularization with random changes of filter central frequency and band
            elif self.param_rand_factor != 0 and self.training:
                rand_change = (
                    1.0
                    + torch.rand(2) * 2 * self.param_rand_factor
                    - self.param_rand_factor
                )
                f_central_mat = f_central_mat * rand_change[0]
                band_mat = band_mat * rand_change[1]

            fbank_matrix = self._create_fbank_matrix(f_central_mat, band_mat).to(
                spectrogram.device
            )

            sp_shape = spectrogram.shape

            # Managing multi-channels case (batch, time, channels)
            if len(sp_shape) == 4:
                spectrogram = spectrogram.permute(0, 3, 1, 2)
                spectrogram = spectrogram.reshape(
                    sp_shape[0] * sp_shape[3], sp_shape[1], sp_shape[2]
                )

            # FBANK computation
            fbanks = torch.matmul(spectrogram, fbank_matrix)
            if self.log_mel:
                fbanks = self._amplitude_to_DB(fbanks)

            # Reshaping in the case of multi-channel inputs
            if len(sp_shape) == 4:
                fb_shape = fbanks.shape
                fbanks = fbanks.reshape(
                    sp_shape[0], sp_shape[3], fb_shape[1], fb_shape[2]
                )
                fbanks = fbanks.permute(0, 2, 3, 1)

            return fbanks

        @staticmethod
        def _to_mel(hz):
            return 2595 * math.log10(1 + hz / 700)

        @staticmethod
        def _to_hz(mel):
            return 700 * (10 ** (mel / 2595) - 1)

        def _triangular_filters(self, all_freqs, f_central, band):
            # Computing the slops of the filters
            slope = (all_freqs - f_central) / band
            left_side = slope + 1.0
            right_side = -slope + 1.0

            # Adding zeros for negative values
            zero = torch.zeros(1, device=self.device_inp)
            fbank_matrix = torch.max(
                zero, torch.min(left_side, right_side)
            ).transpose(0, 1)

            return fbank_matrix

        def _rectangular_filters(self, all_freqs, f_central, band):
            # cut-off frequencies of the filters
            low_hz = f_central - band
            high_hz = f_central + band

            # Left/right parts of the filter
            left_side = right_size = all_freqs.ge(low_hz)
            right_size = all_freqs.le(high_hz)

            fbank_matrix = (left_side * right_size).float().transpose(0, 1)

            return fbank_matrix

        def _gaussian_filters(
            self, all_freqs, f_central, band, smooth_factor=torch.tensor(2)
        ):
            fbank_matrix = torch.exp(
                -0.5 * ((all_freqs - f_central) / (band / smooth_factor)) ** 2
            ).transpose(0, 1)

            return fbank_matrix

        def _create_fbank_matrix(self, f_central_mat, band_mat):
            if self.filter_shape == "triangular":
                fbank_matrix = self._triangular_filters(
                    self.all_freqs_mat, f_central_mat, band_mat
                )

            elif self.filter_shape == "rectangular":
                fbank_matrix = self._rectangular_filters(
                    self.all_freqs_mat, f_central_mat, band_mat
                )

            else:
                fbank_matrix = self._gaussian_filters(
                    self.all_freqs_mat, f_central_mat, band_mat
                )

            return fbank_matrix

        def _amplitude_to_DB(self, x):
            x_db = self.multiplier * torch.log10(torch.clamp(x, min=self.amin))
            x_db -= self.multiplier * self.db_multiplier

            # Setting up dB max. It is the max over time and frequency,
            # Hence, of a whole sequence (sequence-dependent)
            new_x_db_max = x_db.amax(dim=(-2, -1)) - self.top_db

            # Clipping to dB max. The view is necessary as only a scalar is obtained
            # per sequence.
            x_db = torch.max(x_db, new_x_db_max.view(x_db.shape[0], 1, 1))

            return x_db

    class DCT(torch.nn.Module):
        def __init__(
            self, input_size, n_out=20, ortho_norm=True,
        ):
            super().__init__()

            if n_out > input_size:
                raise ValueError(
                    "Cannot select more DCT coefficients than inputs "
                    "(n_out=%i, n_in=%i)" % (n_out, input_size)
                )

            # Generate matix for DCT transformation
            n = torch.arange(float(input_size))
            k = torch.arange(float(n_out)).unsqueeze(1)
            dct = torch.cos(math.pi / float(input_size) * (n + 0.5) * k)

            if ortho_norm:
                dct[0] *= 1.0 / math.sqrt(2.0)
                dct *= math.sqrt(2.0 / float(input_size))
            else:
                dct *= 2.0

            self.dct_mat = dct.t()

        def forward(self, x):
            # Managing multi-channels case
            input_shape = x.shape
            if len(input_shape) == 4:
                x = x.reshape(x.shape[0] * x.shape[3], x.shape[1], x.shape[2])

            # apply the DCT transform
            dct = torch.matmul(x, self.dct_mat.to(x.device))

            # Reshape in the case of multi-channels
            if len(input_shape) == 4:
                dct = dct.reshape(
                    input_shape[0], dct.shape[1], dct.shape[2], input_shape[3]
                )

            return dct

    class Deltas(torch.nn.Module):
        def __init__(
            self, input_size, window_length=5,
        ):
            super().__init__()
            self.n = (window_length - 1) // 2
            self.denom = self.n * (self.n + 1) * (2 * self.n + 1) / 3

            self.register_buffer(
                "kernel",
                torch.arange(-self.n, self.n + 1, dtype=torch.float32,).repeat(
                    input_size, 1, 1
                ),
            )

        def forward(self, x):
            # Managing multi-channel deltas reshape tensor (batch*channel,time)
            x = x.transpose(1, 2).transpose(2, -1)
            or_shape = x.shape
            if len(or_shape) == 4:
                x = x.reshape(or_shape[0] * or_shape[2], or_shape[1], or_shape[3])

            # Padding for time borders
            x = torch.nn.functional.pad(x, (self.n, self.n), mode="replicate")

            # Derivative estimation (with a fixed convolutional kernel)
            delta_coeff = (
                torch.nn.functional.conv1d(
                    x, self.kernel.to(x.device), groups=x.shape[1]
                )
                / self.denom
            )

            # Retrieving the original dimensionality (for multi-channel case)
            if len(or_shape) == 4:
                delta_coeff = delta_coeff.reshape(
                    or_shape[0], or_shape[1], or_shape[2], or_shape[3],
                )
            delta_coeff = delta_coeff.transpose(1, -1).transpose(2, -1)

            return delta_coeff

    class ContextWindow(torch.nn.Module):
        def __init__(
            self, left_frames=0, right_frames=0,
        ):
            super().__init__()
            self.left_frames = left_frames
            self.right_frames = right_frames
            self.context_len = self.left_frames + self.right_frames + 1
            self.kernel_len = 2 * max(self.left_frames, self.right_frames) + 1

            # Kernel definition
            self.kernel = torch.eye(self.context_len, self.kernel_len)

            if self.right_frames > self.left_frames:
                lag = self.right_frames - self.left_frames
                self.kernel = torch.roll(self.kernel, lag, 1)

            self.first_call = True

        def forward(self, x):
            x = x.transpose(1, 2)

            if self.first_call is True:
                self.first_call = False
                self.kernel = (
                    self.kernel.repeat(x.shape[1], 1, 1)
                    .view(x.shape[1] * self.context_len, self.kernel_len,)
                    .unsqueeze(1)
                )

            # Managing multi-channel case
            or_shape = x.shape
            if len(or_shape) == 4:
                x = x.reshape(or_shape[0] * or_shape[2], or_shape[1], or_shape[3])

            # Compute context (using the estimated convolutional kernel)
            cw_x = torch.nn.functional.conv1d(
                x,
                self.kernel.to(x.device),
                groups=x.shape[1],
                padding=max(self.left_frames, self.right_frames),
            )

            # Retrieving the original dimensionality (for multi-channel case)
            if len(or_shape) == 4:
                cw_x = cw_x.reshape(
                    or_shape[0], cw_x.shape[1], or_shape[2], cw_x.shape[-1]
                )

            cw_x = cw_x.transpose(1, 2)

            return cw_x

    class InputNormalization(torch.nn.Module):
        def __init__(
            self,
            mean_norm=True,
            std_norm=True,
            norm_type="global",
            avg_factor=None,
            requires_grad=False,
            update_until_epoch=3,
        ):
            super().__init__()
            self.mean_norm = mean_norm
            self.std_norm = std_norm
            self.norm_type = norm_type
            self.avg_factor = avg_factor
            self.requires_grad = requires_grad
            self.glob_mean = torch.tensor([0])
            self.glob_std = torch.tensor([0])
            self.spk_dict_mean = {}
            self.spk_dict_std = {}
            self.spk_dict_count = {}
            self.weight = 1.0
            self.count = 0
            self.eps = 1e-10
            self.update_until_epoch = update_until_epoch

        def forward(self, x, lengths, spk_ids=torch.tensor([]), epoch=0):
            N_batches = x.shape[0]

            current_means = []
            current_stds = []

            for snt_id in range(N_batches):

                # Avoiding padded time steps
                actual_size = torch.round(lengths[snt_id] * x.shape[1]).int()

                # computing statistics
                current_mean, current_std = self._compute_current_stats(
                    x[snt_id, 0:actual_size, ...]
                )

                current_means.append(current_mean)
                current_stds.append(current_std)

                if self.norm_type == "sentence":

                    x[snt_id] = (x[snt_id] - current_mean.data) / current_std.data

                if self.norm_type == "speaker":

                    spk_id = int(spk_ids[snt_id][0])

                    if self.training:
                        if spk_id not in self.spk_dict_mean:

                            # Initialization of the dictionary
                            self.spk_dict_mean[spk_id] = current_mean
                            self.spk_dict_std[spk_id] = current_std
                            self.spk_dict_count[spk_id] = 1

                        else:
                            self.spk_dict_count[spk_id] = (
                                self.spk_dict_count[spk_id] + 1
                            )

                            if self.avg_factor is None:
                                self.weight = 1 / self.spk_dict_count[spk_id]
                            else:
                                self.weight = self.avg_factor

                            self.spk_dict_mean[spk_id] = (
                                (1 - self.weight) * self.spk_dict_mean[spk_id]
                                + self.weight * current_mean
                            )
                            self.spk_dict_std[spk_id] = (
                                (1 - self.weight) * self.spk_dict_std[spk_id]
                                + self.weight * current_std
                            )

                            self.spk_dict_mean[spk_id].detach()
                            self.spk_dict_std[spk_id].detach()

                        speaker_mean = self.spk_dict_mean[spk_id].data
                        speaker_std = self.spk_dict_std[spk_id].data
                    else:
                        if spk_id in self.spk_dict_mean:
                            speaker_mean = self.spk_dict_mean[spk_id].data
                            speaker_std = self.spk_dict_std[spk_id].data
                        else:
                            speaker_mean = current_mean.data
                            speaker_std = current_std.data

                    x[snt_id] = (x[snt_id] - speaker_mean) / speaker_std

            if self.norm_type == "batch" or self.norm_type == "global":
                current_mean = torch.mean(torch.stack(current_means), dim=0)
                current_std = torch.mean(torch.stack(current_stds), dim=0)

                if self.norm_type == "batch":
                    x = (x - current_mean.data) / (current_std.data)

                if self.norm_type == "global":

                    if self.training:
                        if self.count == 0:
                            self.glob_mean = current_mean
                            self.glob_std = current_std

                        elif epoch < self.update_until_epoch:
                            if self.avg_factor is None:
                                self.weight = 1 / (self.count + 1)
                            else:
                                self.weight = self.avg_factor

                            self.glob_mean = (
                                1 - self.weight
                            ) * self.glob_mean + self.weight * current_mean

                            self.glob_std = (
                                1 - self.weight
                            ) * self.glob_std + self.weight * current_std

                        self.glob_mean.detach()
                        self.glob_std.detach()

                        self.count = self.count + 1

                    x = (x - self.glob_mean.data) / (self.glob_std.data)

            return x

        def _compute_current_stats(self, x):
            # Compute current mean
            if self.mean_norm:
                current_mean = torch.mean(x, dim=0).detach().data
            else:
                current_mean = torch.tensor([0.0], device=x.device)

            # Compute current std
            if self.std_norm:
                current_std = torch.std(x, dim=0).detach().data
            else:
                current_std = torch.tensor([1.0], device=x.device)

            # Improving numerical stability of std
            current_std = torch.max(
                current_std, self.eps * torch.ones_like(current_std)
            )

            return current_mean, current_std

    return dict(STFT=STFT, ISTFT=ISTFT, spectral_magnitude=spectral_magnitude,
                Filterbank=Filterbank, DCT=DCT, Deltas=Deltas, ContextWindow=ContextWindow,
                InputNormalization=InputNormalization)


# --------------------------------------------------------------------------------------------
# speechbrain/lobes/features.py
# --------------------------------------------------------------------------------------------
def lobes_page(torch, fp):
    STFT, spectral_magnitude, Filterbank = fp["STFT"], fp["spectral_magnitude"], fp["Filterbank"]
    DCT, Deltas, ContextWindow = fp["DCT"], fp["Deltas"], fp["ContextWindow"]

    class Fbank(torch.nn.Module):
        def __init__(
            self,
            deltas=False,
            context=False,
            requires_grad=False,
            sample_rate=16000,
            f_min=0,
            f_max=None,
            n_fft=400,
            n_mels=40,
            filter_shape="triangular",
            param_change_factor=1.0,
            param_rand_factor=0.0,
            left_frames=5,
            right_frames=5,
            win_length=25,
            hop_length=10,
        ):
            super().__init__()
            self.deltas = deltas
            self.context = context
            self.requires_grad = requires_grad

            if f_max is None:
                f_max = sample_rate / 2

            self.compute_STFT = STFT(
                sample_rate=sample_rate,
                n_fft=n_fft,
                win_length=win_length,
                hop_length=hop_length,
            )
            self.compute_fbanks = Filterbank(
                sample_rate=sample_rate,
                n_fft=n_fft,
                n_mels=n_mels,
                f_min=f_min,
                f_max=f_max,
                freeze=not requires_grad,
                filter_shape=filter_shape,
                param_change_factor=param_change_factor,
                param_rand_factor=param_rand_factor,
            )
            self.compute_deltas = Deltas(input_size=n_mels)
            self.context_window = ContextWindow(
                left_frames=left_frames, right_frames=right_frames,
            )

        def forward(self, wav):
            with torch.no_grad():

                STFT = self.compute_STFT(wav)
                mag = spectral_magnitude(STFT)
                fbanks = self.compute_fbanks(mag)

                if self.deltas:
                    delta1 = self.compute_deltas(fbanks)
                    delta2 = self.compute_deltas(delta1)
                    fbanks = torch.cat([fbanks, delta1, delta2], dim=2)

                if self.context:
                    fbanks = self.context_window(fbanks)

            return fbanks

    class MFCC(torch.nn.Module):
        def __init__(
            self,
            deltas=True,
            context=True,
            requires_grad=False,
            sample_rate=16000,
            f_min=0,
            f_max=None,
            n_fft=400,
            n_mels=23,
            n_mfcc=20,
            filter_shape="triangular",
            param_change_factor=1.0,
            param_rand_factor=0.0,
            left_frames=5,
            right_frames=5,
            win_length=25,
            hop_length=10,
        ):
            super().__init__()
            self.deltas = deltas
            self.context = context
            self.requires_grad = requires_grad

            if f_max is None:
                f_max = sample_rate / 2

            self.compute_STFT = STFT(
                sample_rate=sample_rate,
                n_fft=n_fft,
                win_length=win_length,
                hop_length=hop_length,
            )

            self.compute_fbanks = Filterbank(
                sample_rate=sample_rate,
                n_fft=n_fft,
                n_mels=n_mels,
                f_min=f_min,
                f_max=f_max,
                freeze=not requires_grad,
                filter_shape=filter_shape,
                param_change_factor=param_change_factor,
                param_rand_factor=param_rand_factor,
            )
            self.compute_dct = DCT(input_size=n_mels, n_out=n_mfcc)
            self.compute_deltas = Deltas(input_size=n_mfcc)
            self.context_window = ContextWindow(
                left_frames=left_frames, right_frames=right_frames,
            )

        def forward(self, wav):
            with torch.no_grad():
                STFT = self.compute_STFT(wav)
                mag = spectral_magnitude(STFT)
                fbanks = self.compute_fbanks(mag)
                mfccs = self.compute_dct(fbanks)

                if self.deltas:
                    delta1 = self.compute_deltas(mfccs)
                    delta2 = self.compute_deltas(delta1)
                    mfccs = torch.cat([mfccs, delta1, delta2], dim=2)

                if self.context:
                    mfccs = self.context_window(mfccs)

            return mfccs

    return dict(Fbank=Fbank, MFCC=MFCC)


# --------------------------------------------------------------------------------------------
# speechbrain/nnet/CNN.py
# --------------------------------------------------------------------------------------------
def cnn_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    class SincConv(nn.Module):
        def __init__(
            self,
            out_channels,
            kernel_size,
            input_shape=None,
            in_channels=None,
            stride=1,
            dilation=1,
            padding="same",
            padding_mode="reflect",
            sample_rate=16000,
            min_low_hz=50,
            min_band_hz=50,
        ):
            super().__init__()
            self.out_channels = out_channels
            self.kernel_size = kernel_size
            self.stride = stride
            self.dilation = dilation
            self.padding = padding
            self.padding_mode = padding_mode
            self.sample_rate = sample_rate
            self.min_low_hz = min_low_hz
            self.min_band_hz = min_band_hz

            # input shape inference
            if input_shape is None and in_channels is None:
                raise ValueError("Must provide one of input_shape or in_channels")

            if in_channels is None:
                in_channels = self._check_input_shape(input_shape)

            # Initialize Sinc filters
            self._init_sinc_conv()

        def forward(self, x):
            x = x.transpose(1, -1)
            self.device = x.device

            unsqueeze = x.ndim == 2
            if unsqueeze:
                x = x.unsqueeze(1)

            if self.padding == "same":
                x = self._manage_padding(
                    x, self.kernel_size, self.dilation, self.stride
                )

            elif self.padding == "causal":
                num_pad = (self.kernel_size - 1) * self.dilation
                x = F.pad(x, (num_pad, 0))

            elif self.padding == "valid":
                pass

            else:
                raise ValueError(
                    "Padding must be 'same', 'valid' or 'causal'. Got %s."
                    % (self.padding)
                )

            sinc_filters = self._get_sinc_filters()

            wx = F.conv1d(
                x,
                sinc_filters,
                stride=self.stride,
                padding=0,
                dilation=self.dilation,
            )

            if unsqueeze:
                wx = wx.squeeze(1)

            wx = wx.transpose(1, -1)

            return wx

        def _check_input_shape(self, shape):
            if len(shape) == 2:
                in_channels = 1
            elif len(shape) == 3:
                in_channels = 1
            else:
                raise ValueError(
                    "sincconv expects 2d or 3d inputs. Got " + str(len(shape))
                )

            # Kernel size must be odd
            if self.kernel_size % 2 == 0:
                raise ValueError(
                    "The field kernel size must be an odd number. Got %s."
                    % (self.kernel_size)
                )
            return in_channels

        def _get_sinc_filters(self,):
            # Computing the low frequencies of the filters
            low = self.min_low_hz + torch.abs(self.low_hz_)

            # Setting minimum band and minimum freq
            high = torch.clamp(
                low + self.min_band_hz + torch.abs(self.band_hz_),
                self.min_low_hz,
                self.sample_rate / 2,
            )
            band = (high - low)[:, 0]

            # Passing from n_ to the corresponding f_times_t domain
            self.n_ = self.n_.to(self.device)
            self.window_ = self.window_.to(self.device)
            f_times_t_low = torch.matmul(low, self.n_)
            f_times_t_high = torch.matmul(high, self.n_)

            # Left part of the filters.
            band_pass_left = (
                (torch.sin(f_times_t_high) - torch.sin(f_times_t_low))
                / (self.n_ / 2)
            ) * self.window_

            # Central element of the filter
            band_pass_center = 2 * band.view(-1, 1)

            # Right part of the filter (sinc filters are symmetric)
            band_pass_right = torch.flip(band_pass_left, dims=[1])

            # Combining left, central, and right part of the filter
            band_pass = torch.cat(
                [band_pass_left, band_pass_center, band_pass_right], dim=1
            )

            # Amplitude normalization
            band_pass = band_pass / (2 * band[:, None])

            # Setting up the filter coefficients
            filters = band_pass.view(self.out_channels, 1, self.kernel_size)

            return filters

        def _init_sinc_conv(self):
            # Initialize filterbanks such that they are equally spaced in Mel scale
            high_hz = self.sample_rate / 2 - (self.min_low_hz + self.min_band_hz)

            mel = torch.linspace(
                self._to_mel(self.min_low_hz),
                self._to_mel(high_hz),
                self.out_channels + 1,
            )

            hz = self._to_hz(mel)

            # Filter lower frequency and bands
            self.low_hz_ = hz[:-1].unsqueeze(1)
            self.band_hz_ = (hz[1:] - hz[:-1]).unsqueeze(1)

            # Maiking freq and bands learnable
            self.low_hz_ = nn.Parameter(self.low_hz_)
            self.band_hz_ = nn.Parameter(self.band_hz_)

            # Hamming window
            n_lin = torch.linspace(
                0, (self.kernel_size / 2) - 1, steps=int((self.kernel_size / 2))
            )
            self.window_ = 0.54 - 0.46 * torch.cos(
                2 * math.pi * n_lin / self.kernel_size
            )

            # Time axis  (only half is needed due to symmetry)
            n = (self.kernel_size - 1) / 2.0
            self.n_ = (
                2 * math.pi * torch.arange(-n, 0).view(1, -1) / self.sample_rate
            )

        def _to_mel(self, hz):
            return 2595 * np.log10(1 + hz / 700)

        def _to_hz(self, mel):
            return 700 * (10 ** (mel / 2595) - 1)

        def _manage_padding(
            self, x, kernel_size: int, dilation: int, stride: int,
        ):
            # Detecting input shape
            L_in = x.shape[-1]

            # Time padding
            padding = get_padding_elem(L_in, stride, kernel_size, dilation)

            # Applying padding
            x = F.pad(x, padding, mode=self.padding_mode)

            return x

    class Conv1d(nn.Module):
        def __init__(
            self,
            out_channels,
            kernel_size,
            input_shape=None,
            in_channels=None,
            stride=1,
            dilation=1,
            padding="same",
            groups=1,
            bias=True,
            padding_mode="reflect",
            skip_transpose=False,
        ):
            super().__init__()
            self.kernel_size = kernel_size
            self.stride = stride
            self.dilation = dilation
            self.padding = padding
            self.padding_mode = padding_mode
            self.unsqueeze = False
            self.skip_transpose = skip_transpose

            if input_shape is None and in_channels is None:
                raise ValueError("Must provide one of input_shape or in_channels")

            if in_channels is None:
                in_channels = self._check_input_shape(input_shape)

            self.conv = nn.Conv1d(
                in_channels,
                out_channels,
                self.kernel_size,
                stride=self.stride,
                dilation=self.dilation,
                padding=0,
                groups=groups,
                bias=bias,
            )

        def forward(self, x):
            if not self.skip_transpose:
                x = x.transpose(1, -1)

            if self.unsqueeze:
                x = x.unsqueeze(1)

            if self.padding == "same":
                x = self._manage_padding(
                    x, self.kernel_size, self.dilation, self.stride
                )

            elif self.padding == "causal":
                num_pad = (self.kernel_size - 1) * self.dilation
                x = F.pad(x, (num_pad, 0))

            elif self.padding == "valid":
                pass

            else:
                raise ValueError(
                    "Padding must be 'same', 'valid' or 'causal'. Got %s."
                    % (self.padding)
                )

            wx = self.conv(x)

            if self.unsqueeze:
                wx = wx.squeeze(1)

            if not self.skip_transpose:
                wx = wx.transpose(1, -1)

            return wx

        def _manage_padding(
            self, x, kernel_size: int, dilation: int, stride: int,
        ):
            # Detecting input shape
            L_in = x.shape[-1]

            # Time padding
            padding = get_padding_elem(L_in, stride, kernel_size, dilation)

            # Applying padding
            x = F.pad(x, padding, mode=self.padding_mode)

            return x

        def _check_input_shape(self, shape):
            if len(shape) == 2:
                self.unsqueeze = True
                in_channels = 1
            elif self.skip_transpose:
                in_channels = shape[1]
            elif len(shape) == 3:
                in_channels = shape[2]
            else:
                raise ValueError(
                    "conv1d expects 2d, 3d inputs. Got " + str(len(shape))
                )

            # Kernel size must be odd
            if self.kernel_size % 2 == 0:
                raise ValueError(
                    "The field kernel size must be an odd number. Got %s."
                    % (self.kernel_size)
                )
            return in_channels

    def get_padding_elem(L_in: int, stride: int, kernel_size: int, dilation: int):
        if stride > 1:
            n_steps = math.ceil(((L_in - kernel_size * dilation) / stride) + 1)  # noqa: F841
            L_out = stride * (n_steps - 1) + kernel_size * dilation  # noqa: F841
            padding = [kernel_size // 2, kernel_size // 2]

        else:
            L_out = (L_in - dilation * (kernel_size - 1) - 1) / stride + 1
            L_out = int(L_out)

            padding = [(L_in - L_out) // 2, (L_in - L_out) // 2]
        return padding

    return dict(SincConv=SincConv, Conv1d=Conv1d, get_padding_elem=get_padding_elem)


# --------------------------------------------------------------------------------------------
# speechbrain/dataio/dataio.py (length_to_mask) and speechbrain/nnet/losses.py
# --------------------------------------------------------------------------------------------
def losses_page(torch):
    nn = torch.nn
    F = torch.nn.functional

    def length_to_mask(length, max_len=None, dtype=None, device=None):
        assert len(length.shape) == 1

        if max_len is None:
            max_len = length.max().long().item()  # using arange to generate mask
        mask = torch.arange(
            max_len, device=length.device, dtype=length.dtype
        ).expand(len(length), max_len) < length.unsqueeze(1)

        if dtype is None:
            dtype = length.dtype

        if device is None:
            device = length.device

        mask = torch.as_tensor(mask, dtype=dtype, device=device)
        return mask

    class PitWrapper(nn.Module):
        def __init__(self, base_loss):
            super(PitWrapper, self).__init__()
            self.base_loss = base_loss

        def _fast_pit(self, loss_mat):
            loss = None
            assigned_perm = None
            for p in permutations(range(loss_mat.shape[0])):
                c_loss = loss_mat[range(loss_mat.shape[0]), p].mean()
                if loss is None or loss > c_loss:
                    loss = c_loss
                    assigned_perm = p
            return loss, assigned_perm

        def _opt_perm_loss(self, pred, target):
            n_sources = pred.size(-1)

            pred = pred.unsqueeze(-2).repeat(
                *[1 for x in range(len(pred.shape) - 1)], n_sources, 1
            )
            target = target.unsqueeze(-1).repeat(
                1, *[1 for x in range(len(target.shape) - 1)], n_sources
            )

            loss_mat = self.base_loss(pred, target)
            assert (
                len(loss_mat.shape) >= 2
            ), "Base loss should not perform any reduction operation"
            mean_over = [x for x in range(len(loss_mat.shape))]
            loss_mat = loss_mat.mean(dim=mean_over[:-2])

            return self._fast_pit(loss_mat)

        def reorder_tensor(self, tensor, p):
            reordered = torch.zeros_like(tensor, device=tensor.device)
            for b in range(tensor.shape[0]):
                reordered[b] = tensor[b][..., p[b]].clone()
            return reordered

        def forward(self, preds, targets):
            losses = []
            perms = []
            for pred, label in zip(preds, targets):
                loss, p = self._opt_perm_loss(pred, label)
                perms.append(p)
                losses.append(loss)
            loss = torch.stack(losses)
            return loss, perms

    def ctc_loss(
        log_probs, targets, input_lens, target_lens, blank_index, reduction="mean"
    ):
        input_lens = (input_lens * log_probs.shape[1]).round().int()
        target_lens = (target_lens * targets.shape[1]).round().int()
        log_probs = log_probs.transpose(0, 1)

        if reduction == "batchmean":
            reduction_loss = "sum"
        elif reduction == "batch":
            reduction_loss = "none"
        else:
            reduction_loss = reduction
        loss = torch.nn.functional.ctc_loss(
            log_probs,
            targets,
            input_lens,
            target_lens,
            blank_index,
            zero_infinity=True,
            reduction=reduction_loss,
        )

        if reduction == "batchmean":
            return loss / targets.shape[0]
        elif reduction == "batch":
            N = loss.size(0)
            return loss.view(N, -1).sum(1) / target_lens.view(N, -1).sum(1)
        else:
            return loss

    def l1_loss(
        predictions, targets, length=None, allowed_len_diff=3, reduction="mean"
    ):
        predictions, targets = truncate(predictions, targets, allowed_len_diff)
        loss = functools.partial(torch.nn.functional.l1_loss, reduction="none")
        return compute_masked_loss(
            loss, predictions, targets, length, reduction=reduction
        )

    def mse_loss(
        predictions, targets, length=None, allowed_len_diff=3, reduction="mean"
    ):
        predictions, targets = truncate(predictions, targets, allowed_len_diff)
        loss = functools.partial(torch.nn.functional.mse_loss, reduction="none")
        return compute_masked_loss(
            loss, predictions, targets, length, reduction=reduction
        )

    def nll_loss(
        log_probabilities,
        targets,
        length=None,
        label_smoothing=0.0,
        allowed_len_diff=3,
        reduction="mean",
    ):
        if len(log_probabilities.shape) == 3:
            log_probabilities, targets = truncate(
                log_probabilities, targets, allowed_len_diff
            )
            log_probabilities = log_probabilities.transpose(1, -1)

        # Pass the loss function but apply reduction="none" first
        loss = functools.partial(torch.nn.functional.nll_loss, reduction="none")
        return compute_masked_loss(
            loss,
            log_probabilities,
            targets.long(),
            length,
            label_smoothing=label_smoothing,
            reduction=reduction,
        )

    def truncate(predictions, targets, allowed_len_diff=3):
        len_diff = predictions.shape[1] - targets.shape[1]
        if len_diff == 0:
            return predictions, targets
        elif abs(len_diff) > allowed_len_diff:
            raise ValueError(
                "Predictions and targets should be same length, but got %s and "
                "%s respectively." % (predictions.shape[1], targets.shape[1])
            )
        elif len_diff < 0:
            return predictions, targets[:, : predictions.shape[1]]
        else:
            return predictions[:, : targets.shape[1]], targets

    def compute_masked_loss(
        loss_fn,
        predictions,
        targets,
        length=None,
        label_smoothing=0.0,
        reduction="mean",
    ):
        mask = torch.ones_like(targets)
        if length is not None:
            length_mask = length_to_mask(
                length * targets.shape[1], max_len=targets.shape[1],
            )

            # Handle any dimensionality of input
            while len(length_mask.shape) < len(mask.shape):
                length_mask = length_mask.unsqueeze(-1)
            length_mask = length_mask.type(mask.dtype)
            mask *= length_mask

        # Compute, then reduce loss
        loss = loss_fn(predictions, targets) * mask
        N = loss.size(0)
        if reduction == "mean":
            loss = loss.sum() / torch.sum(mask)
        elif reduction == "batchmean":
            loss = loss.sum() / N
        elif reduction == "batch":
            loss = loss.reshape(N, -1).sum(1) / mask.reshape(N, -1).sum(1)

        if label_smoothing == 0:
            return loss
        else:
            loss_reg = torch.mean(predictions, dim=1) * mask
            if reduction == "mean":
                loss_reg = torch.sum(loss_reg) / torch.sum(mask)
            elif reduction == "batchmean":
                loss_reg = torch.sum(loss_reg) / targets.shape[0]
            elif reduction == "batch":
                loss_reg = loss_reg.sum(1) / mask.sum(1)

            return -label_smoothing * loss_reg + (1 - label_smoothing) * loss

    def cal_si_snr(source, estimate_source):
        EPS = 1e-8
        assert source.size() == estimate_source.size()
        device = estimate_source.device.type

        source_lengths = torch.tensor(
            [estimate_source.shape[0]] * estimate_source.shape[1], device=device
        )
        mask = get_mask(source, source_lengths)
        estimate_source *= mask

        num_samples = (
            source_lengths.contiguous().reshape(1, -1, 1).float()
        )  # [1, B, 1]
        mean_target = torch.sum(source, dim=0, keepdim=True) / num_samples
        mean_estimate = (
            torch.sum(estimate_source, dim=0, keepdim=True) / num_samples
        )
        zero_mean_target = source - mean_target
        zero_mean_estimate = estimate_source - mean_estimate
        # mask padding position along T
        zero_mean_target *= mask
        zero_mean_estimate *= mask

        # Step 2. SI-SNR with PIT
        # reshape to use broadcast
        s_target = zero_mean_target  # [T, B, C]
        s_estimate = zero_mean_estimate  # [T, B, C]
        # s_target = <s', s>s / ||s||^2
        dot = torch.sum(s_estimate * s_target, dim=0, keepdim=True)  # [1, B, C]
        s_target_energy = (
            torch.sum(s_target ** 2, dim=0, keepdim=True) + EPS
        )  # [1, B, C]
        proj = dot * s_target / s_target_energy  # [T, B, C]
        # e_noise = s' - s_target
        e_noise = s_estimate - proj  # [T, B, C]
        # SI-SNR = 10 * log_10(||s_target||^2 / ||e_noise||^2)
        si_snr_beforelog = torch.sum(proj ** 2, dim=0) / (
            torch.sum(e_noise ** 2, dim=0) + EPS
        )
        si_snr = 10 * torch.log10(si_snr_beforelog + EPS)  # [B, C]

        return -si_snr.unsqueeze(0)

    def get_mask(source, source_lengths):
        T, B, _ = source.size()
        mask = source.new_ones((T, B, 1))
        for i in range(B):
            mask[source_lengths[i] :, i, :] = 0
        return mask

    class AngularMargin(nn.Module):
        def __init__(self, margin=0.0, scale=1.0):
            super(AngularMargin, self).__init__()
            self.margin = margin
            self.scale = scale

        def forward(self, outputs, targets):
            outputs = outputs - self.margin * targets
            return self.scale * outputs

    class AdditiveAngularMargin(AngularMargin):
        def __init__(self, margin=0.0, scale=1.0, easy_margin=False):
            super(AdditiveAngularMargin, self).__init__(margin, scale)
            self.easy_margin = easy_margin

            self.cos_m = math.cos(self.margin)
            self.sin_m = math.sin(self.margin)
            self.th = math.cos(math.pi - self.margin)
            self.mm = math.sin(math.pi - self.margin) * self.margin

        def forward(self, outputs, targets):
            cosine = outputs.float()
            sine = torch.sqrt(1.0 - torch.pow(cosine, 2))
            phi = cosine * self.cos_m - sine * self.sin_m  # cos(theta + m)
            if self.easy_margin:
                phi = torch.where(cosine > 0, phi, cosine)
            else:
                phi = torch.where(cosine > self.th, phi, cosine - self.mm)
            outputs = (targets * phi) + ((1.0 - targets) * cosine)
            return self.scale * outputs

    class LogSoftmaxWrapper(nn.Module):
        def __init__(self, loss_fn):
            super(LogSoftmaxWrapper, self).__init__()
            self.loss_fn = loss_fn
            self.criterion = torch.nn.KLDivLoss(reduction="sum")

        def forward(self, outputs, targets, length=None):
            outputs = outputs.squeeze(1)
            targets = targets.squeeze(1)
            targets = F.one_hot(targets.long(), outputs.shape[1]).float()
            try:
                predictions = self.loss_fn(outputs, targets)
            except TypeError:
                predictions = self.loss_fn(outputs)

            predictions = F.log_softmax(predictions, dim=1)
            loss = self.criterion(predictions, targets) / targets.sum()
            return loss

    return dict(length_to_mask=length_to_mask, PitWrapper=PitWrapper, ctc_loss=ctc_loss,
                l1_loss=l1_loss, mse_loss=mse_loss, nll_loss=nll_loss, truncate=truncate,
                compute_masked_loss=compute_masked_loss, cal_si_snr=cal_si_snr,
                get_mask=get_mask, AngularMargin=AngularMargin,
                AdditiveAngularMargin=AdditiveAngularMargin,
                LogSoftmaxWrapper=LogSoftmaxWrapper)


# --------------------------------------------------------------------------------------------
# speechbrain/nnet/pooling.py and speechbrain/nnet/normalization.py
# --------------------------------------------------------------------------------------------
def pooling_norm_page(torch):
    nn = torch.nn

    class Pooling1d(nn.Module):
        def __init__(
            self,
            pool_type,
            kernel_size,
            input_dims=3,
            pool_axis=1,
            ceil_mode=False,
            padding=0,
            dilation=1,
            stride=None,
        ):
            super().__init__()
            self.pool_axis = pool_axis

            if stride is None:
                stride = kernel_size

            if pool_type == "avg":
                if input_dims == 3:
                    self.pool_layer = torch.nn.AvgPool1d(
                        kernel_size,
                        stride=stride,
                        padding=padding,
                        ceil_mode=ceil_mode,
                    )
                elif input_dims == 4:
                    self.pool_layer = torch.nn.AvgPool2d(
                        (1, kernel_size),
                        stride=(1, stride),
                        padding=(0, padding),
                        ceil_mode=ceil_mode,
                    )
                else:
                    raise ValueError("input_dims must be 3 or 4")

            elif pool_type == "max":
                if input_dims == 3:
                    self.pool_layer = torch.nn.MaxPool1d(
                        kernel_size,
                        stride=stride,
                        padding=padding,
                        dilation=dilation,
                        ceil_mode=ceil_mode,
                    )
                elif input_dims == 4:
                    self.pool_layer = torch.nn.MaxPool2d(
                        (1, kernel_size),
                        stride=(1, stride),
                        padding=(0, padding),
                        dilation=(1, dilation),
                        ceil_mode=ceil_mode,
                    )
                else:
                    raise ValueError("input_dims must be 3 or 4")

            else:
                raise ValueError("pool_type must be 'avg' or 'max'")

        def forward(self, x):
            # Put the pooling axes as the last dimension for torch.nn.pool
            x = x.transpose(-1, self.pool_axis)

            # Apply pooling
            x = self.pool_layer(x)

            # Recover input shape
            x = x.transpose(-1, self.pool_axis)

            return x

    class StatisticsPooling(nn.Module):
        def __init__(self, return_mean=True, return_std=True):
            super().__init__()

            # Small value for GaussNoise
            self.eps = 1e-5
            self.return_mean = return_mean
            self.return_std = return_std
            if not (self.return_mean or self.return_std):
                raise ValueError(
                    "both of statistics are equal to False \n"
                    "consider enabling mean and/or std statistic pooling"
                )

        def forward(self, x, lengths=None):
            if lengths is None:
                if self.return_mean:
                    mean = x.mean(dim=1)
                if self.return_std:
                    std = x.std(dim=1)
            else:
                mean = []
                std = []
                for snt_id in range(x.shape[0]):
                    # Avoiding padded time steps
                    actual_size = int(torch.round(lengths[snt_id] * x.shape[1]))

                    # computing statistics
                    if self.return_mean:
                        mean.append(
                            torch.mean(x[snt_id, 0:actual_size, ...], dim=0)
                        )
                    if self.return_std:
                        std.append(torch.std(x[snt_id, 0:actual_size, ...], dim=0))
                if self.return_mean:
                    mean = torch.stack(mean)
                if self.return_std:
                    std = torch.stack(std)

            if self.return_mean:
                gnoise = self._get_gauss_noise(mean.size(), device=mean.device)
                gnoise = gnoise
                mean += gnoise
            if self.return_std:
                std = std + self.eps

            # Append mean and std of the batch
            if self.return_mean and self.return_std:
                pooled_stats = torch.cat((mean, std), dim=1)
                pooled_stats = pooled_stats.unsqueeze(1)
            elif self.return_mean:
                pooled_stats = mean.unsqueeze(1)
            elif self.return_std:
                pooled_stats = std.unsqueeze(1)

            return pooled_stats

        def _get_gauss_noise(self, shape_of_tensor, device="cpu"):
            gnoise = torch.randn(shape_of_tensor, device=device)
            gnoise -= torch.min(gnoise)
            gnoise /= torch.max(gnoise)
            gnoise = self.eps * ((1 - 9) * gnoise + 9)

            return gnoise

    class BatchNorm1d(nn.Module):
        def __init__(
            self,
            input_shape=None,
            input_size=None,
            eps=1e-05,
            momentum=0.1,
            affine=True,
            track_running_stats=True,
            combine_batch_time=False,
            skip_transpose=False,
        ):
            super().__init__()
            self.combine_batch_time = combine_batch_time
            self.skip_transpose = skip_transpose

            if input_size is None and skip_transpose:
                input_size = input_shape[1]
            elif input_size is None:
                input_size = input_shape[-1]

            self.norm = nn.BatchNorm1d(
                input_size,
                eps=eps,
                momentum=momentum,
                affine=affine,
                track_running_stats=track_running_stats,
            )

        def forward(self, x):
            shape_or = x.shape
            if self.combine_batch_time:
                if x.ndim == 3:
                    x = x.reshape(shape_or[0] * shape_or[1], shape_or[2])
                else:
                    x = x.reshape(
                        shape_or[0] * shape_or[1], shape_or[3], shape_or[2]
                    )

            elif not self.skip_transpose:
                x = x.transpose(-1, 1)

            x_n = self.norm(x)

            if self.combine_batch_time:
                x_n = x_n.reshape(shape_or)
            elif not self.skip_transpose:
                x_n = x_n.transpose(1, -1)

            return x_n

    class LayerNorm(nn.Module):
        def __init__(
            self,
            input_size=None,
            input_shape=None,
            eps=1e-05,
            elementwise_affine=True,
        ):
            super().__init__()
            self.eps = eps
            self.elementwise_affine = elementwise_affine

            if input_shape is not None:
                input_size = input_shape[2:]

            self.norm = torch.nn.LayerNorm(
                input_size,
                eps=self.eps,
                elementwise_affine=self.elementwise_affine,
            )

        def forward(self, x):
            return self.norm(x)

    class ExponentialMovingAverage(nn.Module):
        def __init__(
            self,
            input_size: int,
            coeff_init: float = 0.04,
            per_channel: bool = False,
            trainable: bool = True,
            skip_transpose: bool = False,
        ):
            super().__init__()
            self._coeff_init = coeff_init
            self._per_channel = per_channel
            self.skip_transpose = skip_transpose
            self.trainable = trainable
            weights = (
                torch.ones(
                    input_size,
                )
                if self._per_channel
                else torch.ones(
                    1,
                )
            )
            self._weights = nn.Parameter(
                weights * self._coeff_init, requires_grad=trainable
            )

        def forward(self, x):
            if not self.skip_transpose:
                x = x.transpose(1, -1)
            w = torch.clamp(self._weights, min=0.0, max=1.0)
            initial_state = x[:, :, 0]

            def scan(init_state, x, w):
                """Loops and accumulates."""
                x = x.permute(2, 0, 1)
                acc = init_state
                results = []
                for ix in range(x.shape[0]):
                    acc = (w * x[ix]) + ((1.0 - w) * acc)
                    results.append(acc.unsqueeze(0))
                results = torch.cat(results, dim=0)
                results = results.permute(1, 2, 0)
                return results

            output = scan(initial_state, x, w)
            if not self.skip_transpose:
                output = output.transpose(1, -1)
            return output

    class PCEN(nn.Module):
        def __init__(
            self,
            input_size,
            alpha: float = 0.96,
            smooth_coef: float = 0.04,
            delta: float = 2.0,
            root: float = 2.0,
            floor: float = 1e-12,
            trainable: bool = True,
            per_channel_smooth_coef: bool = True,
            skip_transpose: bool = False,
        ):
            super().__init__()
            self._smooth_coef = smooth_coef
            self._floor = floor
            self._per_channel_smooth_coef = per_channel_smooth_coef
            self.skip_transpose = skip_transpose
            self.alpha = nn.Parameter(
                torch.ones(input_size) * alpha, requires_grad=trainable
            )
            self.delta = nn.Parameter(
                torch.ones(input_size) * delta, requires_grad=trainable
            )
            self.root = nn.Parameter(
                torch.ones(input_size) * root, requires_grad=trainable
            )

            self.ema = ExponentialMovingAverage(
                input_size,
                coeff_init=self._smooth_coef,
                per_channel=self._per_channel_smooth_coef,
                skip_transpose=True,
                trainable=trainable,
            )

        def forward(self, x):
            if not self.skip_transpose:
                x = x.transpose(1, -1)
            alpha = torch.min(
                self.alpha, torch.tensor(1.0, dtype=x.dtype, device=x.device)
            )
            root = torch.max(
                self.root, torch.tensor(1.0, dtype=x.dtype, device=x.device)
            )
            ema_smoother = self.ema(x)
            one_over_root = 1.0 / root
            output = (
                x / (self._floor + ema_smoother) ** alpha.view(1, -1, 1)
                + self.delta.view(1, -1, 1)
            ) ** one_over_root.view(1, -1, 1) - self.delta.view(
                1, -1, 1
            ) ** one_over_root.view(
                1, -1, 1
            )
            if not self.skip_transpose:
                output = output.transpose(1, -1)
            return output

    return dict(Pooling1d=Pooling1d, StatisticsPooling=StatisticsPooling,
                BatchNorm1d=BatchNorm1d, LayerNorm=LayerNorm,
                ExponentialMovingAverage=ExponentialMovingAverage, PCEN=PCEN)


# --------------------------------------------------------------------------------------------
# speechbrain/decoders/ctc.py
# --------------------------------------------------------------------------------------------
def ctc_decode_page(torch):
    def filter_ctc_output(string_pred, blank_id=-1):
        if isinstance(string_pred, list):
            # Filter the repetitions
            string_out = [i[0] for i in groupby(string_pred)]

            # Filter the blank symbol
            string_out = list(filter(lambda elem: elem != blank_id, string_out))
        else:
            raise ValueError("filter_ctc_out can only filter python lists")
        return string_out

    def ctc_greedy_decode(probabilities, seq_lens, blank_id=-1):
        if isinstance(blank_id, int) and blank_id < 0:
            blank_id = probabilities.shape[-1] + blank_id
        batch_max_len = probabilities.shape[1]
        batch_outputs = []
        for seq, seq_len in zip(probabilities, seq_lens):
            actual_size = int(torch.round(seq_len * batch_max_len))
            scores, predictions = torch.max(seq.narrow(0, 0, actual_size), dim=1)
            out = filter_ctc_output(predictions.tolist(), blank_id=blank_id)
            batch_outputs.append(out)
        return batch_outputs

    def length_to_mask(length, max_len=None, dtype=None, device=None):
        assert len(length.shape) == 1

        if max_len is None:
            max_len = length.max().long().item()  # using arange to generate mask
        mask = torch.arange(
            max_len, device=length.device, dtype=length.dtype
        ).expand(len(length), max_len) < length.unsqueeze(1)

        if dtype is None:
            dtype = length.dtype

        if device is None:
            device = length.device

        mask = torch.as_tensor(mask, dtype=dtype, device=device)
        return mask

    class CTCPrefixScore:
        def __init__(
            self, x, enc_lens, blank_index, eos_index, ctc_window_size=0,
        ):
            self.blank_index = blank_index
            self.eos_index = eos_index
            self.batch_size = x.size(0)
            self.max_enc_len = x.size(1)
            self.vocab_size = x.size(-1)
            self.device = x.device
            self.minus_inf = -1e20
            self.last_frame_index = enc_lens - 1
            self.ctc_window_size = ctc_window_size
            self.prefix_length = 0

            # mask frames > enc_lens
            mask = 1 - length_to_mask(enc_lens)
            mask = mask.unsqueeze(-1).expand(-1, -1, x.size(-1)).eq(1)
            x.masked_fill_(mask, self.minus_inf)
            x[:, :, 0] = x[:, :, 0].masked_fill_(mask[:, :, 0], 0)

            # dim=0: xnb, nonblank posteriors, dim=1: xb, blank posteriors
            xnb = x.transpose(0, 1)
            xb = (
                xnb[:, :, self.blank_index]
                .unsqueeze(2)
                .expand(-1, -1, self.vocab_size)
            )

            # (2, L, batch_size * beam_size, vocab_size)
            self.x = torch.stack([xnb, xb])

            # indices of batch.
            self.batch_index = torch.arange(self.batch_size, device=self.device)

        @torch.no_grad()
        def forward_step(self, inp_tokens, states, candidates=None, attn=None):
            n_bh = inp_tokens.size(0)
            beam_size = n_bh // self.batch_size
            last_char = inp_tokens
            self.prefix_length += 1
            self.num_candidates = (
                self.vocab_size if candidates is None else candidates.size(-1)
            )
            if states is None:
                # r_prev: (L, 2, batch_size * beam_size)
                r_prev = torch.full(
                    (self.max_enc_len, 2, self.batch_size, beam_size),
                    self.minus_inf,
                    device=self.device,
                )

                # Accumulate blank posteriors at each step
                r_prev[:, 1] = torch.cumsum(
                    self.x[0, :, :, self.blank_index], 0
                ).unsqueeze(2)
                r_prev = r_prev.view(-1, 2, n_bh)
                psi_prev = torch.full(
                    (n_bh, self.vocab_size), 0.0, device=self.device,
                )
            else:
                r_prev, psi_prev = states

            # for partial search
            if candidates is not None:
                # The first index of each candidate.
                cand_offset = self.batch_index * self.vocab_size
                scoring_table = torch.full(
                    (n_bh, self.vocab_size),
                    -1,
                    dtype=torch.long,
                    device=self.device,
                )
                # Assign indices of candidates to their positions in the table
                col_index = torch.arange(n_bh, device=self.device).unsqueeze(1)
                scoring_table[col_index, candidates] = torch.arange(
                    self.num_candidates, device=self.device
                )
                # Select candidates indices for scoring
                scoring_index = (
                    candidates
                    + cand_offset.unsqueeze(1).repeat(1, beam_size).view(-1, 1)
                ).view(-1)
                x_inflate = torch.index_select(
                    self.x.view(2, -1, self.batch_size * self.vocab_size),
                    2,
                    scoring_index,
                ).view(2, -1, n_bh, self.num_candidates)
            # for full search
            else:
                scoring_table = None
                x_inflate = (
                    self.x.unsqueeze(3)
                    .repeat(1, 1, 1, beam_size, 1)
                    .view(2, -1, n_bh, self.num_candidates)
                )

            # Prepare forward probs
            r = torch.full(
                (self.max_enc_len, 2, n_bh, self.num_candidates,),
                self.minus_inf,
                device=self.device,
            )
            r.fill_(self.minus_inf)

            # (Alg.2-6)
            if self.prefix_length == 0:
                r[0, 0] = x_inflate[0, 0]
            # (Alg.2-10): phi = prev_nonblank + prev_blank = r_t-1^nb(g) + r_t-1^b(g)
            r_sum = torch.logsumexp(r_prev, 1)
            phi = r_sum.unsqueeze(2).repeat(1, 1, self.num_candidates)

            # (Alg.2-10): if last token of prefix g in candidates, phi = prev_b + 0
            if candidates is not None:
                for i in range(n_bh):
                    pos = scoring_table[i, last_char[i]]
                    if pos != -1:
                        phi[:, i, pos] = r_prev[:, 1, i]
            else:
                for i in range(n_bh):
                    phi[:, i, last_char[i]] = r_prev[:, 1, i]

            # Start, end frames for scoring (|g| < |h|).
            # Scoring based on attn peak if ctc_window_size > 0
            if self.ctc_window_size == 0 or attn is None:
                start = max(1, self.prefix_length)
                end = self.max_enc_len
            else:
                _, attn_peak = torch.max(attn, dim=1)
                max_frame = torch.max(attn_peak).item() + self.ctc_window_size
                min_frame = torch.min(attn_peak).item() - self.ctc_window_size
                start = max(max(1, self.prefix_length), int(min_frame))
                end = min(self.max_enc_len, int(max_frame))

            # Compute forward prob log(r_t^nb(h)) and log(r_t^b(h)):
            for t in range(start, end):
                # (Alg.2-11): dim=0, p(h|cur step is nonblank) = [p(prev step=y) + phi] * p(c)
                rnb_prev = r[t - 1, 0]
                # (Alg.2-12): dim=1, p(h|cur step is blank) = [p(prev step is blank)
                # + p(prev step is nonblank)] * p(blank)
                rb_prev = r[t - 1, 1]
                r_ = torch.stack([rnb_prev, phi[t - 1], rnb_prev, rb_prev]).view(
                    2, 2, n_bh, self.num_candidates
                )
                r[t] = torch.logsumexp(r_, 1) + x_inflate[:, t]

            # Compute the predix prob, psi
            psi_init = r[start - 1, 0].unsqueeze(0)
            # phi is prob at t-1 step, shift one frame and add it to the current prob p(c)
            phix = torch.cat((phi[0].unsqueeze(0), phi[:-1]), dim=0) + x_inflate[0]
            # (Alg.2-13): psi = psi + phi * p(c)
            if candidates is not None:
                psi = torch.full(
                    (n_bh, self.vocab_size), self.minus_inf, device=self.device,
                )
                psi_ = torch.logsumexp(
                    torch.cat((phix[start:end], psi_init), dim=0), dim=0
                )
                # only assign prob to candidates
                for i in range(n_bh):
                    psi[i, candidates[i]] = psi_[i]
            else:
                psi = torch.logsumexp(
                    torch.cat((phix[start:end], psi_init), dim=0), dim=0
                )

            # (Alg.2-3): if c = <eos>, psi = log(r_T^n(g) + r_T^b(g)), where T is the length of max frames
            for i in range(n_bh):
                psi[i, self.eos_index] = r_sum[
                    self.last_frame_index[i // beam_size], i
                ]

            # Exclude blank probs for joint scoring
            psi[:, self.blank_index] = self.minus_inf

            return psi - psi_prev, (r, psi, scoring_table)

        def permute_mem(self, memory, index):
            r, psi, scoring_table = memory

            beam_size = index.size(1)
            n_bh = self.batch_size * beam_size

            # The first index of each batch.
            beam_offset = self.batch_index * beam_size
            # The index of top-K vocab came from in (t-1) timesteps at batch * beam * vocab dimension.
            cand_index = (
                index + beam_offset.unsqueeze(1).expand_as(index) * self.vocab_size
            ).view(n_bh)
            # synchronize forward prob
            psi = torch.index_select(psi.view(-1), dim=0, index=cand_index)
            psi = (
                psi.view(-1, 1)
                .repeat(1, self.vocab_size)
                .view(n_bh, self.vocab_size)
            )
            # The index of top-K vocab came from in (t-1) timesteps at batch * beam dimension.
            hyp_index = (
                torch.div(index, self.vocab_size, rounding_mode="floor")
                + beam_offset.unsqueeze(1).expand_as(index)
            ).view(n_bh)
            # synchronize ctc states
            if scoring_table is not None:
                selected_vocab = (index % self.vocab_size).view(-1)
                score_index = scoring_table[hyp_index, selected_vocab]
                score_index[score_index == -1] = 0
                cand_index = score_index + hyp_index * self.num_candidates

            r = torch.index_select(
                r.view(-1, 2, n_bh * self.num_candidates), dim=-1, index=cand_index,
            )
            r = r.view(-1, 2, n_bh)

            return r, psi

    return dict(filter_ctc_output=filter_ctc_output, ctc_greedy_decode=ctc_greedy_decode,
                CTCPrefixScore=CTCPrefixScore)


# ============================================================================================
# Runs (each returns plain NumPy / Python results, so Lucid and PyTorch can be compared)
# ============================================================================================
def _np(t):
    return t.detach().cpu().numpy()


def _wave(n=64, b=2, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 1000.0
    sig = np.stack([np.sin(2 * np.pi * 110 * t + k) + 0.3 * rng.standard_normal(n) for k in range(b)])
    return sig.astype(np.float32)


def run_stft(torch):
    fp = features_page(torch)
    wav = torch.tensor(_wave())
    stft = fp["STFT"](sample_rate=1000, win_length=12, hop_length=4, n_fft=16)
    X = stft(wav)
    istft = fp["ISTFT"](sample_rate=1000, win_length=12, hop_length=4, n_fft=16)
    y = istft(X, sig_length=wav.shape[1])
    # multi-channel (batch, time, channels)
    Xmc = stft(wav.t().unsqueeze(0))
    mag = fp["spectral_magnitude"](X, power=0.5)
    logp = fp["spectral_magnitude"](X, power=1, log=True)
    doc = fp["spectral_magnitude"](torch.Tensor([[3, 4]]), power=0.5)
    return dict(X=_np(X), y=_np(y), Xmc=_np(Xmc), mag=_np(mag), logp=_np(logp), doc=_np(doc),
                window=_np(stft.window))


def _np_stft(x, n_fft, hop, win_len):
    n = np.arange(win_len)
    w = 0.54 - 0.46 * np.cos(2 * np.pi * n / win_len)  # periodic Hamming, as torch.hamming_window
    full = np.zeros(n_fft)
    left = (n_fft - win_len) // 2
    full[left:left + win_len] = w
    xp = np.pad(x.astype(np.float64), (n_fft // 2, n_fft // 2))
    n_frames = 1 + (len(xp) - n_fft) // hop
    frames = np.stack([xp[i * hop:i * hop + n_fft] * full for i in range(n_frames)])
    return np.fft.rfft(frames, axis=-1), w


def test_stft_istft_spectral_magnitude():
    r = run_stft(lucid)
    wav = _wave()
    ref = np.stack([_np_stft(w, 16, 4, 12)[0] for w in wav])  # (batch, frames, freqs)
    assert r["X"].shape == (2, 17, 9, 2)
    np.testing.assert_allclose(r["X"][..., 0], ref.real, atol=2e-5)
    np.testing.assert_allclose(r["X"][..., 1], ref.imag, atol=2e-5)
    np.testing.assert_allclose(r["window"], _np_stft(wav[0], 16, 4, 12)[1], atol=1e-6)
    # the multi-channel layout: (batch, time, freq, 2, channels)
    assert r["Xmc"].shape == (1, 17, 9, 2, 2)
    np.testing.assert_allclose(r["Xmc"][0, ..., 1], r["X"][1], atol=1e-6)
    np.testing.assert_allclose(r["y"], wav, atol=2e-5)  # ISTFT(STFT(x)) gives x back
    np.testing.assert_allclose(r["mag"], np.sqrt(np.abs(ref) ** 2 + 1e-14), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["logp"], np.log(np.abs(ref) ** 2 + 1e-14), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(r["doc"], [5.0])  # the docstring's example


def test_stft_istft_spectral_magnitude_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_stft(lucid), run_stft(torch)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5, err_msg=k)


# --- Filterbank ------------------------------------------------------------------------------
FB = dict(n_mels=5, n_fft=16, sample_rate=1000, f_min=0, f_max=500)


def _np_mel_matrix(shape, n_mels=5, n_fft=16, sr=1000, f_min=0, f_max=500):
    to_mel = lambda hz: 2595 * np.log10(1 + hz / 700)  # noqa: E731
    mel = np.linspace(to_mel(f_min), to_mel(f_max), n_mels + 2)
    hz = 700 * (10 ** (mel / 2595) - 1)
    band = (hz[1:] - hz[:-1])[:-1]
    fc = hz[1:-1]
    f = np.linspace(0, sr // 2, n_fft // 2 + 1)
    d = f[None, :] - fc[:, None]
    if shape == "triangular":
        m = np.maximum(0, np.minimum(d / band[:, None] + 1, -d / band[:, None] + 1))
    elif shape == "rectangular":
        m = ((f[None, :] >= fc[:, None] - band[:, None]) & (f[None, :] <= fc[:, None] + band[:, None])).astype(float)
    else:
        m = np.exp(-0.5 * (d / (band[:, None] / 2)) ** 2)
    return m.T  # (n_stft, n_mels)


def _np_db(x, top_db=80.0):
    db = 10 * np.log10(np.maximum(x, 1e-10))
    return np.maximum(db, db.max(axis=(-2, -1), keepdims=True) - top_db)


def _spec(seed=1, b=2, t=4, f=9):
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.0, 2.0, (b, t, f)).astype(np.float32)
    s[1, 0, :] = 1e-12  # a silent frame: clamped to amin and clipped by top_db
    return s


def run_filterbank(torch):
    spec = torch.tensor(_spec())
    out = {}
    # Filterbank builds its filters with CPU tensors (``device_inp``, and ``_gaussian_filters``'s
    # default ``torch.tensor(2)`` made at import) and moves the matrix to the spectrogram's device:
    # as in SpeechBrain, the code is imported and the module made on the CPU, the data may be elsewhere
    with torch.device("cpu"):
        fp = features_page(torch)
        fbs = {shape: (fp["Filterbank"](filter_shape=shape, **FB),
                       fp["Filterbank"](filter_shape=shape, log_mel=False, **FB))
               for shape in ("triangular", "rectangular", "gaussian")}
        fbl = fp["Filterbank"](filter_shape="gaussian", freeze=False, **FB).double()
    for shape, (fb, fb_lin) in fbs.items():
        out[shape] = _np(fb(spec))
        out[shape + "_lin"] = _np(fb_lin(spec))
    # multi-channel input (batch, time, freq, channels)
    out["mc"] = _np(fbs["triangular"][0](torch.stack([spec, 2 * spec], dim=-1)))
    # learnable filters in float64: a loss and its gradients w.r.t. f_central and band
    y = fbl(spec.double())
    loss = (y ** 2).mean()
    loss.backward()
    out["learn_y"] = _np(y)
    out["g_fc"] = _np(fbl.f_central.grad)
    out["g_band"] = _np(fbl.band.grad)
    out["names"] = sorted(n for n, _ in fbl.named_parameters())
    return out


def test_filterbank_shapes_and_db():
    r = run_filterbank(lucid)
    spec = _spec().astype(np.float64)
    for shape in ("triangular", "rectangular", "gaussian"):
        lin = spec @ _np_mel_matrix(shape)
        np.testing.assert_allclose(r[shape + "_lin"], lin, rtol=2e-5, atol=1e-6, err_msg=shape)
        np.testing.assert_allclose(r[shape], _np_db(lin), rtol=1e-4, atol=2e-4, err_msg=shape)
    # the silent frame hits the top_db floor: 80 dB under the sequence's max
    tri = r["triangular"]
    assert np.allclose(tri[1, 0], tri[1].max() - 80.0, atol=1e-3)
    mc = r["mc"]
    assert mc.shape == (2, 4, 5, 2)
    np.testing.assert_allclose(mc[..., 0], r["triangular"], atol=1e-5)
    np.testing.assert_allclose(mc[..., 1], _np_db(2 * (spec @ _np_mel_matrix("triangular"))), rtol=1e-4, atol=2e-4)
    assert r["names"] == ["band", "f_central"]


def _np_learnable_loss(fc, band, spec):
    f = np.linspace(0, 500, 9)
    d = f[None, :] - (fc * 1000)[:, None]
    m = np.exp(-0.5 * (d / ((band * 1000)[:, None] / 2)) ** 2).T
    y = _np_db(spec @ m)
    return (y ** 2).mean()


def test_filterbank_learnable_gradients_finite_differences():
    r = run_filterbank(lucid)
    spec = _spec().astype(np.float64)
    to_mel = lambda hz: 2595 * np.log10(1 + hz / 700)  # noqa: E731
    hz = 700 * (10 ** (np.linspace(to_mel(0), to_mel(500), 7).astype(np.float32).astype(np.float64) / 2595) - 1)
    fc0, band0 = hz[1:-1] / 1000, (hz[1:] - hz[:-1])[:-1] / 1000
    np.testing.assert_allclose(r["learn_y"], _np_db(spec @ _np_mel_matrix("gaussian")), rtol=1e-4, atol=1e-3)
    h = 1e-7
    for name, base, g in (("fc", fc0, r["g_fc"]), ("band", band0, r["g_band"])):
        fd = np.zeros_like(base)
        for i in range(len(base)):
            p, m = base.copy(), base.copy()
            p[i] += h
            m[i] -= h
            args_p = (p, band0) if name == "fc" else (fc0, p)
            args_m = (m, band0) if name == "fc" else (fc0, m)
            fd[i] = (_np_learnable_loss(*args_p, spec) - _np_learnable_loss(*args_m, spec)) / (2 * h)
        np.testing.assert_allclose(g, fd, rtol=2e-3, atol=1e-3 * np.abs(fd).max(), err_msg=name)
        assert np.abs(g).max() > 1.0  # the gradient is not trivially zero


def test_filterbank_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_filterbank(lucid), run_filterbank(torch)
    for k in a:
        if k == "names":
            assert a[k] == b[k]
            continue
        np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=2e-4, err_msg=k)


# --- DCT, Deltas, ContextWindow -------------------------------------------------------------
def run_dct_deltas_cw(torch):
    fp = features_page(torch)
    rng = np.random.default_rng(2)
    x = torch.tensor(rng.standard_normal((2, 6, 5)).astype(np.float32))
    out = {}
    dct = fp["DCT"](input_size=5, n_out=3)
    out["dct_mat"] = _np(dct.dct_mat)
    out["dct"] = _np(dct(x))
    out["dct_full"] = _np(fp["DCT"](input_size=5, n_out=5).dct_mat)
    out["dct_noortho"] = _np(fp["DCT"](input_size=5, n_out=3, ortho_norm=False).dct_mat)
    out["dct_mc"] = _np(dct(torch.stack([x, -x], dim=-1)))
    d = fp["Deltas"](input_size=5)
    out["d1"] = _np(d(x))
    out["d2"] = _np(d(d(x)))
    out["d_mc"] = _np(d(torch.stack([x, 3 * x], dim=-1)))
    out["cw21"] = _np(fp["ContextWindow"](left_frames=2, right_frames=1)(x))
    out["cw12"] = _np(fp["ContextWindow"](left_frames=1, right_frames=2)(x))
    try:
        fp["DCT"](input_size=3, n_out=5)
    except ValueError as e:
        out["err"] = str(e)
    return out


def _np_deltas(x, n=2):
    xp = np.concatenate([x[:, :1].repeat(n, 1), x, x[:, -1:].repeat(n, 1)], axis=1)
    T = x.shape[1]
    num = sum(k * (xp[:, n + k:n + k + T] - xp[:, n - k:n - k + T]) for k in range(1, n + 1))
    return num / (2 * sum(k * k for k in range(1, n + 1)))


def _np_context(x, left, right):
    B, T, C = x.shape
    L = left + right + 1
    out = np.zeros((B, T, C * L))
    for c in range(C):
        for j in range(L):
            off = j - left
            for t in range(T):
                if 0 <= t + off < T:
                    out[:, t, c * L + j] = x[:, t + off, c]
    return out


def test_dct_deltas_context_window():
    r = run_dct_deltas_cw(lucid)
    x = np.random.default_rng(2).standard_normal((2, 6, 5))
    N = 5
    k, n = np.arange(N)[:, None], np.arange(N)[None, :]
    D = np.sqrt(2.0 / N) * np.cos(np.pi / N * (n + 0.5) * k)
    D[0] /= np.sqrt(2.0)  # DCT-II, orthonormal
    np.testing.assert_allclose(r["dct_full"], D.T, atol=1e-6)
    np.testing.assert_allclose(r["dct_full"].T @ r["dct_full"], np.eye(5), atol=1e-5)
    np.testing.assert_allclose(r["dct_mat"], D[:3].T, atol=1e-6)
    np.testing.assert_allclose(r["dct_noortho"], 2 * np.cos(np.pi / N * (n + 0.5) * k)[:3].T, atol=1e-5)
    np.testing.assert_allclose(r["dct"], x @ D[:3].T, atol=1e-5)
    assert r["dct_mc"].shape == (2, 6, 3, 2)
    assert r["err"] == "Cannot select more DCT coefficients than inputs (n_out=5, n_in=3)"
    d1 = _np_deltas(x)
    np.testing.assert_allclose(r["d1"], d1, atol=1e-5)
    np.testing.assert_allclose(r["d2"], _np_deltas(d1), atol=1e-5)
    assert r["d_mc"].shape == (2, 6, 5, 2)
    np.testing.assert_allclose(r["d_mc"][..., 1], 3 * d1, atol=1e-4)
    np.testing.assert_allclose(r["cw21"], _np_context(x, 2, 1), atol=1e-6)
    np.testing.assert_allclose(r["cw12"], _np_context(x, 1, 2), atol=1e-6)


def test_dct_deltas_context_window_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_dct_deltas_cw(lucid), run_dct_deltas_cw(torch)
    for k in a:
        if k == "err":
            assert a[k] == b[k]
            continue
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5, err_msg=k)


# --- InputNormalization ----------------------------------------------------------------------
def _norm_batches():
    rng = np.random.default_rng(3)
    return [(rng.standard_normal((2, 5, 3)) * (i + 1) + i).astype(np.float32) for i in range(3)]


def run_input_norm(torch):
    fp = features_page(torch)
    lens = torch.tensor([1.0, 0.6])
    out = {}
    for kind in ("sentence", "batch"):
        norm = fp["InputNormalization"](norm_type=kind)
        out[kind] = _np(norm(torch.tensor(_norm_batches()[0]), lens))
    norm = fp["InputNormalization"]()  # global, running statistics
    for i, (b, epoch) in enumerate(zip(_norm_batches(), (0, 1, 5))):
        out["global%d" % i] = _np(norm(torch.tensor(b), lens, epoch=epoch))
    out["glob_mean"], out["glob_std"], out["count"] = _np(norm.glob_mean), _np(norm.glob_std), norm.count
    norm.eval()
    out["global_eval"] = _np(norm(torch.tensor(_norm_batches()[2]), lens))
    out["count_eval"] = norm.count
    # per-speaker running statistics
    spk = fp["InputNormalization"](norm_type="speaker")
    b = _norm_batches()
    out["spk0"] = _np(spk(torch.tensor(b[0]), lens, spk_ids=torch.tensor([[1], [2]])))
    out["spk1"] = _np(spk(torch.tensor(b[1]), lens, spk_ids=torch.tensor([[1], [1]])))
    spk.eval()
    out["spk_eval"] = _np(spk(torch.tensor(b[2]), lens, spk_ids=torch.tensor([[2], [5]])))
    out["spk_count"] = sorted(spk.spk_dict_count.items())
    return out


def test_input_normalization_running_statistics():
    r = run_input_norm(lucid)
    bs = [b.astype(np.float64) for b in _norm_batches()]
    sizes = [5, 3]  # round(0.6 * 5)

    def stats(b):
        m = np.stack([b[i, :n].mean(0) for i, n in enumerate(sizes)])
        s = np.stack([b[i, :n].std(0, ddof=1) for i, n in enumerate(sizes)])
        return m, s

    m, s = stats(bs[0])
    np.testing.assert_allclose(r["sentence"], (bs[0] - m[:, None]) / s[:, None], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["batch"], (bs[0] - m.mean(0)) / s.mean(0), rtol=1e-4, atol=1e-5)
    gm, gs = stats(bs[0])[0].mean(0), stats(bs[0])[1].mean(0)
    np.testing.assert_allclose(r["global0"], (bs[0] - gm) / gs, rtol=1e-4, atol=1e-5)
    m1, s1 = (x.mean(0) for x in stats(bs[1]))
    gm, gs = 0.5 * gm + 0.5 * m1, 0.5 * gs + 0.5 * s1  # weight 1 / (count + 1)
    np.testing.assert_allclose(r["global1"], (bs[1] - gm) / gs, rtol=1e-4, atol=1e-5)
    # epoch 5 >= update_until_epoch: the statistics stay, the count still grows
    np.testing.assert_allclose(r["global2"], (bs[2] - gm) / gs, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["glob_mean"], gm, rtol=1e-5)
    np.testing.assert_allclose(r["glob_std"], gs, rtol=1e-5)
    assert r["count"] == 3 and r["count_eval"] == 3
    np.testing.assert_allclose(r["global_eval"], (bs[2] - gm) / gs, rtol=1e-4, atol=1e-5)
    (m0, s0), (m1, s1), (m2, s2) = stats(bs[0]), stats(bs[1]), stats(bs[2])
    np.testing.assert_allclose(r["spk0"], (bs[0] - m0[:, None]) / s0[:, None], rtol=1e-4, atol=1e-5)
    # speaker 1 seen again twice: weights 1/2 then 1/3
    sm, ss = 0.5 * m0[0] + 0.5 * m1[0], 0.5 * s0[0] + 0.5 * s1[0]
    ref0 = (bs[1][0] - sm) / ss
    sm, ss = (2 / 3) * sm + (1 / 3) * m1[1], (2 / 3) * ss + (1 / 3) * s1[1]
    np.testing.assert_allclose(r["spk1"][0], ref0, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["spk1"][1], (bs[1][1] - sm) / ss, rtol=1e-4, atol=1e-5)
    # eval: speaker 2's stored statistics, and the sentence's own for the unknown speaker 5
    np.testing.assert_allclose(r["spk_eval"][0], (bs[2][0] - m0[1]) / s0[1], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(r["spk_eval"][1], (bs[2][1] - m2[1]) / s2[1], rtol=1e-4, atol=1e-5)
    assert r["spk_count"] == [(1, 3), (2, 1)]


def test_input_normalization_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_input_norm(lucid), run_input_norm(torch)
    for k in a:
        if k == "spk_count":
            assert a[k] == b[k]
            continue
        np.testing.assert_allclose(a[k], b[k], rtol=1e-5, atol=1e-5, err_msg=k)


# --- lobes: Fbank, MFCC ----------------------------------------------------------------------
def run_lobes(torch):
    with torch.device("cpu"):  # see run_filterbank
        fp = features_page(torch)
        lp = lobes_page(torch, fp)
    wav = torch.tensor(_wave(n=48))
    kw = dict(sample_rate=1000, n_fft=16, win_length=12, hop_length=4)
    with torch.device("cpu"):  # see run_filterbank
        fb = lp["Fbank"](n_mels=5, **kw)
        fbd = lp["Fbank"](n_mels=5, deltas=True, context=True, left_frames=1, right_frames=1, **kw)
        mf = lp["MFCC"](n_mels=6, n_mfcc=4, deltas=True, context=False, **kw)
    w = wav.clone().requires_grad_(True)
    f = fb(w)
    return dict(fbank=_np(f), fbank_rg=f.requires_grad, fbank_dc=_np(fbd(wav)), mfcc=_np(mf(wav)))


def test_lobes_fbank_mfcc():
    r = run_lobes(lucid)
    wav = _wave(n=48)
    spec = np.stack([np.abs(_np_stft(w, 16, 4, 12)[0]) ** 2 for w in wav])
    fb = _np_db(spec @ _np_mel_matrix("triangular"))
    np.testing.assert_allclose(r["fbank"], fb, rtol=1e-4, atol=2e-4)
    assert r["fbank_rg"] is False  # computed under no_grad
    d1 = np.stack([_np_deltas(f) for f in fb[None]])[0]
    d2 = _np_deltas(d1)
    full = np.concatenate([fb, d1, d2], axis=2)
    np.testing.assert_allclose(r["fbank_dc"], _np_context(full, 1, 1), rtol=1e-4, atol=5e-4)
    fb6 = _np_db(spec @ _np_mel_matrix("triangular", n_mels=6))
    N = 6
    k, n = np.arange(4)[:, None], np.arange(N)[None, :]
    D = np.sqrt(2.0 / N) * np.cos(np.pi / N * (n + 0.5) * k)
    D[0] /= np.sqrt(2.0)
    mf = fb6 @ D.T
    ref = np.concatenate([mf, _np_deltas(mf), _np_deltas(_np_deltas(mf))], axis=2)
    np.testing.assert_allclose(r["mfcc"], ref, rtol=1e-4, atol=5e-4)


def test_lobes_fbank_mfcc_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_lobes(lucid), run_lobes(torch)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-4, atol=5e-4, err_msg=k)


# --- CNN: Conv1d, SincConv -------------------------------------------------------------------
def _conv_weights():
    rng = np.random.default_rng(4)
    return rng.standard_normal((4, 3, 3)), rng.standard_normal(4), rng.standard_normal((2, 7, 3))


def run_cnn(torch):
    cp = cnn_page(torch)
    W, bias, x = _conv_weights()
    out = {}
    for padding, dil in (("same", 1), ("causal", 2), ("valid", 1)):
        conv = cp["Conv1d"](out_channels=4, kernel_size=3, input_shape=(2, 7, 3), padding=padding,
                            dilation=dil).double()
        with torch.no_grad():
            conv.conv.weight.copy_(torch.tensor(W))
            conv.conv.bias.copy_(torch.tensor(bias))
        xt = torch.tensor(x, requires_grad=True)
        y = conv(xt)
        (y.sin().sum()).backward()
        out[padding] = _np(y)
        out[padding + "_gx"] = _np(xt.grad)
    conv2 = cp["Conv1d"](out_channels=2, kernel_size=3, input_shape=(2, 7))
    out["unsq_shape"] = tuple(conv2(torch.tensor(x[..., 0]).float()).shape)
    out["pad"] = [cp["get_padding_elem"](16, 1, 5, 1), cp["get_padding_elem"](16, 2, 5, 1)]
    try:
        cp["Conv1d"](out_channels=2, kernel_size=4, input_shape=(2, 7, 3))
    except ValueError as e:
        out["err"] = str(e)
    # SincConv in float64
    sc = cp["SincConv"](out_channels=3, kernel_size=7, input_shape=(2, 16), sample_rate=1000,
                        min_low_hz=20, min_band_hz=20).double()
    sc.n_, sc.window_ = sc.n_.double(), sc.window_.double()
    with torch.no_grad():  # the last filter's high edge starts exactly at sample_rate / 2, clamp's edge
        sc.band_hz_.mul_(0.9)
    rng = np.random.default_rng(5)
    wav = torch.tensor(rng.standard_normal((2, 16)))
    y = sc(wav)
    (y ** 2).mean().backward()
    out["sinc_y"] = _np(y)
    out["sinc_filters"] = _np(sc._get_sinc_filters())
    out["sinc_low"], out["sinc_band"] = _np(sc.low_hz_), _np(sc.band_hz_)
    out["sinc_n"], out["sinc_win"] = _np(sc.n_), _np(sc.window_)
    out["sinc_g_low"], out["sinc_g_band"] = _np(sc.low_hz_.grad), _np(sc.band_hz_.grad)
    return out


def _np_conv_same_like(x, W, bias, padding, dil):
    # x (B, T, Cin), W (Cout, Cin, K)
    K = W.shape[2]
    xt = x.transpose(0, 2, 1)
    if padding == "same":
        xt = np.pad(xt, ((0, 0), (0, 0), (1, 1)), mode="reflect")
    elif padding == "causal":
        xt = np.pad(xt, ((0, 0), (0, 0), ((K - 1) * dil, 0)))
    T_out = xt.shape[2] - dil * (K - 1)
    y = np.zeros((x.shape[0], W.shape[0], T_out))
    for k in range(K):
        y += np.einsum("oc,bct->bot", W[:, :, k], xt[:, :, k * dil:k * dil + T_out])
    return (y + bias[None, :, None]).transpose(0, 2, 1)


def _np_sinc(low_p, band_p, x, n_, win, K=7, sr=1000, min_low=20, min_band=20):
    # n_ and win are the layer's float32-made time axis and window (cast to float64)
    low = min_low + np.abs(low_p)
    high = np.clip(low + min_band + np.abs(band_p), min_low, sr / 2)
    band = (high - low)[:, 0]
    left = (np.sin(high @ n_) - np.sin(low @ n_)) / (n_ / 2) * win
    bp = np.concatenate([left, 2 * band[:, None], left[:, ::-1]], axis=1) / (2 * band[:, None])
    xp = np.pad(x, ((0, 0), (K // 2, K // 2)), mode="reflect")
    T = x.shape[1]
    y = np.stack([[np.dot(xp[b, t:t + K], bp[o]) for t in range(T)] for b in range(x.shape[0])
                  for o in range(bp.shape[0])]).reshape(x.shape[0], bp.shape[0], T)
    return bp, y.transpose(0, 2, 1)


def test_cnn_conv1d_paddings_and_sincconv():
    r = run_cnn(lucid)
    W, bias, x = _conv_weights()
    for padding, dil in (("same", 1), ("causal", 2), ("valid", 1)):
        y = _np_conv_same_like(x, W, bias, padding, dil)
        np.testing.assert_allclose(r[padding], y, atol=1e-10, err_msg=padding)
        # d/dx sum(sin(y)) by finite differences of the NumPy convolution
        h, fd = 1e-6, np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            p, m = x.copy(), x.copy()
            p[idx] += h
            m[idx] -= h
            fd[idx] = (np.sin(_np_conv_same_like(p, W, bias, padding, dil)).sum()
                       - np.sin(_np_conv_same_like(m, W, bias, padding, dil)).sum()) / (2 * h)
        np.testing.assert_allclose(r[padding + "_gx"], fd, rtol=1e-6, atol=1e-7, err_msg=padding)
    assert r["same"].shape == (2, 7, 4) and r["valid"].shape == (2, 5, 4) and r["causal"].shape == (2, 7, 4)
    assert r["unsq_shape"] == (2, 7, 2)
    assert r["pad"] == [[2, 2], [2, 2]]
    assert r["err"] == "The field kernel size must be an odd number. Got 4."
    xw = np.random.default_rng(5).standard_normal((2, 16))
    n = (7 - 1) / 2.0
    np.testing.assert_allclose(r["sinc_n"], 2 * math.pi * np.arange(-n, 0)[None, :] / 1000, rtol=1e-6)
    np.testing.assert_allclose(r["sinc_win"], 0.54 - 0.46 * np.cos(2 * math.pi * np.linspace(0, 7 / 2 - 1, 3) / 7),
                               rtol=1e-6)
    sinc = functools.partial(_np_sinc, x=xw, n_=r["sinc_n"], win=r["sinc_win"])
    bp, y = sinc(r["sinc_low"], r["sinc_band"])
    np.testing.assert_allclose(r["sinc_filters"][:, 0], bp, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(r["sinc_y"], y, rtol=1e-9, atol=1e-12)
    h = 1e-5
    for name in ("low", "band"):
        base = r["sinc_" + name]
        fd = np.zeros_like(base)
        for i in range(base.shape[0]):
            p, m = base.copy(), base.copy()
            p[i, 0] += h
            m[i, 0] -= h
            lp = sinc(p, r["sinc_band"])[1] if name == "low" else sinc(r["sinc_low"], p)[1]
            lm = sinc(m, r["sinc_band"])[1] if name == "low" else sinc(r["sinc_low"], m)[1]
            fd[i, 0] = ((lp ** 2).mean() - (lm ** 2).mean()) / (2 * h)
        np.testing.assert_allclose(r["sinc_g_" + name], fd, rtol=1e-5, atol=1e-9, err_msg=name)
        assert np.abs(fd).max() > 1e-6


def test_cnn_conv1d_paddings_and_sincconv_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_cnn(lucid), run_cnn(torch)
    for k in a:
        if k in ("unsq_shape", "pad", "err"):
            assert a[k] == b[k], k
            continue
        # SincConv's window and time axis are made in float32 (cos may differ by 1 ulp)
        tol = 1e-6 if k.startswith("sinc") else 1e-9
        np.testing.assert_allclose(a[k], b[k], rtol=tol, atol=tol, err_msg=k)


# --- losses ------------------------------------------------------------------------------------
def _ctc_data():
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((3, 6, 4))
    targets = np.array([[1, 2, 2, 3], [3, 1, 0, 0], [1, 2, 3, 1]])
    # relative lengths: inputs 6, 5, 2 frames; targets 4, 2, 4 labels (the last is impossible)
    return logits, targets, np.array([1.0, 5 / 6, 2 / 6]), np.array([1.0, 0.5, 1.0])


def _np_ctc_nll(lp, tgt, blank=0):
    ext = [blank]
    for c in tgt:
        ext += [c, blank]
    S, T = len(ext), lp.shape[0]
    a = np.full(S, -np.inf)
    a[0] = lp[0, ext[0]]
    if S > 1:
        a[1] = lp[0, ext[1]]
    for t in range(1, T):
        new = np.full(S, -np.inf)
        for s in range(S):
            terms = [a[s]] + ([a[s - 1]] if s >= 1 else [])
            if s >= 2 and ext[s] != blank and ext[s] != ext[s - 2]:
                terms.append(a[s - 2])
            new[s] = np.logaddexp.reduce(terms) + lp[t, ext[s]]
        a = new
    tot = np.logaddexp(a[-1], a[-2]) if S > 1 else a[-1]
    return -tot


def run_losses(torch):
    lp_ = losses_page(torch)
    F = torch.nn.functional
    out = {}
    logits, targets, in_rel, tg_rel = _ctc_data()
    x = torch.tensor(logits, requires_grad=True)
    log_probs = F.log_softmax(x, dim=-1)
    tg, il, tl = torch.tensor(targets), torch.tensor(in_rel), torch.tensor(tg_rel)
    for red in ("mean", "sum", "batch", "batchmean"):
        out["ctc_" + red] = _np(lp_["ctc_loss"](log_probs, tg, il, tl, 0, reduction=red))
    lp_["ctc_loss"](log_probs, tg, il, tl, 0, reduction="sum").backward()
    try:
        lp_["ctc_loss"](log_probs, tg, il, tl, 4)
    except RuntimeError as e:
        out["ctc_blank_err"] = "blank must be in label range" in str(e)
    out["ctc_grad"] = _np(x.grad)
    # nll with a length mask, frame-level
    rng = np.random.default_rng(7)
    lpf = F.log_softmax(torch.tensor(rng.standard_normal((2, 4, 3))), dim=-1)
    tgt = torch.tensor([[0, 2, 1, 1], [2, 2, 0, 1]])
    length = torch.tensor([1.0, 0.5])
    for red in ("mean", "batch", "batchmean"):
        out["nll_" + red] = _np(lp_["nll_loss"](lpf, tgt, length=length, reduction=red))
    out["nll_ls"] = _np(lp_["nll_loss"](lpf, tgt, length=length, label_smoothing=0.1))
    # the docstrings' examples
    probs = torch.tensor([[0.9, 0.1], [0.1, 0.9]])
    out["nll_doc"] = _np(lp_["nll_loss"](torch.log(probs), torch.tensor([1, 1])))
    p4 = torch.tensor([[0.9, 0.1, 0.1, 0.9]])
    out["l1_doc"] = _np(lp_["l1_loss"](p4, torch.tensor([[1.0, 0.0, 0.0, 1.0]])))
    out["mse_doc"] = _np(lp_["mse_loss"](p4, torch.tensor([[1.0, 0.0, 0.0, 1.0]])))
    pred = torch.tensor(rng.standard_normal((2, 5, 2)))
    tgt2 = torch.tensor(rng.standard_normal((2, 4, 2)))
    out["mse_trunc"] = _np(lp_["mse_loss"](pred, tgt2, length=torch.tensor([1.0, 0.5]), reduction="batch"))
    out["mask"] = _np(lp_["length_to_mask"](torch.Tensor([1, 2, 3])))
    out["mask_long"] = _np(lp_["length_to_mask"](torch.tensor([1, 3]), max_len=4))
    try:
        lp_["truncate"](torch.zeros(1, 9), torch.zeros(1, 4))
    except ValueError as e:
        out["trunc_err"] = str(e)
    # PitWrapper's docstring
    pit_mse = lp_["PitWrapper"](torch.nn.MSELoss(reduction="none"))
    tg4 = torch.tensor(rng.random((2, 6, 4)))
    p = (3, 0, 2, 1)
    loss, opt_p = pit_mse(tg4[..., p], tg4)
    out["pit_loss"], out["pit_perm"] = _np(loss), [tuple(int(i) for i in q) for q in opt_p]
    out["pit_reordered"] = _np(pit_mse.reorder_tensor(tg4[..., p], opt_p))
    # cal_si_snr's docstring
    # on the CPU: the page makes its lengths on ``estimate_source.device.type``, which drops a device
    # index (PyTorch's "cuda" too), so data on a device that is not the current one would not meet them
    xs = torch.Tensor([[1, 0], [123, 45], [34, 5], [2312, 421]]).cpu()
    xhat = xs[:, (1, 0)]
    xs = xs.unsqueeze(-1).repeat(1, 1, 2)
    xhat = xhat.unsqueeze(1).repeat(1, 2, 1)
    out["si_snr"] = _np(-lp_["cal_si_snr"](xs, xhat))
    out["get_mask"] = _np(lp_["get_mask"](torch.randn(4, 3, 2), torch.Tensor([2, 1, 4]).int()))
    # AdditiveAngularMargin + LogSoftmaxWrapper (the docstring's data)
    outputs = torch.tensor([[1.0, -1.0], [-1.0, 1.0], [0.9, 0.1], [0.1, 0.9]])
    targets1 = torch.tensor([[0], [1], [0], [1]])
    aam = lp_["LogSoftmaxWrapper"](lp_["AdditiveAngularMargin"](margin=0.3, scale=32))
    out["aam"] = _np(aam(outputs, targets1))
    am = lp_["LogSoftmaxWrapper"](lp_["AngularMargin"](margin=0.2, scale=32))
    out["am"] = _np(am(outputs.unsqueeze(1), targets1))
    aam1 = lp_["LogSoftmaxWrapper"](lp_["AdditiveAngularMargin"](margin=0.3, scale=1))
    out["aam1"] = _np(aam1(outputs, targets1))
    out["am1"] = _np(lp_["LogSoftmaxWrapper"](lp_["AngularMargin"](margin=0.2))(outputs.unsqueeze(1), targets1))
    out["ident"] = _np(lp_["LogSoftmaxWrapper"](torch.nn.Identity())(outputs.unsqueeze(1), targets1))
    return out


def test_losses():
    r = run_losses(lucid)
    logits, targets, in_rel, tg_rel = _ctc_data()

    def per_item(lg):
        lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
        il = np.round(in_rel * 6).astype(int)
        tl = np.round(tg_rel * 4).astype(int)
        nll = np.array([_np_ctc_nll(lp[b, :il[b]], targets[b, :tl[b]]) for b in range(3)])
        return np.where(np.isinf(nll), 0.0, nll), tl  # zero_infinity=True

    nll, tl = per_item(logits)
    assert nll[2] == 0.0 and nll[0] > 0 and nll[1] > 0
    assert r["ctc_blank_err"] is True  # was an IndexError from a gather
    np.testing.assert_allclose(r["ctc_mean"], (nll / tl).mean(), rtol=1e-10)
    np.testing.assert_allclose(r["ctc_sum"], nll.sum(), rtol=1e-10)
    np.testing.assert_allclose(r["ctc_batch"], nll / tl, rtol=1e-10)
    np.testing.assert_allclose(r["ctc_batchmean"], nll.sum() / 3, rtol=1e-10)
    h, fd = 1e-6, np.zeros_like(logits)
    for idx in np.ndindex(*logits.shape):
        p, m = logits.copy(), logits.copy()
        p[idx] += h
        m[idx] -= h
        fd[idx] = (per_item(p)[0].sum() - per_item(m)[0].sum()) / (2 * h)
    np.testing.assert_allclose(r["ctc_grad"], fd, rtol=1e-5, atol=1e-8)
    assert np.all(r["ctc_grad"][2] == 0)  # the zeroed infinite loss gives no gradient
    assert np.all(r["ctc_grad"][1, 5] == 0)  # frames past the input length neither

    rng = np.random.default_rng(7)
    lg = rng.standard_normal((2, 4, 3))
    lp = lg - np.log(np.exp(lg).sum(-1, keepdims=True))
    tgt = np.array([[0, 2, 1, 1], [2, 2, 0, 1]])
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]])
    l = -np.take_along_axis(lp, tgt[..., None], -1)[..., 0] * mask
    np.testing.assert_allclose(r["nll_mean"], l.sum() / mask.sum(), rtol=1e-10)
    np.testing.assert_allclose(r["nll_batch"], l.sum(1) / mask.sum(1), rtol=1e-10)
    np.testing.assert_allclose(r["nll_batchmean"], l.sum() / 2, rtol=1e-10)
    reg = (lp.mean(-1) * mask).sum() / mask.sum()  # mean over the classes (dim 1 after the transpose)
    np.testing.assert_allclose(r["nll_ls"], -0.1 * reg + 0.9 * l.sum() / mask.sum(), rtol=1e-10)
    # docstring values
    np.testing.assert_allclose(r["nll_doc"], 1.2040, atol=1e-4)
    np.testing.assert_allclose(r["l1_doc"], 0.1, atol=1e-6)
    np.testing.assert_allclose(r["mse_doc"], 0.01, atol=1e-6)
    pred, tgt2 = rng.standard_normal((2, 5, 2)), rng.standard_normal((2, 4, 2))
    se = (pred[:, :4] - tgt2) ** 2
    np.testing.assert_allclose(r["mse_trunc"], [se[0].sum() / 8, se[1, :2].sum() / 4], rtol=1e-10)
    np.testing.assert_array_equal(r["mask"], [[1, 0, 0], [1, 1, 0], [1, 1, 1]])
    assert r["mask"].dtype == np.float32
    np.testing.assert_array_equal(r["mask_long"], [[1, 0, 0, 0], [1, 1, 1, 0]])
    assert r["mask_long"].dtype == np.int64
    assert r["trunc_err"] == "Predictions and targets should be same length, but got 9 and 4 respectively."
    np.testing.assert_allclose(r["pit_loss"], [0.0, 0.0], atol=1e-12)
    # the optimal permutation puts source p[i] back at i: the inverse of p
    assert r["pit_perm"] == [(1, 3, 2, 0), (1, 3, 2, 0)]
    tg4 = rng.random((2, 6, 4))
    np.testing.assert_allclose(r["pit_reordered"], tg4, atol=1e-12)
    # cal_si_snr: the docstring's values, and a NumPy recomputation
    np.testing.assert_allclose(r["si_snr"], [[[25.2142, 144.1789], [130.9283, 25.2142]]], atol=2e-3)
    np.testing.assert_array_equal(r["get_mask"][:, :, 0], [[1, 1, 1], [1, 0, 1], [0, 0, 1], [0, 0, 1]])
    # angular margins
    o = np.array([[1.0, -1.0], [-1.0, 1.0], [0.9, 0.1], [0.1, 0.9]])
    t = np.eye(2)[[0, 1, 0, 1]]

    def lsm_kl(pred):
        ls = pred - np.log(np.exp(pred).sum(1, keepdims=True))
        return (t * (np.log(np.where(t > 0, t, 1)) - ls)).sum() / t.sum()

    m = 0.3
    sine = np.sqrt(np.clip(1 - o ** 2, 0, None))
    phi = o * math.cos(m) - sine * math.sin(m)
    phi = np.where(o > math.cos(math.pi - m), phi, o - math.sin(math.pi - m) * m)
    np.testing.assert_allclose(r["aam"], lsm_kl(32 * (t * phi + (1 - t) * o)), rtol=1e-5, atol=1e-6)  # float32
    np.testing.assert_allclose(r["am"], lsm_kl(32 * (o - 0.2 * t)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(r["aam1"], lsm_kl(t * phi + (1 - t) * o), rtol=1e-5)
    np.testing.assert_allclose(r["am1"], lsm_kl(o - 0.2 * t), rtol=1e-5)
    assert min(r["aam1"], r["am1"]) > r["ident"] > 0.1  # a margin makes the loss larger
    np.testing.assert_allclose(r["ident"], lsm_kl(o), rtol=1e-6)
    for k in ("aam", "am", "ident"):
        assert 0 <= r[k] < 1


def test_losses_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_losses(lucid), run_losses(torch)
    for k in a:
        if k in ("pit_perm", "trunc_err", "ctc_blank_err"):
            assert a[k] == b[k], k
            continue
        if k == "get_mask":
            np.testing.assert_array_equal(a[k], b[k])
            continue
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, atol=1e-8, err_msg=k)


# --- pooling and normalization ---------------------------------------------------------------
def run_pool_norm(torch):
    pp = pooling_norm_page(torch)
    out = {}
    rng = np.random.default_rng(8)
    x = torch.tensor(rng.standard_normal((2, 6, 3)))
    sp = pp["StatisticsPooling"]()
    out["stats"] = _np(sp(x.clone(), lengths=torch.tensor([1.0, 0.5])))
    out["stats_nolen"] = _np(sp(x.clone()))
    out["std_only"] = _np(pp["StatisticsPooling"](return_mean=False)(x))
    out["maxpool"] = _np(pp["Pooling1d"]("max", 2)(x))
    out["avgpool4"] = _np(pp["Pooling1d"]("avg", 3, input_dims=4, pool_axis=2)(x.unsqueeze(1)))
    bn = pp["BatchNorm1d"](input_shape=(2, 6, 3)).double()
    out["bn"] = _np(bn(x))
    out["bn_rm"], out["bn_rv"] = _np(bn.norm.running_mean), _np(bn.norm.running_var)
    bn.eval()
    out["bn_eval"] = _np(bn(x))
    bnc = pp["BatchNorm1d"](input_shape=(2, 6, 3), combine_batch_time=True).double()
    out["bn_comb"] = _np(bnc(x))
    ln = pp["LayerNorm"](input_shape=(2, 6, 3)).double()
    out["ln"] = _np(ln(x))
    # PCEN in float64, gradients w.r.t. its parameters
    pcen = pp["PCEN"](3, alpha=0.9, smooth_coef=0.3, delta=1.5, root=2.5).double()
    xp = torch.tensor(rng.uniform(0.1, 2.0, (2, 5, 3)))
    y = pcen(xp)
    (y * torch.tensor(rng.standard_normal((2, 5, 3)))).sum().backward()
    out["pcen"] = _np(y)
    out["pcen_g"] = {n: _np(p.grad) for n, p in pcen.named_parameters()}
    return out


def _np_pcen(x, alpha, delta, root, s):
    xt = x.transpose(0, 2, 1)  # (B, C, T)
    acc = xt[:, :, 0]
    ema = []
    for t in range(xt.shape[2]):
        acc = s[None] * xt[:, :, t] + (1 - s[None]) * acc
        ema.append(acc)
    ema = np.stack(ema, -1)
    a, d, r = (np.asarray(v)[None, :, None] for v in (np.minimum(alpha, 1), delta, np.maximum(root, 1)))
    out = (xt / (1e-12 + ema) ** a + d) ** (1 / r) - d ** (1 / r)
    return out.transpose(0, 2, 1)


def test_pooling_normalization_pcen():
    r = run_pool_norm(lucid)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 6, 3))
    mean = np.stack([x[0].mean(0), x[1, :3].mean(0)])
    std = np.stack([x[0].std(0, ddof=1), x[1, :3].std(0, ddof=1)])
    st = r["stats"][:, 0]
    assert st.shape == (2, 6)
    noise = st[:, :3] - mean  # the Gaussian noise, scaled into [1e-5, 9e-5]
    assert np.all(noise > 1e-5 - 1e-9) and np.all(noise < 9e-5 + 1e-9)
    np.testing.assert_allclose(noise.min(), 1e-5, atol=1e-12)
    np.testing.assert_allclose(noise.max(), 9e-5, atol=1e-12)
    np.testing.assert_allclose(st[:, 3:], std + 1e-5, rtol=1e-12)
    np.testing.assert_allclose(r["stats_nolen"][:, 0, :3], x.mean(1), atol=1e-4)
    np.testing.assert_allclose(r["std_only"][:, 0], x.std(1, ddof=1) + 1e-5, rtol=1e-12)
    np.testing.assert_allclose(r["maxpool"], x.reshape(2, 3, 2, 3).max(2), rtol=1e-12)
    np.testing.assert_allclose(r["avgpool4"][:, 0], x.reshape(2, 2, 3, 3).mean(2), rtol=1e-12)
    m, v = x.mean((0, 1)), x.var((0, 1))
    np.testing.assert_allclose(r["bn"], (x - m) / np.sqrt(v + 1e-5), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(r["bn_rm"], 0.1 * m, rtol=1e-10)
    np.testing.assert_allclose(r["bn_rv"], 0.9 + 0.1 * x.var((0, 1), ddof=1), rtol=1e-10)
    np.testing.assert_allclose(r["bn_eval"], (x - 0.1 * m) / np.sqrt(r["bn_rv"] + 1e-5), rtol=1e-10)
    np.testing.assert_allclose(r["bn_comb"], r["bn"], rtol=1e-10, atol=1e-12)
    lm, lv = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    np.testing.assert_allclose(r["ln"], (x - lm) / np.sqrt(lv + 1e-5), rtol=1e-10, atol=1e-12)
    xp = rng.uniform(0.1, 2.0, (2, 5, 3))
    w = rng.standard_normal((2, 5, 3))
    # the parameters are made in float32, then .double()
    P = {k: np.full(3, v, np.float32).astype(np.float64) for k, v in
         dict(alpha=0.9, delta=1.5, root=2.5, s=0.3).items()}
    np.testing.assert_allclose(r["pcen"], _np_pcen(xp, **P), rtol=1e-10)
    names = {"alpha": "alpha", "delta": "delta", "root": "root", "ema._weights": "s"}
    assert set(r["pcen_g"]) == set(names)
    h = 1e-6
    for pname, key in names.items():
        fd = np.zeros(3)
        for i in range(3):
            Pp, Pm = {k: v.copy() for k, v in P.items()}, {k: v.copy() for k, v in P.items()}
            Pp[key][i] += h
            Pm[key][i] -= h
            fd[i] = ((_np_pcen(xp, **Pp) * w).sum() - (_np_pcen(xp, **Pm) * w).sum()) / (2 * h)
        np.testing.assert_allclose(r["pcen_g"][pname], fd, rtol=1e-6, atol=1e-9, err_msg=pname)


def test_pooling_normalization_pcen_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_pool_norm(lucid), run_pool_norm(torch)
    for k in a:
        if k == "pcen_g":
            for n in a[k]:
                np.testing.assert_allclose(a[k][n], b[k][n], rtol=1e-9, atol=1e-12, err_msg=n)
            continue
        # the mean carries fresh Gaussian noise (at most 9e-5) from each library's generator
        tol = 1e-4 if k in ("stats", "stats_nolen") else 1e-9
        np.testing.assert_allclose(a[k], b[k], rtol=1e-9, atol=tol, err_msg=k)


# --- CTC decoding ----------------------------------------------------------------------------
def run_ctc_decode(torch):
    cd = ctc_decode_page(torch)
    out = {}
    out["filter"] = cd["filter_ctc_output"](["a", "a", "blank", "b", "b", "blank", "c"], blank_id="blank")
    probs = torch.tensor([[[0.3, 0.7], [0.0, 0.0]], [[0.2, 0.8], [0.9, 0.1]]])
    out["doc"] = cd["ctc_greedy_decode"](probs, torch.tensor([0.51, 1.0]), 0)
    rng = np.random.default_rng(9)
    p = torch.tensor(rng.random((3, 7, 4)))
    out["rand"] = cd["ctc_greedy_decode"](p, torch.tensor([1.0, 0.57, 0.3]))
    try:
        cd["filter_ctc_output"](torch.tensor([1, 2]))
    except ValueError as e:
        out["err"] = str(e)
    return out


def test_ctc_decoding():
    r = run_ctc_decode(lucid)
    assert r["filter"] == ["a", "b", "c"]
    assert r["doc"] == [[1], [1]]
    p = np.random.default_rng(9).random((3, 7, 4))
    ref = []
    for seq, n in zip(p, (7, 4, 2)):  # round(0.57 * 7) = 4, round(0.3 * 7) = 2
        best = seq[:n].argmax(1).tolist()
        ref.append([k for k, _ in groupby(best) if k != 3])  # blank -1 is the last index
    assert r["rand"] == ref
    assert all(type(i) is int for seq in r["rand"] for i in seq)
    assert r["err"] == "filter_ctc_out can only filter python lists"


def test_ctc_decoding_torch_parity():
    torch = pytest.importorskip("torch")
    assert run_ctc_decode(lucid) == run_ctc_decode(torch)


# --- CTC prefix scoring (speechbrain/decoders/ctc.py, CTCPrefixScore) -------------------------
def _prefix_data():
    rng = np.random.default_rng(10)
    lg = rng.standard_normal((2, 4, 4))
    # float32, as the page's ``torch.full`` tables (default dtype) take them
    return (lg - np.log(np.exp(lg).sum(-1, keepdims=True))).astype(np.float32), np.array([4, 3])


def run_prefix_score(torch):
    cd = ctc_decode_page(torch)
    lp, lens = _prefix_data()
    out = {}
    for mode in ("full", "partial"):
        scorer = cd["CTCPrefixScore"](torch.tensor(lp), torch.tensor(lens), 0, 3)
        bos = torch.tensor([2, 2])  # the prefix's last token (any non-blank id)
        cands = None if mode == "full" else torch.tensor([[1, 2], [2, 1]])
        s1, mem = scorer.forward_step(bos, None, candidates=cands)
        out[mode + "_s1"] = _np(s1)
        # extend batch 0 with token 1 and batch 1 with token 2 (beam 1), then score again
        states = scorer.permute_mem(mem, torch.tensor([[1], [2]]))
        c2 = None if mode == "full" else torch.tensor([[1, 2], [1, 2]])
        s2, _ = scorer.forward_step(torch.tensor([1, 2]), states, candidates=c2)
        out[mode + "_s2"] = _np(s2)
    return out


def _brute_prefix(lp, n, prefix):
    """log P(frame 0 blank, and the collapsed path starts with prefix), over the first n frames."""
    V = lp.shape[1]
    tot = 0.0
    for path in np.ndindex(*(V,) * n):
        if path[0] != 0:
            continue
        lab = [k for k, _ in groupby(path) if k != 0]
        if lab[:len(prefix)] == list(prefix):
            tot += np.exp(sum(lp[t, k] for t, k in enumerate(path)))
    return np.log(tot) if tot > 0 else -np.inf


def test_ctc_prefix_score():
    r = run_prefix_score(lucid)
    lp, lens = _prefix_data()
    lp = lp.astype(np.float64)
    for b in range(2):
        n = lens[b]
        s1 = r["full_s1"][b]
        np.testing.assert_allclose(s1[0], -1e20)  # blank excluded
        np.testing.assert_allclose(s1[3], lp[b, :n, 0].sum(), rtol=1e-6)  # eos: all blanks
        for c in (1, 2):
            np.testing.assert_allclose(s1[c], _brute_prefix(lp[b], n, [c]), rtol=1e-5)
        c1 = (1, 2)[b]
        s2 = r["full_s2"][b]
        for c in (1, 2):
            # the increments add up to the prefix probability of (c1, c)
            ref = _brute_prefix(lp[b], n, [c1, c])
            if np.isinf(ref):  # no alignment fits: the page's -1e20 stands for log 0
                assert s1[c1] + s2[c] <= -1e19
            else:
                np.testing.assert_allclose(s1[c1] + s2[c], ref, rtol=1e-5)
    # partial scoring: the candidates get the full search's scores, the others -1e20 (minus psi_prev)
    np.testing.assert_allclose(r["partial_s1"][:, 1:3], r["full_s1"][:, 1:3], rtol=1e-6)
    np.testing.assert_allclose(r["partial_s1"][:, 3], r["full_s1"][:, 3], rtol=1e-6)
    np.testing.assert_allclose(r["partial_s2"][:, 1:3], r["full_s2"][:, 1:3], rtol=1e-6)


def test_ctc_prefix_score_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_prefix_score(lucid), run_prefix_score(torch)
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6, err_msg=k)


def run_stack_layout(torch):
    # CTCPrefixScore's ``torch.stack([xnb, xb])`` of a transposed and an expanded tensor, then ``.view``
    x = torch.arange(24.0).view(2, 4, 3)
    xnb = x.transpose(0, 1)
    xb = xnb[:, :, 0].unsqueeze(2).expand(-1, -1, 3)
    s = torch.stack([xnb, xb])
    v = s.view(2, -1, 2 * 3)
    one = torch.stack([x])
    one[0, 0, 0] = 100.0  # a new tensor: the input stays
    c = torch.cat([xnb, xnb], 1)
    return dict(v=_np(v), stride=tuple(s.stride()), x00=float(x[0, 0, 0]), c=_np(c.view(-1)),
                cstride=tuple(c.stride()))


def test_stack_and_cat_make_new_row_major_tensors():
    r = run_stack_layout(lucid)
    x = np.arange(24.0).reshape(2, 4, 3)
    xnb = x.transpose(1, 0, 2)
    ref = np.stack([xnb, np.broadcast_to(xnb[:, :, :1], xnb.shape)])
    np.testing.assert_array_equal(r["v"], ref.reshape(2, -1, 6))
    assert r["stride"] == (24, 6, 3, 1) and r["cstride"] == (12, 3, 1)
    assert r["x00"] == 0.0  # was 100.0: stack of one tensor returned a view of it
    np.testing.assert_array_equal(r["c"], np.concatenate([xnb, xnb], 1).reshape(-1))


def test_stack_and_cat_make_new_row_major_tensors_torch_parity():
    torch = pytest.importorskip("torch")
    a, b = run_stack_layout(lucid), run_stack_layout(torch)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)
