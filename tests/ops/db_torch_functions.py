"""Op database entries for PyTorch's top-level functions (lucid/ops/torch_functions.py).

Legacy linear algebra uses well-conditioned inputs: ``wellcond`` for solves, SPD matrices
through ``_spd`` for Cholesky factors, matrices with separated singular values for svd, and
rows scaled apart so LU's pivoting is decided by clear margins. The deprecation warnings
PyTorch gives (and Lucid repeats) are silenced here; tests/surface checks them.
"""
import warnings

import numpy as np
import scipy.linalg as sl

import lucid
from db_linalg_extra import pivoted
from opinfo import OpInfo, Sample, away_from_ties, floats, positive, svd_gauge


def _quiet(fn):
    def run(*args, **kwargs):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            return fn(*args, **kwargs)

    return run


def _s(*args, name="", **kwargs):
    return Sample(tuple(args), kwargs, name)


def _mT(a):
    return np.swapaxes(a, -1, -2)


def wellcond(rng, *shape):
    n = shape[-1]
    return floats(rng, *shape) * 0.5 + n * np.eye(n)


def svd_input(rng, *shape, vals=(3.0, 2.0, 1.2, 0.5)):
    *batch, m, n = shape
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal(tuple(batch) + (m, k)))
    v, _ = np.linalg.qr(rng.standard_normal(tuple(batch) + (n, k)))
    return np.einsum("...ij,j,...kj->...ik", u, np.asarray(vals[:k]), v)


def _spd(x):
    return x @ _mT(x) + x.shape[-1] * np.eye(x.shape[-1])


def _spd_t(x):
    return x @ x.mT + x.shape[-1] * lucid.eye(x.shape[-1], dtype=x.dtype, device=x.device)


def _lower(rng, *shape):
    """A Cholesky-like factor: lower triangular with a diagonal well away from zero."""
    n = shape[-1]
    return np.tril(floats(rng, *shape) * 0.5) + np.eye(n) * 2.0


def _ints(rng, *shape, high=4):
    return rng.integers(0, high, size=shape).astype(np.int64)


# ------------------------------------------------------------------ references


def _np_tensor_split(x, spec, dim=0):
    return tuple(np.array_split(x, spec, axis=dim))


def _np_index_reduce(x, dim, index, src, reduce, include_self=True):
    out = np.moveaxis(x.copy(), dim, 0)
    s = np.moveaxis(src, dim, 0)
    fn = {"prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}[reduce]
    for row in set(index.tolist()):
        parts = [s[i] for i in range(len(index)) if index[i] == row]
        if include_self:
            parts = [out[row]] + parts
        out[row] = fn(np.stack(parts), axis=0)
    return np.moveaxis(out, 0, dim)


def _np_as_strided_scatter(x, src, size, stride, offset=0):
    flat = x.copy().reshape(-1)
    pos = np.arange(flat.size)  # the positions the strided view covers, read through NumPy's as_strided
    idx = np.lib.stride_tricks.as_strided(pos[offset:], size, [s * pos.itemsize for s in stride])
    flat[idx.reshape(-1)] = src.reshape(-1)
    return flat.reshape(x.shape)


def _np_pad(x, pad, value=0.0):
    widths = [(0, 0)] * x.ndim
    for k in range(len(pad) // 2):
        widths[x.ndim - 1 - k] = (max(pad[2 * k], 0), max(pad[2 * k + 1], 0))
    out = np.pad(x, widths, constant_values=value)
    key = [slice(None)] * x.ndim
    for k in range(len(pad) // 2):
        lo, hi = min(pad[2 * k], 0), min(pad[2 * k + 1], 0)
        key[x.ndim - 1 - k] = slice(-lo, out.shape[x.ndim - 1 - k] + hi)
    return out[tuple(key)]


def _np_conv1d(x, w, b, stride, padding, dilation):
    s, p, d = stride[0], padding[0], dilation[0]
    xp = np.pad(x, ((0, 0), (0, 0), (p, p)))
    k = w.shape[-1]
    n_out = (xp.shape[-1] - d * (k - 1) - 1) // s + 1
    out = np.stack([np.einsum("nck,ock->no", xp[:, :, t * s: t * s + d * (k - 1) + 1: d], w) for t in range(n_out)], -1)
    return out + (0 if b is None else b[None, :, None])


def _np_conv_transpose1d(x, w, b, stride, padding, dilation, output_padding):
    s, p, d, op = stride[0], padding[0], dilation[0], output_padding[0]
    n, c, length = x.shape
    k = w.shape[-1]
    full = (length - 1) * s + d * (k - 1) + 1 + op
    out = np.zeros((n, w.shape[1], full))
    for t in range(length):
        for j in range(k):
            out[:, :, t * s + j * d] += np.einsum("nc,co->no", x[:, :, t], w[:, :, j])
    out = out[:, :, p: full - p] if p else out
    return out + (0 if b is None else b[None, :, None])


def _np_svd(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return u, s, np.conj(_mT(vh))


def _svd_v_gauge(u, s, v):
    u, s, vh = svd_gauge(u, s, np.conj(_mT(v)))
    return u, s, np.conj(_mT(vh))


def _np_lu(a):
    if a.ndim == 2:
        lu_, piv = sl.lu_factor(a)
        return lu_, (piv + 1).astype(np.int32)
    outs = [_np_lu(m) for m in a]
    return np.stack([o[0] for o in outs]), np.stack([o[1] for o in outs])


def _np_lu_unpack(a):
    p, lo, up = sl.lu(a)
    return p, lo, up


def _lu_unpack_case(a):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        LU, piv = lucid.lu(a)
    return tuple(lucid.lu_unpack(LU, piv))


def _lu_solve_case(b, a):
    LU, piv = lucid.linalg.lu_factor(a)
    return _quiet(lucid.lu_solve)(b, LU, piv)


def _np_chol_solve(b, f, upper=False):
    lo = _mT(np.triu(f)) if upper else np.tril(f)
    return np.linalg.solve(lo @ _mT(lo), b)


def _np_tri_solve(b, a, upper=True, transpose=False, unitriangular=False):
    t = np.triu(a) if upper else np.tril(a)
    if unitriangular:
        t = t * (1 - np.eye(a.shape[-1])) + np.eye(a.shape[-1])
    t = _mT(t) if transpose else t
    return np.linalg.solve(t, b), np.broadcast_to(a, np.linalg.solve(t, b).shape[:-2] + a.shape[-2:])


def _np_logdet(a):
    sign, logabs = np.linalg.slogdet(a)
    return np.where(sign < 0, np.nan, logabs)


def _np_histogramdd(x, bins):
    hist, edges = np.histogramdd(x.reshape(-1, x.shape[-1]), bins=bins)
    return (hist,) + tuple(edges)


# ------------------------------------------------------------------ samples


def _index_reduce_samples(reduce):
    def samples(rng):
        return [
            _s(away_from_ties(rng, 3, 2) + 0.5, 0, np.array([0, 2, 0, 1]), away_from_ties(rng, 4, 2) + 0.5, reduce,
               include_self=True),
            _s(away_from_ties(rng, 2, 3) + 0.5, 1, np.array([2, 2]), away_from_ties(rng, 2, 2) + 0.5, reduce,
               include_self=False, name="dim 1, unreached rows"),
        ]

    return samples


def _conv_samples(rng):
    return [_s(floats(rng, 2, 2, 5), floats(rng, 3, 2, 3), floats(rng, 3), [1], [1], [1], False, [0], 1),
            _s(floats(rng, 1, 2, 6), floats(rng, 2, 2, 2), None, [2], [0], [2], False, [0], 1, name="strided")]


def _convt_samples(rng):
    return [_s(floats(rng, 2, 2, 4), floats(rng, 2, 3, 3), floats(rng, 3), [2], [1], [1], True, [1], 1)]


def _two_outputs(fn):
    return lambda *a, **k: tuple(fn(*a, **k))


OPS = [
    # ---------------------------------------------------------- elementwise
    OpInfo("torch.absolute", lucid.absolute, np.abs,
           lambda rng: [_s(floats(rng, 2, 3) + np.sign(floats(rng, 2, 3)) * 0.2)]),
    OpInfo("torch.deg2rad", lucid.deg2rad, np.deg2rad, lambda rng: [_s(floats(rng, 2, 3) * 180), _s(floats(rng))]),
    OpInfo("torch.rad2deg", lucid.rad2deg, np.rad2deg, lambda rng: [_s(floats(rng, 3))]),
    OpInfo("torch.clamp_min", lambda x, m: lucid.clamp_min(x, m), np.maximum,
           lambda rng: [_s(floats(rng, 2, 3), 0.1), _s(floats(rng, 2, 3), floats(rng, 3) * 0.9, name="tensor bound")]),
    OpInfo("torch.clamp_max", lambda x, m: lucid.clamp_max(x, m), np.minimum,
           lambda rng: [_s(floats(rng, 2, 3), -0.1), _s(floats(rng, 3), floats(rng, 2, 3) * 0.9, name="broadcast")]),
    OpInfo("torch.signbit", lucid.signbit, np.signbit,
           lambda rng: [_s(np.array([-0.0, 0.0, -1.5, 2.0, -np.inf, np.nan, -np.nan]))], grad=False),
    # ---------------------------------------------------------- products and norms
    OpInfo("torch.adjoint", lucid.adjoint, lambda x: np.conj(_mT(x)),
           lambda rng: [_s(floats(rng, 2, 3)), _s(floats(rng, 2, 3, 2))]),
    OpInfo("torch.inner", lucid.inner, np.inner,
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 4, 3)), _s(floats(rng, 3), floats(rng, 3)),
                        _s(floats(rng), floats(rng, 2, 2), name="0-d")]),
    OpInfo("torch.chain_matmul", _quiet(lambda a, b, c: lucid.chain_matmul(a, b, c)), lambda a, b, c: a @ b @ c,
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 3, 4), floats(rng, 4, 2))], vmap_in_dims=(0,)),
    OpInfo("torch.cross", _quiet(lambda a, b, dim=None: lucid.cross(a, b, dim)),
           lambda a, b, dim=None: np.cross(a, b, axis=[k for k, n in enumerate(np.broadcast_shapes(a.shape, b.shape))
                                                      if n == 3][0] if dim is None else dim),
           lambda rng: [_s(floats(rng, 3, 2), floats(rng, 3, 2), name="dim None picks 0"),
                        _s(floats(rng, 2, 3), floats(rng, 1, 3), dim=1)]),
    OpInfo("torch.frobenius_norm", _quiet(lambda x, dim: lucid.frobenius_norm(x, dim)),
           lambda x, dim: np.sqrt((x ** 2).sum(axis=dim if dim != () else None)),
           lambda rng: [_s(floats(rng, 2, 3), (0, 1)), _s(floats(rng, 2, 3, 2), (1,)), _s(floats(rng, 2, 2), ())]),
    OpInfo("torch.nuclear_norm", _quiet(lambda x, *dim: lucid.nuclear_norm(x, *dim)),
           lambda x, *dim: np.linalg.svd(np.moveaxis(x, dim[0], (-2, -1)) if dim else x, compute_uv=False).sum(-1),
           lambda rng: [_s(svd_input(rng, 3, 2)), _s(svd_input(rng, 2, 2, 3), name="batched"),
                        _s(np.moveaxis(svd_input(rng, 2, 3, 2), 0, 1), (0, 2), name="dims")]),
    # ---------------------------------------------------------- shapes and splits
    OpInfo("torch.diagflat", lambda x, k=0: lucid.diagflat(x, k), lambda x, k=0: np.diagflat(x, k),
           lambda rng: [_s(floats(rng, 2, 2)), _s(floats(rng, 3), 1), _s(floats(rng, 2), -2)]),
    OpInfo("torch.msort", lucid.msort, lambda x: np.sort(x, axis=0),
           lambda rng: [_s(away_from_ties(rng, 4, 2)), _s(away_from_ties(rng, 3))]),
    OpInfo("torch.trapz", lambda y, x=None, **k: lucid.trapz(y, x, **k),
           lambda y, x=None, dx=1.0, dim=-1: np.trapezoid(y, x=x, dx=dx, axis=dim),
           lambda rng: [_s(floats(rng, 2, 4), dx=0.5), _s(floats(rng, 3, 2), np.sort(floats(rng, 3)), dim=0)]),
    OpInfo("torch.tensor_split", lambda x, spec, dim=0: lucid.tensor_split(x, spec, dim), _np_tensor_split,
           lambda rng: [_s(floats(rng, 7, 2), 3), _s(floats(rng, 2, 5), [1, 3], 1), _s(floats(rng, 4), [3, 1, 9])]),
    OpInfo("torch.split_with_sizes", lambda x, s, dim=0: lucid.split_with_sizes(x, s, dim),
           lambda x, s, dim=0: tuple(np.split(x, np.cumsum(s)[:-1], axis=dim)),
           lambda rng: [_s(floats(rng, 5, 2), [2, 3]), _s(floats(rng, 2, 4), [1, 0, 3], -1)]),
    OpInfo("torch.broadcast_tensors", lambda *t: lucid.broadcast_tensors(*t), lambda *a: tuple(np.broadcast_arrays(*a)),
           lambda rng: [_s(floats(rng, 2, 1), floats(rng, 3)), _s(floats(rng, 1, 2, 1), floats(rng, 3, 1, 2))]),
    OpInfo("torch.unravel_index", lambda i, shape: lucid.unravel_index(i, shape),
           lambda i, shape: tuple(np.asarray(c, dtype=np.int64)
                                  for c in np.unravel_index(i % int(np.prod(shape)), shape)),
           lambda rng: [_s(np.array([[4, 1], [0, 5]]), (3, 2)), _s(np.array([-1, 6, 23]), (2, 3, 4))], grad=False),
    # ---------------------------------------------------------- indexing
    *[OpInfo(f"torch.index_reduce_{r}", lambda x, d, i, s, r, **k: lucid.index_reduce(x, d, i, s, r, **k),
             _np_index_reduce, _index_reduce_samples(r)) for r in ("prod", "mean", "amax", "amin")],
    OpInfo("torch.nonzero_static", lambda x, **k: lucid.nonzero_static(x, **k),
           lambda x, size, fill_value=-1: np.concatenate(
               [np.argwhere(x)[:size], np.full((max(size - np.count_nonzero(x), 0), x.ndim), fill_value)]),
           lambda rng: [_s(np.array([[0.0, 1.5], [2.0, 0.0]]), size=3),
                        _s(np.array([0.0, 1.0, 2.0, 3.0]), size=2, fill_value=7)], grad=False),
    OpInfo("torch.as_strided_scatter", lambda x, s, *a: lucid.as_strided_scatter(x, s, *a), _np_as_strided_scatter,
           lambda rng: [_s(floats(rng, 2, 3), floats(rng, 2), (2,), (3,), 1),
                        _s(floats(rng, 3, 3), floats(rng, 2, 2), (2, 2), (1, 3), 0, name="2-d view")]),
    OpInfo("torch.constant_pad_nd", lambda x, p, v=0.0: lucid.constant_pad_nd(x, p, v), _np_pad,
           lambda rng: [_s(floats(rng, 2, 3), [1, 2], 0.5), _s(floats(rng, 2, 3), [-1, 1, 1, 0], name="crop")]),
    OpInfo("torch.histogramdd", lambda x, b: tuple([lucid.histogramdd(x, b).hist, *lucid.histogramdd(x, b).bin_edges]),
           _np_histogramdd, lambda rng: [_s(floats(rng, 6, 2), [2, 3]), _s(floats(rng, 2, 4, 3), 2)],
           grad=False, vmap=False),
    # ---------------------------------------------------------- conv
    OpInfo("torch.convolution", lambda x, w, b, *a: lucid.convolution(x, w, b, *a),
           lambda x, w, b, st, pd, dl, tr, op, g: _np_conv1d(x, w, b, st, pd, dl), _conv_samples, atol=1e-10),
    OpInfo("torch.convolution_transposed", lambda x, w, b, *a: lucid.convolution(x, w, b, *a),
           lambda x, w, b, st, pd, dl, tr, op, g: _np_conv_transpose1d(x, w, b, st, pd, dl, op), _convt_samples,
           atol=1e-10),
    # ---------------------------------------------------------- legacy linear algebra
    OpInfo("torch.svd", _two_outputs(lucid.svd), _np_svd,
           lambda rng: [_s(svd_input(rng, 3, 2)), _s(svd_input(rng, 2, 2, 3))], atol=1e-8, gauge=_svd_v_gauge),
    OpInfo("torch.svd_complete", lambda a: tuple(lucid.svd(a, some=False))[1],
           lambda a: np.linalg.svd(a, compute_uv=False), lambda rng: [_s(svd_input(rng, 3, 2))]),
    OpInfo("torch.svd_values_only", lambda a: tuple(lucid.svd(a, compute_uv=False)),
           lambda a: (np.zeros(a.shape[:-1] + (a.shape[-2],)), np.linalg.svd(a, compute_uv=False),
                      np.zeros(a.shape[:-2] + (a.shape[-1],) * 2)),
           lambda rng: [_s(svd_input(rng, 3, 2))], out_index=1),
    OpInfo("torch.qr", _quiet(_two_outputs(lucid.qr)),
           lambda a, some=True: tuple(np.linalg.qr(a, "reduced" if some else "complete")),
           lambda rng: [_s(floats(rng, 3, 2)), _s(floats(rng, 2, 3), some=False), _s(floats(rng, 2, 2, 3))], atol=1e-8),
    OpInfo("torch.lu", _quiet(lambda a: tuple(lucid.lu(a, get_infos=True))[:2]), _np_lu,
           lambda rng: [_s(pivoted(rng, 3, 3)), _s(pivoted(rng, 2, 3, 3)), _s(pivoted(rng, 4, 2), name="tall")],
           out_index=0, atol=1e-10),
    OpInfo("torch.lu_unpack", _lu_unpack_case, _np_lu_unpack,
           lambda rng: [_s(pivoted(rng, 3, 3)), _s(pivoted(rng, 4, 2), name="tall"),
                        _s(pivoted(rng, 2, 4), name="wide")],
           atol=1e-10),
    OpInfo("torch.lu_solve", _lu_solve_case, lambda b, a: np.linalg.solve(a, b),
           lambda rng: [_s(floats(rng, 3, 2), pivoted(rng, 3, 3)), _s(floats(rng, 2, 3, 1), pivoted(rng, 2, 3, 3))]),
    OpInfo("torch.cholesky", _quiet(lambda x, upper=False: lucid.cholesky(_spd_t(x), upper)),
           lambda x, upper=False: (lambda c: _mT(c) if upper else c)(np.linalg.cholesky(_spd(x))),
           lambda rng: [_s(floats(rng, 3, 3)), _s(floats(rng, 3, 3), upper=True)]),
    OpInfo("torch.cholesky_solve", lambda b, f, upper=False: lucid.cholesky_solve(b, f, upper), _np_chol_solve,
           lambda rng: [_s(floats(rng, 3, 2), _lower(rng, 3, 3)), _s(floats(rng, 3, 1), _mT(_lower(rng, 3, 3)), True),
                        _s(floats(rng, 2, 3, 1), _lower(rng, 3, 3), name="broadcast")]),
    OpInfo("torch.cholesky_inverse", lambda f, upper=False: lucid.cholesky_inverse(f, upper),
           lambda f, upper=False: _np_chol_solve(np.broadcast_to(np.eye(f.shape[-1]), f.shape), f, upper),
           lambda rng: [_s(_lower(rng, 3, 3)), _s(_mT(_lower(rng, 2, 3, 3)), True)]),
    OpInfo("torch.triangular_solve", _quiet(lambda b, a, *f: tuple(lucid.triangular_solve(b, a, *f))), _np_tri_solve,
           lambda rng: [_s(floats(rng, 3, 2), wellcond(rng, 3, 3)),
                        _s(floats(rng, 3, 2), wellcond(rng, 3, 3), False, True, True),
                        _s(floats(rng, 2, 3, 1), wellcond(rng, 3, 3), True, True, name="broadcast")]),
    OpInfo("torch.logdet", lucid.logdet, _np_logdet,
           lambda rng: [_s(wellcond(rng, 3, 3)), _s(wellcond(rng, 2, 2, 2))]),
    OpInfo("torch.logdet_negative", lucid.logdet, _np_logdet, lambda rng: [_s(np.diag([-1.0, 2.0]))], grad=False),
    OpInfo("torch.det", lucid.det, np.linalg.det, lambda rng: [_s(wellcond(rng, 3, 3))]),
    OpInfo("torch.inverse", lucid.inverse, np.linalg.inv, lambda rng: [_s(wellcond(rng, 2, 3, 3))]),
    OpInfo("torch.slogdet", lambda a: tuple(lucid.slogdet(a)), lambda a: tuple(np.linalg.slogdet(a)),
           lambda rng: [_s(wellcond(rng, 3, 3))], out_index=1),
    OpInfo("torch.matrix_power", lambda a, n: lucid.matrix_power(a, n), np.linalg.matrix_power,
           lambda rng: [_s(wellcond(rng, 3, 3), 3), _s(wellcond(rng, 3, 3), -2)]),
    OpInfo("torch.pinverse", lambda a, *r: lucid.pinverse(a, *r), lambda a, *r: np.linalg.pinv(a, *r),
           lambda rng: [_s(svd_input(rng, 3, 2)), _s(svd_input(rng, 2, 3), 0.1)], atol=1e-8),
    # ---------------------------------------------------------- random (no reference: tests/surface checks the law)
    OpInfo("torch.binomial", lambda n, p: lucid.binomial(n, p), None,
           lambda rng: [_s(positive(rng, 3) * 4, floats(rng, 3) * 0.4 + 0.5)], grad=False, vmap=False),
]
