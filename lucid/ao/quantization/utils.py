"""Helpers of the quantization workflows (PyTorch's ``torch.ao.quantization.utils``)."""
from __future__ import annotations

import warnings

import lucid
from lucid._core.quantized import (per_channel_affine, per_channel_affine_float_qparams, per_channel_symmetric,
                                   per_tensor_affine, per_tensor_symmetric)

__all__ = ["calculate_qmin_qmax", "check_min_max_valid", "validate_qmin_qmax", "is_per_tensor", "is_per_channel"]


def is_per_tensor(qscheme):
    return qscheme in (per_tensor_affine, per_tensor_symmetric)


def is_per_channel(qscheme):
    return qscheme in (per_channel_affine, per_channel_affine_float_qparams, per_channel_symmetric)


def validate_qmin_qmax(quant_min, quant_max):
    """A user range must contain 0 and be non-empty (PyTorch's check)."""
    if not quant_min <= 0 <= quant_max:
        raise AssertionError("Used-specified quantization range must include 0.")
    if quant_min >= quant_max:
        raise AssertionError("qmin must be strictly less than qmax for user-specified quantization range.")


def calculate_qmin_qmax(quant_min, quant_max, has_customized_qrange, dtype, reduce_range):
    """The integer range an observer maps to, PyTorch's rule (``reduce_range`` halves it).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.quantization.utils import calculate_qmin_qmax
    >>> calculate_qmin_qmax(None, None, False, lucid.quint8, True)
    (0, 127)
    """
    if has_customized_qrange:
        wide = dtype in (lucid.qint32, lucid.int32)
        lo, hi = (0, 2 ** 32 - 1) if wide else (0, 255)
        if quant_min is not None and quant_max is not None:
            lo, hi = quant_min, quant_max
        qrange = hi - lo + 1
        if dtype in (lucid.qint8, lucid.int8) and not 0 < qrange <= 256:
            raise AssertionError("quantization range should be positive and not exceed the maximum bit range (=256).")
        if wide and not 0 < qrange <= 2 ** 32:
            raise AssertionError("quantization range should be positive and not exceed the maximum bit range "
                                 "(=4294967296).")
        if reduce_range:
            quant_min, quant_max = quant_min // 2, quant_max // 2
        return quant_min, quant_max
    if dtype in (lucid.qint8, lucid.int8):
        return (-64, 63) if reduce_range else (-128, 127)
    if dtype in (lucid.quint8, lucid.uint8):
        return (0, 127) if reduce_range else (0, 255)
    if dtype in (lucid.qint32, lucid.int32):
        return -(2 ** 31), 2 ** 31 - 1
    if dtype == lucid.uint16:
        return 0, 2 ** 16 - 1
    if dtype == lucid.int16:
        return -(2 ** 15), 2 ** 15 - 1
    return 0, 15


def check_min_max_valid(min_val, max_val):
    """False (with PyTorch's warning) until an observer has seen data; raises if min > max."""
    if min_val.numel() == 0 or max_val.numel() == 0:
        warnings.warn("must run observer before calling calculate_qparams. Returning default values.", stacklevel=2)
        return False
    if min_val.dim() == 0 or max_val.dim() == 0:
        if float(min_val) == float("inf") and float(max_val) == float("-inf"):
            warnings.warn("must run observer before calling calculate_qparams. Returning default values.",
                          stacklevel=2)
            return False
        if float(min_val) > float(max_val):
            raise AssertionError(f"min {min_val} should be less than max {max_val}")
    elif bool((min_val > max_val).any()):
        raise AssertionError(f"min {min_val} should be less than max {max_val}")
    return True
