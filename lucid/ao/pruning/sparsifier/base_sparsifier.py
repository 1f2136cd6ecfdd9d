"""``BaseSparsifier`` (PyTorch's ``torch.ao.pruning.BaseSparsifier``): the bookkeeping every
sparsifier shares. ``prepare(model, config)`` puts a ``FakeSparsity`` parametrization (a mask)
on each configured tensor; ``step()`` calls the subclass's ``update_mask`` on every group;
``squash_mask()`` bakes the masks into plain parameters; ``convert`` swaps modules for their
sparse counterparts.

NOTE [Sparsifier groups]
A *group* is one configured tensor: the ``defaults`` updated by its ``config`` entry, plus
``tensor_fqn``, ``module_fqn``, ``module`` and ``tensor_name`` (from
``get_arg_info_from_tensor_fqn``). ``step`` calls ``update_mask(**group)``, so every key of a
group is a keyword of ``update_mask``; a scheduler changes ``group["sparsity_level"]``
between steps. ``state[tensor_fqn]["mask"]`` is the mask of the group's ``FakeSparsity``
(See NOTE [Masks keep their identity]). ``state_dict`` holds ``state`` and the groups without
their module references; ``load_state_dict`` finds the modules again in ``self.model``.
"""
from __future__ import annotations

import abc
import copy
from collections import defaultdict

from ...._core.grad_mode import no_grad
from ...._core.tensor import Tensor
from ....nn.linear import Linear
from ....nn.utils import parametrize
from ....nn.utils.parametrize import type_before_parametrizations
from .utils import FakeSparsity, get_arg_info_from_tensor_fqn, module_contains_param, module_to_fqn, swap_module

__all__ = ["BaseSparsifier"]

SUPPORTED_MODULES = {Linear}

KEYS_NOT_IN_STATE_DICT = ["module", "module_fqn", "tensor_name"]


def _lucid():
    import lucid

    return lucid


def _sparsified_tensor(model, tensor_fqn, who):
    """The group info of ``tensor_fqn`` in ``model``; a clear AttributeError (as PyTorch's
    type) when no module or tensor is there."""
    info = get_arg_info_from_tensor_fqn(model, tensor_fqn)
    module = info["module"]
    if module is None or not hasattr(module, "_parameters"):
        raise AttributeError(f"{who}: the model has no module '{info['module_fqn']}' (from tensor_fqn "
                             f"'{tensor_fqn}')")
    if not isinstance(getattr(module, info["tensor_name"], None), Tensor):
        raise AttributeError(f"{who}: module '{info['module_fqn']}' ({type(module).__name__}) has no tensor named "
                             f"'{info['tensor_name']}' (from tensor_fqn '{tensor_fqn}')")
    return info


class BaseSparsifier(abc.ABC):
    """Base class of the sparsifiers: subclasses implement ``update_mask(module, tensor_name,
    **group)``, which writes the new mask of one group (See NOTE [Sparsifier groups]).

    Parameters
    ----------
    defaults : dict, optional
        Group settings used where a ``config`` entry gives none (e.g. ``sparsity_level``).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.pruning import BaseSparsifier
    >>> class FirstRow(BaseSparsifier):
    ...     def update_mask(self, module, tensor_name, **kwargs):
    ...         module.parametrizations[tensor_name][0].mask[0] = 0
    >>> model = nn.Sequential(nn.Linear(3, 2))
    >>> sparsifier = FirstRow()
    >>> sparsifier.prepare(model, [{"tensor_fqn": "0.weight"}])
    >>> sparsifier.step()
    >>> sparsifier.squash_mask()
    >>> bool((model[0].weight[0] == 0).all()), type(model[0]).__name__
    (True, 'Linear')
    """

    def __init__(self, defaults=None):
        super().__init__()
        self.defaults = defaults or {}
        self.state = defaultdict(dict)
        self.groups = []
        self.enable_mask_update = True

    def __getstate__(self):
        # PyTorch keeps only defaults, state and groups, so a copy of a subclass loses its own
        # settings (WeightNormSparsifier.norm_fn); here everything but the model and a
        # scheduler's wrapped ``step`` (bound to this instance) is kept.
        return {k: v for k, v in self.__dict__.items() if k not in ("model", "step")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        if not hasattr(self, "enable_mask_update"):  # unpickled (PyTorch's copy then fails to step)
            self.enable_mask_update = True

    def __repr__(self):
        lines = [self.__class__.__name__ + " ("]
        for i, group in enumerate(self.groups):
            lines += [f"\tGroup {i}", f"\t    module: {group['module']}"]
            lines += [f"\t    {key}: {group[key]}" for key in sorted(group) if key != "module"]
        return "\n".join(lines) + "\n)" if self.groups else lines[0] + ")"

    # ------------------------------------------------------------------ state
    def state_dict(self):
        """``{"state": per-tensor state (the masks...), "groups": the groups without their
        module references}``; ``state`` is the live dict, as PyTorch's."""
        groups = [{k: v for k, v in group.items() if k not in KEYS_NOT_IN_STATE_DICT} for group in self.groups]
        return {"state": self.state, "groups": groups}

    def load_state_dict(self, state_dict, strict=True):
        """Take the groups and masks of ``state_dict`` onto the prepared ``self.model``.

        A tensor without a ``FakeSparsity`` gets one; a saved mask is copied into the tensor's
        ``FakeSparsity.mask`` (which stays ``state[fqn]["mask"]``, NOTE [Masks keep their
        identity]). Every path is checked before anything changes. Unlike PyTorch, the masks
        are not popped out of ``state_dict`` (there, loading empties the source sparsifier's
        own state, which ``state_dict`` returns by reference).
        """
        if not hasattr(self, "model"):
            raise AttributeError(f"load_state_dict: {type(self).__name__} has no model; call prepare(model, config) "
                                 "first")
        groups = copy.deepcopy(state_dict["groups"])
        states = {fqn: dict(s) for fqn, s in state_dict["state"].items()}
        infos = {}
        for fqn in list(states) + [g["tensor_fqn"] for g in groups]:
            info = get_arg_info_from_tensor_fqn(self.model, fqn)
            if info["module"] is None or not isinstance(getattr(info["module"], info["tensor_name"], None), Tensor):
                if strict:
                    raise RuntimeError(f"load_state_dict: error loading {fqn} into the model: no such tensor")
                continue
            infos[fqn] = info
        for fqn, s in states.items():
            if fqn not in infos:
                continue
            module, name = infos[fqn]["module"], infos[fqn]["tensor_name"]
            fake = self._fake_sparsity_of(module, name)
            mask = s.get("mask")
            if mask is not None:
                with no_grad():
                    fake.mask.data = mask.detach().clone().to(device=fake.mask.device)
            s["mask"] = fake.mask
        for group in groups:
            group.update(infos.get(group["tensor_fqn"], {}))
        self.__setstate__({"state": defaultdict(dict, states), "groups": groups})

    @staticmethod
    def _fake_sparsity_of(module, name):
        """The ``FakeSparsity`` on ``module.<name>``, registered (all ones) if there is none."""
        if parametrize.is_parametrized(module, name):
            for p in module.parametrizations[name]:
                if isinstance(p, FakeSparsity):
                    return p
        fake = FakeSparsity(_lucid().ones_like(getattr(module, name)))
        parametrize.register_parametrization(module, name, fake)
        return fake

    # ------------------------------------------------------------------ prepare
    def make_config_from_model(self, model, SUPPORTED_MODULES=SUPPORTED_MODULES):
        """``self.config``: one ``{"tensor_fqn": "<fqn>.weight"}`` per submodule whose type is in
        ``SUPPORTED_MODULES`` (``nn.Linear``), in PyTorch's (depth-first, stack) order."""
        self.config = []
        stack = [model]
        while stack:
            module = stack.pop()
            for _name, child in module.named_children():
                if type(child) in SUPPORTED_MODULES:
                    self.config.append({"tensor_fqn": module_to_fqn(model, child) + ".weight"})
                else:
                    stack.append(child)

    def prepare(self, model, config):
        """Put a ``FakeSparsity`` (all ones, or the entry's ``mask``) on each tensor of
        ``config`` (a list of dicts with a ``tensor_fqn``; None: the weight of every
        ``nn.Linear``). The model is changed in place; a bad entry raises before anything
        changes."""
        if config is None:
            self.make_config_from_model(model)
            config = self.config
        if not isinstance(self.defaults, dict):
            raise AssertionError(f"prepare: defaults must be a dict, got {type(self.defaults).__name__}")
        groups = [self._group_from_config(model, entry) for entry in config]
        self.model, self.config = model, config
        self.groups.extend(groups)
        self._prepare()

    def _group_from_config(self, model, entry):
        if not isinstance(entry, dict):
            raise AssertionError("prepare: config elements should be dicts not modules i.e.:"
                                 "[{`tensor_fqn`: `foo.bar.weight`}, {`tensor_fqn`: ... }, ...]")
        group = copy.deepcopy(self.defaults)
        group.update(entry)
        tensor_fqn = group.get("tensor_fqn")
        if tensor_fqn is None:
            raise AssertionError("prepare: tensor_fqn is a required argument in the sparsity config which replaces "
                                 "previous `module` and [module]`fqn` arguments")
        info = _sparsified_tensor(model, tensor_fqn, "prepare")
        for key, value in info.items():
            if key in group and not (group[key] is value if key == "module" else group[key] == value):
                raise AssertionError(f"prepare: given both `{key}` and `tensor_fqn` in the config, it is expected "
                                     "them to agree!")
        group.update(info)
        return group

    def _prepare(self, *args, **kwargs):
        """Register the mask parametrization of every group not yet parametrized."""
        for group in self.groups:
            module, name = group["module"], group["tensor_name"]
            parametrization = group.get("parametrization", FakeSparsity)
            if parametrize.is_parametrized(module, name) and any(
                    isinstance(p, parametrization) for p in module.parametrizations[name]):
                continue  # a second prepare() keeps the earlier groups' masks (PyTorch stacks a new one)
            mask = group.get("mask", None)
            if mask is None:
                mask = _lucid().ones_like(getattr(module, name))
            self.state[group["tensor_fqn"]]["mask"] = mask
            parametrize.register_parametrization(module, name, parametrization(mask))

    # ------------------------------------------------------------------ masks
    def step(self, use_path=True):
        """Recompute every group's mask (``update_mask(**group)``), unless
        ``enable_mask_update`` is False."""
        if not self.enable_mask_update:
            return
        with no_grad():
            for group in self.groups:
                self.update_mask(**group)

    @abc.abstractmethod
    def update_mask(self, module, tensor_name, **kwargs):
        """Write the new mask of ``module.<tensor_name>`` (into its ``FakeSparsity.mask``)."""

    def squash_mask(self, params_to_keep=None, params_to_keep_per_layer=None, *args, **kwargs):
        """Make each sparsified tensor a plain tensor holding ``mask * original``.

        ``params_to_keep`` (group keys kept for every layer) and ``params_to_keep_per_layer``
        (``{module_fqn: keys}``) copy group settings into ``module.sparse_params``.

        Examples
        --------
        >>> import lucid.nn as nn
        >>> from lucid.ao.pruning import WeightNormSparsifier
        >>> model = nn.Sequential(nn.Linear(4, 4))
        >>> sparsifier = WeightNormSparsifier(sparsity_level=0.5)
        >>> sparsifier.prepare(model, None)
        >>> sparsifier.step()
        >>> sparsifier.squash_mask(params_to_keep=("sparsity_level",))
        >>> model[0].sparse_params, int((model[0].weight == 0).sum())
        ({'sparsity_level': 0.5}, 8)
        """
        per_layer = params_to_keep_per_layer or {}
        for group in self.groups:
            keys = list(params_to_keep or ()) + list(per_layer.get(group["module_fqn"], ()))
            missing = [k for k in keys if k not in group]
            if missing:
                raise KeyError(f"squash_mask: group '{group['tensor_fqn']}' has no setting(s) {missing}")
        for group in self.groups:
            module = group["module"]
            if parametrize.is_parametrized(module, group["tensor_name"]):
                parametrize.remove_parametrizations(module, group["tensor_name"], leave_parametrized=True)
            sparse_params = {k: group[k] for k in params_to_keep or ()}
            sparse_params.update({k: group[k] for k in per_layer.get(group["module_fqn"], ())})
            if sparse_params:
                module.sparse_params = sparse_params

    def convert(self, module, mapping=None, inplace=False, parameterization=FakeSparsity):
        """Swap each submodule carrying ``parameterization`` whose dense type is a key of
        ``mapping`` for ``mapping[type].from_dense(submodule)`` (a copy of ``module`` unless
        ``inplace``)."""
        if mapping is None:
            raise NotImplementedError("convert: need to auto generate mapping; pass mapping={DenseType: SparseType}")
        if not inplace:
            module = copy.deepcopy(module)
        for name, child in list(module.named_children()):
            if module_contains_param(child, parameterization) and type_before_parametrizations(child) in mapping:
                module._modules[name] = swap_module(child, mapping)
            else:
                module._modules[name] = self.convert(child, mapping=mapping, inplace=True,
                                                     parameterization=parameterization)
        return module
