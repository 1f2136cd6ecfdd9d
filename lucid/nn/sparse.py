"""``Embedding``: a lookup table of vectors."""
from __future__ import annotations

from .._core import backend

from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter

__all__ = ["Embedding", "EmbeddingBag"]


def _table_options_repr(m, sparse=True):
    # PyTorch's order; EmbeddingBag's repr never shows sparse
    s = ""
    if m.norm_type != 2:
        s += f", norm_type={m.norm_type}"
    if m.scale_grad_by_freq is not False:
        s += f", scale_grad_by_freq={m.scale_grad_by_freq}"
    if sparse and m.sparse is not False:
        s += ", sparse=True"
    return s


class Embedding(Module):
    """Rows of ``weight`` (num_embeddings, embedding_dim) looked up by integer index.

    The weight is initialised from N(0, 1); the ``padding_idx`` row is zeroed and gets no
    gradient.

    Parameters
    ----------
    num_embeddings : int
        Size of the vocabulary.
    embedding_dim : int
        Size of each vector.
    padding_idx : int, optional
        This row gets no gradient (and starts at zero).
    max_norm : float, optional
        Renormalise looked-up rows to at most this norm.
    _weight : Tensor, optional
        Use this as the weight.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> emb = nn.Embedding(10, 3, padding_idx=0)
    >>> emb(lucid.tensor([[0, 2]])).shape
    (1, 2, 3)
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None, norm_type=2.0,
                 scale_grad_by_freq=False, sparse=False, _weight=None, _freeze=False, device=None,
                 dtype=None):
        super().__init__()
        import lucid

        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Embedding: padding_idx must be within num_embeddings")
            if padding_idx < 0:
                padding_idx += num_embeddings
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(lucid.empty(num_embeddings, embedding_dim, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError("Embedding: shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with backend.on_device(self.weight):  # NOTE [Several devices]
                self.weight._data[self.padding_idx] = 0

    def forward(self, input):
        return F.embedding(input, self.weight, padding_idx=self.padding_idx, max_norm=self.max_norm,
                           norm_type=self.norm_type, scale_grad_by_freq=self.scale_grad_by_freq,
                           sparse=self.sparse)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        return s + _table_options_repr(self)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, sparse=False):
        """An Embedding whose weight is ``embeddings`` (frozen unless ``freeze=False``)."""
        if embeddings.ndim != 2:
            raise ValueError("Embedding.from_pretrained: embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)


class EmbeddingBag(Module):
    """Sums, means or maxima of bags of embeddings (see ``F.embedding_bag``);
    ``forward(input, offsets=None, per_sample_weights=None)``.

    Parameters
    ----------
    num_embeddings, embedding_dim : int
        Table size.
    mode : {'mean', 'sum', 'max'}
        How a bag is reduced.
    padding_idx : int, optional
        Entries with this index are left out of every bag (the row starts at zero).
    include_last_offset : bool
        ``offsets`` has one entry per bag plus the end.
    max_norm : float, optional
        Renormalise looked-up rows to at most this norm.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> bag = nn.EmbeddingBag(10, 3, mode="sum")
    >>> bag(lucid.tensor([1, 2, 4, 5, 4]), lucid.tensor([0, 2])).shape
    (2, 3)
    """

    def __init__(self, num_embeddings, embedding_dim, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                 mode="mean", sparse=False, _weight=None, include_last_offset=False, padding_idx=None,
                 device=None, dtype=None):
        super().__init__()
        import lucid

        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("EmbeddingBag: padding_idx must be within num_embeddings")
            padding_idx = padding_idx + num_embeddings if padding_idx < 0 else padding_idx
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = Parameter(lucid.empty(num_embeddings, embedding_dim, dtype=dtype))
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError("EmbeddingBag: shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with backend.on_device(self.weight):  # NOTE [Several devices]
                self.weight._data[self.padding_idx] = 0

    def forward(self, input, offsets=None, per_sample_weights=None):
        return F.embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                               self.mode, self.sparse, per_sample_weights, self.include_last_offset,
                               self.padding_idx)

    def extra_repr(self):
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm!r}"
        s += _table_options_repr(self, sparse=False) + f", mode={self.mode!r}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        return s

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0, scale_grad_by_freq=False,
                        mode="mean", sparse=False, include_last_offset=False, padding_idx=None):
        """An EmbeddingBag whose weight is ``embeddings`` (frozen unless ``freeze=False``)."""
        if embeddings.ndim != 2:
            raise ValueError("EmbeddingBag.from_pretrained: embeddings parameter is expected to be 2-dimensional")
        bag = cls(embeddings.shape[0], embeddings.shape[1], max_norm, norm_type, scale_grad_by_freq, mode, sparse,
                  embeddings, include_last_offset, padding_idx)
        bag.weight.requires_grad_(not freeze)
        return bag
