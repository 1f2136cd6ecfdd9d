"""``ActivationSparsifier`` (PyTorch's ``torch.ao.pruning._experimental.activation_sparsifier``):
masks computed from the activations that enter chosen layers.

NOTE [Activation sparsifier hooks]
Each registered layer first gets an *aggregate* forward pre-hook: every forward folds the
layer's first input into ``data_groups[name]["data"]`` with ``aggregate_fn(old, new)``
(starting from zeros; per selected feature along ``feature_dim`` when ``features`` is
given), and the first forward sets the mask (ones of the input's or feature's shape), so a
mask exists only after one forward. ``step()`` sets ``mask.data = mask_fn(reduce_fn(data),
**sparse_config)`` and forgets the aggregate. ``squash_mask()`` swaps the aggregate hook for
a *sparsify* pre-hook that multiplies the input (or each selected feature) by the mask.
``data_groups[name]["hook_state"]`` records which hook is on, so ``load_state_dict`` can put
the same hook back. Aggregation is bookkeeping and runs without a graph.
"""
from __future__ import annotations

import copy
import warnings
from collections import defaultdict

from ....._core.grad_mode import no_grad
from ...sparsifier.utils import fqn_to_module, module_to_fqn

__all__ = ["ActivationSparsifier"]

_FUNCTION_KEYS = ("aggregate_fn", "reduce_fn", "mask_fn")


def _lucid():
    import lucid

    return lucid


def feature_index(feature, like):
    """A one-element int64 index holding ``feature``, on ``like``'s device (for
    ``index_select``/``index_copy`` along ``feature_dim``)."""
    return _lucid().tensor([int(feature)], dtype=_lucid().int64, device=like.device)


class ActivationSparsifier:
    """Sparsify the inputs of chosen layers of ``model`` with masks computed from the inputs
    seen during training: ``mask = mask_fn(reduce_fn(aggregate_fn(...)), **sparse_config)``
    (See NOTE [Activation sparsifier hooks]).

    Parameters
    ----------
    model : nn.Module
    aggregate_fn, reduce_fn, mask_fn : callable, optional
        Defaults for :meth:`register_layer`.
    features : list of int, optional
        Default indices along ``feature_dim`` sparsified one by one (each its own mask).
    feature_dim : int, optional
    **sparse_config
        Default keyword arguments of ``mask_fn``.

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> from lucid.ao.pruning._experimental.activation_sparsifier import ActivationSparsifier
    >>> model = nn.Sequential(nn.Identity(), nn.Linear(3, 1, bias=False))
    >>> sparsifier = ActivationSparsifier(model, aggregate_fn=lambda a, b: a + b,
    ...                                   reduce_fn=lambda x: x.abs().mean(0),
    ...                                   mask_fn=lambda x, threshold: (x > threshold).to(x.dtype), threshold=0.5)
    >>> sparsifier.register_layer(model[1])
    >>> _ = model(lucid.tensor([[1., 0.1, -2.]]))
    >>> sparsifier.step()
    >>> sparsifier.get_mask("1")
    tensor([1., 0., 1.])
    """

    def __init__(self, model, aggregate_fn=None, reduce_fn=None, mask_fn=None, features=None, feature_dim=None,
                 **sparse_config):
        self.model = model
        self.defaults = {"sparse_config": sparse_config, "aggregate_fn": aggregate_fn, "reduce_fn": reduce_fn,
                         "mask_fn": mask_fn, "features": features, "feature_dim": feature_dim}
        self.data_groups = defaultdict(dict)
        self.state = defaultdict(dict)

    @staticmethod
    def _safe_rail_checks(args):
        if args["features"] is not None and args["feature_dim"] is None:
            raise AssertionError("ActivationSparsifier: need feature_dim to select features")
        for key in _FUNCTION_KEYS:
            if not callable(args[key]):
                raise AssertionError(f"ActivationSparsifier: {key} ({args[key]!r}) must be callable")

    # ------------------------------------------------------------------ hooks
    def _aggregate_hook(self, name):
        group = self.data_groups[name]
        features, feature_dim, aggregate = group["features"], group["feature_dim"], group["aggregate_fn"]

        def hook(module, inputs):
            x = inputs[0].detach()
            data = self.data_groups[name].get("data")
            with no_grad():
                if features is None:
                    if data is None:
                        data = _lucid().zeros_like(x)
                        self.state[name]["mask"] = _lucid().ones_like(x)
                    self.data_groups[name]["data"] = aggregate(data, x)
                    return
                first = data is None
                if first:
                    data = [None] * len(features)
                    self.state[name]["mask"] = [None] * len(features)
                for i, feature in enumerate(features):
                    x_feature = _lucid().index_select(x, feature_dim, feature_index(feature, x))
                    if first:
                        self.state[name]["mask"][i] = _lucid().ones_like(x_feature)
                        data[i] = _lucid().zeros_like(x_feature)
                    data[i] = aggregate(data[i], x_feature)
                self.data_groups[name]["data"] = data

        return hook

    def _sparsify_hook(self, name):
        mask = self.get_mask(name)
        features, feature_dim = self.data_groups[name]["features"], self.data_groups[name]["feature_dim"]

        def hook(module, inputs):
            x = inputs[0]
            if features is None:
                return x * mask
            lucid = _lucid()
            for i, feature in enumerate(features):  # out of place: the caller's input is left alone
                index = feature_index(feature, x)
                x = lucid.index_copy(x, feature_dim, index, lucid.index_select(x, feature_dim, index) * mask[i])
            return x

        return hook

    # ------------------------------------------------------------------ layers
    def register_layer(self, layer, aggregate_fn=None, reduce_fn=None, mask_fn=None, features=None,
                       feature_dim=None, **sparse_config):
        """Attach the sparsifier to ``layer`` (a submodule of the model) with these settings
        (None: the defaults); registering a layer again replaces its settings, with a warning."""
        name = module_to_fqn(self.model, layer)
        if name is None:
            raise AssertionError(f"register_layer: layer {type(layer).__name__} not found in the model")
        local_args = copy.deepcopy(self.defaults)
        given = {"aggregate_fn": aggregate_fn, "reduce_fn": reduce_fn, "mask_fn": mask_fn, "features": features,
                 "feature_dim": feature_dim, "layer": layer}
        local_args.update((key, value) for key, value in given.items() if value is not None)
        local_args["sparse_config"].update(sparse_config)
        self._safe_rail_checks(local_args)
        if name in self.data_groups:
            warnings.warn("layer already attached to the sparsifier, deregistering the layer and registering with "
                          "new config", stacklevel=2)
            self.unregister_layer(name=name)
        self.data_groups[name] = local_args
        self.state[name]["mask"] = None  # known after the first forward
        local_args["hook"] = layer.register_forward_pre_hook(self._aggregate_hook(name=name))
        local_args["hook_state"] = "aggregate"

    def unregister_layer(self, name):
        """Detach the sparsifier from the layer ``name`` (its hook, mask and settings)."""
        self.data_groups[name]["hook"].remove()
        self.state.pop(name)
        self.data_groups.pop(name)

    def get_mask(self, name=None, layer=None):
        """The mask of a layer, by fqn ``name`` or by ``layer`` (a list of masks with
        ``features``); known only after the layer's first forward."""
        if name is None and layer is None:
            raise AssertionError("get_mask: need at least name or layer obj to retrieve mask")
        if name is None:
            name = module_to_fqn(self.model, layer)
            if name is None:
                raise AssertionError("get_mask: layer not found in the specified model")
        if name not in self.state:
            raise ValueError(f"get_mask: layer with the given name '{name}' not found")
        mask = self.state[name].get("mask", None)
        if mask is None:
            raise ValueError(f"get_mask: shape of the mask of '{name}' unknown, call layer() routine at least once "
                             "to infer mask")
        return mask

    # ------------------------------------------------------------------ masks
    def step(self):
        """Compute every layer's mask from its aggregated inputs, then forget them."""
        missing = [name for name, group in self.data_groups.items() if "data" not in group]
        if missing:
            raise RuntimeError(f"ActivationSparsifier.step: no inputs were aggregated for {missing} since the last "
                               "step; run the model forward first")
        with no_grad():
            for name, group in self.data_groups.items():
                self.update_mask(name, group["data"], group)
                group.pop("data")

    def update_mask(self, name, data, configs):
        """``mask.data = mask_fn(reduce_fn(data), **sparse_config)`` (per feature with ``features``)."""
        mask = self.get_mask(name)
        sparse_config, reduce_fn, mask_fn = configs["sparse_config"], configs["reduce_fn"], configs["mask_fn"]
        if configs["features"] is None:
            mask.data = mask_fn(reduce_fn(data), **sparse_config)
        else:
            for i in range(len(configs["features"])):
                mask[i].data = mask_fn(reduce_fn(data[i]), **sparse_config)

    def squash_mask(self, attach_sparsify_hook=True, **kwargs):
        """Remove the aggregate hooks and (by default) attach the sparsify hooks."""
        for name, group in self.data_groups.items():
            group.pop("hook").remove()
            group["hook_state"] = "None"
            if attach_sparsify_hook:
                group["hook"] = group["layer"].register_forward_pre_hook(self._sparsify_hook(name))
            group["hook_state"] = "sparsify"

    # ------------------------------------------------------------------ state
    def _get_serializable_data_groups(self):
        return {name: {k: v for k, v in group.items() if k not in ("hook", "layer")}
                for name, group in self.data_groups.items()}

    @staticmethod
    def _convert_mask(states, sparse_coo=True):
        """A deep copy of ``states`` with the masks (or mask lists) sparse COO or dense."""
        def convert(m):
            return m.to_sparse_coo() if sparse_coo else m.to_dense()

        states = copy.deepcopy(states)
        for state in states.values():
            mask = state["mask"]
            if mask is not None:
                state["mask"] = [convert(m) for m in mask] if isinstance(mask, list) else convert(mask)
        return states

    def state_dict(self):
        """``{"state": masks (sparse COO), "data_groups": settings without hooks and layers,
        "defaults": ...}``."""
        return {"state": self._convert_mask(self.state), "data_groups": self._get_serializable_data_groups(),
                "defaults": self.defaults}

    def load_state_dict(self, state_dict):
        """Restore masks and settings, and attach to each layer the hook it had."""
        self.__set_state__({"state": state_dict["state"], "data_groups": state_dict["data_groups"],
                            "defaults": state_dict["defaults"]})

    def __get_state__(self):
        return {"defaults": self.defaults, "state": self._convert_mask(self.state),
                "data_groups": self._get_serializable_data_groups()}

    def __set_state__(self, state):
        data_groups = copy.deepcopy(dict(state["data_groups"]))
        layers = {name: fqn_to_module(self.model, name) for name in data_groups}
        for name, layer in layers.items():
            if layer is None:
                raise AssertionError(f"load_state_dict: layer {name} not found in the model")
        for group in self.data_groups.values():  # this sparsifier's own hooks go first
            if group.get("hook") is not None:
                group["hook"].remove()
        self.defaults = state["defaults"]
        self.state = defaultdict(dict, self._convert_mask(state["state"], sparse_coo=False))
        self.data_groups = defaultdict(dict, data_groups)
        for name, group in self.data_groups.items():
            group["layer"] = layers[name]
            if group.get("hook_state") == "aggregate":
                group["hook"] = layers[name].register_forward_pre_hook(self._aggregate_hook(name))
            elif group.get("hook_state") == "sparsify":
                group["hook"] = layers[name].register_forward_pre_hook(self._sparsify_hook(name))

    def __repr__(self):
        lines = [self.__class__.__name__ + " ("]
        for name, group in self.data_groups.items():
            lines += ["\tData Group", f"\t    name: {name}"]
            lines += [f"\t    {key}: {group[key]}" for key in sorted(group)
                      if key not in ("data", "hook", "reduce_fn", "mask_fn", "aggregate_fn")]
        return "\n".join(lines) + "\n)" if self.data_groups else lines[0] + ")"
