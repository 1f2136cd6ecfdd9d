"""``lucid.nn.modules.utils``: the argument normalisers PyTorch layers use (``_single``, ``_pair``,
``_triple``, ``_quadruple``, ``_ntuple``, ``_reverse_repeat_tuple``, ``_list_with_default``) and
``consume_prefix_in_state_dict_if_present``.

Examples
--------
>>> from lucid.nn.modules.utils import _pair, _reverse_repeat_tuple
>>> _pair(3), _pair((1, 2))
((3, 3), (1, 2))
>>> _reverse_repeat_tuple((1, 2), 2)
(2, 2, 1, 1)
"""
import collections.abc
from itertools import repeat

__all__ = ["consume_prefix_in_state_dict_if_present"]


def _ntuple(n, name="parse"):
    def parse(x):
        if isinstance(x, collections.abc.Iterable):
            return tuple(x)
        return tuple(repeat(x, n))

    parse.__name__ = name
    return parse


_single = _ntuple(1, "_single")
_pair = _ntuple(2, "_pair")
_triple = _ntuple(3, "_triple")
_quadruple = _ntuple(4, "_quadruple")


def _reverse_repeat_tuple(t, n):
    """``t`` reversed with each element repeated ``n`` times: a layer's padding as ``F.pad`` wants it."""
    return tuple(x for x in reversed(t) for _ in range(n))


def _list_with_default(out_size, defaults):
    """``out_size`` with its ``None`` entries taken from the trailing ``defaults`` (an input's sizes)."""
    if isinstance(out_size, int):
        return out_size
    if len(defaults) <= len(out_size):
        raise ValueError(f"Input dimension should be at least {len(out_size) + 1}")
    return [v if v is not None else d for v, d in zip(out_size, defaults[-len(out_size):])]


def consume_prefix_in_state_dict_if_present(state_dict, prefix):
    """Strip ``prefix`` from the keys of ``state_dict`` (and of its ``_metadata``), in place.

    A checkpoint saved from a ``DataParallel``/``DistributedDataParallel`` wrapper has keys
    ``"module.<name>"``; stripping ``"module."`` lets the bare model load it.

    Parameters
    ----------
    state_dict : dict
        The state dict to edit.
    prefix : str
        The prefix to remove, e.g. ``"module."``.

    Examples
    --------
    >>> from lucid.nn.modules.utils import consume_prefix_in_state_dict_if_present
    >>> sd = {"module.w": 1, "b": 2}
    >>> consume_prefix_in_state_dict_if_present(sd, "module.")
    >>> sorted(sd)
    ['b', 'w']
    """
    for key in list(state_dict.keys()):
        if key.startswith(prefix):
            state_dict[key[len(prefix):]] = state_dict.pop(key)
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        for key in list(metadata.keys()):
            # '' is the wrapper's own entry and stays; 'module' is the model itself
            if len(key) == 0:
                continue
            if key == prefix.replace(".", "") or key.startswith(prefix):
                metadata[key[len(prefix):]] = metadata.pop(key)
