"""``lucid.Size``: the tuple subclass ``Tensor.shape`` and ``Tensor.size()`` return."""
from __future__ import annotations


class Size(tuple):
    """A tensor's shape: a tuple of ints with ``numel()``.

    Slicing and concatenation keep the type. It prints as a plain tuple, ``(2, 3)``, not
    as PyTorch's ``torch.Size([2, 3])``: shapes read as NumPy's do (README, "Differences
    from PyTorch").

    Examples
    --------
    >>> import lucid
    >>> s = lucid.zeros(2, 3).shape
    >>> s, type(s).__name__, s == (2, 3), s.numel(), type(s[1:]).__name__
    ((2, 3), 'Size', True, 6, 'Size')
    """

    __slots__ = ()

    def __new__(cls, sizes=()):
        try:
            vals = tuple(int(s.__index__()) for s in sizes)
        except (AttributeError, TypeError):
            raise TypeError(f"Size: expected a sequence of ints, got {sizes!r}") from None
        return tuple.__new__(cls, vals)

    def __getitem__(self, item):
        out = tuple.__getitem__(self, item)
        return tuple.__new__(Size, out) if isinstance(item, slice) else out

    def __add__(self, other):
        return tuple.__new__(Size, tuple.__add__(self, tuple(other)))

    def __radd__(self, other):
        return tuple.__new__(Size, tuple(other) + tuple(self))

    def __mul__(self, n):
        return tuple.__new__(Size, tuple.__mul__(self, n))

    __rmul__ = __mul__

    def __reduce__(self):
        return (Size, (tuple(self),))

    def numel(self) -> int:
        """The number of elements of a tensor of this shape."""
        n = 1
        for s in self:
            n *= s
        return n


_CACHE: dict = {}


def as_size(shape: tuple) -> Size:
    """The (cached) :class:`Size` for an ndarray's shape tuple — ``Tensor.shape``'s hot path."""
    s = _CACHE.get(shape)
    if s is None:
        if len(_CACHE) > 4096:  # many distinct shapes: start over rather than grow forever
            _CACHE.clear()
        s = _CACHE[shape] = tuple.__new__(Size, shape)
    return s
