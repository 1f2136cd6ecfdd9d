"""``lucid.einops``: einops-style ``rearrange``, ``reduce``, ``repeat`` and ``einsum``, as upstream
Lucid 3 names them (See NOTE [Lucid 3 names]).

``rearrange`` is :func:`lucid.func.rearrange`; ``reduce`` and ``repeat`` move the axes that
disappear (or appear) to one trailing dim (or unit dims) with ``rearrange``, reduce (or expand)
there and ``rearrange`` into the right side, so every transform follows the primitives they use.
"""
from __future__ import annotations

from .func.rearrange import _ELLIPSIS, _parse_side, rearrange

__all__ = ["rearrange", "reduce", "repeat", "einsum"]

_REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def _sides(api, pattern):
    if pattern.count("->") != 1:
        raise ValueError(f"{api}: expected one '->' in the pattern, got {pattern!r}")
    left, right = (s.strip() for s in pattern.split("->"))
    atoms = []
    for side in (left, right):
        groups = _parse_side(side, pattern)
        atoms.append([a for g in groups for a in ([g] if g == _ELLIPSIS else g)])
    return left, right, atoms[0], atoms[1]


def reduce(tensor, pattern, reduction, **axes_lengths):
    """Reduce the axes of the left side that the right side drops (einops' ``reduce``).

    Parameters
    ----------
    tensor : Tensor
        The input.
    pattern : str
        ``"left -> right"`` as in :func:`rearrange`; right's axes must all be on the left.
    reduction : str
        ``"sum"``, ``"mean"``, ``"max"``, ``"min"`` or ``"prod"``.
    **axes_lengths : int
        Sizes of axes that split a dimension.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.arange(24.0).reshape(2, 3, 4)
    >>> lucid.einops.reduce(x, "b h w -> b w", "sum").tolist()[0]
    [12.0, 15.0, 18.0, 21.0]
    >>> lucid.einops.reduce(x, "b (h2 h) w -> b h2", "max", h2=3).shape
    (2, 3)
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"reduce: reduction must be one of {_REDUCTIONS}, got {reduction!r}")
    left, right, latoms, ratoms = _sides("reduce", pattern)
    if any(a not in latoms for a in ratoms):
        raise ValueError(f"reduce: axes {[a for a in ratoms if a not in latoms]} of the right side are not on the "
                         f"left in {pattern!r}")
    gone = [a for a in latoms if a not in ratoms]
    if _ELLIPSIS in gone:
        raise NotImplementedError(f"reduce: reducing over '...' is not supported ({pattern!r}); name the axes")
    kept = " ".join(ratoms)
    flat = rearrange(tensor, f"{left} -> {kept} ({' '.join(gone)})", **axes_lengths)
    if reduction in ("max", "min"):
        flat = flat.amax(-1) if reduction == "max" else flat.amin(-1)
    else:
        flat = getattr(flat, reduction)(-1)
    return rearrange(flat, f"{kept} -> {right}")


def repeat(tensor, pattern, **axes_lengths):
    """Repeat along the axes that appear only on the right side (einops' ``repeat``).

    New axes take their sizes from ``axes_lengths``; a new axis inside a group next to an old one
    (``"h -> (h r)"``) repeats each element, one outside (``"h -> (r h)"``) tiles.

    Examples
    --------
    >>> import lucid
    >>> x = lucid.tensor([1, 2])
    >>> lucid.einops.repeat(x, "h -> (h r)", r=2).tolist()
    [1, 1, 2, 2]
    >>> lucid.einops.repeat(x, "h -> c h", c=3).shape
    (3, 2)
    """
    left, right, latoms, ratoms = _sides("repeat", pattern)
    if any(a not in ratoms for a in latoms):
        raise ValueError(f"repeat: axes {[a for a in latoms if a not in ratoms]} of the left side are missing on "
                         f"the right in {pattern!r}")
    new = [a for a in ratoms if a not in latoms]
    missing = [a for a in new if a not in axes_lengths]
    if missing:
        raise ValueError(f"repeat: give the sizes of the new axes {missing} of {pattern!r} as keyword arguments")
    old_lengths = {a: n for a, n in axes_lengths.items() if a in latoms}
    placed = rearrange(tensor, f"{left} -> {' '.join('1' if a in new else a for a in ratoms)}", **old_lengths)
    n_ell = placed.ndim - (len(ratoms) - (1 if _ELLIPSIS in ratoms else 0))
    sizes = []
    for a in ratoms:
        sizes.extend([-1] * n_ell if a == _ELLIPSIS else [axes_lengths[a] if a in new else -1])
    return rearrange(placed.expand(*sizes), f"{' '.join(ratoms)} -> {right}")


def einsum(equation, *operands):
    """:func:`lucid.einsum` (Lucid 3 also names it here).

    Examples
    --------
    >>> import lucid
    >>> lucid.einops.einsum("ij,jk->ik", lucid.ones(2, 3), lucid.ones(3, 4)).shape
    (2, 4)
    """
    import lucid

    return lucid.einsum(equation, *operands)
