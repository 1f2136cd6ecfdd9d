"""``HistogramObserver`` (PyTorch's, the x86 / fbgemm default for activations): a running
histogram of the values seen, and min/max chosen by minimising the L2 quantization error.

The histogram work is Lucid ops in float32 as PyTorch's (``histc``, ``bucketize``,
``bincount``); the search walks the cumulative histogram on the host once per
``calculate_qparams`` (PyTorch's loop reads one element per step), comparing in float32 as a
float32 tensor against a Python number does.
"""
from __future__ import annotations

import warnings

import numpy as np

import lucid

from .observer import _EPS, UniformQuantizationObserverBase, _observed
from .utils import is_per_tensor

__all__ = ["HistogramObserver"]

_F32 = np.float32


class HistogramObserver(UniformQuantizationObserverBase):
    """Record a histogram of the values seen; ``calculate_qparams`` searches it for the
    min/max whose quantization error (L2) is smallest, then computes the scale and zero point
    as ``MinMaxObserver`` does.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization import HistogramObserver
    >>> obs = HistogramObserver(bins=64)
    >>> _ = obs(lucid.linspace(-1.0, 3.0, 200))
    >>> [round(float(v), 6) for v in obs.calculate_qparams()[0]], obs.calculate_qparams()[1].tolist()
    ([0.015441], [65])
    """

    def __init__(self, bins=2048, dtype=lucid.quint8, qscheme=lucid.per_tensor_affine, reduce_range=False,
                 quant_min=None, quant_max=None, factory_kwargs=None, eps=_EPS, is_dynamic=False, **kwargs):
        if not is_per_tensor(qscheme):
            raise NotImplementedError("HistogramObserver's qscheme only support torch.per_tensor_symmetric "
                                      "and torch.per_tensor_affine.")
        if is_dynamic:
            raise NotImplementedError("HistogramObserver doesn't support dynamic quantization")
        super().__init__(dtype=dtype, qscheme=qscheme, reduce_range=reduce_range, quant_min=quant_min,
                         quant_max=quant_max, factory_kwargs=factory_kwargs, eps=eps, is_dynamic=is_dynamic,
                         **kwargs)
        self.bins = bins
        self.register_buffer("histogram", lucid.zeros(bins))
        self.register_buffer("min_val", lucid.tensor(float("inf")))
        self.register_buffer("max_val", lucid.tensor(float("-inf")))
        self.dst_nbins = 2 ** (8 * dtype.itemsize)
        self.upsample_rate = 16  # finer bins when an old histogram is spread over a wider range

    # ----------------------------------------------------------- the error of a candidate range
    @staticmethod
    def _get_norm(delta_begin, delta_end, density):
        return density * ((delta_end * delta_end * delta_end - delta_begin * delta_begin * delta_begin) / 3)

    def _compute_quantization_error(self, next_start_bin, next_end_bin):
        bin_width = (self.max_val.item() - self.min_val.item()) / self.bins
        dst_bin_width = bin_width * (next_end_bin - next_start_bin + 1) / self.dst_nbins
        if dst_bin_width == 0.0:
            return 0.0
        dev = self.histogram.device
        src_bin = lucid.arange(self.bins, device=dev)
        src_bin_begin = (src_bin - next_start_bin) * bin_width
        src_bin_end = src_bin_begin + bin_width
        dst_bin_of_begin = lucid.clamp(lucid.div(src_bin_begin, dst_bin_width, rounding_mode="floor"), 0,
                                       self.dst_nbins - 1)
        dst_bin_of_begin_center = (dst_bin_of_begin + 0.5) * dst_bin_width
        dst_bin_of_end = lucid.clamp(lucid.div(src_bin_end, dst_bin_width, rounding_mode="floor"), 0,
                                     self.dst_nbins - 1)
        density = self.histogram / bin_width
        norm = lucid.zeros(self.bins, device=dev)
        norm = norm + self._get_norm(src_bin_begin - dst_bin_of_begin_center,
                                     lucid.ones(self.bins, device=dev) * (dst_bin_width / 2), density)
        half = lucid.tensor(dst_bin_width / 2, device=dev)
        norm = norm + (dst_bin_of_end - dst_bin_of_begin - 1) * self._get_norm(-half, half, density)
        dst_bin_of_end_center = dst_bin_of_end * dst_bin_width + dst_bin_width / 2
        norm = norm + self._get_norm(lucid.tensor(-dst_bin_width / 2, device=dev),
                                     src_bin_end - dst_bin_of_end_center, density)
        return norm.sum().item()

    def _non_linear_param_search(self):
        if self.histogram.shape[0] != self.bins:
            raise AssertionError("bins mismatch")
        total = lucid.sum(self.histogram).item()
        c_sum = lucid.cumsum(self.histogram, dim=0).tolist()  # one explicit copy for the walk below
        stepsize, alpha, beta = 1e-5, 0.0, 1.0
        start_bin, end_bin = 0, self.bins - 1
        norm_min = float("inf")
        while alpha < beta:
            next_alpha, next_beta = alpha + stepsize, beta - stepsize
            lo_bound, hi_bound = float(_F32(next_alpha * total)), float(_F32(next_beta * total))
            left, right = start_bin, end_bin
            while left < end_bin and c_sum[left] < lo_bound:
                left += 1
            while right > start_bin and c_sum[right] > hi_bound:
                right -= 1
            next_start_bin, next_end_bin = start_bin, end_bin
            if (left - start_bin) > (end_bin - right):
                next_start_bin, alpha = left, next_alpha
            else:
                next_end_bin, beta = right, next_beta
            if next_start_bin == start_bin and next_end_bin == end_bin:
                continue
            norm = self._compute_quantization_error(next_start_bin, next_end_bin)
            if norm > norm_min:
                break
            norm_min, start_bin, end_bin = norm, next_start_bin, next_end_bin
        bin_width = (self.max_val - self.min_val) / self.bins
        return self.min_val + bin_width * start_bin, self.min_val + bin_width * (end_bin + 1)

    # ----------------------------------------------------------- combining histograms
    def _upscale_histogram(self, histogram, orig_min, orig_max, update_min, update_max):
        rate = self.upsample_rate
        histogram = histogram.repeat_interleave(rate) / rate
        bin_size = (orig_max - orig_min) / (self.bins * rate)
        # the endpoints as numbers, as PyTorch's linspace reads 0-d tensors
        mids = lucid.linspace(orig_min.item(), orig_max.item(), self.bins * rate + 1,
                              device=histogram.device)[:-1] + 0.5 * bin_size
        edges = lucid.linspace(update_min.item(), update_max.item(), self.bins + 1, device=histogram.device)
        buckets = lucid.clamp(lucid.bucketize(mids, edges, right=True) - 1, 0, self.bins - 1)
        return lucid.bincount(buckets, weights=histogram, minlength=self.bins)

    def _combine_histograms(self, orig_hist, orig_min, orig_max, update_hist, update_min, update_max):
        if bool(update_min == orig_min) and bool(update_max == orig_max):
            return orig_hist + update_hist
        if bool(orig_min == orig_max):
            bin_value = lucid.sum(orig_hist)
            return lucid.histc(orig_min, bins=self.bins, min=update_min, max=update_max) * bin_value + update_hist
        if bool(update_min > orig_min):
            raise AssertionError("update_min must be <= orig_min")
        if bool(update_max < orig_max):
            raise AssertionError("update_max must be >= orig_max")
        return update_hist + self._upscale_histogram(orig_hist, orig_min, orig_max, update_min, update_max)

    def reset_histogram(self, x, min_val, max_val):
        self.min_val, self.max_val = min_val.clone(), max_val.clone()
        if min_val.numel() != 1 or max_val.numel() != 1:
            raise AssertionError("histogram min/max values must be scalar.")
        self.histogram = lucid.histc(x, self.bins, min=min_val, max=max_val)

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        x = _observed(x_orig)
        x_min, x_max = lucid.aminmax(x)
        if bool(x_min == -float("inf")) or bool(x_max == float("inf")):
            warnings.warn("torch.inf detected in input tensor, ignoring input", stacklevel=2)
            x = x[x.abs() != float("inf")]
            if x.numel() == 0:
                return x_orig
            x_min, x_max = lucid.aminmax(x)
        cur_min, cur_max = self.min_val.to(x.device), self.max_val.to(x.device)
        if bool(cur_min == float("inf")) or bool(cur_max == -float("inf")):
            self.reset_histogram(x, x_min, x_max)
            return x_orig
        new_min, new_max = lucid.minimum(cur_min, x_min), lucid.maximum(cur_max, x_max)
        update = lucid.histc(x, self.bins, min=new_min, max=new_max)
        hist = self.histogram.to(x.device)
        if bool(new_min == cur_min) and bool(new_max == cur_max):
            self.histogram = hist + update
        else:
            self.histogram = self._combine_histograms(hist, cur_min, cur_max, update, new_min,
                                                      new_max).float()
            self.min_val, self.max_val = new_min, new_max
        return x_orig

    def calculate_qparams(self):
        if bool(self.min_val == float("inf")) and bool(self.max_val == -float("inf")):
            warnings.warn("must run observer before calling calculate_qparams. Returning default scale and "
                          "zero point ", stacklevel=2)
            return lucid.tensor([1.0], device=self.min_val.device), lucid.tensor([0], device=self.min_val.device)
        if self.bins != len(self.histogram):
            raise AssertionError("The number of bins in histogram should be equal to the number of bins supplied "
                                 "while making this observer")
        new_min, new_max = self._non_linear_param_search()
        return self._calculate_qparams(new_min, new_max)

    def extra_repr(self):
        return f"min_val={self.min_val}, max_val={self.max_val}"


default_histogram_observer = HistogramObserver.with_args(quant_min=0, quant_max=127)
