"""``RemovableHandle``: what every ``register_*hook`` returns (tensor, node, module, global)."""
from __future__ import annotations

import itertools

_IDS = itertools.count()


class RemovableHandle:
    """A registered hook: ``remove()`` unregisters it; also a context manager that removes it on exit.

    ``hooks`` is where the hook lives: a dict keyed by ``handle.id`` (module hooks) or a
    list holding ``hook`` (tensor and node hooks). Several handles may be combined with
    ``RemovableHandle.group(handles)``.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1.0], requires_grad=True)
    >>> with x.register_hook(lambda g: g * 10):
    ...     (x * 2).sum().backward()
    >>> x.grad
    tensor([20.])
    >>> x.grad = None
    >>> (x * 2).sum().backward()
    >>> x.grad
    tensor([2.])
    """

    def __init__(self, hooks, hook=None):
        self._hooks, self._hook = hooks, hook
        self.id = next(_IDS)

    def remove(self):
        hooks = self._hooks
        if hooks is None:
            return
        if isinstance(hooks, dict):
            hooks.pop(self.id, None)
        elif isinstance(hooks, list):
            for i, h in enumerate(hooks):
                if h is self._hook:
                    del hooks[i]
                    break
        else:  # a group: remove every member
            for h in hooks:
                h.remove()
        self._hooks = None

    @classmethod
    def group(cls, handles):
        """One handle that removes all of ``handles``."""
        return cls(tuple(handles))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()
        return False
