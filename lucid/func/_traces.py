"""The three interpreters behind ``lucid.func``: reverse (grad), forward (jvp), batching (vmap).

Each transform pushes a :class:`Trace` with a fresh level and wraps its inputs in
tracers of that level; ``bind`` routes every primitive that touches one of them to
``Trace.process``. See NOTE [Levels] in ``lucid/_core/primitive.py``.
"""
from __future__ import annotations

import numpy as np

from .._core.grad_mode import STATE
from .._core.primitive import bind
from .._core.tensor import Tensor, _wrap


class Trace:
    """Base interpreter: a level on the transform stack, active between enter and exit."""

    kind = "transform"

    def __init__(self):
        self.level = len(STATE.traces) + 1
        self.active = False

    def __enter__(self):
        self.level = len(STATE.traces) + 1
        STATE.traces.append(self)
        self.active = True
        return self

    def __exit__(self, *exc):
        STATE.traces.remove(self)
        self.active = False
        return False

    def owns(self, a):
        return isinstance(a, Tensor) and a._level == self.level and getattr(a, "_trace", None) is self


class _Tracer(Tensor):
    """Common base: a Tensor whose value lives in a lower level (``_inner``)."""

    __slots__ = ("_trace", "_level")

    @property
    def shape(self):
        return self._inner_value().shape

    @property
    def dtype(self):
        return self._inner_value().dtype

    @property
    def _data(self):
        return self._inner_value()._data

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


class GradTrace(Trace):
    """Reverse mode at one level: records nodes whose values are lower-level Tensors."""

    kind = "grad"

    def process(self, prim, args, params):
        from ..autograd.engine import make_node

        vals, parents, hit = [], [], False
        for a in args:
            if self.owns(a):
                vals.append(a._primal)
                parents.append(a if a.grad_fn is None else (a.grad_fn, a._out_idx))
                hit = True
            else:
                vals.append(a)
                parents.append(None)
        vals = tuple(vals)
        out = bind(prim, vals, params)
        if not (hit and STATE.grad_enabled and prim.differentiable):
            return out
        node = make_node(prim, vals, params, out, parents, False)
        return self._wrap_outputs(out, node, prim.nout == 1)

    def _wrap_outputs(self, out, node, single):
        outs = (out,) if single else out
        res = []
        for i, o in enumerate(outs):
            if isinstance(o, Tensor) and o.dtype.kind in "fc":
                t = GradTracer(o, self)
                t.grad_fn, t._out_idx = node, i
                res.append(t)
            else:
                res.append(o)
        return res[0] if single else tuple(res)

    def process_function(self, cls, args, kwargs):
        from ..autograd.function import FunctionCtx, _attach, _call_forward

        ctx = FunctionCtx()
        vals = tuple(a._primal if self.owns(a) else a for a in args)
        ctx.needs_input_grad = tuple(self.owns(a) for a in args)
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


class JVPTrace(Trace):
    """Forward mode at one level: every primitive's jvp rule pushes tangents forward."""

    kind = "jvp"

    def process(self, prim, args, params):
        from .._core.primitive import TN

        primals, tangents = [], []
        for a in args:
            if self.owns(a):
                primals.append(a._primal)
                tangents.append(a._tangent)
            else:
                primals.append(a)
                tangents.append(None)
        primals = tuple(primals)
        out = bind(prim, primals, params)
        if all(t is None for t in tangents) or not prim.differentiable:
            return out
        if prim.jvp is None:
            raise RuntimeError(f"jvp: op '{prim.name}' has no forward-mode rule")
        t_out = prim.jvp(TN, primals, tuple(tangents), out, **params)
        if prim.nout == 1:
            return out if t_out is None else JVPTracer(out, t_out, self)
        return tuple(o if t is None else JVPTracer(o, t, self) for o, t in zip(out, t_out))

    def process_function(self, cls, args, kwargs):
        from ..autograd.function import FunctionCtx, _is_separate_style

        if not _is_separate_style(cls) or getattr(cls, "jvp", None) is None or \
                cls.jvp.__qualname__.startswith("Function."):
            raise RuntimeError(
                f"jvp: custom Function '{cls.__name__}' has no forward-mode rule. To use it with "
                "lucid.func.jvp/jacfwd, write forward(*args) + setup_context(ctx, inputs, output) "
                "and add a static method jvp(ctx, *tangents) returning the output tangents."
            )
        ctx = FunctionCtx()
        vals = tuple(a._primal if self.owns(a) else a for a in args)
        tans = tuple(a._tangent if self.owns(a) else None for a in args)
        out = cls.forward(*vals, **kwargs)
        cls.setup_context(ctx, vals, out)
        tans = tuple(t if t is not None or not isinstance(v, Tensor) else _wrap(np.zeros(v.shape, v.dtype))
                     for t, v in zip(tans, vals))
        t_out = cls.jvp(ctx, *tans)
        if isinstance(out, tuple):
            t_out = t_out if isinstance(t_out, tuple) else (t_out,)
            return tuple(JVPTracer(o, t, self) if t is not None else o for o, t in zip(out, t_out))
        return JVPTracer(out, t_out, self)


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
        s = tuple(self._val.shape)
        return s[: self._bdim] + s[self._bdim + 1:]

    @property
    def dtype(self):
        return self._val.dtype

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


class BatchTrace(Trace):
    """Batching at one level: every primitive's batch rule maps it over the batch dim."""

    kind = "vmap"

    def __init__(self, size, randomness="error"):
        super().__init__()
        self.size = size
        self.randomness = randomness

    def process(self, prim, args, params):
        vals, bdims = [], []
        for a in args:
            if self.owns(a):
                vals.append(a._val)
                bdims.append(a._bdim)
            else:
                vals.append(a)
                bdims.append(None)
        rule = prim.batch
        if rule is None:
            from ..ops.indexing import _loop_batch

            out, out_bdim = _loop_batch(prim, vals, bdims, params)
        else:
            out, out_bdim = rule(tuple(vals), tuple(bdims), **params)
        if prim.nout == 1:
            return out if out_bdim is None else BatchTracer(out, out_bdim, self)
        if not isinstance(out_bdim, (tuple, list)):
            out_bdim = (out_bdim,) * len(out)
        return tuple(o if b is None else BatchTracer(o, b, self) for o, b in zip(out, out_bdim))

    def process_function(self, cls, args, kwargs):
        from ..autograd.function import _is_separate_style

        has_vmap = "vmap" in _own_statics(cls)
        if has_vmap:
            vals = tuple(a._val if self.owns(a) else a for a in args)
            in_dims = tuple(a._bdim if self.owns(a) else None for a in args)
            out, out_dims = cls.vmap(_VmapInfo(self.size, self.randomness), in_dims, *vals, **kwargs)
            if isinstance(out, tuple):
                out_dims = out_dims if isinstance(out_dims, tuple) else (out_dims,) * len(out)
                return tuple(o if d is None else BatchTracer(o, d, self) for o, d in zip(out, out_dims))
            return out if out_dims is None else BatchTracer(out, out_dims, self)
        if getattr(cls, "generate_vmap_rule", False) and _is_separate_style(cls):
            # The forward is made of lucid ops, each with a batching rule: run it batched.
            return cls.forward(*args, **kwargs)
        raise RuntimeError(
            f"vmap: custom Function '{cls.__name__}' has no batching rule. Write it in the "
            "separate style (forward(*args) + setup_context) and either set "
            "generate_vmap_rule = True or add a static method vmap(info, in_dims, *args) "
            "returning (outputs, out_dims)."
        )


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
