"""``lucid.random`` (``torch.random``): the global generator, its seed and state, and ``fork_rng``.

The generator functions themselves live in ``lucid/ops/random.py`` and are also at the top
level (``lucid.manual_seed`` ...); this module is the namespace PyTorch code imports them from.
"""
from __future__ import annotations

import contextlib

from .ops.random import (Generator, all_rng_states, default_generator, get_rng_state, initial_seed,
                         manual_seed, seed, set_all_rng_states, set_rng_state)

__all__ = ["Generator", "default_generator", "fork_rng", "get_rng_state", "initial_seed", "manual_seed", "seed",
           "set_rng_state"]


@contextlib.contextmanager
def fork_rng(devices=None, enabled=True, _caller="fork_rng", _devices_kw="devices", device_type="cuda"):
    """Run a block with the random generators forked: on exit their states are restored.

    Draws inside the block do not change the draws after it. The CPU generator is restored
    exactly; every device generator in use is forked too (``devices`` is accepted for
    PyTorch's signature and checked, but all of them are restored). As for checkpointing
    (README, "Differences from PyTorch"), a device stream after the block goes on from a
    new seed fixed by ``lucid.manual_seed``, so runs stay reproducible.

    Parameters
    ----------
    devices : iterable of int, optional
        Device indices (PyTorch forks only those).
    enabled : bool
        ``False`` makes this a no-op.

    Examples
    --------
    >>> import lucid
    >>> _ = lucid.manual_seed(0)
    >>> with lucid.random.fork_rng():
    ...     inside = lucid.rand(2)
    >>> lucid.equal(inside, lucid.rand(2))
    True
    """
    if devices is not None:
        devices = list(devices)
        for d in devices:
            if isinstance(d, bool) or not isinstance(d, int):
                raise TypeError(f"{_caller}: {_devices_kw} must be device indices (ints), got {d!r}")
    if not enabled:
        yield
        return
    states = all_rng_states()
    try:
        yield
    finally:
        set_all_rng_states(states)
