"""``one_hot`` (a non-differentiable primitive, batchable) and ``embedding``."""
from __future__ import annotations

import numpy as np

from ..._core.backend import add_at, host, namespace_of, on_device_of, runs_on_operands_device, xp
from ..._core.grad_mode import no_grad
from ..._core.primitive import autocast_composite, bind, defprim
from ..._core.tensor import Tensor
from ...ops._family import _as_tensor, move_bdim
from ._complex import refuse_complex as _refuse_complex
from ._per_example import call_per_example, is_tracer, looping_trace, values_under_tracers

__all__ = ["one_hot", "embedding", "embedding_bag"]


def _one_hot_impl(t, *, num_classes):
    # The range check reads values: CPU only. On a device it would read back every call
    # (PyTorch's CUDA kernel checks with a device-side assert), as loss._check_classes.
    if t.__class__ is np.ndarray and t.size and (t.min() < 0 or t.max() >= num_classes):
        raise ValueError(f"class values must be in [0, {num_classes}), got range "  # bind names the op
                         f"[{t.min()}, {t.max()}] for indices of shape {t.shape}")
    return (t[..., None] == namespace_of(t).arange(num_classes)).astype(np.int64)


def _one_hot_batch(vals, bdims, num_classes):
    (t,), (b,) = vals, bdims
    return bind(one_hot_p, (move_bdim(t, b, 0),), {"num_classes": num_classes}), 0


# No gradient: the output is an integer encoding of the (integer) input.
one_hot_p = defprim("one_hot", _one_hot_impl, vjp=None, batch=_one_hot_batch,
                    jvp=lambda ns, primals, tangents, out, **p: None,
                    differentiable=False, save_inputs=False)


def one_hot(tensor, num_classes=-1):
    """One-hot encoding of integer class indices (new last dim of size ``num_classes``).

    ``num_classes=-1`` infers ``max + 1`` (needs concrete values: not inside ``vmap``).

    Parameters
    ----------
    tensor : Tensor
        Integer class indices.
    num_classes : int
        Number of classes (-1: the largest index + 1).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> F.one_hot(lucid.tensor([0, 2]), 3)
    tensor([[1, 0, 0],
           [0, 0, 1]])
    """
    t = _as_tensor(tensor)
    if t.dtype.kind not in "iu":
        raise RuntimeError(f"one_hot: expected an integer (long) tensor of class indices, got {t.dtype}")
    if num_classes == -1:
        if not t.numel():
            raise RuntimeError("one_hot: Can not infer total number of classes from empty tensor.")
        num_classes = int(t.max()) + 1
    return bind(one_hot_p, (t,), {"num_classes": int(num_classes)})


@runs_on_operands_device
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Look up rows of ``weight`` (``weight[input]``).

    The row at ``padding_idx`` is returned as is but receives no gradient. With
    ``max_norm``, the referenced rows are renormalised in place first (as PyTorch does).

    Parameters
    ----------
    input : Tensor
        Integer indices.
    weight : Tensor
        The table, (num_embeddings, embedding_dim).
    padding_idx : int, optional
        This row gets no gradient.
    max_norm : float, optional
        Renormalise looked-up rows (in place) to at most this norm.
    norm_type : float
        The p of that norm.
    scale_grad_by_freq : bool
        Divide each row's gradient by how often its index occurs in ``input``.
    sparse : bool
        Accepted for PyTorch compatibility: the engine carries dense gradients only, so it is
        dense (a warning says so once). See NOTE [Sparse embedding gradients].

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> w = lucid.tensor([[0.0, 0.0], [1.0, 2.0]])
    >>> F.embedding(lucid.tensor([1, 1]), w)
    tensor([[1., 2.],
           [1., 2.]])
    """
    if max_norm is not None or (scale_grad_by_freq and weight.requires_grad):  # these read the indices' values
        trace = looping_trace((input, weight), ())
        if trace is not None:  # NOTE [Per-example functions under vmap]
            return call_per_example(trace, embedding, "embedding", (input, weight),
                                    dict(padding_idx=padding_idx, max_norm=max_norm, norm_type=norm_type,
                                         scale_grad_by_freq=scale_grad_by_freq, sparse=sparse))
    idx = _as_tensor(input)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"embedding: indices must be an integer (long) tensor, got {idx.dtype}")
    if weight.ndim != 2:
        raise RuntimeError(f"embedding: weight must be 2-D, got shape {tuple(weight.shape)}")
    if sparse:
        _warn_sparse("embedding")
    # Negative indices would silently wrap to the end of the table. The check reads values:
    # CPU and plain tensors only (a device would read back every call; a vmap tracer has no value).
    if type(idx) is Tensor and idx._data.__class__ is np.ndarray and idx._data.size and (
            idx._data.min() < 0 or idx._data.max() >= weight.shape[0]):
        raise IndexError(f"embedding: index out of range in self (a table of {weight.shape[0]} rows)")
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= padding_idx < n:  # PyTorch's assert
            raise AssertionError(f"embedding: padding_idx must be within num_embeddings ({n}), got {padding_idx}")
        padding_idx %= n
    if max_norm is not None:
        _renorm_rows(weight, idx, max_norm, norm_type)
    out = weight[idx]
    if scale_grad_by_freq and out.requires_grad:  # a tracer's counts: Lucid ops (NOTE [Per-example functions under vmap])
        out = _scale_grad_by_freq(out, idx if is_tracer(idx) else idx._data, 1, weight.shape[0])
    if padding_idx is not None and weight.requires_grad:
        import lucid

        keep = (idx != padding_idx).unsqueeze(-1)
        out = lucid.where(keep, out, out.detach())
    return out


# NOTE [Sparse embedding gradients]
# The engine carries dense gradients only. ``sparse=True`` (Embedding, EmbeddingBag, their
# functionals) is accepted so PyTorch code runs unchanged, and gives the same gradient as a dense one: zero rows
# for indices that were not looked up. optim.SparseAdam reads those zero rows as "not looked up".
# A UserWarning says so once per process; PyTorch's own refusals (max mode) are kept.
_SPARSE_WARNED = [False]


def _warn_sparse(op):
    if not _SPARSE_WARNED[0]:
        _SPARSE_WARNED[0] = True
        from ..._runtime import warn_at_caller

        warn_at_caller(f"{op}: sparse=True gives a dense gradient (the engine carries dense gradients only); "
                       f"rows that were not looked up are zero")


def _scale_grad_by_freq(rows, idx, extra_dims, num_rows, counted=None):
    """``rows`` with the same value and each row's gradient divided by how often its index
    occurs in ``idx`` (PyTorch's ``scale_grad_by_freq``); with ``counted`` (a bool mask of
    ``idx``'s shape), only the marked occurrences are counted. ``idx`` is an array, or a
    transform's tracer (then counted with Lucid ops, NOTE [Per-example functions under vmap])."""
    from ..._core.tensor import _wrap

    if not rows.requires_grad:
        return rows
    if isinstance(idx, Tensor):
        import lucid

        flat = idx.reshape(-1).long()
        ones = lucid.ones_like(flat) if counted is None else counted.reshape(-1).long()
        counts = lucid.zeros(num_rows, dtype=lucid.int64, device=rows.device).scatter_add(0, flat, ones)
        c = (1.0 / counts[flat].clamp(min=1).to(rows.dtype)).reshape(tuple(idx.shape) + (1,) * extra_dims)
        frozen = rows.detach()
        return frozen + (rows - frozen) * c
    if idx.__class__ is np.ndarray:
        _, inverse, counts = np.unique(idx.reshape(-1), return_inverse=True, return_counts=True)
        c = 1.0 / counts[inverse]
    else:  # on a device: a scatter-add into one counter per table row (unique's size is a value)
        flat = idx.reshape(-1)
        counts = namespace_of(idx).zeros(num_rows, np.int64)
        add_at(counts, flat, xp.ones_like(flat) if counted is None else counted.reshape(-1).astype(np.int64))
        c = 1.0 / xp.maximum(counts[flat], 1)  # uncounted occurrences (outside every bag) get no gradient
    c = c.reshape(idx.shape + (1,) * extra_dims).astype(rows.dtype)
    # value exactly ``rows`` (the second term is an exact zero), gradient ``c * g``
    frozen = rows.detach()
    return frozen + (rows - frozen) * _wrap(c)


def _renorm_rows(weight, idx, max_norm, norm_type):
    """Renormalise in place the rows of ``weight`` that ``idx`` (a Tensor or an array) looks up.

    Under transforms, the arrays under the tracers: each example's weight slice gets the rows
    its own indices look up, as a per-example loop would (NOTE [Per-example functions under vmap])."""
    with no_grad():
        w, wdims, wb = values_under_tracers(weight)
        i, _, ib = values_under_tracers(idx) if isinstance(idx, Tensor) else (idx, None, {})
        shared = [lv for lv in wb if lv in ib]  # vmap levels batching both: one example at a time
        if wb or ib:  # views with those levels first (the weight's own batch levels next)
            w = xp.moveaxis(w, [wb[lv] for lv in shared] + [wb[lv] for lv in wb if lv not in ib] + wdims,
                            list(range(w.ndim)))
            i = xp.moveaxis(i, [ib[lv] for lv in shared], list(range(len(shared))))
        for ex in np.ndindex(*w.shape[:len(shared)]):
            _renorm_block(w[ex], i[ex], max_norm, norm_type)
        weight._version[0] += 1


def _renorm_block(w, idx, max_norm, norm_type):
    """``w[..., rows, :]`` scaled to at most ``max_norm`` along the last dim, rows from ``idx``."""
    # On a device every looked-up row, repeats included (they write equal values): the
    # size of unique's result is a value, a read back to the host.
    rows = np.unique(idx) if idx.__class__ is np.ndarray else idx.reshape(-1)
    norms = np.linalg.norm(w[..., rows, :], ord=norm_type, axis=-1)
    scale = np.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    w[..., rows, :] = w[..., rows, :] * scale[..., None].astype(w.dtype)


# NOTE [Bags on a device]
# On the CPU the bags come from the offsets' values (np.repeat) and are validated. On a device
# neither is read back: the bag of each input position is a searchsorted of the positions in
# the offsets, made there, positions past the last offset (include_last_offset) belonging to
# no bag (-1); sum and mean compare it with each bag number, so the bag matrix is made on the
# device too. The offsets and indices are not validated there (PyTorch's CUDA kernels don't
# either). Only mode 'max' of a 1-D input copies the offsets (nbags + 1 integers) to the host,
# explicitly: the width of its padded block is the size of the largest bag, a value.
def _check_bag_shapes(idx, offsets, op):
    if idx.ndim == 2 and offsets is not None:
        raise ValueError(f"{op}: offsets has to be None if input is 2D, got {offsets!r}")
    if idx.ndim not in (1, 2):
        raise ValueError(f"{op}: input has to be 1D or 2D Tensor, got shape {tuple(idx.shape)}")
    if idx.ndim == 1 and offsets is None:
        raise ValueError(f"{op}: offsets has to be a 1D Tensor but got None")


def _checked_offsets(off, length, op):
    """The host offsets as int64, checked: they start at 0, never decrease, end by ``length``."""
    off = np.asarray(off).astype(np.int64).reshape(-1)
    if off.size == 0 or off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] > length:
        raise RuntimeError(f"{op}: offsets must start at 0, be non-decreasing and at most len(input) = "
                           f"{length}, got {off.tolist()}")
    return off


def _bags_traced(idx, offsets, include_last_offset, op):
    """:func:`_bags` as Tensors, from Lucid ops alone, for indices or offsets that are a
    transform's tracers (NOTE [Per-example functions under vmap]): ``flat`` is the whole input
    and an index outside every bag has bag -1, as on a device (NOTE [Bags on a device]). Only
    offsets that are plain CPU tensors are validated: no other value is read."""
    import lucid

    _check_bag_shapes(idx, offsets, op)
    flat = idx.reshape(-1).long()
    pos = lucid.arange(flat.shape[0], device=flat.device)
    if idx.ndim == 2:
        return flat, pos // max(idx.shape[1], 1), idx.shape[0]
    off = _as_tensor(offsets)
    if type(off) is Tensor and off._data.__class__ is np.ndarray:
        _checked_offsets(off._data, idx.shape[0], op)
    off = off.reshape(-1).long().to(flat.device)
    if off.shape[0] == 0:
        raise RuntimeError(f"{op}: offsets must start at 0, be non-decreasing and at most len(input) = "
                           f"{idx.shape[0]}, got []")
    nbags = off.shape[0] - 1 if include_last_offset else off.shape[0]
    seg = lucid.searchsorted(off[:nbags], pos, right=True) - 1
    if include_last_offset:
        seg = lucid.where(pos < off[-1], seg, -1)
    return flat, seg, nbags


def _bag_traced(lucid, idx, weight, offsets, mode, padding_idx, psw, max_norm, norm_type, scale_grad_by_freq,
                include_last_offset, op):
    """embedding_bag with Lucid ops on the index tensors only (``vmap(grad(f))``: NOTE
    [Per-example functions under vmap]); the same bag matrix and padded max block as on a device."""
    flat, seg, nbags = _bags_traced(idx, offsets, include_last_offset, op)
    if max_norm is not None:
        _renorm_rows(weight, flat, max_norm, norm_type)
    rows = weight[flat]  # (L, D)
    if scale_grad_by_freq:
        rows = _scale_grad_by_freq(rows, flat, 1, weight.shape[0], seg >= 0)
    kept = seg >= 0 if padding_idx is None else (seg >= 0) & (flat != padding_idx)
    inbag = (seg.unsqueeze(0) == lucid.arange(nbags, device=seg.device).unsqueeze(1)) & kept.unsqueeze(0)
    if mode == "max":  # each bag's positions, the others pointing at an extra -inf row (position L)
        n = flat.shape[0]
        pos = lucid.arange(n, device=seg.device)
        if idx.ndim == 2:  # bag i is row i: a (nbags, width) block
            block = pos.reshape(idx.shape) if idx.shape[1] else lucid.zeros(nbags, 1, dtype=lucid.int64,
                                                                             device=seg.device)
            kept = lucid.cat([kept, lucid.zeros(1, dtype=lucid.bool, device=seg.device)])  # the -inf row: not kept
            gather = lucid.where(kept[block], block, n)
        else:  # a bag's width is a value: a (nbags, L) block
            gather = lucid.where(inbag, pos.unsqueeze(0), n)
        ninf = lucid.full((1, weight.shape[1]), float("-inf"), dtype=weight.dtype, device=weight.device)
        out = lucid.cat([rows, ninf], 0)[gather].amax(1)
        return lucid.where((gather < n).any(1).unsqueeze(1), out, 0.0)
    m = inbag.to(weight.dtype)
    if mode == "mean":
        m = m / m.sum(1, keepdim=True).clamp(min=1.0)
    if psw is not None:
        if _as_tensor(psw).numel() != idx.numel():
            raise ValueError(f"{op}: per_sample_weights must have one entry per index ({idx.numel()}), "
                             f"got shape {tuple(psw.shape)}")
        m = m * _as_tensor(psw).reshape(1, -1).to(weight.dtype)
    return m @ rows


def _bags(idx, offsets, include_last_offset, op):
    """``(flat indices, bag of each index, number of bags)`` for 2-D input or 1-D input + offsets.

    On a device ``flat`` is the whole input and an index outside every bag has bag -1 (NOTE
    [Bags on a device])."""
    _check_bag_shapes(idx, offsets, op)
    data = idx._data
    if idx.ndim == 2:
        b, n = idx.shape
        if data.__class__ is np.ndarray:
            return data.reshape(-1), np.repeat(np.arange(b), n), b
        return data.reshape(-1), namespace_of(data).arange(b * n) // max(n, 1), b
    off = _as_tensor(offsets)._data
    if data.__class__ is not np.ndarray:
        off = off.reshape(-1).astype(np.int64, copy=False)
        if off.size == 0:  # a shape, not a value: checked everywhere
            raise RuntimeError(f"{op}: offsets must start at 0, be non-decreasing and at most len(input) = "
                               f"{idx.shape[0]}, got []")
        nbags = off.size - 1 if include_last_offset else off.size
        ns = namespace_of(data)
        pos = ns.arange(data.shape[0])
        seg = xp.searchsorted(off[:nbags], pos, side="right") - 1
        if include_last_offset:
            seg = xp.where(pos < off[-1], seg, -1)
        return data, seg, nbags
    off = _checked_offsets(off, idx.shape[0], op)
    bounds = off if include_last_offset else np.concatenate([off, [idx.shape[0]]])
    nbags = len(bounds) - 1
    seg = np.repeat(np.arange(nbags), np.diff(bounds))
    return data[bounds[0]:bounds[-1]], seg, nbags


@runs_on_operands_device
@autocast_composite("embedding_bag")  # NOTE [Autocast]
def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2, scale_grad_by_freq=False,
                  mode="mean", sparse=False, per_sample_weights=None, include_last_offset=False,
                  padding_idx=None):
    """Sums, means or maxima of bags of embeddings, without building the per-index lookup.

    Bags are the rows of a 2-D ``input``, or the slices ``input[offsets[i]:offsets[i+1]]`` of
    a 1-D one. Entries equal to ``padding_idx`` are left out (and not counted in a mean); an
    empty bag gives zeros. ``per_sample_weights`` (``mode='sum'`` only) scale each entry and
    are differentiable. Sum and mean are one matmul with a constant bag matrix; max gathers
    each bag into a padded block.

    ``scale_grad_by_freq`` divides the gradient reaching each looked-up row by how often its
    index occurs in the bags (PyTorch's documented rule; PyTorch 2.13's CPU kernel divides some
    rows by another index's count, pytorch/pytorch#190063). ``sparse=True`` gives a dense
    gradient (see NOTE [Sparse embedding gradients]). Mode 'max' refuses both, as in PyTorch.
    Indices batched by a ``vmap`` with a transform inside (per-example gradients) are not
    read, nor checked: the bags are then Lucid ops (NOTE [Per-example functions under vmap]).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> w = lucid.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    >>> F.embedding_bag(lucid.tensor([0, 1, 2]), w, lucid.tensor([0, 2]), mode="sum").tolist()
    [[4.0, 6.0], [5.0, 6.0]]
    """
    _refuse_complex("embedding_bag", weight)
    # the bags are built from the indices' and offsets' values (and max_norm renormalises weight in place)
    trace = looping_trace((input, offsets) + ((weight,) if max_norm is not None else ()), (weight, per_sample_weights))
    if trace is not None:  # NOTE [Per-example functions under vmap]
        return call_per_example(trace, embedding_bag, "embedding_bag", (input, weight, offsets), dict(
            max_norm=max_norm, norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, mode=mode, sparse=sparse,
            per_sample_weights=per_sample_weights, include_last_offset=include_last_offset, padding_idx=padding_idx))
    import lucid

    from ..._core.tensor import _wrap

    op = "embedding_bag"
    idx = _as_tensor(input)
    if idx.dtype.kind not in "iu":
        raise RuntimeError(f"{op}: indices must be an integer (long) tensor, got {idx.dtype}")
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"{op}: mode has to be one of sum, mean or max, got {mode!r}")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"{op}: per_sample_weights is only supported for mode='sum' (got mode={mode!r})")
    if mode == "max" and scale_grad_by_freq:
        raise ValueError(f"{op}: max mode does not support scaling the gradient by the frequency")
    if mode == "max" and sparse:
        raise ValueError(f"{op}: max mode does not support sparse weights")
    if sparse:
        _warn_sparse(op)
    if padding_idx is not None:
        n = weight.shape[0]
        if not -n <= padding_idx < n:
            raise RuntimeError(f"{op}: padding_idx must be within the number of embeddings, {-n} through {n - 1}, "
                               f"but got {padding_idx}")
        padding_idx %= n
    if is_tracer(idx, offsets):  # values out of reach: NOTE [Per-example functions under vmap]
        return _bag_traced(lucid, idx, weight, offsets, mode, padding_idx, per_sample_weights, max_norm, norm_type,
                           scale_grad_by_freq, include_last_offset, op)
    flat, seg, nbags = _bags(idx, offsets, include_last_offset, op)
    on_cpu = flat.__class__ is np.ndarray
    # The range check reads values: CPU only (on a device it would read back every call;
    # PyTorch's CUDA kernel checks with a device-side assert).
    if on_cpu and flat.size and (flat.min() < 0 or flat.max() >= weight.shape[0]):
        raise IndexError(f"{op}: index out of range for a table of {weight.shape[0]} rows")
    if max_norm is not None:
        _renorm_rows(weight, flat, max_norm, norm_type)
    rows = weight[_wrap(flat.astype(np.int64))]  # (L, D)
    if scale_grad_by_freq:
        # on a device, occurrences outside every bag (bag -1) are not counted
        rows = _scale_grad_by_freq(rows, flat, 1, weight.shape[0], None if on_cpu else seg >= 0)
    if on_cpu:
        keep = np.ones(len(flat), bool) if padding_idx is None else flat != padding_idx
        if mode == "max":
            return _bag_max(lucid, rows, seg[keep], np.flatnonzero(keep), nbags, weight)
        m = np.zeros((nbags, len(flat)), dtype=weight.dtype)
        m[seg[keep], np.flatnonzero(keep)] = 1.0
        if mode == "mean":
            counts = m.sum(1, keepdims=True)
            m = m / np.maximum(counts, 1.0)
    else:  # NOTE [Bags on a device]
        if mode == "max":
            return _bag_max_device(lucid, rows, flat, padding_idx, nbags, idx, offsets, include_last_offset,
                                   weight)
        inbag = seg[None, :] == namespace_of(seg).arange(nbags)[:, None]  # (nbags, L)
        if padding_idx is not None:
            inbag = inbag & (flat != padding_idx)[None, :]
        m = inbag.astype(weight.dtype)
        if mode == "mean":
            m = m / xp.maximum(m.sum(1, keepdims=True), 1.0)
    bag = _wrap(m)
    if per_sample_weights is not None:
        psw = _as_tensor(per_sample_weights).reshape(-1)
        if psw.shape[0] != idx.numel():  # one per input index, as PyTorch (also past the last offset)
            raise ValueError(f"{op}: per_sample_weights must have one entry per index ({idx.numel()}), "
                             f"got shape {tuple(per_sample_weights.shape)}")
        # the CPU's flat indices stop at the last offset (include_last_offset); they start at 0
        bag = bag * psw[:len(flat)].to(weight.dtype).reshape(1, -1)
    return bag @ rows


def _bag_max(lucid, rows, seg, pos, nbags, weight):
    """Per-bag maxima: each bag's rows gathered into a block padded with -inf; empty bags 0."""
    from ..._core.tensor import _wrap

    counts = np.bincount(seg, minlength=nbags)
    width = max(int(counts.max()) if counts.size else 0, 1)
    slot = np.arange(len(seg)) - np.repeat(np.concatenate([[0], np.cumsum(counts)[:-1]]), counts)
    gather = np.full((nbags, width), len(pos), np.int64)  # the extra -inf row
    gather[seg, slot] = np.arange(len(pos))
    ninf = lucid.full((1, weight.shape[1]), float("-inf"), dtype=weight.dtype, device=weight.device)
    table = lucid.cat([rows[_wrap(pos.astype(np.int64))], ninf], 0)
    out = table[_wrap(gather)].amax(1)
    return lucid.where(_wrap((counts > 0)[:, None]), out, 0.0)


def _bag_max_device(lucid, rows, flat, padding_idx, nbags, idx, offsets, include_last_offset, weight):
    """:func:`_bag_max` on a device (NOTE [Bags on a device]): each bag's positions in a block
    padded with the -inf row (position ``L``), padding entries pointing there too."""
    from ..._core.tensor import _wrap

    n = flat.shape[0]
    ns = namespace_of(flat)
    if idx.ndim == 2:  # bag i is row i: no value needed
        b, width = idx.shape
        gather = ns.arange(n).reshape(b, width) if width else ns.zeros((b, 1), np.int64)
    else:
        # The block's width is the largest bag, a value: the offsets (nbags + 1 small integers)
        # are copied to the host explicitly; PyTorch's CUDA kernel loops over each bag instead.
        off = host(_as_tensor(offsets)._data).astype(np.int64).reshape(-1)
        bounds = off if include_last_offset else np.concatenate([off, [n]])
        counts = np.maximum(np.diff(bounds), 0)
        width = max(int(counts.max()) if counts.size else 0, 1)
        slot = np.arange(width)
        gather = bounds[:-1, None] + slot
        gather = np.where((slot < counts[:, None]) & (gather >= 0) & (gather < n), gather, n)
        gather = on_device_of(gather, flat)
    if padding_idx is not None:
        kept = ns.concatenate([flat != padding_idx, ns.zeros(1, bool)])  # the -inf row: not kept
        gather = xp.where(kept[gather], gather, n)
    ninf = lucid.full((1, weight.shape[1]), float("-inf"), dtype=weight.dtype, device=weight.device)
    table = lucid.cat([rows, ninf], 0)
    out = table[_wrap(gather)].amax(1)
    return lucid.where(_wrap((gather < n).any(1)[:, None]), out, 0.0)
