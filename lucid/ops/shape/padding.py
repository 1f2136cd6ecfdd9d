"""pad (constant, reflect, replicate, circular).
"""
from __future__ import annotations

import numpy as np

from ..._core.backend import xp
from ..._core.primitive import autocast_composite, bind, defprim
from ..._core.tensor import _wrap
from .._family import _as_tensor, move_bdim
from .slicing import _clone, _getitem


# ---------------------------------------------------------------------- pad


def _pad_vjp(ns, g, out, x, pad_width, value):
    return ns.getitem(g, key=tuple(slice(l, l + n) for (l, _), n in zip(pad_width, x.shape)))


def _pad_batch(vals, bdims, pad_width, value):
    v = move_bdim(vals[0], bdims[0], 0)
    return bind(pad_p, (v,), {"pad_width": ((0, 0),) + pad_width, "value": value}), 0


pad_p = defprim(
    "pad", lambda x, pad_width, value: xp.pad(x, pad_width, constant_values=value),
    vjp=(_pad_vjp,),
    jvp=lambda ns, primals, tangents, out, pad_width, value:
        bind(pad_p, (tangents[0],), {"pad_width": pad_width, "value": 0}),
    save_inputs=False,
)
pad_p.batch = _pad_batch


def _edge_index(n, lo, hi, mode):
    """Source positions for padding a dim of size ``n`` by ``lo``/``hi`` in a non-constant mode."""
    if mode == "reflect":  # lo/hi may be negative: reflected about the uncropped ends, as PyTorch
        if lo >= n or hi >= n:
            raise RuntimeError(f"pad: padding size should be less than the corresponding input dimension, "
                               f"but got padding ({lo}, {hi}) for a dimension of size {n} (reflect)")
        i = np.abs(np.arange(-lo, n + hi))
        return np.where(i > n - 1, 2 * (n - 1) - i, i)
    if mode == "replicate":  # lo/hi may be negative: each output takes the nearest uncropped position
        return np.clip(np.arange(-lo, n + hi), 0, n - 1)
    if lo > n or hi > n:
        raise RuntimeError(f"pad: padding value causes wrapping around more than once, padding ({lo}, {hi}) "
                           f"for a dimension of size {n} (circular)")
    return np.arange(-lo, n + hi) % n


def pad(input, pad, mode="constant", value=None):
    """Pad the last ``len(pad) // 2`` dims: ``pad = (left_last, right_last, left_prev, right_prev, ...)``.

    Modes as :func:`torch.nn.functional.pad`: ``"constant"`` (with ``value``, default 0;
    negative pads crop), ``"reflect"``, ``"replicate"``, ``"circular"``.

    Parameters
    ----------
    input : Tensor
        The tensor.
    pad : tuple of int
        ``(left, right)`` pairs, starting from the last dim.
    mode : str
        'constant', 'reflect', 'replicate' or 'circular'.
    value : float, optional
        The fill value for 'constant'.

    Examples
    --------
    >>> import lucid
    >>> lucid.pad(lucid.tensor([1.0, 2.0]), (1, 2)).tolist()
    [0.0, 1.0, 2.0, 0.0, 0.0]
    >>> lucid.pad(lucid.tensor([1.0, 2.0, 3.0]), (2, 1), mode="reflect").tolist()
    [3.0, 2.0, 1.0, 2.0, 3.0, 2.0]
    """
    from ..indexing import IDX, getitem_p

    input = _as_tensor(input)
    pad = tuple(int(p) for p in pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim:
        raise RuntimeError(f"pad: padding length must be divisible by 2 and at most 2 * ndim, "
                           f"got {len(pad)} for a tensor of shape {tuple(input.shape)}")
    k = len(pad) // 2
    widths = tuple([(0, 0)] * (input.ndim - k) + [(pad[2 * i], pad[2 * i + 1]) for i in reversed(range(k))])
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise NotImplementedError(f"pad: unknown padding mode '{mode}'")
    if any(n + lo + hi < 0 for (lo, hi), n in zip(widths, input.shape)):
        raise RuntimeError(f"pad: negative padding {pad} crops more than the size of {tuple(input.shape)}")
    if mode in ("reflect", "replicate"):
        _check_edge_input(input, widths, k, mode)
    # As PyTorch: negative pads crop first, then what is left is padded; except 'reflect' and
    # 'replicate', whose kernels read the uncropped input: reflected about its ends, or clamped
    # into it (_edge_index takes signed widths).
    if mode in ("constant", "circular") and any(lo < 0 or hi < 0 for lo, hi in widths):
        crop = tuple(slice(max(-lo, 0), n - max(-hi, 0)) for (lo, hi), n in zip(widths, input.shape))
        if any(c.start > c.stop for c in crop):
            raise RuntimeError(f"pad: negative padding {pad} crops more than the size of {tuple(input.shape)}")
        input = _getitem(input, crop)
        widths = tuple((max(lo, 0), max(hi, 0)) for lo, hi in widths)
    if mode == "constant":
        v = 0 if value is None else value
        if all(w == (0, 0) for w in widths):
            return _clone(input)
        return bind(pad_p, (input,), {"pad_width": widths, "value": v})
    if value not in (None, 0):
        raise RuntimeError(f"pad: padding mode '{mode}' doesn't take in value argument")
    return _edge_pad(mode, k)(input, widths, mode)


def _check_edge_input(input, widths, k, mode):
    """PyTorch's reflection and replication kernels: every dim but a leading batch dim is
    non-empty, and one padded dim at least keeps an element."""
    shape = tuple(input.shape)
    kept = shape[max(input.ndim - k - 1, 0):]  # all but a batch dim
    if 0 in kept:
        raise RuntimeError(f"pad: expected a {k + 1}D or {k + 2}D (batch mode) input with possibly 0 batch size "
                           f"and other non-zero dimensions for {mode} padding, got shape {shape}")
    out = tuple(n + lo + hi for (lo, hi), n in zip(widths[input.ndim - k:], shape[input.ndim - k:]))
    if k and all(o < 1 for o in out):  # PyTorch refuses only when every padded dim would be empty
        raise RuntimeError(f"pad: input of shape {shape} is too small for {mode} padding {widths[input.ndim - k:]}: "
                           f"the calculated output sizes of the padded dims are {out}")


def _edge_pads(input, widths, mode):
    from ..indexing import IDX, getitem_p

    out = input
    for d, (lo, hi) in enumerate(widths):
        if lo or hi:
            idx = _wrap(_edge_index(input.shape[d], lo, hi, mode))
            out = bind(getitem_p, (out, idx), {"key": (slice(None),) * d + (IDX,)})
    return out


def _edge_pad(mode, k, _cache={}):
    """``_edge_pads`` under the name of PyTorch's kernel for ``mode`` over ``k`` dims, as autocast
    knows them (NOTE [Autocast]: reflection_pad1d/2d and replication_pad1d/2d/3d run in float32
    on the CPU; circular padding and reflection_pad3d are in no list)."""
    name = f"{ {'reflect': 'reflection', 'replicate': 'replication'}.get(mode, mode)}_pad{k}d"
    if name not in _cache:
        _cache[name] = autocast_composite(name)(_edge_pads)
    return _cache[name]


__all__ = ['pad']
