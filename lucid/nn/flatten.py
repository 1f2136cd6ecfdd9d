"""``Flatten`` and ``Unflatten``."""
from __future__ import annotations

from .module import Module

__all__ = ["Flatten", "Unflatten"]


class Flatten(Module):
    """Flatten dims ``start_dim..end_dim`` into one (defaults keep the batch dim).

    Parameters
    ----------
    start_dim : int
        First dim to flatten (default 1).
    end_dim : int
        Last dim to flatten (default -1).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Flatten()(lucid.zeros(2, 3, 4)).shape
    (2, 12)
    """

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        nd = input.ndim
        # an int test, so fx tracing (where ndim is a Proxy) records the flatten as PyTorch does
        if type(nd) is int and self.start_dim % max(nd, 1) > self.end_dim % max(nd, 1):  # (lucid.flatten itself lets this through)
            raise RuntimeError(f"Flatten: flatten() has invalid args: start_dim cannot come after end_dim "
                               f"(start_dim={self.start_dim}, end_dim={self.end_dim}, input of {input.ndim} dims)")
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Expand dim ``dim`` into ``unflattened_size``.

    Parameters
    ----------
    dim : int
        The dim to expand.
    unflattened_size : tuple of int
        Its new shape (product equal to its size).

    Examples
    --------
    >>> import lucid, lucid.nn as nn
    >>> nn.Unflatten(1, (3, 4))(lucid.zeros(2, 12)).shape
    (2, 3, 4)
    """

    def __init__(self, dim, unflattened_size):
        super().__init__()
        # kept as given (list, tuple or Size), as PyTorch's repr shows it
        if not isinstance(unflattened_size, (tuple, list)):
            raise TypeError(f"Unflatten: unflattened_size must be a tuple of ints, "
                            f"but found type {type(unflattened_size).__name__}")
        for i, n in enumerate(unflattened_size):
            if not isinstance(n, int):
                raise TypeError(f"Unflatten: unflattened_size must be tuple of ints, "
                                f"but found element of type {type(n).__name__} at pos {i}")
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self):
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"
