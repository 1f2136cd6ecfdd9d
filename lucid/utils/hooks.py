"""``lucid.utils.hooks`` (``torch.utils.hooks``): the handle every hook registration returns, the
``BackwardHook`` that wires a module call to its full backward hooks (NOTE [Full backward
hooks]), and the serialization helpers ``unserializable_hook`` and ``warn_if_has_hooks``."""
import warnings

from .._core.hooks import RemovableHandle  # noqa: F401
from ..nn._hooks import BackwardHook  # noqa: F401

__all__ = ["RemovableHandle", "unserializable_hook", "warn_if_has_hooks", "BackwardHook"]


def unserializable_hook(f):
    """Mark ``f`` as a hook that is not saved with its tensor, silencing :func:`warn_if_has_hooks`.

    Examples
    --------
    >>> from lucid.utils.hooks import unserializable_hook
    >>> @unserializable_hook
    ... def hook(grad):
    ...     return grad
    >>> hook.__torch_unserializable__
    True
    """
    f.__torch_unserializable__ = True
    return f


def warn_if_has_hooks(tensor):
    """Warn (``UserWarning``) for each backward hook of ``tensor`` not marked with
    :func:`unserializable_hook`: saving a tensor does not save its hooks.

    Examples
    --------
    >>> import warnings, lucid
    >>> from lucid.utils.hooks import warn_if_has_hooks
    >>> x = lucid.ones(2, requires_grad=True)
    >>> _ = x.register_hook(lambda g: g)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_if_has_hooks(x)
    >>> len(caught)
    1
    """
    for hook in getattr(tensor, "_hooks", None) or ():
        if not hasattr(hook, "__torch_unserializable__"):
            warnings.warn(f"backward hook {hook!r} on tensor will not be serialized.  If this is expected, you can "
                          "decorate the function with @lucid.utils.hooks.unserializable_hook to suppress this "
                          "warning", stacklevel=2)
