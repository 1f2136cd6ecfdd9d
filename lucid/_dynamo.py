"""``lucid._dynamo`` (``torch._dynamo``): the settings scripts touch, for a compiler Lucid lacks.

Lucid compiles nothing (NOTE [No graph compiler], ``lucid/compiler.py``), so Dynamo's knobs change
nothing here; they exist so PyTorch scripts that set them (``torch._dynamo.config.
capture_scalar_outputs = True``, ``torch._dynamo.reset()``) run unchanged. ``config`` keeps what is
set, refuses names it does not know with PyTorch's ``AttributeError``, and ``config.patch`` sets
values for a ``with`` block or a decorated function. ``cache_size_limit`` is the old name of
``recompile_limit`` (one setting, as in PyTorch).

Examples
--------
>>> import lucid
>>> lucid._dynamo.config.capture_scalar_outputs = True
>>> with lucid._dynamo.config.patch(recompile_limit=2):
...     lucid._dynamo.config.cache_size_limit
2
>>> lucid._dynamo.config.recompile_limit
8
"""
from __future__ import annotations

import contextlib

from .compiler import allow_in_graph, assume_constant_result, disable, is_compiling, list_backends, reset

__all__ = ["config", "reset", "disable", "allow_in_graph", "assume_constant_result", "is_compiling",
           "list_backends", "mark_dynamic", "maybe_mark_dynamic", "mark_static"]

# PyTorch's defaults for the settings scripts commonly set (torch 2.13).
_DEFAULTS = {
    "capture_scalar_outputs": False, "capture_dynamic_output_shape_ops": False, "recompile_limit": 8,
    "accumulated_recompile_limit": 256, "fail_on_recompile_limit_hit": False, "suppress_errors": False,
    "verbose": False, "optimize_ddp": True, "automatic_dynamic_shapes": True, "assume_static_by_default": True,
    "specialize_int": False, "specialize_float": False, "error_on_recompile": False,
    "force_parameter_static_shapes": True, "compiled_autograd": False, "skip_nnmodule_hook_guards": True,
    "guard_nn_modules": True, "dynamic_shapes": True, "capture_autograd_function": True, "trace_numpy": True,
    "allow_rnn": False, "use_graph_deduplication": False, "raise_on_ctx_manager_usage": True,
    "inline_inbuilt_nn_modules": True, "allow_unspec_int_on_nn_module": False, "replay_record_enabled": False,
    "prefer_deferred_runtime_asserts_over_guards": False, "enable_cpp_symbolic_shape_guards": False,
}
_ALIASES = {"cache_size_limit": "recompile_limit", "accumulated_cache_size_limit": "accumulated_recompile_limit"}


class _Config:
    """``torch._dynamo.config``: known settings only, kept but unused (see the module docstring)."""

    def __init__(self):
        object.__setattr__(self, "_values", dict(_DEFAULTS))

    def _key(self, name):
        key = _ALIASES.get(name, name)
        if key not in self._values:
            raise AttributeError(f"torch._dynamo.config.{name} does not exist")
        return key

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._values[self._key(name)]

    def __setattr__(self, name, value):
        self._values[self._key(name)] = value

    def __dir__(self):
        return sorted(set(self._values) | set(_ALIASES) | {"patch"})

    def patch(self, arg=None, value=None, **changes):
        """Set settings for a ``with`` block or a decorated function, then restore them."""
        if isinstance(arg, dict):
            changes.update(arg)
        elif arg is not None:
            changes[arg] = value
        keys = {self._key(name): v for name, v in changes.items()}
        return _Patch(self, keys)


class _Patch(contextlib.ContextDecorator):
    def __init__(self, config, changes):
        self._config, self._changes, self._saved = config, changes, []

    def __enter__(self):
        values = self._config._values
        self._saved.append({k: values[k] for k in self._changes})
        values.update(self._changes)

    def __exit__(self, *exc):
        self._config._values.update(self._saved.pop())
        return False


config = _Config()


def mark_dynamic(t, index, *, min=None, max=None, specialize_on=None):  # noqa: A002  (PyTorch's names)
    """``torch._dynamo.mark_dynamic``: a hint for the compiler; nothing to do in Lucid."""


def maybe_mark_dynamic(t, index):
    """``torch._dynamo.maybe_mark_dynamic``: a hint for the compiler; nothing to do in Lucid."""


def mark_static(t, index=None):
    """``torch._dynamo.mark_static``: a hint for the compiler; nothing to do in Lucid."""

