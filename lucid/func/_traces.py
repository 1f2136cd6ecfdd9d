"""The three interpreters behind ``lucid.func``: reverse (grad), forward (jvp), batching (vmap).

Each transform pushes a :class:`Trace` with a fresh level and wraps its inputs in
tracers of that level; ``bind`` routes every primitive that touches one of them to
``Trace.process``. See NOTE [Levels] in ``lucid/_core/primitive.py``.
"""
from __future__ import annotations

import numpy as np

from .._core.dtypes import _LUCID
from .._core.grad_mode import STATE, pop_trace, push_trace
from .._core.primitive import TN, bind
from .._core.tensor import Tensor, _disabled_torch_function_impl
from ..autograd.engine import make_node
from ..ops._family import quiet_call


class Trace:
    """Base interpreter: a level on the transform stack, active between enter and exit."""

    kind = "transform"

    def __init__(self):
        self.level = len(STATE.traces) + 1
        self.active = False

    def __enter__(self):
        self.level = push_trace(self)
        self.active = True
        return self

    def __exit__(self, *exc):
        pop_trace(self)
        self.active = False
        return False

    def owns(self, a):
        return isinstance(a, Tensor) and a._level == self.level and getattr(a, "_trace", None) is self


class _Tracer(Tensor):
    """Common base: a Tensor whose value lives in a lower level (``_inner``)."""

    __torch_function__ = _disabled_torch_function_impl  # plain-tensor behaviour (NOTE [Torch function])

    __slots__ = ("_trace", "_level")
    # Autograd-state defaults (a tracer itself is never a leaf of the eager tape).
    _rg, _grad, grad_fn, _out_idx, _base, _hooks, _retains = False, None, None, 0, None, None, False

    @property
    def shape(self):
        return self._inner_value().shape

    @property
    def dtype(self):
        return self._inner_value().dtype

    @property
    def _data(self):
        return self._inner_value()._data

    @property
    def device(self):
        return self._inner_value().device

    def __repr__(self):
        return f"{type(self).__name__}(level={self._level}, {self._inner_value()!r})"


def _init_tracer(t, trace):
    t._trace, t._level = trace, trace.level
    t._rg = False
    t._grad = None
    t.grad_fn = None
    t._out_idx = 0
    t._version = [0]
    t._base = None
    t._hooks = None
    t._retains = False


# ------------------------------------------------------------------- reverse


class GradTracer(_Tracer):
    """A value under ``func.grad``/``func.vjp``: its primal plus its place on this level's tape."""

    __slots__ = ("_primal",)

    def __init__(self, primal, trace):
        _init_tracer(self, trace)
        self._primal = primal
        self._rg = True

    def _inner_value(self):
        return self._primal

    @property
    def shape(self):
        return self._primal.shape

    @property
    def dtype(self):
        return self._primal.dtype


class GradTrace(Trace):
    """Reverse mode at one level: records nodes whose values are lower-level Tensors."""

    kind = "grad"

    def process(self, prim, args, params):
        # Hot path (every op under grad): ownership is ``_level`` then ``_trace`` (plain
        # Tensors have the class attribute ``_level = 0``, so no getattr default is needed
        # for them); the outputs are wrapped without the GradTracer call chain.
        vals, parents, hit = [], [], False
        level = self.level
        for a in args:
            if getattr(a, "_level", 0) == level and a._trace is self:
                vals.append(a._primal)
                fn = a.grad_fn
                parents.append(a if fn is None else (fn, a._out_idx))
                hit = True
            else:
                vals.append(a)
                parents.append(None)
        vals = tuple(vals)
        out = bind(prim, vals, params)
        if not (hit and STATE.grad_enabled and prim.differentiable):
            return out
        node = make_node(prim, vals, params, out, parents, False)
        if prim.nout == 1:
            if out.dtype.kind not in "fc":
                return out
            t = object.__new__(GradTracer)  # GradTracer(out, self) without the call chain
            t._trace, t._level, t._primal, t._rg = self, level, out, True
            t.grad_fn, t._version = node, [0]
            return t
        return self._wrap_outputs(out, node, False)

    def _wrap_outputs(self, out, node, single):
        outs = (out,) if single else out
        res = []
        level = self.level
        for i, o in enumerate(outs):
            if isinstance(o, Tensor) and o.dtype.kind in "fc":
                t = object.__new__(GradTracer)  # GradTracer(o, self) without the call chain
                t._trace, t._level, t._primal, t._rg = self, level, o, True
                t.grad_fn, t._out_idx, t._version = node, i, [0]
                res.append(t)
            else:
                res.append(o)
        return res[0] if single else tuple(res)

    def process_function(self, cls, args, kwargs):
        from ..autograd.function import FunctionCtx, _attach, _call_forward, _is_separate_style

        ctx = FunctionCtx()
        vals = tuple(a._primal if self.owns(a) else a for a in args)
        ctx.needs_input_grad = tuple(self.owns(a) for a in args)
        if _is_separate_style(cls):
            # the levels below run the Function themselves (a vmap level through its vmap rule:
            # forward's NumPy code never sees a batched value), then this level keeps its context
            out = cls.apply(*vals, **kwargs)
            cls.setup_context(ctx, vals, out)
        else:
            out = _call_forward(cls, ctx, vals, kwargs)
        if not STATE.grad_enabled:
            return out
        parents = [(a if a.grad_fn is None else (a.grad_fn, a._out_idx)) if self.owns(a) else None for a in args]

        def wrap_out(o, node, i, ctx_, args_):
            t = GradTracer(o, self)
            t.grad_fn, t._out_idx = node, i
            return t

        return _attach(cls, ctx, vals, out, parents, eager=False, wrap_out=wrap_out)


# ------------------------------------------------------------------- forward


class JVPTracer(_Tracer):
    """A value under ``func.jvp``: primal and tangent (``None`` means a zero tangent)."""

    __slots__ = ("_primal", "_tangent")

    def __init__(self, primal, tangent, trace):
        _init_tracer(self, trace)
        self._primal, self._tangent = primal, tangent

    def _inner_value(self):
        return self._primal

    @property
    def shape(self):
        return self._primal.shape

    @property
    def dtype(self):
        return self._primal.dtype


class JVPTrace(Trace):
    """Forward mode at one level: every primitive's jvp rule pushes tangents forward."""

    kind = "jvp"

    def process(self, prim, args, params):
        primals, tangents, hit = [], [], False
        level = self.level
        for a in args:
            if getattr(a, "_level", 0) == level and a._trace is self:  # self.owns(a), inlined
                primals.append(a._primal)
                t = a._tangent
                tangents.append(t)
                if t is not None:
                    hit = True
            else:
                primals.append(a)
                tangents.append(None)
        primals = tuple(primals)
        out = bind(prim, primals, params)
        if not hit or not prim.differentiable:
            return out
        if prim.jvp is None:
            raise RuntimeError(f"jvp: op '{prim.name}' has no forward-mode rule")
        # A tangent rule may meet inf/nan of the primal (log(0) * 0): silent, as in the
        # backward. See NOTE [Silent floating-point errors].
        t_out = quiet_call(prim.jvp, TN, primals, tuple(tangents), out, **params)
        if prim.nout == 1:
            return out if t_out is None else JVPTracer(out, t_out, self)
        return tuple(o if t is None else JVPTracer(o, t, self) for o, t in zip(out, t_out))

    def process_function(self, cls, args, kwargs):
        from ..autograd.function import FunctionCtx, _is_separate_style

        if getattr(cls, "jvp", None) is None or cls.jvp.__qualname__.startswith("Function."):
            raise NotImplementedError(  # PyTorch's type (a RuntimeError, as Lucid raised before)
                f"jvp: custom Function '{cls.__name__}' has no forward-mode rule. To use it with "
                "lucid.func.jvp/jacfwd or forward_ad, add a static method jvp(ctx, *tangents) "
                "returning the output tangents (either forward style works)."
            )
        ctx = FunctionCtx()
        vals = tuple(a._primal if self.owns(a) else a for a in args)
        tans = tuple(a._tangent if self.owns(a) else None for a in args)
        if _is_separate_style(cls):
            # the levels below run the Function themselves, as in GradTrace.process_function (an
            # enclosing vmap through its vmap rule: forward's NumPy code never sees a batched value)
            out = cls.apply(*vals, **kwargs)
            cls.setup_context(ctx, vals, out)
        else:  # combined style: forward(ctx, *args) fills ctx itself, as PyTorch allows
            ctx.needs_input_grad = tuple(self.owns(a) for a in args)
            out = cls.forward(ctx, *vals, **kwargs)
        # PyTorch's tangents: None for a non-Tensor or a non-float input, zeros for a float input
        # without one (None after ctx.set_materialize_grads(False))
        tans = tuple(t if t is not None or not isinstance(v, Tensor) or v.dtype.kind not in "fc"
                     or not ctx.materialize_grads else v.new_zeros(v.shape)
                     for t, v in zip(tans, vals))
        t_out = cls.jvp(ctx._for_jvp(), *tans)
        if isinstance(out, tuple):
            t_out = t_out if isinstance(t_out, tuple) else (t_out,)
            if len(t_out) != len(out):
                raise RuntimeError(f"jvp: custom Function '{cls.__name__}'.jvp returned {len(t_out)} tangent(s) "
                                   f"for {len(out)} outputs")
            return tuple(o if t is None or not isinstance(o, Tensor) else JVPTracer(o, _checked_tangent(cls, o, t), self)
                         for o, t in zip(out, t_out))
        return JVPTracer(out, _checked_tangent(cls, out, t_out), self)


def _checked_tangent(cls, out, t):
    """A custom jvp's tangent must have its output's shape (PyTorch refuses other sizes too)."""
    if t is not None and tuple(t.shape) != tuple(out.shape):
        raise RuntimeError(f"jvp: custom Function '{cls.__name__}'.jvp returned a tangent of shape "
                           f"{tuple(t.shape)} for an output of shape {tuple(out.shape)}")
    return t


# ------------------------------------------------------------------ batching


class BatchTracer(_Tracer):
    """A value under ``func.vmap``: a lower-level value with a batch dimension at ``_bdim``."""

    __slots__ = ("_val", "_bdim")

    def __init__(self, val, bdim, trace):
        _init_tracer(self, trace)
        self._val, self._bdim = val, bdim

    def _inner_value(self):
        return self._val

    @property
    def shape(self):
        s = self._val.shape
        b = self._bdim
        return s[1:] if b == 0 else s[:b] + s[b + 1:]

    @property
    def ndim(self):
        return len(self._val.shape) - 1

    @property
    def dtype(self):
        v = self._val
        return _LUCID[v._data.dtype] if v.__class__ is Tensor else v.dtype

    @property
    def requires_grad(self):
        return self._val.requires_grad

    @property
    def _data(self):
        raise RuntimeError(
            "vmap: a batched tensor can't be turned into data (numpy(), item(), bool(), "
            "Python control flow on its values) inside vmap; each example's value is not a "
            "single concrete value. Use lucid.where instead of if/else on tensor values."
        )

    def __repr__(self):
        return f"BatchTracer(level={self._level}, bdim={self._bdim}, {self._val!r})"


def _new_batch_tracer(val, bdim, trace):
    """``BatchTracer(val, bdim, trace)`` without the __init__ call chain (hot path)."""
    t = object.__new__(BatchTracer)
    t._trace, t._level, t._val, t._bdim, t._version = trace, trace.level, val, bdim, [0]
    return t


class BatchTrace(Trace):
    """Batching at one level: every primitive's batch rule maps it over the batch dim."""

    kind = "vmap"

    def __init__(self, size, randomness="error"):
        self.level = len(STATE.traces) + 1  # Trace.__init__, inlined (once per vmap call)
        self.active = False
        self.size = size
        self.randomness = randomness

    def process(self, prim, args, params):
        # Hot path (every op under vmap): ``_trace is self`` is ownership here, since a
        # trace object is entered only once. See Trace.owns.
        if len(args) == 1:  # the one argument is ours (it is why bind chose this trace)
            a = args[0]
            vals, bdims = (a._val,), (a._bdim,)
        elif len(args) == 2:  # binary ops; ``_trace is self`` alone is ownership (see above)
            a, c = args
            if getattr(a, "_trace", None) is self:
                if getattr(c, "_trace", None) is self:
                    vals, bdims = (a._val, c._val), (a._bdim, c._bdim)
                else:
                    vals, bdims = (a._val, c), (a._bdim, None)
            elif getattr(c, "_trace", None) is self:
                vals, bdims = (a, c._val), (None, c._bdim)
            else:
                vals, bdims = args, (None, None)
        else:
            vals, bdims = [], []
            level = self.level
            for a in args:
                if getattr(a, "_level", 0) == level and a._trace is self:
                    vals.append(a._val)
                    bdims.append(a._bdim)
                else:
                    vals.append(a)
                    bdims.append(None)
            vals, bdims = tuple(vals), tuple(bdims)
        rule = prim.batch
        if rule is None:
            from ..ops.indexing import _loop_batch

            out, out_bdim = _loop_batch(prim, vals, bdims, params)
        else:
            out, out_bdim = rule(vals, bdims, **params)
        if prim.nout == 1:
            if out_bdim is None:
                return out
            t = object.__new__(BatchTracer)  # _new_batch_tracer, inlined
            t._trace = self
            t._level = self.level
            t._val = out
            t._bdim = out_bdim
            t._version = [0]
            return t
        if not isinstance(out_bdim, (tuple, list)):
            out_bdim = (out_bdim,) * len(out)
        return tuple(o if b is None else BatchTracer(o, b, self) for o, b in zip(out, out_bdim))

    def process_function(self, cls, args, kwargs):
        from ..autograd.function import _is_separate_style

        has_vmap = "vmap" in _own_statics(cls)
        if has_vmap and getattr(cls, "generate_vmap_rule", False):
            raise RuntimeError(f"vmap: custom Function '{cls.__name__}' has both generate_vmap_rule=True and a "
                               "vmap static method; set generate_vmap_rule=False or delete the vmap method")
        if has_vmap:
            vals = tuple(a._val if self.owns(a) else a for a in args)
            in_dims = tuple(a._bdim if self.owns(a) else None for a in args)
            res = cls.vmap(_VmapInfo(self.size, self.randomness), in_dims, *vals, **kwargs)
            out, out_dims = _check_vmap_result(cls, res)
            if isinstance(out, tuple):
                return tuple(o if d is None else BatchTracer(o, d, self) for o, d in zip(out, out_dims))
            return out if out_dims is None else BatchTracer(out, out_dims, self)
        if getattr(cls, "generate_vmap_rule", False) and _is_separate_style(cls):
            vals = tuple(a._val if self.owns(a) else a for a in args)
            in_dims = tuple(a._bdim if self.owns(a) else None for a in args)
            out = _generated_vmap_function(cls, in_dims, kwargs).apply(*vals)
            if isinstance(out, tuple):
                return tuple(BatchTracer(o, 0, self) if isinstance(o, Tensor) else o for o in out)
            return BatchTracer(out, 0, self)
        raise RuntimeError(
            f"vmap: custom Function '{cls.__name__}' has no batching rule. Write it in the "
            "separate style (forward(*args) + setup_context) and either set "
            "generate_vmap_rule = True or add a static method vmap(info, in_dims, *args) "
            "returning (outputs, out_dims)."
        )


def _check_vmap_result(cls, res):
    """``(outputs, out_dims)`` from a custom ``vmap`` rule, with out_dims matched to the outputs
    (one int or None for all of them, or one per output) and normalised to [0, ndim)."""
    bad = (f"vmap: custom Function '{cls.__name__}'.vmap must return (outputs, out_dims) with out_dims an "
           "int or None, or a tuple of them with one entry per output")
    if not isinstance(res, tuple) or len(res) != 2:
        raise RuntimeError(f"{bad}; got {type(res).__name__}")
    out, out_dims = res
    outs = out if isinstance(out, tuple) else (out,)
    dims = out_dims if isinstance(out_dims, (tuple, list)) else (out_dims,) * len(outs)
    if len(dims) != len(outs) or (not isinstance(out, tuple) and isinstance(out_dims, (tuple, list))):
        raise RuntimeError(f"{bad}; got {len(outs)} output(s) and out_dims={out_dims!r}")
    fixed = []
    for o, d in zip(outs, dims):
        if d is not None and (not isinstance(d, int) or isinstance(d, bool) or not isinstance(o, Tensor)):
            raise RuntimeError(f"{bad}; got out_dims={out_dims!r} for an output of type {type(o).__name__}")
        if d is not None:
            n = o.ndim
            if not -n <= d < n:
                raise RuntimeError(f"{bad}; out_dim {d} is out of range for an output with {n} dimensions")
            d %= n
        fixed.append(d)
    return out, (tuple(fixed) if isinstance(out, tuple) else fixed[0])


# NOTE [Generated vmap rule]
# With ``generate_vmap_rule = True`` a custom Function is applied *at the level below* as a
# new Function whose forward is ``vmap(cls.forward)`` and whose backward / jvp are
# ``vmap`` of the user's (each example gets its own ctx from ``setup_context``, built
# inside that vmap). So an enclosing grad calls the user's backward, not the autodiff of
# the forward (which may differ, e.g. straight-through estimators).
def _generated_vmap_function(cls, in_dims, kwargs):
    from ..autograd.function import Function, FunctionCtx
    from .api import vmap

    def run_ctx(inputs, output):
        ctx = FunctionCtx()
        cls.setup_context(ctx, inputs, output)
        return ctx

    def per_example_grads(n_in, rule):
        def fn(inputs, output, grads):
            res = rule(run_ctx(inputs, output), *grads)
            res = res if isinstance(res, tuple) else (res,)
            return tuple(_zeros_for(r, x) for r, x in zip(res, inputs) if isinstance(x, Tensor))
        return fn

    class Generated(Function):
        generate_vmap_rule = True

        @staticmethod
        def forward(*vals):
            return vmap(lambda *a: cls.forward(*a, **kwargs), in_dims=in_dims)(*vals)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.inputs, ctx.output = inputs, output

        @staticmethod
        def backward(ctx, *grads):
            outs = ctx.output if isinstance(ctx.output, tuple) else (ctx.output,)
            fn = per_example_grads(len(ctx.inputs), cls.backward)
            got = vmap(fn, in_dims=(in_dims, 0, 0))(ctx.inputs, ctx.output, tuple(grads[:len(outs)]))
            return _scatter_batched(got, ctx.inputs, in_dims)

        @staticmethod
        def jvp(ctx, *tangents):
            tans = tuple(t if isinstance(x, Tensor) else None for t, x in zip(tangents, ctx.inputs))
            t_dims = tuple(d if isinstance(x, Tensor) else None for d, x in zip(in_dims, ctx.inputs))
            return vmap(lambda i, o, t: cls.jvp(run_ctx(i, o)._for_jvp(), *t),
                        in_dims=(in_dims, 0, t_dims))(ctx.inputs, ctx.output, tans)

    if cls.jvp.__qualname__.startswith("Function."):
        del Generated.jvp
    Generated.__name__ = Generated.__qualname__ = f"{cls.__name__}_vmapped"
    return Generated


def _zeros_for(g, x):
    return g if g is not None else x * 0


def _scatter_batched(got, inputs, in_dims):
    """Per-example input grads (batch dim 0) -> one grad per input: moved to its in_dim, or
    summed over the batch for an unbatched input."""
    from ..ops._family import move_bdim

    it = iter(got)
    res = []
    for x, d in zip(inputs, in_dims):
        if not isinstance(x, Tensor):
            res.append(None)
            continue
        g = next(it)
        res.append(g.sum(0) if d is None else move_bdim(g, 0, d))
    return tuple(res)


class _VmapInfo:
    """``info`` argument of a custom Function's ``vmap`` static method."""

    def __init__(self, batch_size, randomness):
        self.batch_size, self.randomness = batch_size, randomness


def _own_statics(cls):
    names = set()
    for k in cls.__mro__:
        if k.__name__ == "Function":
            break
        names.update(k.__dict__)
    return names
