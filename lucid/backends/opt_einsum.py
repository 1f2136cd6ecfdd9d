"""``lucid.backends.opt_einsum`` (``torch.backends.opt_einsum``): how ``lucid.einsum`` orders
its contractions.

PyTorch contracts left to right unless the ``opt_einsum`` package is installed. lucid needs no
package: its einsum is one primitive whose NumPy kernel runs ``numpy.einsum(...,
optimize=True)``, NumPy's own greedy path search (the algorithm opt_einsum's "greedy" is),
for three or more operands or large ones, and the direct loop otherwise. So the answer is
always available, enabled, ``"greedy"``; the flags can be set (checked as PyTorch checks them)
but do not change that choice.
"""
from __future__ import annotations

import contextlib

enabled = True
strategy = "greedy"


def is_available() -> bool:
    """True: lucid's einsum has a contraction-path optimiser (NumPy's, built in).

    Examples
    --------
    >>> import lucid
    >>> lucid.backends.opt_einsum.is_available(), lucid.backends.opt_einsum.strategy
    (True, 'greedy')
    """
    return True


def get_opt_einsum():
    """None: lucid does not use the ``opt_einsum`` package (NumPy's path search stands in)."""
    return None


def set_flags(_enabled=None, _strategy=None):
    """Record ``enabled`` / ``strategy``; returns the previous pair."""
    global enabled, strategy
    previous = (enabled, strategy)
    if _strategy is not None and _strategy not in ("auto", "greedy", "optimal"):
        raise ValueError(f"set_flags: `strategy` must be one of the following: [auto, greedy, optimal] but is {_strategy}")
    if _enabled is not None:
        enabled = bool(_enabled)
    if _strategy is not None:
        strategy = _strategy
    return previous


@contextlib.contextmanager
def flags(enabled=None, strategy=None):
    """``with flags(...):`` sets the flags for the block and restores them after it."""
    previous = set_flags(enabled, strategy)
    try:
        yield
    finally:
        set_flags(*previous)
