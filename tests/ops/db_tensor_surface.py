"""Op database entries for lucid/ops/tensor_surface.py: the new method compositions
(``sum_to_size``, ``narrow_copy``, ``H``, ``mH``) and the in-place forms.

In-place ops run on a fresh non-leaf tensor (``x * 1``), so gradcheck exercises the graph
path (rebase onto the op's node) and jvp/vmap the functional path under a transform. The
layout changes (``t_``, ``transpose_``, ``as_strided_`` ...) also run with a view of the
changed tensor taken before the change and written through after it, so the view registry's
bookkeeping (NOTE [In-place layout changes]) is differentiated and batched too.
"""
import numpy as np
from scipy import special as sp

import lucid
from opinfo import OpInfo, Sample, floats, positive


def _s(*arrays, name=""):
    return Sample(tuple(arrays), {}, name)


def _fresh(x, *others):
    # depends (with zero weight) on the other operands, so under vmap x is batched whenever a
    # value written into it is (as tests/ops/db_inplace.py does)
    out = x * 1.0
    for o in others:
        out = out + 0.0 * o.sum()
    return out


def _np_sum_to_size(x, size):
    lead = x.ndim - len(size)
    out = x.sum(axis=tuple(range(lead))) if lead else x
    dims = tuple(i for i, s in enumerate(size) if s == 1 and out.shape[i] != 1)
    return out.sum(axis=dims, keepdims=True) if dims else out


def _then_write_through_old_view(x):
    """t_ on a tensor with a live view; the view is then written through (its base changes)."""
    y = _fresh(x)
    v = y[0]
    y.t_()
    v.mul_(3.0)
    return y


def _np_then_write_through_old_view(x):
    y = np.array(x, copy=True)
    y[0] *= 3.0
    return y.T


_M = np.array([[1.0, 2.0], [3.0, 4.0]])


def _t_of_a_view(x):
    """t_ of a view, with views of it taken before (w) and after (u), all written through later."""
    y = _fresh(x)
    v = y[:, 1:]
    w = v[0]
    v.t_()
    u = v[0]
    y.mul_(2.0)
    v.mul_(lucid.tensor(_M, dtype=x.dtype, device=x.device))
    return y + (w * u).sum()


def _np_t_of_a_view(x):
    y = 2.0 * x
    y[:, 1:] *= _M.T
    return y + (y[0, 1:] * y[:, 1]).sum()


def _as_strided_then_mul(x):
    y = _fresh(x).reshape(-1)
    y.as_strided_((2, 2), (1, 2), 1)
    return y * y


def _np_as_strided_then_mul(x):
    f = x.reshape(-1)
    y = np.array([[f[1], f[3]], [f[2], f[4]]])
    return y * y


def _inplace(method, *args, **kwargs):
    return lambda x: getattr(_fresh(x), method)(*args, **kwargs)


OPS = [
    OpInfo("sum_to_size", lambda x: x.sum_to_size(3), lambda x: _np_sum_to_size(x, (3,)),
           lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("sum_to_size_keep", lambda x: x.sum_to_size(2, 1), lambda x: _np_sum_to_size(x, (2, 1)),
           lambda rng: [_s(floats(rng, 2, 3)), _s(floats(rng, 4, 2, 3), name="leading")]),
    OpInfo("narrow_copy", lambda x: x.narrow_copy(1, 1, 2), lambda x: x[:, 1:3].copy(),
           lambda rng: [_s(floats(rng, 2, 4))]),
    OpInfo("H", lambda x: x.H, lambda x: np.conj(x.T), lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("mH", lambda x: x.mH, lambda x: np.conj(np.swapaxes(x, -1, -2)),
           lambda rng: [_s(floats(rng, 2, 3)), _s(floats(rng, 2, 2, 3), name="batch")]),
    OpInfo("t_", _inplace("t_"), lambda x: x.T, lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("transpose_", _inplace("transpose_", 0, 2), lambda x: np.swapaxes(x, 0, 2),
           lambda rng: [_s(floats(rng, 2, 3, 2))]),
    OpInfo("swapdims_", _inplace("swapdims_", -1, 0), lambda x: np.swapaxes(x, -1, 0),
           lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("squeeze_", _inplace("squeeze_", 1), lambda x: np.squeeze(x, 1),
           lambda rng: [_s(floats(rng, 2, 1, 3))]),
    OpInfo("unsqueeze_", _inplace("unsqueeze_", 1), lambda x: np.expand_dims(x, 1),
           lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("t__then_write_through_old_view", _then_write_through_old_view, _np_then_write_through_old_view,
           lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("t__of_a_view", _t_of_a_view, _np_t_of_a_view, lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("as_strided_", _as_strided_then_mul, _np_as_strided_then_mul, lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("cumsum_", _inplace("cumsum_", 1), lambda x: np.cumsum(x, 1), lambda rng: [_s(floats(rng, 2, 3))]),
    OpInfo("cumprod_", _inplace("cumprod_", 0), lambda x: np.cumprod(x, 0), lambda rng: [_s(floats(rng, 3, 2))]),
    OpInfo("polygamma_", _inplace("polygamma_", 1), lambda x: sp.polygamma(1, x),
           lambda rng: [_s(positive(rng, 2, 2))]),
    OpInfo("lgamma_", _inplace("lgamma_"), sp.gammaln, lambda rng: [_s(positive(rng, 3))]),
    OpInfo("eq_", lambda x, y: _fresh(x, y).eq_(y), lambda x, y: (x == y).astype(x.dtype),
           lambda rng: [_s(np.array([1.0, 2.0, 3.0]), np.array([1.0, 0.0, 3.0]))]),
    OpInfo("logical_or_", lambda x, y: _fresh(x, y).logical_or_(y),
           lambda x, y: np.logical_or(x, y).astype(x.dtype),
           lambda rng: [_s(np.array([0.0, 2.0, 0.0]), np.array([1.0, 0.0, 0.0]))]),
]
