"""Custom differentiable operations: ``Function`` and ``FunctionCtx`` (seeds 000, 001, 003)."""
from __future__ import annotations

import functools

import numpy as np

from .._core.backend import array_cls_of

from .._core.grad_mode import STATE, enable_grad, no_grad
from .._core.primitive import _owning_trace
from .._core.tensor import Tensor, _wrap
from .engine import _SEQ, FUNCTION_BACKWARDS, Node, _as_tensor


class FunctionCtx:
    """Per-call context shared between ``Function.forward`` and ``Function.backward``.

    Parameters
    ----------
    (none)
        Made by ``Function.apply``; ``save_for_backward``, ``save_for_forward``, ``saved_tensors``,
        ``mark_dirty``, ``mark_non_differentiable``, ``set_materialize_grads`` and ``needs_input_grad``
        work as in PyTorch. ``backward`` gets one gradient per output of ``forward``: None for an
        output that is not a Tensor.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import Function
    >>> class Square(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x * x
    ...     @staticmethod
    ...     def backward(ctx, grad_out):
    ...         (x,) = ctx.saved_tensors
    ...         return 2 * x * grad_out
    >>> Square.apply(lucid.tensor([3.0], requires_grad=True)).item()
    9.0
    """

    def __init__(self):
        self._saved = ()
        self._saved_versions = ()
        self._packed = None
        self._non_diff = set()
        self._dirty = set()
        self.materialize_grads = True
        self.needs_input_grad = ()
        self._freed = False
        self._saved_fwd = None  # what save_for_forward stored; read as saved_tensors inside jvp
        self._in_jvp = False

    def save_for_backward(self, *tensors):
        """Store tensors for ``backward``; replaces anything saved before."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward: can only save Tensors or None, got {type(t).__name__}"
                )
        self._saved = tensors
        self._saved_versions = tuple(t._version[0] if t is not None else 0 for t in tensors)
        self._packed = None
        hooks = STATE.saved_hooks
        if hooks:  # See NOTE [Saved tensor hooks] in autograd/graph.py
            from .graph import _Packed

            pack, unpack = hooks[-1]
            self._packed = tuple(None if t is None else _Packed(t, pack, unpack) for t in tensors)
            self._saved = tuple(None for _ in tensors)

    @property
    def saved_tensors(self):
        """The tensors given to ``save_for_backward``, in order."""
        if self._in_jvp and self._saved_fwd is not None:
            return self._saved_fwd
        if self._freed:
            raise RuntimeError(
                "saved_tensors: trying to backward through the graph a second time; the saved "
                "tensors were freed. Pass retain_graph=True to the first backward()."
            )
        packed = self._packed  # a _Packed per slot where hooks packed it, else None
        for i, (t, v) in enumerate(zip(self._saved, self._saved_versions)):
            if t is not None and t._version[0] != v and (packed is None or packed[i] is None):
                raise RuntimeError(
                    f"saved_tensors: one of the variables needed for gradient computation has been "
                    f"modified by an inplace operation: a Tensor of shape {tuple(t.shape)} saved by "
                    f"a custom Function is at version {t._version[0]}; expected version {v}."
                )
        if packed is None:
            return self._saved
        return tuple(t if p is None else p.get(STATE.grad_enabled) for p, t in zip(packed, self._saved))

    saved_values = saved_tensors

    def save_for_forward(self, *tensors):
        """Store tensors for the ``jvp`` static method, which reads them as ``ctx.saved_tensors``.

        As in PyTorch, ``saved_tensors`` inside ``jvp`` is what this stored and inside ``backward``
        what ``save_for_backward`` stored. Lucid also lets a ``jvp`` read the backward's tensors
        when this was never called, and a ``backward`` read these when nothing was saved for it.
        """
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_forward: can only save Tensors or None, got {type(t).__name__}")
        self._saved_fwd = tensors
        if not self._saved and self._packed is None:
            self._saved = tensors
            self._saved_versions = tuple(t._version[0] if t is not None else 0 for t in tensors)

    def _for_jvp(self):
        self._in_jvp = True
        return self

    def mark_non_differentiable(self, *tensors):
        """Declare outputs that carry no gradient (indices, masks)."""
        self._non_diff.update(id(t) for t in tensors)

    def mark_dirty(self, *tensors):
        """Declare inputs that ``forward`` modified in place."""
        self._dirty.update(id(t) for t in tensors)

    def set_materialize_grads(self, value: bool):
        """If False, ``backward`` receives None (not zeros) for outputs with no gradient."""
        self.materialize_grads = bool(value)


class FunctionNode(Node):
    """Tape node of a custom Function: runs the user's ``backward``."""

    __slots__ = ("cls", "ctx", "n_args", "arg_meta", "undefined", "layout")

    op_name = property(lambda self: self.cls.__name__)

    def name(self):
        return f"{self.cls.__name__}Backward"

    def __getattr__(self, attr):
        # In PyTorch a custom Function's grad_fn is its ctx: ``grad_fn.saved_tensors``,
        # ``needs_input_grad`` and what forward stored on ctx are read through it.
        if attr == "_raw_saved_tensors":
            from .graph import SavedTensor

            if self.ctx._freed:
                return ()
            return tuple(SavedTensor(self, ("ctx", i)) for i in range(len(self.ctx._saved)))
        if attr not in FunctionNode.__slots__ and attr not in Node.__slots__ and not attr.startswith("__"):
            try:
                return getattr(self.ctx, attr)
            except AttributeError:
                pass
            raise AttributeError(f"'{self.name()}' object has no attribute '{attr}'")
        raise AttributeError(attr)

    # The engine leaves missing output grads as None (not zeros) for this node.
    keeps_none = property(lambda self: not self.ctx.materialize_grads)

    def apply(self, grads, tensor_mode):
        if self.freed:
            raise RuntimeError(
                f"backward: trying to backward through the graph a second time (custom Function "
                f"'{self.op_name}'); pass retain_graph=True to the first backward()."
            )
        if tensor_mode and not getattr(self.cls, "zero_derivative", False):
            # its gradients may be constants that are not zero derivatives (the join's own
            # Function's are). See NOTE [Constant gradients under create_graph]
            FUNCTION_BACKWARDS[0] += 1
        gs = []
        for i, g in enumerate(grads):
            if g is None or (not self.ctx.materialize_grads and i in self.undefined):
                gs.append(None)
            else:
                gs.append(_as_tensor(g))
        if self.layout is not None:  # forward returned non-Tensors too: they get None, as in PyTorch
            total, where = self.layout
            full = [None] * total
            for k, g in zip(where, gs):
                full[k] = g
            gs = full
        with (enable_grad() if tensor_mode else no_grad()):
            res = self.cls.backward(self.ctx, *gs)
        return self._check(res, tensor_mode)

    def _check(self, res, tensor_mode):
        if not isinstance(res, tuple):
            res = (res,)
        if len(res) != self.n_args:
            if len(res) > self.n_args and all(r is None for r in res[self.n_args:]):
                res = res[: self.n_args]
            else:
                raise RuntimeError(
                    f"function {self.op_name}Backward returned an incorrect number of gradients "
                    f"(expected {self.n_args}, got {len(res)})"
                )
        out = []
        for i, (r, parent, meta) in enumerate(zip(res, self.parents, self.arg_meta)):
            if r is not None and meta[1] is None:
                raise RuntimeError(
                    f"function {self.op_name}Backward returned a gradient different than None at "
                    f"position {i + 1}, but the corresponding forward input was not a Tensor"
                )
            if parent is None or r is None:
                out.append(None)
                continue
            r = _as_tensor(r)
            if tuple(r.shape) != meta[0]:
                try:
                    np.broadcast_shapes(meta[0], tuple(r.shape))
                    if np.broadcast_shapes(meta[0], tuple(r.shape)) != tuple(r.shape):
                        raise ValueError
                except ValueError:
                    raise RuntimeError(
                        f"function {self.op_name}Backward returned an invalid gradient at index {i} - "
                        f"got shape {tuple(r.shape)} but expected shape compatible with {meta[0]}"
                    ) from None
                from ..ops._family import sum_to_shape
                from .._core.primitive import TN

                r = sum_to_shape(TN, r, meta[0])
            if r.dtype != meta[1] and meta[1].kind in "fc":
                r = r.to(meta[1])
            out.append(r if tensor_mode else r._data)
        return out

    def release(self):
        self.ctx._freed = True
        self.ctx._saved = ()
        self.ctx._packed = None
        self.freed = True


def _make_function_node(cls, ctx, args, outs, parents, eager):
    node = FunctionNode.__new__(FunctionNode)
    node.cls, node.ctx, node.parents, node.eager = cls, ctx, parents, eager
    node.prim = None
    node.hooks = node.retains = None
    node.freed = False
    node.saved = node.out = node.versions = None
    node.stack = None
    node.seq = next(_SEQ)
    node.nout = len(outs)
    node.n_args = len(args)
    node.arg_meta = tuple((tuple(a.shape), a.dtype) if isinstance(a, Tensor) else ((), None) for a in args)
    node.out_meta = tuple((tuple(o.shape), o.dtype, array_cls_of(o)) for o in outs)
    node.undefined = set()
    node.layout = None
    return node


class FunctionMeta(type):
    """Gives every concrete subclass an ``apply`` that records the custom op."""

    def __init__(cls, name, bases, namespace):
        super().__init__(name, bases, namespace)
        if bases and bases != (object,):
            cls.apply = classmethod(_apply)


def _is_separate_style(cls):
    return getattr(cls, "setup_context", None) is not Function.setup_context


def _call_forward(cls, ctx, args, kwargs):
    """Run forward in the combined or the separate (``setup_context``) style."""
    if _is_separate_style(cls):
        out = cls.forward(*args, **kwargs)
        cls.setup_context(ctx, args, out)
        return out
    return cls.forward(ctx, *args, **kwargs)


# NOTE [Binding forward's defaults]
# With ``setup_context`` PyTorch binds the call to ``forward``'s signature first (keywords become
# positional, defaults are filled in), so ``setup_context``'s ``inputs``, the ``vmap`` rule's
# arguments and ``in_dims`` and the number of gradients ``backward`` returns all count every
# parameter of ``forward``. A call that already passes every parameter positionally skips it.
def _bind_defaults(cls, args, kwargs):
    fwd = cls.forward
    arity = cls.__dict__.get("_lucid_bind")  # cached per class (not inherited: forward may differ)
    if arity is None or arity[2] is not fwd:
        import inspect

        try:
            sig = inspect.signature(fwd)
        except (TypeError, ValueError):
            sig = None
        params = sig.parameters.values() if sig is not None else ()
        plain = sig is not None and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
        defaults = any(p.default is not p.empty for p in params)
        arity = (len(sig.parameters) if plain else -1, sig if defaults else None, fwd)
        cls._lucid_bind = arity
    if arity[1] is None or (not kwargs and len(args) == arity[0]):  # nothing to fill in
        return args, kwargs
    try:
        bound = arity[1].bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{cls.__name__}.apply: {e}") from None
    bound.apply_defaults()
    return bound.args, bound.kwargs


def _apply(cls, *args, **kwargs):
    if _is_separate_style(cls):  # See NOTE [Binding forward's defaults]
        args, kwargs = _bind_defaults(cls, args, kwargs)
    if STATE.traces:
        trace = _owning_trace(args)
        if trace is not None:
            return trace.process_function(cls, args, kwargs)
    ctx = FunctionCtx()
    record = STATE.grad_enabled
    needs = tuple(bool(record and isinstance(a, Tensor) and a._rg) for a in args)
    ctx.needs_input_grad = needs
    with no_grad():
        out = _call_forward(cls, ctx, args, kwargs)
    if not any(needs):
        return out
    return _attach(cls, ctx, args, out, [
        (a if a.grad_fn is None else (a.grad_fn, a._out_idx)) if n else None for a, n in zip(args, needs)
    ], eager=True, wrap_out=_wrap_output)


def _wrap_output(o, node, i, ctx, args):
    if id(o) in ctx._dirty:  # modified in place: rebase its history onto this node
        if o.grad_fn is None and o._rg:
            raise RuntimeError(f"{node.name()[:-len('Backward')]}.apply: a leaf Variable that requires grad "
                               "has been used in an in-place operation (marked dirty by ctx.mark_dirty).")
        if o._base is not None:  # a view: its base (and the base's other views) get the new history too
            from ..ops.inplace import _check_leaf, _rebase_changed
            _check_leaf(f"{node.name()[:-len('Backward')]}.apply", o)
            res = _wrap(o._data)
            res.grad_fn, res._out_idx, res._rg = node, i, True
            _rebase_changed(o, res)
        else:
            o.grad_fn, o._out_idx, o._rg = node, i, True
        o._version[0] += 1
        return o
    if any(o is a for a in args):  # returned an input as-is: a new tensor, not the same object
        o = _wrap(o._data)
    o.grad_fn, o._out_idx, o._rg = node, i, True
    return o


def _attach(cls, ctx, args, out, parents, eager, wrap_out):
    """Connect the outputs of a custom Function to a new FunctionNode."""
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    tensor_outs = [o for o in outs if isinstance(o, Tensor)]
    node = _make_function_node(cls, ctx, args, tensor_outs, parents, eager)
    if len(tensor_outs) != len(outs):
        node.layout = (len(outs), tuple(k for k, o in enumerate(outs) if isinstance(o, Tensor)))
    result, k = [], 0
    for o in outs:
        if not isinstance(o, Tensor):
            result.append(o)
            continue
        if id(o) in ctx._non_diff or o.dtype.kind not in "fc":
            node.undefined.add(k)
            result.append(o)
        else:
            result.append(wrap_out(o, node, k, ctx, args))
        k += 1
    if ctx._dirty and ctx._saved:  # an output saved in setup_context is saved after its in-place bump
        ctx._saved_versions = tuple(t._version[0] if t is not None else 0 for t in ctx._saved)
    return result[0] if single else tuple(result)


class Function(metaclass=FunctionMeta):
    """Base class for custom differentiable operations (see seeds 000 and 003).

    Define ``forward`` and ``backward`` as static methods and call ``apply``. Either
    ``forward(ctx, *args)`` (combined style) or ``forward(*args)`` plus
    ``setup_context(ctx, inputs, output)`` (separate style; needed for ``jvp`` and
    ``vmap`` static methods used by ``lucid.func`` transforms).

    Parameters
    ----------
    (none)
        Subclass it; ``apply(*args)`` runs the op. Optional static methods: ``jvp`` (forward mode),
        ``vmap`` (batching), or ``generate_vmap_rule = True``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import Function
    >>> class MyReLU(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         ctx.save_for_backward(x)
    ...         return x.clamp(min=0.0)
    ...     @staticmethod
    ...     def backward(ctx, grad_out):
    ...         (x,) = ctx.saved_tensors
    ...         return grad_out * (x > 0).float()
    >>> x = lucid.tensor([-1.0, 2.0], requires_grad=True)
    >>> MyReLU.apply(x).sum().backward()
    >>> x.grad
    tensor([0., 1.])

    Limitations
    -----------
    Under ``func.vmap`` with ``generate_vmap_rule = True`` the forward is batched op by
    op, and an *enclosing* reverse-mode transform then differentiates those ops rather
    than calling the custom ``backward``.
    """

    generate_vmap_rule = False

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("Function.forward: subclasses must implement forward")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("Function.backward: subclasses must implement backward")

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError

    @classmethod
    def apply(cls, *args, **kwargs):
        raise RuntimeError(
            "Function.apply: called on the base class Function; subclass it, define "
            "forward/backward as static methods, and call YourFunction.apply(...)"
        )

    def __init__(self, *args, **kwargs):
        raise RuntimeError(
            f"{type(self).__name__}: Function subclasses are not instantiated; call "
            f"{type(self).__name__}.apply(...) instead"
        )


def once_differentiable(backward):
    """Decorator for ``backward``: a second differentiation raises instead of silently being wrong.

    Parameters
    ----------
    backward : callable
        The ``backward`` static method to wrap.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import Function
    >>> from lucid.autograd.function import once_differentiable
    >>> class Double(Function):
    ...     @staticmethod
    ...     def forward(ctx, x):
    ...         return x * 2
    ...     @staticmethod
    ...     @once_differentiable
    ...     def backward(ctx, g):
    ...         return g * 2
    >>> x = lucid.tensor([1.0], requires_grad=True)
    >>> Double.apply(x).sum().backward()
    >>> x.grad.tolist()
    [2.0]
    """

    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        with no_grad():
            res = backward(ctx, *grads)
        if not STATE.grad_enabled:
            return res
        # A double backward could reach the result through the incoming grads or through
        # the saved tensors (the usual case: grad(..., create_graph=True) then grad again).
        live = [g for g in grads if isinstance(g, Tensor) and g._rg]
        live += [t for t in getattr(ctx, "_saved", ()) if isinstance(t, Tensor) and t._rg]
        if not live:
            return res
        from ..ops.misc import attach_delayed_error

        many = isinstance(res, tuple)
        res = tuple(attach_delayed_error(r, live, backward.__qualname__) if isinstance(r, Tensor) else r
                    for r in (res if many else (res,)))
        return res if many else res[0]

    return wrapper


# ------------------------------------------------------------------ the legacy nested-IO Function

def _iter_tensors(obj, api):
    """The Tensors of a nest of lists and tuples, depth first (None skipped)."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _iter_tensors(o, api)
    elif obj is not None:
        raise ValueError(f"{api}: Auto nesting doesn't know how to process an input object of type "
                         f"{type(obj).__name__}")


def _iter_tensors_or_none(obj, api):
    """As :func:`_iter_tensors`, with None kept (a gradient that is absent)."""
    if obj is None or isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _iter_tensors_or_none(o, api)
    else:
        raise ValueError(f"{api}: Auto nesting doesn't know how to process an input object of type "
                         f"{type(obj).__name__}")


def _unflatten(flat, structure):
    """``flat`` (Tensors in order) put back into the nest of lists and tuples ``structure``."""
    items = iter(flat)

    def rebuild(s):
        if isinstance(s, (list, tuple)):
            return type(s)(rebuild(o) for o in s) if isinstance(s, list) or type(s) is tuple else \
                type(s)(*[rebuild(o) for o in s])
        return next(items) if isinstance(s, Tensor) else s

    return rebuild(structure)


class NestedIOFunction(Function):
    """PyTorch's legacy ``torch.autograd.function.NestedIOFunction``: a Function *instance*
    whose ``forward_extended`` and ``backward_extended`` take and return nests of lists and
    tuples of Tensors.

    Subclass it, define ``forward_extended(self, *inputs)`` and ``backward_extended(self,
    *grad_outputs)`` (called with the gradients in the nesting of ``forward_extended``'s result,
    spread as PyTorch does; it returns one gradient per Tensor of the inputs, in any nesting,
    None for none), then call an instance: ``f(x, (y, z))``. ``save_for_backward``, ``saved_tensors``,
    ``mark_dirty`` and ``mark_non_differentiable`` take nests too. An instance runs one call
    (it keeps that call's nesting for the backward).

    In PyTorch 2.13 the class is still exported but calling an instance fails (its legacy
    ``_do_forward`` path is gone); Lucid keeps it working on top of ``Function.apply``.

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd import NestedIOFunction
    >>> class ScaleBoth(NestedIOFunction):
    ...     def forward_extended(self, pair):
    ...         a, b = pair
    ...         return [a * 2, b * 3]
    ...     def backward_extended(self, ga, gb):  # one per item of the output list
    ...         return [ga * 2, gb * 3]
    >>> x = lucid.ones(2, requires_grad=True)
    >>> y = lucid.ones(2, requires_grad=True)
    >>> out = ScaleBoth()((x, y))
    >>> (out[0] + out[1]).sum().backward()
    >>> x.grad.tolist(), y.grad.tolist()
    ([2.0, 2.0], [3.0, 3.0])
    """

    def __init__(self):  # legacy: instances are called (Function's own refuses)
        self._ctx = None

    def __call__(self, *inputs):
        self._nested_input = inputs
        flat = tuple(_iter_tensors(inputs, type(self).__name__))
        out = _NestedIOApply.apply(self, *flat)
        return _unflatten(out if isinstance(out, tuple) else (out,), self._nested_output)

    _do_forward = __call__

    def forward(self, *args):
        """Run ``forward_extended`` on the call's (detached) nested inputs; the flat Tensor outputs."""
        nested = _unflatten([t.detach() for t in _iter_tensors(self._nested_input, type(self).__name__)],
                            self._nested_input)
        result = self.forward_extended(*nested)
        del self._nested_input
        self._nested_output = result
        return tuple(_iter_tensors(result, type(self).__name__))

    def backward(self, *gradients):
        """``backward_extended`` on the gradients in the outputs' nesting; flat input gradients."""
        nested = _unflatten(gradients, self._nested_output)
        return tuple(_iter_tensors_or_none(self.backward_extended(*nested), type(self).__name__))

    def save_for_backward(self, *args):
        """Keep the Tensors of the nest ``args`` for the backward (read by :attr:`saved_tensors`)."""
        self.to_save = tuple(_iter_tensors(args, "save_for_backward"))
        self._to_save_nested = args

    @property
    def saved_tensors(self):
        """What :meth:`save_for_backward` kept, in its nesting (version-checked)."""
        if self._ctx is None:
            raise RuntimeError("saved_tensors: nothing was saved (call the function first)")
        return _unflatten(self._ctx.saved_tensors, self._to_save_nested)

    def mark_dirty(self, *args, **kwargs):
        self.dirty_tensors = tuple(_iter_tensors((args, tuple(kwargs.values())), "mark_dirty"))

    def mark_non_differentiable(self, *args, **kwargs):
        self.non_differentiable = tuple(_iter_tensors((args, tuple(kwargs.values())), "mark_non_differentiable"))

    def forward_extended(self, *inputs):
        """User defined forward."""
        raise NotImplementedError(f"{type(self).__name__}: define forward_extended")

    def backward_extended(self, *grad_outputs):
        """User defined backward."""
        raise NotImplementedError(f"{type(self).__name__}: define backward_extended")


class _NestedIOApply(Function):
    """One call of a :class:`NestedIOFunction` instance as a Function (its first argument)."""

    @staticmethod
    def forward(ctx, fn, *flat):
        fn._ctx = ctx
        out = fn.forward(*flat)
        ctx.save_for_backward(*getattr(fn, "to_save", ()))
        ctx.mark_dirty(*getattr(fn, "dirty_tensors", ()))
        ctx.mark_non_differentiable(*getattr(fn, "non_differentiable", ()))
        ctx.nested_fn = fn
        return out

    @staticmethod
    def backward(ctx, *grads):
        return (None, *ctx.nested_fn.backward(*grads))
