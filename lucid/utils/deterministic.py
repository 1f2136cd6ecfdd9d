"""``lucid.utils.deterministic`` (``torch.utils.deterministic``): the
``fill_uninitialized_memory`` switch of the deterministic mode.

In PyTorch, with ``use_deterministic_algorithms(True)`` and this switch on (the default),
``empty()`` and friends fill their memory (NaN for floats) so results never depend on stale
memory. Lucid never hands out uninitialised memory (``lucid.empty`` is zeros), so every read is
already deterministic; the switch is kept, validated and read back as PyTorch's.

Examples
--------
>>> import lucid.utils.deterministic as det
>>> det.fill_uninitialized_memory
True
>>> det.fill_uninitialized_memory = False; det.fill_uninitialized_memory
False
>>> det.fill_uninitialized_memory = True
"""
from __future__ import annotations

import sys
import types

__all__ = []

_FILL = [True]


class _DeterministicModule(types.ModuleType):
    @property
    def fill_uninitialized_memory(self):
        """Whether uninitialised memory is filled in the deterministic mode (default True)."""
        return _FILL[0]

    @fill_uninitialized_memory.setter
    def fill_uninitialized_memory(self, mode):
        if not isinstance(mode, bool):
            raise TypeError(f"fill_uninitialized_memory: expected a bool, got {type(mode).__name__}")
        _FILL[0] = mode


sys.modules[__name__].__class__ = _DeterministicModule
