"""Pruning (``torch.nn.utils.prune``): ``identity``, ``random_unstructured``,
``l1_unstructured``, ``random_structured``, ``ln_structured``, ``global_unstructured``,
``custom_from_mask``, ``remove``, ``is_pruned``.

NOTE [Pruning by mask]
Pruning ``module.weight`` moves the parameter to ``weight_orig``, adds a buffer
``weight_mask`` and a forward pre-hook that sets ``module.weight = weight_orig * weight_mask``
before each call (so gradients reach ``weight_orig`` where the mask is 1). Pruning the same
tensor again prunes among the entries still unpruned (unstructured) and multiplies the masks.
``remove`` makes the pruned value a plain parameter again. State-dict keys are PyTorch's.
The masks are computed where the parameter lives (its array's namespace; random draws on its
device, as PyTorch's ``rand_like``).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..._core import backend
from ..._core.backend import namespace_of, xp
from ..._core.grad_mode import no_grad
from ..._core.tensor import Tensor, _wrap
from ..parameter import Parameter

__all__ = ["BasePruningMethod", "Identity", "RandomUnstructured", "L1Unstructured", "RandomStructured",
           "LnStructured", "CustomFromMask", "identity", "random_unstructured", "l1_unstructured",
           "random_structured", "ln_structured", "global_unstructured", "custom_from_mask", "remove", "is_pruned"]


def _count(amount, n, op):
    """Number of entries to prune: ``round(amount * n)`` for a float, ``amount`` for an int."""
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real) or amount < 0:
        raise ValueError(f"{op}: amount={amount} should either be a float in the range [0, 1] or a "
                         "non-negative integer")
    if isinstance(amount, numbers.Integral):
        if amount > n:
            raise ValueError(f"{op}: amount={amount} should be smaller than the number of parameters to prune={n}")
        return int(amount)
    if amount > 1:
        raise ValueError(f"{op}: amount={amount} should either be a float in the range [0, 1] or a "
                         "non-negative integer")
    return int(round(amount * n))


def _random(shape, like):
    """Uniform samples of ``shape`` on the device of the array ``like``."""
    import lucid

    return lucid.rand(*shape, device=backend.device_of_array(like))._data


class BasePruningMethod:
    """A pruning method: ``compute_mask(t, default_mask)`` returns the new mask (See NOTE
    [Pruning by mask]). ``PRUNING_TYPE`` is 'unstructured', 'structured' or 'global'."""

    PRUNING_TYPE = "unstructured"

    def __init__(self):
        self._tensor_name = None

    def compute_mask(self, t, default_mask):
        raise NotImplementedError

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    def apply_mask(self, module):
        orig = getattr(module, self._tensor_name + "_orig")
        mask = getattr(module, self._tensor_name + "_mask")
        return orig * mask.to(orig.dtype)

    def _combined(self, t, old):
        """The new mask as an array: among the still-unpruned entries for unstructured methods."""
        with backend.on_device(t):  # NOTE [Several devices]
            return self._combined_here(t, old)

    def _combined_here(self, t, old):
        if self.PRUNING_TYPE == "unstructured":
            keep = old != 0
            new = old.copy()
            new[keep] = self.compute_mask(t[keep], namespace_of(t).ones(int(keep.sum()), t.dtype))
            return new
        return old * self.compute_mask(t, np.ones_like(t))

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        method = cls(*args, **kwargs)
        method._tensor_name = name
        for k, hook in list(module._forward_pre_hooks.items()):
            if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
                del module._forward_pre_hooks[k]  # pruned before: combine with the old mask
                orig = getattr(module, name + "_orig")
                old = getattr(module, name + "_mask")._data
                break
        else:
            orig = getattr(module, name)
            if not isinstance(orig, Tensor):
                raise ValueError(f"prune: module {type(module).__name__} has no tensor named '{name}'")
            old = None
        scores = importance_scores if importance_scores is not None else orig
        if tuple(scores.shape) != tuple(orig.shape):
            raise ValueError(f"prune: importance_scores should have the shape of parameter {name} "
                             f"{tuple(orig.shape)}, got {tuple(scores.shape)}")
        t = xp.asarray(scores.detach()._data, dtype=np.float64)
        mask = method._combined(t, old if old is not None else namespace_of(t).ones(t.shape, orig._data.dtype))
        if old is None:
            del module._parameters[name]
            module.register_parameter(name + "_orig", orig)
            with backend.on_device(mask):
                module.register_buffer(name + "_mask", _wrap(mask.astype(orig._data.dtype)))
        else:
            buf = getattr(module, name + "_mask")
            with backend.on_device(buf):
                buf._data[...] = mask
            buf._version[0] += 1
        setattr(module, name, method.apply_mask(module))
        module.register_forward_pre_hook(method)
        return method

    def remove(self, module):
        """Make the pruned value a plain parameter and drop ``_orig``, ``_mask`` and the hook."""
        name = self._tensor_name
        with no_grad():
            weight = self.apply_mask(module)
        module.__dict__.pop(name, None)
        orig = module._parameters.pop(name + "_orig")
        del module._buffers[name + "_mask"]
        orig._data = weight.detach().clone()._data
        orig._version[0] += 1
        module.register_parameter(name, orig)


class Identity(BasePruningMethod):
    """Prune nothing (a mask of ones)."""

    def compute_mask(self, t, default_mask):
        return default_mask


class RandomUnstructured(BasePruningMethod):
    """Prune ``amount`` entries chosen at random."""

    def __init__(self, amount):
        super().__init__()
        self.amount = amount

    def compute_mask(self, t, default_mask):
        k = _count(self.amount, t.size, "random_unstructured")
        mask = default_mask.copy().reshape(-1)
        if k:
            mask[np.argsort(-_random((t.size,), t).reshape(-1), kind="stable")[:k]] = 0
        return mask.reshape(t.shape)


class L1Unstructured(BasePruningMethod):
    """Prune the ``amount`` entries of smallest absolute value."""

    def __init__(self, amount):
        super().__init__()
        self.amount = amount

    def compute_mask(self, t, default_mask):
        k = _count(self.amount, t.size, "l1_unstructured")
        mask = default_mask.copy().reshape(-1)
        if k:
            mask[np.argsort(np.abs(t).reshape(-1), kind="stable")[:k]] = 0
        return mask.reshape(t.shape)


def _channels(t, dim, n):
    axes = tuple(d for d in range(t.ndim) if d != dim % t.ndim)
    if n == np.inf or n == "inf":
        return np.abs(t).max(axis=axes)
    if n == "fro":
        n = 2
    return (np.abs(t) ** n).sum(axis=axes) ** (1.0 / n) if n else (t != 0).sum(axis=axes)


def _structured_mask(t, dim, drop):
    mask = namespace_of(t).ones(t.shape, t.dtype)
    idx = [slice(None)] * t.ndim
    idx[dim % t.ndim] = drop
    mask[tuple(idx)] = 0
    return mask


class RandomStructured(BasePruningMethod):
    """Prune ``amount`` whole channels along ``dim``, chosen at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        super().__init__()
        self.amount, self.dim = amount, dim

    def compute_mask(self, t, default_mask):
        n = t.shape[self.dim]
        k = _count(self.amount, n, "random_structured")
        drop = np.argsort(-_random((n,), t).reshape(-1), kind="stable")[:k]
        return _structured_mask(t, self.dim, drop) * default_mask


class LnStructured(BasePruningMethod):
    """Prune the ``amount`` channels along ``dim`` of smallest L``n`` norm."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        super().__init__()
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t, default_mask):
        k = _count(self.amount, t.shape[self.dim], "ln_structured")
        drop = np.argsort(_channels(t, self.dim, self.n), kind="stable")[:k]
        return _structured_mask(t, self.dim, drop) * default_mask


class CustomFromMask(BasePruningMethod):
    """Prune where a given ``mask`` is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask):
        super().__init__()
        # A Tensor's array stays on its device (another device than the parameter's fails, as in
        # PyTorch); a host array or list, which has none, is a constant copied to the parameter's.
        self.mask = mask._data if isinstance(mask, Tensor) else xp.asarray(mask)

    def compute_mask(self, t, default_mask):
        if self.mask.shape != default_mask.shape:
            raise ValueError(f"custom_from_mask: mask of shape {self.mask.shape} for a tensor of shape "
                             f"{default_mask.shape}")
        return default_mask * backend.on_device_of(self.mask, default_mask).astype(default_mask.dtype)


def identity(module, name):
    """Prune nothing, but install the ``<name>_orig``/``<name>_mask`` machinery.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> sorted(prune.identity(nn.Linear(2, 2), "weight").state_dict())
    ['bias', 'weight_mask', 'weight_orig']
    """
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    """Prune ``amount`` (a fraction or a count) random entries of ``module.<name>``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> m = prune.random_unstructured(nn.Linear(4, 5), "weight", amount=0.5)
    >>> int((m.weight_mask == 0).sum().item())
    10
    """
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    """Prune the ``amount`` entries of ``module.<name>`` with the smallest ``|importance|``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> m = nn.Linear(2, 1)
    >>> with lucid.no_grad():
    ...     _ = m.weight.copy_(lucid.tensor([[0.1, -3.0]]))
    >>> prune.l1_unstructured(m, "weight", amount=1).weight.tolist()
    [[0.0, -3.0]]
    """
    L1Unstructured.apply(module, name, amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    """Prune ``amount`` random channels of ``module.<name>`` along ``dim``.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> m = prune.random_structured(nn.Linear(3, 4), "weight", amount=2, dim=0)
    >>> int((m.weight_mask.sum(1) == 0).sum().item())
    2
    """
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    """Prune the ``amount`` channels along ``dim`` with the smallest L``n`` norm.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> m = nn.Linear(2, 2)
    >>> with lucid.no_grad():
    ...     _ = m.weight.copy_(lucid.tensor([[1.0, 1.0], [0.1, 0.1]]))
    >>> prune.ln_structured(m, "weight", amount=1, n=2, dim=0).weight.tolist()
    [[1.0, 1.0], [0.0, 0.0]]
    """
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name, mask):
    """Prune ``module.<name>`` where ``mask`` is 0.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> m = prune.custom_from_mask(nn.Linear(2, 1), "bias", lucid.tensor([0.0]))
    >>> bool((m.bias == 0).all())
    True
    """
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune across several tensors at once: ``parameters`` is an iterable of
    ``(module, name)``; ``pruning_method`` (e.g. ``L1Unstructured``) ranks all their entries
    together (``amount`` counts over the total).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> a, b = nn.Linear(2, 2), nn.Linear(2, 2)
    >>> prune.global_unstructured([(a, "weight"), (b, "weight")], prune.L1Unstructured, amount=3)
    >>> int((a.weight_mask == 0).sum().item() + (b.weight_mask == 0).sum().item())
    3
    """
    params = list(parameters)
    if not params:
        raise ValueError("global_unstructured: parameters must be a non-empty iterable of (module, name)")
    importance_scores = importance_scores or {}
    scores, masks = [], []
    for module, name in params:
        t = importance_scores.get((module, name), getattr(module, name))
        scores.append(xp.asarray(t.detach()._data, np.float64).reshape(-1))
        m = getattr(module, name + "_mask", None)
        masks.append(namespace_of(scores[-1]).ones(scores[-1].shape) if m is None
                     else xp.asarray(m._data, np.float64).reshape(-1))
    method = pruning_method(**kwargs)
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f"global_unstructured: only 'unstructured' pruning methods are supported, got "
                        f"{method.PRUNING_TYPE!r}")
    with backend.on_device(scores[0]):
        full = method._combined(np.concatenate(scores), np.concatenate(masks))
    start = 0
    for (module, name), s in zip(params, scores):
        piece = full[start:start + s.size].reshape(tuple(getattr(module, name).shape))
        start += s.size
        custom_from_mask(module, name, piece)


def remove(module, name):
    """Make the pruning of ``module.<name>`` permanent (a plain parameter holding the pruned
    values); the ``_orig``/``_mask`` entries and the hook go away.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> m = prune.remove(prune.l1_unstructured(nn.Linear(2, 2), "weight", 1), "weight")
    >>> sorted(m.state_dict())
    ['bias', 'weight']
    """
    for k, hook in list(module._forward_pre_hooks.items()):
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[k]
            return module
    raise ValueError(f"prune.remove: parameter '{name}' of module {type(module).__name__} has to be pruned "
                     "before pruning can be removed")


def is_pruned(module):
    """Whether ``module`` or any submodule has a pruned tensor.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> prune.is_pruned(nn.Linear(2, 2))
    False
    """
    return any(isinstance(h, BasePruningMethod) for m in module.modules() for h in m._forward_pre_hooks.values())
