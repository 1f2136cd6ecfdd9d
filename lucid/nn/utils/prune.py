"""Pruning (``torch.nn.utils.prune``): ``identity``, ``random_unstructured``,
``l1_unstructured``, ``random_structured``, ``ln_structured``, ``global_unstructured``,
``custom_from_mask``, ``remove``, ``is_pruned``; ``BasePruningMethod`` for custom methods and
``PruningContainer`` for the history of an iteratively pruned tensor.

NOTE [Pruning by mask]
Pruning ``module.weight`` moves the parameter to ``weight_orig``, adds a buffer
``weight_mask`` and a forward pre-hook that sets ``module.weight = weight_orig * weight_mask``
before each call (so gradients reach ``weight_orig`` where the mask is 1). Pruning the same
tensor again wraps the hooks in one ``PruningContainer``, which hands the new method only what
is still unpruned: the kept entries (unstructured, as a flat tensor), the kept channels
(structured) or everything ('global'), with the *pruned* values as importance scores. Masks are
Lucid tensors computed with Lucid ops (``compute_mask(t, default_mask)`` receives and returns
tensors, so a user's method is written as for PyTorch), hence on the parameter's device.
``remove`` makes the pruned value a plain parameter again. State-dict keys are PyTorch's.
"""
from __future__ import annotations

import numbers
from collections.abc import Iterable

from ..._core.tensor import Tensor

__all__ = ["BasePruningMethod", "PruningContainer", "Identity", "RandomUnstructured", "L1Unstructured",
           "RandomStructured", "LnStructured", "CustomFromMask", "identity", "random_unstructured",
           "l1_unstructured", "random_structured", "ln_structured", "global_unstructured", "custom_from_mask",
           "remove", "is_pruned"]


def _lucid():
    import lucid

    return lucid


class BasePruningMethod:
    """A pruning method: ``compute_mask(t, default_mask)`` returns the new mask, a tensor of
    ``t``'s shape (See NOTE [Pruning by mask]). ``PRUNING_TYPE`` is 'unstructured',
    'structured' (the method then has a ``dim``) or 'global'.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> class EveryOther(prune.BasePruningMethod):
    ...     PRUNING_TYPE = "unstructured"
    ...     def compute_mask(self, t, default_mask):
    ...         mask = default_mask.clone()
    ...         mask.view(-1)[::2] = 0
    ...         return mask
    >>> m = nn.Linear(2, 4)
    >>> _ = EveryOther.apply(m, "bias")
    >>> m.bias_mask
    tensor([0., 1., 0., 1.])
    """

    PRUNING_TYPE = "unstructured"
    _tensor_name = None

    def __call__(self, module, inputs):
        setattr(module, self._tensor_name, self.apply_mask(module))

    def compute_mask(self, t, default_mask):
        raise NotImplementedError(f"{type(self).__name__}.compute_mask is not implemented")

    def apply_mask(self, module):
        """``<name>_orig * <name>_mask`` of ``module``: the pruned tensor."""
        if self._tensor_name is None:
            raise AssertionError(f"apply_mask: module {type(module).__name__} has to be pruned")
        mask = getattr(module, self._tensor_name + "_mask")
        orig = getattr(module, self._tensor_name + "_orig")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune ``module.<name>`` with ``cls(*args, **kwargs)``; returns the hook installed."""
        method = _composite(cls, module, name, *args, **kwargs)
        orig = getattr(module, name)
        if not isinstance(orig, Tensor):
            raise ValueError(f"prune: module {type(module).__name__} has no tensor named '{name}'")
        if importance_scores is None:
            importance_scores = orig
        elif tuple(importance_scores.shape) != tuple(orig.shape):
            raise AssertionError(f"prune: importance_scores should have the same shape as parameter {name} "
                                 f"of {type(module).__name__}, got {tuple(importance_scores.shape)} vs "
                                 f"{tuple(orig.shape)}")
        first = not isinstance(method, PruningContainer)
        if first:
            module.register_parameter(name + "_orig", orig)
            del module._parameters[name]
            default_mask = _lucid().ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            mask = method.compute_mask(importance_scores, default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if first:  # a failed pruning leaves the module as it was
                module.__dict__.pop(name, None)
                module._buffers.pop(name + "_mask", None)
                module.register_parameter(name, module._parameters.pop(name + "_orig"))
            raise
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """``t`` times the mask this method computes for it (from ``importance_scores``, or ``t``)."""
        if importance_scores is None:
            importance_scores = t
        elif tuple(importance_scores.shape) != tuple(t.shape):
            raise AssertionError(f"prune: importance_scores should have the same shape as tensor t, got "
                                 f"{tuple(importance_scores.shape)} vs {tuple(t.shape)}")
        default_mask = default_mask if default_mask is not None else _lucid().ones_like(t)
        return t * self.compute_mask(importance_scores, default_mask=default_mask)

    def remove(self, module):
        """Make the pruned value a plain parameter and drop ``_orig``, ``_mask`` (the hook is
        dropped by ``prune.remove``)."""
        if self._tensor_name is None:
            raise AssertionError(f"remove: module {type(module).__name__} has to be pruned before pruning "
                                 "can be removed")
        name = self._tensor_name
        weight = self.apply_mask(module)
        module.__dict__.pop(name, None)
        orig = module._parameters.pop(name + "_orig")
        orig.data = weight.data
        del module._buffers[name + "_mask"]
        setattr(module, name, orig)


def _composite(cls, module, name, *args, **kwargs):
    """The new method, or the container of the tensor's earlier ones with it appended; the
    old hook is unregistered (``apply`` registers the result)."""
    old = [k for k, h in module._forward_pre_hooks.items()
           if isinstance(h, BasePruningMethod) and h._tensor_name == name]
    if len(old) > 1:
        raise AssertionError(f"prune: avoid adding multiple pruning hooks to the same tensor {name} of module "
                             f"{type(module).__name__}. Use a PruningContainer.")
    old_method = module._forward_pre_hooks.pop(old[0]) if old else None
    method = cls(*args, **kwargs)
    method._tensor_name = name
    if old_method is None:
        return method
    container = old_method if isinstance(old_method, PruningContainer) else PruningContainer(old_method)
    container.add_pruning_method(method)
    return container


class PruningContainer(BasePruningMethod):
    """The sequence of pruning methods applied to one tensor; iterable and indexable.

    Examples
    --------
    >>> import lucid.nn as nn
    >>> from lucid.nn.utils import prune
    >>> m = prune.l1_unstructured(nn.Linear(3, 2), "weight", amount=1)
    >>> m = prune.ln_structured(m, "weight", amount=1, n=2, dim=0)
    >>> hook = next(iter(m._forward_pre_hooks.values()))
    >>> [type(h).__name__ for h in hook]
    ['L1Unstructured', 'LnStructured']
    """

    def __init__(self, *args):
        self._pruning_methods = ()
        if len(args) == 1 and isinstance(args[0], BasePruningMethod):
            self._tensor_name = args[0]._tensor_name
            self.add_pruning_method(args[0])
        else:
            for method in (args[0] if len(args) == 1 and isinstance(args[0], Iterable) else args):
                self.add_pruning_method(method)

    def add_pruning_method(self, method):
        """Append ``method`` (which must act on this container's tensor)."""
        if method is not None and not isinstance(method, BasePruningMethod):
            raise TypeError(f"add_pruning_method: {type(method).__name__} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name is None and not self._pruning_methods:
            self._tensor_name = method._tensor_name  # a container built from a sequence (PyTorch fails there)
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError(f"add_pruning_method: can only add pruning methods acting on the parameter named "
                             f"'{self._tensor_name}' to PruningContainer {self}. Found '{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        """The latest method's mask, computed on what ``default_mask`` left unpruned."""
        method = self._pruning_methods[-1]
        new_mask = default_mask.to(dtype=t.dtype)
        slc = _unpruned(method, t, default_mask)
        partial = method.compute_mask(t[slc], default_mask=default_mask[slc])
        new_mask[slc] = partial.to(dtype=new_mask.dtype)
        return new_mask


def _unpruned(method, t, mask):
    """The index of what ``method`` may still prune, by its ``PRUNING_TYPE``."""
    kind = method.PRUNING_TYPE
    if kind == "unstructured":
        return mask == 1
    if kind == "global":
        return (slice(None),) * t.ndim
    if kind != "structured":
        raise ValueError(f"compute_mask: unrecognized PRUNING_TYPE {kind!r}")
    if not hasattr(method, "dim"):
        raise AttributeError('compute_mask: pruning methods of PRUNING_TYPE "structured" need to have the '
                             "attribute `dim` defined.")
    dim = method.dim + t.ndim if method.dim < 0 else method.dim
    if dim < 0:
        raise IndexError(f"compute_mask: index is out of bounds for tensor with dimensions {t.ndim}")
    slc = [slice(None)] * t.ndim
    slc[dim] = mask.sum(dim=[d for d in range(t.ndim) if d != dim]) != 0
    return tuple(slc)


def _check_amount(amount):
    if isinstance(amount, bool) or not isinstance(amount, numbers.Real):
        raise TypeError(f"prune: invalid type for amount: {amount}. Must be int or float.")
    if (isinstance(amount, numbers.Integral) and amount < 0) or (
            not isinstance(amount, numbers.Integral) and not 0.0 <= float(amount) <= 1.0):
        raise ValueError(f"prune: amount={amount} should either be a float in the range [0, 1] or a "
                         "non-negative integer")


def _count(amount, size):
    """Entries to prune: ``amount`` for an int, ``round(amount * size)`` for a float."""
    k = int(amount) if isinstance(amount, numbers.Integral) else round(amount * size)
    if k > size:
        raise ValueError(f"prune: amount={k} should be smaller than the number of parameters to prune={size}")
    return k


def _check_structured(t, dim):
    if t.ndim <= 1:
        raise ValueError(f"prune: structured pruning can only be applied to multidimensional tensors. Found "
                         f"tensor of shape {tuple(t.shape)} with {t.ndim} dims")
    if dim >= t.ndim:
        raise IndexError(f"prune: invalid index {dim} for tensor of size {tuple(t.shape)}")


def _channel_mask(t, dim, keep):
    """Ones on the channels ``keep`` (indices or a bool tensor) along ``dim``, zeros elsewhere."""
    mask = _lucid().zeros_like(t)
    slc = [slice(None)] * t.ndim
    slc[dim] = keep
    mask[tuple(slc)] = 1
    return mask


class Identity(BasePruningMethod):
    """Prune nothing (a mask of ones)."""

    def compute_mask(self, t, default_mask):
        return default_mask


class RandomUnstructured(BasePruningMethod):
    """Prune ``amount`` (a fraction or a count) of the unpruned entries, chosen at random."""

    def __init__(self, amount):
        _check_amount(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        k = _count(self.amount, t.numel())
        mask = default_mask.clone()
        if k:
            lucid = _lucid()
            mask.view(-1)[lucid.topk(lucid.rand_like(t).view(-1), k=k).indices] = 0
        return mask


class L1Unstructured(BasePruningMethod):
    """Prune the ``amount`` unpruned entries of smallest absolute value."""

    def __init__(self, amount):
        _check_amount(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        k = _count(self.amount, t.numel())
        mask = default_mask.clone()
        if k:
            lucid = _lucid()
            mask.view(-1)[lucid.topk(lucid.abs(t).reshape(-1), k=k, largest=False).indices] = 0
        return mask


class RandomStructured(BasePruningMethod):
    """Prune ``amount`` whole channels along ``dim``, chosen at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        _check_amount(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        n = t.shape[self.dim]
        k = _count(self.amount, n)
        if not k:
            return default_mask
        lucid = _lucid()
        prob = lucid.rand(n, device=t.device)
        mask = _channel_mask(t, self.dim, prob > lucid.kthvalue(prob, k=k).values)
        return mask * default_mask.to(dtype=mask.dtype)


class LnStructured(BasePruningMethod):
    """Prune the ``amount`` channels along ``dim`` of smallest L``n`` norm (``n`` as ``p`` of
    ``lucid.norm``)."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        _check_amount(amount)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t, default_mask):
        _check_structured(t, self.dim)
        size = t.shape[self.dim]
        k = _count(self.amount, size)
        lucid = _lucid()
        dim = self.dim % t.ndim
        # computed even for k == 0, as PyTorch, so an unusable ``n`` ('nuc') fails either way
        norm = lucid.norm(t, p=self.n, dim=[d for d in range(t.ndim) if d != dim])
        if not k:
            return default_mask
        mask = _channel_mask(t, dim, lucid.topk(norm, k=size - k, largest=True).indices)
        return mask * default_mask.to(dtype=mask.dtype)


class CustomFromMask(BasePruningMethod):
    """Prune where a given ``mask`` is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        mask = self.mask
        if not isinstance(mask, Tensor):  # a host array or list: a constant on the parameter's device
            mask = _lucid().as_tensor(mask, device=default_mask.device)
        if tuple(mask.shape) != tuple(default_mask.shape):
            raise AssertionError(f"custom_from_mask: default_mask shape {tuple(default_mask.shape)} must match "
                                 f"mask shape {tuple(mask.shape)}")
        return default_mask * mask.to(dtype=default_mask.dtype)


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
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    params = list(parameters)
    if importance_scores is None:
        importance_scores = {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    lucid = _lucid()
    scores = lucid.cat([importance_scores.get((m, n), getattr(m, n)).reshape(-1) for m, n in params])
    default_mask = lucid.cat([_flat_mask(m, n) for m, n in params])
    container = PruningContainer()
    container._tensor_name = "temp"
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f"global_unstructured(): only 'unstructured' PRUNING_TYPE supported for the "
                        f"`pruning_method`. Found method {pruning_method} of type {method.PRUNING_TYPE}")
    container.add_pruning_method(method)
    final_mask = container.compute_mask(scores, default_mask)
    start = 0
    for module, name in params:
        param = getattr(module, name)
        custom_from_mask(module, name, mask=final_mask[start:start + param.numel()].view_as(param))
        start += param.numel()


def _flat_mask(module, name):
    mask = getattr(module, name + "_mask", None)
    return (mask if mask is not None else _lucid().ones_like(getattr(module, name))).reshape(-1)


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
    raise ValueError(f"remove: parameter '{name}' of module {type(module).__name__} has to be pruned before "
                     "pruning can be removed")


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
