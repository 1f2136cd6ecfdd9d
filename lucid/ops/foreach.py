"""PyTorch's ``torch._foreach_*`` functions: one op applied across a list of tensors.

PyTorch fuses these into multi-tensor kernels; here each is a Python loop over the list that
calls the ordinary Lucid op on every tensor, so the results differentiate (out-of-place
forms), run on any device and follow the op's own type promotion, and the in-place forms
bump versions and refuse unsafe casts exactly as ``Tensor.add_`` and friends do.

Every function takes a list or tuple of Tensors as its first argument. The second argument
of the binary ops picks the overload, as in PyTorch: a Python number (``Scalar``), a list of
numbers (``ScalarList``, one per tensor), a list of Tensors (``List``, paired and
broadcast) or one 0-d Tensor (``Tensor``). Out-of-place forms return a tuple of new tensors;
in-place forms (trailing ``_``) return the list they were given, as PyTorch's.

Limitations: no fused kernels (the loop costs one op dispatch per tensor); the packed 1-D
``scalars`` Tensor of ``addcmul``/``addcdiv`` is read to the host once, as PyTorch does, so it
receives no gradient.
"""
import functools
import numbers

from .._core.tensor import Tensor

_lib = None


def _L():
    global _lib
    if _lib is None:
        import lucid
        _lib = lucid
    return _lib


# ------------------------------------------------------------------ checks

def _tensor_list(name, tensors, what="self"):
    if isinstance(tensors, Tensor) or not isinstance(tensors, (list, tuple)):
        raise TypeError(f"{name}(): argument '{what}' must be a list or tuple of Tensors, "
                        f"not {type(tensors).__name__}")
    if not tensors:
        raise RuntimeError(f"{name}: Tensor list must have at least one tensor.")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TypeError(f"{name}(): argument '{what}' must be a list or tuple of Tensors, "
                            f"but found an element of type {type(t).__name__}")
    return tensors


def _same_length(name, a, b):
    if len(a) != len(b):
        raise RuntimeError(f"{name}: Tensor lists must have the same number of tensors, got {len(a)} and {len(b)}")


def _is_scalar(x):
    return isinstance(x, numbers.Number) and not isinstance(x, Tensor)


def _kind(name, other, what="other"):
    """Which PyTorch overload ``other`` selects: 'scalar', 'scalars', 'list' or 'tensor'."""
    if isinstance(other, Tensor):
        return "tensor"
    if _is_scalar(other):
        return "scalar"
    if isinstance(other, (list, tuple)):
        if all(isinstance(o, Tensor) for o in other):
            return "list"
        if all(_is_scalar(o) for o in other):
            return "scalars"
    raise TypeError(f"{name}(): argument '{what}' must be a Number, a list of Numbers, a list of Tensors "
                    f"or a Tensor, not {type(other).__name__}")


def _scalar_list(name, tensors, scalars):
    if len(scalars) != len(tensors):
        raise RuntimeError(f"{name}: Tensor list must have same number of elements as scalar list, "
                           f"got {len(tensors)} and {len(scalars)}.")
    return scalars


def _zero_dim(name, other):
    if other.ndim != 0:
        raise RuntimeError(f"{name}: scalar tensor expected to be 0 dim but it has {other.ndim} dimensions "
                           f"and {other.numel()} elements.")
    return other


def _seconds(name, tensors, other, kinds, what="other"):
    """``other`` spread to one argument per tensor, after checking its overload is allowed."""
    kind = _kind(name, other, what)
    if kind not in kinds:
        raise TypeError(f"{name}(): no overload takes a {kind} as '{what}' (expected one of {', '.join(kinds)})")
    if kind == "list":
        _same_length(name, tensors, other)
        return kind, other
    if kind == "scalars":
        return kind, _scalar_list(name, tensors, other)
    if kind == "tensor":
        other = _zero_dim(name, other)
    return kind, (other,) * len(tensors)


def _store(name, t, result):
    """Write an out-of-place ``result`` into ``t`` (in-place forms with no ``Tensor`` method)."""
    lib = _L()
    if result.dtype != t.dtype and not lib.can_cast(result.dtype, t.dtype):
        raise RuntimeError(f"{name}: result type {result.dtype} can't be cast to the desired output type {t.dtype}")
    t.copy_(result)


# ------------------------------------------------------------------ unary

_UNARY = ("abs", "acos", "asin", "atan", "ceil", "cos", "cosh", "erf", "erfc", "exp", "expm1", "floor",
          "frac", "lgamma", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round", "rsqrt",
          "sigmoid", "sign", "sin", "sinh", "sqrt", "tan", "tanh", "trunc")


def _make_unary(op):
    name = f"_foreach_{op}"

    def fn(self):
        fn_ = getattr(_L(), op)
        return tuple([fn_(t) for t in _tensor_list(name, self)])

    def fn_inplace(self):
        for t in _tensor_list(name + "_", self):
            getattr(t, op + "_")()
        return self

    fn.__name__ = fn.__qualname__ = name
    fn_inplace.__name__ = fn_inplace.__qualname__ = name + "_"
    fn.__doc__ = _UNARY_DOC.format(op=op, name=name).replace("@INPLACE@", "")
    fn_inplace.__doc__ = _UNARY_DOC.format(op=op, name=name + "_").replace("@INPLACE@", " in place; returns ``self``")
    return fn, fn_inplace


_UNARY_DOC = """``{op}`` of every tensor of ``self``@INPLACE@.

    Parameters
    ----------
    self : list of Tensor

    Examples
    --------
    >>> import lucid
    >>> r = lucid.{name}([lucid.tensor([0.5]), lucid.tensor([0.25, 1.0])])
    >>> len(r)
    2
    """

for _op in _UNARY:
    globals()[f"_foreach_{_op}"], globals()[f"_foreach_{_op}_"] = _make_unary(_op)


def _foreach_zero_(self):
    """Fill every tensor of ``self`` with zeros in place; returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> xs = [lucid.ones(2)]
    >>> lucid._foreach_zero_(xs)[0].tolist()
    [0.0, 0.0]
    """
    for t in _tensor_list("_foreach_zero_", self):
        t.zero_()
    return self


def _foreach_clone(self, *, memory_format=None):
    """A copy of every tensor of ``self`` (``clone(t, memory_format=...)``).

    Examples
    --------
    >>> import lucid
    >>> lucid._foreach_clone([lucid.ones(2)])[0].tolist()
    [1.0, 1.0]
    """
    clone = _L().clone
    return tuple([clone(t, memory_format=memory_format) for t in _tensor_list("_foreach_clone", self)])


def _foreach_copy_(self, src, non_blocking=False):
    """Copy ``src[i]`` into ``self[i]`` (broadcast and cast as ``Tensor.copy_``); returns ``self``.

    Examples
    --------
    >>> import lucid
    >>> xs = [lucid.zeros(2)]
    >>> lucid._foreach_copy_(xs, [lucid.tensor([1, 2])])[0].tolist()
    [1.0, 2.0]
    """
    name = "_foreach_copy_"
    _same_length(name, _tensor_list(name, self), _tensor_list(name, src, "src"))
    for t, s in zip(self, src):
        t.copy_(s, non_blocking=non_blocking)
    return self


# ------------------------------------------------------------------ binary

# op -> (Lucid function for lists and tensors, one for numbers, Tensor method for in place
# or None, allowed overloads of `other`, overloads that take `alpha`)
_BINARY = {
    "add": ("add", "add", "add_", ("scalar", "scalars", "list", "tensor"), ("list", "tensor")),
    "sub": ("sub", "sub", "sub_", ("scalar", "scalars", "list", "tensor"), ("list",)),
    "mul": ("mul", "mul", "mul_", ("scalar", "scalars", "list", "tensor"), ()),
    "div": ("div", "div", "div_", ("scalar", "scalars", "list", "tensor"), ()),
    "clamp_min": ("clamp_min", "clamp_min", "clamp_min_", ("scalar", "scalars", "list"), ()),
    "clamp_max": ("clamp_max", "clamp_max", "clamp_max_", ("scalar", "scalars", "list"), ()),
    # PyTorch's scalar forms of maximum/minimum are clamp_min/clamp_max (NaN in, NaN out).
    "maximum": ("maximum", "clamp_min", None, ("scalar", "scalars", "list"), ()),
    "minimum": ("minimum", "clamp_max", None, ("scalar", "scalars", "list"), ()),
    "pow": ("pow", "pow", "pow_", ("scalar", "scalars", "list"), ()),
}


def _alpha_kw(name, kind, alpha, with_alpha):
    if alpha is None:
        return {}
    if kind not in with_alpha:
        raise TypeError(f"{name}(): 'alpha' is only accepted with a list of Tensors"
                        + (" or a Tensor" if "tensor" in with_alpha else "") + " as 'other'")
    return {"alpha": alpha}


def _make_binary(op):
    fname, sname, mname, kinds, with_alpha = _BINARY[op]
    name = f"_foreach_{op}"

    def fn(self, other, *, alpha=None):
        kind, others = _seconds(name, _tensor_list(name, self), other, kinds)
        kw = _alpha_kw(name, kind, alpha, with_alpha)
        f = getattr(_L(), sname if kind in ("scalar", "scalars") else fname)
        return tuple([f(t, o, **kw) for t, o in zip(self, others)])

    def fn_inplace(self, other, *, alpha=None):
        kind, others = _seconds(name + "_", _tensor_list(name + "_", self), other, kinds)
        kw = _alpha_kw(name + "_", kind, alpha, with_alpha)
        if mname is not None:
            for t, o in zip(self, others):
                getattr(t, mname)(o, **kw)
        elif kind in ("scalar", "scalars"):
            for t, o in zip(self, others):
                getattr(t, sname + "_")(o)
        else:
            f = getattr(_L(), fname)
            for t, o in zip(self, others):  # from a copy: the op saves its input, which copy_ then changes
                _store(name + "_", t, f(t.clone(), o))
        return self

    fn.__name__ = fn.__qualname__ = name
    fn_inplace.__name__ = fn_inplace.__qualname__ = name + "_"
    doc = _BINARY_DOC.format(op=op, name=name, alpha=", alpha" if with_alpha else "",
                             alpha_doc=_ALPHA_DOC if with_alpha else "", forms=", ".join(kinds))
    fn.__doc__ = doc.replace("@INPLACE@", "")
    fn_inplace.__doc__ = doc.replace("@INPLACE@", " in place; returns ``self``").replace(name + "(", name + "_(")
    return fn, fn_inplace


_ALPHA_DOC = """
    alpha : Number, optional
        Multiplier of ``other`` (only with a list of Tensors or a Tensor)."""

_BINARY_DOC = """``{op}(self[i], other[i]{alpha})`` for every tensor of ``self``@INPLACE@.

    Parameters
    ----------
    self : list of Tensor
    other : Number, list of Numbers, list of Tensors or 0-d Tensor
        The accepted forms here: {forms}.{alpha_doc}

    Examples
    --------
    >>> import lucid
    >>> lucid.{name}([lucid.tensor([1.0, 2.0])], [lucid.tensor([2.0, 2.0])])[0].tolist()
    [...]
    """

for _op in _BINARY:
    globals()[f"_foreach_{_op}"], globals()[f"_foreach_{_op}_"] = _make_binary(_op)
_foreach_pow_binary = _foreach_pow  # noqa: F821 (made by the loop above)


def _foreach_pow(self, exponent):  # noqa: F811
    """``pow(self[i], exponent[i])``; ``self`` may also be a number raised to a list of Tensors.

    Parameters
    ----------
    self : list of Tensor, or Number
    exponent : Number, list of Numbers or list of Tensors (a list of Tensors when ``self`` is a Number)

    Examples
    --------
    >>> import lucid
    >>> lucid._foreach_pow(2.0, [lucid.tensor([1.0, 3.0])])[0].tolist()
    [2.0, 8.0]
    >>> lucid._foreach_pow([lucid.tensor([3.0])], 2)[0].tolist()
    [9.0]
    """
    if _is_scalar(self):
        pow_ = _L().pow
        return tuple([pow_(self, e) for e in _tensor_list("_foreach_pow", exponent, "exponent")])
    return _foreach_pow_binary(self, exponent)


# ------------------------------------------------------------------ pointwise

def _packed_scalars(name, tensors, scalars):
    """A Number, a list of Numbers or a packed 1-D Tensor -> one Number per tensor."""
    if _is_scalar(scalars):
        return (scalars,) * len(tensors)
    if isinstance(scalars, Tensor):
        if scalars.ndim != 1:
            raise RuntimeError(f"{name}: Expected packed scalar Tensor to be of dimension 1. "
                               f"Got {scalars.ndim} instead.")
        if scalars.shape[0] != len(tensors):
            raise RuntimeError(f"{name}: Expected length of scalars to match input of length {len(tensors)} "
                               f"but got {scalars.shape[0]} instead.")
        return scalars.tolist()  # one host read, as PyTorch's kernel does
    if isinstance(scalars, (list, tuple)) and all(_is_scalar(s) for s in scalars):
        return _scalar_list(name, tensors, scalars)
    raise TypeError(f"{name}(): argument 'value'/'scalars' must be a Number, a list of Numbers or a 1-D Tensor, "
                    f"not {type(scalars).__name__}")


def _make_pointwise(op):
    name = f"_foreach_{op}"

    def _args(name_, self, tensor1, tensor2, value, scalars):
        self = _tensor_list(name_, self)
        t1, t2 = _tensor_list(name_, tensor1, "tensor1"), _tensor_list(name_, tensor2, "tensor2")
        _same_length(name_, self, t1)
        _same_length(name_, self, t2)
        return self, t1, t2, _packed_scalars(name_, self, value if scalars is None else scalars)

    def fn(self, tensor1, tensor2, value=1, *, scalars=None):
        self, t1, t2, vals = _args(name, self, tensor1, tensor2, value, scalars)
        f = getattr(_L(), op)
        return tuple([f(s, a, b, value=v) for s, a, b, v in zip(self, t1, t2, vals)])

    def fn_inplace(self, tensor1, tensor2, value=1, *, scalars=None):
        for s, a, b, v in zip(*_args(name + "_", self, tensor1, tensor2, value, scalars)):
            getattr(s, op + "_")(a, b, value=v)
        return self

    fn.__name__ = fn.__qualname__ = name
    fn_inplace.__name__ = fn_inplace.__qualname__ = name + "_"
    sym = "*" if op == "addcmul" else "/"
    doc = _POINTWISE_DOC.format(op=op, name=name, sym=sym)
    fn.__doc__ = doc.replace("@INPLACE@", "")
    fn_inplace.__doc__ = doc.replace("@INPLACE@", " in place; returns ``self``").replace(name + "(", name + "_(")
    return fn, fn_inplace


_POINTWISE_DOC = """``self[i] + value[i] * tensor1[i] {sym} tensor2[i]`` for every tensor@INPLACE@.

    Parameters
    ----------
    self, tensor1, tensor2 : list of Tensor
        Lists of one length.
    value : Number, list of Numbers or 1-D Tensor
        One multiplier for all, or one per tensor (``scalars=`` is accepted as a keyword too).

    Examples
    --------
    >>> import lucid
    >>> lucid.{name}([lucid.ones(1)], [lucid.tensor([4.0])], [lucid.tensor([2.0])], 0.5)[0].tolist()
    [...]
    """

_foreach_addcmul, _foreach_addcmul_ = _make_pointwise("addcmul")
_foreach_addcdiv, _foreach_addcdiv_ = _make_pointwise("addcdiv")


def _lerp_args(name, self, tensors1, weight):
    _same_length(name, _tensor_list(name, self), _tensor_list(name, tensors1, "tensors1"))
    kind, weights = _seconds(name, self, weight, ("scalar", "scalars", "list"), "weight")
    return zip(self, tensors1, weights)


def _foreach_lerp(self, tensors1, weight):
    """``lerp(self[i], tensors1[i], weight[i])``: ``self + weight * (end - self)``.

    Parameters
    ----------
    self, tensors1 : list of Tensor
    weight : Number, list of Numbers or list of Tensors

    Examples
    --------
    >>> import lucid
    >>> lucid._foreach_lerp([lucid.zeros(2)], [lucid.ones(2)], 0.25)[0].tolist()
    [0.25, 0.25]
    """
    lerp = _L().lerp
    return tuple([lerp(s, e, w) for s, e, w in _lerp_args("_foreach_lerp", self, tensors1, weight)])


def _foreach_lerp_(self, tensors1, weight):
    """In-place ``_foreach_lerp``; returns ``self`` (an EMA update: ``lerp_(avg, params, 1 - decay)``).

    Examples
    --------
    >>> import lucid
    >>> avg = [lucid.zeros(2)]
    >>> lucid._foreach_lerp_(avg, [lucid.ones(2)], 0.5)[0].tolist()
    [0.5, 0.5]
    """
    for s, e, w in _lerp_args("_foreach_lerp_", self, tensors1, weight):
        s.lerp_(e, w)
    return self


def _foreach_mm(self, mat2):
    """``mm(self[i], mat2[i])`` for every pair of matrices.

    Examples
    --------
    >>> import lucid
    >>> lucid._foreach_mm([lucid.ones(2, 3)], [lucid.ones(3, 1)])[0].tolist()
    [[3.0], [3.0]]
    """
    name = "_foreach_mm"
    _same_length(name, _tensor_list(name, self), _tensor_list(name, mat2, "mat2"))
    mm = _L().mm
    return tuple([mm(a, b) for a, b in zip(self, mat2)])


# ------------------------------------------------------------------ reductions

def _foreach_max(self):
    """The largest element of every tensor, as 0-d tensors (ties share the gradient as ``amax``).

    Examples
    --------
    >>> import lucid
    >>> [m.item() for m in lucid._foreach_max([lucid.tensor([1.0, 5.0]), lucid.tensor([-2])])]
    [5.0, -2]
    """
    name = "_foreach_max"
    amax = _L().amax
    out = []
    for t in _tensor_list(name, self):
        if t.numel() == 0:
            raise RuntimeError(f"{name} cannot compute the maximum of an empty tensor; "
                               "max over zero elements is undefined.")
        out.append(amax(t))
    return tuple(out)


def _foreach_norm(self, ord=2, dtype=None):
    """``linalg.vector_norm(self[i], ord, dtype=dtype)`` of every tensor, as 0-d tensors.

    Parameters
    ----------
    self : list of Tensor
        Floating point or complex tensors.
    ord : Number
        The norm's order (``inf``, ``-inf`` and ``0`` included).
    dtype : lucid.dtype, optional
        Compute and return in this dtype.

    Examples
    --------
    >>> import lucid
    >>> [n.item() for n in lucid._foreach_norm([lucid.tensor([3.0, 4.0]), lucid.tensor([-2.0])], 1)]
    [7.0, 2.0]
    """
    norm = _L().linalg.vector_norm
    return tuple([norm(t, ord, dtype=dtype) for t in _tensor_list("_foreach_norm", self)])


def _foreach_powsum(self, ord=2, dtype=None):
    """``sum(|self[i]| ** ord)`` of every tensor (a norm without the root; ``0 ** 0`` counts 1).

    Parameters
    ----------
    self : list of Tensor
        Floating point or complex tensors.
    ord : Number
    dtype : lucid.dtype, optional
        Compute and return in this dtype.

    Examples
    --------
    >>> import lucid
    >>> lucid._foreach_powsum([lucid.tensor([3.0, -4.0])], 2)[0].item()
    25.0
    """
    name = "_foreach_powsum"
    lib = _L()
    out = []
    for t in _tensor_list(name, self):
        if not (t.is_floating_point() or t.is_complex()) or (dtype is not None and dtype.kind not in "fc"):
            raise NotImplementedError(f"{name}: not implemented for '{t.dtype if dtype is None else dtype}'")
        a = lib.abs(t if dtype is None else t.to(dtype))
        out.append(lib.sum(a if ord == 1 else lib.pow(a, ord)))
    return tuple(out)


def _named_errors(fn):
    """An error of a per-tensor op names the foreach call too (``_foreach_add_: add_: result type ...``)."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (RuntimeError, ValueError, TypeError, IndexError, NotImplementedError) as e:
            if e.args and isinstance(e.args[0], str) and not e.args[0].startswith(name):
                e.args = (f"{name}: {e.args[0]}",) + e.args[1:]
            raise

    return call


__all__ = sorted(n for n in globals() if n.startswith("_foreach_") and n != "_foreach_pow_binary")
for _n in __all__:
    globals()[_n] = _named_errors(globals()[_n])

