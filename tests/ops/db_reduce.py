"""Op database entries for reductions, scans, softmax and sorting (lucid/ops/reduce/).

Besides the usual forward/grad/jvp/vmap entries, a few entries check a *gradient* against a
closed form (``*_grad_*``: the op is ``func.grad`` of the reduction, so the generic forward
and vmap checks compare it with NumPy): zeros in prod/cumprod, max's first-index selection
on ties, zero-spread std and zero-vector norms.
"""
import numpy as np

import lucid
import lucid.func as F
from opinfo import OpInfo, Sample, away_from_ties, floats, positive


def _ax(dim):
    return dim if dim is None or isinstance(dim, int) else tuple(dim)


def _on_1d(ref):
    """A NumPy reference along one axis that also accepts 0-d inputs (as a length-1 axis)."""
    def wrapped(x, *args, dim=0, **kw):
        if x.ndim == 0:
            out = ref(x.reshape(1), *args, dim=0, **kw)
            return tuple(o.reshape(()) for o in out) if isinstance(out, tuple) else out.reshape(())
        return ref(x, *args, dim=dim, **kw)

    return wrapped


def with_zeros(rng, *shape, count=1):
    """Floats away from 0 with ``count`` exact zeros in each row (last axis)."""
    x = positive(rng, *shape) * rng.choice([-1, 1], size=shape)
    rows = x.reshape(-1, shape[-1])
    for r in rows:
        r[rng.choice(shape[-1], size=count, replace=False)] = 0.0
    return rows.reshape(shape)


# ------------------------------------------------------------ references

def prod_ref(x, dim=None, keepdim=False):
    return np.prod(x, axis=_ax(dim), keepdims=keepdim)


def select_ref(vfn, ifn):
    @_on_1d
    def ref(x, dim=0, keepdim=False):
        return vfn(x, axis=dim, keepdims=keepdim), ifn(x, axis=dim, keepdims=keepdim)

    return ref


def var_ref(x, dim=None, keepdim=False, correction=1, unbiased=None):
    ddof = correction if unbiased is None else int(unbiased)
    return np.var(x, axis=_ax(dim), ddof=ddof, keepdims=keepdim)


def std_ref(x, **kw):
    return np.sqrt(var_ref(x, **kw))


def logsumexp_ref(x, dim=None, keepdim=False):
    if x.ndim == 0:
        return x.copy()
    m = np.max(x, axis=_ax(dim), keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=_ax(dim), keepdims=True)) + m
    return out if keepdim else np.squeeze(out, axis=_ax(dim))


def norm_ref(x, p="fro", dim=None, keepdim=False):
    a, ax = np.abs(x), _ax(dim)
    if p in ("fro", 2):
        return np.sqrt(np.sum(a * a, axis=ax, keepdims=keepdim))
    if p == np.inf:
        return np.max(a, axis=ax, keepdims=keepdim)
    if p == -np.inf:
        return np.min(a, axis=ax, keepdims=keepdim)
    if p == 0:
        return np.sum(a != 0, axis=ax, keepdims=keepdim).astype(x.dtype)
    return np.sum(a ** p, axis=ax, keepdims=keepdim) ** (1.0 / p)


def cum_ref(fn):
    return _on_1d(lambda x, dim=0: fn(x, axis=dim))


def cumext_ref(largest):
    @_on_1d
    def ref(x, dim=0):
        xm = np.moveaxis(x, dim, -1)
        vals, idx = np.empty_like(xm), np.zeros(xm.shape, np.int64)
        for pos in np.ndindex(xm.shape[:-1]):
            best = 0
            for k in range(xm.shape[-1]):
                v = xm[pos + (k,)]
                if (v >= xm[pos + (best,)]) if largest else (v <= xm[pos + (best,)]):
                    best = k
                vals[pos + (k,)], idx[pos + (k,)] = xm[pos + (best,)], best
        return np.moveaxis(vals, -1, dim), np.moveaxis(idx, -1, dim)

    return ref


def softmax_ref(x, dim):
    if x.ndim == 0:
        return np.ones_like(x)
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def log_softmax_ref(x, dim):
    if x.ndim == 0:
        return np.zeros_like(x)
    s = x - np.max(x, axis=dim, keepdims=True)
    return s - np.log(np.sum(np.exp(s), axis=dim, keepdims=True))


def argsort_np(x, dim=-1, descending=False):
    # Stable; descending keeps equal elements in input order (valid without NaNs).
    return np.argsort(-x if descending else x, axis=dim, kind="stable")


def sort_ref(x, dim=-1, descending=False):
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    idx = argsort_np(x, dim, descending)
    return np.take_along_axis(x, idx, dim), idx


def topk_ref(x, k, dim=-1, largest=True, sorted=True):
    if x.ndim == 0:
        return x.copy(), np.zeros((), np.int64)
    idx = np.take(argsort_np(x, dim, largest), np.arange(k), axis=dim)
    return np.take_along_axis(x, idx, dim), idx


# --------------------------------------------- closed-form gradient references

def prod_grad_ref(x):
    """d/dx_i prod(x) = product of the other elements, computed without dividing."""
    flat = x.reshape(-1)
    return np.array([np.prod(np.delete(flat, i)) for i in range(flat.size)]).reshape(x.shape)


def cumprod_grad_ref(x):
    """d/dx_i sum_k cumprod(x)_k along the last axis = sum_{k>=i} prod_{j<=k, j!=i} x_j."""
    out = np.zeros_like(x)
    n = x.shape[-1]
    for pos in np.ndindex(x.shape[:-1]):
        r = x[pos]
        for i in range(n):
            out[pos + (i,)] = sum(np.prod(np.delete(r[:k + 1], i)) for k in range(i, n))
    return out


def max_dim_grad_ref(x):
    """Gradient of max(x, dim=1).values.sum(): one-hot at the FIRST maximum of each row."""
    g = np.zeros_like(x)
    g[np.arange(x.shape[0]), np.argmax(x, axis=1)] = 1.0
    return g


def ties(rng, *shape):
    """Integers in {0, 1, 2} as floats: many ties (for stability and tie-breaking checks)."""
    return rng.integers(0, 3, size=shape).astype(np.float64)


def scalar(rng):
    return np.asarray(floats(rng))


def S(*args, **kw):
    return Sample(args, kw)


OPS = [
    # ---------------------------------------------------------------- prod
    OpInfo("prod", lambda x, **k: lucid.prod(x, **k), prod_ref,
           lambda rng: [S(with_zeros(rng, 2, 3), dim=1), S(floats(rng, 2, 3)), S(with_zeros(rng, 2, 4, count=2), dim=-1),
                        S(floats(rng, 2, 3, 2), dim=(0, 2), keepdim=True), S(with_zeros(rng, 3, 2), dim=0, keepdim=True),
                        S(scalar(rng)), S(floats(rng, 0, 3), dim=0)]),
    OpInfo("prod_grad_zeros", lambda x: F.grad(lambda t: lucid.prod(t))(x), prod_grad_ref,
           lambda rng: [S(with_zeros(rng, 2, 3)), S(with_zeros(rng, 4, count=2)), S(positive(rng, 2, 2))], grad=False),
    # ------------------------------------------------------------ max / min
    OpInfo("max", lambda x: lucid.max(x), np.max,
           lambda rng: [S(away_from_ties(rng, 2, 3)), S(away_from_ties(rng))]),
    OpInfo("max_dim", lambda x, **k: lucid.max(x, **k), select_ref(np.max, np.argmax),
           lambda rng: [S(away_from_ties(rng, 2, 3), dim=1), S(away_from_ties(rng, 3, 2), dim=0, keepdim=True),
                        S(away_from_ties(rng, 2, 3, 2), dim=-1), S(away_from_ties(rng), dim=0)], out_index=0),
    OpInfo("max_dim_grad_ties", lambda x: F.grad(lambda t: lucid.max(t, dim=1).values.sum())(x), max_dim_grad_ref,
           lambda rng: [S(ties(rng, 4, 5)), S(np.ones((2, 3)))], grad=False),
    OpInfo("max_binary", lambda x, y: lucid.max(x, y), np.maximum,
           lambda rng: [S(floats(rng, 2, 3), floats(rng, 3))]),
    OpInfo("min", lambda x: x.min(), np.min, lambda rng: [S(away_from_ties(rng, 2, 3))]),
    OpInfo("min_dim", lambda x, **k: lucid.min(x, **k), select_ref(np.min, np.argmin),
           lambda rng: [S(away_from_ties(rng, 2, 3), dim=-1), S(away_from_ties(rng, 3, 2), dim=0, keepdim=True),
                        S(away_from_ties(rng), dim=-1)], out_index=0),
    OpInfo("min_binary", lambda x, y: lucid.min(x, y), np.minimum, lambda rng: [S(floats(rng, 2, 3), floats(rng, 2, 1))]),
    OpInfo("argmax", lambda x, **k: lucid.argmax(x, **k),
           lambda x, dim=None, keepdim=False: np.argmax(x, axis=dim, keepdims=keepdim),
           lambda rng: [S(away_from_ties(rng, 2, 3)), S(away_from_ties(rng, 2, 3), dim=1),
                        S(away_from_ties(rng, 3, 2), dim=-1, keepdim=True), S(away_from_ties(rng, 2, 3), keepdim=True),
                        S(ties(rng, 3, 4), dim=0)], grad=False),
    OpInfo("argmin", lambda x, **k: x.argmin(**k),
           lambda x, dim=None, keepdim=False: np.argmin(x, axis=dim, keepdims=keepdim),
           lambda rng: [S(away_from_ties(rng, 2, 3)), S(ties(rng, 3, 4), dim=-1, keepdim=True)], grad=False),
    # ------------------------------------------------------------ var / std
    OpInfo("var", lambda x, **k: lucid.var(x, **k), var_ref,
           lambda rng: [S(floats(rng, 2, 3)), S(floats(rng, 2, 3), dim=1, correction=0),
                        S(floats(rng, 2, 3), dim=-1, keepdim=True, unbiased=False),
                        S(floats(rng, 2, 3, 2), dim=(0, 2), correction=2), S(scalar(rng), correction=0)]),
    OpInfo("std", lambda x, **k: x.std(**k), std_ref,
           lambda rng: [S(floats(rng, 2, 3)), S(floats(rng, 2, 3), dim=0, keepdim=True),
                        S(floats(rng, 3, 2), dim=-1, unbiased=False)]),
    OpInfo("std_grad_zero_spread", lambda x: F.grad(lambda t: lucid.std(t, dim=1).sum())(x), lambda x: np.zeros_like(x),
           lambda rng: [S(np.ones((2, 3)))], grad=False),
    # ------------------------------------------------------------ logsumexp
    OpInfo("logsumexp", lambda x, **k: lucid.logsumexp(x, **k), logsumexp_ref,
           lambda rng: [S(floats(rng, 2, 3), dim=1), S(floats(rng, 2, 3), dim=-1, keepdim=True),
                        S(floats(rng, 2, 3, 2), dim=(0, 2)), S(floats(rng, 3) * 5 + 700.0, dim=0), S(scalar(rng), dim=0)]),
    OpInfo("logsumexp_huge", lambda x: lucid.logsumexp(x, dim=1), lambda x: logsumexp_ref(x, 1),
           lambda rng: [S(np.array([[1e4, 1e4 - 1.0, -1e4], [-1e4, -1e4, -np.inf]]))], grad=False),
    # ----------------------------------------------------------------- norm
    OpInfo("norm", lambda x, **k: lucid.norm(x, **k), norm_ref,
           lambda rng: [S(floats(rng, 2, 3)), S(floats(rng, 2, 3), p=1, dim=1), S(floats(rng, 2, 3), p=float("inf"), dim=-1),
                        S(floats(rng, 3, 2), p=-float("inf"), dim=0, keepdim=True), S(floats(rng, 2, 3), p=3, dim=0),
                        S(floats(rng, 2, 3), p=0, dim=1), S(floats(rng, 2, 2, 2), p="fro", dim=(0, 1)),
                        S(scalar(rng), p=2)]),
    OpInfo("norm_grad_zero", lambda x: F.grad(lambda t: lucid.norm(t, dim=1).sum())(x), lambda x: np.zeros_like(x),
           lambda rng: [S(np.zeros((2, 3)))], grad=False),
    # ---------------------------------------------------------- cumulative
    OpInfo("cumsum", lambda x, **k: lucid.cumsum(x, **k), cum_ref(np.cumsum),
           lambda rng: [S(floats(rng, 2, 3), dim=1), S(floats(rng, 2, 3), dim=0), S(floats(rng, 4), dim=-1),
                        S(scalar(rng), dim=0), S(floats(rng, 2, 0), dim=1)]),
    OpInfo("cumprod", lambda x, **k: lucid.cumprod(x, **k), cum_ref(np.cumprod),
           lambda rng: [S(with_zeros(rng, 2, 4), dim=1), S(positive(rng, 3, 2), dim=0), S(with_zeros(rng, 5, count=2), dim=-1),
                        S(floats(rng, 2, 3), dim=-1), S(scalar(rng), dim=0)]),
    OpInfo("cumprod_grad_zeros", lambda x: F.grad(lambda t: lucid.cumprod(t, -1).sum())(x), cumprod_grad_ref,
           lambda rng: [S(with_zeros(rng, 2, 4)), S(with_zeros(rng, 5, count=2)), S(floats(rng, 3))], grad=False),
    OpInfo("cummax", lambda x, **k: lucid.cummax(x, **k), cumext_ref(True),
           lambda rng: [S(away_from_ties(rng, 2, 4), dim=1), S(away_from_ties(rng, 3, 2), dim=0),
                        S(away_from_ties(rng, 5), dim=-1), S(away_from_ties(rng), dim=0)], out_index=0),
    OpInfo("cummax_ties", lambda x, **k: x.cummax(**k), cumext_ref(True), lambda rng: [S(ties(rng, 3, 5), dim=-1)],
           grad=False),
    OpInfo("cummin", lambda x, **k: lucid.cummin(x, **k), cumext_ref(False),
           lambda rng: [S(away_from_ties(rng, 2, 4), dim=-1), S(ties(rng, 3, 4), dim=1)], out_index=0, grad=False),
    # ---------------------------------------------------- softmax family
    OpInfo("softmax", lambda x, dim: lucid.softmax(x, dim), softmax_ref,
           lambda rng: [S(floats(rng, 2, 3), 1), S(floats(rng, 2, 3), 0), S(floats(rng, 2, 3, 2), -1),
                        S(floats(rng, 3) * 3 + 800.0, -1), S(scalar(rng), 0)]),
    OpInfo("log_softmax", lambda x, dim: lucid.log_softmax(x, dim), log_softmax_ref,
           lambda rng: [S(floats(rng, 2, 3), 1), S(floats(rng, 2, 3), 0), S(floats(rng, 2, 3, 2), -1),
                        S(floats(rng, 3) * 3 - 800.0, -1), S(scalar(rng), 0)]),
    # ------------------------------------------------------------- sorting
    OpInfo("sort", lambda x, **k: lucid.sort(x, **k), sort_ref,
           lambda rng: [S(away_from_ties(rng, 2, 3)), S(away_from_ties(rng, 2, 3), dim=0, descending=True),
                        S(away_from_ties(rng, 3, 4), dim=-1, descending=True), S(away_from_ties(rng))], out_index=0),
    OpInfo("sort_ties_stable", lambda x, **k: x.sort(**k), sort_ref,
           lambda rng: [S(ties(rng, 3, 6)), S(ties(rng, 3, 6), descending=True), S(ties(rng, 4, 2), dim=0, descending=True)],
           grad=False),
    OpInfo("argsort", lambda x, **k: lucid.argsort(x, **k), argsort_np,
           lambda rng: [S(away_from_ties(rng, 2, 3)), S(ties(rng, 3, 5), descending=True), S(ties(rng, 4, 2), dim=0)],
           grad=False),
    OpInfo("topk", lambda x, *a, **k: lucid.topk(x, *a, **k), topk_ref,
           lambda rng: [S(away_from_ties(rng, 2, 4), 2), S(away_from_ties(rng, 4, 3), 2, dim=0, largest=False),
                        S(away_from_ties(rng, 5), 5, sorted=False), S(away_from_ties(rng), 1)], out_index=0),
    # -------------------------------------------------------------- any/all
    OpInfo("any", lambda x, **k: lucid.any(x > 0.5, **k),
           lambda x, dim=None, keepdim=False: np.any(x > 0.5, axis=_ax(dim), keepdims=keepdim),
           lambda rng: [S(floats(rng, 2, 3)), S(floats(rng, 3, 4), dim=1), S(floats(rng, 2, 3, 2), dim=(0, 2), keepdim=True),
                        S(scalar(rng), dim=0)], grad=False),
    OpInfo("all", lambda x, **k: x.all(**k),
           lambda x, dim=None, keepdim=False: np.all(x, axis=_ax(dim), keepdims=keepdim),
           lambda rng: [S(ties(rng, 2, 3)), S(ties(rng, 3, 4), dim=-1), S(ties(rng, 3, 4), dim=0, keepdim=True)],
           grad=False),
]
