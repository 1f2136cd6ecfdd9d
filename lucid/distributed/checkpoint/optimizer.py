"""``load_sharded_optimizer_state_dict`` (PyTorch's ``torch.distributed.checkpoint.optimizer``):
read an optimizer state saved by parameter names, laid out like the model's parameters."""
from __future__ import annotations

__all__ = ["load_sharded_optimizer_state_dict"]


def _insert(root, path, value):
    """Put ``value`` at ``path`` (str keys make dicts, int keys lists) under ``root``."""
    node = root
    for here, nxt in zip(path[:-1], path[1:]):
        child = node[here] if isinstance(node, list) and here < len(node) else (
            node.get(here) if isinstance(node, dict) else None)
        if child is None:
            child = [] if isinstance(nxt, int) else {}
            if isinstance(node, list):
                node.extend([None] * (here + 1 - len(node)))
            node[here] = child
        node = child
    last = path[-1]
    if isinstance(node, list):
        node.extend([None] * (last + 1 - len(node)))
    node[last] = value


def load_sharded_optimizer_state_dict(model_state_dict, optimizer_key, storage_reader, planner=None):
    """The optimizer state saved under ``optimizer_key``, each state tensor laid out as its
    parameter in ``model_state_dict`` (a DTensor's placements; a plain tensor whole).

    The checkpoint must name the state by parameter names (``get_optimizer_state_dict``,
    ``FSDP.optim_state_dict``): ``<optimizer_key>.state.<parameter name>.<state name>``.

    Returns
    -------
    dict
        ``{optimizer_key: {"state": ..., "param_groups": ...}}``, ready for
        ``set_optimizer_state_dict``/``FSDP.optim_state_dict_to_load``.

    Examples
    --------
    >>> from lucid.distributed.checkpoint.optimizer import load_sharded_optimizer_state_dict
    >>> sd = load_sharded_optimizer_state_dict(model.state_dict(), "optim",
    ...                                        dcp.FileSystemReader(path))    # doctest: +SKIP
    """
    from ... import zeros
    from ._save_load import _NoCheckpointId, load
    from .planner import _np_dtype

    if storage_reader is None:
        raise _NoCheckpointId("load_sharded_optimizer_state_dict: pass a storage_reader")
    meta = storage_reader.read_metadata().state_dict_metadata
    out = {}
    for entry in meta.values():
        path = entry["path"]
        if not path or path[0] != optimizer_key:
            continue
        value = None
        if entry["kind"] == "tensor":
            shape, dtype = tuple(entry["shape"]), _np_dtype(entry["dtype"])
            like = model_state_dict.get(path[2]) if len(path) == 4 and path[1] == "state" else None
            value = _like(like, shape, dtype) if like is not None else zeros(shape, dtype=dtype)
        _insert(out, path, value)
    load(out, storage_reader=storage_reader, planner=planner)
    return out


def _like(param, shape, dtype):
    """A zero tensor of ``shape`` placed as ``param`` when it is a DTensor of that shape."""
    from ... import zeros

    if type(param).__name__ == "DTensor" and tuple(param.shape) == shape:
        from ..tensor import zeros as dzeros

        return dzeros(*shape, device_mesh=param.device_mesh, placements=param.placements, dtype=dtype)
    return zeros(shape, dtype=dtype)
