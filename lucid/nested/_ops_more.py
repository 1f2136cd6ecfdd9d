"""More of what public functions do to a jagged nested tensor: select, batched products,
embeddings, compaction, selection by a nested mask, permute, expand_as and index_put.

See NOTE [Nested tensors] in ``lucid/nested/__init__.py``; ``register`` adds these handlers to
the table ``_ops._build_table`` builds.
"""
from __future__ import annotations

from .._core.primitive import OpError
from .._core.tensor import Tensor
from ._ops import _bind, _name, _norm_dim, _pointwise, _wrap, packed, row_batch
from ._tensor import NestedTensor, Structure


def _select(func, args, kwargs):
    """Along the batch dim a component (dense, as PyTorch's); elsewhere the values' select."""
    a = _bind(func, args, kwargs)
    nt = a["input"]
    d, r = _norm_dim("select", a["dim"], nt.dim()), nt._ragged_idx
    if d == r:
        raise RuntimeError("select(): not supported for NestedTensor on ragged dim")
    if d == 0:
        b, i = nt._struct.batch, int(a["index"])
        if not -b <= i < b:
            raise IndexError(f"select(): index {i} out of range for tensor of size {b} at dimension 0")
        return nt.unbind()[i % b]
    return _wrap(nt, nt._values.select(d - 1, a["index"]), r - 1 if d < r else r)


def batched_matmul(name, x, y):
    """``(B, j, D) @ (B, D, E)`` or ``(B, F, D) @ (B, D, j)``: each row of the nested values
    times its sequence's matrix (one ``index_select`` of the dense operand by the rows'
    sequence, so gradients reach both)."""
    nt, dense = (x, y) if isinstance(x, NestedTensor) else (y, x)
    r = 1 if nt is x else 2  # the ragged dim each form takes
    if nt.dim() != 3 or nt._ragged_idx != r or dense.dim() != 3 or int(dense.shape[0]) != nt._struct.batch:
        raise RuntimeError(f"{name}(): not supported between inputs of shapes {tuple(x.shape)} and "
                           f"{tuple(y.shape)}".replace("'", ""))
    rows = nt._values.movedim(r - 1, 0)  # (N, D)
    mats = dense.index_select(0, row_batch(nt._struct, int(rows.shape[0]), rows.device))
    if nt is x:
        return _wrap(nt, (rows.unsqueeze(-2) @ mats).squeeze(-2))
    return _wrap(nt, (mats @ rows.unsqueeze(-1)).squeeze(-1).movedim(0, 1))


def _bmm(func, args, kwargs):
    a = _bind(func, args, kwargs)
    x, y = a["input"], a["mat2"]
    if isinstance(x, NestedTensor) and isinstance(y, Tensor) and not y.is_nested:
        return batched_matmul("bmm", x, y)
    raise NotImplementedError("bmm: only a (B, j, D) nested tensor times a dense (B, D, E) tensor is supported "
                              "for NestedTensor")


def compact(nt):
    """The sequences packed one after another (no holes), on new offsets, as PyTorch's
    ``contiguous``/``clone(memory_format=contiguous_format)`` of a tensor with holes."""
    import lucid

    vals, _ = packed(nt)
    lens = nt._struct.seq_lengths().to(lucid.int64)
    offsets = lucid.cat([lucid.zeros(1, dtype=lucid.int64, device=lens.device), lens.cumsum(0)])
    r = nt._ragged_idx
    return NestedTensor._make(vals.movedim(0, r - 1).contiguous(), Structure(offsets), r)


def _contiguous_like(func, args, kwargs):
    import lucid

    a = _bind(func, args, kwargs)
    nt = a["input"]
    fmt = a.get("memory_format")
    packs = _name(func) == "contiguous" or fmt is lucid.contiguous_format
    if isinstance(nt, NestedTensor) and nt._struct.lengths is not None and packs:
        return compact(nt)
    return _pointwise(func, args, kwargs)


def _embedding(func, args, kwargs):
    """Indices in a nested tensor: the lookup runs on its values (the weight stays dense)."""
    a = _bind(func, args, kwargs)
    nt = a["input"]
    if not isinstance(nt, NestedTensor) or isinstance(a["weight"], NestedTensor):
        raise NotImplementedError("embedding: only nested indices with a dense weight are supported")
    a.pop("input")
    # tensors positional: a device's current-device guard reads the positional arguments
    return _wrap(nt, func(nt._values, a.pop("weight"), **a))


def _embedding_bag(func, args, kwargs):
    """Each sequence of a 2-D nested tensor of indices is a bag (its offsets are the bags'):
    a dense ``(B, embedding_dim)`` result."""
    a = _bind(func, args, kwargs)
    nt, psw = a["input"], a["per_sample_weights"]
    if not isinstance(nt, NestedTensor) or nt.dim() != 2 or a["offsets"] is not None:
        raise NotImplementedError("embedding_bag: only a 2-D nested tensor of indices (without offsets) is "
                                  "supported for NestedTensor")
    if nt._struct.lengths is not None:
        nt = compact(nt)
        psw = compact(psw) if isinstance(psw, NestedTensor) else psw
    a["include_last_offset"] = True
    a["per_sample_weights"] = psw._values if isinstance(psw, NestedTensor) else psw
    del a["input"], a["offsets"]
    # tensors positional: a device's current-device guard reads the positional arguments
    return func(nt._values, a.pop("weight"), nt._struct.offsets, **a)


def _masked_select(func, args, kwargs):
    """A 2-D nested tensor and a mask of its structure: each sequence keeps its selected
    elements (new offsets from the per-sequence counts), as PyTorch's."""
    import lucid

    a = _bind(func, args, kwargs)
    nt, mask = a["input"], a["mask"]
    same = (isinstance(nt, NestedTensor) and isinstance(mask, NestedTensor)
            and mask._struct.symbol is nt._struct.symbol and mask._ragged_idx == nt._ragged_idx)
    if not same:
        raise ValueError("masked_select(): expected a nested input and a nested mask of the same structure")
    if nt.dim() != 2:
        raise RuntimeError("masked_select only support 2-D selections currently")
    vals, batch = packed(nt)
    keep, _ = packed(mask)
    counts = lucid.zeros(nt._struct.batch, dtype=lucid.int64, device=vals.device).index_add(
        0, batch, keep.to(lucid.int64))
    offsets = lucid.cat([lucid.zeros(1, dtype=lucid.int64, device=vals.device), counts.cumsum(0)])
    return NestedTensor._make(vals.masked_select(keep), Structure(offsets), 1)


def _permute(func, args, kwargs):
    """A permutation that keeps the batch dim first: the values' dims permuted, the ragged dim
    moved with them."""
    nt = args[0] if args else kwargs["input"]
    dims = args[1:] if len(args) > 1 else kwargs.get("dims", ())
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    nd = nt.dim()
    dims = [_norm_dim("permute", d, nd) for d in dims]
    if sorted(dims) != list(range(nd)):
        raise RuntimeError(f"permute(): the dims {tuple(dims)} are not a permutation of {nd} dims")
    if dims[0] != 0:  # PyTorch's ValueError; OpError is a RuntimeError too, as for the dense refusals
        raise OpError("permute(): Permute is not supported on the batch dimension for jagged NT")
    return _wrap(nt, nt._values.permute(*(d - 1 for d in dims[1:])), dims.index(nt._ragged_idx))


def _expand_as(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt, other = a["input"], a["other"]
    if (isinstance(other, NestedTensor) and isinstance(nt, NestedTensor) and nt._same_structure(other)
            and nt._ragged_idx == other._ragged_idx):
        return _wrap(nt, nt._values.expand_as(other._values))
    raise RuntimeError(f"expand_as(): cannot expand {tuple(nt.shape)} to {tuple(other.shape)}; a nested tensor "
                       "expands only to a nested tensor of its own structure".replace("'", ""))


def _index_put(func, args, kwargs):
    """Indices over the outer dims. With the ragged dim among them, each (sequence, position)
    pair is a row of the values (its offset plus the position); without it, the put runs on
    the padded tensor and the rows are gathered back (PyTorch's two routes)."""
    a = _bind(func, args, kwargs)
    nt, indices = a["input"], list(a["indices"])
    r, nd = nt._ragged_idx, nt.dim()
    if len(indices) > nd:
        raise IndexError(f"index_put(): too many indices ({len(indices)}) for a tensor of {nd} dims")
    rest = {k: v for k, v in a.items() if k not in ("input", "indices", "values")}
    if len(indices) > r:
        rows = nt._struct.offsets.index_select(0, indices[0].reshape(-1)).reshape(tuple(indices[0].shape))
        vidx = indices[1:r] + [rows + indices[r]] + indices[r + 1:]
        return _wrap(nt, func(nt._values, tuple(vidx), a["values"], **rest))
    from ._ops import from_padded, to_padded

    padded = func(to_padded(nt, 0.0), tuple(indices), a["values"], **rest)
    n_rows = int(nt._values.shape[r - 1])
    return _wrap(nt, from_padded(padded.movedim(r, 1), nt._struct, n_rows).movedim(0, r - 1))


def register(put, lucid, T, F):
    put(_index_put, (lucid, T), ["index_put"])
    put(_permute, (lucid, T), ["permute"])
    put(_expand_as, (lucid, T), ["expand_as"])
    put(_select, (lucid, T), ["select"])
    put(_bmm, (lucid, T), ["bmm"])
    put(_contiguous_like, (lucid, T), ["clone", "contiguous"])
    put(_embedding, (F,), ["embedding"])
    put(_embedding_bag, (F,), ["embedding_bag"])
    put(_masked_select, (lucid, T), ["masked_select"])
