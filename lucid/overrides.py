"""``lucid.overrides`` (PyTorch's ``torch.overrides``): the ``__torch_function__`` protocol.

NOTE [Torch function]
PyTorch lets a Tensor subclass, or any object with a ``__torch_function__`` classmethod, take
over every public function called with it (``torch.add``, ``Tensor.__add__``,
``F.linear`` ...), and a :class:`TorchFunctionMode` take over every call inside a ``with``
block. A subclass that does not override it still keeps its class through ops (the default
``Tensor.__torch_function__`` runs the op and converts the result); ``nn.Parameter`` opts out
with ``__torch_function__ = _disabled_torch_function_impl``.

Lucid does the same with nothing paid until it is needed: the public functions of ``lucid``,
``lucid.nn.functional``, ``lucid.linalg``, ``lucid.fft`` and ``lucid.special``, and the
methods, operators and view properties of ``Tensor`` are replaced by dispatching wrappers
(:func:`_activate`) the first time a Tensor subclass that takes part in the protocol is
defined (``Tensor.__init_subclass__``), a mode is entered, or this module is imported (for
Tensor-like objects that are not Tensors). From then on each call scans its arguments (one
level into lists and tuples, and keyword values) for such objects: none, and the original
function runs; otherwise the modes (innermost first, each popped while it runs) and then the
arguments' ``__torch_function__`` (subclasses before their bases, then left to right) are
asked until one does not return ``NotImplemented``. The wrapper is what ``func`` is, so
``func is lucid.add`` and ``func is lucid.Tensor.add`` work in an override.
:class:`DisableTorchFunctionSubclass` (``lucid._C`` too) turns subclass dispatch off inside
an override, as the default implementation does while it runs the op. Lucid's own code calls
the originals (their modules' names are rebound, references taken at import are not), so an
override sees the public call, not the ops a composite is built from.
Results are converted in place (``__class__`` set: the same object, so gradients, hooks and
``retain_grad`` stay); a result that is one of the arguments is aliased with ``as_subclass``
instead, and tensors of an active transform (``lucid.func``) are left as they are.
"""
from __future__ import annotations

import functools
import inspect
import os
import sys
import types as _types

from ._core.tensor import Tensor, _disabled_torch_function_impl

__all__ = ["BaseTorchFunctionMode", "DisableTorchFunction", "DisableTorchFunctionSubclass", "TorchFunctionMode",
           "enable_reentrant_dispatch", "get_ignored_functions", "get_overridable_functions", "handle_torch_function",
           "has_torch_function", "has_torch_function_unary", "has_torch_function_variadic", "is_tensor_like",
           "is_tensor_method_or_property", "resolve_name", "wrap_torch_function", "get_testing_overrides",
           "redispatch_function"]


class _State:
    active = False  # the wrappers are installed
    subclass_off = 0  # DisableTorchFunctionSubclass depth
    all_off = 0  # DisableTorchFunction depth
    modes = []  # TorchFunctionMode stack, innermost last
    wrappers = {}  # id(original) -> (original, wrapper)
    patched = []  # (owner, name, original) of every attribute _activate replaced
    skip_hop = False  # redispatch_function: the next has_torch_function check answers False


_STATE = _State()
_PLAIN = frozenset((int, float, bool, complex, str, bytes, type(None), slice, type(Ellipsis), Tensor))
# Python-level settings and helpers no mode sees either (as in PyTorch).
_NOT_WRAPPED = frozenset("""
is_tensor is_storage vmap compile typename set_default_dtype get_default_dtype set_default_device
get_default_device set_printoptions get_printoptions manual_seed seed initial_seed
use_deterministic_algorithms are_deterministic_algorithms_enabled is_grad_enabled set_grad_enabled
is_inference_mode_enabled bind
""".split())
# PyTorch's get_ignored_functions (for the names Lucid has): constructors, which a subclass
# argument does not take over (``lucid.tensor(sub)`` is a plain tensor) but modes do see.
_IGNORED_NAMES = frozenset("""
tensor as_tensor asarray from_numpy frombuffer from_file zeros ones empty full arange range linspace
logspace eye rand randn randint randperm empty_strided scalar_tensor sparse_coo_tensor
sparse_csr_tensor
""".split()) | _NOT_WRAPPED
# Tensor attributes that are protocol plumbing, not ops.
_TENSOR_SKIP = frozenset("""
__init__ __new__ __init_subclass__ __torch_function__ __torch_dispatch__ __getattribute__ __getattr__ __setattr__
__delattr__ __repr__ __str__ __format__ __hash__ __reduce__ __reduce_ex__ __getstate__
__setstate__ __copy__ __deepcopy__ __array__ __array_wrap__ __array_ufunc__ __array_function__
__dlpack__ __dlpack_device__ __len__ __iter__ __bool__ __index__ __int__ __float__ __complex__
__contains__ __sizeof__ __dir__ __class_getitem__ __weakref__ __dict__ __module__ __doc__
""".split())
_TENSOR_PROPERTIES = ("T", "mT", "H", "mH", "real", "imag", "data")


_PARTICIPATES = {}  # class -> whether its instances dispatch (classes don't change their protocol)


def _participates(cls):
    known = _PARTICIPATES.get(cls)
    if known is None:
        impl = getattr(cls, "__torch_function__", None)
        # PyTorch's own tensors carry torch's __torch_function__, which knows torch's functions only
        known = _PARTICIPATES[cls] = (impl is not None and cls.__module__.partition(".")[0] != "torch"
                                      and getattr(impl, "__func__", impl) is not _disabled_torch_function_impl)
    return known


def _collect(value, found):
    cls = value.__class__
    if cls in _PLAIN:
        return found
    if cls is list or cls is tuple:
        for v in value:
            found = _collect(v, found)
        return found
    if not _participates(cls):
        return found
    if found is None:
        return [value]
    if any(type(f) is cls for f in found):
        return found
    # subclasses before their bases, otherwise left to right (PyTorch's order)
    for i, f in enumerate(found):
        if issubclass(cls, type(f)):
            found.insert(i, value)
            return found
    found.append(value)
    return found


def _overloaded(args, kwargs):
    found = None
    for a in args:
        found = _collect(a, found)
    if kwargs:
        for v in kwargs.values():
            found = _collect(v, found)
    return found


def original(func):
    """The function a ``__torch_function__`` dispatcher wraps (``func`` itself when unwrapped):
    the key of the handler tables of nested, masked, quantized and distributed tensors.

    Examples
    --------
    >>> import lucid
    >>> from lucid.overrides import original
    >>> original(lucid.add).__name__
    'add'
    """
    return getattr(func, "_lucid_original", func)


def register_handlers(table, handler, owners, names, getters=False):
    """Map the functions ``names`` of each of ``owners`` (modules; of a class, its own
    attributes) to ``handler`` in ``table``, keyed by :func:`original`: how the nested and
    DTensor dispatchers build their tables. ``getters``: a property is keyed by its getter
    (what the protocol hands a handler for ``t.T``); else properties are skipped.

    Examples
    --------
    >>> import lucid
    >>> from lucid.overrides import register_handlers
    >>> table = {}
    >>> register_handlers(table, "pointwise", (lucid, lucid.Tensor), ["exp"])
    >>> len(table), set(table.values())
    (2, {'pointwise'})
    """
    for owner in owners:
        for n in names:
            obj = vars(owner).get(n) if isinstance(owner, type) else getattr(owner, n, None)
            if getters and isinstance(obj, property):
                obj = obj.fget
            if callable(obj) and not isinstance(obj, type):
                table[original(obj)] = handler


def _name(func):
    return resolve_name(func) or getattr(func, "__name__", repr(func))


def _dispatch(public, args, kwargs, overloaded):
    types = tuple(type(a) for a in overloaded)
    if _STATE.modes:
        mode = _STATE.modes.pop()  # a mode runs with itself popped: its own calls go further in
        try:
            result = mode.__torch_function__(public, types, args, kwargs)
        finally:
            _STATE.modes.append(mode)
        if result is not NotImplemented:
            return result
    for a in overloaded:
        result = type(a).__torch_function__(public, types, args, kwargs)
        if result is not NotImplemented:
            return result
    raise TypeError(f"no implementation found for '{_name(public)}' on types that implement "
                    f"__torch_function__: {[type(a) for a in overloaded]}")


# The wrapper's source, compiled under a file name CPython's warnings treat as an internal
# frame (``importlib._bootstrap``): ``warnings.warn(..., stacklevel=2)`` in a wrapped function
# still points at the user's line, as it does without the wrapper (Python 3.12's
# ``skip_file_prefixes`` is the clean way; this is the same rule importlib relies on).
_WRAPPER_SOURCE = """
def make(fn, state, overloaded, dispatch, modes_only):
    def public(*args, **kwargs):
        if state.all_off:
            return fn(*args, **kwargs)
        if state.subclass_off or modes_only:
            if not state.modes:
                return fn(*args, **kwargs)
            return dispatch(public, args, kwargs, [])
        found = overloaded(args, kwargs)
        if found is None and not state.modes:
            return fn(*args, **kwargs)
        return dispatch(public, args, kwargs, found or [])
    return public
"""
_namespace = {}
# (a name inside the package, so Lucid's own "is this the user's frame?" tests skip it too:
# anomaly mode's creation site, the profiler's stacks)
_WRAPPER_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_dispatch_importlib_bootstrap_hidden.py")
exec(compile(_WRAPPER_SOURCE, _WRAPPER_FILE, "exec"), _namespace)
_make_public = _namespace["make"]


def _wrap_function(fn, modes_only=False):
    """The dispatching wrapper of ``fn`` (one per function, reused wherever it appears)."""
    known = _STATE.wrappers.get(id(fn))
    if known is not None:
        return known[1]
    public = functools.wraps(fn)(_make_public(fn, _STATE, _overloaded, _dispatch, modes_only))
    public._lucid_original = fn
    _STATE.wrappers[id(fn)] = (fn, public)
    return public


def _activate():
    """Install the dispatching wrappers (once; see NOTE [Torch function])."""
    if _STATE.active:
        return
    _STATE.active = True
    import lucid
    import lucid.fft
    import lucid.linalg
    import lucid.nn.functional
    import lucid.special

    patched = _STATE.patched = []

    def put(owner, name, value):
        patched.append((owner, name, vars(owner)[name]))
        setattr(owner, name, value)

    for ns in (lucid, lucid.nn.functional, lucid.linalg, lucid.fft, lucid.special):
        for name, obj in list(vars(ns).items()):
            if name.startswith("_") or name in _NOT_WRAPPED or not isinstance(obj, _types.FunctionType):
                continue
            public = _wrap_function(obj, modes_only=name in _IGNORED_NAMES)
            put(ns, name, public)
            home = sys.modules.get(obj.__module__)  # so pickling by name finds the wrapper
            # ... but never inside lucid._core: its machinery (bind, which lucid.linalg happens
            # to import) calls its own functions and must not reach a subclass's handler
            if home is not None and home is not ns and vars(home).get(obj.__name__) is obj \
                    and not obj.__module__.startswith("lucid._core"):
                put(home, obj.__name__, public)
    for name, obj in list(vars(Tensor).items()):
        if name in _TENSOR_SKIP or (name.startswith("_") and not (name.startswith("__") and name.endswith("__"))):
            continue
        if isinstance(obj, _types.FunctionType):
            put(Tensor, name, _wrap_function(obj))
    for name in _TENSOR_PROPERTIES:
        prop = vars(Tensor).get(name)
        if isinstance(prop, property):
            put(Tensor, name, property(_wrap_function(prop.fget), prop.fset, prop.fdel, prop.__doc__))


def _deactivate():
    """Put the original functions back (the test suite does after each test, so every test starts
    on the path a program without Tensor subclasses takes); classes defined since keep existing,
    their instances behave as plain tensors until the protocol is switched on again."""
    if not _STATE.active:
        return
    for owner, name, original in reversed(_STATE.patched):
        setattr(owner, name, original)
    _STATE.patched = []
    _STATE.active = False


# ------------------------------------------------------------------------------- default

def _convert(ret, cls, inputs):
    if isinstance(ret, Tensor):
        if isinstance(ret, cls) or ret._level:
            return ret
        if any(ret is a for a in inputs):  # an argument handed back: alias it, don't change it
            return ret.as_subclass(cls)
        try:
            ret.__class__ = cls
        except TypeError:
            return ret.as_subclass(cls)
        return ret
    if isinstance(ret, (tuple, list)):
        items = [_convert(r, cls, inputs) for r in ret]
        if hasattr(ret, "_fields"):  # a named tuple (values, indices ...)
            return type(ret)(*items)
        return type(ret)(items)
    return ret


def _flat_tensors(args, kwargs):
    out = []
    for a in list(args) + list((kwargs or {}).values()):
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, (list, tuple)):
            out.extend(v for v in a if isinstance(v, Tensor))
    return out


def _is_pytorch_callable(func):
    mod = getattr(func, "__module__", None) or getattr(getattr(func, "__objclass__", None), "__module__", None) or ""
    return mod == "torch" or mod.startswith("torch.")


def _default_torch_function(cls, func, types, args=(), kwargs=None):
    """``Tensor.__torch_function__``: run ``func`` with subclass dispatch off and give the
    tensors it returns the class ``cls`` (PyTorch's default)."""
    kwargs = kwargs or {}
    if not all(issubclass(cls, t) for t in types):
        return NotImplemented
    if _is_pytorch_callable(func):
        # PyTorch's own dispatch asking a Lucid tensor (the protocol is duck-typed): running
        # func would ask again, forever; NotImplemented lets Python try Lucid's reflected operator
        return NotImplemented
    with DisableTorchFunctionSubclass():
        ret = func(*args, **kwargs)
    if cls is Tensor:
        return ret
    return _convert(ret, cls, _flat_tensors(args, kwargs))


# ------------------------------------------------------------------------------- public

class DisableTorchFunctionSubclass:
    """Within the block, subclasses' ``__torch_function__`` is not called (modes still are):
    what an override uses to run the op itself (``torch._C.DisableTorchFunctionSubclass``)."""

    def __enter__(self):
        _STATE.subclass_off += 1
        return self

    def __exit__(self, *exc):
        _STATE.subclass_off -= 1
        return False


class DisableTorchFunction:
    """Within the block, neither subclasses nor modes are dispatched to (``torch._C.DisableTorchFunction``)."""

    def __enter__(self):
        _STATE.all_off += 1
        return self

    def __exit__(self, *exc):
        _STATE.all_off -= 1
        return False


class TorchFunctionMode:
    """Override every public function called inside ``with mode:`` (PyTorch's
    ``TorchFunctionMode``): define ``__torch_function__(self, func, types, args=(), kwargs=None)``;
    while it runs the mode is popped, so ``func(*args, **kwargs)`` in it does the real work.

    Examples
    --------
    >>> import lucid
    >>> from lucid.overrides import TorchFunctionMode
    >>> class Log(TorchFunctionMode):
    ...     def __init__(self):
    ...         self.calls = []
    ...     def __torch_function__(self, func, types, args=(), kwargs=None):
    ...         self.calls.append(func.__name__)
    ...         return func(*args, **(kwargs or {}))
    >>> with Log() as log:
    ...     y = lucid.ones(2).exp().sum()
    >>> log.calls  # modes see constructors too, as PyTorch's
    ['ones', 'exp', 'sum']
    """

    def __torch_function__(self, func, types, args=(), kwargs=None):
        raise NotImplementedError

    def __enter__(self):
        _activate()
        _STATE.modes.append(self)
        return self

    def __exit__(self, *exc):
        if self in _STATE.modes:
            _STATE.modes.remove(self)
        return False


class BaseTorchFunctionMode(TorchFunctionMode):
    """A mode that runs every function unchanged (a base to override selectively)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def is_tensor_like(inp) -> bool:
    """A Tensor, or an object whose type has ``__torch_function__``."""
    return isinstance(inp, Tensor) or hasattr(type(inp), "__torch_function__")


def has_torch_function(relevant_args) -> bool:
    """Whether dispatch would go to an override for these arguments (or a mode is active)."""
    if _STATE.all_off:
        return False
    if _STATE.skip_hop:  # See redispatch_function: this call is the hop being skipped
        _STATE.skip_hop = False
        return False
    return bool(_STATE.modes) or (not _STATE.subclass_off and _overloaded(tuple(relevant_args), None) is not None)


def has_torch_function_unary(arg) -> bool:
    return has_torch_function((arg,))


def has_torch_function_variadic(*args) -> bool:
    return has_torch_function(args)


def handle_torch_function(public_api, relevant_args, *args, **kwargs):
    """Dispatch ``public_api(*args, **kwargs)`` to the modes and the overrides among
    ``relevant_args`` (for a function written in Python that takes part in the protocol)."""
    found = None if _STATE.subclass_off else _overloaded(tuple(relevant_args), None)
    return _dispatch(public_api, args, kwargs, found or [])


def wrap_torch_function(dispatcher):
    """Decorator: ``fn`` takes part in the protocol, ``dispatcher(*args, **kwargs)`` naming the
    arguments to look at."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            relevant = dispatcher(*args, **kwargs)
            if has_torch_function(relevant):
                return handle_torch_function(wrapped, relevant, *args, **kwargs)
            return fn(*args, **kwargs)

        return wrapped

    return decorate


def get_ignored_functions() -> set:
    """Public functions that do not take part (constructors, settings ...)."""
    import lucid

    return {getattr(lucid, n) for n in _IGNORED_NAMES if callable(getattr(lucid, n, None))}


def get_overridable_functions() -> dict:
    """``{namespace: [functions]}`` of everything that dispatches (after activation)."""
    _activate()
    import lucid

    out = {}
    for ns in (lucid, lucid.nn.functional, lucid.linalg, lucid.fft, lucid.special, Tensor):
        fns = [v for k, v in vars(ns).items() if getattr(v, "_lucid_original", None) is not None]
        out[ns] = fns
    return out


def is_tensor_method_or_property(func) -> bool:
    """Whether ``func`` is a dispatching Tensor method or property getter."""
    return any(v is func or (isinstance(v, property) and v.fget is func) for v in vars(Tensor).values())


def resolve_name(f):
    """``"lucid.add"``, ``"lucid.Tensor.add"`` ... for a public function, else None."""
    original = getattr(f, "_lucid_original", f)
    name = getattr(original, "__name__", None)
    if name is None:
        return None
    import lucid

    for prefix, ns in (("lucid", lucid), ("lucid.Tensor", Tensor)):
        if getattr(ns, name, None) is f or getattr(getattr(ns, name, None), "fget", None) is f:
            return f"{prefix}.{name}"
    return None


def get_testing_overrides() -> dict:
    """``{function: dummy}`` for every overridable function: each dummy has the function's
    signature and returns -1 (PyTorch's table for testing ``__torch_function__`` coverage).

    Examples
    --------
    >>> import inspect, lucid
    >>> from lucid.overrides import get_testing_overrides
    >>> dummy = get_testing_overrides()[lucid.where]
    >>> str(inspect.signature(dummy)), dummy(None, None, None)
    ('(condition, input=None, other=None)', -1)
    """
    out = {}
    for functions in get_overridable_functions().values():
        for fn in functions:
            out[fn] = _dummy_like(fn)
    return out


def _dummy_like(fn):
    def dummy(*args, **kwargs):
        return -1

    try:
        dummy.__signature__ = inspect.signature(original(fn))
    except (TypeError, ValueError):  # a builtin without a signature: any arguments
        pass
    dummy.__name__ = dummy.__qualname__ = getattr(fn, "__name__", "dummy")
    return dummy


def redispatch_function(func, types, args, kwargs=None):
    """Call ``func`` skipping one level of ``__torch_function__`` dispatch: from inside an
    override (or a mode), run the function itself; the calls it makes dispatch as usual. A
    Lucid function runs its original (plain tensors out, as PyTorch's); a Python function
    taking part through :func:`handle_torch_function` sees its next ``has_torch_function``
    check answer False.

    Examples
    --------
    >>> import lucid
    >>> from lucid.overrides import redispatch_function
    >>> class Logged(lucid.Tensor):
    ...     calls = []
    ...     @classmethod
    ...     def __torch_function__(cls, func, types, args=(), kwargs=None):
    ...         cls.calls.append(func.__name__)
    ...         return redispatch_function(func, types, args, kwargs)
    >>> out = lucid.mul(lucid.tensor([3.0]).as_subclass(Logged), 2)
    >>> Logged.calls, type(out).__name__
    (['mul'], 'Tensor')
    """
    kwargs = kwargs or {}
    wrapped = getattr(func, "_lucid_original", None)
    if wrapped is not None:
        return wrapped(*args, **kwargs)
    _STATE.skip_hop = True
    try:
        return func(*args, **kwargs)
    finally:
        _STATE.skip_hop = False


def enable_reentrant_dispatch():
    """A context manager accepted as PyTorch's (Lucid's dispatch is always re-entrant)."""
    import contextlib

    return contextlib.nullcontext()


_activate()  # importing the protocol's module means Tensor-like objects may come: dispatch them
