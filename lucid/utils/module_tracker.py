"""``lucid.utils.module_tracker``: which modules are running, forward or backward (PyTorch's
``torch.utils.module_tracker``).

NOTE [Module tracker]
A module is entered when its forward starts (a global forward pre-hook) and left when it
returns (a global forward hook). Its backward is tracked with multi-grad hooks, as PyTorch
does: when the gradients of its outputs are ready its backward begins (entered again), and
when those of its inputs are ready it is done (left). After a backward the set is reset to
``{"Global"}`` (a queued engine callback). Names are fully qualified as in ``state_dict``,
rooted at the class name of the outermost module first seen (``Sequential.0.linear``).
"""
from __future__ import annotations

import weakref

__all__ = ["ModuleTracker"]


def _tensors_requiring_grad(value, out):
    from .._core.tensor import Tensor

    if isinstance(value, Tensor):
        if value.requires_grad:
            out.append(value)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _tensors_requiring_grad(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            _tensors_requiring_grad(v, out)
    return out


class ModuleTracker:
    """Track the module hierarchy while code runs, forward and backward (NOTE [Module tracker]).

    ``parents`` is the set of the fully qualified names of the modules running now; it always
    holds ``"Global"``. ``is_bw`` tells whether a backward is running.

    Examples
    --------
    >>> import lucid
    >>> from lucid.utils.module_tracker import ModuleTracker
    >>> seen = []
    >>> class Probe(lucid.nn.Module):
    ...     def forward(self, x):
    ...         seen.append(sorted(tracker.parents))
    ...         return x * 2
    >>> model = lucid.nn.Sequential(lucid.nn.Linear(2, 2), Probe())
    >>> with ModuleTracker() as tracker:
    ...     _ = model(lucid.ones(1, 2))
    >>> seen
    [['Global', 'Sequential', 'Sequential.1']]
    """

    def __init__(self) -> None:
        self.parents = {"Global"}
        self._known_modules = weakref.WeakKeyDictionary()
        self._seen_modules = weakref.WeakSet()
        self._has_callback = False
        self._hooks = []
        self._handles = ()

    @property
    def is_bw(self) -> bool:
        """Whether a backward pass is running now."""
        from ..autograd import engine

        return engine.current_callbacks() is not None

    def _maybe_set_engine_callback(self) -> None:
        if self._has_callback:
            return
        from ..autograd.engine import queue_callback

        def reset() -> None:
            self.parents = {"Global"}
            self._has_callback = False

        queue_callback(reset)
        self._has_callback = True

    def _get_mod_name(self, mod) -> str:
        if mod not in self._known_modules:
            self._known_modules[mod] = type(mod).__name__
        name = self._known_modules[mod]
        if mod not in self._seen_modules:
            for child_name, child in mod.named_children():
                self._known_modules[child] = f"{name}.{child_name}"
                self._get_mod_name(child)
            self._seen_modules.add(mod)
        return name

    def _enter(self, name, is_bw):
        def fn(*args) -> None:
            if is_bw:
                self._maybe_set_engine_callback()
            self.parents.add(name)

        return fn

    def _leave(self, name):
        def fn(*args) -> None:
            self.parents.discard(name)

        return fn

    def _fw_pre_hook(self, mod, args) -> None:
        from ..autograd.graph import register_multi_grad_hook

        name = self._get_mod_name(mod)
        self._enter(name, False)()
        tensors = _tensors_requiring_grad(args, [])
        if tensors:  # the gradients of its inputs ready: the module's backward is done
            self._hooks.append(register_multi_grad_hook(tensors, self._leave(name)))

    def _fw_post_hook(self, mod, args, output) -> None:
        from ..autograd.graph import register_multi_grad_hook

        name = self._get_mod_name(mod)
        self._leave(name)()
        tensors = _tensors_requiring_grad(output, [])
        if tensors:  # the gradients of its outputs ready: the module's backward begins
            self._hooks.append(register_multi_grad_hook(tensors, self._enter(name, True)))

    def __enter__(self):
        from ..nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles = (register_module_forward_pre_hook(self._fw_pre_hook),
                         register_module_forward_hook(self._fw_post_hook))
        return self

    def __exit__(self, *exc):
        for handle in self._handles:
            handle.remove()
        self._handles = ()
        for hook in self._hooks:
            hook.remove()
        self._hooks.clear()
