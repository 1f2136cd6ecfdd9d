"""Weight-only quantized embeddings (PyTorch's ``torch.ao.nn.quantized.Embedding`` and
``EmbeddingBag``): quint8 rows, each with its own float scale and float zero point
(``per_channel_affine_float_qparams``, what ``float_qparams_weight_only_qconfig`` gives), looked up
by integer index and returned as float32.

NOTE [Quantized embedding lookup]
As fbgemm's ``embedding_byte`` / ``embedding_bag_byte`` kernels, bit for bit: a row is packed
as its integers, its float32 scale ``s`` and the float32 bias ``b = -(zero_point * s)``; a
looked-up value is ``fma(q, s, b)``. A bag accumulates its rows in order,
``acc = fma(q, s * w, acc + b * w)`` (``w`` the per-sample weight, 1 without one; ``s * w`` and
``b * w`` rounded to float32), starting from 0. The fused multiply-add runs in float64: the
product of an 8-bit integer and a float32 is exact there. Whatever ``mode`` says, the bag is
summed: PyTorch's quantized ``EmbeddingBag`` passes mode 0 (sum) to the kernel.
Quantizing rounds as PyTorch's float-qparams quantizer: ``rint(x * (1 / s) + zero_point)`` with
each step in float32, clamped to [0, 255].

Limitations: 4-bit rows (``quint4x2``) need a Lucid dtype that does not exist yet.
"""
from __future__ import annotations

import lucid
from lucid import nn
from lucid._core.quantized import QuantizedTensor, make_quantized, per_channel_affine_float_qparams

from .dynamic.modules import _Dynamic

__all__ = ["EmbeddingPackedParams", "Embedding", "EmbeddingBag", "quantize_float_qparams"]


def quantize_float_qparams(weight, scales, zero_points, axis=0, dtype=lucid.quint8):
    """``weight`` quantized per slice along ``axis`` with float scales and float zero points
    (PyTorch's ``quantize_per_channel`` given float zero points: a
    ``per_channel_affine_float_qparams`` tensor, NOTE [Quantized embedding lookup]).

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized.embedding_ops import quantize_float_qparams
    >>> q = quantize_float_qparams(lucid.tensor([[0.0, 1.0]]), lucid.tensor([0.5]), lucid.tensor([2.0]))
    >>> q.int_repr(), q.dequantize()
    (tensor([[2, 4]], dtype=lucid.uint8), tensor([[0., 1.]]))
    """
    if dtype != lucid.quint8:
        raise NotImplementedError(f"quantize_float_qparams: only lucid.quint8 rows are supported, got {dtype}")
    x = weight.detach().float()
    scales = lucid.as_tensor(scales).detach().to(device=x.device, dtype=lucid.float32)
    zero_points = lucid.as_tensor(zero_points).detach().to(device=x.device, dtype=lucid.float32)
    shape = [1] * x.ndim
    shape[axis] = -1
    with lucid.no_grad():
        inv = lucid.where(scales == 0, lucid.ones_like(scales), 1.0 / scales).reshape(shape)
        ints = lucid.round(x * inv + zero_points.reshape(shape)).clamp(0, 255).to(lucid.uint8)
    return make_quantized(ints, dtype, per_channel_affine_float_qparams, scales=scales, zero_points=zero_points,
                          axis=axis)


def _check_weight(w):
    if not isinstance(w, QuantizedTensor) or w.qscheme() is not per_channel_affine_float_qparams:
        raise RuntimeError("set_weight: Expect embedding_bag weights to be quantized using "
                           "kPerChannelAffineFloatQParams")
    if w.dtype != lucid.quint8:
        raise NotImplementedError(f"set_weight: only lucid.quint8 embedding weights are supported, got {w.dtype}")
    if w.ndim != 2 or w.q_per_channel_axis() != 0:
        raise RuntimeError("set_weight: expected a 2-D weight quantized per row (axis 0)")


class EmbeddingPackedParams(_Dynamic):
    """The quantized rows of an embedding as a submodule named ``_packed_params`` (PyTorch's
    ``EmbeddingPackedParams``): state-dict entries ``dtype`` and ``_packed_weight``.

    Examples
    --------
    >>> from lucid.ao.nn.quantized.embedding_ops import EmbeddingPackedParams
    >>> list(EmbeddingPackedParams(3, 2).state_dict())
    ['dtype', '_packed_weight']
    """

    _version = 1

    def __init__(self, num_embeddings, embedding_dim, dtype=lucid.quint8):
        super().__init__()
        if dtype != lucid.quint8:
            raise NotImplementedError("EmbeddingPackedParams: Unsupported dtype on quantized embedding! Supports "
                                      f"quint8 (quint4x2 is not available in Lucid). Got dtype: {dtype}")
        self.dtype = dtype
        self.set_weight(quantize_float_qparams(lucid.zeros(num_embeddings, embedding_dim),
                                               lucid.ones(num_embeddings), lucid.zeros(num_embeddings)))

    def set_weight(self, weight):
        _check_weight(weight)
        self._weight_q = weight
        s = weight._scales.float()
        self._rows = (weight._ints, s, -(weight._zps.float() * s))  # NOTE [Quantized embedding lookup]

    def _weight(self):
        return self._weight_q

    def _packed_state(self):
        return {"dtype": self.dtype, "_packed_weight": self._weight_q}

    def _unpack_state(self, found):
        if "dtype" in found:
            self.dtype = found["dtype"]
        if "_packed_weight" in found:
            self.set_weight(found["_packed_weight"])

    def forward(self, x):
        return x

    def __repr__(self):
        return repr(self._weight_q)


def _check_indices(indices, n, name):
    if not isinstance(indices, lucid.Tensor) or indices.dtype not in (lucid.int32, lucid.int64):
        got = indices.dtype if isinstance(indices, lucid.Tensor) else type(indices).__name__
        raise RuntimeError(f"{name}: Expect 32 or 64 bit indices, but found {got} instead.")
    if indices.ndim not in (1, 2):
        raise RuntimeError(f"{name}: qembedding/qembedding_bag operator supports 1 or 2d indices, got "
                           f"{indices.ndim}")
    flat = indices.reshape(-1)
    bad = (flat < 0) | (flat >= n)
    if flat.numel() and bad.any().item():
        i = int(bad.to(lucid.int64).argmax().item())
        raise RuntimeError(f"{name}: Index {i} is out of bounds: {int(flat[i].item())}, range 0 to {n}")
    return flat


def _fma(a, b, c):
    return (a.double() * b.double() + c.double()).float()


class Embedding(nn.Module):
    """An embedding table of quint8 rows with float per-row qparams, looked up as fbgemm's
    ``embedding_byte`` (NOTE [Quantized embedding lookup]); made by ``from_float`` after
    ``prepare`` with ``float_qparams_weight_only_qconfig``, or by ``quantize_dynamic``.

    Indices are 1-D or 2-D int32/int64; the output is float32 of shape ``indices.shape + (dim,)``.
    ``padding_idx``, ``max_norm`` ... are accepted and ignored, as PyTorch's.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import Embedding
    >>> from lucid.ao.nn.quantized.embedding_ops import quantize_float_qparams
    >>> e = Embedding(2, 2)
    >>> e.set_weight(quantize_float_qparams(lucid.tensor([[0.0, 1.0], [2.0, 4.0]]), lucid.tensor([0.5, 1.0]),
    ...                                     lucid.tensor([0.0, -2.0])))
    >>> e(lucid.tensor([1, 0, 1]))
    tensor([[2., 4.],
            [0., 1.],
            [2., 4.]])
    """

    _version = 1

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, dtype=lucid.quint8):
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.dtype = num_embeddings, embedding_dim, dtype
        self._packed_params = EmbeddingPackedParams(num_embeddings, embedding_dim, dtype)
        if _weight is not None:
            if list(_weight.shape) != [num_embeddings, embedding_dim]:
                raise AssertionError("Shape of weight does not match num_embeddings and embedding_dim: expected "
                                     f"{[num_embeddings, embedding_dim]}, got {list(_weight.shape)}")
            self._packed_params.set_weight(_weight)

    def _get_name(self):
        return "QuantizedEmbedding"

    def extra_repr(self):
        return (f"num_embeddings={self.num_embeddings}, embedding_dim={self.embedding_dim}, "
                f"dtype={self._packed_params.dtype}, qscheme={self.weight().qscheme()}")

    def __repr__(self):  # the packed rows are not shown as a child, as PyTorch's
        return f"{self._get_name()}({self.extra_repr()})"

    def set_weight(self, w):
        self._packed_params.set_weight(w)

    def weight(self):
        return self._packed_params._weight()

    def _rows(self, device):
        ints, scales, biases = self._packed_params._rows
        return ints.to(device), scales.to(device), biases.to(device)

    def forward(self, indices):
        flat = _check_indices(indices, self.num_embeddings, "embedding_byte")
        ints, scales, biases = self._rows(indices.device)
        out = _fma(ints.index_select(0, flat), scales.index_select(0, flat)[:, None],
                   biases.index_select(0, flat)[:, None])
        return out.reshape(*indices.shape, self.embedding_dim)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The quantized form of an ``nn.Embedding`` with a ``float_qparams`` weight qconfig."""
        wobs = _weight_observer(cls, mod, nn.Embedding)
        q = cls(mod.num_embeddings, mod.embedding_dim)
        q.set_weight(_quantize_rows(mod, wobs))
        return q


def _weight_observer(cls, mod, float_cls):
    if hasattr(mod, "weight_fake_quant"):
        from lucid.ao.nn import qat

        qat_cls = getattr(qat, float_cls.__name__)
        if type(mod) is not qat_cls:
            raise AssertionError(f"nnq.{cls.__name__}.from_float with fake quant only works for {qat_cls.__name__}")
        wobs = mod.weight_fake_quant
    else:
        if type(mod) is not float_cls:
            raise AssertionError(f"nnq.{cls.__name__}.from_float only works for {float_cls.__name__}")
        if not hasattr(mod, "qconfig"):
            raise AssertionError(f"{float_cls.__name__} input float module must have qconfig defined")
        if mod.qconfig is not None and mod.qconfig.weight is not None:
            wobs = mod.qconfig.weight()
        else:
            from lucid.ao.quantization.qconfig import float_qparams_weight_only_qconfig

            wobs = float_qparams_weight_only_qconfig.weight()
    if wobs.qscheme != per_channel_affine_float_qparams:
        raise AssertionError(f"{float_cls.__name__} quantization is only supported with "
                             "float_qparams_weight_only_qconfig.")
    if wobs.dtype != lucid.quint8:
        raise AssertionError(f"The only supported dtype for nnq.{cls.__name__} is lucid.quint8 (quint4x2 is not "
                             f"available in Lucid), got {wobs.dtype}")
    return wobs


def _quantize_rows(mod, wobs):
    from .dynamic.modules import _quantize_weight

    wobs(mod.weight)
    return _quantize_weight(mod.weight.float(), wobs)


class EmbeddingBag(Embedding):
    """Sums of bags of quantized embedding rows, as fbgemm's ``embedding_bag_byte`` (NOTE
    [Quantized embedding lookup]): ``forward(indices, offsets=None, per_sample_weights=None,
    compressed_indices_mapping=None)``.

    1-D indices need ``offsets`` (one start per bag, plus the end with
    ``include_last_offset=True``); 2-D indices are bags of equal size. The bags are summed
    whatever ``mode`` says, as PyTorch's quantized EmbeddingBag does; an empty bag is zeros.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.quantized import EmbeddingBag
    >>> from lucid.ao.nn.quantized.embedding_ops import quantize_float_qparams
    >>> bag = EmbeddingBag(2, 2)
    >>> bag.set_weight(quantize_float_qparams(lucid.tensor([[0.0, 1.0], [2.0, 4.0]]), lucid.tensor([0.5, 1.0]),
    ...                                       lucid.tensor([0.0, -2.0])))
    >>> bag(lucid.tensor([1, 0, 1]), lucid.tensor([0, 1]))
    tensor([[2., 4.],
            [2., 5.]])
    """

    _version = 1

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="sum", sparse=False, _weight=None, include_last_offset=False, dtype=lucid.quint8):
        super().__init__(num_embeddings, embedding_dim, _weight=_weight, dtype=dtype)
        self.mode, self.pruned_weights, self.include_last_offset = mode, False, include_last_offset

    def _get_name(self):
        return "QuantizedEmbeddingBag"

    def _bags(self, indices, offsets):
        """``(flat indices, [(start, end) per bag])``, the bounds read on the host."""
        name = "embedding_bag_byte"
        flat = _check_indices(indices, self.num_embeddings, name)
        if indices.ndim == 2:
            rows, cols = indices.shape
            starts = [i * cols for i in range(rows)]
        elif offsets is None:
            raise RuntimeError(f"{name} expects offsets to be set for 1D indices.")
        else:
            if offsets.dtype not in (lucid.int32, lucid.int64) or offsets.ndim != 1:
                raise RuntimeError(f"{name}: offsets must be a 1-D int32/int64 tensor")
            starts = [int(v) for v in offsets.tolist()]
        n = flat.shape[0]
        ends = starts[1:] + [n]
        if self.include_last_offset:
            starts, ends = starts[:-1], ends[:-1]
        if any(s < 0 or e > n or s > e for s, e in zip(starts, ends)):
            raise RuntimeError(f"{name}: offsets must be nondecreasing, start at or after 0 and end at or before "
                               f"the number of indices ({n})")
        return flat, list(zip(starts, ends))

    def forward(self, indices, offsets=None, per_sample_weights=None, compressed_indices_mapping=None):
        if compressed_indices_mapping is not None:
            raise NotImplementedError("embedding_bag_byte: pruned weights (compressed_indices_mapping) are not "
                                      "supported")
        flat, bags = self._bags(indices, offsets)
        if per_sample_weights is not None and tuple(per_sample_weights.shape) != (flat.shape[0],):
            raise RuntimeError("embedding_bag_byte: expected per_sample_weights to be 1-D with one weight per "
                               f"index ({flat.shape[0]}), got shape {tuple(per_sample_weights.shape)}")
        ints, scales, biases = self._rows(indices.device)
        width = max((e - s for s, e in bags), default=0)
        acc = lucid.zeros(len(bags), self.embedding_dim, device=indices.device)
        if width == 0:
            return acc
        # the k-th entry of every bag at once; a bag shorter than k adds fma(0, q, acc + 0) = acc
        pos = [[s + k if s + k < e else 0 for k in range(width)] for s, e in bags]
        live = [[s + k < e for k in range(width)] for s, e in bags]
        pos = lucid.tensor(pos, dtype=lucid.int64, device=indices.device)
        live = lucid.tensor(live, device=indices.device)
        rows = flat.index_select(0, pos.reshape(-1)).reshape(pos.shape)
        w = live.float()
        if per_sample_weights is not None:
            w = w * per_sample_weights.float().index_select(0, pos.reshape(-1)).reshape(pos.shape)
        scale = scales[rows] * w
        bias = biases[rows] * w
        for k in range(width):
            q = ints.index_select(0, rows[:, k])
            acc = _fma(q, scale[:, k, None], acc + bias[:, k, None])
        return acc

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        """The quantized form of an ``nn.EmbeddingBag`` with a ``float_qparams`` weight qconfig."""
        wobs = _weight_observer(cls, mod, nn.EmbeddingBag)
        q = cls(mod.num_embeddings, mod.embedding_dim, max_norm=mod.max_norm, norm_type=mod.norm_type,
                scale_grad_by_freq=mod.scale_grad_by_freq, mode=mod.mode, sparse=mod.sparse,
                include_last_offset=mod.include_last_offset, dtype=wobs.dtype)
        q.set_weight(_quantize_rows(mod, wobs))
        return q
