"""``lucid.utils.backcompat`` (``torch.utils.backcompat``): the two old-behaviour warning switches,
``broadcast_warning`` and ``keepdim_warning`` (each with a settable ``enabled``, default False).

They told PyTorch 0.x users where broadcasting and ``keepdim`` had changed; nothing in Lucid
(nor in PyTorch 2) emits those warnings, so the switches are kept for code that sets them.

Examples
--------
>>> from lucid.utils.backcompat import broadcast_warning
>>> broadcast_warning.enabled
False
>>> broadcast_warning.enabled = True; broadcast_warning.enabled
True
>>> broadcast_warning.enabled = False
"""
from __future__ import annotations

__all__ = []


class Warning:  # noqa: A001 - PyTorch's class name
    """A switch with an ``enabled`` property (a bool)."""

    def __init__(self, name, enabled=False):
        self.name = name
        self._enabled = enabled

    @property
    def enabled(self):
        return self._enabled

    @enabled.setter
    def enabled(self, value):
        if not isinstance(value, bool):
            raise TypeError(f"{self.name}.enabled: expected a bool, got {type(value).__name__}")
        self._enabled = value

    def __repr__(self):
        return f"<{self.name} enabled={self._enabled}>"


broadcast_warning = Warning("broadcast_warning")
keepdim_warning = Warning("keepdim_warning")
