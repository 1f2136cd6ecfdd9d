"""``lucid.cuda.random`` (``torch.cuda.random``): the states of the on-GPU generators.

CuPy's generators expose no state, so a CUDA generator's state is the seed it was last
reseeded with (NOTE [Device generator states] in ``lucid/ops/random.py``), stored as 8
little-endian bytes in a uint8 tensor (PyTorch's holds seed and offset in 16). As there,
*taking* a state reseeds the generators in use with the next seed of a sequence fixed by
``lucid.manual_seed`` (deterministic, so runs stay reproducible), and setting it back makes the
later draws repeat those made after the take.
"""
from __future__ import annotations

from .._core import backend as _backend
from . import _cupy, _index, device_count, is_available

__all__ = ["get_rng_state", "get_rng_state_all", "initial_seed", "set_rng_state", "set_rng_state_all"]

_STATE_BYTES = 8


def _encode(seed):
    import lucid

    return lucid.tensor(list(int(seed).to_bytes(_STATE_BYTES, "little")), dtype=lucid.uint8)


def _decode(state, name):
    import lucid

    if not isinstance(state, lucid.Tensor) or state.dtype != lucid.uint8 or tuple(state.shape) != (_STATE_BYTES,):
        got = f"dtype {state.dtype} and shape {tuple(state.shape)}" if isinstance(state, lucid.Tensor) \
            else type(state).__name__
        raise RuntimeError(f"{name}: expected a uint8 tensor of shape ({_STATE_BYTES},) from "
                           f"lucid.cuda.get_rng_state(), got {got}")
    return int.from_bytes(bytes(state.tolist()), "little")


def _take_state(dev):
    """The state of ``dev``'s generator (made now if none is in use), moving every device
    generator in use on to its next seed (NOTE [Device generator states])."""
    from ..ops import random as _random

    _random._device_rng(dev)
    return _encode(_random.device_rng_states()[dev])


def _restore_state(dev, state, name):
    from ..ops import random as _random

    seed = _decode(state, name)
    _random._DEVICE_RNG[dev] = _random._make_device_rng(dev, seed)


def get_rng_state(device="cuda"):
    """The state of the CUDA generator of ``device``, for :func:`set_rng_state` (raises without
    a GPU, as in PyTorch).

    Taking it moves that generator on to a new seed (see the module's docstring): the draws
    after ``set_rng_state(state)`` repeat the draws made just after this call.
    """
    _, i = _index(device if device != "cuda" else None, "get_rng_state")
    return _take_state(_backend.device("cuda", i))


def set_rng_state(new_state, device="cuda") -> None:
    """Restore the CUDA generator of ``device`` from :func:`get_rng_state` (ignored without a
    GPU, as PyTorch ignores it)."""
    if not is_available():
        _decode(new_state, "set_rng_state")
        return
    _, i = _index(device if device != "cuda" else None, "set_rng_state")
    _restore_state(_backend.device("cuda", i), new_state, "set_rng_state")


def get_rng_state_all() -> list:
    """:func:`get_rng_state` of every GPU (``[]`` without one)."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states) -> None:
    """Restore every GPU's generator from :func:`get_rng_state_all`."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def initial_seed() -> int:
    """The seed the CUDA generators were last seeded with (``lucid.manual_seed`` or
    ``lucid.cuda.manual_seed``; GPU ``i``'s generator starts from it plus ``i``)."""
    _cupy("initial_seed")
    from ..ops import random as _random

    return _random._DEVICE_SEED[0]
