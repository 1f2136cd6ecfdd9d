"""What public functions do to DTensors: sharding rules on the local pieces (NOTE [DTensor layout]).

``dispatch`` gets every public call with a DTensor argument and looks its rule up by the
called function's original (as ``lucid/nested/_ops.py`` does). The rules: elementwise ops
keep a common placement (Partial only where the op is linear in it), ``sum``/``mean``
reduce locally (a Partial result over a sharded dim), ``matmul``/``mm``/``linear`` pick the
Megatron layouts (colwise, rowwise, batch), views keep a shard dim they leave alone. Any
other op gathers its DTensors to ``Replicate`` and runs on whole values: correct, slower.
Each rule moves inputs with ``move`` and wraps Replicate inputs of a non-Replicate local op
with ``sum_grad`` (NOTE [DTensor gradients]).
"""
from __future__ import annotations

import inspect

from ..._core.tensor import Tensor
from ._api import DTensor
from ._redistribute import move, redistribute_local, shared_draw, sum_grad
from .placement_types import Partial, Replicate, Shard
from ...overrides import original, register_handlers
from .parallel.loss import _ACTIVE as _LOSS_PARALLEL, handler_for

_TABLE = {}
_SIGS = {}


_orig = original  # lucid.overrides: the wrapped function, the tables' key


def _name(func):
    return getattr(_orig(func), "__name__", repr(func))


def dispatch(func, args, kwargs):
    if not _TABLE:
        _build_table()
    dts = _dtensors(args, kwargs)
    if not dts:
        raise NotImplementedError(f"{_name(func)}: DTensors nested deeper than one list are not supported")
    mesh = dts[0].device_mesh
    for d in dts[1:]:
        if d.device_mesh != mesh:
            raise RuntimeError(f"{_name(func)}: DTensor arguments are on different meshes: {mesh!r} and "
                               f"{d.device_mesh!r}")
    handler = handler_for(func) if _LOSS_PARALLEL[0] else None  # NOTE [Loss parallel]: plain targets allowed
    if handler is None:
        _no_mixed(func, args, kwargs)
        handler = _TABLE.get(_orig(func), _fallback)
    if mesh.ndim != 1:
        from ._nd import dispatch_nd

        return dispatch_nd(func, args, kwargs, handler)
    return handler(func, args, kwargs)


def _dtensors(args, kwargs):
    out = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, DTensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out += [b for b in a if isinstance(b, DTensor)]
    return out


def _no_mixed(func, args, kwargs):
    if _name(func) in ("getitem", "setitem"):  # plain index tensors are indices, not operands
        args = args[:1] + args[2:]
    for a in list(args) + list(kwargs.values()):
        for b in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(b, Tensor) and not isinstance(b, DTensor) and b.ndim > 0:
                raise RuntimeError(f"{_name(func)}: got mixed Tensor and DTensor, need to convert all Tensors to "
                                   "DTensors before calling distributed operators!")


def _swap(value, fn):
    """``value`` with each DTensor ``d`` replaced by ``fn(d)`` (one level into lists and tuples)."""
    if isinstance(value, DTensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(fn(v) if isinstance(v, DTensor) else v for v in value)
    return value


def _call(func, args, kwargs, fn):
    return _orig(func)(*[_swap(a, fn) for a in args], **{k: _swap(v, fn) for k, v in kwargs.items()})


def _wrap_out(out, mesh, placement, global_shape):
    """Local results as DTensors; ``global_shape(local)`` gives each one's global shape."""
    if isinstance(out, DTensor):
        return out
    if isinstance(out, Tensor):
        return DTensor._make(out, mesh, (placement,), global_shape(out))
    if isinstance(out, tuple) and out and all(isinstance(o, Tensor) for o in out):
        wrapped = [_wrap_out(o, mesh, placement, global_shape) for o in out]
        return type(out)(*wrapped) if hasattr(out, "_fields") else tuple(wrapped)
    return out


def _shard_shape(dim, full):
    def shape(local):
        s = list(local.shape)
        s[dim] = full
        return tuple(s)
    return shape


def _local_shape(local):
    return tuple(local.shape)


def _placed(d, target, keep_grad_sum):
    """``d``'s local piece placed as ``target`` (wrapped by sum_grad when it is Replicate under a
    non-Replicate output)."""
    local = move(d._local_tensor, d.device_mesh, d.shape, d.placements[0], target)
    return sum_grad(local, d.device_mesh) if keep_grad_sum and target.is_replicate() else local


# ------------------------------------------------------------------ the fallback

def _fallback(func, args, kwargs):
    name = _name(func)
    if name.endswith("_") and not name.endswith("__") or name == "setitem":
        return _inplace(func, args, kwargs)
    dts = _dtensors(args, kwargs)
    mesh = dts[0].device_mesh
    out = _call(func, args, kwargs, lambda d: _placed(d, Replicate(), False))
    return _wrap_out(out, mesh, Replicate(), _local_shape)


def _inplace(func, args, kwargs):
    """In-place ops on DTensors of one placement (Shard or Replicate) run on the pieces."""
    name = _name(func)
    dts = _dtensors(args, kwargs)
    self = args[0]
    if not isinstance(self, DTensor):
        raise RuntimeError(f"{name}: an in-place op on a plain tensor can't take a DTensor argument")
    p = self.placements[0]
    if p.is_partial():
        raise NotImplementedError(f"{name}: in place on a Partial DTensor is not supported (placements "
                                  f"{self.placements}); redistribute it first")
    if name == "setitem":
        return _setitem(func, self, args[1], args[2])
    if name not in _INPLACE_POINTWISE:  # indices or random draws would be read per piece
        raise NotImplementedError(f"{name}: not supported in place on a DTensor ({self.placements}); use the "
                                  "out-of-place op or work on full_tensor()")
    # the other arguments are laid out as ``self`` (a broadcast shard dim: Replicate)
    targets = {id(d): _target_for(d, p, self.ndim, tuple(self.shape)) for d in dts if d is not self}
    _call(func, args, kwargs, lambda d: d._local_tensor if d is self else _placed(d, targets[id(d)], False))
    return self


def _setitem(func, self, index, value):
    """``self[index] = value`` with a global index: on the whole value, then this rank's piece kept."""
    if isinstance(index, DTensor) or isinstance(index, tuple) and any(isinstance(i, DTensor) for i in index):
        index = _swap(index, lambda d: _placed(d, Replicate(), False))
    if isinstance(value, DTensor):
        value = _placed(value, Replicate(), False)
    p, mesh = self.placements[0], self.device_mesh
    if p.is_replicate():
        _orig(func)(self._local_tensor, index, value)
        return None
    full = _placed(self, Replicate(), False).clone()
    _orig(func)(full, index, value)
    self._local_tensor.copy_(move(full, mesh, self.shape, Replicate(), p))
    return None


def _target_for(d, out_p, out_nd, out_shape):
    """Where argument ``d`` must be for an elementwise op whose output is placed ``out_p``."""
    if not out_p.is_shard():
        return Replicate()
    ad = out_p.dim - (out_nd - d.ndim)
    return Shard(ad) if ad >= 0 and d.shape[ad] == out_shape[out_p.dim] else Replicate()


# ------------------------------------------------------------------ elementwise

def _pointwise(func, args, kwargs, kind=None):
    dts = _dtensors(args, kwargs)
    mesh = dts[0].device_mesh
    shapes = [tuple(d.shape) for d in dts]
    out_nd = max(len(s) for s in shapes)
    out_shape = _broadcast(func, shapes)
    scalars = any(not isinstance(a, DTensor) and isinstance(a, (int, float, complex, Tensor))
                  for a in args[1:] + tuple(kwargs.get(k) for k in ("other",) if k in kwargs))
    partial = [d for d in dts if d.placements[0].is_partial()]
    linear = partial and all(p.placements == partial[0].placements for p in partial) and (
        (kind == "unary") or (kind == "add" and not scalars)
        or (kind == "mul" and len(partial) == 1)
        or (kind == "div" and len(partial) == 1 and args[0] is partial[0] and kwargs.get("rounding_mode") is None))
    if linear:
        out_p = partial[0].placements[0]
        targets = {id(d): (out_p if (d.placements[0].is_partial() or kind == "add") else Replicate()) for d in dts}
    else:
        out_p = _common_shard(dts, out_nd, out_shape)
        targets = {id(d): _target_for(d, out_p, out_nd, out_shape) for d in dts}
    grad_sum = not out_p.is_replicate()
    out = _call(func, args, kwargs, lambda d: _placed(d, targets[id(d)], grad_sum))
    shape = _shard_shape(out_p.dim, out_shape[out_p.dim]) if out_p.is_shard() else _local_shape
    return _wrap_out(out, mesh, out_p, shape)


def _common_shard(dts, out_nd, out_shape):
    """The output placement of an elementwise op: the shard (as an output dim) of the first
    argument of the most dims whose shard is not broadcast, as PyTorch picks; else Replicate."""
    for d in sorted(dts, key=lambda d: -d.ndim):
        p = d.placements[0]
        if p.is_shard() and d.shape[p.dim] == out_shape[p.dim + out_nd - d.ndim]:
            return Shard(p.dim + out_nd - d.ndim)
    return Replicate()


def _broadcast(func, shapes):
    nd = max(len(s) for s in shapes)
    out = []
    for i in range(nd):
        sizes = {s[i - nd + len(s)] for s in shapes if i - nd + len(s) >= 0} - {1}
        if len(sizes) > 1:
            raise RuntimeError(f"{_name(func)}: the shapes {shapes} don't broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _unary(func, args, kwargs):
    return _pointwise(func, args, kwargs, "unary")


def _add(func, args, kwargs):
    return _pointwise(func, args, kwargs, "add")


def _mul(func, args, kwargs):
    return _pointwise(func, args, kwargs, "mul")


def _div(func, args, kwargs):
    return _pointwise(func, args, kwargs, "div")


# ------------------------------------------------------------------ reductions

def _bind(func, args, kwargs):
    f = _orig(func)
    sig = _SIGS.get(f)
    if sig is None:
        sig = _SIGS[f] = inspect.signature(f)
    bound = sig.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _reduce(func, args, kwargs):
    name = _name(func)
    a = _bind(func, args, kwargs)
    x = a["input"]
    if not isinstance(x, DTensor) or a.get("axis") is not None:
        return _fallback(func, args, kwargs)
    nd, p, mesh = x.ndim, x.placements[0], x.device_mesh
    dim = a["dim"]
    dims = tuple(range(nd)) if dim is None or dim == () or dim == [] else \
        tuple(sorted({int(d) % max(nd, 1) for d in (dim if isinstance(dim, (list, tuple)) else (dim,))}))
    keep = bool(a["keepdim"])
    out_shape = tuple(1 if i in dims else s for i, s in enumerate(x.shape) if keep or i not in dims)
    local = x._local_tensor
    if p.is_shard() and p.dim in dims:
        count = 1
        for d in dims:
            count *= x.shape[d]
        total = _orig(Tensor.sum)(local, dim=dims if dim is not None else None, keepdim=keep, dtype=a["dtype"])
        if total.ndim != len(out_shape):
            total = total.reshape(out_shape)
        if name == "mean":
            total = total / count
        out = DTensor._make(total, mesh, (Partial(),), out_shape)
        return out.redistribute(placements=[Replicate()]) if name == "mean" else out
    if p.is_shard():
        od = p.dim if keep else p.dim - sum(1 for d in dims if d < p.dim)
        res = _orig(func)(*[local if v is x else v for v in args], **kwargs)
        return DTensor._make(res, mesh, (Shard(od),), out_shape)
    res = _orig(func)(*[local if v is x else v for v in args], **kwargs)
    return DTensor._make(res, mesh, (p,), out_shape)


def _softmax(func, args, kwargs):
    a = _bind(func, args, kwargs)
    x, dim = a["input"], a.get("dim")
    p = x.placements[0] if isinstance(x, DTensor) else None
    if p is None or dim is None or not p.is_shard() or int(dim) % max(x.ndim, 1) == p.dim:
        return _fallback(func, args, kwargs)
    return _pointwise(func, args, kwargs)


def _like(func, args, kwargs):
    """``zeros_like``/``ones_like``/``full_like``/``empty_like``: made piece by piece where that is the value."""
    x = args[0]
    p = x.placements[0]
    if p.is_partial() and _name(func) not in ("zeros_like", "empty_like"):
        return _fallback(func, args, kwargs)
    out = _call(func, args, kwargs, lambda d: d._local_tensor)
    return DTensor._make(out, x.device_mesh, (p,), x.shape)


def _random(func, args, kwargs):
    """Random ops draw one global value (NOTE [DTensor random values]) and keep the local piece."""
    import lucid

    name = _name(func)
    x = args[0] if args else kwargs.get("input")
    mesh, shape = x.device_mesh, tuple(x.shape)
    if x.placements[0].is_partial():
        x = x.redistribute(placements=[Replicate()])
    p = x.placements[0]

    def piece(draw):
        full = shared_draw(draw, mesh)
        return redistribute_local(full, mesh, shape, Replicate(), p)

    if name == "dropout":
        a = _bind(func, args, kwargs)
        if not a["training"] or a["p"] == 0:
            return args[0]
        if a["inplace"]:
            raise NotImplementedError("dropout: inplace=True is not supported on DTensors")
        mask = piece(lambda: _orig(func)(lucid.ones(shape, dtype=x.dtype), a["p"], True))
        return DTensor._make(x._local_tensor * mask, mesh, (p,), shape)
    if name == "bernoulli" and (len(args) < 2 or args[1] is None) and kwargs.get("p") is None:
        u = piece(lambda: lucid.rand(shape, dtype=x.dtype, generator=kwargs.get("generator")))
        return DTensor._make((u < x._local_tensor.detach()).to(x.dtype), mesh, (p,), shape)
    rest = {k: v for k, v in kwargs.items() if k != "input"}
    out = piece(lambda: _orig(func)(lucid.zeros(shape, dtype=x.dtype), *args[1:], **rest).detach())
    if rest.get("requires_grad"):
        out.requires_grad_(True)
    return DTensor._make(out, mesh, (p,), shape)


def _norm(func, args, kwargs):
    """``layer_norm``/``rms_norm`` normalize the last dims: a shard on an earlier dim stays local."""
    a = _bind(func, args, kwargs)
    x = a["input"]
    k = 1 if isinstance(a["normalized_shape"], int) else len(tuple(a["normalized_shape"]))
    p = x.placements[0] if isinstance(x, DTensor) else None
    if p is None or not p.is_shard() or p.dim >= x.ndim - k:
        return _fallback(func, args, kwargs)
    return _pointwise(func, args, kwargs)


# ------------------------------------------------------------------ matmul

def _matmul_dt(api, x, w):
    """``x @ w`` for DTensors ``x`` (..., k) and a 2-D ``w`` (k, m), with Megatron's layouts."""
    if x.ndim < 2 or w.ndim != 2:
        return None
    if x.shape[-1] != w.shape[0]:
        raise RuntimeError(f"{api}: mat1 and mat2 shapes cannot be multiplied ({'x'.join(map(str, x.shape))} and "
                           f"{'x'.join(map(str, w.shape))})")
    mesh, last = x.device_mesh, x.ndim - 1
    px, pw = x.placements[0], w.placements[0]
    out_shape = tuple(x.shape[:-1]) + (w.shape[1],)
    if px.is_partial() and pw.is_partial():
        px = Replicate()
    if px.is_partial() or pw.is_partial():
        tx, tw, out = (px, Replicate(), px) if px.is_partial() else (Replicate(), pw, pw)
    elif px.is_shard() and px.dim < last:
        tx, tw, out = px, Replicate(), px
    elif px.is_shard():
        tx, tw, out = px, Shard(0), Partial()
    elif pw.is_shard(1):
        tx, tw, out = px, pw, Shard(last)
    elif pw.is_shard(0):
        tx, tw, out = Shard(last), pw, Partial()
    else:
        tx, tw, out = px, pw, Replicate()
    grad_sum = not out.is_replicate()
    lx, lw = _placed(x, tx, grad_sum), _placed(w, tw, grad_sum)
    res = _orig(Tensor.matmul)(lx, lw)
    return DTensor._make(res, mesh, (out,), out_shape)


def _matmul(func, args, kwargs):
    a = _bind(func, args, kwargs)
    vals = list(a.values())
    x, w = vals[0], vals[1]
    if isinstance(x, DTensor) and isinstance(w, DTensor) and not a.get("out"):
        out = _matmul_dt(_name(func), x, w)
        if out is not None:
            return out
    return _fallback(func, args, kwargs)


def _linear(func, args, kwargs):
    a = _bind(func, args, kwargs)
    x, w, b = a["input"], a["weight"], a["bias"]
    if not (isinstance(x, DTensor) and isinstance(w, DTensor)) or (b is not None and not isinstance(b, DTensor)):
        return _fallback(func, args, kwargs)
    y = _matmul_dt("linear", x, _transpose_dt(w, 0, 1))
    if y is None:
        return _fallback(func, args, kwargs)
    return y if b is None else _pointwise(Tensor.__add__, (y, b), {}, "add")


def _embedding(func, args, kwargs):
    a = _bind(func, args, kwargs)
    idx, w = a["input"], a["weight"]
    if not (isinstance(idx, DTensor) and isinstance(w, DTensor)) or not idx.placements[0].is_replicate() \
            or w.placements[0].is_partial() or w.placements[0].is_shard(0) or a.get("max_norm") is not None:
        return _fallback(func, args, kwargs)
    out = w.placements[0]
    if out.is_shard():
        out = Shard(idx.ndim)  # each rank looks up its columns of every row
    local = _orig(func)(idx._local_tensor, w._local_tensor, *[v for k, v in a.items() if k not in ("input", "weight")])
    return DTensor._make(local, w.device_mesh, (out,), tuple(idx.shape) + (w.shape[1],))


# ------------------------------------------------------------------ views

def _transpose_dt(x, d0, d1):
    nd = x.ndim
    d0, d1 = d0 % nd, d1 % nd
    p = x.placements[0]
    if p.is_shard() and p.dim in (d0, d1):
        p = Shard(d1 if p.dim == d0 else d0)
    shape = list(x.shape)
    shape[d0], shape[d1] = shape[d1], shape[d0]
    return DTensor._make(_orig(Tensor.transpose)(x._local_tensor, d0, d1), x.device_mesh, (p,), shape)


def _transpose(func, args, kwargs):
    a = _bind(func, args, kwargs)
    vals = list(a.values())
    return _transpose_dt(vals[0], int(vals[1]), int(vals[2]))


def _t(func, args, kwargs):
    x = args[0]
    if x.ndim < 2:
        return x
    return _transpose_dt(x, 0, 1)


def _permute(func, args, kwargs):
    x = args[0]
    dims = args[1:] if len(args) > 2 or not isinstance(args[1], (list, tuple)) else args[1]
    dims = tuple(int(d) % x.ndim for d in (kwargs.get("dims") or dims))
    p = x.placements[0]
    if p.is_shard():
        p = Shard(dims.index(p.dim))
    res = _orig(Tensor.permute)(x._local_tensor, *dims)
    return DTensor._make(res, x.device_mesh, (p,), tuple(x.shape[d] for d in dims))


def _unsqueeze(func, args, kwargs):
    a = _bind(func, args, kwargs)
    x, nd = a["input"], a["input"].ndim + 1
    d = int(a["dim"])
    if not -nd <= d < nd:
        return _fallback(func, args, kwargs)  # the op's own error
    d %= nd
    p = x.placements[0]
    if p.is_shard():
        p = Shard(p.dim + (d <= p.dim))
    shape = list(x.shape)
    shape.insert(d, 1)
    return DTensor._make(_orig(func)(x._local_tensor, d), x.device_mesh, (p,), shape)


def _prop_t(func, args, kwargs):
    x = args[0]
    return _transpose_dt(x, 0, 1) if x.ndim == 2 else _fallback(func, args, kwargs)


def _prop_mt(func, args, kwargs):
    x = args[0]
    return _transpose_dt(x, -2, -1) if x.ndim >= 2 else _fallback(func, args, kwargs)


def _view(func, args, kwargs):
    x = args[0]
    shape = args[1:]
    if len(shape) == 1 and isinstance(shape[0], (list, tuple)):
        shape = shape[0]
    shape = kwargs.get("shape", shape)
    if not isinstance(x, DTensor) or any(isinstance(s, Tensor) for s in shape):
        return _fallback(func, args, kwargs)
    shape = _resolve(_name(func), x, [int(s) for s in shape])
    p = x.placements[0]
    if not p.is_shard():
        return DTensor._make(_orig(func)(x._local_tensor, shape), x.device_mesh, (p,), shape)
    found = _shard_view(tuple(x.shape), shape, p.dim, x.device_mesh.size(), x._local_tensor.shape[p.dim])
    if found is None:
        full = _placed(x, Replicate(), False)
        return DTensor._make(_orig(func)(full, shape), x.device_mesh, (Replicate(),), shape)
    od, local_size = found
    local_shape = list(shape)
    local_shape[od] = local_size
    return DTensor._make(_orig(func)(x._local_tensor, local_shape), x.device_mesh, (Shard(od),), shape)


def _resolve(api, x, shape):
    n = x.numel()
    if shape.count(-1) > 1:
        raise RuntimeError(f"{api}: only one dimension can be inferred")
    if -1 in shape:
        rest = 1
        for s in shape:
            rest *= s if s != -1 else 1
        if rest == 0 or n % rest:
            raise RuntimeError(f"{api}: shape '{list(shape)}' is invalid for input of size {n}")
        shape[shape.index(-1)] = n // rest
    total = 1
    for s in shape:
        total *= s
    if total != n:
        raise RuntimeError(f"{api}: shape '{list(shape)}' is invalid for input of size {n}")
    return tuple(shape)


def _shard_view(old, new, d, n, local):
    """``(output dim, its local size)`` when viewing ``old`` as ``new`` keeps a shard on ``old``'s dim
    ``d``: the dim kept as is (any pieces), or split with its shard on the first part, or merged
    as the first of a group (even pieces only, as PyTorch); None otherwise."""
    before = 1
    for s in old[:d]:
        before *= s
    acc, od = 1, None
    for i, s in enumerate(new):
        if acc == before and s != 1 or acc == before and old[d] == 1:
            od = i
            break
        acc *= s
    if od is None:
        return None
    if new[od] == old[d]:
        return od, local
    if old[d] % n or new[od] % n:
        return None
    group, k = new[od], od
    while group < old[d] and k + 1 < len(new):  # old's dim d split over new[od:k+1]
        k += 1
        group *= new[k]
    if group == old[d]:
        return od, new[od] // n
    group, k = old[d], d
    while group < new[od] and k + 1 < len(old):  # old[d:k+1] merged into new's dim od
        k += 1
        group *= old[k]
    return (od, new[od] // n) if group == new[od] else None


# ------------------------------------------------------------------ the table

_UNARY_NAMES = """abs absolute exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan tanh sigmoid relu sign
sgn floor ceil round trunc frac reciprocal square erf erfc erfinv sinh cosh asin acos atan asinh acosh atanh arcsin
arccos arctan arcsinh arccosh arctanh nan_to_num clamp clip clamp_min clamp_max isnan isinf isfinite isposinf
isneginf logical_not bitwise_not deg2rad rad2deg logit i0 sinc digamma lgamma signbit pow float_power atan2
arctan2 maximum minimum fmax fmin eq ne lt le gt ge greater less greater_equal less_equal not_equal logical_and
logical_or logical_xor where lerp addcmul addcdiv hypot copysign xlogy remainder fmod floor_divide
bitwise_and bitwise_or bitwise_xor heaviside""".split()
_LINEAR_UNARY = "neg negative positive clone detach contiguous to double float half bfloat16 conj".split()
_F_UNARY = """relu relu6 gelu silu elu selu celu leaky_relu hardtanh hardsigmoid hardswish softplus mish tanh
sigmoid logsigmoid softsign tanhshrink threshold hardshrink softshrink""".split()
_DUNDER = """__pow__ __rpow__ __floordiv__ __rfloordiv__ __mod__ __rmod__ __abs__ __eq__ __ne__ __lt__ __le__
__gt__ __ge__ __and__ __or__ __xor__ __invert__ __rand__ __ror__ __rxor__""".split()
_INPLACE_POINTWISE = frozenset("""add_ sub_ mul_ div_ truediv_ pow_ copy_ zero_ fill_ clamp_ clamp_min_ clamp_max_
clip_ masked_fill_ neg_ abs_ exp_ log_ sqrt_ relu_ sigmoid_ tanh_ lerp_ addcmul_ addcdiv_ sin_ cos_ reciprocal_
floor_ ceil_ round_ trunc_ sign_ square_ nan_to_num_ detach_ requires_grad_""".split())


def _build_table():
    import lucid
    import lucid.nn.functional as F

    T = lucid.Tensor

    def put(handler, owners, names):
        register_handlers(_TABLE, handler, owners, names, getters=True)

    put(_pointwise, (lucid, T), _UNARY_NAMES)
    put(_pointwise, (T,), _DUNDER)
    put(_pointwise, (F,), _F_UNARY)
    put(_unary, (lucid, T), _LINEAR_UNARY)
    put(_unary, (T,), ["__neg__", "__pos__"])
    put(_add, (lucid, T), ["add", "sub", "subtract"])
    put(_add, (T,), ["__add__", "__radd__", "__sub__", "__rsub__"])
    put(_mul, (lucid, T), ["mul", "multiply"])
    put(_mul, (T,), ["__mul__", "__rmul__"])
    put(_div, (lucid, T), ["div", "divide", "true_divide"])
    put(_div, (T,), ["__truediv__"])
    put(_pointwise, (T,), ["__rtruediv__"])
    put(_reduce, (lucid, T), ["sum", "mean"])
    put(_matmul, (lucid, T), ["matmul", "mm", "__matmul__"])
    put(_linear, (F,), ["linear"])
    put(_embedding, (F,), ["embedding"])
    put(_transpose, (lucid, T), ["transpose", "swapaxes", "swapdims"])
    put(_t, (lucid, T), ["t"])
    put(_permute, (lucid, T), ["permute"])
    put(_view, (T,), ["view", "reshape"])
    put(_view, (lucid,), ["reshape"])
    put(_softmax, (lucid, T, F), ["softmax", "log_softmax"])
    put(_unsqueeze, (lucid, T), ["unsqueeze"])
    put(_norm, (F,), ["layer_norm", "rms_norm"])
    put(_prop_t, (T,), ["T"])
    put(_prop_mt, (T,), ["mT"])
    put(_like, (lucid,), ["zeros_like", "ones_like", "full_like", "empty_like"])
    put(_random, (lucid,), ["rand_like", "randn_like", "bernoulli"])
    put(_random, (T,), ["bernoulli"])
    put(_random, (F,), ["dropout"])
