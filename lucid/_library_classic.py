"""PyTorch's classic ``torch.library`` registration API (``Library``, ``define``, ``impl`` ...).

Split out of ``lucid/library.py`` (which re-exports every name here): the ops it defines are that
module's :class:`~lucid.library.CustomOpDef` objects with a small dispatch state of their own.
See NOTE [Classic library API] below.
"""
from __future__ import annotations

import contextlib
import inspect
import re
import types

from ._core.tensor import Tensor
from .library import _OPS, CustomOpDef, _CallSpec, _device_type, _resolve, _tensors, register_fake

# ---------------------------------------------------------------------------- the classic API
# NOTE [Classic library API]
# PyTorch's older registration API: ``Library(ns, "DEF")`` + ``lib.define(schema)`` declares an
# op from a schema string, and ``lib.impl(name, fn, dispatch_key)`` gives it kernels. The op is
# the same :class:`CustomOpDef` as ``custom_op`` makes (its signature is built from the schema,
# reachable as ``ops.<ns>.<name>``, ``register_autograd``/``register_fake``/``register_vmap``
# work on it), with a small dispatch state (``_ClassicState``) consulted first:
#   1. ``register_autocast``: inside an autocast region of that device type, floating tensor
#      arguments are cast and the op runs with autocast off;
#   2. an ``Autograd`` (``AutogradCPU`` ...) kernel runs in place of autograd when grad mode is on
#      and a tensor argument requires grad (it calls a Function whose forward, run without
#      grad, reaches the backend kernel: PyTorch's usual pattern);
#   3. a ``CompositeImplicitAutograd`` kernel (also ``impl(name, fn)`` with no key) runs as plain
#      Python on Lucid ops when no kernel is registered for the arguments' device type, so
#      Lucid's autograd and transforms see its ops and it needs no backward;
#   4. an op returning an alias of an input (``Tensor(a!)``: in-place and ``out=`` variants)
#      runs its kernel directly (no Function: outputs may be inputs), bumping the versions of
#      the mutated arguments;
#   5. otherwise the custom-op path: ``CPU``/``CUDA``/``Meta`` kernels by device type,
#      ``CompositeExplicitAutograd`` for every device, backward from ``register_autograd``.
# A Library's registrations last while it lives (PyTorch's too): when it is collected or
# ``_destroy()``-ed, the ops it defined and the kernels it registered go away.
_THROUGH = object()  # the classic dispatch's answer: continue on the custom-op path
_DEF_NAMESPACES = set()  # namespaces a live "DEF" library holds
_KEEP_ALIVE = []  # the FRAGMENT libraries made by module-level define/impl (never collected)
_SCHEMA = re.compile(r"\s*(?:(\w+)::)?([A-Za-z_]\w*)(?:\.(\w+))?\s*\((.*)\)\s*->\s*(.+?)\s*", re.S)
_ARG = re.compile(r"(?P<type>.+?)\s+(?P<name>[A-Za-z_]\w*)\s*(?:=\s*(?P<default>.+))?", re.S)
_BASE_TYPES = frozenset("Tensor int float bool str SymInt SymFloat SymBool Scalar ScalarType Device Layout "
                        "MemoryFormat Generator complex Dimname Storage Stream Any".split())
_DEVICE_KEYS = {"CPU": "cpu", "CUDA": "cuda", "Meta": "meta", "PrivateUse1": "strict"}
_AUTOGRAD_KEYS = {"Autograd": None, "AutogradCPU": "cpu", "AutogradCUDA": "cuda", "AutogradMeta": "meta",
                  "AutogradPrivateUse1": "strict"}


def _split_top(text):
    """``text`` split at the commas outside brackets and quotes."""
    parts, depth, quote, cur = [], 0, None, ""
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
            continue
        cur += ch
    return parts + ([cur.strip()] if cur.strip() else [])


def _schema_base(t, where):
    base = re.sub(r"\(\w+!?\)", "", t).replace("?", "")
    base = re.sub(r"\[\d*\]", "", base).strip()
    if base not in _BASE_TYPES:
        raise RuntimeError(f"{where}: unknown type {base!r} in the schema; known: {', '.join(sorted(_BASE_TYPES))}")
    return base


def _schema_default(text):
    text = text.strip()
    literals = {"None": None, "True": True, "False": False, "inf": float("inf"), "-inf": float("-inf"),
                "nan": float("nan")}
    if text in literals:
        return literals[text]
    if text[:1] in "'\"" and text[-1:] == text[:1]:
        return text[1:-1]
    if text.startswith("["):
        return [_schema_default(v) for v in _split_top(text[1:-1])]
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text  # an enum name (contiguous_format, Mean ...): kept as its name


class _Schema:
    """A parsed schema: ``name``, ``overload``, ``params`` [(name, type, default, keyword_only)],
    ``mutated`` (names annotated ``!``) and whether a return aliases an input."""

    def __init__(self, text, where):
        m = _SCHEMA.fullmatch(text)
        if m is None:
            raise RuntimeError(f"{where}: can't parse the schema {text!r}; expected 'name(Type arg, ...) -> Type'")
        self.namespace, self.name, self.overload, args, self.returns = m.groups()
        self.params, kw_only = [], False
        for part in _split_top(args):
            if part == "*":
                kw_only = True
                continue
            a = _ARG.fullmatch(part)
            if a is None:
                raise RuntimeError(f"{where}: can't parse the argument {part!r} of the schema {text!r}")
            _schema_base(a["type"], where)
            default = inspect.Parameter.empty if a["default"] is None else _schema_default(a["default"])
            self.params.append((a["name"], a["type"].strip(), default, kw_only))
        for r in _split_top(self.returns.strip()[1:-1] if self.returns.strip().startswith("(") else self.returns):
            _schema_base(r.split()[0] if r.split() else r, where)
        self.mutated = frozenset(n for n, t, _, _ in self.params if "!" in t)
        self.returns_alias = bool(re.search(r"Tensor\(\w+!?\)", self.returns))
        self.text = f"{self.name}{'.' + self.overload if self.overload else ''}({args}) -> {self.returns}"

    def signature(self):
        kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        try:
            return inspect.Signature([inspect.Parameter(n, kinds[kw], default=d) for n, _, d, kw in self.params])
        except ValueError as e:  # a parameter without default after one with
            raise RuntimeError(f"define: invalid schema {self.text!r}: {e}") from None


class _ClassicState:
    """The extra dispatch of an op that the classic API touched. See NOTE [Classic library API]."""

    def __init__(self, returns_alias=False):
        self.implicit, self.autograd, self.autocast, self.returns_alias = {}, {}, {}, returns_alias

    def dispatch(self, op, pos, kw):
        tensors = [t for v in (*pos, *kw.values()) for t in _tensors(v)]
        kind = _device_type(op, tensors, pos, kw)
        if kind in self.autocast:
            return self._autocast(op, kind, pos, kw)
        from ._core.grad_mode import STATE

        grad_kernel = self.autograd.get(kind, self.autograd.get(None))
        if grad_kernel is not None and STATE.grad_enabled and any(t.requires_grad for t in tensors):
            return grad_kernel(*pos, **kw)
        implicit = self.implicit.get(kind, self.implicit.get(None))
        if implicit is not None and op._backend_fns.get(kind) is None and (kind != "meta" or op._fake_fn is None):
            return implicit(*pos, **kw)
        if self.returns_alias:
            return self._run_in_place(op, kind, pos, kw, tensors)
        return _THROUGH

    def _autocast(self, op, kind, pos, kw):
        from .amp import autocast, is_autocast_enabled

        if not is_autocast_enabled(kind):
            cast = self.autocast.pop(kind)  # not in a region: dispatch as if no rule (put back after)
            try:
                return op(*pos, **kw)
            finally:
                self.autocast[kind] = cast
        dtype = self.autocast[kind]

        def cast(v):
            if isinstance(v, Tensor) and v.device.type == kind and v.dtype.is_floating_point:
                return v.to(dtype)
            return type(v)(cast(x) for x in v) if isinstance(v, (list, tuple)) else v

        with autocast(kind, enabled=False):
            return op(*[cast(v) for v in pos], **{k: cast(v) for k, v in kw.items()})

    @staticmethod
    def _run_in_place(op, kind, pos, kw, tensors):
        from ._core.grad_mode import STATE
        from .autograd.graph import increment_version

        if op._mutated and STATE.grad_enabled:
            op._check_mutated_grads(_CallSpec(op, pos, kw), tensors)
        out = op._kernel(kind)(*pos, **kw)
        for name, value in op._named(pos, kw):
            if name in op._mutated and _tensors(value):
                increment_version(_tensors(value))
        return out


def _classic_state(op):
    if op._classic is None:
        op._classic = _ClassicState()
    return op._classic


def _stub(qualname):
    def no_kernel(*args, **kwargs):
        raise NotImplementedError(f"{qualname}: no kernel registered (use Library.impl or register_kernel)")

    return no_kernel


class Library:
    """PyTorch's ``torch.library.Library``: a handle to define ops in a namespace (``"DEF"``:
    the namespace's one defining library; ``"FRAGMENT"``: more definitions; ``"IMPL"``:
    kernels only) and register kernels for them. See NOTE [Classic library API].

    Examples
    --------
    >>> import lucid
    >>> lib = lucid.library.Library("lucid_doc_classic", "DEF")
    >>> lib.define("scale(Tensor x, float alpha=2.0) -> Tensor")
    'scale'
    >>> lib.impl("scale", lambda x, alpha: x * alpha, "CompositeImplicitAutograd")
    >>> x = lucid.tensor([1.0, 2.0], requires_grad=True)
    >>> y = lucid.library.ops.lucid_doc_classic.scale(x)
    >>> y.sum().backward(); x.grad
    tensor([2., 2.])
    >>> lib._destroy()  # its ops go away (as when it is garbage-collected)
    """

    def __init__(self, ns, kind, dispatch_key=""):
        if kind not in ("IMPL", "DEF", "FRAGMENT"):
            raise ValueError(f"Unsupported kind: {kind}")
        if not isinstance(ns, str) or not re.fullmatch(r"[A-Za-z_]\w*", ns):
            raise ValueError(f"Library: invalid namespace {ns!r}")
        if kind == "DEF" and ns in _DEF_NAMESPACES:
            raise RuntimeError(f"Only a single TORCH_LIBRARY can be used to register the namespace {ns}; please put "
                               "all of your definitions in a single TORCH_LIBRARY block (use kind='FRAGMENT' to add "
                               "more, or 'IMPL' for kernels).")
        if kind == "DEF":
            _DEF_NAMESPACES.add(ns)
        self.ns, self.kind, self.dispatch_key = ns, kind, dispatch_key
        self._defined, self._registered = [], []  # qualnames; (op, table name, key, fn)
        import weakref

        self._finalizer = weakref.finalize(self, _destroy, ns if kind == "DEF" else None, self._defined,
                                           self._registered)

    def __repr__(self):
        return f"Library(kind={self.kind}, ns={self.ns}, dispatch_key={self.dispatch_key})"

    def define(self, schema, alias_analysis="", *, tags=()):
        """Declare an op from a schema (``"name(Tensor x, int n=1) -> Tensor"``); returns its name."""
        if self.kind == "IMPL":
            raise RuntimeError(f'def("{schema}"): Cannot define an operator inside of a TORCH_LIBRARY_IMPL block. '
                               "All def()s should be placed in the (unique) TORCH_LIBRARY block for their namespace.")
        parsed = _Schema(schema, "define")
        if parsed.namespace not in (None, self.ns):
            raise ValueError(f"define: the schema names namespace {parsed.namespace!r}, the library {self.ns!r}")
        name = parsed.name + ("." + parsed.overload if parsed.overload else "")
        qualname = f"{self.ns}::{name}"
        if qualname in _OPS:
            raise RuntimeError(f"Tried to register an operator ({self.ns}::{parsed.text}) with the same name and "
                               "overload name multiple times.")
        stub = _stub(qualname)
        stub.__signature__ = parsed.signature()
        op = CustomOpDef(self.ns, name, parsed.text, stub, parsed.mutated)
        op._classic, op._tags = _ClassicState(parsed.returns_alias), tuple(tags)
        _OPS[qualname] = op
        self._defined.append(qualname)
        return name

    def impl(self, op_name, fn, dispatch_key="", *, with_keyset=False, allow_override=True):
        """Register ``fn`` as ``op_name``'s kernel for ``dispatch_key``: ``CPU``/``CUDA``/``Meta``
        (by device type), ``CompositeExplicitAutograd`` (every device), ``Autograd``
        (``AutogradCPU`` ...), ``CompositeImplicitAutograd`` (the default)."""
        if not callable(fn):
            raise TypeError(f"Input function is required to be a callable but found type {type(fn)}")
        if with_keyset:
            raise NotImplementedError("Library.impl: with_keyset=True passes a DispatchKeySet, which Lucid has no "
                                      "dispatcher to provide")
        key = dispatch_key or self.dispatch_key or "CompositeImplicitAutograd"
        op = self._op(op_name)
        table, slot = _table_for(op, key)
        if slot in table and table[slot] is not None:
            if not allow_override:
                raise RuntimeError(f"This is not allowed since there's already a kernel registered from python "
                                   f"overriding {op._name}'s behavior for {key} dispatch key and {self.ns} namespace.")
            import warnings

            warnings.warn(f"Library.impl: overriding the kernel of {op._qualname} for the {key} dispatch key",
                          UserWarning, stacklevel=2)
        table[slot] = fn
        self._registered.append((table, slot, fn))

    def _op(self, op_name):
        if isinstance(op_name, CustomOpDef):
            return op_name
        if not isinstance(op_name, str):
            raise RuntimeError(f"impl should be passed either a name or an op as the first argument, got "
                               f"{type(op_name)}")
        qualname = op_name if "::" in op_name else f"{self.ns}::{op_name}"
        if qualname not in _OPS:
            raise RuntimeError(f"Library.impl: operator {qualname} is not defined (define it first, e.g. "
                               f"Library({self.ns!r}, 'DEF').define(...))")
        return _OPS[qualname]

    def fallback(self, fn, dispatch_key="", *, with_keyset=False):
        raise NotImplementedError("Library.fallback: Lucid has no dispatcher to register a fallback kernel in")

    def _destroy(self):
        self._finalizer()


def _table_for(op, key):
    """(the dict a kernel for ``key`` goes in, its slot): See NOTE [Classic library API]."""
    if key in _DEVICE_KEYS:
        kind = _DEVICE_KEYS[key]
        return (op.__dict__, "_fake_fn") if kind == "meta" else (op._backend_fns, kind)
    if key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "Undefined"):
        return op.__dict__, "_default_fn"
    if key in _AUTOGRAD_KEYS:
        return _classic_state(op).autograd, _AUTOGRAD_KEYS[key]
    if key == "CompositeImplicitAutograd":
        return _classic_state(op).implicit, None
    if key.lower() in ("cpu", "cuda", "meta", "strict"):  # device types, as impl(qualname, types) takes
        return _table_for(op, {"cpu": "CPU", "cuda": "CUDA", "meta": "Meta", "strict": "PrivateUse1"}[key.lower()])
    known = [*_DEVICE_KEYS, *_AUTOGRAD_KEYS, "CompositeExplicitAutograd", "CompositeImplicitAutograd"]
    raise ValueError(f"Library.impl: dispatch key {key!r} is not supported by Lucid; supported: {', '.join(known)}")


def _destroy(def_ns, defined, registered):
    for table, slot, fn in registered:
        if table.get(slot) is fn:  # not replaced since: take it away
            if slot in ("_fake_fn", "_default_fn"):
                table[slot] = None
            else:
                del table[slot]
    for qualname in defined:
        _OPS.pop(qualname, None)
    registered.clear()
    defined.clear()
    _DEF_NAMESPACES.discard(def_ns)


def _library_for(qualname, lib, api):
    m = re.fullmatch(r"([A-Za-z_]\w*)::([\w.]+)", qualname) if isinstance(qualname, str) else None
    if m is None:
        raise ValueError(f"{api}: expected a name like 'mylib::my_op', got {qualname!r}")
    if lib is None:
        lib = Library(m.group(1), "FRAGMENT")
        _KEEP_ALIVE.append(lib)  # module-level registrations live as long as the process
    return lib


def define(qualname, schema, *, lib=None, tags=()):
    """Declare ``qualname`` (``"mylib::op"``) with ``schema`` (``"(Tensor x) -> Tensor"``);
    returns None, as PyTorch's. See NOTE [Classic library API].

    Examples
    --------
    >>> import lucid
    >>> lucid.library.define("lucid_doc_def::twice", "(Tensor x) -> Tensor")
    >>> lucid.library.impl("lucid_doc_def::twice", "cpu", lambda x: x * 2)
    >>> lucid.library.ops.lucid_doc_def.twice(lucid.tensor([1.0], device="cpu"))
    tensor([2.])
    """
    if isinstance(qualname, Library):  # define(lib, schema): the method
        return qualname.define(schema, tags=tags)
    use = _library_for(qualname, lib, "define")
    ns, name = qualname.split("::")
    use.define(name + schema, tags=tags)  # the schema has no name of its own, as PyTorch's


def impl(qualname, types, func=None, *, lib=None):
    """Register ``func`` for the device types (``"cpu"``, ``"cuda"`` ...) or dispatch keys in
    ``types``; a decorator without ``func``. Returns None, as PyTorch's (the decorated name is
    then None too)."""
    if isinstance(qualname, Library):  # impl(lib, name, fn, key): the method
        return qualname.impl(types, func)
    keys = (types,) if isinstance(types, str) else tuple(types)

    def register(fn):
        use = _library_for(qualname, lib, "impl")
        for key in keys:
            use.impl(qualname, fn, key)

    if func is None:
        return register
    register(func)


def impl_abstract(qualname, func=None, *, lib=None, _stacklevel=1):
    """Deprecated name of :func:`register_fake` (warns ``FutureWarning``, as PyTorch)."""
    import warnings

    warnings.warn("`lucid.library.impl_abstract` was renamed to `lucid.library.register_fake`. Please use that "
                  "instead.", FutureWarning, stacklevel=2)
    return register_fake(qualname, func, lib=lib)


def fallthrough_kernel():
    """A marker kernel: registered for a key, it means "skip this key" (never called)."""
    raise NotImplementedError("fallthrough_kernel() should never be called.")


class FakeImplCtx:
    """What :func:`get_ctx` returns inside a fake (meta) implementation."""

    def new_dynamic_size(self, *, min=0, max=None):  # noqa: A002  (PyTorch's names)
        raise NotImplementedError("get_ctx().new_dynamic_size(): Lucid's meta device has static shapes, so an output "
                                  "whose size depends on the data can't be described there; run the op on real "
                                  "tensors")

    new_data_dependent_symint = create_unbacked_symint = new_dynamic_size


_FAKE_DEPTH = [0]


@contextlib.contextmanager
def _fake_context():
    _FAKE_DEPTH[0] += 1
    try:
        yield
    finally:
        _FAKE_DEPTH[0] -= 1


def get_ctx():
    """Inside a fake implementation, its context (:class:`FakeImplCtx`); elsewhere None."""
    return FakeImplCtx() if _FAKE_DEPTH[0] else None


def register_autocast(op, device_type, cast_inputs, /, *, lib=None):
    """Under ``lucid.autocast(device_type)``, cast the op's floating tensor arguments on that
    device type to ``cast_inputs`` and run it with autocast off."""
    from ._core.backend import device as _device

    try:
        _device(device_type)
    except Exception:
        raise ValueError(f"Device type '{device_type}' does not support autocast.") from None
    _resolve(op, "register_autocast").register_autocast(device_type, cast_inputs)


class _Kernel:
    """What :func:`get_kernel` returns: ``call_boxed(keyset, *args, **kwargs)`` runs the kernel."""

    def __init__(self, op, key, fn):
        self.op_handle, self._key, self._fn = op, key, fn

    def call_boxed(self, keyset, *args, **kwargs):
        return self._fn(*args, **kwargs)

    __call__ = lambda self, *args, **kwargs: self._fn(*args, **kwargs)  # noqa: E731

    def __repr__(self):
        return f"<kernel of {self.op_handle._qualname} for {self._key}>"


def get_kernel(op, dispatch_key):
    """The kernel registered for ``op`` under ``dispatch_key`` (a RuntimeError if none)."""
    op = _resolve(op, "get_kernel")
    table, slot = _table_for(op, str(dispatch_key))
    fn = table.get(slot)
    if fn is None and table is op._backend_fns:  # a device key falls back to the every-device kernel
        fn = op._default_fn
    if fn is None:
        raise RuntimeError(f"get_kernel: {op._qualname} has no kernel for the dispatch key {dispatch_key}")
    return _Kernel(op, str(dispatch_key), fn)


def register_torch_dispatch(op, torch_dispatch_class, func=None, /, *, lib=None):
    """``torch.library.register_torch_dispatch``: implemented in ``lucid.utils._python_dispatch``."""
    from .utils import _python_dispatch

    target = getattr(_python_dispatch, "register_torch_dispatch", None)
    if target is None:
        raise NotImplementedError("lucid.library.register_torch_dispatch: lucid.utils._python_dispatch."
                                  "register_torch_dispatch is not available yet")
    return target(op, torch_dispatch_class, func, lib=lib)


# PyTorch's names: these are ``lucid.library.Library`` & co (re-exported there on first use)
for _public in (Library, FakeImplCtx, define, impl, impl_abstract, fallthrough_kernel, get_ctx, register_autocast,
                get_kernel, register_torch_dispatch):
    _public.__module__ = "lucid.library"
del _public
