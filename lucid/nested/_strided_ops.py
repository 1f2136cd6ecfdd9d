"""What public functions do to a strided nested tensor: pointwise ops on its flat buffer, the
rest on each component.

See NOTE [Strided nested tensors] in ``lucid/nested/__init__.py``. Handlers are looked up by the
called function's original, as the jagged ones (``_ops.dispatch``).
"""
from __future__ import annotations

import math

from .._core.tensor import Tensor
from ._ops import _UNARY, _DUNDER, _INPLACE_DUNDER, _F_POINTWISE, _PASSTHROUGH, _bind, _name, _norm_dim, _orig
from ..overrides import register_handlers
from ._strided import StridedNestedTensor, _prod

_TABLE = {}


def dispatch(func, args, kwargs):
    if not _TABLE:
        _build_table()
    handler = _TABLE.get(_orig(func))
    if handler is None:
        raise NotImplementedError(f"{_name(func)}: not implemented for NestedTensor (strided layout); "
                                  "apply it to each of .unbind() or to .to_padded_tensor()")
    return handler(func, args, kwargs)


def _nested_in(values):
    from ._tensor import NestedTensor

    for v in values:
        for w in (v if isinstance(v, (list, tuple)) else (v,)):
            if isinstance(w, NestedTensor):
                raise RuntimeError("nested tensors of the jagged and the strided layout can't be combined")
            if isinstance(w, StridedNestedTensor):
                yield w


def assemble(parts, like=None):
    """A strided nested tensor holding ``parts`` (its buffer their flattened concatenation)."""
    import lucid

    if not parts:
        return StridedNestedTensor._make(like._buffer[:0], ())
    if len({p.dim() for p in parts}) > 1:
        raise RuntimeError("nested tensor: the components came out with different numbers of dims "
                           f"{[tuple(p.shape) for p in parts]}")
    flat = [p.reshape(-1) for p in parts]
    return StridedNestedTensor._make(lucid.cat(flat) if len(flat) > 1 else flat[0], [tuple(p.shape) for p in parts])


# ------------------------------------------------------------------ to_padded_tensor

def to_padded(nt, padding, output_size=None):
    """See :meth:`StridedNestedTensor.to_padded_tensor`: one gather from the buffer plus a padding
    element (the index is structure, computed on the host and moved once)."""
    import numpy as np

    import lucid

    name = "to_padded_tensor"
    sizes, buf = nt._sizes, nt._buffer
    nd = nt.dim()
    padded = [len(sizes)] + [max(s[d] for s in sizes) for d in range(nd - 1)] if sizes else [0]
    if output_size is not None:
        output_size = [int(n) for n in output_size]
        if len(output_size) != nd:
            raise RuntimeError(f"{name}: Length of output_size does not match NestedTensor dims. Broadcasting is "
                               "not supported.")
        if any(o < p for o, p in zip(output_size, padded)):
            raise RuntimeError(f"{name}: Value in output_size is less than NestedTensor padded size. Truncation "
                               "is not supported.")
        padded = output_size
    n = int(buf.numel())
    idx = np.full(padded, n, dtype=np.int64)
    start = 0
    for i, s in enumerate(sizes):
        k = _prod(s)
        idx[(i,) + tuple(slice(0, m) for m in s)] = np.arange(start, start + k, dtype=np.int64).reshape(s)
        start += k
    pad = lucid.full((1,), padding, dtype=buf.dtype, device=buf.device)
    index = lucid.tensor(idx.reshape(-1), dtype=lucid.int64, device=buf.device)
    return lucid.cat([buf, pad]).index_select(0, index).reshape(tuple(padded))


# ------------------------------------------------------------------ pointwise: on the buffer

_DTYPE_SOURCES = ("type_as", "to")  # a dense argument here is a dtype/device source, not an operand


def _operand(name, ref, a):
    if isinstance(a, Tensor) and a.is_nested and not isinstance(a, StridedNestedTensor):
        raise RuntimeError(f"{name}: nested tensors of the jagged and the strided layout can't be combined")
    if isinstance(a, StridedNestedTensor):
        if a._sizes != ref._sizes:
            raise RuntimeError(f"{name}: does not support broadcasting when given a NestedTensor (component sizes "
                               f"{list(ref._sizes)} and {list(a._sizes)})")
        return a._buffer
    if isinstance(a, Tensor) and a.dim() > 0 and name not in _DTYPE_SOURCES:
        raise RuntimeError(f"{name}: Expected both self and other to be nested, but got a nested self and "
                           f"non-nested other of shape {tuple(a.shape)}")
    return a


def _pointwise(func, args, kwargs):
    name = _name(func)
    ref = next(_nested_in(list(args) + list(kwargs.values())))
    out = func(*[_operand(name, ref, a) for a in args], **{k: _operand(name, ref, v) for k, v in kwargs.items()})
    if "inplace" in _signature(func).parameters and _bind(func, args, kwargs)["inplace"]:
        return args[0] if args else kwargs["input"]
    if isinstance(out, tuple):
        return type(out)(ref._like(o) if isinstance(o, Tensor) else o for o in out)
    return ref._like(out) if isinstance(out, Tensor) else out


def _signature(func):
    from ._ops import _signature as sig

    return sig(func)


def _inplace(func, args, kwargs):
    _pointwise(func, args, kwargs)
    return args[0]


def _contiguous(func, args, kwargs):
    nt = args[0] if args else kwargs["input"]
    return StridedNestedTensor._make(nt._buffer, nt._sizes) if nt._contig is not True else nt


def _passthrough(func, args, kwargs):
    own = vars(StridedNestedTensor).get(_name(func))  # dim, size ...: the class's own answer
    if own is not None and args and isinstance(args[0], StridedNestedTensor):
        return own(*args, **kwargs)
    return _orig(func)(*args, **kwargs)


# ------------------------------------------------------------------ per component

def _each(nt, fn, contiguous=True):
    """``fn`` applied to every component, the results assembled (tuples give tuples of nested);
    ``contiguous`` is the result's flag (see :func:`_layout_after`)."""
    outs = [fn(c) for c in nt.unbind()]
    if outs and isinstance(outs[0], tuple):
        cols = [assemble([o[j] for o in outs], nt) for j in range(len(outs[0]))]
        return type(outs[0])(*cols) if hasattr(outs[0], "_fields") else tuple(cols)
    out = assemble(outs, nt)
    out._contig = contiguous
    return out


def _relabel(nt, fn):
    """A view of ``nt`` with each component's size mapped by ``fn``: the ops that keep every
    component's row-major order (reshape, (un)squeeze, (un)flatten) share the buffer, as
    PyTorch's views share the storage."""
    sizes = [tuple(fn(s)) for s in nt._sizes]
    return StridedNestedTensor._make(nt._buffer.view(-1), sizes, nt._contig is True)


def _inner_dim(name, nt, dim, extra=0, what="dimension 0"):
    """A component dim for the nested dim ``dim`` (which must not be the batch dim)."""
    d = _norm_dim(name, dim, nt.dim() + extra)
    if d == 0:
        raise RuntimeError(f"{name}: not supported for nested tensors along {what}")
    return d - 1


def _softmax(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    nt = a["input"]
    if a.get("dim") is None:
        raise RuntimeError(f"{name}: nested tensors need an explicit dim")
    if _norm_dim(name, a["dim"], nt.dim()) == 0:
        raise RuntimeError(f"{name}: Cannot apply softmax across nested dimension 0")
    a["dim"] = _inner_dim(name, nt, a["dim"])
    return _each(nt, lambda c: func(**dict(a, input=c)))


_REDUCTIONS = ["sum", "mean", "amax", "amin", "prod", "any", "all", "max", "min", "argmax", "argmin", "std", "var",
               "logsumexp", "nansum", "nanmean"]


def _reduce(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    nt = a["input"]
    dim = a.get("dim") if a.get("axis") is None else a["axis"]
    if isinstance(dim, Tensor) or isinstance(a.get("other"), Tensor):  # max(nt, other): elementwise
        return _pointwise(func, args, kwargs)
    if dim is None or (isinstance(dim, (tuple, list)) and len(dim) == 0):
        if a.get("keepdim"):
            raise RuntimeError(f"{name}: keepdim=True needs a dim for nested tensors")
        return func(nt._buffer, **{k: v for k, v in a.items() if k not in ("input", "dim", "axis", "keepdim")})
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    norm = [_norm_dim(name, d, nt.dim()) for d in dims]
    if 0 in norm:
        raise RuntimeError(f"{name}: reducing across the batch dimension (dim 0) is not supported for strided "
                           "nested tensors")
    inner = [d - 1 for d in norm]
    key = "axis" if a.get("axis") is not None else "dim"
    a[key] = inner if isinstance(dim, (tuple, list)) else inner[0]
    return _each(nt, lambda c: func(**dict(a, input=c)))


def _transpose(func, args, kwargs):
    name = _name(func)
    nt, d0, d1 = args[0], args[1], args[2]
    n0, n1 = _norm_dim(name, d0, nt.dim()), _norm_dim(name, d1, nt.dim())
    if 0 in (n0, n1):
        raise RuntimeError(f"{name}: Nested tensor dimension 0 cannot be transposed")
    perm = list(range(nt.dim() - 1))
    perm[n0 - 1], perm[n1 - 1] = perm[n1 - 1], perm[n0 - 1]
    return _each(nt, lambda c: c.transpose(n0 - 1, n1 - 1), contiguous=_layout_after(nt, perm))


def _layout_after(nt, perm):
    """The contiguity flag after permuting the component dims by ``perm``: the permutation from
    the row-major layout is tracked (``_contig`` True or that tuple), so transposing back is
    contiguous again, as PyTorch's strides say; after any other layout change it is unknown."""
    base = tuple(range(len(perm))) if nt._contig is True else nt._contig
    if not isinstance(base, tuple):
        return False
    new = tuple(base[p] for p in perm)
    return True if new == tuple(range(len(new))) else new


def _permute(func, args, kwargs):
    nt = args[0]
    dims = args[1:] if len(args) > 1 else kwargs.get("dims", ())
    if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
        dims = tuple(dims[0])
    norm = [_norm_dim("permute", d, nt.dim()) for d in dims]
    if len(norm) != nt.dim() or sorted(norm) != list(range(nt.dim())):
        raise RuntimeError(f"permute: dims {tuple(dims)} are not a permutation of the {nt.dim()} dims")
    if norm[0] != 0:
        raise RuntimeError("permute: Nested tensor dimension 0 cannot be moved")
    perm = [d - 1 for d in norm[1:]]
    return _each(nt, lambda c: c.permute(perm), contiguous=_layout_after(nt, perm))


def _unsqueeze(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    d = _norm_dim("unsqueeze", a["dim"], nt.dim() + 1)
    if d == 0:
        raise RuntimeError("unsqueeze: For nested tensors, unsqueezing dimension 0 is not supported")
    return _relabel(nt, lambda s: s[:d - 1] + (1,) + s[d - 1:])


def _squeeze(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt, dim = a["input"], a["dim"]
    if dim is None:
        raise RuntimeError("squeeze: For nested tensors, squeeze without the dim argument is not supported; "
                           "use squeeze(dim)")
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    norm = [_norm_dim("squeeze", d, nt.dim()) for d in dims]
    if 0 in norm:
        raise RuntimeError("squeeze: For nested tensors, squeezing dimension 0 is not supported")
    # a dim goes only where every component has size 1 there (else all keep it, as a dense squeeze)
    drop = tuple(d - 1 for d in norm if all(s[d - 1] == 1 for s in nt._sizes))
    return _relabel(nt, lambda s: [n for i, n in enumerate(s) if i not in drop]) if drop else nt


def _select(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    d = _norm_dim("select", a["dim"], nt.dim())
    if d == 0:
        return _component(nt, a["index"])
    return _each(nt, lambda c: c.select(d - 1, a["index"]))


def _component(nt, i):
    b = len(nt._sizes)
    i = int(i)
    if not -b <= i < b:
        raise IndexError(f"select: index {i} out of range for a nested tensor of {b} components")
    return nt.unbind()[i % b]


def _narrow(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt, start, length = a["input"], a["start"], a["length"]
    d = _norm_dim("narrow", a["dim"], nt.dim())
    if d == 0:  # whole components: a nested tensor of components start .. start + length
        return assemble(list(nt.unbind()[int(start):int(start) + int(length)]), nt)
    return _each(nt, lambda c: c.narrow(d - 1, start, length), False)


def _reshape(func, args, kwargs):
    """PyTorch's rule (NestedTensor_compute_size_stride): the batch entry stays; a ``-1`` at a dim
    the components have keeps each one's size there; a new dim can't be inferred."""
    name = _orig(func).__name__
    nt = args[0]
    shape = args[1:] if len(args) > 1 else kwargs.get("shape", kwargs.get("size", ()))
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    shape = [int(n) for n in shape]
    if not shape or shape[0] != len(nt._sizes):
        raise RuntimeError(f"{name}: For now nested {name} cannot change or infer the implicit batch dimension")
    want = shape[1:]
    new = iter([_reshaped(name, s, want, shape) for s in nt._sizes])
    return _relabel(nt, lambda s: next(new))


def _reshaped(name, size, want, shape):
    old = len(size)
    out = list(want)
    if any(n < -1 for n in want):
        raise RuntimeError(f"{name}: invalid shape dimension {min(want)}")
    if old < len(want):
        if want[:old].count(-1) > 1:
            raise RuntimeError(f"{name}: only one dimension can be inferred")
        if -1 in want[old:]:
            raise RuntimeError(f"{name}: only one dimension can be inferred" if want[old:].count(-1) > 1
                               else f"{name}: nested tensor does not infer shape")
    for d in range(min(old, len(want))):
        if out[d] == -1:
            out[d] = size[d]
    if _prod(out) != _prod(size):
        raise RuntimeError(f"{name}: shape '{list(shape)}' is invalid for input of size {_prod(size)}")
    return tuple(out)


def _flatten(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    s = _inner_dim("flatten", nt, a["start_dim"])
    e = _inner_dim("flatten", nt, a["end_dim"])
    if s > e:
        raise RuntimeError("flatten: flatten() has invalid args: start_dim cannot come after end_dim")
    return _relabel(nt, lambda z: z[:s] + (math.prod(z[s:e + 1]),) + z[e + 1:])


def _unflatten(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    d = _inner_dim("unflatten", nt, a["dim"])
    return _each(nt, lambda c: c.unflatten(d, a["sizes"]))


def _split_like(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    key = "input" if "input" in a else "tensor"
    nt = a[key]
    d = _inner_dim(name, nt, a["dim"])
    pieces = [func(**dict(a, **{key: c, "dim": d})) for c in nt.unbind()]
    if len({len(p) for p in pieces}) > 1:
        raise RuntimeError(f"{name}: the components split into different numbers of pieces "
                           f"{[len(p) for p in pieces]}")
    return tuple(assemble([p[j] for p in pieces], nt) for j in range(len(pieces[0]) if pieces else 0))


def _cat(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    ts = list(a["tensors"])
    if not ts or not all(isinstance(t, StridedNestedTensor) for t in ts):
        raise RuntimeError(f"{name}: expected each tensor in given list to be nested")
    d = _norm_dim(name, a["dim"], ts[0].dim())
    if d == 0:
        return assemble([c for t in ts for c in t.unbind()], ts[0])
    if len({len(t._sizes) for t in ts}) > 1:
        raise RuntimeError(f"{name}: nested tensors of different batch sizes can't be concatenated along dim {d}")
    return assemble([func(list(cs), d - 1) for cs in zip(*(t.unbind() for t in ts))], ts[0])


def _unbind(func, args, kwargs):
    a = _bind(func, args, kwargs)
    return a["input"].unbind(a["dim"])


def _getitem(func, args, kwargs):
    nt, key = args[0], args[1]
    rest = ()
    if isinstance(key, tuple) and key and isinstance(key[0], int) and not isinstance(key[0], bool):
        key, rest = key[0], key[1:]
    if not isinstance(key, int) or isinstance(key, bool):
        raise NotImplementedError("__getitem__: a strided nested tensor can be indexed by an integer (a "
                                  "component) first only")
    b = len(nt._sizes)
    if not -b <= key < b:
        raise IndexError(f"__getitem__: index {key} is out of bounds for a nested tensor of {b} components")
    comp = nt.unbind()[key % b]
    return comp[rest] if rest else comp


# ------------------------------------------------------------------ products, layers, attention

def _pair(name, x, y):
    if isinstance(x, StridedNestedTensor) and isinstance(y, StridedNestedTensor) and len(x._sizes) != len(y._sizes):
        raise RuntimeError(f"{name}: Expected the nested operands to hold the same number of components, got "
                           f"{len(x._sizes)} and {len(y._sizes)}")
    return (x.unbind() if isinstance(x, StridedNestedTensor) else None,
            y.unbind() if isinstance(y, StridedNestedTensor) else None)


def _matmul(func, args, kwargs):
    name = _name(func)
    x, y = args[0], args[1]
    if name.startswith("__r"):
        x, y = y, x
    if not isinstance(x, StridedNestedTensor):
        raise RuntimeError(f"{name}: Expected both to be nested, but got a non-nested self and nested other")
    if isinstance(y, StridedNestedTensor):
        if x.dim() < 3 or y.dim() < 3:
            raise RuntimeError(f"{name}: For nested tensors, only inputs with >= 3 dims are currently supported")
        if x.dim() != y.dim():
            raise RuntimeError(f"{name}: both inputs must have the same rank")
        if name == "bmm" and x.dim() != 3:
            raise RuntimeError(f"{name}: batch1 must be a 3D tensor")
    elif name == "bmm":
        raise RuntimeError(f"{name}: Expected both to be nested, but got a nested self and non-nested other")
    xs, ys = _pair(name, x, y)
    ys = ys if ys is not None else [y] * len(xs)
    op = _orig(func) if name == "matmul" else (lambda u, v: u @ v)  # bmm's components are matrices
    return assemble([op(u, v) for u, v in zip(xs, ys)], x)


def _linear(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    if not isinstance(nt, StridedNestedTensor) or any(isinstance(a[k], Tensor) and a[k].is_nested
                                                      for k in ("weight", "bias")):
        raise NotImplementedError("linear: only a nested input with a dense weight and bias is supported")
    if nt.dim() < 2 or nt._regular(nt.dim() - 2) is None:
        raise RuntimeError("linear: Expected all tensors in nested tensor to have the same trailing dimension")
    return _each(nt, lambda c: func(c, a["weight"], a["bias"]))


def _norm_layer(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    nt = a["input"]
    if not isinstance(nt, StridedNestedTensor) or any(isinstance(v, Tensor) and v.is_nested
                                                      for k, v in a.items() if k != "input"):
        raise NotImplementedError(f"{name}: only a nested input with dense parameters is supported")
    return _each(nt, lambda c: func(**dict(a, input=c)))


def _embedding(func, args, kwargs):
    a = _bind(func, args, kwargs)
    nt = a["input"]
    if not isinstance(nt, StridedNestedTensor) or isinstance(a["weight"], StridedNestedTensor):
        raise NotImplementedError("embedding: only nested indices with a dense weight are supported")
    return _each(nt, lambda c: func(**dict(a, input=c)))


def _sdpa(func, args, kwargs):
    """Each component attends alone: ``(..., L, E)`` query against ``(..., S, E)`` key/value."""
    name = "scaled_dot_product_attention"
    a = _bind(func, args, kwargs)
    q, k, v = a["query"], a["key"], a["value"]
    if not all(isinstance(t, StridedNestedTensor) for t in (q, k, v)):
        raise NotImplementedError(f"{name}: query, key and value must all be nested tensors")
    if a["attn_mask"] is not None:
        raise RuntimeError(f"{name}: Nested tensors for query / key are not supported when an explicit attn_mask "
                           "is set")
    if not len(q._sizes) == len(k._sizes) == len(v._sizes):
        raise RuntimeError(f"{name}: query, key and value must hold the same number of components")
    rest = {n: a[n] for n in a if n not in ("query", "key", "value")}
    return assemble([func(qi, ki, vi, **rest) for qi, ki, vi in zip(q.unbind(), k.unbind(), v.unbind())], q)


# ------------------------------------------------------------------ the table

_INPLACE_EXTRA = ["copy_", "fill_", "zero_", "masked_fill_", "clamp_", "add_", "sub_", "mul_", "div_"]


def _build_table():
    import lucid
    import lucid.nn.functional as F

    T = lucid.Tensor

    def put(handler, owners, names):
        register_handlers(_TABLE, handler, owners, names)

    put(_pointwise, (lucid, T), [n for n in _UNARY if n != "contiguous"] + ["to"])
    put(_pointwise, (T,), _DUNDER)
    put(_pointwise, (F,), [n for n in _F_POINTWISE if not n.endswith("_")] + ["dropout"])
    put(_inplace, (F,), [n for n in _F_POINTWISE if n.endswith("_")])
    put(_inplace, (T,), _INPLACE_DUNDER.split() + [n + "_" for n in _UNARY if n not in ("clone", "detach")]
        + _INPLACE_EXTRA)
    put(_inplace, (lucid,), [n + "_" for n in ("relu", "sigmoid", "tanh", "exp", "neg", "clamp", "dropout")])
    put(_contiguous, (T,), ["contiguous"])
    put(_passthrough, (T,), _PASSTHROUGH)
    put(_passthrough, (lucid,), ["is_floating_point", "is_complex", "numel"])
    put(_softmax, (lucid, T, F), ["softmax", "log_softmax"])
    put(_softmax, (F,), ["glu"])
    put(_reduce, (lucid, T), _REDUCTIONS)
    put(_transpose, (lucid, T), ["transpose", "swapaxes", "swapdims"])
    put(_permute, (lucid, T), ["permute"])
    put(_unsqueeze, (lucid, T), ["unsqueeze"])
    put(_squeeze, (lucid, T), ["squeeze"])
    put(_select, (lucid, T), ["select"])
    put(_narrow, (lucid, T), ["narrow"])
    put(_reshape, (T,), ["view", "reshape"])
    put(_reshape, (lucid,), ["reshape"])
    put(_flatten, (lucid, T), ["flatten"])
    put(_unflatten, (lucid, T), ["unflatten"])
    put(_split_like, (lucid, T), ["chunk", "split"])
    put(_cat, (lucid,), ["cat", "concat", "concatenate"])
    put(_unbind, (lucid,), ["unbind"])
    put(_getitem, (T,), ["__getitem__"])
    put(_matmul, (lucid, T), ["matmul", "__matmul__", "bmm"])
    put(_linear, (F,), ["linear"])
    put(_norm_layer, (F,), ["layer_norm", "rms_norm"])
    put(_sdpa, (F,), ["scaled_dot_product_attention"])
    put(_embedding, (F,), ["embedding"])
