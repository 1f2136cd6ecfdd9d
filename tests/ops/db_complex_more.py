"""Op database entries: betainc, and complex samples of the ops db_complex.py left out
(logsumexp, index_add / index_copy / masked_scatter, conv and conv_transpose, nn.Linear and
nn.Conv1d as modules through functional_call, and lucid.special's complex-capable names).

Complex samples are complex128 (``cfloats``); the generic checks treat each complex element
as two real coordinates (NOTE [Complex gradcheck]), so a vjp that forgets the conjugation of
NOTE [Holomorphic vjp] fails here (conv and logsumexp did, before this file).
"""
import numpy as np
import scipy.special as sp

import lucid
import lucid.nn.functional as F
import lucid.special as S
from db_complex import cfloats
from db_conv import ref_conv, ref_conv_transpose, ref_unfold
from opinfo import OpInfo, Sample, floats, positive


def _cx(ref):
    """A reference for a bilinear op written for real arrays, extended to complex ones."""
    def run(x, w, *rest, **kw):
        xr, xi, wr, wi = np.real(x), np.imag(x), np.real(w), np.imag(w)
        out = (ref(xr, wr, **kw) - ref(xi, wi, **kw)) + 1j * (ref(xr, wi, **kw) + ref(xi, wr, **kw))
        if rest and rest[0] is not None:  # a bias, added per output channel
            out = out + rest[0].reshape((-1,) + (1,) * (w.ndim - 2))
        return out

    return run


def _np_index_add(x, dim, idx, src, alpha=1):
    out = x.copy()
    np.add.at(np.moveaxis(out, dim, 0), idx, np.moveaxis(src * alpha, dim, 0))
    return out


def _np_index_copy(x, dim, idx, src):
    out = np.moveaxis(x.copy(), dim, 0)
    out[idx] = np.moveaxis(src, dim, 0)
    return np.moveaxis(out, 0, dim)


_MASK = np.array([[True, False, True], [False, True, True]])


def _np_masked_scatter(x, src):
    out = x.copy()
    out[_MASK] = src.reshape(-1)[: _MASK.sum()]
    return out


def _np_logsumexp(z, axis):
    return np.log(np.exp(z).sum(axis))


# Built once, without the random init (vmap refuses random draws, and the parameters are
# replaced by functional_call anyway).
_LINEAR = lucid.nn.utils.skip_init(lucid.nn.Linear, 3, 2, dtype=lucid.complex128)
_CONV1D = lucid.nn.utils.skip_init(lucid.nn.Conv1d, 2, 3, 2, padding=1, dtype=lucid.complex128)


def _linear_module(x, w, b):
    return lucid.func.functional_call(_LINEAR, {"weight": w, "bias": b}, (x,))


def _conv1d_module(x, w, b):
    return lucid.func.functional_call(_CONV1D, {"weight": w, "bias": b}, (x,))


def _betainc_samples(rng):
    # a and b have no derivative (as in JAX): integer arrays or Python floats, vmapped, never differentiated
    return [Sample((np.array([1, 2, 5], dtype=np.int64), np.array([2, 1, 3], dtype=np.int64), floats(rng, 3, low=0.1, high=0.8))),
            Sample((np.array([[1], [3]], dtype=np.int64), 2.5, floats(rng, 3, low=0.1, high=0.8)), name="broadcast"),
            Sample((0.7, 1.6, floats(rng, 2, 2, low=0.1, high=0.8)), name="python scalar a, b")]


OPS = [
    OpInfo("betainc", S.betainc, sp.betainc, _betainc_samples),
    OpInfo("betaincinv", S.betaincinv, sp.betaincinv, _betainc_samples),
    # -- complex samples
    OpInfo("complex_logsumexp", lambda z: lucid.logsumexp(z, 1), lambda z: _np_logsumexp(z, 1),
           lambda rng: [Sample((cfloats(rng, 2, 3),)), Sample((cfloats(rng, 3, 1),), name="one term")]),
    OpInfo("complex_logsumexp_all", lambda z: z.logsumexp((0, 1), keepdim=True),
           lambda z: _np_logsumexp(z.reshape(-1), 0).reshape(1, 1), lambda rng: [Sample((cfloats(rng, 2, 2),))]),
    OpInfo("complex_special_logsumexp", lambda z: S.logsumexp(z, 0), lambda z: _np_logsumexp(z, 0),
           lambda rng: [Sample((cfloats(rng, 3),))]),
    OpInfo("complex_special_sinc", S.sinc, np.sinc, lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_special_expit", S.expit, lambda z: 1 / (1 + np.exp(-z)), lambda rng: [Sample((cfloats(rng, 3),))]),
    OpInfo("complex_special_exp2_expm1_log1p", lambda z: S.exp2(z) + S.expm1(z) * S.log1p(z),
           lambda z: np.exp2(z) + np.expm1(z) * np.log1p(z), lambda rng: [Sample((cfloats(rng, 3) * 0.5,))]),
    OpInfo("complex_index_add", lambda x, s: lucid.index_add(x, 1, lucid.tensor([2, 0, 2], device=x.device), s, alpha=0.5 - 1j),
           lambda x, s: _np_index_add(x, 1, [2, 0, 2], s, 0.5 - 1j),
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 2, 3))),
                        Sample((floats(rng, 2, 3).astype(np.complex128), cfloats(rng, 2, 3)), name="real-valued x")]),
    OpInfo("complex_index_copy", lambda x, s: lucid.index_copy(x, 0, lucid.tensor([2, 0], device=x.device), s),
           lambda x, s: _np_index_copy(x, 0, [2, 0], s), lambda rng: [Sample((cfloats(rng, 3, 2), cfloats(rng, 2, 2)))]),
    OpInfo("complex_masked_scatter", lambda x, s: lucid.masked_scatter(x, lucid.tensor(_MASK, device=x.device), s),
           _np_masked_scatter,
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 5)))]),
    OpInfo("complex_conv1d", lambda x, w, b: F.conv1d(x, w, b, padding=1), _cx(lambda x, w: ref_conv(x, w, padding=1)),
           lambda rng: [Sample((cfloats(rng, 2, 2, 5), cfloats(rng, 3, 2, 3), cfloats(rng, 3))),
                        Sample((cfloats(rng, 2, 4), cfloats(rng, 3, 2, 2), cfloats(rng, 3)), name="unbatched")]),
    OpInfo("complex_conv2d", lambda x, w: F.conv2d(x, w, stride=2, groups=2), _cx(lambda x, w: ref_conv(x, w, stride=2, groups=2)),
           lambda rng: [Sample((cfloats(rng, 1, 2, 4, 4), cfloats(rng, 2, 1, 2, 2)))]),
    OpInfo("complex_conv_transpose1d", lambda x, w: F.conv_transpose1d(x, w, stride=2),
           _cx(lambda x, w: ref_conv_transpose(x, w, stride=2)),
           lambda rng: [Sample((cfloats(rng, 1, 2, 3), cfloats(rng, 2, 3, 2)))]),
    OpInfo("complex_conv_transpose2d", lambda x, w: F.conv_transpose2d(x, w),
           _cx(lambda x, w: ref_conv_transpose(x, w)), lambda rng: [Sample((cfloats(rng, 1, 2, 2, 2), cfloats(rng, 2, 1, 2, 2)))]),
    OpInfo("complex_nn_Linear", _linear_module, lambda x, w, b: x @ w.T + b,
           lambda rng: [Sample((cfloats(rng, 4, 3), cfloats(rng, 2, 3), cfloats(rng, 2))),
                        Sample((cfloats(rng, 3), cfloats(rng, 2, 3), cfloats(rng, 2)), name="unbatched")]),
    OpInfo("complex_nn_Conv1d", _conv1d_module, _cx(lambda x, w: ref_conv(x, w, padding=1)),
           lambda rng: [Sample((cfloats(rng, 1, 2, 4), cfloats(rng, 3, 2, 2), cfloats(rng, 3)))]),
]


# -- nn functional ops PyTorch computes for complex input (the others refuse: tests/complex)
def _pixel_shuffle(x, r):
    n, c, h, w = x.shape
    return x.reshape(n, c // (r * r), r, r, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // (r * r), h * r, w * r)


def _normalize(x, dim):
    return x / np.maximum(np.sqrt((np.abs(x) ** 2).sum(dim, keepdims=True)), 1e-12)


def _rms_norm(x):
    # PyTorch squares the complex values themselves (x * x, not |x|^2) for complex input
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + np.finfo(np.float64).eps)


_IDX3 = np.array([0, 2, 4])

OPS += [
    OpInfo("complex_nn_pad", lambda x: F.pad(x, (1, 2)), lambda x: np.pad(x, ((0, 0), (0, 0), (1, 2))),
           lambda rng: [Sample((cfloats(rng, 2, 2, 3),))]),
    OpInfo("complex_nn_pad_reflect", lambda x: F.pad(x, (2, 1), mode="reflect"),
           lambda x: np.pad(x, ((0, 0), (0, 0), (2, 1)), mode="reflect"), lambda rng: [Sample((cfloats(rng, 1, 2, 4),))]),
    OpInfo("complex_nn_pixel_shuffle", lambda x: F.pixel_shuffle(x, 2), lambda x: _pixel_shuffle(x, 2),
           lambda rng: [Sample((cfloats(rng, 1, 4, 2, 3),))]),
    OpInfo("complex_nn_unfold", lambda x: F.unfold(x, 2), lambda x: ref_unfold(x.real, 2) + 1j * ref_unfold(x.imag, 2),
           lambda rng: [Sample((cfloats(rng, 1, 2, 3, 3),))]),
    OpInfo("complex_nn_normalize", lambda x: F.normalize(x, dim=1), lambda x: _normalize(x, 1),
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_nn_pairwise_distance", F.pairwise_distance,
           lambda a, b: np.sqrt((np.abs(a - b + 1e-6) ** 2).sum(-1)), lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 2, 3)))]),
    OpInfo("complex_nn_rms_norm", lambda x: F.rms_norm(x, (3,)), _rms_norm, lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_nn_softsign", F.softsign, lambda x: x / (1 + np.abs(x)), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_nn_tanhshrink", F.tanhshrink, lambda x: x - np.tanh(x), lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_nn_embedding", lambda w: F.embedding(lucid.tensor(_IDX3), w), lambda w: w[_IDX3],
           lambda rng: [Sample((cfloats(rng, 5, 2),))]),
    OpInfo("complex_nn_bilinear", F.bilinear, lambda a, b, w, c: np.einsum("ni,oij,nj->no", a, w, b) + c,
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 2, 2), cfloats(rng, 4, 3, 2), cfloats(rng, 4)))]),
    OpInfo("complex_nn_conv3d", lambda x, w: F.conv3d(x, w), _cx(ref_conv),
           lambda rng: [Sample((cfloats(rng, 1, 1, 3, 3, 2), cfloats(rng, 2, 1, 2, 2, 2)))]),
    OpInfo("complex_nn_dropout_eval", lambda x: F.dropout(x, 0.5, training=False), lambda x: x,
           lambda rng: [Sample((cfloats(rng, 2, 3),))]),
]


# -- comparisons, predicates and the remaining shape/indexing primitives on complex input
def _special_values(rng):
    z = cfloats(rng, 2, 3)
    z[0, 1], z[1, 0], z[1, 2] = complex(np.nan, 1.0), complex(np.inf, -1.0), complex(0.5, -np.inf)
    return z


def _nan_values(rng):
    # no infinities: the vmap checks scale samples, and inf * 0 inside a complex product warns
    z = cfloats(rng, 2, 3)
    z[0, 1], z[1, 2] = complex(np.nan, 1.0), complex(0.5, np.nan)
    return z


def _with_ties(rng):
    z = cfloats(rng, 2, 3)
    z[1, 2] = z[0, 2]
    return z


def _np_scatter_dim1(z, src):
    out = z.copy()
    out[0, [2, 0]] = src[0, :2]
    return out


def _setitem(z, v):
    y = z.clone() + 0.0 * v.sum()  # batched whenever v is (an unbatched tensor can't take a batched value)
    y[0, 1:] = v
    y[1, 0] = 0.25 - 2j
    return y


def _np_setitem(z, v):
    y = z.copy()
    y[0, 1:] = v
    y[1, 0] = 0.25 - 2j
    return y


OPS += [
    OpInfo("complex_eq_ne_isclose", lambda a, b: (a == b, a != b, lucid.isclose(a, b)),
           lambda a, b: (a == b, a != b, np.isclose(a, b, rtol=1e-5, atol=1e-8)),
           lambda rng: [Sample((_with_ties(rng), _with_ties(rng))), Sample((cfloats(rng, 2, 3), 0.5 + 0j), name="scalar")],
           grad=False),
    OpInfo("complex_isfinite_isnan_isinf", lambda z: (lucid.isfinite(z), lucid.isnan(z), lucid.isinf(z)),
           lambda z: (np.isfinite(z), np.isnan(z), np.isinf(z)), lambda rng: [Sample((_nan_values(rng),))], grad=False),
    OpInfo("complex_isfinite_isnan_isinf_inf", lambda z: (lucid.isfinite(z), lucid.isnan(z), lucid.isinf(z)),
           lambda z: (np.isfinite(z), np.isnan(z), np.isinf(z)), lambda rng: [Sample((_special_values(rng),))],
           grad=False, vmap=False),
    OpInfo("complex_nan_to_num_special", lambda z: lucid.nan_to_num(z, nan=0.5, posinf=9.0, neginf=-9.0),
           lambda z: np.nan_to_num(z, nan=0.5, posinf=9.0, neginf=-9.0), lambda rng: [Sample((_nan_values(rng),))],
           grad=False),
    OpInfo("complex_nan_to_num_inf", lambda z: lucid.nan_to_num(z, nan=0.5, posinf=9.0, neginf=-9.0),
           lambda z: np.nan_to_num(z, nan=0.5, posinf=9.0, neginf=-9.0), lambda rng: [Sample((_special_values(rng),))],
           grad=False, vmap=False),
    OpInfo("complex_nan_to_num", lambda z: lucid.nan_to_num(z), np.nan_to_num, lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_any_all", lambda z: (z.any(1), z.all(0)), lambda z: (z.any(1), z.all(0)),
           lambda rng: [Sample((np.where([[True, False, True], [False, False, False]], cfloats(rng, 2, 3), 0),))],
           grad=False),
    OpInfo("complex_as_strided", lambda z: z.as_strided((2, 2), (1, 2)),
           lambda z: z.reshape(-1)[np.array([[0, 2], [1, 3]])], lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_clone", lambda z: z.clone() * 1.0, lambda z: z, lambda rng: [Sample((cfloats(rng, 2, 3),))]),
    OpInfo("complex_scatter", lambda z, s: z.scatter(1, lucid.tensor([[2, 0]], device=z.device), s), _np_scatter_dim1,
           lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 1, 3)))]),
    OpInfo("complex_setitem", _setitem, _np_setitem, lambda rng: [Sample((cfloats(rng, 2, 3), cfloats(rng, 2)))]),
]
OPS += [
    OpInfo("complex_logcumsumexp", lambda z: lucid.logcumsumexp(z, -1), lambda z: np.log(np.cumsum(np.exp(z), -1)),
           lambda rng: [Sample((cfloats(rng, 2, 5),)), Sample((cfloats(rng, 3),), name="1-d")]),
]
