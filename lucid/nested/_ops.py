"""What public functions do to a jagged nested tensor: each maps onto dense ops on its values.

See NOTE [Nested tensors] in ``lucid/nested/__init__.py``. ``dispatch`` receives every public
call that has a nested argument (``NestedTensor.__torch_function__``) and looks its handler up
by the called function's original (so ``lucid.exp``, ``Tensor.exp`` and ``F.relu`` are told
apart as they are written); a function with no handler raises NotImplementedError naming it.
"""
from __future__ import annotations

import inspect

from .._core.primitive import OpError
from .._core.tensor import Tensor
from ..ops.reduce._common import return_types
from ..ops.scatter_extra import segment_softmax
from ._tensor import NestedTensor
from ..overrides import original, register_handlers

_TABLE = {}


_orig = original  # lucid.overrides: the wrapped function, the tables' key


def _name(func):
    return getattr(_orig(func), "__name__", repr(func))


def dispatch(func, args, kwargs):
    if not _TABLE:
        _build_table()
    handler = _TABLE.get(_orig(func))
    if handler is None:
        raise NotImplementedError(f"{_name(func)}: not implemented for NestedTensor (jagged layout); "
                                  "apply it to .values(), to each of .unbind(), or to .to_padded_tensor()")
    return handler(func, args, kwargs)


_SIGS = {}


def _bind(func, args, kwargs):
    bound = _signature(func).bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _norm_dim(name, d, nd):
    d = int(d)
    if not -nd <= d < nd:
        raise IndexError(f"{name}: Dimension out of range (expected to be in range of [{-nd}, {nd - 1}], but got {d})")
    return d % nd


def _first_nested(values):
    for v in values:
        if isinstance(v, NestedTensor):
            return v
        if isinstance(v, (list, tuple)):
            for w in v:
                if isinstance(w, NestedTensor):
                    return w
    return None


def _wrap(ref, values, ragged_idx=None):
    """A nested tensor on ``ref``'s structure (moved along when ``values`` changed device)."""
    struct = ref._struct
    if isinstance(values, Tensor) and values.device != ref._values.device:
        struct = struct.moved(values.device)
    return NestedTensor._make(values, struct, ref._ragged_idx if ragged_idx is None else ragged_idx)


def _wrap_all(ref, out, ragged_idx=None):
    if isinstance(out, Tensor):
        return _wrap(ref, out, ragged_idx)
    if isinstance(out, (tuple, list)):
        items = [_wrap_all(ref, o, ragged_idx) for o in out]
        return type(out)(*items) if hasattr(out, "_fields") else type(out)(items)
    return out


# ------------------------------------------------------------------ index tensors

def row_batch(struct, n_rows, device):
    """The sequence each row of the values belongs to (rows in holes get a neighbour's)."""
    def make():
        import lucid

        rows = lucid.arange(n_rows, dtype=lucid.int64, device=device)
        starts = struct.offsets[:-1].contiguous()
        return (lucid.searchsorted(starts, rows, right=True) - 1).clamp(min=0)
    return struct.cached(("row_batch", n_rows), make)


def pad_index(struct, length, sentinel):
    """(B * length) rows of the values for a padded ``(B, length)`` grid; ``sentinel`` for padding."""
    def make():
        import lucid

        pos = lucid.arange(length, dtype=lucid.int64, device=struct.offsets.device)
        lens = struct.seq_lengths().to(lucid.int64)
        valid = pos[None, :] < lens[:, None]
        idx = lucid.where(valid, struct.offsets[:-1, None].to(lucid.int64) + pos[None, :], sentinel)
        return idx.reshape(-1), valid
    return struct.cached(("pad", length, sentinel), make)


def packed(nt):
    """The values with only the rows of the sequences (no holes), ragged dim first, and their
    sequence index."""
    vals = nt._values.movedim(nt._ragged_idx - 1, 0)
    struct = nt._struct
    batch = row_batch(struct, int(vals.shape[0]), vals.device)
    if struct.lengths is None:
        return vals, batch
    idx, valid = pad_index(struct, struct.max_length(), 0)
    rows = idx[valid.reshape(-1)]
    return vals.index_select(0, rows), batch.index_select(0, rows)


def to_padded(nt, padding, output_size=None):
    """See :meth:`NestedTensor.to_padded_tensor`: one gather from the values plus a padding row."""
    import lucid

    r, struct = nt._ragged_idx, nt._struct
    vals = nt._values.movedim(r - 1, 0)
    n, length = int(vals.shape[0]), struct.max_length()
    if output_size is not None:
        output_size = [int(s) for s in output_size]
        if len(output_size) != nt.dim():
            raise RuntimeError(f"to_padded_tensor: output_size must have {nt.dim()} entries, got {output_size}")
        length = max(length, output_size[r])
    pad_row = lucid.full((1,) + tuple(vals.shape[1:]), padding, dtype=vals.dtype, device=vals.device)
    idx, _ = pad_index(struct, length, n)
    out = lucid.cat([vals, pad_row]).index_select(0, idx).reshape((struct.batch, length) + tuple(vals.shape[1:]))
    out = out.movedim(1, r)
    if output_size is None:
        return out
    for d, want in enumerate(output_size):
        have = int(out.shape[d])
        if want < have:
            out = out.narrow(d, 0, want)
        elif want > have:
            shape = list(out.shape)
            shape[d] = want - have
            out = lucid.cat([out, lucid.full(tuple(shape), padding, dtype=out.dtype, device=out.device)], d)
    return out


def from_padded(dense, struct, n_rows):
    """The inverse of ``to_padded`` for a ``(B, L, *rest)`` tensor: ``n_rows`` rows in the layout of
    ``struct`` (rows in holes take a neighbour's value)."""
    length = int(dense.shape[1])
    batch = row_batch(struct, n_rows, dense.device)
    import lucid

    rows = lucid.arange(n_rows, dtype=lucid.int64, device=dense.device)
    pos = (rows - struct.offsets.to(lucid.int64).index_select(0, batch)).clamp(0, max(length - 1, 0))
    flat = dense.reshape((-1,) + tuple(dense.shape[2:]))
    return flat.index_select(0, batch * length + pos)


# ------------------------------------------------------------------ pointwise

def _align(name, ref, other):
    """A dense operand of ``ref``'s op, made to broadcast with its values."""
    nd, r = ref.dim(), ref._ragged_idx
    if other.dim() == 0:
        return other
    if other.dim() > nd:
        raise RuntimeError(f"{name}: cannot call binary pointwise function with inputs of shapes "
                           f"{tuple(ref.shape)} and {tuple(other.shape)}".replace("'", ""))
    d = other.reshape((1,) * (nd - other.dim()) + tuple(other.shape))
    b = int(d.shape[0])
    if int(d.shape[r]) != 1 or b not in (1, ref._struct.batch):
        raise RuntimeError(f"{name}: cannot call binary pointwise function with inputs of shapes "
                           f"{tuple(ref.shape)} and {tuple(other.shape)}".replace("'", ""))
    if b == 1:
        return d.squeeze(0)
    rows = row_batch(ref._struct, int(ref._values.shape[r - 1]), ref._values.device)
    return d.squeeze(r).index_select(0, rows).movedim(0, r - 1)


def _map_arg(name, ref, a):
    if isinstance(a, NestedTensor):
        if a._struct.symbol is not ref._struct.symbol or a._ragged_idx != ref._ragged_idx:
            raise RuntimeError(f"{name}: cannot call binary pointwise function with inputs of shapes "
                               f"{tuple(ref.shape)} and {tuple(a.shape)}".replace("'", ""))
        return a._values
    if isinstance(a, Tensor) and a.is_nested:  # a strided nested tensor
        raise RuntimeError(f"{name}: nested tensors of the jagged and the strided layout can't be combined")
    if isinstance(a, Tensor):
        return _align(name, ref, a)
    return a


def _signature(func):
    fn = _orig(func)
    sig = _SIGS.get(fn)
    if sig is None:
        sig = _SIGS[fn] = inspect.signature(fn)
    return sig


def _pointwise(func, args, kwargs):
    name = _name(func)
    ref = _first_nested(list(args) + list(kwargs.values()))
    new_args = [_map_arg(name, ref, a) for a in args]
    new_kwargs = {k: _map_arg(name, ref, v) for k, v in kwargs.items()}
    out = func(*new_args, **new_kwargs)
    if "inplace" in _signature(func).parameters and _bind(func, args, kwargs)["inplace"]:
        return args[0] if args else kwargs["input"]  # F.relu(nt, inplace=True) is nt, as for a dense input
    return _wrap_all(ref, out)


def _inplace(func, args, kwargs):
    _pointwise(func, args, kwargs)
    return args[0]


def _passthrough(func, args, kwargs):
    return _orig(func)(*args, **kwargs)


def _dim_mapped(func, args, kwargs):
    """softmax and kin: the dim must be neither the batch nor the ragged dim."""
    name = _name(func)
    a = _bind(func, args, kwargs)
    nt = a.get("input")
    dim = a.get("dim")
    if dim is None or not isinstance(nt, NestedTensor):
        raise RuntimeError(f"{name}: nested tensors need an explicit dim (not the batch or ragged dim)")
    d = _norm_dim(name, dim, nt.dim())
    if d == nt._ragged_idx and name in ("softmax", "log_softmax") and nt._struct.lengths is None:
        return _wrap(nt, _ragged_softmax(nt, a.get("dtype"), name == "log_softmax"))
    if d in (0, nt._ragged_idx):
        raise RuntimeError(f"{name}: not supported for NestedTensor on the batch or ragged dim (dim={dim})")
    a["input"], a["dim"] = nt._values, d - 1
    return _wrap(nt, func(**a))


def _ragged_softmax(nt, dtype, log):
    """(log_)softmax over each sequence's rows (:func:`segment_softmax` by sequence; the values
    keep their layout)."""
    r = nt._ragged_idx
    vals = nt._values.movedim(r - 1, 0)
    if dtype is not None:
        vals = vals.to(dtype)
    batch = row_batch(nt._struct, int(vals.shape[0]), vals.device)
    return segment_softmax(vals, batch, nt._struct.batch, log).movedim(0, r - 1)


# ------------------------------------------------------------------ reductions

def _dims(name, dim, nd):
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    return sorted({_norm_dim(name, d, nd) for d in dims})


_SEGMENT_KIND = {"sum": "sum", "mean": "mean", "amax": "amax", "amin": "amin", "prod": "prod", "any": "any",
                 "all": "all", "max": "amax", "min": "amin", "argmax": "amax", "argmin": "amin"}
_WITH_INDEX = ("max", "min", "argmax", "argmin")  # one int dim only, as in PyTorch


def _reduce(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    nt, keepdim, dtype = a["input"], bool(a["keepdim"]), a.get("dtype")
    dim = a["dim"] if a.get("axis") is None else a["axis"]
    if isinstance(dim, Tensor) or a.get("other") is not None:  # max(nt, other): elementwise
        return _pointwise(func, args, kwargs)
    if name in _WITH_INDEX and isinstance(dim, (tuple, list)):
        raise TypeError(f"{name}(): argument 'dim' must be int, not {type(dim).__name__}")
    kw = {} if dtype is None else {"dtype": dtype}
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        if keepdim:
            raise RuntimeError(f"{name}: keepdim=True needs a dim for nested tensors")
        # without holes the values as laid out, so argmax's flat index is PyTorch's
        return func(nt._values if nt._struct.lengths is None else packed(nt)[0], **kw)
    nd, r = nt.dim(), nt._ragged_idx
    dims = _dims(name, dim, nd)
    if 0 in dims and r not in dims:
        raise RuntimeError(f"{name}: reducing along the batch dimension but not the ragged dimension is "
                           "not supported for nested tensors")
    if r in dims and 0 not in dims and set(dims) - {r}:
        raise RuntimeError(f"{name}: reducing along a ragged and non-batch dimension is not supported for "
                           "nested tensors")
    if r in dims and 0 in dims:  # batch and ragged together: every row of every sequence
        vals = packed(nt)[0]  # dims: ragged first, then the others in order
        rest = [d for d in range(1, nd) if d != r]
        vdims = (0,) + tuple(1 + rest.index(d) for d in dims if d not in (0, r))
        out = func(vals, vdims if len(vdims) > 1 else 0, True, **kw)
        out = out.unsqueeze(0).movedim(1, r)
        return out if keepdim else out.reshape(tuple(n for i, n in enumerate(out.shape) if i not in dims))
    if r in dims:
        return _keep_ragged(_segment(name, nt, dtype), r, keepdim, name)
    vdims = tuple(d - 1 for d in dims)
    out = func(nt._values, vdims if len(vdims) > 1 or name not in _WITH_INDEX else vdims[0], keepdim, **kw)
    return _wrap_all(nt, out, r if keepdim else r - sum(d < r for d in dims))


def _keep_ragged(out, r, keepdim, name):
    if not keepdim:
        return out
    if name in ("max", "min"):
        return type(out)(out[0].unsqueeze(r), out[1].unsqueeze(r))
    return out.unsqueeze(r)


def _segment(name, nt, dtype):
    """``name`` reduced over the ragged dim of each sequence: a dense ``(B, *rest)`` result
    from one ``index_add``/``scatter_reduce`` of the packed rows by their sequence."""
    import lucid

    vals, batch = packed(nt)
    if dtype is not None:
        vals = vals.to(dtype)
    elif name in ("sum", "prod") and not (vals.is_floating_point() or vals.is_complex()):
        vals = vals.to(lucid.int64)  # integer sums and products widen, as the dense ones do
    kind = _SEGMENT_KIND[name]
    n_seq = nt._struct.batch
    shape = (n_seq,) + tuple(vals.shape[1:])
    where = batch.reshape((-1,) + (1,) * (vals.dim() - 1)).expand(tuple(vals.shape))
    if kind in ("sum", "mean"):
        out = lucid.zeros(shape, dtype=vals.dtype, device=vals.device).index_add(0, batch, vals)
        if kind == "mean":
            lens = nt._struct.seq_lengths().to(out.dtype)
            out = out / lens.reshape((-1,) + (1,) * (out.dim() - 1))
        return out
    if kind in ("any", "all"):
        hit = (vals != 0) if kind == "any" else (vals == 0)
        count = lucid.zeros(shape, dtype=lucid.int64, device=vals.device).index_add(0, batch, hit.to(lucid.int64))
        return count > 0 if kind == "any" else count == 0
    ext = lucid.zeros(shape, dtype=vals.dtype, device=vals.device).scatter_reduce(
        0, where, vals, kind, include_self=False)
    if name not in _WITH_INDEX:
        return ext
    # the first position of the extremum within its sequence, as the dense max/argmax pick it
    n = int(vals.shape[0])
    lens = nt._struct.seq_lengths().to(lucid.int64)
    starts = lens.cumsum(0) - lens
    local = lucid.arange(n, dtype=lucid.int64, device=vals.device) - starts.index_select(0, batch)
    local = local.reshape((-1,) + (1,) * (vals.dim() - 1)).expand(tuple(vals.shape))
    hit = vals == ext.detach().index_select(0, batch)
    cand = lucid.where(hit, local, lucid.full_like(local, n))
    idx = lucid.full(shape, n, dtype=lucid.int64, device=vals.device).scatter_reduce(
        0, where, cand, "amin", include_self=False)
    if name in ("argmax", "argmin"):
        return idx
    rows = idx + starts.reshape((-1,) + (1,) * (vals.dim() - 1))
    picked = vals.gather(0, rows)  # the gradient reaches the picked element only, as PyTorch's max
    return getattr(return_types, name)(picked, idx)


# ------------------------------------------------------------------ linear algebra and norms

def _ragged_not_in(name, nt, last):
    if nt._ragged_idx >= nt.dim() - last:
        raise RuntimeError(f"{name}: not supported for NestedTensor whose ragged dim is among the last {last} "
                           f"dim(s) (shape {tuple(nt.shape)})".replace("'", ""))


def _linear(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    if not isinstance(nt, NestedTensor) or any(isinstance(a[k], NestedTensor) for k in ("weight", "bias")):
        raise NotImplementedError("linear: only a nested input with a dense weight and bias is supported")
    _ragged_not_in("linear", nt, 1)
    return _wrap(nt, func(nt._values, a["weight"], a["bias"]))


def _matmul(func, args, kwargs):
    name = _name(func)
    x, y = (args[0], args[1]) if len(args) >= 2 else tuple(_bind(func, args, kwargs).values())[:2]
    if name.startswith("__r"):
        x, y = y, x
    if isinstance(x, NestedTensor) and isinstance(y, NestedTensor):
        if x._struct.symbol is not y._struct.symbol or x._ragged_idx != y._ragged_idx or x.dim() != y.dim():
            raise RuntimeError(f"{name}: nested operands must share their structure")
        _ragged_not_in(name, x, 2)
        return _wrap(x, x._values @ y._values)
    if isinstance(x, NestedTensor) and isinstance(y, Tensor) and y.dim() <= 2:
        _ragged_not_in(name, x, 1)
        return _wrap(x, x._values @ y)
    one_dense = isinstance(x, NestedTensor) != isinstance(y, NestedTensor)
    if one_dense and isinstance(x, Tensor) and isinstance(y, Tensor) and 3 in (x.dim(), y.dim()):
        from ._ops_more import batched_matmul

        return batched_matmul(name, x, y)
    raise NotImplementedError(f"{name}: only nested @ dense matrix (or nested @ nested of one structure) is "
                              "supported for NestedTensor")


def _norm_layer(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    nt = a["input"]
    shape = a["normalized_shape"]
    k = 1 if isinstance(shape, int) else len(tuple(shape))
    if not isinstance(nt, NestedTensor) or any(isinstance(v, NestedTensor) for key, v in a.items() if key != "input"):
        raise NotImplementedError(f"{name}: only a nested input with dense parameters is supported")
    _ragged_not_in(name, nt, k)
    a["input"] = nt._values
    return _wrap(nt, func(**a))


# ------------------------------------------------------------------ shape ops

def _transpose(func, args, kwargs):
    name = _name(func)
    nt, d0, d1 = args[0], args[1], args[2]
    nd, r = nt.dim(), nt._ragged_idx
    d0, d1 = _norm_dim(name, d0, nd), _norm_dim(name, d1, nd)
    if 0 in (d0, d1) and d0 != d1:
        # PyTorch 2.13 raises RuntimeError; ValueError kept for older callers
        raise OpError(f"{name}: Transpose is not supported on the batch dimension for jagged NT")
    new_r = d1 if r == d0 else d0 if r == d1 else r
    return _wrap(nt, nt._values.transpose(max(d0 - 1, 0), max(d1 - 1, 0)), new_r)


def _narrow(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    nt = a["input"]
    d = _norm_dim(name, a["dim"], nt.dim())
    if d == 0 or d == nt._ragged_idx:
        # PyTorch raises RuntimeError, or ValueError when the tensor has holes: both catch this
        raise OpError(f"{name}: not supported for NestedTensor on "
                           + ("dim=0" if d == 0 else "ragged dim"))
    return _wrap(nt, nt._values.narrow(d - 1, a["start"], a["length"]))


def _view(func, args, kwargs):
    name = _name(func)
    nt = args[0]
    shape = args[1:] if len(args) > 1 else kwargs.get("shape", kwargs.get("size", ()))
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    r, vals = nt._ragged_idx, nt._values
    bad = (len(shape) <= r or shape[0] not in (-1, nt._struct.batch)
           or not (shape[r] is nt._struct.symbol or shape[r] == -1)
           or any(shape[d] != vals.shape[d - 1] for d in range(1, r)))
    if bad:
        raise RuntimeError(f"{name}: for a nested tensor only the dims after the ragged dim can change; "
                           f"got shape {tuple(shape)} for {tuple(nt.shape)}".replace("'", ""))
    new = tuple(int(s) for s in shape[1:r]) + (int(vals.shape[r - 1]),) + tuple(int(s) for s in shape[r + 1:])
    return _wrap(nt, getattr(vals, _orig(func).__name__)(new))


def _unflatten(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    d = _norm_dim("unflatten", a["dim"], nt.dim())
    if d <= nt._ragged_idx:
        raise RuntimeError("unflatten: only the dims after the ragged dim of a nested tensor can be unflattened")
    return _wrap(nt, nt._values.unflatten(d - 1, a["sizes"]))


def _flatten(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    s, e = _norm_dim("flatten", a["start_dim"], nt.dim()), _norm_dim("flatten", a["end_dim"], nt.dim())
    if s == e:
        return nt
    if s <= nt._ragged_idx <= e or s == 0:
        raise RuntimeError("flatten: not supported for NestedTensor on ragged dim")
    r = nt._ragged_idx
    return _wrap(nt, nt._values.flatten(s - 1, e - 1), r if r < s else r - (e - s))


def _unsqueeze(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    d = _norm_dim("unsqueeze", a["dim"], nt.dim() + 1)
    if d == 0:
        raise RuntimeError("unsqueeze: not supported for NestedTensor on dim=0")
    r = nt._ragged_idx
    return _wrap(nt, nt._values.unsqueeze(d - 1), r + 1 if d <= r else r)


def _squeeze(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt, dim = a["input"], a["dim"]
    r = nt._ragged_idx
    if dim is None:
        dims = [d for d in range(1, nt.dim()) if d != r and int(nt._values.shape[d - 1]) == 1]
    else:
        dims = _dims("squeeze", dim, nt.dim())
        if 0 in dims or r in dims:
            raise RuntimeError("squeeze: not supported for NestedTensor on the batch or ragged dim")
        dims = [d for d in dims if int(nt._values.shape[d - 1]) == 1]
    if not dims:
        return nt
    return _wrap(nt, nt._values.squeeze(tuple(d - 1 for d in dims)), r - sum(d < r for d in dims))


def _split_like(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    key = next(k for k in ("input", "tensor", "self") if k in a)  # (Tensor.split's first is self)
    nt = a[key]
    d = _norm_dim(name, a["dim"], nt.dim())
    if d == 0:
        how = a["chunks"] if "chunks" in a else a.get("split_size_or_sections", a.get("split_sizes",
                                                                                     a.get("split_size")))
        return _split_batch(name, nt, how, "chunks" in a)
    if d == nt._ragged_idx:  # RuntimeError in PyTorch, ValueError with holes: OpError is both
        raise OpError(f"{name}: not supported for NestedTensor on ragged dim (dim={a['dim']})")
    a[key], a["dim"] = nt._values, d - 1
    return tuple(_wrap(nt, p) for p in func(**a))


def _split_batch(name, nt, how, chunks):
    """Groups of whole sequences, each a nested tensor of its own (new offsets, so a new ragged
    symbol, as PyTorch's chunk along the batch dim)."""
    from ._tensor import Structure

    b, struct, axis = nt._struct.batch, nt._struct, nt._ragged_idx - 1
    if chunks:
        step = -(-b // int(how)) if int(how) > 0 else 0
        if step <= 0:
            raise RuntimeError(f"{name}: chunk expects `chunks` to be greater than 0, got: {how}")
        sizes = [min(step, b - i) for i in range(0, b, step)]
    elif isinstance(how, int):
        sizes = [min(int(how), b - i) for i in range(0, b, int(how))]
    else:
        sizes = [int(n) for n in how]
        if sum(sizes) != b:
            raise RuntimeError(f"{name}: split_with_sizes expects split_sizes to sum exactly to {b}, got {sizes}")
    starts = struct.host_starts() + [int(struct.offsets[-1])] if struct.lengths is None else None
    out, first = [], 0
    for n in sizes:
        offs = struct.offsets[first:first + n + 1]
        if struct.lengths is None:  # a packed slice of the values, offsets from 0
            lo, hi = starts[first], starts[first + n]
            vals = nt._values.narrow(axis, lo, hi - lo)
            piece = Structure(offs - lo)
        else:  # holes: the same values, the sequences' offsets and lengths
            vals = nt._values
            piece = Structure(offs.clone(), struct.lengths[first:first + n].clone())
        out.append(NestedTensor._make(vals, piece, nt._ragged_idx))
        first += n
    return tuple(out)


def _cat(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    ts = list(a["tensors"])
    ref = ts[0] if isinstance(ts[0], NestedTensor) else None
    if ref is None or not all(isinstance(t, NestedTensor) and t._struct.symbol is ref._struct.symbol
                              and t._ragged_idx == ref._ragged_idx for t in ts):
        raise NotImplementedError(f"{name}: only nested tensors of one structure can be concatenated")
    d = _norm_dim(name, a["dim"], ref.dim())
    if d in (0, ref._ragged_idx):
        raise NotImplementedError(f"{name}: not supported for NestedTensor on the batch or ragged dim")
    return _wrap(ref, func([t._values for t in ts], d - 1))


def _unbind(func, args, kwargs):
    a = _bind(func, args, kwargs)
    return a["input"].unbind(a["dim"])


def _getitem(func, args, kwargs):
    nt, key = args[0], args[1]
    rest = ()
    if isinstance(key, tuple) and key and isinstance(key[0], int):
        key, rest = key[0], key[1:]
    if not isinstance(key, int) or isinstance(key, bool):
        raise NotImplementedError("__getitem__: a nested tensor can be indexed by an integer (a sequence) "
                                  "first only")
    b = nt._struct.batch
    if not -b <= key < b:
        raise IndexError(f"__getitem__: index {key} is out of bounds for a nested tensor of {b} sequences")
    comp = nt.unbind()[key % b]
    return comp[rest] if rest else comp


# ------------------------------------------------------------------ attention

def _sdpa(func, args, kwargs):
    """Per-sequence attention: pad q/k/v, mask the keys past each sequence's end, unpad."""
    import lucid

    name = "scaled_dot_product_attention"
    a = _bind(func, args, kwargs)
    q, k, v = a["query"], a["key"], a["value"]
    if not all(isinstance(t, NestedTensor) for t in (q, k, v)):
        raise NotImplementedError(f"{name}: query, key and value must all be nested tensors")
    if any(t.dim() != 4 or t._ragged_idx != 2 for t in (q, k, v)):
        raise RuntimeError(f"{name}: nested query, key and value must be (B, H, j, D) with the ragged dim at 2 "
                           "(transpose(1, 2) of a (B, j, H, D) tensor)")
    same_kv = k._struct.symbol is v._struct.symbol or (  # built apart with equal lengths: PyTorch accepts
        k._struct.batch == v._struct.batch and k._struct.seq_lengths().tolist() == v._struct.seq_lengths().tolist())
    if not same_kv or q._struct.batch != k._struct.batch:
        raise RuntimeError(f"{name}: key and value must share their structure and the batch size of query")
    if a["attn_mask"] is not None:
        raise NotImplementedError(f"{name}: attn_mask is not supported with nested inputs (as in PyTorch); "
                                  "the sequences' own lengths mask the keys")
    lq, lk = q._struct.max_length(), k._struct.max_length()
    qd, kd, vd = q.to_padded_tensor(0.0), k.to_padded_tensor(0.0), v.to_padded_tensor(0.0)
    pos = lucid.arange(lk, dtype=lucid.int64, device=kd.device)
    mask = pos[None, :] < k._struct.seq_lengths().to(lucid.int64)[:, None]
    mask = mask.reshape(k._struct.batch, 1, 1, lk)
    if a["is_causal"]:  # per sequence, aligned top-left as PyTorch's dense is_causal
        mask = mask & lucid.ones(lq, lk, dtype=lucid.bool, device=kd.device).tril()
    out = func(qd, kd, vd, attn_mask=mask, dropout_p=a["dropout_p"], is_causal=False, scale=a["scale"],
               enable_gqa=a["enable_gqa"])
    rows = from_padded(out.transpose(1, 2), q._struct, int(q._values.shape[1]))
    return _wrap(q, rows.movedim(0, 1))


# ------------------------------------------------------------------ the table

_UNARY = """abs absolute neg negative positive relu sigmoid tanh exp exp2 expm1 log log2 log10 log1p sqrt rsqrt
sin cos tan asin acos atan arcsin arccos arctan sinh cosh asinh acosh atanh square sign sgn reciprocal floor ceil
round trunc fix frac erf erfc erfinv lgamma digamma logit nan_to_num isnan isinf isfinite isposinf isneginf
logical_not bitwise_not clone detach deg2rad rad2deg sinc conj float double half int long bool short
type_as contiguous cpu cuda zeros_like ones_like empty_like full_like rand_like randn_like
add sub subtract mul multiply div divide true_divide floor_divide remainder fmod pow float_power atan2 arctan2
maximum minimum fmax fmin eq ne lt le gt ge greater greater_equal less less_equal not_equal equal_
logical_and logical_or logical_xor bitwise_and bitwise_or bitwise_xor hypot copysign xlogy where lerp addcmul
addcdiv clamp clip clamp_min clamp_max masked_fill
angle conj_physical frexp i0 isreal signbit mvlgamma polygamma fill heaviside igamma igammac isclose ldexp
logaddexp logaddexp2 nextafter byte char cdouble cfloat""".split()
_SPECIAL = """airy_ai bessel_j0 bessel_j1 bessel_y0 bessel_y1 entr erfcx i0e i1 i1e log_ndtr modified_bessel_i0
modified_bessel_i1 modified_bessel_k0 modified_bessel_k1 ndtr ndtri polygamma scaled_modified_bessel_k0
scaled_modified_bessel_k1 spherical_bessel_j0 chebyshev_polynomial_t chebyshev_polynomial_u chebyshev_polynomial_v
chebyshev_polynomial_w hermite_polynomial_h hermite_polynomial_he laguerre_polynomial_l legendre_polynomial_p
shifted_chebyshev_polynomial_t shifted_chebyshev_polynomial_u shifted_chebyshev_polynomial_v
shifted_chebyshev_polynomial_w xlog1py zeta""".split()
_DUNDER = """__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__
__rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __neg__ __abs__ __pos__ __invert__ __eq__ __ne__ __lt__ __le__
__gt__ __ge__ __and__ __rand__ __or__ __ror__ __xor__ __rxor__""".split()
_INPLACE_DUNDER = "__iadd__ __isub__ __imul__ __itruediv__ __ifloordiv__ __imod__ __ipow__ __iand__ __ior__ __ixor__"
_F_POINTWISE = """relu relu6 gelu silu elu selu celu leaky_relu hardtanh softplus softsign tanhshrink hardshrink
softshrink mish hardswish hardsigmoid logsigmoid sigmoid tanh threshold rrelu dropout alpha_dropout
feature_alpha_dropout relu_ elu_ leaky_relu_ hardtanh_ threshold_ celu_ selu_ rrelu_""".split()
_PASSTHROUGH = "is_floating_point is_complex element_size get_device ndimension is_signed size dim".split()


def _build_table():
    import lucid
    import lucid.nn.functional as F
    import lucid.special

    from . import _ops_more

    T = lucid.Tensor

    def put(handler, owners, names):
        register_handlers(_TABLE, handler, owners, names)

    put(_pointwise, (lucid, T), _UNARY + ["to"])
    put(_pointwise, (lucid.special,), _SPECIAL)
    register_handlers(_TABLE, _pointwise, (T,), ["real", "imag"], getters=True)
    put(_pointwise, (T,), _DUNDER)
    put(_pointwise, (F,), [n for n in _F_POINTWISE if not n.endswith("_")] + ["dropout"])
    put(_inplace, (F,), [n for n in _F_POINTWISE if n.endswith("_")])
    put(_inplace, (T,), _INPLACE_DUNDER.split() + [n + "_" for n in _UNARY if n not in ("clone", "detach")])
    put(_inplace, (lucid,), [n + "_" for n in ("relu", "sigmoid", "tanh", "exp", "neg", "clamp", "dropout")])
    put(_passthrough, (T,), _PASSTHROUGH)
    put(_passthrough, (lucid,), ["is_floating_point", "is_complex", "numel"])
    put(_dim_mapped, (lucid, T, F), ["softmax", "log_softmax"])
    put(_dim_mapped, (F,), ["glu"])
    put(_reduce, (lucid, T), ["sum", "mean", "amax", "amin", "prod", "any", "all", "max", "min", "argmax",
                              "argmin"])
    put(_linear, (F,), ["linear"])
    put(_matmul, (lucid, T), ["matmul", "__matmul__"])
    put(_norm_layer, (F,), ["layer_norm", "rms_norm"])
    put(_transpose, (lucid, T), ["transpose", "swapaxes", "swapdims"])
    put(_narrow, (lucid, T), ["narrow"])
    put(_view, (T,), ["view", "reshape"])
    put(_view, (lucid,), ["reshape"])
    put(_unflatten, (lucid, T), ["unflatten"])
    put(_flatten, (lucid, T), ["flatten"])
    put(_unsqueeze, (lucid, T), ["unsqueeze"])
    put(_squeeze, (lucid, T), ["squeeze"])
    put(_split_like, (lucid, T), ["chunk", "split"])
    put(_cat, (lucid,), ["cat", "concat", "concatenate"])
    put(_unbind, (lucid,), ["unbind"])
    put(_getitem, (T,), ["__getitem__"])
    put(_sdpa, (F,), ["scaled_dot_product_attention"])
    put(_split_like, (lucid, T), ["split_with_sizes"])
    _ops_more.register(put, lucid, T, F)
