"""Quantization-aware-training embeddings (PyTorch's ``torch.ao.nn.qat.Embedding`` and
``EmbeddingBag``): float tables whose weight goes through the qconfig's weight fake-quantize
(per row, float scale and float zero point: ``default_embedding_qat_qconfig``) on every forward;
``convert`` with ``get_embedding_static_quant_module_mappings()`` turns them into the quantized
``Embedding`` / ``EmbeddingBag`` (NOTE [Quantized embedding lookup])."""
from __future__ import annotations

from lucid import nn
from lucid._core.quantized import per_channel_affine_float_qparams
from lucid.nn import functional as F

__all__ = ["Embedding", "EmbeddingBag"]


def _check_qconfig(qconfig, what):
    if not qconfig:
        raise AssertionError("qconfig must be provided for QAT module")
    qscheme = qconfig.weight().qscheme
    if qscheme != per_channel_affine_float_qparams:
        raise AssertionError(f"{what} weights requires a qscheme of lucid.per_channel_affine_float_qparams Got "
                             f"{qscheme}")
    return qconfig


def _check_float(cls, mod, what):
    if type(mod) is not cls._FLOAT_MODULE:
        raise AssertionError(f" qat.{cls.__name__}.from_float only works for {cls._FLOAT_MODULE.__name__}")
    if not hasattr(mod, "qconfig"):
        raise AssertionError("Input float module must have qconfig defined")
    if not mod.qconfig:
        raise AssertionError("Input float module must have a valid qconfig")
    return _check_qconfig(mod.qconfig, what)


class Embedding(nn.Embedding):
    """An ``nn.Embedding`` whose table is fake-quantized by ``weight_fake_quant`` on each lookup.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.qat import Embedding
    >>> from lucid.ao.quantization import default_embedding_qat_qconfig
    >>> e = Embedding(3, 2, qconfig=default_embedding_qat_qconfig)
    >>> e(lucid.tensor([0, 2])).shape
    (2, 2)
    """

    _FLOAT_MODULE = nn.Embedding

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, device=None, dtype=None, qconfig=None):
        super().__init__(num_embeddings, embedding_dim, padding_idx, max_norm, norm_type, scale_grad_by_freq,
                         sparse, _weight, device=device, dtype=dtype)
        self.qconfig = _check_qconfig(qconfig, "Embedding")
        self.weight_fake_quant = qconfig.weight()

    def forward(self, input):
        return F.embedding(input, self.weight_fake_quant(self.weight), self.padding_idx, self.max_norm,
                           self.norm_type, self.scale_grad_by_freq, self.sparse)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        qconfig = _check_float(cls, mod, "Embedding")
        return cls(mod.num_embeddings, mod.embedding_dim, mod.padding_idx, mod.max_norm, mod.norm_type,
                   mod.scale_grad_by_freq, mod.sparse, mod.weight, qconfig=qconfig)

    def to_float(self):
        e = nn.Embedding(self.num_embeddings, self.embedding_dim, self.padding_idx, self.max_norm, self.norm_type,
                         self.scale_grad_by_freq, self.sparse, None)
        e.weight = nn.Parameter(self.weight.detach())
        e.train(self.training)
        return e


class EmbeddingBag(nn.EmbeddingBag):
    """An ``nn.EmbeddingBag`` whose table is fake-quantized by ``weight_fake_quant`` on each call.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.nn.qat import EmbeddingBag
    >>> from lucid.ao.quantization import default_embedding_qat_qconfig
    >>> b = EmbeddingBag(3, 2, mode="sum", qconfig=default_embedding_qat_qconfig)
    >>> b(lucid.tensor([0, 2, 1]), lucid.tensor([0, 2])).shape
    (2, 2)
    """

    _FLOAT_MODULE = nn.EmbeddingBag

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="mean", sparse=False, _weight=None, include_last_offset=False, padding_idx=None, qconfig=None,
                 device=None, dtype=None):
        super().__init__(num_embeddings, embedding_dim, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                         _weight, include_last_offset, padding_idx, device=device, dtype=dtype)
        self.qconfig = _check_qconfig(qconfig, "Embedding Bag")
        self.weight_fake_quant = qconfig.weight()

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight_fake_quant(self.weight), offsets, self.max_norm, self.norm_type,
                               self.scale_grad_by_freq, self.mode, self.sparse, per_sample_weights,
                               self.include_last_offset, self.padding_idx)

    @classmethod
    def from_float(cls, mod, use_precomputed_fake_quant=False):
        qconfig = _check_float(cls, mod, "Embedding Bag")
        return cls(mod.num_embeddings, mod.embedding_dim, mod.max_norm, mod.norm_type, mod.scale_grad_by_freq,
                   mod.mode, mod.sparse, mod.weight, mod.include_last_offset, mod.padding_idx, qconfig=qconfig)

    def to_float(self):
        b = nn.EmbeddingBag(self.num_embeddings, self.embedding_dim, self.max_norm, self.norm_type,
                            self.scale_grad_by_freq, self.mode, self.sparse, None, self.include_last_offset,
                            self.padding_idx)
        b.weight = nn.Parameter(self.weight.detach())
        b.train(self.training)
        return b

