"""The global module hooks (``nn.modules.module.register_module_*``), split from ``module.py``."""
from __future__ import annotations

from collections import OrderedDict


class _GlobalHooks:
    """Hooks for every Module call (``nn.modules.module.register_module_*_hook``); they run
    before each module's own hooks of the same kind."""

    def __init__(self):
        self.forward_pre, self.forward, self.backward, self.backward_pre = (OrderedDict() for _ in range(4))
        self.backward_non_full = OrderedDict()  # register_module_backward_hook: NOTE [Non-full backward hooks]
        self.forward_with_kwargs = set()
        self.forward_always_called = set()
        # register_module_{parameter,buffer,module}_registration_hook: hook(module, name, value)
        # runs as a value is registered; a non-None return replaces the value (PyTorch's order).
        self.parameter_registration, self.buffer_registration, self.module_registration = (
            OrderedDict() for _ in range(3))

    @property
    def any(self):
        return bool(self.forward_pre or self.forward or self.backward or self.backward_pre or self.backward_non_full)


_GLOBAL_HOOKS = _GlobalHooks()


def _registered(hooks, module, name, value):
    """``value`` after the global registration ``hooks`` (each may replace it)."""
    for hook in tuple(hooks.values()):
        out = hook(module, name, value)
        if out is not None:
            value = out
    return value
