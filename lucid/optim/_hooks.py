"""Optimizer hooks: PyTorch's ``Optimizer.register_{step,state_dict,load_state_dict}_{pre,post}_hook``
and the global ``torch.optim.optimizer.register_optimizer_step_{pre,post}_hook``.

NOTE [Optimizer hooks]
Every ``step`` an optimizer class defines is wrapped once, when the class is made
(``__init_subclass__``), so user optimizers get hooks too. A call runs the global step pre-hooks,
then the optimizer's own, each as ``hook(optimizer, args, kwargs)`` with ``args`` starting with the
optimizer; a pre-hook may return ``(new_args, new_kwargs)`` for the step. After the step come the
optimizer's post-hooks, then the global ones. Hooks run once per outer call: a ``step`` that calls
its parent's ``step`` does not run them again (PyTorch's patching of the instance's class can run
them twice there). ``state_dict`` runs ``hook(optimizer)`` before and ``hook(optimizer,
state_dict)`` after building the dict (a post-hook may return a new dict); ``load_state_dict``
hands a shallow copy of the dict to ``hook(optimizer, state_dict)`` (which may return a new one)
before loading and runs ``hook(optimizer)`` after. As in PyTorch, copies and pickles of an
optimizer leave its hooks behind.
"""
from __future__ import annotations

import collections
import functools
import itertools
import types

from .._core.hooks import RemovableHandle

__all__ = ["register_optimizer_step_pre_hook", "register_optimizer_step_post_hook"]

_GLOBAL_STEP_PRE_HOOKS = collections.OrderedDict()
_GLOBAL_STEP_POST_HOOKS = collections.OrderedDict()

# PyTorch's attribute names (libraries read them)
HOOK_DICTS = ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks", "_optimizer_state_dict_pre_hooks",
              "_optimizer_state_dict_post_hooks", "_optimizer_load_state_dict_pre_hooks",
              "_optimizer_load_state_dict_post_hooks")
_IN_STEP = "_optimizer_in_hooked_step"


def _register(where, hook, api, prepend=False):
    if not callable(hook):
        raise TypeError(f"{api}: hook must be callable, got {type(hook).__name__}")
    handle = RemovableHandle(where)
    where[handle.id] = hook
    if prepend:
        where.move_to_end(handle.id, last=False)
    return handle


def register_optimizer_step_pre_hook(hook):
    """Register ``hook(optimizer, args, kwargs)`` to run before every optimizer's ``step``.

    It may return ``None`` or ``(new_args, new_kwargs)`` for the step. Returns a handle whose
    ``remove()`` unregisters it. See NOTE [Optimizer hooks].

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.optimizer import register_optimizer_step_pre_hook
    >>> w = lucid.zeros(2, requires_grad=True)
    >>> opt = lucid.optim.SGD([w], lr=0.1)
    >>> seen = []
    >>> with register_optimizer_step_pre_hook(lambda o, args, kwargs: seen.append(type(o).__name__)):
    ...     w.grad = lucid.ones(2)
    ...     opt.step()
    >>> seen
    ['SGD']
    """
    return _register(_GLOBAL_STEP_PRE_HOOKS, hook, "register_optimizer_step_pre_hook")


def register_optimizer_step_post_hook(hook):
    """Register ``hook(optimizer, args, kwargs)`` to run after every optimizer's ``step``.

    Returns a handle whose ``remove()`` unregisters it. See NOTE [Optimizer hooks].

    Examples
    --------
    >>> import lucid
    >>> from lucid.optim.optimizer import register_optimizer_step_post_hook
    >>> w = lucid.zeros(2, requires_grad=True)
    >>> opt = lucid.optim.SGD([w], lr=0.1)
    >>> with register_optimizer_step_post_hook(lambda o, args, kwargs: print(w.tolist())):
    ...     w.grad = lucid.ones(2)
    ...     opt.step()
    [-0.10000000149011612, -0.10000000149011612]
    """
    return _register(_GLOBAL_STEP_POST_HOOKS, hook, "register_optimizer_step_post_hook")


def _run_pre_hooks(func, optimizer, hooks, args, kwargs):
    for hook in hooks:
        result = hook(optimizer, args, kwargs)
        if result is not None:
            if not (isinstance(result, tuple) and len(result) == 2):
                raise RuntimeError(f"{func.__qualname__}: a step pre-hook must return None or a tuple of "
                                   f"(new_args, new_kwargs), but got {result!r}")
            args, kwargs = result
    return args, kwargs


def hooked_step(func):
    """``func`` (an optimizer's ``step``) running the step hooks around it. See NOTE [Optimizer hooks]."""
    if getattr(func, "hooked", False):
        return func

    @functools.wraps(func)
    def step(self, *args, **kwargs):
        own = self.__dict__
        pre, post = own.get("_optimizer_step_pre_hooks") or {}, own.get("_optimizer_step_post_hooks") or {}
        if own.get(_IN_STEP) or not (pre or post or _GLOBAL_STEP_PRE_HOOKS or _GLOBAL_STEP_POST_HOOKS):
            return func(self, *args, **kwargs)  # the hot path: no hooks
        own[_IN_STEP] = True
        try:
            hooks = itertools.chain(tuple(_GLOBAL_STEP_PRE_HOOKS.values()), tuple(pre.values()))
            args, kwargs = _run_pre_hooks(func, self, hooks, (self,) + args, kwargs)
            out = func(*args, **kwargs)
            for hook in itertools.chain(tuple(post.values()), tuple(_GLOBAL_STEP_POST_HOOKS.values())):
                hook(self, args, kwargs)
            return out
        finally:
            own.pop(_IN_STEP, None)

    step.hooked = True
    return step


class OptimizerHooks:
    """The hook registrations of :class:`lucid.optim.Optimizer` (NOTE [Optimizer hooks])."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if isinstance(cls.__dict__.get("step"), types.FunctionType):
            cls.step = hooked_step(cls.__dict__["step"])

    def _init_hooks(self):
        for name in HOOK_DICTS:
            if name not in self.__dict__:
                setattr(self, name, collections.OrderedDict())

    def _hook_dict(self, name):
        hooks = self.__dict__.get(name)
        if hooks is None:  # a subclass that skipped Optimizer.__init__
            hooks = self.__dict__[name] = collections.OrderedDict()
        return hooks

    def _register_hook(self, name, hook, api, prepend=False):
        return _register(self._hook_dict(name), hook, f"{type(self).__name__}.{api}", prepend)

    def register_step_pre_hook(self, hook):
        """Run ``hook(optimizer, args, kwargs)`` before each ``step``; it may return
        ``(new_args, new_kwargs)``. Returns a removable handle. See NOTE [Optimizer hooks].

        Examples
        --------
        >>> import lucid
        >>> w = lucid.zeros(2, requires_grad=True)
        >>> opt = lucid.optim.SGD([w], lr=0.1)
        >>> def scale_grads(optimizer, args, kwargs):
        ...     w.grad.mul_(10)
        >>> h = opt.register_step_pre_hook(scale_grads)
        >>> w.grad = lucid.ones(2)
        >>> opt.step()
        >>> w.tolist()
        [-1.0, -1.0]
        >>> h.remove()
        """
        return self._register_hook("_optimizer_step_pre_hooks", hook, "register_step_pre_hook")

    def register_step_post_hook(self, hook):
        """Run ``hook(optimizer, args, kwargs)`` after each ``step``. Returns a removable handle."""
        return self._register_hook("_optimizer_step_post_hooks", hook, "register_step_post_hook")

    def register_state_dict_pre_hook(self, hook, prepend=False):
        """Run ``hook(optimizer)`` before ``state_dict`` builds its dict (first if ``prepend``)."""
        return self._register_hook("_optimizer_state_dict_pre_hooks", hook, "register_state_dict_pre_hook", prepend)

    def register_state_dict_post_hook(self, hook, prepend=False):
        """Run ``hook(optimizer, state_dict)`` on the dict ``state_dict`` built; a hook that returns a
        dict replaces it (first if ``prepend``)."""
        return self._register_hook("_optimizer_state_dict_post_hooks", hook, "register_state_dict_post_hook",
                                   prepend)

    def register_load_state_dict_pre_hook(self, hook, prepend=False):
        """Run ``hook(optimizer, state_dict)`` on a shallow copy of the dict ``load_state_dict`` is
        given, before loading; a hook that returns a dict has that one loaded instead.

        Examples
        --------
        >>> import lucid
        >>> w = lucid.zeros(2, requires_grad=True)
        >>> opt = lucid.optim.SGD([w], lr=0.1)
        >>> saved = opt.state_dict()
        >>> def halve_lr(optimizer, state_dict):
        ...     state_dict["param_groups"] = [dict(g, lr=g["lr"] / 2) for g in state_dict["param_groups"]]
        >>> _ = opt.register_load_state_dict_pre_hook(halve_lr)
        >>> opt.load_state_dict(saved)
        >>> opt.param_groups[0]["lr"], saved["param_groups"][0]["lr"]
        (0.05, 0.1)
        """
        return self._register_hook("_optimizer_load_state_dict_pre_hooks", hook,
                                   "register_load_state_dict_pre_hook", prepend)

    def register_load_state_dict_post_hook(self, hook, prepend=False):
        """Run ``hook(optimizer)`` after ``load_state_dict`` has loaded (first if ``prepend``)."""
        return self._register_hook("_optimizer_load_state_dict_post_hooks", hook,
                                   "register_load_state_dict_post_hook", prepend)

    def _hooks_of(self, name):
        return tuple((self.__dict__.get(name) or {}).values())

    def _state_dict_with_hooks(self, build):
        for hook in self._hooks_of("_optimizer_state_dict_pre_hooks"):
            hook(self)
        state_dict = build()
        for hook in self._hooks_of("_optimizer_state_dict_post_hooks"):
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def _load_state_dict_pre(self, state_dict):
        hooks = self._hooks_of("_optimizer_load_state_dict_pre_hooks")
        if hooks and isinstance(state_dict, dict):
            state_dict = state_dict.copy()  # shallow, as PyTorch's (and the modules')
        for hook in hooks:
            result = hook(self, state_dict)
            if result is not None:
                state_dict = result
        return state_dict

    def _load_state_dict_post(self):
        for hook in self._hooks_of("_optimizer_load_state_dict_post_hooks"):
            hook(self)
