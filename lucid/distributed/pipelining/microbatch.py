"""Cutting a batch into microbatches along dim 0 and joining the last stage's outputs back.

NOTE [Microbatch split]
As PyTorch, every tensor argument is cut along dim 0 with ``tensor_split``: a batch of ``B``
rows in ``n`` microbatches gives ``B % n`` microbatches of ``B // n + 1`` rows first, then
``B // n`` (uneven splits are allowed); a batch smaller than ``n`` is an error. Arguments
that are not tensors are handed unchanged to every microbatch. Gradients are summed over
microbatches and divided by ``n`` (``scale_grads``), so with a ``mean`` loss and an even
split they equal the gradients of the whole batch.
"""
from __future__ import annotations

import lucid

__all__ = ["TensorChunkSpec", "split_args_kwargs_into_chunks", "merge_chunks"]


class TensorChunkSpec:
    """The dimension a tensor argument is cut along (Lucid cuts along dim 0 only).

    Examples
    --------
    >>> from lucid.distributed.pipelining.microbatch import TensorChunkSpec
    >>> TensorChunkSpec(0)
    TensorChunkSpec(0)
    """

    def __init__(self, split_dim):
        if split_dim != 0:
            raise NotImplementedError(f"TensorChunkSpec: Lucid splits microbatches along dim 0 only, got {split_dim}")
        self.split_dim = split_dim

    def __repr__(self):
        return f"TensorChunkSpec({self.split_dim})"


class MicrobatchSplitError(AssertionError, ValueError):
    """A batch cannot be cut into the microbatches asked for (PyTorch raises AssertionError)."""


def split_tensor(tensor, n_microbatches, what="tensor"):
    """``tensor`` cut along dim 0 into ``n_microbatches`` pieces (NOTE [Microbatch split])."""
    if tensor.ndim == 0:
        raise MicrobatchSplitError(f"split_args_kwargs_into_chunks: {what} is a 0-d tensor; it has no "
                                   "batch dimension to cut into microbatches")
    rows = tensor.shape[0]
    if rows < n_microbatches:
        raise MicrobatchSplitError(f"split_args_kwargs_into_chunks: {what} has batch size {rows} (shape "
                                   f"{tuple(tensor.shape)}), smaller than the {n_microbatches} microbatches")
    return list(lucid.tensor_split(tensor, n_microbatches, 0))


def _split_value(value, n_microbatches, what):
    if isinstance(value, lucid.Tensor):
        return split_tensor(value, n_microbatches, what)
    return [value] * n_microbatches


def split_args_kwargs_into_chunks(args, kwargs, chunks, args_chunk_spec=None, kwargs_chunk_spec=None):
    """``(args_per_microbatch, kwargs_per_microbatch)``: lists of ``chunks`` tuples and dicts.

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributed.pipelining.microbatch import split_args_kwargs_into_chunks
    >>> a, k = split_args_kwargs_into_chunks((lucid.zeros(4, 2),), {}, 2)
    >>> [x[0].shape for x in a]
    [(2, 2), (2, 2)]
    """
    for spec in list(args_chunk_spec or ()) + list((kwargs_chunk_spec or {}).values()):
        if spec is not None and getattr(spec, "split_dim", 0) != 0:
            raise NotImplementedError("split_args_kwargs_into_chunks: Lucid splits along dim 0 only")
    kwargs = kwargs or {}
    split_args = [_split_value(a, chunks, f"args[{i}]") for i, a in enumerate(args)]
    split_kwargs = {k: _split_value(v, chunks, f"kwargs[{k!r}]") for k, v in kwargs.items()}
    args_mbs = [tuple(s[m] for s in split_args) for m in range(chunks)]
    kwargs_mbs = [{k: s[m] for k, s in split_kwargs.items()} for m in range(chunks)]
    return args_mbs, kwargs_mbs


def merge_chunks(chunks, chunk_spec=None):
    """The outputs of every microbatch joined along dim 0 (tuples and lists joined per position).

    Examples
    --------
    >>> import lucid
    >>> from lucid.distributed.pipelining.microbatch import merge_chunks
    >>> merge_chunks([lucid.zeros(2, 3), lucid.ones(1, 3)]).shape
    (3, 3)
    """
    first = chunks[0]
    if isinstance(first, lucid.Tensor):
        return lucid.cat(list(chunks), 0) if first.ndim > 0 else list(chunks)
    if isinstance(first, (tuple, list)):
        merged = [merge_chunks([c[i] for c in chunks]) for i in range(len(first))]
        return type(first)(merged)
    return list(chunks)
