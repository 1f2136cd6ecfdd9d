"""``BaseDataSparsifier`` (PyTorch's ``torch.ao.pruning._experimental.data_sparsifier``): a
sparsifier of named data (tensors, parameters, embedding tables) rather than of a model.

NOTE [Data sparsifier container]
The sparsifier owns a private module (``_container``) on which each piece of data is a
buffer, ``name``, parametrized by ``FakeSparsity(mask)``. The user's tensor *is* the
parametrization's ``original`` (``parametrize`` keeps the same object), so ``squash_mask``
writes ``mask * data`` into the user's tensor. ``data_groups[name]`` is the data's config
(the defaults updated by ``add_data``'s keywords) and ``state[name]["mask"]`` its mask.
``state_dict`` stores the masks as sparse COO tensors, as PyTorch's, and the container's
state dict; loading rebuilds the container from them.
"""
from __future__ import annotations

import abc
import copy
import warnings
from collections import defaultdict

from ....._core.grad_mode import no_grad
from ....._core.tensor import Tensor
from .....nn.module import Module
from .....nn.parameter import Parameter
from .....nn.sparse import Embedding, EmbeddingBag
from .....nn.utils import parametrize
from ...sparsifier import base_sparsifier
from ...sparsifier.utils import FakeSparsity

__all__ = ["BaseDataSparsifier"]

EMBEDDING_TYPES = {Embedding, EmbeddingBag}

SUPPORTED_TYPES = {Tensor, Parameter, *EMBEDDING_TYPES}


def _lucid():
    import lucid

    return lucid


class _Container(Module):
    pass


class BaseDataSparsifier(base_sparsifier.BaseSparsifier):
    """Base class of the data sparsifiers: subclasses implement ``update_mask(name, data,
    **config)``. See NOTE [Data sparsifier container].

    Parameters
    ----------
    data_list : list of (str, data), optional
        Data added at once with the default config; data is a Tensor, a Parameter, an
        ``nn.Embedding`` or an ``nn.EmbeddingBag`` (its weight).
    **defaults
        The default config of every piece of data.

    Examples
    --------
    >>> import lucid
    >>> from lucid.ao.pruning._experimental.data_sparsifier import BaseDataSparsifier
    >>> class SmallValues(BaseDataSparsifier):
    ...     def update_mask(self, name, data, threshold, **kwargs):
    ...         self.get_mask(name).data = (data.abs() >= threshold).to(lucid.float32)
    >>> sparsifier = SmallValues(data_list=[("x", lucid.tensor([1., 2., 3.]))], threshold=1.5)
    >>> sparsifier.step()
    >>> sparsifier.get_data("x", return_original=False)
    tensor([0., 2., 3.])
    """

    def __init__(self, data_list=None, **defaults):
        super().__init__(defaults=defaults)
        self._container = _Container()
        self.data_groups = defaultdict(dict)
        if data_list is not None:
            for name, data in data_list:
                self.add_data(name, data, **self.defaults)

    def prepare(self, model, config):
        raise NotImplementedError(f"{type(self).__name__}.prepare: this function is undefined for data "
                                  "sparsifiers; use add_data")

    @staticmethod
    def _extract_weight(data):
        return data.weight if type(data) in EMBEDDING_TYPES else data

    def add_data(self, name, data, reuse_mask=True, **config):
        """Sparsify ``data`` under ``name`` (replacing, with a warning, data of the same name,
        whose config and, with ``reuse_mask``, mask are kept); returns the sparsified view."""
        if type(data) not in SUPPORTED_TYPES:
            raise AssertionError(f"add_data: specified data type: {type(data).__name__} not supported at the moment")
        local_args = copy.deepcopy(self.defaults)
        local_args.update(config)
        weight = self._extract_weight(data)
        mask = local_args.get("mask", None)
        if mask is None:
            mask = _lucid().ones_like(weight)
        param_class = local_args.get("parametrization", FakeSparsity)
        if name in self.state:
            warnings.warn("Replacing existing data of the same name. - Did you mean a different name?", stacklevel=2)
            local_args = copy.deepcopy(self.data_groups[name])
            local_args.update(config)
            if reuse_mask:
                current = self.get_data(name=name)
                if tuple(weight.shape) != tuple(current.shape):
                    raise AssertionError(f"add_data: to retain the old mask, the shape of the new data must be the "
                                         f"same as the previous one ({tuple(weight.shape)} vs {tuple(current.shape)})")
                mask = self.get_mask(name=name)
            self._delete_data(name=name)
        self._container.register_buffer(name=name, tensor=weight)
        parametrize.register_parametrization(self._container, name, param_class(mask))
        self.state[name]["mask"] = mask
        self.data_groups[name] = local_args
        return getattr(self._container, name)

    def get_data(self, name, return_original=True):
        """The data under ``name``: the original tensor, or (``return_original=False``) the
        sparsified one."""
        if name not in self.data_groups:
            raise ValueError(f"get_data: data with specified name '{name}' does not exist")
        if not return_original:
            return getattr(self._container, name)
        if not parametrize.is_parametrized(self._container, name):
            raise ValueError(f"get_data: mask of '{name}' squashed - original value does not exist")
        return self._container.parametrizations[name].original

    def get_mask(self, name):
        """The mask of the data under ``name``."""
        if name not in self.state:
            raise ValueError(f"get_mask: data with specified name '{name}' does not exist")
        return self.state[name]["mask"]

    # ------------------------------------------------------------------ state
    @staticmethod
    def _convert_mask(states, sparse_coo=True):
        """A deep copy of ``states`` with the masks as sparse COO (or dense) tensors."""
        states = copy.deepcopy(states)
        for state in states.values():
            state["mask"] = state["mask"].to_sparse_coo() if sparse_coo else state["mask"].to_dense()
        return states

    def state_dict(self):
        """``{"state": the masks (sparse COO), "data_groups": the configs, "_container": the
        container's state_dict}``."""
        return {"state": self._convert_mask(self.state), "data_groups": self.data_groups,
                "_container": self._container.state_dict()}

    def _load_container_from_state(self, states, data_groups, container_state_dict):
        """Register each named piece of data on the container, parametrized by its mask when
        it was saved parametrized."""
        for name, state in states.items():
            config = data_groups.get(name, None)
            if config is None:
                raise RuntimeError(f"load_state_dict: error loading {name}: no data group")
            if name in container_state_dict:
                data, parametrized = container_state_dict[name], False
            elif f"parametrizations.{name}.original" in container_state_dict:
                data, parametrized = container_state_dict[f"parametrizations.{name}.original"], True
            else:
                raise RuntimeError(f"load_state_dict: error loading {name}: not in the container's state dict")
            self._container.register_buffer(name=name, tensor=data)
            if parametrized:
                mask = state.get("mask", None)
                if mask is None:
                    mask = _lucid().ones_like(data)
                param_class = config.get("parametrization", FakeSparsity)
                parametrize.register_parametrization(self._container, name, param_class(mask))

    def load_state_dict(self, state_dict, strict=True):
        """Restore the sparsifier from ``state_dict``; with ``strict`` the data added before is
        dropped, otherwise it is kept (and wins on a name clash, as PyTorch's)."""
        states = self._convert_mask(state_dict["state"], sparse_coo=False)
        data_groups = copy.deepcopy(state_dict["data_groups"])
        container_state_dict = copy.deepcopy(state_dict["_container"])
        if strict:
            self._container = _Container()
        self._load_container_from_state(states, data_groups, container_state_dict)
        if not strict:
            states.update(self.state)
            data_groups.update(self.data_groups)
        self.__setstate__({"state": defaultdict(dict, states), "data_groups": defaultdict(dict, data_groups)})

    def __setstate__(self, state):
        if "_container" in state:  # unpickling: rebuild the container
            container_dict = state.pop("_container")
            self._container = _Container()
            state["state"] = self._convert_mask(state["state"], sparse_coo=False)
            self._load_container_from_state(state["state"], state["data_groups"], container_dict)
        self.__dict__.update(state)
        if not hasattr(self, "enable_mask_update"):
            self.enable_mask_update = True

    def __getstate__(self):
        # as BaseSparsifier's: the subclass's settings (DataNormSparsifier.norm) travel too
        state = {k: v for k, v in self.__dict__.items() if k not in ("_container", "state", "step")}
        state.update(state=self._convert_mask(self.state), _container=self._container.state_dict())
        return state

    def __repr__(self):
        lines = [self.__class__.__name__ + " ("]
        for name, config in self.data_groups.items():
            lines += ["\tData Group", f"\t    name: {name}"]
            lines += [f"\t    {key}: {config[key]}" for key in sorted(config) if key != "data"]
        return "\n".join(lines) + "\n)" if self.data_groups else lines[0] + ")"

    # ------------------------------------------------------------------ masks
    def squash_mask(self, *args, leave_parametrized=True, names=None, **kwargs):
        """Remove the parametrization of ``names`` (default: all data), leaving ``mask * data``
        in the data (or, with ``leave_parametrized=False``, the data unmasked)."""
        for name in list(self.data_groups) if names is None else names:
            parametrize.remove_parametrizations(self._container, name, leave_parametrized=leave_parametrized)

    def step(self):
        """Recompute every mask (``update_mask(name, original_data, **config)``), unless
        ``enable_mask_update`` is False."""
        if not self.enable_mask_update:
            return
        with no_grad():
            for name, config in self.data_groups.items():
                self.update_mask(name, self.get_data(name), **config)

    @abc.abstractmethod
    def update_mask(self, name, data, **kwargs):
        """Write the new mask of the data under ``name`` (``self.get_mask(name).data = ...``)."""

    def _delete_data(self, name):
        """Drop the data under ``name`` (unmasked) from the sparsifier."""
        self.squash_mask(names=[name], leave_parametrized=False)
        delattr(self._container, name)
        self.state.pop(name)
        self.data_groups.pop(name)
