"""``lucid.compile`` and ``lucid.compiler`` (``torch.compile``, ``torch.compiler``): eager by design.

NOTE [No graph compiler]
Lucid has no tracer to a graph IR and no code generator: every op runs eagerly, on NumPy or
CuPy. ``lucid.compile`` exists so PyTorch 2 scripts (``model = torch.compile(model)``) run
unchanged: it checks its arguments as ``torch.compile`` does and returns the model or function
itself, which computes what PyTorch's own ``backend="eager"`` computes. What a compiler would
buy on a GPU — fewer launches — Lucid gets from fused kernels on its hottest chains (NOTE
[Fused device kernels]). A compiled module is the module (PyTorch wraps it in an
``OptimizedModule`` whose state_dict keys gain an ``_orig_mod.`` prefix; Lucid's keep their
names); a callable backend, which PyTorch hands an FX graph, is refused.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import threading

__all__ = ["compile", "disable", "is_compiling", "is_dynamo_compiling", "is_exporting", "list_backends",
           "reset", "allow_in_graph", "assume_constant_result", "set_stance", "substitute_in_graph",
           "nested_compile_region", "wrap_numpy", "set_default_backend", "get_default_backend",
           "cudagraph_mark_step_begin", "save_cache_artifacts", "load_cache_artifacts", "keep_portable_guards_unsafe",
           "skip_guard_on_inbuilt_nn_modules_unsafe", "skip_guard_on_all_nn_modules_unsafe",
           "keep_tensor_guards_unsafe", "skip_guard_on_globals_unsafe", "skip_all_guards_unsafe"]

_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
# PyTorch's registered backend names: a script may name any of them; Lucid runs each eagerly.
_BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")
_DEFAULT_BACKEND = ["inductor"]  # set_default_backend's choice


def _check(model, fullgraph, dynamic, backend, mode, options):
    if model is not None and not callable(model):
        raise TypeError(f"compile: expected a module or a function, got {type(model).__name__}")
    if mode is not None and options is not None:
        raise RuntimeError("compile: either mode or options can be given, not both")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"compile: unrecognized mode={mode!r}, should be one of: {', '.join(_MODES)}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"compile: options must be a dict, got {type(options).__name__}")
    backend = _DEFAULT_BACKEND[0] if backend is None else backend
    if callable(backend):
        raise NotImplementedError(
            "compile: a callable backend receives an FX graph in PyTorch; Lucid has no graph tracer "
            "(NOTE [No graph compiler]): use a backend name, or call the model directly")
    if backend not in _BACKENDS:
        raise ValueError(f"compile: invalid backend {backend!r}, see lucid.compiler.list_backends()")
    if dynamic not in (None, True, False):
        raise TypeError(f"compile: dynamic must be None, True or False, got {dynamic!r}")


def compile(model=None, *, fullgraph=False, dynamic=None, backend=None, mode=None, options=None, name=None,
            disable=False, recompile_limit=None, isolate_recompiles=False,
            shapes_spec=None):  # noqa: A001  (torch.compile's name)
    """Check ``torch.compile``'s arguments and return ``model`` unchanged (see NOTE [No graph compiler]).

    Lucid runs every op eagerly, so a "compiled" model computes exactly what the model does.
    Works as ``compile(model, ...)`` and as a decorator, with or without arguments.

    Parameters
    ----------
    model : Module or callable, optional
        What to compile; without it, a decorator is returned.
    fullgraph, dynamic, backend, mode, options, disable
        ``torch.compile``'s arguments, checked as it checks them (``backend`` a registered name;
        None: :func:`get_default_backend`).
    name, recompile_limit, isolate_recompiles, shapes_spec
        Accepted for PyTorch compatibility (nothing is compiled).

    Examples
    --------
    >>> import lucid
    >>> f = lucid.compile(lambda x: x * 2, mode="max-autotune")
    >>> f(lucid.tensor([1.0, 2.0]))
    tensor([2., 4.])
    >>> @lucid.compile(fullgraph=True)
    ... def g(x):
    ...     return x + 1
    >>> g(lucid.tensor(1.0))
    tensor(2.)
    """
    _check(model, fullgraph, dynamic, backend, mode, options)
    if model is None:
        def decorate(fn):
            return compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend, mode=mode,
                           options=options, disable=disable)

        return decorate
    return model


def disable(fn=None, recursive=True, *, reason=None):
    """Mark ``fn`` as never compiled: it already is not; returns ``fn`` (or a decorator)."""
    if fn is None:
        return lambda f: f
    return fn


def allow_in_graph(fn):
    """Returns ``fn``: there is no graph to allow it into."""
    return fn


def assume_constant_result(fn):
    """Returns ``fn``: there is no graph to fold its result into."""
    return fn


class _ExportState(threading.local):
    depth = 0


_EXPORT = _ExportState()


@contextlib.contextmanager
def _exporting():
    """Marks the body as ``lucid.export`` tracing a module (per thread; nests)."""
    _EXPORT.depth += 1
    try:
        yield
    finally:
        _EXPORT.depth -= 1


def is_compiling():
    """Whether the calling code is being traced by ``lucid.export``.

    As PyTorch, where ``torch.export`` traces through the compiler stack, it is True while
    ``lucid.export.export`` traces a module; ``lucid.compile`` runs eagerly (NOTE [No graph
    compiler]), so a compiled model sees False.

    Examples
    --------
    >>> import lucid
    >>> lucid.compiler.is_compiling()
    False
    """
    return _EXPORT.depth > 0


is_dynamo_compiling = is_compiling


def is_exporting():
    """Whether the calling code is being traced by ``lucid.export.export``.

    A module's ``forward`` may branch on it (PyTorch's idiom for export-only paths); the
    branch taken while tracing is the one the exported program keeps (export's own check of
    the program against the module runs the module with the flag set too).

    Examples
    --------
    >>> import lucid
    >>> class Scale(lucid.nn.Module):
    ...     def forward(self, x):
    ...         return x * (3 if lucid.compiler.is_exporting() else 2)
    >>> ep = lucid.export.export(Scale(), (lucid.ones(2),))
    >>> ep.module()(lucid.ones(2)), Scale()(lucid.ones(2))
    (tensor([3., 3.]), tensor([2., 2.]))
    >>> lucid.compiler.is_exporting()
    False
    """
    return _EXPORT.depth > 0


def list_backends(exclude_tags=("debug", "experimental")):
    """The backend names ``lucid.compile`` accepts (all run eagerly)."""
    return sorted(b for b in _BACKENDS if b in ("inductor", "cudagraphs") or not exclude_tags)


def reset():
    """Clear compilation caches: there are none."""


# ---------------------------------------------------------------------------- torch.compiler's settings
# NOTE [Compiler settings without a compiler]
# The knobs below change how PyTorch's compiler behaves; Lucid has none (NOTE [No graph
# compiler]), so each records what it is given (a later read sees it, as in PyTorch) and the
# code runs eagerly either way. ``wrap_numpy`` is the exception: it does real work, eager
# PyTorch's too (tensors in, NumPy arrays to the function, arrays back to tensors).
_STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile", "eager_then_compile",
            "aot_eager_then_compile")
_STANCE = ["default"]


class set_stance(contextlib.ContextDecorator):  # noqa: N801  (PyTorch's name)
    """Set the compiler's stance: as a call (stays set), a ``with`` block or a decorator
    (restored after). Recorded only: every call already runs eagerly.

    Examples
    --------
    >>> import lucid
    >>> with lucid.compiler.set_stance("force_eager"):
    ...     lucid.compiler._current_stance()
    'force_eager'
    >>> lucid.compiler._current_stance()
    'default'
    """

    def __init__(self, stance="default", *, skip_guard_eval_unsafe=False, force_backend=None):
        if stance not in _STANCES:
            raise ValueError(f"set_stance: unknown stance {stance!r}; expected one of {', '.join(_STANCES)}")
        if force_backend is not None and stance != "default":
            raise RuntimeError("set_stance: non-default stance cannot have force_backend set")
        self.stance, self.skip_guard_eval_unsafe, self.force_backend = stance, skip_guard_eval_unsafe, force_backend
        self.prev, _STANCE[0] = _STANCE[0], stance  # a plain call sets it at once, as PyTorch's

    def __call__(self, fn):
        _STANCE[0] = self.prev  # as a decorator it applies only while ``fn`` runs
        return super().__call__(fn)

    def __enter__(self):
        _STANCE[0] = self.stance
        return self

    def __exit__(self, *exc):
        _STANCE[0] = self.prev
        return False

    def _recreate_cm(self):  # each decorated call: a fresh one, whose ``prev`` is the stance at that call
        return set_stance(self.stance, skip_guard_eval_unsafe=self.skip_guard_eval_unsafe,
                          force_backend=self.force_backend)


def _current_stance():
    """The stance :func:`set_stance` last set (Lucid's reading of it; PyTorch keeps it private too)."""
    return _STANCE[0]


def set_default_backend(backend):
    """The backend ``lucid.compile`` uses when given none (None resets it to ``"inductor"``)."""
    if backend is None:
        backend = "inductor"
    if callable(backend):
        raise NotImplementedError("set_default_backend: a callable backend receives an FX graph in PyTorch; Lucid has "
                                  "no graph tracer (NOTE [No graph compiler]): use a backend name")
    if backend not in _BACKENDS:
        raise ValueError(f"set_default_backend: invalid backend {backend!r}, see lucid.compiler.list_backends()")
    _DEFAULT_BACKEND[0] = backend


def get_default_backend():
    """The backend ``lucid.compile`` uses when given none."""
    return _DEFAULT_BACKEND[0]


def _signature_shape(fn):
    """A signature without annotations, to compare two functions' parameters."""
    sig = inspect.signature(fn)
    return sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                       return_annotation=sig.empty)


def substitute_in_graph(original_fn, *, can_constant_fold_through=False, skip_signature_check=False):
    """Register a traceable stand-in for ``original_fn`` (a decorator). With no tracer, the
    stand-in is never used: the decorated name calls ``original_fn``, as PyTorch's does outside
    a compiled region; the signatures are checked as PyTorch checks them.

    Examples
    --------
    >>> import operator, lucid
    >>> @lucid.compiler.substitute_in_graph(operator.indexOf)
    ... def index_of(a, b, /):
    ...     return next(i for i, x in enumerate(a) if x == b)
    >>> index_of([4, 5, 6], 6)
    2
    """
    if not callable(original_fn):
        raise TypeError(f"substitute_in_graph expects a function but got {type(original_fn)!r}")

    def decorate(traceable_fn):
        if not skip_signature_check:
            try:
                want, got = _signature_shape(original_fn), _signature_shape(traceable_fn)
            except ValueError:
                want = got = None  # a builtin without a signature: nothing to compare
            if want != got:
                raise TypeError(f"Signature mismatch between {original_fn} and {traceable_fn}: {want} != {got}")

        @functools.wraps(traceable_fn)
        def wrapped(*args, **kwargs):
            return original_fn(*args, **kwargs)

        wrapped.__lucid_traceable__ = traceable_fn
        return wrapped

    return decorate


def nested_compile_region(fn=None, *, options=None, max_reuse_entries=8, reuse_hash_fn=None):
    """Mark ``fn`` as a region compiled once and reused; returns ``fn`` (or a decorator)."""
    if fn is None:
        return lambda f: f
    return fn


def wrap_numpy(fn):
    """Turn a function on NumPy arrays into one on tensors: tensor arguments (in lists, tuples,
    dicts) reach ``fn`` as arrays, and the arrays it returns come back as tensors, on the
    device of the first tensor argument. Not differentiable (NumPy records no graph).

    Examples
    --------
    >>> import lucid, numpy as np
    >>> hypot = lucid.compiler.wrap_numpy(lambda a, b: np.sqrt(a * a + b * b))
    >>> hypot(lucid.tensor([3.0]), lucid.tensor([4.0]))
    tensor([5.])
    """
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        import numpy as np

        from ._core.tensor import Tensor
        from .utils._pytree import tree_leaves, tree_map_only
        from . import as_tensor

        first = next((t for t in tree_leaves((args, kwargs)) if isinstance(t, Tensor)), None)
        to_array = lambda t: t.detach().cpu().numpy()  # noqa: E731  (a device tensor: a host copy)
        out = fn(*tree_map_only(Tensor, to_array, args), **tree_map_only(Tensor, to_array, kwargs))
        device = None if first is None else first.device
        return tree_map_only(np.ndarray, lambda a: as_tensor(a, device=device), out)

    return wrapped


def cudagraph_mark_step_begin():
    """Mark the start of a training step for CUDA graphs: Lucid records none; returns None."""


def save_cache_artifacts():
    """The compiler's cache artifacts: None, as PyTorch returns when nothing was compiled."""
    return None


def load_cache_artifacts(serialized_artifacts):
    """Load compiler cache artifacts: there is no cache to fill; returns None (PyTorch's answer
    for artifacts it cannot use)."""
    if not isinstance(serialized_artifacts, (bytes, bytearray, memoryview)):
        raise TypeError(f"load_cache_artifacts: expected bytes, got {type(serialized_artifacts).__name__}")
    return None


# Guard filters (``options={"guard_filter_fn": ...}``): one keep-flag per guard entry, as
# PyTorch's. Lucid makes no guards, so they only run on entries a caller builds.
def keep_portable_guards_unsafe(guard_entries):
    return [g.guard_type in ("GLOBAL_STATE", "SHAPE_ENV") or (g.guard_type == "TENSOR_MATCH" and not g.is_global)
            for g in guard_entries]


def skip_guard_on_inbuilt_nn_modules_unsafe(guard_entries):
    return [not g.orig_guard.source.is_unspecialized_builtin_nn_module() for g in guard_entries]


def skip_guard_on_all_nn_modules_unsafe(guard_entries):
    return [not g.orig_guard.source.is_unspecialized_nn_module() for g in guard_entries]


def keep_tensor_guards_unsafe(guard_entries, keep_parameters=False):
    from .nn import Parameter

    return [g.guard_type == "TENSOR_MATCH" and (keep_parameters or not isinstance(g.value, Parameter))
            for g in guard_entries]


def skip_guard_on_globals_unsafe(guard_entries):
    return [not g.is_global for g in guard_entries]


def skip_all_guards_unsafe(guard_entries):
    return [False for _ in guard_entries]
