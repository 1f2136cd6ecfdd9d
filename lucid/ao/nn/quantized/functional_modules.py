"""``FloatFunctional`` (observed float arithmetic for eager quantization) and ``QFunctional``
(what ``convert`` makes of it), PyTorch's ``torch.ao.nn.quantized.FloatFunctional`` pair.

Quantized add / add_relu / cat dequantize, compute in float32 and requantize to the observed
scale and zero point; ``mul`` requantizes the integer product; ``add_scalar`` and
``mul_scalar`` pick their output quantizer from the input's, as PyTorch's kernels do (a
shifted zero point, or a scaled / mirrored scale, widened only when the result leaves the
dtype's range).
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid._core.quantized import PER_TENSOR, RANGE, QuantizedTensor, make_quantized, quantize_per_tensor

from .._nn_utils import observed_qparams

__all__ = ["FloatFunctional", "QFunctional", "add_scalar", "mul_scalar"]


class FloatFunctional(nn.Module):
    """Float ``add``, ``mul``, ``add_relu``, ``cat``, ``add_scalar``, ``mul_scalar`` whose
    outputs pass through ``activation_post_process`` (an observer after ``prepare``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import FloatFunctional
    >>> FloatFunctional().add(lucid.tensor([1.0]), lucid.tensor([2.0]))
    tensor([3.])
    """

    def __init__(self):
        super().__init__()
        self.activation_post_process = nn.Identity()

    def forward(self, x):
        raise RuntimeError("FloatFunctional is not intended to use the 'forward'. Please use the underlying "
                           "operation")

    def add(self, x, y):
        return self.activation_post_process(lucid.add(x, y))

    def add_scalar(self, x, y):
        return lucid.add(x, y)  # PyTorch observes no scalar op: the quantized kernel picks the qparams

    def mul(self, x, y):
        return self.activation_post_process(lucid.mul(x, y))

    def mul_scalar(self, x, y):
        return lucid.mul(x, y)

    def cat(self, x, dim=0):
        return self.activation_post_process(lucid.cat(x, dim=dim))

    def add_relu(self, x, y):
        return self.activation_post_process(nn.functional.relu(lucid.add(x, y)))

    def matmul(self, x, y):
        return self.activation_post_process(lucid.matmul(x, y))


def _check(x, name):
    if not isinstance(x, QuantizedTensor) or x.qscheme() not in PER_TENSOR:
        raise RuntimeError(f"{name}: expected a per-tensor quantized tensor, got {x.dtype}")
    return x


def add_scalar(x, c):
    """``x + c`` for quantized ``x``: the zero point moves by ``round(c / scale)`` while it stays
    in range (the integers are kept); otherwise the range widens to hold the shifted values."""
    _check(x, "add_scalar")
    s, z, c = x.q_scale(), x.q_zero_point(), float(c)
    lo, hi = RANGE[x.dtype]
    c_q = round(c / s)
    if lo <= z - c_q <= hi:
        return make_quantized(x._ints, x.dtype, x.qscheme(), s, z - c_q)
    if z - c_q < lo:  # the shifted zero point in integer steps, as PyTorch widens the range
        s2, z2 = (hi - (z - c_q)) / (hi - lo) * s, lo
    else:
        s2, z2 = ((z - c_q) - lo) / (hi - lo) * s, hi
    return quantize_per_tensor(x.dequantize() + c, s2, z2, x.dtype)


def mul_scalar(x, c):
    """``x * c`` for quantized ``x``: the integers are kept with the scale times ``|c|``
    (mirrored about the range for ``c < 0``); ``c == 0`` gives zeros with scale 1."""
    _check(x, "mul_scalar")
    s, z, c = x.q_scale(), x.q_zero_point(), float(c)
    lo, hi = RANGE[x.dtype]
    if c == 0:
        return make_quantized(lucid.zeros_like(x._ints), x.dtype, x.qscheme(), 1.0, 0)
    if c > 0:
        return make_quantized(x._ints, x.dtype, x.qscheme(), s * c, z)
    ints = (hi + lo - x._ints.to(lucid.int64)).to(x._ints.dtype)
    return make_quantized(ints, x.dtype, x.qscheme(), s * -c, hi - (z - lo))


class QFunctional(nn.Module):
    """The quantized ``FloatFunctional``: each op's output is quantized with ``scale`` and
    ``zero_point`` (the observed ones after ``convert``)."""

    def __init__(self):
        super().__init__()
        self.scale, self.zero_point = 1.0, 0
        self.activation_post_process = nn.Identity()

    def _get_name(self):
        return "QFunctional"

    def extra_repr(self):
        return f"scale={self.scale}, zero_point={self.zero_point}"

    def forward(self, x):
        raise RuntimeError("Functional is not intended to use the 'forward'. Please use the underlying operation")

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        destination[prefix + "scale"] = lucid.tensor(self.scale)
        destination[prefix + "zero_point"] = lucid.tensor(self.zero_point)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        self.scale = float(state_dict.pop(prefix + "scale"))
        self.zero_point = int(state_dict.pop(prefix + "zero_point"))
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)

    def _requant(self, x, values):
        return quantize_per_tensor(values, self.scale, self.zero_point, x.dtype)

    def add(self, x, y):
        _check(x, "add"), _check(y, "add")
        return self._requant(x, x.dequantize() + y.dequantize())

    def add_relu(self, x, y):
        _check(x, "add_relu"), _check(y, "add_relu")
        return self._requant(x, nn.functional.relu(x.dequantize() + y.dequantize()))

    def mul(self, x, y):
        _check(x, "mul"), _check(y, "mul")
        import numpy as np

        lo, hi = RANGE[x.dtype]
        prod = (x._ints.to(lucid.int64) - x.q_zero_point()) * (y._ints.to(lucid.int64) - y.q_zero_point())
        mult = float(np.float32(np.float32(x.q_scale()) * np.float32(y.q_scale()) / np.float32(self.scale)))
        ints = lucid.round(prod.float() * mult).double() + self.zero_point
        return make_quantized(ints.clamp(lo, hi).to(x._ints.dtype), x.dtype, lucid.per_tensor_affine,
                              self.scale, self.zero_point)

    def add_scalar(self, x, y):
        return add_scalar(x, y)

    def mul_scalar(self, x, y):
        return mul_scalar(x, y)

    def cat(self, x, dim=0):
        return self._requant(x[0], lucid.cat([t.dequantize() for t in x], dim=dim))

    def matmul(self, x, y):
        return self._requant(x, lucid.matmul(x.dequantize(), y.dequantize()))

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        q = cls()
        q.scale, q.zero_point = observed_qparams(mod.activation_post_process)
        return q
