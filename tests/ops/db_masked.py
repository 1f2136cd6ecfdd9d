"""Op database entries for lucid.masked (PyTorch's torch.masked functions).

Each sample is ``(input, mask)`` with the mask a bool array (not differentiable; vmap batches it
beside the input). The references fill the masked-out elements with NumPy and reduce densely.
Samples whose result has infinite or nan entries (a fully masked-out slice of amax, mean, var,
softmax ...; masked-out log_softmax entries) are forward-only entries (``*_fully_masked``):
finite differences there are nan. Their gradient entries keep every slice partly kept.
"""
import numpy as np

import lucid
import lucid.masked as M
from opinfo import OpInfo, Sample, away_from_ties, floats, positive


def _ax(dim):
    return dim if dim is None or isinstance(dim, int) else tuple(dim)


def _fill(x, m, v):
    return np.where(np.broadcast_to(m, x.shape), x, v)


def _count(x, m, dim, keepdim):
    return np.sum(np.broadcast_to(m, x.shape), axis=_ax(dim), keepdims=keepdim)


def _quiet(f):
    def wrapped(*args, **kw):
        with np.errstate(all="ignore"):
            return f(*args, **kw)
    return wrapped


# ------------------------------------------------------------------ references

def sum_ref(x, m, dim=None, keepdim=False):
    return np.sum(_fill(x, m, 0.0), axis=_ax(dim), keepdims=keepdim)


def prod_ref(x, m, dim=None, keepdim=False):
    return np.prod(_fill(x, m, 1.0), axis=_ax(dim), keepdims=keepdim)


def amax_ref(x, m, dim=None, keepdim=False):
    return np.max(_fill(x, m, -np.inf), axis=_ax(dim), keepdims=keepdim)


def amin_ref(x, m, dim=None, keepdim=False):
    return np.min(_fill(x, m, np.inf), axis=_ax(dim), keepdims=keepdim)


def argmax_ref(x, m, dim=None, keepdim=False):
    f = _fill(x, m, -np.inf)
    out = np.argmax(f, axis=dim, keepdims=keepdim) if dim is not None else np.argmax(f)
    return np.asarray(out).astype(x.dtype)


def argmin_ref(x, m, dim=None, keepdim=False):
    f = _fill(x, m, np.inf)
    out = np.argmin(f, axis=dim, keepdims=keepdim) if dim is not None else np.argmin(f)
    return np.asarray(out).astype(x.dtype)


@_quiet
def mean_ref(x, m, dim=None, keepdim=False):
    return sum_ref(x, m, dim, keepdim) / _count(x, m, dim, keepdim)


@_quiet
def var_ref(x, m, dim=None, keepdim=False, correction=1):
    count = _count(x, m, dim, True)
    mu = sum_ref(x, m, dim, True) / count
    total = np.sum(_fill((x - mu) ** 2, m, 0.0), axis=_ax(dim), keepdims=keepdim)
    count = count if keepdim else count.reshape(total.shape)
    return total / np.maximum(count - correction, 0)


@_quiet
def std_ref(x, m, **kw):
    return np.sqrt(var_ref(x, m, **kw))


@_quiet
def logsumexp_ref(x, m, dim=None, keepdim=False):
    f = _fill(x, m, -np.inf)
    top = np.max(f, axis=_ax(dim), keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.sum(np.exp(f - top), axis=_ax(dim), keepdims=True)) + top
    return out if keepdim else out.reshape(np.sum(f, axis=_ax(dim)).shape)


def norm_ref(x, m, ord=2.0, dim=None, keepdim=False):
    a = np.abs(_fill(x, m, 0.0))
    if ord == np.inf:
        return np.max(a, axis=_ax(dim), keepdims=keepdim)
    return np.sum(a ** ord, axis=_ax(dim), keepdims=keepdim) ** (1.0 / ord)


def median_ref(x, m, dim=-1, keepdim=False):
    def lower_median(row_and_mask):
        n = row_and_mask.shape[0] // 2
        kept = np.sort(row_and_mask[:n][row_and_mask[n:] > 0])
        return kept[(kept.size - 1) // 2] if kept.size else np.nan
    both = np.concatenate([x, np.broadcast_to(m, x.shape).astype(x.dtype)], axis=dim)
    out = np.apply_along_axis(lower_median, dim, both)
    return np.expand_dims(out, dim) if keepdim else out


def cumsum_ref(x, m, dim):
    return np.cumsum(_fill(x, m, 0.0), axis=dim)


def cumprod_ref(x, m, dim):
    return np.cumprod(_fill(x, m, 1.0), axis=dim)


@_quiet
def softmax_ref(x, m, dim):
    f = _fill(x, m, -np.inf)
    top = np.max(f, axis=dim, keepdims=True)
    e = np.exp(f - np.where(np.isfinite(top), top, 0.0))
    return e / np.sum(e, axis=dim, keepdims=True)


@_quiet
def log_softmax_ref(x, m, dim):
    return np.log(softmax_ref(x, m, dim))


def softmin_ref(x, m, dim):
    return softmax_ref(-x, m, dim)


def normalize_ref(x, m, ord, dim, eps=1e-12):
    return _fill(x, m, 0.0) / np.maximum(norm_ref(x, m, ord, dim, keepdim=True), eps)


def logaddexp_ref(x, y, mx, my):
    return np.logaddexp(_fill(x, mx, -np.inf), _fill(y, my, -np.inf))


# ------------------------------------------------------------------ samples

def _mask(rng, *shape, keep=2):
    """A random mask keeping at least ``keep`` elements of every row (last axis)."""
    m = rng.integers(0, 2, size=shape).astype(bool)
    rows = m.reshape(-1, shape[-1])
    for r in rows:
        r[rng.choice(shape[-1], size=min(keep, shape[-1]), replace=False)] = True
    return rows.reshape(shape)


# a (3, 1) mask broadcast along dim 1: rows 0 and 2 kept in every column
_COLUMN_MASK = np.array([[True], [False], [True]])


def _reduce_samples(make=floats, keep=2):
    def samples(rng):
        return [
            Sample((make(rng, 2, 3), _mask(rng, 2, 3, keep=keep)), {"dim": 1}),
            Sample((make(rng, 3, 2), _COLUMN_MASK), {"dim": 0, "keepdim": True}, name="broadcast mask"),
            Sample((make(rng, 2, 3), _mask(rng, 2, 3, keep=keep)), {}, name="all dims"),
            Sample((make(rng, 2, 2, 2), _mask(rng, 2, 2, 2, keep=1)), {"dim": (0, 2), "keepdim": True},
                   name="two dims"),
        ]
    return samples


def _row_samples(make=floats, keep=2):
    """One dim at a time (scans, softmax, median, arg-reductions)."""
    def samples(rng):
        return [
            Sample((make(rng, 2, 4), _mask(rng, 2, 4, keep=keep)), {"dim": 1}),
            Sample((make(rng, 3, 2), _mask(rng, 3, 2, keep=keep)), {"dim": -1}, name="last dim"),
            Sample((make(rng, 3, 2), _COLUMN_MASK), {"dim": 0}, name="broadcast mask"),
        ]
    return samples


def _fully_masked(shape, dim):
    def samples(rng):
        m = _mask(rng, *shape)
        m[0] = False  # the first slice along dim 0 keeps nothing
        return [Sample((away_from_ties(rng, *shape), m), {"dim": dim}, name="fully masked slice")]
    return samples


def _logaddexp_samples(rng):
    mx = np.array([[True, False, True], [True, True, False]])
    my = np.array([[False, True, True], [True, False, True]])  # never both masked out
    return [Sample((floats(rng, 2, 3), floats(rng, 2, 3), mx, my)),
            Sample((floats(rng, 2, 3), floats(rng, 3), mx, np.ones(3, bool)), name="broadcast")]


def _normalize_samples(rng):
    return [Sample((floats(rng, 2, 3), _mask(rng, 2, 3)), {"ord": 2.0, "dim": 1}),
            Sample((positive(rng, 3, 2), _mask(rng, 3, 2)), {"ord": 1.0, "dim": 0}, name="ord 1"),
            Sample((floats(rng, 2, 3), _mask(rng, 3, keep=1)), {"ord": 3.0, "dim": -1}, name="broadcast mask")]


def _norm_samples(rng):
    return [Sample((floats(rng, 2, 3), _mask(rng, 2, 3)), {"ord": 2.0, "dim": 1}),
            Sample((floats(rng, 2, 3), _mask(rng, 3)), {"ord": 3.0}, name="all dims"),
            Sample((away_from_ties(rng, 2, 3), _mask(rng, 2, 3)), {"ord": np.inf, "dim": 0}, name="inf")]


def _var_samples(rng):
    base = _reduce_samples(keep=2)(rng)
    return base + [Sample((floats(rng, 2, 3), _mask(rng, 2, 3)), {"dim": 1, "correction": 0},
                          name="correction 0")]


def _with(f, **fixed):
    return lambda *a, **kw: f(*a, **fixed, **kw)


def _masked(fn):
    return lambda x, m, **kw: fn(x, mask=m, **kw)


def _kept_log_softmax(x, m, dim):
    # the kept entries only: masked-out ones are -inf whatever x is (no finite difference there)
    out = M.log_softmax(x, dim, mask=m)
    return lucid.where(m, out, lucid.zeros((), dtype=out.dtype, device=out.device))


def _kept_log_softmax_ref(x, m, dim):
    return np.where(np.broadcast_to(m, x.shape), log_softmax_ref(x, m, dim), 0.0)


def _dim_first(fn):
    return lambda x, m, dim, **kw: fn(x, dim, mask=m, **kw)


OPS = [
    OpInfo("masked.sum", _masked(M.sum), sum_ref, _reduce_samples()),
    OpInfo("masked.prod", _masked(M.prod), prod_ref, _reduce_samples(make=positive)),
    OpInfo("masked.amax", _masked(M.amax), amax_ref, _reduce_samples(make=away_from_ties)),
    OpInfo("masked.amin", _masked(M.amin), amin_ref, _reduce_samples(make=away_from_ties)),
    OpInfo("masked.argmax", _masked(M.argmax), argmax_ref, _row_samples(make=away_from_ties), grad=False),
    OpInfo("masked.argmin", _masked(M.argmin), argmin_ref, _row_samples(make=away_from_ties), grad=False),
    OpInfo("masked.mean", _masked(M.mean), mean_ref, _reduce_samples()),
    OpInfo("masked.median", _masked(M.median), median_ref, _row_samples(make=away_from_ties)),
    OpInfo("masked.logsumexp", _masked(M.logsumexp), logsumexp_ref, _reduce_samples()),
    OpInfo("masked.norm", _masked(M.norm), norm_ref, _norm_samples),
    OpInfo("masked.var", _masked(M.var), var_ref, _var_samples),
    OpInfo("masked.std", _masked(M.std), std_ref, _var_samples),
    OpInfo("masked.cumsum", _dim_first(M.cumsum), cumsum_ref, _row_samples()),
    OpInfo("masked.cumprod", _dim_first(M.cumprod), cumprod_ref, _row_samples(make=positive)),
    OpInfo("masked.softmax", _dim_first(M.softmax), softmax_ref, _row_samples(keep=1)),
    OpInfo("masked.log_softmax", _kept_log_softmax, _kept_log_softmax_ref, _row_samples(keep=1)),
    OpInfo("masked.softmin", _dim_first(M.softmin), softmin_ref, _row_samples(keep=1)),
    OpInfo("masked.normalize", lambda x, m, ord, dim: M.normalize(x, ord, dim, mask=m), normalize_ref,
           _normalize_samples),
    OpInfo("masked.logaddexp", lambda x, y, mx, my: M.logaddexp(x, y, input_mask=mx, other_mask=my),
           logaddexp_ref, _logaddexp_samples),
    # fully masked-out slices: the identity (or nan) where nothing is kept; finite elsewhere
    OpInfo("masked.sum_fully_masked", _masked(M.sum), sum_ref, _fully_masked((2, 3), 1)),
    OpInfo("masked.prod_fully_masked", _masked(M.prod), prod_ref, _fully_masked((2, 3), 1)),
    OpInfo("masked.norm_fully_masked", _masked(M.norm), norm_ref, _fully_masked((2, 3), 1), gradgrad=False),
    OpInfo("masked.cumsum_fully_masked", _dim_first(M.cumsum), cumsum_ref, _fully_masked((2, 3), 1)),
    OpInfo("masked.amax_fully_masked", _masked(M.amax), amax_ref, _fully_masked((2, 3), 1), grad=False),
    OpInfo("masked.amin_fully_masked", _masked(M.amin), amin_ref, _fully_masked((2, 3), 1), grad=False),
    OpInfo("masked.argmax_fully_masked", _masked(M.argmax), argmax_ref, _fully_masked((2, 3), 1), grad=False),
    OpInfo("masked.mean_fully_masked", _masked(M.mean), mean_ref, _fully_masked((2, 3), 1), grad=False),
    OpInfo("masked.var_fully_masked", _masked(M.var), var_ref, _fully_masked((2, 3), 1), grad=False),
    OpInfo("masked.std_fully_masked", _masked(M.std), std_ref, _fully_masked((2, 3), 1), grad=False),
    OpInfo("masked.median_fully_masked", _masked(M.median), median_ref, _fully_masked((2, 3), 1), grad=False),
    OpInfo("masked.logsumexp_fully_masked", _masked(M.logsumexp), logsumexp_ref, _fully_masked((2, 3), 1),
           grad=False),
    OpInfo("masked.softmax_fully_masked", _dim_first(M.softmax), softmax_ref, _fully_masked((2, 3), 1),
           grad=False),
    OpInfo("masked.log_softmax_fully_masked", _dim_first(M.log_softmax), log_softmax_ref, _fully_masked((2, 3), 1),
           grad=False),
    OpInfo("masked.softmin_fully_masked", _dim_first(M.softmin), softmin_ref, _fully_masked((2, 3), 1),
           grad=False),
    OpInfo("masked.normalize_fully_masked", lambda x, m, dim: M.normalize(x, 2.0, dim, mask=m),
           _with(normalize_ref, ord=2.0), _fully_masked((2, 3), 1), gradgrad=False),
]
