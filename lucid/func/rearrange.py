"""``rearrange`` (``torch.func.rearrange``): einops-style reshape / transpose / stack.

Composed from ``stack``, ``reshape`` and ``permute``, so it is differentiable and batchable
through their rules; the pattern is parsed on the host (it is a string).
"""
from __future__ import annotations

import math

from .._core.tensor import Tensor

_API = "rearrange"
_ELLIPSIS = "..."


def _parse_side(text, pattern):
    """A side of the pattern -> list of groups; a group is a list of axis names ('...' included).

    A bare name is a one-axis group, ``(a b)`` a group, ``1`` / ``()`` a unit group (empty list);
    a bare ``...`` is the string ``'...'`` (it stands for several groups), ``(...)`` a group.
    """
    groups, current = [], None
    for tok in text.replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
            if current is not None:
                raise ValueError(f"{_API}: nested parentheses in {pattern!r}")
            current = []
        elif tok == ")":
            if current is None:
                raise ValueError(f"{_API}: imbalanced parentheses in {pattern!r}")
            groups.append(current)
            current = None
        else:
            if tok.isdigit():
                if tok != "1":
                    raise ValueError(f"{_API}: only unnamed axes of size 1 are supported, got {tok!r} in "
                                     f"{pattern!r}")
                if current is None:
                    groups.append([])
                continue
            if tok != _ELLIPSIS and not tok.isidentifier():
                raise ValueError(f"{_API}: invalid axis name {tok!r} in {pattern!r}")
            if current is not None:
                current.append(tok)
            else:
                groups.append(tok if tok == _ELLIPSIS else [tok])
    if current is not None:
        raise ValueError(f"{_API}: imbalanced parentheses in {pattern!r}")
    names = [a for g in groups for a in ([g] if g == _ELLIPSIS else g)]
    for a in set(names):
        if names.count(a) > 1:
            raise ValueError(f"{_API}: axis {a!r} appears more than once on one side of {pattern!r}")
    return groups


def _expand_ellipsis(groups, n_ell):
    """Bare ``...`` -> ``n_ell`` one-axis groups; ``(...)`` -> one group of ``n_ell`` axes."""
    ell = [f"...{i}" for i in range(n_ell)]
    out = []
    for g in groups:
        if g == _ELLIPSIS:
            out.extend([a] for a in ell)
        else:
            out.append([x for a in g for x in (ell if a == _ELLIPSIS else [a])])
    return out


def _bind_lengths(groups, shape, axes_lengths, pattern):
    """Length of every elementary axis of the left side, from the tensor's shape and ``axes_lengths``."""
    lengths = {}
    for g, n in zip(groups, shape):
        unknown = [a for a in g if a not in axes_lengths and not a.startswith(_ELLIPSIS)]
        known = math.prod(axes_lengths.get(a, 1) for a in g if a not in unknown and not a.startswith(_ELLIPSIS))
        if not g:
            if n != 1:
                raise ValueError(f"{_API}: a unit axis in {pattern!r} matches a dimension of size {n}")
            continue
        if len(g) == 1 and g[0].startswith(_ELLIPSIS):
            lengths[g[0]] = n
            continue
        if len(unknown) > 1:
            raise ValueError(f"{_API}: can't infer the sizes of {', '.join(unknown)} at once in {pattern!r}; "
                             "give all but one as keyword arguments")
        if unknown:
            if known == 0 or n % known:
                raise ValueError(f"{_API}: a dimension of size {n} can't be split into {g} with known sizes "
                                 f"{ {a: axes_lengths[a] for a in g if a in axes_lengths} }")
            lengths[unknown[0]] = n // known
        elif known != n:
            raise ValueError(f"{_API}: the sizes given for {g} (product {known}) do not match the dimension "
                             f"of size {n}")
        lengths.update({a: axes_lengths[a] for a in g if a in axes_lengths})
    return lengths


def rearrange(tensor, pattern, **axes_lengths):
    """Reorder, merge and split dimensions by an einops pattern, as ``torch.func.rearrange``.

    Parameters
    ----------
    tensor : Tensor or sequence of Tensors
        A sequence is stacked along a new first dimension first.
    pattern : str
        ``"left -> right"``: axis names, ``(a b)`` groups (merged dims), ``...`` for the
        remaining dims and ``1`` / ``()`` for unit dims.
    **axes_lengths : int
        Sizes of axes that split a dimension (all but one of each group).

    Returns
    -------
    Tensor

    Examples
    --------
    >>> import lucid
    >>> from lucid.func import rearrange
    >>> x = lucid.zeros(2, 6, 4)
    >>> rearrange(x, "b (h w) c -> b c h w", h=2).shape
    (2, 4, 2, 3)
    >>> rearrange(x, "b s c -> (b s) c").shape
    (12, 4)
    >>> rearrange([lucid.ones(3), lucid.zeros(3)], "n d -> d n").shape
    (3, 2)
    """
    from ..ops.shape import permute, reshape, stack

    if isinstance(tensor, (list, tuple)):
        if not tensor or not all(isinstance(t, Tensor) for t in tensor):
            raise TypeError(f"{_API}: expected a Tensor or a non-empty sequence of Tensors")
        tensor = stack(list(tensor))
    elif not isinstance(tensor, Tensor):
        raise TypeError(f"{_API}: expected a Tensor or a sequence of Tensors, got {type(tensor).__name__}")
    if not isinstance(pattern, str) or pattern.count("->") != 1:
        raise ValueError(f"{_API}: the pattern must contain one '->' separator, got {pattern!r}")
    left_s, right_s = pattern.split("->")
    left, right = _parse_side(left_s, pattern), _parse_side(right_s, pattern)
    l_ell = _ELLIPSIS in left
    if any(g == _ELLIPSIS or _ELLIPSIS in g for g in right) and not l_ell:
        raise ValueError(f"{_API}: '...' on the right side but not on the left of {pattern!r}")
    if any(g != _ELLIPSIS and _ELLIPSIS in g for g in left):
        raise ValueError(f"{_API}: '...' can't be inside parentheses on the left side of {pattern!r}")
    shape = tuple(tensor.shape)
    n_ell = len(shape) - (len(left) - 1) if l_ell else 0
    if (l_ell and n_ell < 0) or (not l_ell and len(left) != len(shape)):
        raise ValueError(f"{_API}: the pattern {pattern!r} has {len(left) - l_ell} dimension(s) but the tensor "
                         f"has {len(shape)}")
    l_names = {a for g in left for a in ([g] if g == _ELLIPSIS else g)}
    r_names = {a for g in right for a in ([g] if g == _ELLIPSIS else g)}
    if l_names != r_names:
        raise ValueError(f"{_API}: identifiers only on one side of {pattern!r} (they must be on both): "
                         f"{sorted(l_names ^ r_names)}")
    unused = sorted(set(axes_lengths) - l_names)
    if unused:
        raise ValueError(f"{_API}: axes_lengths {unused} do not appear in {pattern!r}")
    for a, n in axes_lengths.items():
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise ValueError(f"{_API}: the length of axis {a!r} must be a non-negative int, got {n!r}")
    left, right = _expand_ellipsis(left, n_ell), _expand_ellipsis(right, n_ell)
    lengths = _bind_lengths(left, shape, axes_lengths, pattern)
    order = [a for g in left for a in g]
    target = [a for g in right for a in g]
    out = tensor
    flat = tuple(lengths[a] for a in order)
    if flat != shape:
        out = reshape(out, flat)
    perm = tuple(order.index(a) for a in target)
    if perm != tuple(range(len(perm))):
        out = permute(out, perm)
    final = tuple(math.prod(lengths[a] for a in g) for g in right)
    if final != tuple(out.shape):
        out = reshape(out, final)
    return out
