"""``lucid.autograd.grad_mode`` (``torch.autograd.grad_mode``): the grad-mode context managers.

``no_grad``, ``enable_grad``, ``set_grad_enabled`` and ``inference_mode`` are Lucid's own
(``lucid/_core/grad_mode.py``); :class:`enforce_grad_layout_policy` is the one name Lucid had not.

Examples
--------
>>> import lucid
>>> from lucid.autograd.grad_mode import no_grad
>>> no_grad is lucid.no_grad
True
"""
from __future__ import annotations

import threading

from .._core.grad_mode import _GradModeContext, enable_grad, inference_mode, no_grad, set_grad_enabled
from ._flags import set_multithreading_enabled

__all__ = ["enable_grad", "enforce_grad_layout_policy", "inference_mode", "no_grad", "set_grad_enabled",
           "set_multithreading_enabled"]


class _LayoutPolicy(threading.local):
    enforced = True


_LAYOUT_POLICY = _LayoutPolicy()


def is_grad_layout_policy_enforced():
    """Whether the current thread is inside ``enforce_grad_layout_policy(False)`` (False) or not (True)."""
    return _LAYOUT_POLICY.enforced


class enforce_grad_layout_policy(_GradModeContext):
    """Enforce (``True``, the default) or relax the gradient layout contract, thread-locally.

    PyTorch's contract: an accumulated ``.grad`` takes its leaf's strides (or is contiguous).
    Relaxing it lets PyTorch's engine *reuse* an incoming gradient of another layout instead of
    copying it. Lucid's engine always gives a leaf's first ``.grad`` the leaf's strides (NOTE
    in ARCHITECTURE "Engine"), which is what the relaxed policy also allows, so here the flag
    is kept (:func:`is_grad_layout_policy_enforced`) and gradients are the same either way.
    Usable as a context manager or a decorator, as ``no_grad``.

    Parameters
    ----------
    enable : bool
        Enforce the contract (``True``) or relax it (``False``).

    Examples
    --------
    >>> import lucid
    >>> from lucid.autograd.grad_mode import enforce_grad_layout_policy, is_grad_layout_policy_enforced
    >>> with enforce_grad_layout_policy(False):
    ...     is_grad_layout_policy_enforced()
    False
    >>> is_grad_layout_policy_enforced()
    True
    """

    def __init__(self, enable=True):
        if not isinstance(enable, bool):
            raise TypeError(f"enforce_grad_layout_policy: enable must be a bool, got {type(enable).__name__}")
        self._args = (enable,)
        self._prev = None

    def __enter__(self):
        self._prev = _LAYOUT_POLICY.enforced
        _LAYOUT_POLICY.enforced = self._args[0]
        return self

    def __exit__(self, *exc):
        _LAYOUT_POLICY.enforced = self._prev
        return False

    def clone(self):
        return self.__class__(*self._args)
