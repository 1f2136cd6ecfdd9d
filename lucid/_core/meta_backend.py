"""The ``"meta"`` device: tensors with a shape and a dtype and no values; ops infer shapes.

NOTE [Meta device]
PyTorch's meta tensors serve two purposes: a template module whose parameters are all replaced
(``copy.deepcopy(model).to("meta")`` as the base of ``functional_call`` in model ensembling:
it holds no second copy of the weights), and shape inference (every op runs on meta inputs and
returns a meta output, with its gradient too). Lucid has both. Tensors and modules move to
``"meta"``, factory functions make meta tensors, ``with lucid.device("meta"):`` builds a model
without memory; and every op whose output shape does not depend on values runs there, forward
and backward, and returns meta tensors of the shape and dtype the CPU would give.

How, without a meta rule per op: a :class:`MetaArray` wraps a *proxy*, a NumPy array of its
shape and dtype whose strides are all 0 over a single element (``as_strided``), so it costs
one element of memory at any shape. Ops reach it through NumPy's dispatch (NEP 13/18), as they
reach CuPy's arrays (NOTE [Backends]): an op's NumPy code runs unchanged on the proxies, and
every array it returns is wrapped again, keeping only its shape and dtype (a computed result's
memory is dropped at once, a view stays a view of its base's element, so views share their
base's version counter as on other devices). What would cost time or memory on a big proxy
has a shape rule instead: elementwise ufuncs (broadcast shapes; the dtype from a 0-d call),
``matmul``, ``where``, ``einsum``, copies (``ascontiguousarray``, ``astype``) and array
creation. Everything else really runs on the proxies: its time is the CPU op's on zeros (linear
algebra on identity matrices, so nothing is singular), and its output is allocated and
dropped; a template's forward pass on big inputs is therefore not free, only memory-light.

What cannot run: an op whose output *shape* depends on values (``nonzero``, ``unique``,
boolean-mask indexing, ``bincount`` ..., in ``_DATA_DEPENDENT``) raises, as PyTorch's meta
kernels do; so does reading a value (``item``, ``bool``, ``tolist``, ``.cpu()``: "Cannot copy
out of meta tensor; no data!"). Host NumPy arrays and other devices' arrays are refused as
operands (mixed devices, named by ``bind``). Strides are reported as a contiguous tensor's
(a difference from PyTorch, whose meta tensors keep a view's strides). Registered when the
device is first named: ``import lucid`` pays nothing.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

_NO_DATA = ("meta tensors have no data: on Lucid's 'meta' device tensors hold shapes and dtypes "
            "only, so their values can't be read")
_NO_COPY = "Cannot copy out of meta tensor; no data!"
_as_strided = np.lib.stride_tricks.as_strided


def _refuse(*args, **kwargs):
    raise NotImplementedError(_NO_DATA)


def _fresh_proxy(shape, dtype):
    """A writable array of ``shape`` and ``dtype`` holding one element (all strides 0)."""
    shape = tuple(int(s) for s in shape)
    return _as_strided(np.zeros(1, dtype), shape, (0,) * len(shape))


def _rebased(view):
    """``view`` (of a proxy) with every stride 0: an ``as_strided`` with real strides over
    a proxy's single element would reach outside it."""
    if not any(view.strides):
        return view
    return _as_strided(view, view.shape, (0,) * view.ndim)


class MetaArray(NDArrayOperatorsMixin):
    """A shape and a dtype, standing where an array would (see NOTE [Meta device]).

    Examples
    --------
    >>> import lucid
    >>> x = lucid.ones(2, 3, device="meta")
    >>> y = (x @ lucid.ones(3, 4, device="meta")).exp().sum(0)
    >>> y.shape, y.dtype, y.device
    ((4,), lucid.float32, device(type='meta'))
    """

    __slots__ = ("_p", "__weakref__")
    __array_priority__ = 1000

    def __init__(self, shape, dtype=None):
        # ``MetaArray(shape, dtype)``, or ``MetaArray(proxy)`` for a view of a proxy
        self._p = _fresh_proxy(shape, dtype) if dtype is not None else _rebased(shape)

    shape = property(lambda self: self._p.shape)
    dtype = property(lambda self: self._p.dtype)
    ndim = property(lambda self: self._p.ndim)
    size = property(lambda self: self._p.size)
    itemsize = property(lambda self: self._p.itemsize)
    nbytes = property(lambda self: self._p.size * self._p.itemsize)

    @property
    def strides(self):  # a contiguous layout's (see NOTE [Meta device])
        out, step = [], self._p.itemsize
        for s in reversed(self._p.shape):
            out.append(step)
            step *= max(s, 1)
        return tuple(reversed(out))

    @property
    def flags(self):
        return _Flags(self.ndim)

    @property
    def base(self):
        return None

    @property
    def T(self):  # noqa: N802
        return MetaArray(self._p.T)

    @property
    def real(self):
        return _wrap(self._p.real, (self._p,))

    @real.setter
    def real(self, value):  # broadcasting and casting checked, nothing stored
        self._p.real = _unwrap(value)

    @property
    def imag(self):
        return _wrap(self._p.imag, (self._p,))

    @imag.setter
    def imag(self, value):
        self._p.imag = _unwrap(value)

    @property
    def device(self):
        return "meta"

    # -- copies and conversions: shape rules (NumPy would fill a whole array)
    def astype(self, dtype, copy=True, **kwargs):
        return self if not copy and np.dtype(dtype) == self.dtype else MetaArray(self.shape, dtype)

    def copy(self, order="C"):
        return MetaArray(self.shape, self.dtype)

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):
        return (MetaArray, (self.shape, self.dtype.str))

    def flatten(self, order="C"):
        return MetaArray((self.size,), self.dtype)

    def ravel(self, order="C"):  # a view: a proxy reshapes without copying
        return MetaArray(self._p.reshape(-1))

    def view(self, dtype=None, *args):
        if dtype is None or np.dtype(dtype).itemsize == self.itemsize:
            return MetaArray(self._p.view() if dtype is None else _as_strided(
                self._p.view(dtype), self.shape, (0,) * self.ndim))
        # a reinterpreting view: NumPy's rule for a contiguous array, the last axis rescaled
        new = np.dtype(dtype)
        if not self.shape:
            raise ValueError("Changing the dtype of a 0d array is only supported if the itemsize is unchanged")
        last = self.shape[-1] * self.itemsize
        if last % new.itemsize:
            raise ValueError("When changing to a smaller dtype, its size must be a divisor of the size "
                             "of original dtype" if new.itemsize < self.itemsize else
                             "When changing to a larger dtype, its size must be a divisor of the total "
                             "size in bytes of the last axis of the array.")
        return MetaArray(self.shape[:-1] + (last // new.itemsize,), new)

    def fill(self, value):
        pass

    def dot(self, b, out=None):
        return _dot(self, b, out)

    # -- dispatch (NEP 13/18)
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method == "__call__" and (ufunc.signature is None or ufunc is np.matmul):
            return _ufunc_call(ufunc, inputs, kwargs)
        if method == "outer" and not kwargs:
            a, b = inputs
            dtype = _tiny_call(ufunc, (_tiny(a), _tiny(b)), {})
            return _meta_results(_shape_of(a) + _shape_of(b), dtype)
        if method == "at":  # a scatter into a meta array: check the operands, change nothing
            _check_scatter(inputs)
            return None
        return _fallback(getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        rule = _FUNCTION_RULES.get(func)
        if rule is not None:
            return rule(*args, **kwargs)
        return _fallback(func, args, kwargs)

    def __array__(self, dtype=None, copy=None):
        raise NotImplementedError(_NO_COPY)

    def __getattr__(self, name):  # other array methods, on the proxy
        if name.startswith("__"):
            raise AttributeError(name)
        attr = getattr(self._p, name)
        if not callable(attr):
            return attr

        def method(*args, **kwargs):
            if name in _DATA_DEPENDENT:
                raise _data_dependent(name)
            return _wrap(attr(*_unwrap(args), **_unwrap(kwargs)), (self._p,))

        method.__name__ = name
        return method

    def __getitem__(self, key):
        key = _unwrap_key(key)
        return _wrap(self._p[key], (self._p,))

    def __setitem__(self, key, value):  # broadcasting and casting checked, nothing stored
        self._p[_unwrap_key(key)] = _unwrap(value)

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of a 0-d tensor")
        return self.shape[0]

    def __iter__(self):
        return (MetaArray(p) for p in self._p)

    def __repr__(self):
        return f"MetaArray(shape={self.shape}, dtype={self.dtype})"

    item = tolist = tobytes = get = _refuse
    __bool__ = __float__ = __int__ = __complex__ = __index__ = _refuse


class _Flags:
    """A contiguous array's flags; like CuPy's, without ``writeable``."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, ndim):
        self.c_contiguous, self.f_contiguous, self.owndata = True, ndim <= 1, True

    def __getitem__(self, key):
        return {"C_CONTIGUOUS": self.c_contiguous, "F_CONTIGUOUS": self.f_contiguous,
                "OWNDATA": self.owndata}[key]


# ----------------------------------------------------------------------- wrapping and unwrapping

def _host_operand_error(a):
    return TypeError(f"meta device: a host NumPy array of shape {a.shape} met a meta array (mixed "
                     "devices: move it with .to('meta'))")


def _unwrap(x, allow_host=False, linalg=False):
    """The proxies inside ``x`` (identity matrices for linear algebra: nothing is singular)."""
    cls = x.__class__
    if cls is MetaArray:
        if linalg and x.ndim >= 2:
            m, n = x.shape[-2:]
            return np.broadcast_to(np.eye(m, n, dtype=x.dtype), x.shape)
        return x._p
    if cls is np.ndarray:
        if allow_host:
            return x
        raise _host_operand_error(x)
    if cls is list or cls is tuple:
        return cls(_unwrap(v, allow_host, linalg) for v in x)
    if cls is dict:
        return {k: _unwrap(v, allow_host, linalg) for k, v in x.items()}
    if cls is slice:
        return slice(_unwrap(x.start), _unwrap(x.stop), _unwrap(x.step))
    from . import backend

    if cls in backend.DEVICE_NAMESPACES:
        raise TypeError(f"meta device: an array of device type {backend.backend_of(x).type!r} met a "
                        "meta array (mixed devices)")
    return x


def _unwrap_key(key):
    keys = key if isinstance(key, tuple) else (key,)
    for k in keys:
        if k.__class__ is MetaArray and k.dtype == np.bool_:
            raise _data_dependent("indexing with a boolean mask")
    return _unwrap(key, allow_host=True)


def _wrap(r, sources=()):
    """A result computed on proxies, as meta: views stay views of their base's element, computed
    arrays keep only their shape and dtype, values read by Python become 0-d meta arrays."""
    cls = r.__class__
    if cls is np.ndarray:
        for s in sources:
            if s.__class__ is np.ndarray and np.may_share_memory(r, s):
                return MetaArray(r)
        return MetaArray(r.shape, r.dtype)
    if isinstance(r, np.generic):
        return MetaArray((), r.dtype)
    if cls is bool or cls is int or cls is float or cls is complex:
        return MetaArray((), np.asarray(r).dtype)
    if cls is tuple or cls is list:
        return cls(_wrap(v, sources) for v in r)
    if isinstance(r, tuple):  # NumPy's named results (SVDResult ...): plain, as CuPy's
        return tuple(_wrap(v, sources) for v in r)
    return r


def _proxies_in(x, out):
    if x.__class__ is np.ndarray:
        out.append(x)
    elif x.__class__ in (list, tuple):
        for v in x:
            _proxies_in(v, out)
    elif x.__class__ is dict:
        for v in x.values():
            _proxies_in(v, out)
    return out


def _fallback(func, args, kwargs):
    """Run ``func`` on the proxies; see NOTE [Meta device]."""
    name = getattr(func, "__name__", "")
    if name in _DATA_DEPENDENT and not (name == "bincount" and kwargs.get("minlength")):
        # (a bincount with a minlength is how ops scatter-add: their indices stay below it)
        raise _data_dependent(name)
    if name in _METADATA_FUNCTIONS:
        return func(*_unwrap(args), **_unwrap(kwargs))
    linalg = getattr(func, "__module__", "") in _LINALG_MODULES
    args, kwargs = _unwrap(args, linalg=linalg), _unwrap(kwargs, linalg=linalg)
    with np.errstate(all="ignore"):
        r = func(*args, **kwargs)
    return _wrap(r, _proxies_in(args, _proxies_in(kwargs, [])))


def _check_scatter(inputs):
    """``ufunc.at(target, index, values)``: the values must broadcast to the indexed elements
    (unknowable for a meta boolean mask, whose selection depends on values: not checked)."""
    target, index = inputs[0], inputs[1]
    if target.__class__ is not MetaArray:
        raise TypeError("meta device: a scatter from meta values into a host array (mixed devices)")
    keys = index if isinstance(index, tuple) else (index,)
    if any(k.__class__ is MetaArray and k.dtype == np.bool_ for k in keys):
        return
    selected = target._p[_unwrap(index, allow_host=True)]
    if len(inputs) > 2 and np.broadcast_shapes(_shape_of(inputs[2]), selected.shape) != selected.shape:
        raise ValueError(f"array of shape {_shape_of(inputs[2])} is not broadcastable to the indexed "
                         f"shape {selected.shape}")


def _data_dependent(name):
    return NotImplementedError(
        f"{name} on the meta device: the output's shape depends on the input's values, which meta "
        "tensors do not have (as PyTorch's meta kernels)")


# --------------------------------------------------------------------------------- shape rules

def _shape_of(x):
    return x.shape if x.__class__ is MetaArray else np.shape(x)


def _tiny(x):
    """A 0-d stand-in of ``x`` for finding a result dtype (NEP 50: Python scalars stay weak)."""
    if x.__class__ is MetaArray:
        return np.zeros((), x.dtype)
    return _unwrap(x)  # a scalar; a host or another device's array raises


def _tiny_call(func, tiny_args, kwargs):
    with np.errstate(all="ignore"):
        r = func(*tiny_args, **kwargs)
    return tuple(np.asarray(v).dtype for v in r) if isinstance(r, tuple) else np.asarray(r).dtype


def _meta_results(shape, dtypes):
    if isinstance(dtypes, tuple):
        return tuple(MetaArray(shape, d) for d in dtypes)
    return MetaArray(shape, dtypes)


def _matmul_shape(a, b):
    if not a or not b:
        raise ValueError("matmul: Input operand does not have enough dimensions")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ValueError(f"matmul: Input operand 1 has a mismatch in its core dimension 0, with gufunc "
                         f"signature (n?,k),(k,m?)->(n?,m?) (size {b2[-2]} is different from {a2[-1]})")
    return (np.broadcast_shapes(a2[:-2], b2[:-2]) + (a2[-2],) * (len(a) > 1)
            + (b2[-1],) * (len(b) > 1))


def _ufunc_call(ufunc, inputs, kwargs):
    out = kwargs.pop("out", None)
    where = kwargs.pop("where", True)
    tiny = tuple(_tiny(x) for x in inputs)
    if ufunc is np.matmul:
        shape = _matmul_shape(_shape_of(inputs[0]), _shape_of(inputs[1]))
        dtypes = _tiny_call(ufunc, tuple(np.zeros((1, 1), t.dtype) if t.__class__ is np.ndarray else t
                                         for t in tiny), kwargs)
    else:
        shapes = [_shape_of(x) for x in inputs]
        if where is not True:
            shapes.append(_shape_of(where))
        shape = np.broadcast_shapes(*shapes)
        dtypes = _tiny_call(ufunc, tiny, kwargs)
    if out is None:
        return _meta_results(shape, dtypes)
    outs = out if isinstance(out, tuple) else (out,)
    for o, d in zip(outs, dtypes if isinstance(dtypes, tuple) else (dtypes,)):
        if o.__class__ is not MetaArray:
            raise TypeError(f"meta device: {ufunc.__name__} cannot write a meta result into a "
                            f"{type(o).__name__} (mixed devices)")
        if np.broadcast_shapes(shape, o.shape) != o.shape:
            raise ValueError(f"non-broadcastable output operand with shape {o.shape} doesn't match "
                             f"the broadcast shape {shape}")
        casting = kwargs.get("casting", "same_kind")
        if not np.can_cast(d, o.dtype, casting=casting):
            raise TypeError(f"Cannot cast ufunc {ufunc.__name__!r} output from {d!r} to {o.dtype!r} "
                            f"with casting rule {casting!r}")
    return out[0] if isinstance(out, tuple) and len(out) == 1 else out


def _where(condition, x=None, y=None):
    if x is None and y is None:
        raise _data_dependent("where (one argument: nonzero)")
    shape = np.broadcast_shapes(_shape_of(condition), _shape_of(x), _shape_of(y))
    return MetaArray(shape, _tiny_call(np.where, (_tiny(condition), _tiny(x), _tiny(y)), {}))


def _einsum_shape(subscripts, operands):
    """The output shape of an explicit (``->``) einsum, or None to compute it on proxies."""
    if not isinstance(subscripts, str) or "->" not in subscripts:
        return None
    inputs, output = subscripts.replace(" ", "").split("->")
    terms = inputs.split(",")
    if len(terms) != len(operands):
        return None
    sizes, ellipses = {}, []
    for term, op in zip(terms, operands):
        shape = _shape_of(op)
        if "..." in term:
            head, tail = term.split("...")
            n = len(shape) - len(head) - len(tail)
            if n < 0:
                return None
            ellipses.append(shape[len(head):len(head) + n])
            labels, dims = head + tail, shape[:len(head)] + shape[len(head) + n:]
        else:
            labels, dims = term, shape
        if len(labels) != len(dims):
            return None
        for label, d in zip(labels, dims):
            if sizes.setdefault(label, d) != d:
                return None  # let NumPy word the error
    ell = np.broadcast_shapes(*ellipses) if ellipses else ()
    head, _, tail = output.partition("...")
    if "..." not in output and ellipses and any(ellipses):
        return None
    try:
        return tuple(sizes[c] for c in head) + (ell if "..." in output else ()) + tuple(sizes[c] for c in tail)
    except KeyError:
        return None


def _einsum(*operands, **kwargs):
    shape = _einsum_shape(operands[0], operands[1:])
    if shape is None or set(kwargs) - {"optimize", "dtype"}:
        return _fallback(np.einsum, operands, kwargs)
    dtype = kwargs.get("dtype") or np.result_type(*(o.dtype for o in operands[1:]))
    return MetaArray(shape, dtype)


def _dot(a, b, out=None):
    sa, sb = _shape_of(a), _shape_of(b)
    if not sa or not sb:
        shape = sa or sb
    elif len(sb) == 1:
        shape = _matmul_shape(sa, sb)
    else:
        if sa[-1] != sb[-2]:
            raise ValueError(f"shapes {sa} and {sb} not aligned: {sa[-1]} (dim {len(sa) - 1}) != "
                             f"{sb[-2]} (dim {len(sb) - 2})")
        shape = sa[:-1] + sb[:-2] + sb[-1:]
    dtype = np.result_type(_tiny(a), _tiny(b))
    return MetaArray(shape, dtype) if out is None else out


def _tensordot(a, b, axes=2):
    sa, sb = _shape_of(a), _shape_of(b)
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = list(range(len(sa) - axes, len(sa))), list(range(axes))
    else:
        axes_a, axes_b = ([x] if isinstance(x, (int, np.integer)) else list(x) for x in axes)
    axes_a = [x % len(sa) for x in axes_a]
    axes_b = [x % len(sb) for x in axes_b]
    if len(axes_a) != len(axes_b) or any(sa[i] != sb[j] for i, j in zip(axes_a, axes_b)):
        raise ValueError("shape-mismatch for sum")
    shape = (tuple(n for i, n in enumerate(sa) if i not in axes_a)
             + tuple(n for i, n in enumerate(sb) if i not in axes_b))
    return MetaArray(shape, np.result_type(_tiny(a), _tiny(b)))


def _copy_like(a, dtype=None, *args, **kwargs):
    if a.__class__ is not MetaArray:
        return _fallback(np.ascontiguousarray, (a, dtype), {})
    return MetaArray(a.shape, a.dtype if dtype is None else dtype)


def _asarray(a, dtype=None, *args, copy=None, **kwargs):
    if a.__class__ is MetaArray:
        return a.astype(dtype or a.dtype, copy=bool(copy))
    return _fallback(np.asarray, (a, dtype), {})


def _array(a, dtype=None, *args, copy=True, **kwargs):
    return _asarray(a, dtype, copy=copy)


def _like(a, dtype=None, order="K", subok=True, shape=None, **kwargs):
    return MetaArray(a.shape if shape is None else _shape(shape), a.dtype if dtype is None else dtype)


def _full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kwargs):
    return _like(a, dtype if dtype is not None else a.dtype, shape=shape)


def _stack_shapes(arrays, axis, stack):
    shapes = [_shape_of(a) for a in arrays]
    first = shapes[0]
    if stack:
        if any(s != first for s in shapes):
            raise ValueError("all input arrays must have the same shape")
        nd = len(first) + 1
        axis = axis + nd if axis < 0 else axis
        return first[:axis] + (len(shapes),) + first[axis:]
    nd = len(first)
    if axis is None:
        return (sum(int(np.prod(s)) for s in shapes),)
    axis = axis + nd if axis < 0 else axis
    if not 0 <= axis < nd:
        raise np.exceptions.AxisError(axis, nd)
    for s in shapes[1:]:
        if len(s) != nd or s[:axis] + s[axis + 1:] != first[:axis] + first[axis + 1:]:
            raise ValueError("all the input array dimensions except for the concatenation axis must "
                             f"match exactly, but {first} and {s} differ")
    return first[:axis] + (sum(s[axis] for s in shapes),) + first[axis + 1:]


def _concatenate(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    arrays = list(arrays)
    shape = _stack_shapes(arrays, axis, False)
    dtype = dtype or np.result_type(*(_tiny(a) for a in arrays))
    return MetaArray(shape, dtype) if out is None else out


def _stack(arrays, axis=0, out=None, dtype=None, casting="same_kind"):
    arrays = list(arrays)
    shape = _stack_shapes(arrays, axis, True)
    dtype = dtype or np.result_type(*(_tiny(a) for a in arrays))
    return MetaArray(shape, dtype) if out is None else out


def _copyto(dst, src, casting="same_kind", where=True):
    if dst.__class__ is not MetaArray:
        raise TypeError("meta device: copyto from a meta array into a host array (no data)")
    shape = np.broadcast_shapes(_shape_of(src), dst.shape, _shape_of(where))
    if shape != dst.shape:
        raise ValueError(f"could not broadcast input array from shape {_shape_of(src)} into shape {dst.shape}")
    src_dtype = _tiny(src)
    if not np.can_cast(np.result_type(src_dtype) if src_dtype.__class__ is np.ndarray else src_dtype,
                       dst.dtype, casting=casting):
        raise TypeError(f"Cannot cast array data from {np.result_type(src_dtype)} to {dst.dtype} "
                        f"according to the rule {casting!r}")


_FUNCTION_RULES = {
    np.where: _where, np.einsum: _einsum, np.ascontiguousarray: _copy_like,
    np.asfortranarray: _copy_like, np.copy: lambda a, *args, **kw: _copy_like(a),
    np.asarray: _asarray, np.array: _array, np.zeros_like: _like, np.ones_like: _like,
    np.empty_like: _like, np.full_like: _full_like, np.concatenate: _concatenate,
    np.stack: _stack, np.copyto: _copyto, np.dot: _dot, np.tensordot: _tensordot,
}

# Functions whose output shape depends on values (PyTorch's meta kernels raise for these too).
_DATA_DEPENDENT = frozenset("""
nonzero argwhere flatnonzero unique unique_all unique_counts unique_inverse unique_values extract
compress bincount histogram histogram2d histogramdd histogram_bin_edges trim_zeros intersect1d
setdiff1d setxor1d union1d matrix_rank
""".split())
# Functions that read only shapes and dtypes: their answers are not values.
_METADATA_FUNCTIONS = frozenset("""
shape ndim size may_share_memory shares_memory iscomplexobj isrealobj result_type broadcast_shapes
""".split())
_LINALG_MODULES = frozenset(("numpy.linalg", "scipy.linalg", "scipy.linalg._basic",
                             "scipy.linalg._decomp", "scipy.linalg._decomp_lu"))


# ----------------------------------------------------------------------------------- namespace

def _shape(shape):
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _arange(start, stop=None, step=None, dtype=None, **kwargs):
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    n = max(int(np.ceil((stop - start) / step)), 0)
    return MetaArray((n,), np.result_type(start, stop, step) if dtype is None else dtype)


class _MetaNamespace:
    """The meta device's array module: NumPy's, making meta arrays (see NOTE [Meta device])."""

    ndarray = MetaArray
    __name__ = "lucid._core.meta_backend.xp"

    def __init__(self, module=np):
        self._m = module

    @staticmethod
    def empty(shape, dtype=np.float64, **kwargs):
        return MetaArray(_shape(shape), dtype)

    zeros = ones = empty

    @staticmethod
    def full(shape, fill_value, dtype=None, **kwargs):
        return MetaArray(_shape(shape), np.asarray(fill_value).dtype if dtype is None else dtype)

    empty_like = zeros_like = ones_like = staticmethod(_like)
    full_like = staticmethod(_full_like)

    @staticmethod
    def asarray(a, dtype=None, **kwargs):
        if isinstance(a, MetaArray):
            return a if dtype is None or np.dtype(dtype) == a.dtype else MetaArray(a.shape, dtype)
        a = np.asarray(_unwrap(a, allow_host=True), dtype=dtype)
        return MetaArray(a.shape, a.dtype)

    array = asarray
    arange = staticmethod(_arange)

    @staticmethod
    def ascontiguousarray(a, dtype=None):
        return _MetaNamespace.asarray(a, dtype)

    @staticmethod
    def eye(n, m=None, k=0, dtype=float, **kwargs):
        return MetaArray((n, n if m is None else m), dtype)

    def __getattr__(self, name):
        attr = getattr(self._m, name)
        if isinstance(attr, type(np)):
            return _MetaNamespace(attr)
        if isinstance(attr, np.ufunc) or not callable(attr) or isinstance(attr, type):
            return attr  # ufuncs dispatch to MetaArray themselves; dtypes, constants as they are
        if name == "as_strided":
            return _strided

        def fn(*args, **kwargs):
            if name in _DATA_DEPENDENT:
                raise _data_dependent(name)
            linalg = self._m.__name__ in _LINALG_MODULES
            args, kwargs = _unwrap(args, True, linalg), _unwrap(kwargs, True, linalg)
            with np.errstate(all="ignore"):
                r = attr(*args, **kwargs)
            return _wrap(r, _proxies_in(args, _proxies_in(kwargs, [])))

        fn.__name__ = name
        return fn


def _strided(x, shape=None, strides=None, **kwargs):
    """``as_strided`` on a meta array: a view of its element of the new shape (strides aside)."""
    shape = x.shape if shape is None else tuple(shape)
    return MetaArray(_as_strided(x._p, shape, (0,) * len(shape)))


def _special():
    import scipy.special

    return _MetaNamespace(scipy.special)


def _scipy_linalg():
    import scipy.linalg

    return _MetaNamespace(scipy.linalg)


def _from_numpy(arr, index=None):
    """Any array's shape and dtype (read from it: no values are copied, from any device)."""
    return MetaArray(arr.shape, arr.dtype)


def _to_numpy(arr):
    raise NotImplementedError(_NO_COPY)


def make_backend(backend):
    """The meta :class:`~lucid._core.backend.Backend` (``backend`` is that module)."""
    return backend.Backend(
        "meta", _MetaNamespace(), MetaArray,
        device_of=lambda a: backend.device("meta"),
        to_numpy=_to_numpy, from_numpy=_from_numpy, numpy_view=False,
        special=_special, scipy_linalg=_scipy_linalg,
        move=lambda a, index: MetaArray(a.shape, a.dtype),
        index_of=lambda a: 0,
    )
