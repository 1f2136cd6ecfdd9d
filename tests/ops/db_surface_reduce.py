"""Op database entries for the statistics surface of issue 10 (lucid/ops/reduce/robust.py)."""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, away_from_ties, floats


def _with_nan(rng, *shape):
    x = away_from_ties(rng, *shape)
    x.reshape(-1)[::3] = np.nan
    return x


def _np_logcumsumexp(x, d):
    return np.logaddexp.accumulate(x, axis=d)


def _np_lower_median(x, d):
    return np.take(np.sort(x, axis=d), (x.shape[d] - 1) // 2, axis=d)


def _np_nanmedian(x, d):
    out = []
    xs = np.moveaxis(x, d, -1).reshape(-1, x.shape[d])
    for row in xs:
        v = np.sort(row[~np.isnan(row)])
        out.append(v[(len(v) - 1) // 2])
    return np.array(out).reshape(np.moveaxis(x, d, -1).shape[:-1])


OPS = [
    OpInfo("nansum", lambda x, d: lucid.nansum(x, d), lambda x, d: np.nansum(x, axis=d),
           lambda rng: [Sample((_with_nan(rng, 3, 4), 1)), Sample((_with_nan(rng, 5), None))]),
    OpInfo("nanmean", lambda x, d: lucid.nanmean(x, d), lambda x, d: np.nanmean(x, axis=d),
           lambda rng: [Sample((_with_nan(rng, 3, 4), 0)), Sample((_with_nan(rng, 5), None))]),
    OpInfo("count_nonzero", lambda x: lucid.count_nonzero(x, 1), lambda x: np.count_nonzero(x, axis=1),
           lambda rng: [Sample((np.array([[0.0, 1.0, 2.0], [0.0, 0.0, 3.0]]),))], grad=False),
    OpInfo("aminmax", lambda x: lucid.aminmax(x, dim=0), lambda x: (x.min(0), x.max(0)),
           lambda rng: [Sample((away_from_ties(rng, 3, 2),))]),
    OpInfo("logcumsumexp", lambda x, d: lucid.logcumsumexp(x, d), _np_logcumsumexp,
           lambda rng: [Sample((floats(rng, 5), 0)), Sample((floats(rng, 2, 3) * 5, 1)),
                        Sample((floats(rng, 3, 2), 0))]),
    OpInfo("cov", lambda x: lucid.cov(x), lambda x: np.cov(x),
           lambda rng: [Sample((floats(rng, 2, 5),)), Sample((floats(rng, 4),))]),
    OpInfo("cov_weights", lambda x, f, a: lucid.cov(x, correction=0, fweights=f, aweights=a),
           lambda x, f, a: np.cov(x, ddof=0, fweights=f, aweights=a),
           lambda rng: [Sample((floats(rng, 2, 4), np.array([1, 2, 1, 3]), np.array([0.5, 1.0, 2.0, 1.5])))]),
    OpInfo("corrcoef", lucid.corrcoef, np.corrcoef, lambda rng: [Sample((floats(rng, 3, 5),))]),
    OpInfo("median", lambda x, d: lucid.median(x, d).values, _np_lower_median,
           lambda rng: [Sample((away_from_ties(rng, 3, 4), 1)), Sample((away_from_ties(rng, 5, 2), 0))]),
    OpInfo("median_all", lambda x: lucid.median(x), lambda x: np.sort(x.ravel())[(x.size - 1) // 2],
           lambda rng: [Sample((away_from_ties(rng, 2, 3),))]),
    OpInfo("nanmedian", lambda x, d: lucid.nanmedian(x, d).values, _np_nanmedian,
           lambda rng: [Sample((_with_nan(rng, 3, 4), 1))]),
    OpInfo("kthvalue", lambda x, k: lucid.kthvalue(x, k, 1).values, lambda x, k: np.sort(x, 1)[:, k - 1],
           lambda rng: [Sample((away_from_ties(rng, 2, 4), 3))]),
    OpInfo("mode", lambda x: lucid.mode(x, 1).values, lambda x: np.array([2.0, 1.0]),
           lambda rng: [Sample((np.array([[1.0, 2.0, 2.0, 3.0], [5.0, 1.0, 5.0, 1.0]]),))], grad=False),
    OpInfo("quantile", lambda x, q, d, i: lucid.quantile(x, q, d, interpolation=i),
           lambda x, q, d, i: np.quantile(x, q, axis=d, method=i),
           lambda rng: [Sample((away_from_ties(rng, 3, 5), 0.3, 1, "linear")),
                        Sample((away_from_ties(rng, 4, 2), (0.1, 0.75), 0, "linear")),
                        Sample((away_from_ties(rng, 6), 0.45, None, "lower")),
                        Sample((away_from_ties(rng, 6), 0.45, None, "midpoint"))]),
    OpInfo("nanquantile", lambda x, q, d: lucid.nanquantile(x, q, d), lambda x, q, d: np.nanquantile(x, q, axis=d),
           lambda rng: [Sample((_with_nan(rng, 3, 5), 0.6, 1))]),
    OpInfo("searchsorted", lambda s, v: lucid.searchsorted(s, v), lambda s, v: np.searchsorted(s, v),
           lambda rng: [Sample((np.sort(floats(rng, 5)), floats(rng, 2, 3)))], grad=False),
    OpInfo("searchsorted_rows", lambda s, v: lucid.searchsorted(s, v, right=True),
           lambda s, v: np.stack([np.searchsorted(a, b, side="right") for a, b in zip(s, v)]),
           lambda rng: [Sample((np.sort(floats(rng, 3, 4), 1), floats(rng, 3, 2)))], grad=False),
    OpInfo("isin", lambda e, t: lucid.isin(e, t), np.isin,
           lambda rng: [Sample((np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([2.0, 4.0, 7.0])))], grad=False),
]
