"""Op database entries for session 17's opsF functions: the SyncBatchNorm kernels
(lucid/ops/batch_norm_kernels.py), the integer-coded samplers (lucid/ops/torch_aten_more.py) and
the orthogonal polynomials with a tensor degree (lucid/special.py). Composites: the generic
checks differentiate and batch them through their ops."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats, positive

_EPS = 1e-5


def _s(*args, name=""):
    return Sample(tuple(args), {}, name)


def _ch(v):
    return v.reshape(1, -1, 1)


def _np_stats(x):
    mean = x.mean((0, 2))
    return mean, 1 / np.sqrt(((x - _ch(mean)) ** 2).mean((0, 2)) + _EPS)


def _x(rng):
    return [_s(floats(rng, 3, 2, 4))]


def _np_gather(mean, invstd, counts):
    var = invstd ** -2 - _EPS
    n = counts.sum()
    gm = (counts[:, None] * mean).sum(0) / n
    gv = (counts[:, None] * (var + (mean - gm) ** 2)).sum(0) / n
    return gm, 1 / np.sqrt(gv + _EPS)


def _np_backward_elemt(dy, x, mean, invstd, w, sum_dy, sum_dy_xmu, n):
    xmu = x - _ch(mean)
    return (dy - _ch(sum_dy / n) - xmu * _ch(invstd ** 2 * sum_dy_xmu / n)) * _ch(invstd * w)


_COUNTS = np.array([8.0, 5.0])

BATCH_NORM = [
    OpInfo(f"torch.batch_norm_stats_{k}", lambda x, k=k: lucid.batch_norm_stats(x, _EPS)[k],
           lambda x, k=k: _np_stats(x)[k], _x) for k in range(2)
] + [
    OpInfo("torch.batch_norm_elemt",
           lambda x, w, b, m, s: lucid.batch_norm_elemt(x, w, b, m, s, _EPS),
           lambda x, w, b, m, s: (x - _ch(m)) * _ch(s * w) + _ch(b),
           lambda rng: [_s(floats(rng, 3, 2, 4), floats(rng, 2), floats(rng, 2), floats(rng, 2), positive(rng, 2))]),
] + [
    OpInfo(f"torch.batch_norm_gather_stats_with_counts_{k}",
           lambda x, m, s, k=k: lucid.batch_norm_gather_stats_with_counts(
               x, m, s, None, None, 0.1, _EPS, lucid.tensor(_COUNTS, device=m.device))[k],
           lambda x, m, s, k=k: _np_gather(m, s, _COUNTS)[k],
           lambda rng: [_s(floats(rng, 3, 2, 4), floats(rng, 2, 2), positive(rng, 2, 2, low=0.5, high=1.5))])
    for k in range(2)
] + [
    OpInfo(f"torch.batch_norm_backward_reduce_{k}",
           lambda dy, x, m, s, w, k=k: lucid.batch_norm_backward_reduce(dy, x, m, s, w, True, True, True)[k],
           lambda dy, x, m, s, w, k=k: [dy.sum((0, 2)), (dy * (x - _ch(m))).sum((0, 2)),
                                        (dy * (x - _ch(m))).sum((0, 2)) * s, dy.sum((0, 2))][k],
           lambda rng: [_s(floats(rng, 3, 2, 4), floats(rng, 3, 2, 4), floats(rng, 2), positive(rng, 2),
                           floats(rng, 2))])
    for k in range(4)
] + [
    OpInfo("torch.batch_norm_backward_elemt",
           lambda dy, x, m, s, w, a, b: lucid.batch_norm_backward_elemt(
               dy, x, m, s, w, a, b, lucid.tensor([7, 5], dtype=lucid.int32, device=dy.device)),
           lambda dy, x, m, s, w, a, b: _np_backward_elemt(dy, x, m, s, w, a, b, 12.0),
           lambda rng: [_s(floats(rng, 3, 2, 4), floats(rng, 3, 2, 4), floats(rng, 2), positive(rng, 2),
                           floats(rng, 2), floats(rng, 2), floats(rng, 2))]),
] + [
    OpInfo(f"torch.batch_norm_update_stats_{k}", lambda x, k=k: lucid.batch_norm_update_stats(x, None, None, 0.1)[k],
           lambda x, k=k: (x.mean((0, 2)), x.var((0, 2)))[k], _x) for k in range(2)
]


# ------------------------------------------------------------------ samplers
def _np_bilinear(img, grid):
    """Bilinear sampling, align_corners=True, points inside the image: (N, C, H, W), (N, Ho, Wo, 2)."""
    n, c, h, w = img.shape
    px, py = (grid[..., 0] + 1) / 2 * (w - 1), (grid[..., 1] + 1) / 2 * (h - 1)
    x0, y0 = np.floor(px).astype(int), np.floor(py).astype(int)
    fx, fy = px - x0, py - y0
    x1, y1 = np.minimum(x0 + 1, w - 1), np.minimum(y0 + 1, h - 1)
    out = np.empty((n, c) + grid.shape[1:3])
    for b in range(n):
        v = img[b]
        out[b] = (v[:, y0[b], x0[b]] * (1 - fx[b]) * (1 - fy[b]) + v[:, y0[b], x1[b]] * fx[b] * (1 - fy[b])
                  + v[:, y1[b], x0[b]] * (1 - fx[b]) * fy[b] + v[:, y1[b], x1[b]] * fx[b] * fy[b])
    return out


def _grid_samples(rng):
    # points strictly inside cells (no knot: the bilinear weights are smooth there)
    cells = rng.integers(0, 2, size=(2, 2, 3, 2)) + rng.uniform(0.2, 0.8, size=(2, 2, 3, 2))
    grid = cells / 3 * 2 - 1  # 4 pixels per side, align_corners=True: pixel i at -1 + 2 i / 3
    return [_s(floats(rng, 2, 2, 4, 4), grid)]


def _np_affine_grid(theta, h, w):
    xs, ys = np.linspace(-1, 1, w), np.linspace(-1, 1, h)
    base = np.stack(np.broadcast_arrays(xs[None, :], ys[:, None], np.ones((h, w))), -1)  # (H, W, 3)
    return np.einsum("hwk,nik->nhwi", base, theta)


SAMPLERS = [
    OpInfo("torch.grid_sampler", lambda x, g: lucid.grid_sampler(x, g, 0, 0, True), _np_bilinear, _grid_samples),
    OpInfo("torch.grid_sampler_2d", lambda x, g: lucid.grid_sampler_2d(x, g, 0, 1, True), _np_bilinear,
           _grid_samples),
    OpInfo("torch.affine_grid_generator", lambda t: lucid.affine_grid_generator(t, (2, 1, 3, 4), True),
           lambda t: _np_affine_grid(t, 3, 4), lambda rng: [_s(floats(rng, 2, 2, 3))]),
]


# ------------------------------------------------------------------ polynomials with a tensor degree
def _np_legendre(x, n):
    from numpy.polynomial import legendre

    return np.array([legendre.legval(v, [0] * int(k) + [1]) for v, k in zip(x.ravel(), np.broadcast_to(n, x.shape)
                                                                               .ravel())]).reshape(x.shape)


_DEGREES = np.array([0, 3, 1, 2, 4])

POLYNOMIALS = [
    OpInfo("special.legendre_polynomial_p_tensor_n",
           lambda x: lucid.special.legendre_polynomial_p(x, lucid.tensor(_DEGREES, device=x.device)),
           lambda x: _np_legendre(x, _DEGREES), lambda rng: [_s(floats(rng, 2, 5))]),
]

OPS = BATCH_NORM + SAMPLERS + POLYNOMIALS
