"""``lucid.distributed.utils`` (``torch.distributed.utils``): helpers PyTorch's data-parallel
wrappers import by their private names (PyTorch's ``__all__`` here is empty).

Examples
--------
>>> import lucid
>>> from lucid.distributed.utils import _apply_to_tensors
>>> _apply_to_tensors(lambda t: t * 2, {"a": [lucid.tensor(1.0), 3]})["a"][0].item()
2.0
"""
from __future__ import annotations

import dataclasses

from .._core.tensor import Tensor

__all__ = []


def _p_assert(cond, s, raise_assertion_error=True):
    """Assert ``cond`` with message ``s``; prints the message first (it may come from a rank
    whose traceback is lost), and raises ``AssertionError`` when asked."""
    if not cond:
        print(s)
        if raise_assertion_error:
            raise AssertionError(s)


def _apply_to_tensors(fn, container):
    """``fn`` applied to every Tensor in nested lists, tuples, dicts, sets and dataclasses."""
    def apply(x):
        if isinstance(x, Tensor):
            return fn(x)
        if dataclasses.is_dataclass(x) and not isinstance(x, type):
            changes = {f.name: apply(getattr(x, f.name)) for f in dataclasses.fields(x)}
            return dataclasses.replace(x, **changes)
        if isinstance(x, dict):
            return type(x)((k, apply(v)) for k, v in x.items()) if type(x) is not dict else \
                {k: apply(v) for k, v in x.items()}
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # a named tuple
            return type(x)(*(apply(v) for v in x))
        if isinstance(x, (list, tuple, set)):
            return type(x)(apply(v) for v in x)
        return x

    return apply(container)


def _recursive_to(inputs, target_device, use_side_stream_for_tensor_copies=False):
    """Move every Tensor in ``inputs`` to ``target_device``, as PyTorch's: a bare Tensor comes
    back as ``(moved,)``, anything else as ``[moved]``."""
    if inputs is None:
        return []
    moved = _apply_to_tensors(lambda t: t.to(target_device), inputs)
    return (moved,) if isinstance(inputs, Tensor) else [moved]


def _to_kwargs(inputs, kwargs, target_device, use_side_stream_for_tensor_copies=False):
    """``(inputs, kwargs)`` moved to ``target_device``, as two equally long tuples."""
    moved_inputs = list(_recursive_to(inputs, target_device)) if inputs else []
    moved_kwargs = list(_recursive_to(kwargs, target_device)) if kwargs else []
    if len(moved_inputs) < len(moved_kwargs):
        moved_inputs.extend(() for _ in range(len(moved_kwargs) - len(moved_inputs)))
    elif len(moved_kwargs) < len(moved_inputs):
        moved_kwargs.extend({} for _ in range(len(moved_inputs) - len(moved_kwargs)))
    return tuple(moved_inputs), tuple(moved_kwargs)
