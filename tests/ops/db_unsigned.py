"""Op database entries for the unsigned dtypes (uint16/32/64: integer ops, grad=False),
``hash_tensor`` and ``lobpcg`` (lucid/ops/torch_extra_linalg.py).

uint64 results are compared as two exact 32-bit halves: the generic checks compare in float64,
which would hide a wrong low bit of a large value.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, eigh_gauge

_UINTS = (np.uint16, np.uint32, np.uint64)


def _halves(t):
    """(t >> 32, t & 0xFFFFFFFF) of a lucid uint tensor, both exact in float64."""
    t = t.to(lucid.uint64)
    return t >> 32, t & 0xFFFFFFFF


def _np_halves(a):
    a = np.asarray(a).astype(np.uint64)
    return a >> np.uint64(32), a & np.uint64(0xFFFFFFFF)


def _uint_samples(arity):
    def samples(rng):
        out = []
        for dt in _UINTS:
            hi = int(np.iinfo(dt).max)
            mk = lambda *s: rng.integers(0, hi, size=s, dtype=dt, endpoint=True)  # noqa: E731
            out.append(Sample(tuple(mk(2, 3) for _ in range(arity)), name=np.dtype(dt).name))
        out.append(Sample(tuple(rng.integers(1, 9, size=(3,), dtype=np.uint32) for _ in range(arity)),
                          name="small"))
        return out

    return samples


def _nonzero_right(rng):
    out = []
    for s in _uint_samples(2)(rng):
        x, y = s.args
        out.append(Sample((x, np.where(y == 0, 1, y).astype(y.dtype)), name=s.name))
    return out


def _unsigned(name, op, ref, arity=2, samples=None):
    return OpInfo(f"unsigned.{name}", lambda *xs: _halves(op(*xs)), lambda *xs: _np_halves(ref(*xs)),
                  samples or _uint_samples(arity), grad=False)


def _np_hash(x, dim=None, keepdim=False):
    a = np.asarray(x)
    bits = a.astype(np.float64).view(np.uint64) if a.dtype.kind == "f" else a.astype(np.int64).view(np.uint64) \
        if a.dtype.kind in "ib" else a.astype(np.uint64)
    axis = tuple(range(a.ndim)) if dim is None else dim
    return _np_halves(np.bitwise_xor.reduce(bits, axis=axis, keepdims=keepdim))


def _hash_samples(rng):
    return [Sample((rng.standard_normal((3, 5)),), name="all"),
            Sample((rng.standard_normal((3, 5)),), {"dim": 1}, name="rows"),
            Sample((rng.standard_normal((2, 3, 2)),), {"dim": (0, 2), "keepdim": True}, name="keepdim"),
            Sample((rng.integers(-50, 50, size=(4, 3)),), {"dim": 0}, name="int64"),
            Sample((rng.integers(0, 2**32, size=(7,), dtype=np.uint32),), name="uint32 odd length")]


# ------------------------------------------------------------------ lobpcg

_M, _K = 6, 2  # LOBPCG needs m >= 3 n


def _spd(rng):
    q, _ = np.linalg.qr(rng.standard_normal((_M, _M)))
    return (q * np.array([1.0, 2.0, 3.5, 5.0, 7.0, 9.5])) @ q.T  # separated eigenvalues


def _lobpcg_samples(rng):
    return [Sample((_spd(rng), rng.standard_normal((_M, _K))), name="largest"),
            Sample((_spd(rng), rng.standard_normal((_M, _K))), {"largest": False}, name="smallest"),
            Sample((_spd(rng), rng.standard_normal((_M, _K))), {"method": "basic"}, name="basic")]


def _lobpcg_gen_samples(rng):
    b = np.diag(rng.uniform(1.0, 2.0, _M)) + 0.1 * np.ones((_M, _M))
    return [Sample((_spd(rng), b, rng.standard_normal((_M, _K))), name="generalized")]


def _np_lobpcg(a, x0, largest=True, method=None):
    w, v = np.linalg.eigh((a + a.T) / 2)
    sel = slice(None, -_K - 1, -1) if largest else slice(0, _K)
    return w[sel], v[:, sel]


def _np_lobpcg_gen(a, b, x0):
    from scipy.linalg import eigh

    w, v = eigh((a + a.T) / 2, (b + b.T) / 2)
    return w[::-1][:_K], v[:, ::-1][:, :_K]


def _gauge(w, v):
    return eigh_gauge(w, v)


OPS = [
    _unsigned("add", lambda x, y: x + y, lambda x, y: x + y),
    _unsigned("sub", lambda x, y: x - y, lambda x, y: x - y),
    _unsigned("mul", lambda x, y: x * y, lambda x, y: x * y),
    _unsigned("floor_divide", lambda x, y: x // y, lambda x, y: x // y, samples=_nonzero_right),
    _unsigned("remainder", lambda x, y: x % y, lambda x, y: x % y, samples=_nonzero_right),
    _unsigned("bitwise", lambda x, y: (x & y) ^ (x | 3), lambda x, y: (x & y) ^ (x | x.dtype.type(3))),
    _unsigned("shifts", lambda x: (x << 3) >> 1, lambda x: (x << x.dtype.type(3)) >> x.dtype.type(1), arity=1),
    _unsigned("neg_not", lambda x: -x ^ ~x, lambda x: (0 - x) ^ ~x, arity=1),
    _unsigned("maximum", lucid.maximum, np.maximum),
    _unsigned("where", lambda x, y: lucid.where(x > y, x, y * 2), lambda x, y: np.where(x > y, x, y * 2)),
    _unsigned("scalar_wrap", lambda x: x * 3 + (-1), lambda x: x * x.dtype.type(3) - x.dtype.type(1), arity=1),
    _unsigned("amax", lambda x: x.amax(-1), lambda x: x.max(-1), arity=1),
    _unsigned("sort", lambda x: x.sort(-1)[0], lambda x: np.sort(x, -1), arity=1),
    _unsigned("cumsum", lambda x: x.cumsum(-1).view(lucid.uint64),  # int64, wrapping as in PyTorch
              lambda x: x.astype(np.int64).cumsum(-1).view(np.uint64), arity=1),
    OpInfo("unsigned.compare", lambda x, y: (x < y, x == y), lambda x, y: (x < y, x == y), _uint_samples(2),
           grad=False),
    OpInfo("unsigned.true_divide", lambda x, y: x.to(lucid.float64) / y.to(lucid.float64),
           lambda x, y: x.astype(np.float64) / y, _nonzero_right, grad=False),
    OpInfo("hash_tensor", lambda x, **kw: _halves(lucid.hash_tensor(x, **kw)), _np_hash, _hash_samples,
           grad=False),
    OpInfo("lobpcg", lambda a, x0, **kw: lucid.lobpcg(a, k=_K, X=x0, **kw), _np_lobpcg, _lobpcg_samples,
           vmap=False, gauge=_gauge, atol=1e-8, rtol=1e-7),
    OpInfo("lobpcg_eigenvalues", lambda a, x0, **kw: lucid.lobpcg(a, k=_K, X=x0, **kw)[0],
           lambda a, x0, **kw: _np_lobpcg(a, x0, **kw)[0], _lobpcg_samples, vmap=False, atol=1e-8, rtol=1e-7),
    OpInfo("lobpcg_generalized", lambda a, b, x0: lucid.lobpcg(a, k=_K, B=b, X=x0), _np_lobpcg_gen,
           _lobpcg_gen_samples, vmap=False, gauge=_gauge, atol=1e-8, rtol=1e-7),
]
