"""``lucid.library``: PyTorch's custom-op API (``torch.library.custom_op`` and friends).

NOTE [Custom ops]
``custom_op("ns::name", mutates_args=...)`` turns a function (typically one that computes through
``.numpy()`` or another library) into an operator: a :class:`CustomOpDef` that dispatches on
the device type of its tensor arguments to a kernel (``register_kernel``; the decorated
function is the kernel for ``device_types``, or for every device when that is None), uses the
fake implementation (``register_fake``) on the ``"meta"`` device, where tensors hold no data,
and differentiates through ``register_autograd``'s backward. Each call runs as one
``lucid.autograd.Function`` (separate style, NOTE of ``autograd/function.py``) whose arguments
are a call spec (the bound arguments with their tensors taken out) and the tensors themselves,
so tensors inside ``list[Tensor]`` arguments get gradients too, ``lucid.func.grad``/``vjp`` see
the custom backward, and ``vmap`` uses ``register_vmap``'s rule, else runs the op once per
example and stacks the results (PyTorch's batched fallback; the kernel is opaque). Arguments named in ``mutates_args`` may be written in place by the kernel: their
version counter is bumped after it runs, so a backward that saved them refuses the stale
value; other arguments must not change (``opcheck`` checks it). Outputs must be new tensors
(never an input or a view of one), as PyTorch requires.

Registered ops are reachable as ``lucid.library.ops.<ns>.<name>`` (PyTorch's ``torch.ops``):
``lucid.ops`` is Lucid's package of primitives, whose submodules (``random``, ``special``,
``linalg``, ...) would shadow namespaces of the same names.
"""
from __future__ import annotations

import collections.abc
import contextlib
import inspect
import re
import types
import typing

from ._core.tensor import Tensor

__all__ = ["custom_op", "CustomOpDef", "infer_schema", "register_kernel", "register_fake",
           "register_autograd", "register_vmap", "opcheck", "OpCheckError", "ops", "Library", "define", "impl",
           "impl_abstract", "fallthrough_kernel", "get_ctx", "register_autocast", "get_kernel",
           "register_torch_dispatch"]

_OPS = {}  # "ns::name" -> CustomOpDef
_NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)")


# ---------------------------------------------------------------------------- schemas
def _schema_type(ann, where):
    """PyTorch's schema type for an annotation (``infer_schema``'s table)."""
    from ._core.backend import device
    from ._core.dtypes import dtype

    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return _schema_type(rest[0], where) + "?"
        if set(rest) <= {int, float, bool, complex}:
            return "Scalar"
    if origin in (list, collections.abc.Sequence) and len(args) == 1:
        return _schema_type(args[0], where) + "[]"
    simple = {int: "SymInt", float: "float", bool: "bool", str: "str", complex: "complex"}
    if ann in simple:
        return simple[ann]
    if isinstance(ann, type):
        if issubclass(ann, Tensor):
            return "Tensor"
        if issubclass(ann, dtype):
            return "ScalarType"
        if issubclass(ann, device):
            return "Device"
    raise ValueError(f"infer_schema: {where} has unsupported type {ann!r}; supported: Tensor, int, float, bool, "
                     "str, dtype, device, lists of them and Optional of them")


def _return_type(ann):
    if ann is None or ann is type(None):
        return "()"
    if typing.get_origin(ann) is tuple:
        return "(" + ", ".join(_schema_type(a, "the return") for a in typing.get_args(ann)) + ")"
    return _schema_type(ann, "the return")


def _hints(fn, api):
    try:
        return typing.get_type_hints(fn)
    except Exception as e:  # an annotation that does not resolve (a typo, a missing import)
        raise ValueError(f"{api}: the annotations of {getattr(fn, '__name__', fn)!r} can't be resolved ({e})") from None


def infer_schema(prototype_function, /, *, mutates_args, op_name=None):
    """PyTorch's schema string of a function from its type annotations.

    Examples
    --------
    >>> import lucid
    >>> def f(x: lucid.Tensor, ys: list[lucid.Tensor], k: float = 2.0) -> lucid.Tensor: ...
    >>> lucid.library.infer_schema(f, mutates_args={"x"})
    '(Tensor(a0!) x, Tensor[] ys, float k=2.0) -> Tensor'
    """
    sig = inspect.signature(prototype_function)
    hints = _hints(prototype_function, "infer_schema")
    mutated = _mutated_names(sig, mutates_args, "infer_schema")
    parts, star = [], False
    for idx, (name, p) in enumerate(sig.parameters.items()):
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ValueError(f"infer_schema: parameter {name!r} is {p.kind.description}; custom ops take "
                             "named positional and keyword-only parameters only")
        if name not in hints:
            raise ValueError(f"infer_schema: parameter {name!r} must have a type annotation")
        t = _schema_type(hints[name], f"parameter {name!r}")
        if name in mutated and (t.startswith("Tensor") or mutates_args != "unknown"):
            if not t.startswith("Tensor"):
                raise ValueError(f"infer_schema: {name!r} is in mutates_args but is not a Tensor")
            t = t.replace("Tensor", f"Tensor(a{idx}!)", 1)  # PyTorch's alias set: the parameter's index
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        parts.append(f"{t} {name}" + ("" if p.default is p.empty else f"={_default_repr(p.default)}"))
    ret = _return_type(hints.get("return", inspect.Signature.empty)) if "return" in hints else None
    if ret is None:
        raise ValueError("infer_schema: the function must have a return type annotation")
    return f"{op_name or ''}({', '.join(parts)}) -> {ret}"


def _default_repr(value):
    """A default as PyTorch's schemas print it: strings and devices quoted, dtypes by name."""
    from ._core.backend import device
    from ._core.dtypes import dtype

    if value is None or isinstance(value, (int, float, bool)):
        return str(value)
    if isinstance(value, (str, device)):
        return f'"{value}"'
    if isinstance(value, dtype):
        return str(value).rpartition(".")[2]
    return repr(value)


def _mutated_names(sig, mutates_args, api):
    if mutates_args == "unknown":
        return frozenset(sig.parameters)
    if isinstance(mutates_args, str) or not all(isinstance(m, str) for m in mutates_args):
        raise ValueError(f"{api}: mutates_args must be 'unknown' or an iterable of argument names, "
                         f"got {mutates_args!r}")
    unknown = [m for m in mutates_args if m not in sig.parameters]
    if unknown:
        raise ValueError(f"{api}: mutates_args names {unknown}, which are not arguments of the function "
                         f"{list(sig.parameters)}")
    return frozenset(mutates_args)


# ---------------------------------------------------------------------------- calls
class _Leaf:
    """Where a tensor sat in the bound arguments."""

    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


class _CallSpec:
    """One call's bound arguments with their tensors taken out (the Function's first input)."""

    __slots__ = ("op", "args", "kwargs", "n", "device_type", "leaves", "out_tree")

    def __init__(self, op, args, kwargs):
        self.op, leaves = op, []

        def take(v):
            if isinstance(v, Tensor):
                leaves.append(v)
                return _Leaf(len(leaves) - 1)
            if isinstance(v, (list, tuple)) and any(isinstance(x, Tensor) for x in v):
                return type(v)(take(x) for x in v)
            return v

        self.args = tuple(take(a) for a in args)
        self.kwargs = {k: take(v) for k, v in kwargs.items()}
        self.n = len(leaves)
        self.device_type = _device_type(op, leaves, args, kwargs)
        self.leaves = leaves  # (read once by __call__, then dropped)
        self.out_tree = None  # the kernel's output structure, NOTE [Custom op outputs]

    def rebuild(self, leaves):
        def put(v):
            if isinstance(v, _Leaf):
                return leaves[v.i]
            if isinstance(v, (list, tuple)) and any(isinstance(x, _Leaf) for x in v):
                return type(v)(put(x) for x in v)
            return v

        return tuple(put(a) for a in self.args), {k: put(v) for k, v in self.kwargs.items()}

    def per_arg(self, values, default=None):
        """Leaf-indexed ``values`` regrouped per positional argument (lists for list arguments)."""
        def pick(v):
            if isinstance(v, _Leaf):
                return values[v.i]
            if isinstance(v, (list, tuple)) and any(isinstance(x, _Leaf) for x in v):
                return [pick(x) for x in v]
            return default

        return tuple(pick(a) for a in self.args)


def _device_type(op, leaves, args, kwargs):
    from ._core.backend import device

    kinds = {t.device.type for t in leaves}
    if len(kinds) > 1:
        raise RuntimeError(f"{op._qualname}: expected all tensor arguments on one device type, got "
                           f"{sorted(kinds)}")
    if kinds:
        return kinds.pop()
    for v in list(args) + list(kwargs.values()):  # a factory op: its device argument
        if isinstance(v, device):
            return v.type
    dev = kwargs.get("device", None)
    return str(dev).split(":")[0] if isinstance(dev, str) else "cpu"


def _arrays_alias(a, b):
    """Whether two arrays share memory (their element spans overlap)."""
    from .ops.shape.strided import _byte_span

    if type(a) is not type(b) or not (a.nbytes and b.nbytes):
        return False
    import numpy as np

    from ._core.backend import has_values

    if not has_values(a):  # the meta device: no addresses, but a view still shares its base's proxy
        return bool(np.may_share_memory(a, b))
    (sa, na), (sb, nb) = _byte_span(a), _byte_span(b)
    return sa < sb + nb and sb < sa + na


class _OpFunction:
    """Static methods of every op's ``lucid.autograd.Function`` (see NOTE [Custom ops])."""

    @staticmethod
    def forward(spec, *leaves):
        return spec.op._run(spec, leaves)

    @staticmethod
    def setup_context(ctx, inputs, output):
        spec = inputs[0]
        ctx._lucid_spec = spec
        ctx.needs_input_grad = spec.per_arg(tuple(ctx.needs_input_grad[1:]) or (False,) * spec.n, False)
        ctx.needs_input_grad = tuple(any(n) if isinstance(n, list) else n for n in ctx.needs_input_grad)
        setup = spec.op._setup_context_fn
        if setup is not None:
            args, kwargs = spec.rebuild(inputs[1:])
            output = _unflatten_out(output, spec.out_tree)
            setup(ctx, args, kwargs, output) if spec.kwargs else setup(ctx, args, output)

    @staticmethod
    def backward(ctx, *grads):
        spec = ctx._lucid_spec
        op = spec.op
        if op._backward_fn is None:
            raise RuntimeError(f"{op._qualname}: trying to backward through this custom op, but no autograd "
                               "formula was registered; use register_autograd to add one")
        tree = spec.out_tree
        grads = _unflatten_out(grads if tree is not None else grads[0], tree)
        if tree is not None and (tree[0] is tuple or not _takes_one_grad(op._backward_fn)):
            res = op._backward_fn(ctx, *grads)  # See NOTE [Custom op outputs]
        else:
            res = op._backward_fn(ctx, grads)
        res = res if isinstance(res, tuple) else (res,)
        if len(res) != len(spec.args):
            raise RuntimeError(f"{op._qualname}: the backward returned {len(res)} gradients, but the op has "
                               f"{len(spec.args)} positional inputs (return None for those without one)")
        out = [None] * spec.n
        for slot, g in zip(spec.args, res):
            if isinstance(slot, _Leaf):
                out[slot.i] = g
            elif isinstance(slot, (list, tuple)) and g is not None:
                if not isinstance(g, (list, tuple)) or len(g) != len(slot):
                    raise RuntimeError(f"{op._qualname}: the gradient of a list of {len(slot)} tensors must be a "
                                       f"list of {len(slot)} gradients (or None), got {g!r}"[:300])
                for s, gi in zip(slot, g):
                    if isinstance(s, _Leaf):
                        out[s.i] = gi
        return (None, *out)


# NOTE [Custom op outputs]
# A kernel may return a Tensor, a list or tuple of them, or a tuple nesting lists (PyTorch's
# ``tuple[list[Tensor], int]``). The op's Function returns the flat leaves (``_flatten_out``)
# and the call spec keeps the structure, so ``__call__``, ``setup_context``'s ``output`` and
# ``backward``'s gradients see it rebuilt: a list output's gradients arrive as one list, a tuple
# output's as one argument per element (a backward whose signature cannot take one list gets a
# list output's gradients one by one, as Lucid passed them before). A ``register_vmap`` rule returns the structure too, with
# out_dims a prefix of it (one int or None for a whole list), as PyTorch's pytree out_dims.
def _flatten_out(out):
    """(leaves, tree): tree is None for a single value, else (list or tuple, child trees)."""
    if not isinstance(out, (list, tuple)):
        return [out], None
    flat, kids = [], []
    for o in out:
        f, t = _flatten_out(o)
        flat += f
        kids.append(t)
    return flat, (type(out), tuple(kids))


def _unflatten_out(flat, tree):
    if tree is None:
        return flat
    it = iter(flat)

    def build(t):
        return next(it) if t is None else t[0](build(k) for k in t[1])

    return build(tree)


def _takes_one_grad(backward):
    """Whether ``backward(ctx, grads)`` binds: PyTorch passes a list output's gradients as one list;
    a backward written for them one by one (``backward(ctx, g1, g2)``, Lucid's earlier convention)
    still gets them so."""
    try:
        inspect.signature(backward).bind(None, None)
    except TypeError:
        return False
    except ValueError:  # no signature (a builtin): PyTorch's convention
        return True
    return True


def _flat_out_dims(op, out, dims):
    """``out_dims`` of a vmap rule matched leaf by leaf against its output (a prefix tree)."""
    if not isinstance(out, (list, tuple)):
        if dims is not None and (not isinstance(dims, int) or isinstance(dims, bool)):
            raise RuntimeError(f"{op._qualname}: the vmap rule returned out_dims={dims!r} for a single output; "
                               "expected an int or None")
        return [dims]
    if isinstance(dims, (list, tuple)):
        if len(dims) != len(out):
            raise RuntimeError(f"{op._qualname}: the vmap rule returned out_dims={dims!r} for {len(out)} "
                               "outputs; expected one entry per output (or one int or None for all)")
        return [d for o, dd in zip(out, dims) for d in _flat_out_dims(op, o, dd)]
    return [d for o in out for d in _flat_out_dims(op, o, dims)]


def _op_vmap(info, in_dims, spec, *leaves):
    """The Function's ``vmap`` static method once ``register_vmap`` gives a rule."""
    args, kwargs = spec.rebuild(leaves)
    res = spec.op._vmap_fn(info, spec.per_arg(in_dims[1:]), *args, **kwargs)
    if not isinstance(res, tuple) or len(res) != 2:
        raise RuntimeError(f"{spec.op._qualname}: the vmap rule must return (output, out_dims), got "
                           f"{type(res).__name__}")
    out, dims = res
    flat, spec.out_tree = _flatten_out(out)
    fd = _flat_out_dims(spec.op, out, dims)
    return (tuple(flat), tuple(fd)) if spec.out_tree is not None else (flat[0], fd[0])


def _op_vmap_loop(info, in_dims, spec, *leaves):
    """The Function's ``vmap`` static method without a registered rule: the op runs once per
    example and the results are stacked, as PyTorch's batched fallback does. The kernel is
    opaque (it may leave Lucid through ``.numpy()``), so batching it op by op is not an option."""
    from .ops.shape import stack

    op, dims = spec.op, in_dims[1:]
    args, kwargs = spec.rebuild(leaves)
    batched = {id(t) for t, d in zip(leaves, dims) if d is not None}
    for name, value in op._named(args, kwargs):
        if name in op._mutated and any(id(t) not in batched for t in _tensors(value)):
            raise RuntimeError(f"{op._qualname}: vmap: can't mutate {name!r} in place: it is not batched but "
                               "other arguments are, so every example would write the same tensor")
    if info.batch_size == 0:
        raise RuntimeError(f"{op._qualname}: vmap over a batch of size 0 has no example to run the op on; "
                           "register a batching rule with register_vmap")
    results = []
    for i in range(info.batch_size):
        sample = [t if d is None else t.select(d, i) for t, d in zip(leaves, dims)]
        a, kw = spec.rebuild(sample)
        results.append(op(*a, **kw))
    flats = [_flatten_out(r)[0] for r in results]
    first, spec.out_tree = _flatten_out(results[0])
    if spec.out_tree is None:
        return (None, None) if first[0] is None else _stack_results(stack, results)
    outs = tuple(_stack_results(stack, [f[j] for f in flats]) for j in range(len(first)))
    return tuple(o for o, _ in outs), tuple(d for _, d in outs)


def _stack_results(stack, values):
    """One output position's per-example values -> (batched value, its out_dim)."""
    if isinstance(values[0], Tensor):
        return stack(values), 0
    return values[0], None  # a Python scalar (not batched: PyTorch returns it as is too)


# ---------------------------------------------------------------------------- the op
class CustomOpDef:
    """A custom operator made by :func:`custom_op`: call it like the function it wraps.

    Examples
    --------
    >>> import lucid
    >>> @lucid.library.custom_op("lucid_doc::twice", mutates_args=())
    ... def twice(x: lucid.Tensor) -> lucid.Tensor:
    ...     return x * 2
    >>> twice
    <CustomOpDef(lucid_doc::twice)>
    >>> twice(lucid.tensor([1.0, 2.0]))
    tensor([2., 4.])
    """

    def __init__(self, namespace, name, schema, fn, mutated):
        from .autograd.function import Function

        self._namespace, self._name, self._schema, self._init_fn = namespace, name, schema, fn
        self._sig = inspect.signature(fn)
        self._mutated = mutated
        self._backend_fns, self._default_fn, self._disabled = {}, None, set()
        self._fake_fn = self._backward_fn = self._setup_context_fn = self._vmap_fn = None
        self._classic = None  # the classic Library API's dispatch state, NOTE [Classic library API]
        self._function = type(self._qualname, (_OpFunction, Function),
                              {"__module__": __name__, "vmap": staticmethod(_op_vmap_loop)})
        self.__name__ = self.__qualname__ = name
        self.__doc__, self.__module__ = fn.__doc__, getattr(fn, "__module__", None)

    _qualname = property(lambda self: f"{self._namespace}::{self._name}")

    def __getattr__(self, name):  # ``ops.ns.op.overload`` (only reached for missing attributes)
        if name.startswith("_"):
            raise AttributeError(name)
        op = _OPS.get(f"{self._qualname}.{name}")
        if op is None:
            raise AttributeError(f"'{self._qualname}' has no overload or attribute {name!r}")
        return op
    default = property(lambda self: self)  # ``torch.ops.ns.name.default``: the one overload

    def __repr__(self):
        return f"<CustomOpDef({self._qualname})>"

    # -- registration
    def register_kernel(self, device_types, fn=None, /):
        """Register ``fn`` as the implementation for ``device_types`` ("cpu", "cuda", "strict",
        "meta", ...; None: every device). Usable as a decorator."""
        kinds = [device_types] if device_types is None or isinstance(device_types, str) else list(device_types)
        if not all(k is None or isinstance(k, str) for k in kinds):
            raise TypeError(f"register_kernel: device_types must be a str, a list of str or None, got {device_types!r}")

        def inner(fn):
            for k in kinds:
                if k is None:
                    self._default_fn = fn
                else:
                    self._backend_fns[k] = fn
            return fn

        return inner if fn is None else inner(fn)

    def register_fake(self, fn, /):
        """Register the fake (meta) implementation: given tensors on the ``"meta"`` device (no
        data), it returns outputs of the right shapes and dtypes there."""
        self._fake_fn = fn
        return fn

    def register_autograd(self, backward, /, *, setup_context=None):
        """Register ``backward(ctx, *grads)`` (one gradient per positional input, None where
        there is none) and ``setup_context(ctx, inputs, output)`` (or ``(ctx, inputs,
        keyword_only_inputs, output)`` for an op with keyword-only arguments), PyTorch's
        ``Function`` conventions (``ctx.save_for_backward``, ``ctx.saved_tensors``)."""
        if self._mutated:
            raise RuntimeError(f"register_autograd: cannot register an autograd formula for the non-functional "
                               f"operator {self._qualname} with schema {self._schema} (it mutates "
                               f"{sorted(self._mutated)}); create a functional operator and register it for that")
        self._backward_fn, self._setup_context_fn = backward, setup_context

    def register_vmap(self, func=None, /):
        """Register ``func(info, in_dims, *args, **kwargs) -> (output, out_dims)``, the op's
        batching rule under ``lucid.func.vmap``. Usable as a decorator."""
        def inner(func):
            self._vmap_fn = func
            self._function.vmap = staticmethod(_op_vmap)
            return func

        return inner if func is None else inner(func)

    def register_autocast(self, device_type, cast_inputs):
        """Under ``lucid.autocast(device_type)``, floating tensor arguments on that device type are
        cast to ``cast_inputs`` and the op runs with autocast off (PyTorch's rule for custom ops)."""
        from ._library_classic import _classic_state

        _classic_state(self).autocast[device_type] = cast_inputs

    @contextlib.contextmanager
    def set_kernel_enabled(self, device_type, enabled=True):
        """Context manager: disable (or re-enable) the kernel registered for ``device_type``; calls
        on that device then fall back to the default kernel."""
        was = device_type not in self._disabled
        (self._disabled.discard if enabled else self._disabled.add)(device_type)
        try:
            yield
        finally:
            (self._disabled.discard if was else self._disabled.add)(device_type)

    # -- calling
    def __call__(self, *args, **kwargs):
        from ._core.grad_mode import STATE

        try:
            bound = self._sig.bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self._qualname}: {e}") from None
        bound.apply_defaults()
        pos, kw = [], {}
        for name, p in self._sig.parameters.items():
            (kw.__setitem__(name, bound.arguments[name]) if p.kind == p.KEYWORD_ONLY
             else pos.append(bound.arguments[name]))
        if self._classic is not None:  # See NOTE [Classic library API]
            from ._library_classic import _THROUGH

            out = self._classic.dispatch(self, pos, kw)
            if out is not _THROUGH:
                return out
        spec = _CallSpec(self, pos, kw)
        leaves, spec.leaves = spec.leaves, None
        if self._mutated and STATE.grad_enabled:
            self._check_mutated_grads(spec, leaves)
        out = self._function.apply(spec, *leaves)
        return _unflatten_out(out, spec.out_tree)

    def _check_mutated_grads(self, spec, leaves):
        args, kwargs = spec.rebuild(leaves)
        for name, value in self._named(args, kwargs):
            if name in self._mutated and any(t._rg for t in _tensors(value)):
                raise RuntimeError(f"{self._qualname}: mutates {name!r}, which requires grad; a mutating custom op "
                                   "has no autograd formula, so changing it in place would corrupt gradients")

    def _named(self, args, kwargs):
        names = [n for n, p in self._sig.parameters.items() if p.kind != p.KEYWORD_ONLY]
        return list(zip(names, args)) + list(kwargs.items())

    def _kernel(self, kind):
        fn = None if kind in self._disabled else self._backend_fns.get(kind)
        if fn is None and kind == "meta":
            fn = self._fake_fn
            if fn is None and self._mutated and self._schema.endswith("-> ()"):
                fn = _trivial_fake  # PyTorch's generated fake for a mutating op that returns nothing
        if fn is None:
            fn = self._default_fn
        if fn is None:
            have = sorted(self._backend_fns) + (["meta (fake)"] if self._fake_fn else [])
            hint = " (register_fake gives it one for the meta device)" if kind == "meta" else ""
            raise NotImplementedError(f"{self._qualname}: no kernel registered for device type {kind!r}{hint}; "
                                      f"registered: {have or 'none'}")
        return fn

    def _run(self, spec, leaves):
        from .autograd.graph import increment_version

        args, kwargs = spec.rebuild(leaves)
        kernel = self._kernel(spec.device_type)
        if spec.device_type == "meta":  # the fake implementation: get_ctx() answers inside it
            from ._library_classic import _fake_context

            with _fake_context():
                out = kernel(*args, **kwargs)
        else:
            out = kernel(*args, **kwargs)
        for name, value in self._named(args, kwargs):
            if name in self._mutated:
                ts = _tensors(value)
                if ts:
                    increment_version(ts)
        self._check_outputs(out, leaves)
        flat, spec.out_tree = _flatten_out(out)  # See NOTE [Custom op outputs]
        return tuple(flat) if spec.out_tree is not None else out

    def _check_outputs(self, out, leaves):
        outs = _flatten_out(out)[0]
        for o in outs:
            if o is not None and not isinstance(o, (Tensor, int, float, bool)):
                raise TypeError(f"{self._qualname}: the kernel returned a {type(o).__name__}; custom ops return "
                                "Tensors, lists or tuples of Tensors, ints, floats, bools or None")
        ts = [o for o in outs if isinstance(o, Tensor) and o.__class__ is Tensor]
        for o in ts:
            for a in leaves:
                if a.__class__ is Tensor and (o is a or _arrays_alias(o._data, a._data)):
                    raise RuntimeError(f"{self._qualname}: the output of this custom operator must not be an input "
                                       "or alias (a view of) one; return a new tensor (e.g. x.clone())")


def _trivial_fake(*args, **kwargs):
    """The fake implementation of a mutating op that returns nothing (PyTorch generates it: such
    an op changes no shape, so the meta device has nothing to compute)."""
    return None


def _tensors(value):
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, Tensor)]
    return []


# ---------------------------------------------------------------------------- public API
def custom_op(name, fn=None, /, *, mutates_args, device_types=None, schema=None, tags=None):
    """Wrap a function into a custom operator (``torch.library.custom_op``). See NOTE [Custom ops].

    Parameters
    ----------
    name : str
        ``"namespace::op_name"``; the op is then also ``lucid.library.ops.namespace.op_name``.
    mutates_args : iterable of str or "unknown"
        The arguments the function writes in place (their version counters are bumped).
    device_types : str, list of str or None
        The device types the function implements ("cpu", "cuda", "strict", ...); None: all.
    schema : str, optional
        The schema; by default inferred from the type annotations (which are required).
    tags : optional
        Accepted for PyTorch compatibility.

    Examples
    --------
    >>> import lucid, numpy as np
    >>> @lucid.library.custom_op("lucid_doc::np_sin", mutates_args=(), device_types="cpu")
    ... def np_sin(x: lucid.Tensor) -> lucid.Tensor:
    ...     return lucid.tensor(np.sin(x.numpy()))
    >>> np_sin.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0].cos(),
    ...                          setup_context=lambda ctx, inputs, out: ctx.save_for_backward(inputs[0]))
    >>> x = lucid.tensor([0.0, 1.0], requires_grad=True)
    >>> np_sin(x).sum().backward()
    >>> x.grad
    tensor([1.       , 0.5403023])
    """
    m = _NAME.fullmatch(name) if isinstance(name, str) else None
    if m is None:
        raise ValueError(f"custom_op: expected a name like 'mylib::my_op', got {name!r}")

    def inner(fn):
        # A second definition of a name replaces the first (PyTorch does too), so re-running a
        # notebook cell or reloading a module works; ``ops.<ns>.<name>`` then gives the new op.
        sig = inspect.signature(fn)
        mutated = _mutated_names(sig, mutates_args, "custom_op")
        if schema is None:
            text = infer_schema(fn, mutates_args=mutates_args)
        else:
            if not isinstance(schema, str):
                raise TypeError(f"custom_op: schema must be a str, got {type(schema).__name__}")
            text = schema
            mutated = mutated | frozenset(re.findall(r"Tensor\(\w+!\)(?:\[\])?\?? (\w+)", schema))
        op = CustomOpDef(m.group(1), m.group(2), text, fn, mutated)
        op.register_kernel(device_types, fn)
        _OPS[name] = op
        return op

    return inner if fn is None else inner(fn)


def _resolve(op, api):
    if isinstance(op, CustomOpDef):
        return op
    if isinstance(op, str) and op in _OPS:
        return _OPS[op]
    raise ValueError(f"{api}: {op!r} is not a custom op made with lucid.library.custom_op "
                     f"(known: {sorted(_OPS) or 'none'})")


def register_kernel(op, device_types, func=None, /, *, lib=None):
    """``op.register_kernel(device_types, func)`` for an op given by name or object."""
    return _resolve(op, "register_kernel").register_kernel(device_types, func)


def register_fake(op, func=None, /, *, lib=None, _stacklevel=1, allow_override=False):
    """``op.register_fake(func)`` for an op given by name or object; usable as a decorator."""
    target = _resolve(op, "register_fake")
    return target.register_fake if func is None else target.register_fake(func)


def register_autograd(op, backward, /, *, setup_context=None, lib=None):
    """``op.register_autograd(backward, setup_context=...)`` for an op given by name or object."""
    return _resolve(op, "register_autograd").register_autograd(backward, setup_context=setup_context)


def register_vmap(op, func=None, /, *, lib=None):
    """``op.register_vmap(func)`` for an op given by name or object; usable as a decorator."""
    return _resolve(op, "register_vmap").register_vmap(func)


class _OpNamespace:
    def __init__(self, ns):
        self._ns = ns

    def __getattr__(self, name):
        op = _OPS.get(f"{self._ns}::{name}")
        if op is None and any(q.startswith(f"{self._ns}::{name}.") for q in _OPS):
            return _OverloadPacket(self._ns, name)  # only overloads were defined (``name.out`` ...)
        if op is None and self._ns == "lucid":  # Lucid's primitives, as ``torch.ops.aten``
            from ._core.primitive import REGISTRY

            prim = REGISTRY.get(name)
            if prim is not None:
                from .utils._python_dispatch import packet_of

                return packet_of(prim)
        if op is None:
            raise AttributeError(f"'_OpNamespace' '{self._ns}' object has no attribute '{name}'")
        return op

    def __repr__(self):
        return f"<lucid.library.ops.{self._ns}>"


class _OverloadPacket:
    """``ops.ns.name`` when only overloads (``name.out``) exist: their attribute holder."""

    def __init__(self, ns, name):
        self._ns, self._name = ns, name

    def __getattr__(self, overload):
        op = _OPS.get(f"{self._ns}::{self._name}.{overload}")
        if op is None:
            raise AttributeError(f"'{self._ns}::{self._name}' has no overload {overload!r}")
        return op

    def __call__(self, *args, **kwargs):
        prefix = f"{self._ns}::{self._name}."
        names = [q[len(prefix):] for q in _OPS if q.startswith(prefix)]
        raise RuntimeError(f"{prefix[:-1]} has no default overload; call one of its overloads ({', '.join(names)})")

    def __repr__(self):
        return f"<OpOverloadPacket {self._ns}::{self._name}>"


class _Ops:
    """``torch.ops``: ``ops.<namespace>.<name>`` is the custom op ``"namespace::name"``."""

    def __getattr__(self, ns):
        if ns.startswith("__"):
            raise AttributeError(ns)
        return _OpNamespace(ns)


ops = _Ops()


# ---------------------------------------------------------------------------- opcheck
_DEFAULT_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")


class OpCheckError(Exception):
    """A check of :func:`opcheck` failed (PyTorch's ``OpCheckError``)."""


def opcheck(op, args, kwargs=None, *, test_utils=_DEFAULT_TESTS, raise_exception=True, atol=None, rtol=None):
    """Check a custom op on sample inputs (``torch.library.opcheck``), for real.

    - ``test_schema``: arguments outside ``mutates_args`` keep their values, mutated ones get a
      new version, and no output is (a view of) an input.
    - ``test_autograd_registration``: if an input requires grad, a backward is registered, and
      for float64 inputs that require grad it agrees with finite differences (``gradcheck``).
    - ``test_faketensor``: the op on the inputs moved to the ``"meta"`` device (its fake
      implementation) gives outputs of the real outputs' shapes and dtypes.
    - ``test_aot_dispatch_dynamic``: under ``lucid.func.vjp`` (the functional transforms, Lucid's
      counterpart of a traced graph) the outputs and gradients equal eager autograd's.

    Returns ``{test: "SUCCESS" or the exception}``; with ``raise_exception`` the first failure is
    raised as an :class:`OpCheckError` naming its test.

    Examples
    --------
    >>> import lucid
    >>> @lucid.library.custom_op("lucid_doc::cube", mutates_args=())
    ... def cube(x: lucid.Tensor) -> lucid.Tensor:
    ...     return x ** 3
    >>> cube.register_autograd(lambda ctx, g: 3 * ctx.saved_tensors[0] ** 2 * g,
    ...                        setup_context=lambda ctx, inputs, out: ctx.save_for_backward(inputs[0]))
    >>> cube.register_fake(lambda x: lucid.empty_like(x))
    <function <lambda> at ...>
    >>> x = lucid.tensor([1.0, 2.0], dtype=lucid.float64, requires_grad=True)
    >>> lucid.library.opcheck(cube, (x,))
    {'test_schema': 'SUCCESS', 'test_autograd_registration': 'SUCCESS', 'test_faketensor': 'SUCCESS', 'test_aot_dispatch_dynamic': 'SUCCESS'}
    """
    op = _resolve(op, "opcheck")
    kwargs = dict(kwargs or {})
    tests = (test_utils,) if isinstance(test_utils, str) else tuple(test_utils)
    unknown = [t for t in tests if t not in _DEFAULT_TESTS]
    if unknown:
        raise ValueError(f"opcheck: unknown test_utils {unknown}; expected some of {list(_DEFAULT_TESTS)}")
    results = {}
    for name in tests:
        try:
            getattr(_Checks(op, args, kwargs, atol, rtol), name)()
            results[name] = "SUCCESS"
        except Exception as e:  # noqa: BLE001  (reported per test, as PyTorch does)
            if raise_exception:
                raise OpCheckError(f"opcheck(op, ...): {name} failed with {type(e).__name__}: {e}") from e
            results[name] = e
    return results


class _Checks:
    def __init__(self, op, args, kwargs, atol, rtol):
        self.op, self.atol, self.rtol = op, atol, rtol
        self.spec = _CallSpec(op, tuple(args), kwargs)
        self.leaves, self.spec.leaves = self.spec.leaves, None

    def fresh(self, to=None, grads=True):
        """Copies of the sample tensors (``requires_grad`` kept), so one check can't affect the next."""
        out = []
        for t in self.leaves:
            c = t.detach().clone() if to is None else t.detach().to(to)
            if grads and t.requires_grad:
                c.requires_grad_(True)
            out.append(c)
        return out

    def call(self, leaves):
        args, kwargs = self.spec.rebuild(leaves)
        return self.op(*args, **kwargs)

    def test_schema(self):
        from ._core.grad_mode import no_grad

        leaves = self.fresh(grads=False)
        before = [(t.clone(), t._version[0]) for t in leaves]
        with no_grad():
            out = self.call(leaves)
        args, kwargs = self.spec.rebuild(list(range(len(leaves))))
        for name, slot in self.op._named(args, kwargs):
            for i in (slot if isinstance(slot, (list, tuple)) else [slot]):
                if not isinstance(i, int) or isinstance(i, bool) or not isinstance(leaves[i], Tensor):
                    continue
                old, version = before[i]
                changed = not _same(old, leaves[i])
                if changed and name not in self.op._mutated:
                    raise RuntimeError(f"the op changed its argument {name!r} in place, but mutates_args does "
                                       f"not name it (mutates_args: {sorted(self.op._mutated)})")
                if changed and leaves[i]._version[0] == version:
                    raise RuntimeError(f"the op changed {name!r} without bumping its version")
        outs = [o for o in (out if isinstance(out, (list, tuple)) else (out,)) if isinstance(o, Tensor)]
        for i, o in enumerate(outs):
            if any(o is p or _arrays_alias(o._data, p._data) for p in outs[:i]):
                raise RuntimeError("two outputs of the op share memory; return separate tensors")

    def test_autograd_registration(self):
        from .autograd import gradcheck

        wants = [i for i, t in enumerate(self.leaves) if t.requires_grad]
        if not wants:
            return
        if self.op._backward_fn is None:
            raise RuntimeError(f"inputs require grad but {self.op._qualname} has no autograd formula; "
                               "use register_autograd")
        leaves = self.fresh()
        checked = [i for i in wants if leaves[i].dtype.name == "float64"]
        if not checked:  # no float64 input: finite differences would be too coarse; a backward must run
            out = self.call(leaves)
            _backward_sum(out)
            return

        def f(*xs):
            vals = list(leaves)
            for i, x in zip(checked, xs):
                vals[i] = x
            out = self.call(vals)
            return tuple(out) if isinstance(out, list) else out

        kw = {k: v for k, v in (("atol", self.atol), ("rtol", self.rtol)) if v is not None}
        gradcheck(f, tuple(leaves[i] for i in checked), **kw)

    def test_faketensor(self):
        from ._core.grad_mode import no_grad

        with no_grad():
            real = self.call(self.fresh(grads=False))
            fake = self.call(self.fresh(to="meta", grads=False))
        reals = real if isinstance(real, (list, tuple)) else (real,)
        fakes = fake if isinstance(fake, (list, tuple)) else (fake,)
        if len(reals) != len(fakes):
            raise RuntimeError(f"the fake implementation returned {len(fakes)} outputs, the kernel {len(reals)}")
        for k, (r, f) in enumerate(zip(reals, fakes)):
            if isinstance(r, Tensor) != isinstance(f, Tensor):
                raise RuntimeError(f"output {k}: the fake implementation returned {type(f).__name__}, the kernel "
                                   f"{type(r).__name__}")
            if isinstance(r, Tensor) and (tuple(r.shape) != tuple(f.shape) or r.dtype != f.dtype):
                raise RuntimeError(f"output {k}: the fake implementation gives shape {tuple(f.shape)} and dtype "
                                   f"{f.dtype}, the kernel shape {tuple(r.shape)} and dtype {r.dtype}")
            if isinstance(r, Tensor) and f.device.type != "meta":
                raise RuntimeError(f"output {k}: the fake implementation returned a tensor on {f.device}, not on "
                                   "the meta device of its inputs")

    def test_aot_dispatch_dynamic(self):
        from . import func

        wants = [i for i, t in enumerate(self.leaves) if t.requires_grad and self.op._backward_fn is not None]
        leaves = self.fresh()
        eager = self.call(leaves)
        if wants:
            _backward_sum(eager)

        def f(*xs):
            vals = [t.detach() for t in self.fresh(grads=False)]
            for i, x in zip(wants, xs):
                vals[i] = x
            out = self.call(vals)
            return tuple(out) if isinstance(out, list) else out

        traced, pullback = func.vjp(f, *[self.leaves[i].detach() for i in wants])
        _assert_close(traced, eager, "the output under lucid.func.vjp", self.atol, self.rtol)
        if wants:
            outs = traced if isinstance(traced, tuple) else (traced,)
            ones = tuple(_ones_like(o) if isinstance(o, Tensor) and o.dtype.kind in "fc" else None for o in outs)
            got = pullback(ones if isinstance(traced, tuple) else ones[0])
            _assert_close(tuple(got), tuple(leaves[i].grad for i in wants), "the gradients under lucid.func.vjp",
                          self.atol, self.rtol)


def _ones_like(t):
    from . import ones_like

    return ones_like(t)


def _backward_sum(out):
    from .autograd import backward

    outs = [o for o in (out if isinstance(out, (list, tuple)) else (out,))
            if isinstance(o, Tensor) and o.requires_grad]
    if outs:
        backward([o.sum() for o in outs])


def _same(a, b):
    """Equal values, NaNs equal (through Lucid ops: the tensors may live on a device)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        return bool(((a == b) | (a.isnan() & b.isnan())).all().item())
    return bool((a == b).all().item())


def _assert_close(got, want, what, atol, rtol):
    from .testing import assert_close

    kw = {} if atol is None and rtol is None else {"atol": atol or 0.0, "rtol": rtol or 0.0}
    try:
        assert_close(got, want, equal_nan=True, **kw)
    except AssertionError as e:
        raise AssertionError(f"{what} differs from eager autograd's: {e}") from None


# The classic API (NOTE [Classic library API]) lives in lucid/_library_classic.py, which imports
# this module: its names are looked up there on first use.
_CLASSIC_NAMES = frozenset(["FakeImplCtx", "Library", "define", "fallthrough_kernel", "get_ctx", "get_kernel", "impl",
                            "impl_abstract", "register_autocast", "register_torch_dispatch"])


def __getattr__(name):
    if name in _CLASSIC_NAMES:
        from . import _library_classic

        return getattr(_library_classic, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
