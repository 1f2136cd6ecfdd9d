"""Spatial transformers: ``affine_grid`` and ``grid_sample`` (PyTorch's conventions).

Both are composites: the sampling coordinates are lucid ops on ``grid`` (so the result is
differentiable in the grid as well as the input), the corner indices are constants taken
from their floor, and the values are gathered with ``gather`` on the flattened input.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..._core.backend import runs_on_operands_device
from ..._core.primitive import OpError, autocast_composite
from ...ops._family import _as_tensor
from ._device import const_like

__all__ = ["affine_grid", "grid_sample"]


def _lucid():
    import lucid

    return lucid


def _base(n, align_corners, dtype):
    if align_corners:
        return np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
    return (np.arange(n) * 2.0 + 1.0) / n - 1.0


_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to align_corners=False since 1.3.0. "
                  "Please specify align_corners=True if the old behavior is desired. See the documentation of "
                  "grid_sample for details.")


def _default_align(align_corners):
    """``align_corners=None`` means False, with PyTorch's warning that the default changed."""
    if align_corners is None:
        from ..._runtime import warn_at_caller

        warn_at_caller(_ALIGN_WARNING)
        return False
    return align_corners


def affine_grid(theta, size, align_corners=None):
    """Sampling grid of an affine map: ``theta`` (N, 2, 3) with ``size`` (N, C, H, W) gives
    (N, H, W, 2); ``theta`` (N, 3, 4) with (N, C, D, H, W) gives (N, D, H, W, 3). The last
    dim is (x, y[, z]) in [-1, 1], as :func:`grid_sample` reads it.

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> eye = lucid.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    >>> F.affine_grid(eye, (1, 1, 1, 2), align_corners=True).tolist()
    [[[[-1.0, 0.0], [1.0, 0.0]]]]
    """
    align_corners = _default_align(align_corners)
    size = tuple(int(s) for s in size)
    nsp = len(size) - 2
    if nsp not in (2, 3) or tuple(theta.shape) != (size[0], nsp, nsp + 1):
        raise OpError(f"affine_grid: expected theta of shape (N, 2, 3) for a 4-D size or (N, 3, 4) for a 5-D "
                      f"size, got theta {tuple(theta.shape)} and size {size}")
    if theta.dtype.kind != "f":
        raise ValueError(f"affine_grid: expected a floating point theta, got {theta.dtype}")
    sp = size[2:]
    axes = [_base(m, align_corners, theta.dtype) for m in sp]  # D, H, W order
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [mesh[i] for i in reversed(range(nsp))] + [np.ones(sp)]  # x, y[, z], 1
    base = np.stack(coords, -1).reshape(-1, nsp + 1).astype(theta.dtype)
    # the base grid is made from shapes alone: one explicit copy to theta's device
    grid = const_like(base, theta) @ theta.transpose(1, 2)  # (N, prod(sp), nsp)
    return grid.reshape((size[0],) + sp + (nsp,))


def _unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1.0) * ((size - 1) / 2.0)
    return ((coord + 1.0) * size - 1.0) / 2.0


def _reflect(coord, twice_low, twice_high):
    lucid = _lucid()
    if twice_low == twice_high:
        return coord * 0.0
    lo, span = twice_low / 2.0, (twice_high - twice_low) / 2.0
    d = lucid.abs(coord - lo)
    flips = lucid.floor(d.detach() / span)
    extra = d - flips * span  # fmod(d, span), derivative 1
    even = lucid.remainder(flips, 2.0) == 0
    return lucid.where(even, extra + lo, span - extra + lo)


def _pad_coords(coord, size, padding_mode, align_corners):
    """PyTorch's ``compute_coordinates``: clip for 'border', reflect then clip for 'reflection'."""
    lucid = _lucid()
    if padding_mode == "border":
        return lucid.clamp(coord, 0.0, float(size - 1))
    if padding_mode == "reflection":
        coord = _reflect(coord, 0, 2 * (size - 1)) if align_corners else _reflect(coord, -1, 2 * size - 1)
        return lucid.clamp(coord, 0.0, float(size - 1))
    return coord


def _gather(x_flat, sp, corner, valid):
    """Values of ``x_flat`` (N, C, prod(sp)) at integer points ``corner`` (list of (N, *out)
    int64 tensors, one per spatial dim in D, H, W order); 0 where ``valid`` is False. All in
    lucid ops (no read back on a device; batching rules apply under vmap)."""
    lucid = _lucid()
    n, c = x_flat.shape[:2]
    flat = None
    for ci, m in zip(corner, sp):  # the row-major flat index of the clipped point
        ci = lucid.clamp(ci, 0, m - 1)
        flat = ci if flat is None else flat * m + ci
    out_shape = tuple(flat.shape[1:])
    idx = flat.reshape(n, 1, -1).expand(n, c, -1)
    vals = x_flat.gather(2, idx).reshape((n, c) + out_shape)
    return lucid.where(valid.unsqueeze(1), vals, 0.0)


def _cubic(t, a=-0.75):
    near = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1  # noqa: E731
    far = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # noqa: E731
    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@runs_on_operands_device
@autocast_composite("grid_sample")  # NOTE [Autocast]
def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """Sample ``input`` (N, C, H, W) at the points ``grid`` (N, Ho, Wo, 2) — x then y, in
    [-1, 1] — (or (N, C, D, H, W) at (N, Do, Ho, Wo, 3)), as PyTorch's ``grid_sample``.

    Parameters
    ----------
    mode : {'bilinear', 'nearest', 'bicubic'}
        Interpolation ('bicubic' for 4-D input only).
    padding_mode : {'zeros', 'border', 'reflection'}
        Values outside the input.
    align_corners : bool
        -1 and 1 are the centres of the corner pixels (True) or their outer edges (False,
        the default; left unset, it warns as PyTorch does).

    Differentiable in ``input`` and in ``grid`` (except 'nearest', whose grid gradient is 0).

    Examples
    --------
    >>> import lucid, lucid.nn.functional as F
    >>> x = lucid.tensor([[[[0.0, 1.0], [2.0, 3.0]]]])
    >>> F.grid_sample(x, lucid.zeros(1, 1, 1, 2), align_corners=True).item()
    1.5
    """
    lucid = _lucid()
    input, grid = _as_tensor(input), _as_tensor(grid)
    nsp = input.ndim - 2
    if nsp not in (2, 3) or grid.ndim != nsp + 2 or grid.shape[-1] != nsp or grid.shape[0] != input.shape[0]:
        raise RuntimeError(f"grid_sample: expected input (N, C, H, W) with grid (N, H_out, W_out, 2), or 5-D input "
                           f"with grid (N, D_out, H_out, W_out, 3); got {tuple(input.shape)} and "
                           f"{tuple(grid.shape)}")
    if mode == "bicubic" and nsp != 2:  # PyTorch: RuntimeError, a valid mode on the wrong rank
        raise OpError(f"grid_sample: bicubic interpolation only supports 4-D input, got {tuple(input.shape)}")
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"grid_sample: mode must be 'bilinear', 'nearest' or (4-D only) 'bicubic', got {mode!r}")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"grid_sample: padding_mode must be 'zeros', 'border' or 'reflection', got "
                         f"{padding_mode!r}")
    align = bool(_default_align(align_corners))
    if grid.dtype != input.dtype:  # PyTorch refuses a grid of another dtype rather than casting it
        raise OpError(f"grid_sample: expected grid of the input's dtype {input.dtype}, got {grid.dtype}")
    sp = tuple(input.shape[2:])
    x_flat = input.reshape(input.shape[0], input.shape[1], -1)
    # coordinates in D, H, W order (the grid's last dim is x, y[, z])
    coords = [_unnormalize(grid[..., nsp - 1 - d], sp[d], align) for d in range(nsp)]
    if mode == "bicubic":
        return _bicubic(x_flat, sp, coords, padding_mode, align)
    coords = [_pad_coords(c, m, padding_mode, align) for c, m in zip(coords, sp)]
    if mode == "nearest":
        corner = [lucid.round(c.detach()).to(lucid.int64) for c in coords]  # half to even, as nearbyint
        out = _gather(x_flat, sp, corner, _inside(corner, sp))
        if grid.requires_grad:
            # The output is piecewise constant in the grid: connect the grid with a zero
            # gradient (``where`` never selects it, so the values stay exact), so that
            # ``grid.grad`` is zeros as in PyTorch instead of None.
            # (the condition on out's device: a Python True would be a host array there)
            out = lucid.where(const_like(np.ones((), bool), out), out, grid[..., 0].unsqueeze(1))
        return out
    floors = [lucid.floor(c.detach()) for c in coords]
    fracs = [c - f for c, f in zip(coords, floors)]
    lows = [f.to(lucid.int64) for f in floors]
    out = None
    for bits in itertools.product((0, 1), repeat=nsp):
        corner = [lo + b for lo, b in zip(lows, bits)]
        w = None
        for f, b in zip(fracs, bits):
            wf = f if b else 1.0 - f
            w = wf if w is None else w * wf
        term = _gather(x_flat, sp, corner, _inside(corner, sp)) * w.unsqueeze(1)
        out = term if out is None else out + term
    return out


def _inside(corner, sp):
    ok = None
    for ci, m in zip(corner, sp):
        both = (ci >= 0) & (ci < m)  # on the corners' device
        ok = both if ok is None else ok & both
    return ok


def _bicubic(x_flat, sp, coords, padding_mode, align):
    """16 taps with Keys' weights; each tap's integer coordinate is padded on its own (PyTorch)."""
    lucid = _lucid()
    floors = [lucid.floor(c.detach()) for c in coords]
    ws = [_cubic(c - f) for c, f in zip(coords, floors)]
    lows = [f.to(lucid.int64) for f in floors]
    out = None
    for ky in range(4):
        for kx in range(4):
            corner = [lows[0] - 1 + ky, lows[1] - 1 + kx]
            if padding_mode != "zeros":
                corner = [_pad_int(ci, m, padding_mode, align) for ci, m in zip(corner, sp)]
            term = _gather(x_flat, sp, corner, _inside(corner, sp)) * (ws[0][ky] * ws[1][kx]).unsqueeze(1)
            out = term if out is None else out + term
    return out


def _pad_int(ci, m, padding_mode, align):
    """Integer tap coordinates under 'border' / 'reflection' (constants: no gradient flows)."""
    lucid = _lucid()
    c = ci.to(lucid.float64)
    if padding_mode == "reflection":
        lo2, hi2 = (0, 2 * (m - 1)) if align else (-1, 2 * m - 1)
        if lo2 == hi2:
            c = c * 0.0
        else:
            lo, span = lo2 / 2.0, (hi2 - lo2) / 2.0
            d = lucid.abs(c - lo)
            flips = lucid.floor(d / span)
            extra = lucid.fmod(d, span)
            c = lucid.where(lucid.remainder(flips, 2.0) == 0, extra + lo, span - extra + lo)
    return lucid.clamp(c, 0, m - 1).to(lucid.int64)
