"""Op database entries from the views + in-place sweep: in-place ops whose tensor operands are
bounds or keywords (``clamp_(lo, hi)``, ``scatter_(..., src=s)``), and in-place changes made
through a view of the result. ``_fresh`` (as in db_inplace.py) gives a non-leaf to change,
batched under vmap whenever an operand is.
"""
import numpy as np

import lucid
from opinfo import OpInfo, Sample, floats


def _fresh(x, *others):
    out = x * 1.0
    for o in others:
        if isinstance(o, lucid.Tensor):
            out = out + 0.0 * o.sum()
    return out


def _bounds(rng):
    lo = floats(rng, 2, 3, low=-0.6, high=-0.2)
    x = np.array([[-0.9, 0.1, 0.8], [-0.1, 0.95, -0.75]])
    return [Sample((x, lo, lo + 0.6)), Sample((x[0], lo[0], np.asarray(0.3)), name="broadcast hi")]


def _np_clip(x, lo, hi):
    return np.minimum(np.maximum(x, lo), hi)


_IDX = np.array([[2, 0, 1], [1, 2, 0]])


def _np_scatter(x, s):
    out = np.array(x, copy=True)
    for r in range(2):
        out[r, _IDX[r]] = s[r]
    return out


def _via_view(x, w):
    out = _fresh(x, w)
    out.t()[1].mul_(w)
    out.diagonal().exp_()
    return out


def _np_via_view(x, w):
    out = np.array(x, copy=True)
    out[:, 1] *= w
    idx = np.arange(min(out.shape))
    out[idx, idx] = np.exp(out[idx, idx])
    return out


OPS = [
    OpInfo("clamp_tensor_bounds_", lambda x, lo, hi: _fresh(x, lo, hi).clamp_(lo, hi), _np_clip, _bounds),
    OpInfo("clamp_min_tensor_", lambda x, lo, hi: _fresh(x, lo).clamp_min_(lo),
           lambda x, lo, hi: np.maximum(x, lo), _bounds),
    OpInfo("lerp_weight_keyword_", lambda x, e, w: _fresh(x, e, w).lerp_(e, weight=w),
           lambda x, e, w: x + w * (e - x),
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3), floats(rng, 2, 3)))]),
    OpInfo("scatter_src_keyword_",
           lambda x, s: _fresh(x, s).scatter_(1, lucid.tensor(_IDX, device=x.device), src=s),
           _np_scatter, lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3)))]),
    OpInfo("addcmul_keywords_", lambda x, a, b: _fresh(x, a, b).addcmul_(tensor1=a, tensor2=b, value=0.5),
           lambda x, a, b: x + 0.5 * a * b,
           lambda rng: [Sample((floats(rng, 2, 3), floats(rng, 2, 3), floats(rng, 3)))]),
    OpInfo("inplace_through_views", _via_view, _np_via_view,
           lambda rng: [Sample((floats(rng, 3, 3), floats(rng, 3))), Sample((floats(rng, 2, 3), floats(rng, 2)))]),
]
