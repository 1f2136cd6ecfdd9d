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
import threading

__all__ = ["compile", "disable", "is_compiling", "is_dynamo_compiling", "is_exporting", "list_backends",
           "reset", "allow_in_graph", "assume_constant_result"]

_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
# PyTorch's registered backend names: a script may name any of them; Lucid runs each eagerly.
_BACKENDS = ("inductor", "eager", "aot_eager", "cudagraphs")


def _check(model, fullgraph, dynamic, backend, mode, options):
    if model is not None and not callable(model):
        raise TypeError(f"compile: expected a module or a function, got {type(model).__name__}")
    if mode is not None and options is not None:
        raise RuntimeError("compile: either mode or options can be given, not both")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"compile: unrecognized mode={mode!r}, should be one of: {', '.join(_MODES)}")
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"compile: options must be a dict, got {type(options).__name__}")
    if callable(backend):
        raise NotImplementedError(
            "compile: a callable backend receives an FX graph in PyTorch; Lucid has no graph tracer "
            "(NOTE [No graph compiler]): use a backend name, or call the model directly")
    if backend not in _BACKENDS:
        raise ValueError(f"compile: invalid backend {backend!r}, see lucid.compiler.list_backends()")
    if dynamic not in (None, True, False):
        raise TypeError(f"compile: dynamic must be None, True or False, got {dynamic!r}")


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
            disable=False):  # noqa: A001  (torch.compile's name)
    """Check ``torch.compile``'s arguments and return ``model`` unchanged (see NOTE [No graph compiler]).

    Lucid runs every op eagerly, so a "compiled" model computes exactly what the model does.
    Works as ``compile(model, ...)`` and as a decorator, with or without arguments.

    Parameters
    ----------
    model : Module or callable, optional
        What to compile; without it, a decorator is returned.
    fullgraph, dynamic, backend, mode, options, disable
        ``torch.compile``'s arguments, checked as it checks them (``backend`` a registered name).

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
