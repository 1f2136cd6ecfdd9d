"""Family helpers: whole classes of primitives defined from one small formula.

* :func:`unary` — elementwise ``f(x)`` from its derivative ``f'(x)``: vjp ``g * f'``,
  jvp ``t * f'``, batching "elementwise".
* :func:`binary` — broadcasting ``f(x, y)`` from its two partial derivatives; the
  vjp undoes broadcasting with the shared :func:`sum_to_shape`.
* :func:`linear_jvp` — for ops linear in their first argument the jvp is the op
  itself applied to the tangent.
* Batching helpers: :func:`batch_elementwise`, :func:`move_bdim`, :func:`batch_unary_axis`.

Rules receive ``ns`` (see NOTE [Two namespaces]) and must only use operators and ``ns``
functions, so that they run on arrays and on Tensors alike.
"""
from __future__ import annotations

import contextvars

import numpy as np

from .._core import dtypes
from .._core.backend import DEVICE_NAMESPACES, namespace_of, xp
from .._core.primitive import AN, TN, Meta, bind, defprim
from .._core.tensor import Tensor, _wrap


# NOTE [Silent floating-point errors]
# PyTorch never prints NumPy's RuntimeWarnings: x / 0 is inf, log(0) is -inf, sqrt(-1) is
# nan, inf - inf is nan, 0 * inf is nan, sin(inf) is nan, exp(1000) is inf, silently. Ops
# whose values can get there run their impl under an "ignore" error state (``quiet``), and
# every backward runs under one (``run_backward`` in autograd/engine.py), so no rule warns
# either (the array namespace ``AN`` used by rules therefore gets the bare impls). The error
# state never leaks: NumPy code outside lucid keeps its own settings and warnings (setting
# "ignore" once at import would silence the user's NumPy code too).
#
# Cost matters: add, sub, mul, sum and sin are on the W1 hot path. ``np.errstate`` costs
# ~1.5 us a call; setting and resetting NumPy's context variable ~0.2 us. ``quiet`` runs the
# impl through ``Context.run`` of one private context in which that variable is already
# "ignore" (a C-level switch of the current context, ~0.02 us); the wrapper's own frame is
# most of the rest (~0.1 us over a bare ufunc's 0.3 us for a 16-element add; a ``**params``
# in the wrapper would add ~0.07 us, so ufuncs get fixed-arity wrappers). A context can be
# entered by one caller at a time: when it is busy (another thread is inside a quiet impl
# that released the GIL, or a quiet impl calls another) ``Context.run`` raises and the call
# falls back to set/reset. Nothing but array code runs in that context (no other context
# variable is read there); rules, which bind primitives, use ``quiet_call``'s set/reset so
# the impls they reach find the context free. Where NumPy does not expose the variable
# (another layout), ``np.errstate`` is the fallback.
try:
    from numpy._core._ufunc_config import _extobj_contextvar as _ERR_VAR
    from numpy._core.umath import _make_extobj

    _ERR_IGNORE = _make_extobj(all="ignore")
    _QUIET_CONTEXT = contextvars.Context()
    _QUIET_CONTEXT.run(_ERR_VAR.set, _ERR_IGNORE)
except Exception:  # another NumPy layout: the public (slower) errstate
    _ERR_VAR = None


def _raw_for_rules(prim, impl):
    """Rules run under the ignore state already (backward, ``quiet_call``): the array
    namespace gets ``impl`` without its quiet wrapper (a backward's ``ns.cos`` is hot)."""
    raw = getattr(impl, "__wrapped__", None) if getattr(impl, "_lucid_quiet", False) else None
    if raw is not None:
        setattr(AN, prim.name, raw)


def _quiet_slow(impl, args, params):
    """``impl`` under the ignore state by set/reset (the quiet context is busy)."""
    token = _ERR_VAR.set(_ERR_IGNORE)
    try:
        return impl(*args, **params)
    finally:
        _ERR_VAR.reset(token)


def _busy(e):
    return e.__class__ is RuntimeError and str(e).startswith("cannot enter context")


# NOTE [Device ufuncs]
# A ufunc impl (``quiet(xp.exp)``) called on a device array runs that device's ufunc of the
# same name (``cupy.exp``) directly: through NumPy's dispatch (NEP 13) the call is the same
# plus the override lookup (H100, benchmarks/gpu_profile.py: ``np.add`` on CuPy arrays 10.3 us,
# ``cupy.add`` 9.7 us). The quiet context is skipped there too: it sets NumPy's error state,
# which device kernels ignore. (Operators on device arrays, ``g * d`` in rules, are CuPy's own.)
def quiet(impl, nargs=None):
    """``impl`` run with NumPy's floating-point warnings off. See NOTE [Silent floating-point errors].

    A ufunc gets a wrapper of its own fixed arity without keyword parameters (the cheapest:
    a ``**params`` in the wrapper costs as much as the quiet context itself); ``nargs`` (1 or
    2) gives a Python impl a wrapper of that many positional arrays plus keyword parameters.
    """
    if getattr(impl, "_lucid_quiet", False):
        return impl
    if _ERR_VAR is None:
        run = np.errstate(all="ignore")(impl)
        run._lucid_quiet = True
        return run
    enter = _QUIET_CONTEXT.run
    nin = impl.nin if isinstance(impl, np.ufunc) else None
    # NumPy's own ufuncs only (scipy.special's may share a name with another CuPy function)
    name = impl.__name__ if nin and getattr(np, impl.__name__, None) is impl else None
    if nin == 1:
        def run(x):
            if x.__class__ is not ndarray and name is not None:  # See NOTE [Device ufuncs]
                ns = DEVICE_NAMESPACES.get(x.__class__)
                if ns is not None:
                    return getattr(ns, name)(x)
            try:
                return enter(impl, x)
            except RuntimeError as e:
                if not _busy(e):
                    raise
                return _quiet_slow(impl, (x,), {})
    elif nin == 2:
        def run(x, y):
            if (x.__class__ is not ndarray or y.__class__ is not ndarray) and name is not None:
                ns = DEVICE_NAMESPACES.get(x.__class__) or DEVICE_NAMESPACES.get(y.__class__)
                if ns is not None:  # See NOTE [Device ufuncs]
                    return getattr(ns, name)(x, y)
            try:
                return enter(impl, x, y)
            except RuntimeError as e:
                if not _busy(e):
                    raise
                return _quiet_slow(impl, (x, y), {})
    elif nargs == 1:
        def run(x, **params):
            try:
                return enter(impl, x, **params)
            except RuntimeError as e:
                if not _busy(e):
                    raise
                return _quiet_slow(impl, (x,), params)
    elif nargs == 2:
        def run(x, y, **params):
            try:
                return enter(impl, x, y, **params)
            except RuntimeError as e:
                if not _busy(e):
                    raise
                return _quiet_slow(impl, (x, y), params)
    else:
        def run(*args, **params):
            try:
                return enter(impl, *args, **params)
            except RuntimeError as e:
                if not _busy(e):
                    raise
                return _quiet_slow(impl, args, params)

    run.__name__ = run.__qualname__ = getattr(impl, "__name__", "impl")
    run.__doc__ = getattr(impl, "__doc__", None)
    run.__wrapped__ = impl
    run._lucid_quiet = True
    return run


def quiet_apply(fn, *args):
    """``fn(*args)`` for array code (an in-place ufunc write) with NumPy's floating-point
    warnings off, through the quiet context. See NOTE [Silent floating-point errors]."""
    if _ERR_VAR is None:
        with np.errstate(all="ignore"):
            return fn(*args)
    try:
        return _QUIET_CONTEXT.run(fn, *args)
    except RuntimeError as e:
        if not _busy(e):
            raise
        return _quiet_slow(fn, args, {})


def quiet_call(fn, *args, **params):
    """``fn(*args, **params)`` with NumPy's floating-point warnings off (forward-mode rules).

    By set/reset, not through the quiet context: ``fn`` binds primitives, whose quiet
    impls then find that context free."""
    if _ERR_VAR is None:
        with np.errstate(all="ignore"):
            return fn(*args, **params)
    return _quiet_slow(fn, args, params)


_PY_SCALARS = (int, float, bool, complex)
ndarray = np.ndarray
# Membership in a set of dtypes is cheaper than ``dtype.kind == "c"`` on the hot backward path
# (one hash against two attribute reads); lucid.dtype objects hash like NumPy's.
_COMPLEX_DTYPES = frozenset((np.dtype(np.complex64), np.dtype(np.complex128)))


def scalar_operand(ns, v, like):
    """A Python-scalar operand as a 0-d value of ``like``'s dtype in ``ns``, so a rule's
    arithmetic on it follows array semantics (``1 / 0.0`` is inf, not ZeroDivisionError)."""
    xp_ = np if like.__class__ is ndarray else namespace_of(like)
    arr = xp_.asarray(v, dtype=np.dtype(like.dtype))  # on like's device (NOTE [Backends])
    return _wrap(arr) if ns.is_tensor_ns else arr


def shape_of(v):
    """Shape of an array, Tensor, Meta or Python scalar (``()``)."""
    return getattr(v, "shape", ())


def ndim_of(v):
    return len(shape_of(v))


# ----------------------------------------------------------------- broadcasting

def sum_to_shape(ns, g, shape):
    """Sum ``g`` over broadcast dimensions so it has ``shape`` (undoes broadcasting).

    The one place broadcasting is undone; every broadcasting vjp calls it.
    """
    gshape = shape_of(g)
    if gshape == tuple(shape):
        return g
    lead = len(gshape) - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and gshape[i + lead] != 1
    )
    if axes:
        g = ns.sum(g, axis=axes, keepdims=False)
    if shape_of(g) != tuple(shape):
        g = ns.reshape(g, shape=tuple(shape))
    return g


def same_dtype(ns, v, like):
    """``v`` in the dtype of ``like`` (a derivative built from masks or Python floats may widen)."""
    dt = getattr(like, "dtype", None)
    if dt is not None and getattr(v, "dtype", dt) != dt:
        return ns.cast(v, dtype=dt)
    return v


def broadcast_tangent(ns, t, shape):
    """Broadcast a tangent to ``shape`` (the forward-mode dual of :func:`sum_to_shape`)."""
    if shape_of(t) == tuple(shape):
        return t
    return ns.broadcast_to(t, shape=tuple(shape))


# --------------------------------------------------------------------- batching

def move_bdim(v, bdim, to=0):
    """Move the batch dimension of ``v`` from ``bdim`` to ``to`` (lower-level Tensors)."""
    if bdim == to:
        return v
    nd = v.ndim
    perm = list(range(nd))
    perm.pop(bdim)
    perm.insert(to if to >= 0 else nd + to, bdim)
    return TN.transpose(v, axes=tuple(perm))


_SCALARS = (int, float, bool)


def batch_elementwise(prim):
    """Batching rule for elementwise (broadcasting) primitives.

    Batched operands get their batch dim moved to the front and are padded with
    singleton dims up to the largest per-example rank, so the batch dim never aligns
    with an example dim of an unbatched operand.
    """

    def rule(vals, bdims, **params):
        n = len(vals)
        if n == 1:  # one operand: the op maps over every dim alike
            return bind(prim, vals, params), bdims[0]
        if n == 2:  # the common binary cases of the fast path below, without its loop
            d0, d1 = bdims
            if d0 == d1 and d0 is not None:  # both batched at one dim
                v0, v1 = vals
                if v0 is v1 or len(v0.shape) == len(v1.shape):
                    return bind(prim, vals, params), d0
            elif d1 is None:
                if vals[1].__class__ in _SCALARS:
                    return bind(prim, vals, params), d0
            elif d0 is None and vals[0].__class__ in _SCALARS:
                return bind(prim, vals, params), d1
        # Fast path (inlined, every elementwise op under vmap): the batched operands share
        # one bdim d and one rank R + 1, and each unbatched operand has rank <= R - d, so
        # NumPy's right-aligned broadcasting already lines the examples up: nothing to move.
        common = rank = None
        low = 0  # the largest unbatched rank
        for v, d in zip(vals, bdims):
            if d is None:
                r = len(getattr(v, "shape", ()))
                if r > low:
                    low = r
            elif common is None:
                common, rank = d, len(v.shape)
            elif d != common or len(v.shape) != rank:
                break
        else:
            if common is not None and low <= rank - 1 - common:
                return bind(prim, vals, params), common
        rank = max(ndim_of(v) - (b is not None) for v, b in zip(vals, bdims))
        new = []
        for v, b in zip(vals, bdims):
            if b is None:
                new.append(v)
                continue
            v = move_bdim(v, b, 0)
            pad = rank - (v.ndim - 1)
            if pad:
                v = TN.reshape(v, shape=(v.shape[0],) + (1,) * pad + tuple(v.shape[1:]))
            new.append(v)
        return bind(prim, tuple(new), params), 0

    return rule


def batch_unary_axis(prim, axis_params=("axis",)):
    """Batching rule for one-input ops with axis parameters: shift the axes past the batch dim."""

    single = axis_params[0] if len(axis_params) == 1 else None

    def rule(vals, bdims, **params):  # ``params`` is this call's own dict: safe to update
        (v,), (b,) = vals, bdims
        if b != 0:
            v = move_bdim(v, b, 0)
            vals = (v,)
        nd = len(v.shape) - 1
        if single is not None:
            axis = params.get(single)
            if axis.__class__ is tuple and len(axis) == 1 and axis[0].__class__ is int and 0 <= axis[0] < nd:
                params[single] = (axis[0] + 1,)  # shift_axis's most common case, inlined
            else:
                params[single] = shift_axis(axis, nd)
        else:
            for name in axis_params:
                params[name] = shift_axis(params.get(name), nd)
        return bind(prim, vals, params), 0

    return rule


def shift_axis(axis, nd):
    """Axis (int, tuple or None) of a per-example array, as an axis of the batched array."""
    if axis.__class__ is tuple:  # fast path: the already-normalised axes most ops pass
        out = []
        for a in axis:
            if a.__class__ is not int or not 0 <= a < nd:
                break
            out.append(a + 1)
        else:
            return tuple(out)
    elif axis.__class__ is int and 0 <= axis < nd:
        return axis + 1
    if axis is None:
        return tuple(range(1, nd + 1))
    if isinstance(axis, (tuple, list)):
        return tuple(normalize_axis(a, nd) + 1 for a in axis)
    return normalize_axis(axis, nd) + 1


def normalize_axis(axis, nd, op="op"):
    if not -max(nd, 1) <= axis < max(nd, 1):
        raise IndexError(f"{op}: dimension {axis} is out of range for a tensor with {nd} dims")
    return axis % max(nd, 1)


# --------------------------------------------------------------------- families

def _promote_float(x):
    """Ints and bools become the default float first (``lucid.exp(int_tensor)`` is float)."""
    if isinstance(x, Tensor):
        if x.dtype.kind in "biu":
            return TN.cast(x, dtype=dtypes.get_default_dtype())
        return x
    return _as_tensor(x)


def _as_tensor(x, like=None):
    """``x`` as a Tensor; a constant (number, list, array) is made on ``like``'s device."""
    if isinstance(x, Tensor):
        return x
    from .._core.tensor import _to_array, _wrap

    arr = _to_array(x, None)
    xp_ = np if like is None else namespace_of(like)
    return _wrap(arr if xp_ is np else xp_.asarray(arr))


# NOTE [Holomorphic vjp]
# Under PyTorch's convention (NOTE [Complex gradients] in ops/complex.py) the vjp of a
# holomorphic f is ``g * conj(f'(x))`` while its jvp stays ``t * f'(x)``. The family
# helpers apply that conj here, once, for every op defined by its derivative: a complex
# cotangent conjugates the derivative; a real one (every real op) skips it at the cost
# of one dtype test. Ops that are not holomorphic (abs, angle, real, imag ...) and
# hand-written rules (matmul: ``g @ conj(y)^T``) conjugate explicitly.
def _conj(ns, d):
    return d if d.__class__ in _SCALARS else ns.conj(d)


def conj_if_complex(ns, v):
    """``conj(v)`` for a complex array/Tensor, ``v`` itself otherwise (for hand-written vjps)."""
    return ns.conj(v) if getattr(v, "dtype", None) is not None and v.dtype.kind == "c" else v


def _unary_vjp(deriv):
    def vjp(ns, g, out, x):
        d = deriv(ns, x, out)
        if g.dtype in _COMPLEX_DTYPES:  # See NOTE [Holomorphic vjp]
            d = _conj(ns, d)
        r = g * d
        # A derivative built from masks or Python floats may widen the dtype: cast back.
        return r if r.dtype == g.dtype else ns.cast(r, dtype=g.dtype)

    return vjp


def unary(name, impl, deriv, *, save_out=False, save_inputs=True, float_only=True, doc=None):
    """Define an elementwise primitive ``name`` from its derivative.

    ``deriv(ns, x, out)`` returns ``f'(x)``; it may use ``out`` (then pass
    ``save_out=True``) instead of ``x`` (then ``save_inputs=False`` saves memory).
    Returns ``(primitive, public_function)``.
    """
    # save_inputs=False here means "the derivative uses only `out`": nothing of the input
    # is kept (None), not even its shape.
    prim = defprim(
        name,
        impl,
        vjp=(_unary_vjp(deriv),),
        jvp=lambda ns, primals, tangents, out: same_dtype(ns, tangents[0] * deriv(ns, primals[0], out), tangents[0]),
        save_out=save_out,
        save_inputs=None if save_inputs is False else save_inputs,
    )
    prim.batch = batch_elementwise(prim)
    _raw_for_rules(prim, impl)

    if float_only:
        def fn(input):
            if input.__class__ is Tensor:
                if input._data.dtype.kind in "fc":
                    return bind(prim, (input,), {})
            elif isinstance(input, Tensor) and input.dtype.kind in "fc":  # a tracer (transforms)
                return bind(prim, (input,), {})
            return bind(prim, (_promote_float(input),), {})
    else:
        def fn(input):
            return bind(prim, (_as_tensor(input),), {})

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc or f"Elementwise ``{name}``.\n\nExamples\n--------\n>>> import lucid\n>>> lucid.{name}(lucid.tensor([0.5])).shape\n(1,)\n"
    return prim, fn


# NOTE [Scalar operands in backward]
# A Python-scalar operand enters the generic partials as a 0-d array of the cotangent's dtype
# (``scalar_operand``), so ``1 / 0.0`` is inf rather than ZeroDivisionError. On a GPU that
# array is a host-to-device copy, and ``g * (1 / y)`` two more launches, in the backward of
# every ``x * 2`` and ``x / n`` (a mean, a loss scale). ``mul`` and ``div`` pass ``by_scalar``:
# the cotangent times (or over) the conjugated scalar in one array call, the scalar a kernel
# argument (NumPy and CuPy treat Python scalars as weak: the dtype stays the cotangent's).
# ``g / y`` is also what PyTorch's div backward computes.


def binary(name, impl, dx, dy, *, save_out=False, save_inputs=True, by_scalar=(None, None)):
    """Define a broadcasting elementwise primitive from its partial derivatives.

    ``dx(ns, x, y, out)`` and ``dy(ns, x, y, out)`` return ``∂f/∂x`` and ``∂f/∂y`` (either
    may be ``None`` for "no gradient"). Python-scalar operands receive no gradient.
    ``by_scalar = (gx, gy)`` are optional shortcuts for a Python-scalar other operand ``s``:
    ``gx(g, s)`` is ``g * ∂f/∂x`` where ``y`` is ``s``, ``gy(g, s)`` is ``g * ∂f/∂y`` where
    ``x`` is ``s`` (``s`` comes conjugated for a complex ``g``). See NOTE [Scalar operands in backward].
    """
    gx_by_scalar, gy_by_scalar = by_scalar

    # A Python-scalar operand (no gradient of its own) enters the partials of the other as a
    # 0-d value in the namespace. See NOTE [Silent floating-point errors].
    def vjp_x(ns, g, out, x, y):
        if y.__class__ is not ndarray and y.__class__ in _PY_SCALARS:
            if gx_by_scalar is not None:
                return same_dtype(ns, gx_by_scalar(g, y.conjugate() if g.dtype in _COMPLEX_DTYPES else y), g)
            y = scalar_operand(ns, y, g)
        d = dx(ns, x, y, out)
        if g.dtype in _COMPLEX_DTYPES:  # See NOTE [Holomorphic vjp]
            d = _conj(ns, d)
        return sum_to_shape(ns, same_dtype(ns, g * d, g), shape_of(x))

    def vjp_y(ns, g, out, x, y):
        if x.__class__ is not ndarray and x.__class__ in _PY_SCALARS:
            if gy_by_scalar is not None:
                return same_dtype(ns, gy_by_scalar(g, x.conjugate() if g.dtype in _COMPLEX_DTYPES else x), g)
            x = scalar_operand(ns, x, g)
        d = dy(ns, x, y, out)
        if g.dtype in _COMPLEX_DTYPES:
            d = _conj(ns, d)
        return sum_to_shape(ns, same_dtype(ns, g * d, g), shape_of(y))

    def jvp(ns, primals, tangents, out):
        x, y = primals
        tx, ty = tangents
        if x.__class__ in _PY_SCALARS:
            x = scalar_operand(ns, x, out)
        elif y.__class__ in _PY_SCALARS:
            y = scalar_operand(ns, y, out)
        # Each partial is taken to the output's dtype first: a 0-d float64 tangent times a
        # float32 mask (e.g. maximum's tie split) would otherwise round to float32, since
        # 0-d tensors are weak in type promotion (found by tests/fuzz).
        res = None
        if tx is not None:
            res = tx * same_dtype(ns, dx(ns, x, y, out), out)
        if ty is not None:
            term = ty * same_dtype(ns, dy(ns, x, y, out), out)
            res = term if res is None else res + term
        return broadcast_tangent(ns, same_dtype(ns, res, out), shape_of(out))

    prim = defprim(name, impl, vjp=(vjp_x if dx else None, vjp_y if dy else None), jvp=jvp,
                   save_out=save_out, save_inputs=save_inputs)
    prim.batch = batch_elementwise(prim)
    _raw_for_rules(prim, impl)
    return prim


def linear_jvp(prim):
    """jvp for a primitive linear in its first argument: apply the op to the tangent."""

    def jvp(ns, primals, tangents, out, **params):
        return bind(prim, (tangents[0],) + tuple(primals[1:]), params)

    return jvp


def nondiff(name, impl, *, nout=1):
    """A primitive with no gradient (comparisons, argmax ...): elementwise batching, zero tangent."""
    prim = defprim(name, impl, vjp=None, jvp=lambda ns, primals, tangents, out, **p: None,
                   differentiable=False, nout=nout, save_inputs=False)
    prim.batch = batch_elementwise(prim)
    return prim


__all__ = [
    "sum_to_shape", "broadcast_tangent", "move_bdim", "batch_elementwise", "batch_unary_axis",
    "shift_axis", "normalize_axis", "unary", "binary", "linear_jvp", "nondiff", "shape_of",
    "ndim_of", "Meta", "xp", "np", "conj_if_complex",
]
