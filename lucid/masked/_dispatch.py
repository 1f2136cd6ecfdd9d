"""What public functions do to a MaskedTensor: each maps onto dense ops on its data and its mask.

See NOTE [Masked tensors] in ``lucid/masked/__init__.py``. ``dispatch`` receives every public
call with a MaskedTensor argument (``MaskedTensor.__torch_function__``) and looks its handler up
by the called function's original; a function with no handler raises TypeError naming it (as
PyTorch's MaskedTensor refuses the ops it has no rule for).
"""
from __future__ import annotations

import lucid

from .. import overrides
from .._core.tensor import Tensor
from . import _normalizations as _norms
from . import _reductions as _reds
from ._common import canonical_dim
from ._tensor import MaskedTensor, _as_masked, plain, wrap
from ..overrides import original

_TABLE = {}

# PyTorch's lists (torch/masked/maskedtensor/{unary,binary,reductions,passthrough}.py), for the
# names Lucid has; ``relu`` is Lucid's addition.
_UNARY = """abs absolute acos arccos acosh arccosh angle asin arcsin asinh arcsinh atan arctan atanh arctanh
bitwise_not ceil clamp clip conj_physical cos cosh deg2rad digamma erf erfc erfinv exp exp2 expm1 fix floor frac
lgamma log log10 log1p log2 logit i0 isnan nan_to_num neg negative positive rad2deg reciprocal round rsqrt sigmoid
sign sgn signbit sin sinc sinh sqrt square tan tanh trunc relu""".split()
_BINARY = """add atan2 arctan2 bitwise_and bitwise_or bitwise_xor bitwise_left_shift bitwise_right_shift div divide
floor_divide fmod logaddexp logaddexp2 mul multiply nextafter remainder sub subtract true_divide eq ne le ge greater
greater_equal gt less_equal lt less maximum minimum fmax fmin not_equal pow""".split()
_BINARY_OPERATORS = """__add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __div__ __rdiv__
__floordiv__ __rfloordiv__ __mod__ __rmod__ __pow__ __rpow__ __and__ __rand__ __or__ __ror__ __xor__ __rxor__
__lshift__ __rlshift__ __rshift__ __rrshift__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__""".split()
_INPLACE_OPERATORS = """__iadd__ __isub__ __imul__ __itruediv__ __idiv__ __ifloordiv__ __imod__ __ipow__ __iand__
__ior__ __ixor__ __ilshift__ __irshift__""".split()
_UNARY_OPERATORS = "__neg__ __pos__ __abs__ __invert__".split()
_REDUCTIONS = "sum mean amin amax argmin argmax prod all any norm var std".split()
_VIEWS = """__getitem__ select transpose swapaxes swapdims t split chunk narrow expand expand_as view view_as reshape
reshape_as flatten unflatten unsqueeze squeeze permute movedim moveaxis unbind unfold""".split()
_JOINS = "cat concat concatenate stack hstack vstack".split()
# methods about the tensor rather than its values: they run on the MaskedTensor itself
_META = """size dim numel nelement element_size is_floating_point is_complex is_signed get_device is_contiguous
requires_grad_ retain_grad register_hook stride storage_offset data_ptr is_shared""".split()
_CASTS = "to float double half bfloat16 int long short char byte bool cpu cuda type".split()


_orig = original  # lucid.overrides: the wrapped function, the tables' key


_NAMES = {}  # original -> the attribute name it is reached by, where its own name says less (lambdas)


def _name(func):
    f = _orig(func)
    name = getattr(f, "__name__", None)
    if name is None or name.startswith("<"):
        name = _NAMES.get(f, name or repr(func))
    return name


def dispatch(func, args, kwargs):
    if not _TABLE:
        _TABLE.update(_build_table())  # filled whole, then published (another thread may be reading)
    handler = _TABLE.get(_orig(func))
    if handler is None:
        raise TypeError(f"{_name(func)}: not implemented for MaskedTensor; apply it to .get_data() or "
                        ".to_tensor(value) and build a MaskedTensor from the result")
    with overrides.DisableTorchFunctionSubclass():  # handlers work on plain tensors
        return handler(_orig(func), args, kwargs)


# ------------------------------------------------------------------ helpers

def _data(a):
    return plain(a) if isinstance(a, MaskedTensor) else a


def _mask(a):
    return a._masked_mask if isinstance(a, MaskedTensor) else None


def _no_tensors(name, values, what):
    for v in values:
        if isinstance(v, Tensor):
            raise TypeError(f"{name}: MaskedTensor {what} ops do not support Tensor arguments besides their operands")


def _same_masks(name, a, b):
    if a is b:
        return
    if a.ndim != b.ndim or not bool((a == b).all().item()):
        raise ValueError(f"{name}: input masks must match (MaskedTensor binary ops need equal masks; combine "
                         "the operands' to_tensor(...) under a mask of your choice instead)")


def _wrap_all(data, mask):
    if isinstance(data, Tensor):
        return wrap(data, mask)
    if isinstance(data, (tuple, list)):
        return type(data)(_wrap_all(d, m) for d, m in zip(data, mask))
    return data


# ------------------------------------------------------------------ elementwise

def _unary(orig, args, kwargs):
    name = _name(orig)
    _no_tensors(name, list(args[1:]) + list(kwargs.values()), "unary")
    mt = args[0]
    return wrap(orig(plain(mt), *args[1:], **kwargs), mt._masked_mask)


def _unary_inplace(orig, args, kwargs):
    _no_tensors(_name(orig), list(args[1:]) + list(kwargs.values()), "unary")
    orig(*args, **kwargs)  # in place on the MaskedTensor's own data; the mask stays
    return args[0]


def _operands(name, args, kwargs):
    if len(args) < 2:
        kwargs = dict(kwargs)
        args = tuple(args) + (kwargs.pop("other"),)
    _no_tensors(name, list(args[2:]) + list(kwargs.values()), "binary")
    a, b = args[0], args[1]
    ma, mb = _mask(a), _mask(b)
    if ma is not None and mb is not None:
        _same_masks(name, ma, mb)
    return a, b, args[2:], kwargs, ma if ma is not None else mb


def _binary(orig, args, kwargs):
    a, b, rest, kwargs, mask = _operands(_name(orig), args, kwargs)
    out = orig(_data(a), _data(b), *rest, **kwargs)
    return wrap(out, lucid.broadcast_to(mask, out.shape))


def _binary_inplace(orig, args, kwargs):
    a, b, rest, kwargs, _ = _operands(_name(orig), args, kwargs)
    out = orig(a, _data(b), *rest, **kwargs)
    return a if isinstance(a, MaskedTensor) else out


# ------------------------------------------------------------------ reductions

_REDUCE_KEYS = ("dim", "keepdim", "dtype")


def _reduce_args(name, args, kwargs):
    """``(dim, keepdim, dtype, extra)`` from PyTorch's MaskedTensor reduction signature
    ``(input, dim, keepdim=False, dtype=None)`` (``norm`` takes ``p`` first; ``var``/``std`` also
    take ``unbiased``/``correction`` by keyword)."""
    kwargs = dict(kwargs)
    rest = list(args[1:])
    extra = {}
    if name == "norm":
        p = rest.pop(0) if rest else kwargs.pop("p", "fro")
        extra["ord"] = 2.0 if p in ("fro", None) else p
    if name in ("var", "std"):
        for k in ("unbiased", "correction"):
            if k in kwargs:
                extra[k] = kwargs.pop(k)
    got = dict(zip(_REDUCE_KEYS, rest))
    for k in list(kwargs):
        if k not in _REDUCE_KEYS or k in got:
            raise TypeError(f"{name}: unexpected argument {k!r} for a MaskedTensor reduction")
        got[k] = kwargs.pop(k)
    return got.get("dim"), bool(got.get("keepdim", False)), got.get("dtype"), extra


def _any_over(mask, dims, keepdim):
    for d in reversed(dims):
        mask = lucid.any(mask, d, keepdim=keepdim)
    return mask


def _all_any(name, data, mask, dims, keepdim):
    x = lucid.masked_fill(data, ~mask, name == "all")  # masked-out elements don't decide
    for d in reversed(dims) if dims else ():
        x = getattr(lucid, name)(x, d, keepdim=keepdim)
    return x if dims else getattr(lucid, name)(x)


def _reduction(orig, args, kwargs):
    name = _name(orig)
    mt = args[0]
    dim, keepdim, dtype, extra = _reduce_args(name, args, kwargs)
    data, mask = plain(mt), mt._masked_mask
    dims = canonical_dim(name, dim, mt.ndim)
    if name in ("argmax", "argmin") and dim is not None:
        dims = dims[:1]  # one dim only (the masked function checks it)
    if name in ("all", "any"):
        out = _all_any(name, data, mask, dims, keepdim)
    elif name == "norm":
        out = _reds.norm(data, extra["ord"], dim, keepdim=keepdim, dtype=dtype, mask=mask)
    else:
        out = getattr(_reds, name)(data, dim, keepdim=keepdim, dtype=dtype, mask=mask, **extra)
    return wrap(out, _any_over(mask, dims, keepdim) if dims else mask)


# ------------------------------------------------------------------ softmax, where, views

_SIGNATURES = {}


def _dim_dtype(args, kwargs, f):
    """``(dim, dtype)`` of a softmax-like call."""
    sig = _SIGNATURES.get(f)
    if sig is None:
        import inspect

        sig = _SIGNATURES[f] = inspect.signature(f)
    bound = sig.bind(*args, **kwargs).arguments
    dim = bound.get("dim")
    if dim is None:
        raise TypeError(f"{f.__name__}: a MaskedTensor needs an explicit dim")
    return dim, bound.get("dtype")


def _soft(kind):
    def handler(orig, args, kwargs):
        mt = args[0]
        dim, dtype = _dim_dtype(args, kwargs, orig)
        data, mask = plain(mt), mt._masked_mask
        # the data PyTorch's masked softmax kernel gives: 0 where masked out, nan where nothing is kept
        return wrap(getattr(_norms, kind)(data, dim, dtype=dtype, mask=mask), mask)
    return handler


def _parts(value):
    """(data, mask) of an operand of ``where``: plain tensors and numbers count as all kept."""
    if isinstance(value, MaskedTensor):
        return plain(value), value._masked_mask
    if isinstance(value, Tensor):
        return value, lucid.ones(value.shape, dtype=lucid.bool, device=value.device)
    return value, True


def _where(orig, args, kwargs):
    args = list(args) + [kwargs[k] for k in ("condition", "input", "other") if k in kwargs]
    if orig is _orig(Tensor.where):
        args = [args[1], args[0]] + args[2:]  # x.where(condition, y) is where(condition, x, y)
    if len(args) != 3:
        raise TypeError("where: a MaskedTensor needs where(condition, input, other)")
    cond = _data(args[0])
    (dx, mx), (dy, my) = _parts(args[1]), _parts(args[2])
    data = lucid.where(cond, dx, dy)
    mask = lucid.where(cond, mx, my)
    if not isinstance(mask, Tensor):
        mask = lucid.tensor(mask, device=data.device)
    return wrap(data, lucid.broadcast_to(mask, data.shape))


def _map(values, fn, seq):
    out = []
    for v in values:
        if isinstance(v, MaskedTensor):
            out.append(fn(v))
        elif isinstance(v, (list, tuple)):
            out.append(type(v)(_map(v, fn, seq)))
        elif seq and fn is _mask_of and isinstance(v, Tensor):
            out.append(lucid.ones(v.shape, dtype=lucid.bool, device=v.device))
        else:
            out.append(v)
    return out


def _mask_of(mt):
    return mt._masked_mask


def _view(seq):
    def handler(orig, args, kwargs):
        data = orig(*_map(args, plain, seq), **kwargs)
        mask = orig(*_map(args, _mask_of, seq), **kwargs)
        return _wrap_all(data, mask)
    return handler


# ------------------------------------------------------------------ tensor plumbing

def _meta(orig, args, kwargs):
    return orig(*args, **kwargs)


def _backward(orig, args, kwargs):
    return orig(*_map(args, plain, False), **{k: _data(v) for k, v in kwargs.items()})


def _cast(orig, args, kwargs):
    mt = args[0]
    out = orig(plain(mt), *args[1:], **kwargs)
    if not isinstance(out, Tensor):  # x.type() names the type
        return out
    return wrap(out, mt._masked_mask.to(out.device))


def _detach(orig, args, kwargs):
    return _as_masked(orig(plain(args[0])), args[0]._masked_mask)


def _on_data(orig, args, kwargs):
    mt = args[0]
    return wrap(orig(plain(mt), *args[1:], **kwargs), mt._masked_mask)


def _item(orig, args, kwargs):
    mt = args[0]
    if mt.numel() == 1 and not bool(mt._masked_mask.reshape(()).item()):
        raise ValueError("item: the only element of this MaskedTensor is masked out")
    return orig(plain(mt))


def _data_property(orig, args, kwargs):
    return _as_masked(plain(args[0]).detach(), args[0]._masked_mask)


def _build_table():
    """``{original function: handler}`` for every function a MaskedTensor supports."""
    table = {}
    for name, f in vars(Tensor).items():
        if callable(f):
            _NAMES.setdefault(_orig(f), name)

    def put(names, handler, namespaces=(lucid, Tensor)):
        for name in names:
            for ns in namespaces:
                f = vars(ns).get(name) if isinstance(ns, type) else getattr(ns, name, None)
                if f is not None and callable(f):
                    table[_orig(f)] = handler

    put(_UNARY, _unary)
    put(_UNARY, _unary, (lucid.nn.functional,))
    put(_UNARY_OPERATORS, _unary, (Tensor,))
    put([n + "_" for n in _UNARY], _unary_inplace, (Tensor,))
    put(_BINARY, _binary)
    put(_BINARY_OPERATORS, _binary, (Tensor,))
    put([n + "_" for n in _BINARY], _binary_inplace, (Tensor,))
    put(_INPLACE_OPERATORS, _binary_inplace, (Tensor,))
    put(_REDUCTIONS, _reduction)
    put(_VIEWS, _view(False))
    put(_JOINS, _view(True))
    for kind in ("softmax", "log_softmax", "softmin"):
        put([kind], _soft(kind), (lucid, Tensor, lucid.nn.functional))
    put(["where"], _where)
    put(_META, _meta, (Tensor,))
    put(["backward"], _backward, (Tensor,))
    put(_CASTS, _cast, (Tensor,))
    put(["detach"], _detach)
    put(["clone", "contiguous", "ones_like"], _on_data)
    put(["item"], _item, (Tensor,))
    for name in ("T", "mT"):
        table[_orig(vars(Tensor)[name].fget)] = _view(False)
    table[_orig(vars(Tensor)["data"].fget)] = _data_property
    return table
