"""Op database entries for behaviour changed by the opsE sweep: grid_sample written in lucid ops
(so its batching rules come from its primitives), and ``fill`` staying in its input's graph."""
import numpy as np

import lucid
import lucid.nn.functional as F
from opinfo import OpInfo, Sample, floats

# ------------------------------------------------------------------ references


def _reflect(c, twice_low, twice_high):
    if twice_low == twice_high:
        return np.zeros_like(c)
    lo, span = twice_low / 2.0, (twice_high - twice_low) / 2.0
    d = np.abs(c - lo)
    flips, extra = np.floor(d / span), np.fmod(d, span)
    return np.where(flips % 2 == 0, extra + lo, span - extra + lo)


def _coord(g, size, padding_mode, align):
    c = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
    if padding_mode == "reflection":
        c = _reflect(c, 0, 2 * (size - 1)) if align else _reflect(c, -1, 2 * size - 1)
    if padding_mode != "zeros":
        c = np.clip(c, 0, size - 1)
    return c


def ref_grid_sample(x, grid, padding_mode="zeros", align_corners=False):
    """Bilinear grid_sample of (N, C, H, W) at (N, Ho, Wo, 2), one output point at a time."""
    n, ch, h, w = x.shape
    out = np.zeros((n, ch) + grid.shape[1:3])
    for b in range(n):
        for i in range(grid.shape[1]):
            for j in range(grid.shape[2]):
                cx = _coord(grid[b, i, j, 0], w, padding_mode, align_corners)
                cy = _coord(grid[b, i, j, 1], h, padding_mode, align_corners)
                x0, y0 = int(np.floor(cx)), int(np.floor(cy))
                for yy, wy in ((y0, 1 - (cy - y0)), (y0 + 1, cy - y0)):
                    for xx, wx in ((x0, 1 - (cx - x0)), (x0 + 1, cx - x0)):
                        if 0 <= yy < h and 0 <= xx < w:
                            out[b, :, i, j] += x[b, :, yy, xx] * wy * wx
    return out


def _grid_samples(rng):
    return [Sample((floats(rng, 1, 2, 3, 4), floats(rng, 1, 2, 3, 2, low=-1.2, high=1.2)),
                   {"padding_mode": pm, "align_corners": ac}, name=f"{pm} align={ac}")
            for pm in ("zeros", "border", "reflection") for ac in (False, True)]


def _fill_samples(rng):
    return [Sample((floats(rng, 2, 3), floats(rng))), Sample((floats(rng, 4), floats(rng)), name="vector")]


OPS = [
    OpInfo("grid_sample_bilinear", lambda x, g, **k: F.grid_sample(x, g, mode="bilinear", **k),
           ref_grid_sample, _grid_samples),
    OpInfo("fill_tensor_value", lambda x, v: lucid.fill(x, v), lambda x, v: np.full_like(x, v), _fill_samples),
]
